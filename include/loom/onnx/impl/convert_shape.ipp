// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it after importer.ipp): the
// operators that move or select elements without computing new ones. Reshape and its relatives
// (a constant is relabelled, not copied), Transpose, Concat, Slice, Split, Gather, Expand, Pad
// and Tile.
#include <algorithm>

LOOM_BEGIN_NAMESPACE
namespace detail {

inline void Importer::reshape(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const Shape spec = opset_ < 5 ? attr_ints("shape") : as_ints(constant_in(1, "shape"));
  const bool allow_zero = attr_int("allowzero", 0) != 0;
  Shape shape(spec.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < spec.size(); ++d) {
    if (spec[d] == -1) {
      LOOM_USER_CHECK(infer < 0, "loom.onnx.E1105")
          << what_ << ": " << where() << ": the shape " << shape_string(spec) << " has two -1";
      infer = static_cast<int>(d);
      continue;
    }
    shape[d] = spec[d] == 0 && !allow_zero ? (d < x.shape().size() ? x.shape()[d] : 0) : spec[d];
    LOOM_USER_CHECK(shape[d] >= 0, "loom.onnx.E1105")
        << what_ << ": " << where() << ": the shape " << shape_string(spec)
        << " has a negative extent";
    known *= shape[d];
  }
  if (infer >= 0) {
    LOOM_USER_CHECK(known > 0 && x.t.num_elements() % known == 0, "loom.onnx.E1105")
        << what_ << ": " << where() << ": " << shape_string(x.shape()) << " cannot be reshaped to "
        << shape_string(spec);
    shape[infer] = x.t.num_elements() / known;
  }
  set_output(0, reshaped(x, shape, n.output(0)));
}

inline void Importer::flatten(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const int axis = attr_int("axis", 1) == x.rank()
                       ? x.rank()
                       : untyped::normalize_axis("Flatten", attr_int("axis", 1), x.rank());
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  set_output(0, reshaped(x, {outer, outer ? x.t.num_elements() / outer : 0}, n.output(0)));
}

inline void Importer::squeeze(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  Shape axes = opset_ < 13    ? attr_ints("axes")
               : has_input(1) ? as_ints(constant_in(1, "axes"))
                              : Shape{};
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (axes.empty()) {
    for (int d = 0; d < x.rank(); ++d) drop[d] = x.shape()[d] == 1;
  } else {
    for (int d : int_axes(axes, x.rank())) {
      LOOM_USER_CHECK(x.shape()[d] == 1, "loom.onnx.E1105")
          << what_ << ": " << where() << ": axis " << d << " of " << shape_string(x.shape())
          << " is not 1";
      drop[d] = true;
    }
  }
  Shape shape;
  for (int d = 0; d < x.rank(); ++d)
    if (!drop[d]) shape.push_back(x.shape()[d]);
  set_output(0, reshaped(x, shape, n.output(0)));
}

inline void Importer::unsqueeze(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const Shape axes = opset_ < 13 ? attr_ints("axes") : as_ints(constant_in(1, "axes"));
  const int rank = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> added(static_cast<size_t>(rank), false);
  for (int d : int_axes(axes, rank)) {
    LOOM_USER_CHECK(!added[d], "loom.onnx.E1105")
        << what_ << ": " << where() << ": axis " << d << " is listed twice";
    added[d] = true;
  }
  Shape shape;
  size_t from = 0;
  for (int d = 0; d < rank; ++d) shape.push_back(added[d] ? 1 : x.shape()[from++]);
  set_output(0, reshaped(x, shape, n.output(0)));
}

inline void Importer::transpose(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  Shape p = attr_ints("perm");
  if (p.empty())
    for (int d = x.rank() - 1; d >= 0; --d) p.push_back(d);
  emit(untyped::transpose(x.t, std::vector<int>(p.begin(), p.end()), out_name()), {x});
}

inline void Importer::concat(const ::onnx::NodeProto& n) {
  std::vector<Value> xs;
  std::vector<ir::Tensor> ts;
  for (int i = 0; i < n.input_size(); ++i) {
    if (!has_input(i)) continue;
    const Value& v = in(i);
    xs.push_back(v);
    if (v.t.num_elements() > 0) ts.push_back(v.t);  // exporters concatenate empty shape vectors
  }
  LOOM_USER_CHECK(!ts.empty(), "loom.onnx.E1105")
      << what_ << ": " << where() << " has no non-empty inputs";
  const int axis = untyped::normalize_axis("Concat", attr_int("axis", 0), ts[0].rank());
  if (ts.size() == 1) {  // the other inputs were empty
    for (const Value& v : xs)
      if (v.t.same_as(ts[0])) set_output(0, v);
    return;
  }
  emit(untyped::concat(ts, axis, out_name()), xs);
}

inline void Importer::slice(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  Shape starts, ends, axes, steps;
  if (opset_ < 10) {
    starts = attr_ints("starts");
    ends = attr_ints("ends");
    axes = attr_ints("axes");
  } else {
    starts = as_ints(constant_in(1, "starts"));
    ends = as_ints(constant_in(2, "ends"));
    if (has_input(3)) axes = as_ints(constant_in(3, "axes"));
    if (has_input(4)) steps = as_ints(constant_in(4, "steps"));
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  LOOM_USER_CHECK(
      ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(),
      "loom.onnx.E1105")
      << what_ << ": " << where() << ": starts, ends, axes and steps have different lengths";
  const int rank = x.rank();
  Shape b(static_cast<size_t>(rank), 0), e(x.shape()), s(static_cast<size_t>(rank), 1);
  const std::vector<int> ax = int_axes(axes, rank);
  for (size_t i = 0; i < ax.size(); ++i) {
    const int d = ax[i];
    const int64_t dim = x.shape()[d], step = steps[i];
    LOOM_USER_CHECK(step != 0, "loom.onnx.E1105") << what_ << ": " << where() << ": step 0";
    // ONNX's clamping: negative bounds count from the end; a positive step keeps [0, dim], a
    // negative one starts at most at dim - 1 and may end at -1 (before the first element).
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    start = step > 0 ? std::clamp<int64_t>(start, 0, dim) : std::clamp<int64_t>(start, 0, dim - 1);
    end = step > 0 ? std::clamp<int64_t>(end, 0, dim) : std::clamp<int64_t>(end, -1, dim - 1);
    b[d] = start;
    e[d] = end;
    s[d] = step;
  }
  emit(untyped::slice(x.t, b, e, s, out_name()), {x});
}

inline void Importer::split(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const int axis = untyped::normalize_axis("Split", attr_int("axis", 0), x.rank());
  Shape parts = opset_ < 13    ? attr_ints("split")
                : has_input(1) ? as_ints(constant_in(1, "split"))
                               : Shape{};
  const int outputs = n.output_size();
  if (parts.empty()) {
    const int64_t dim = x.shape()[axis];
    const int64_t each = (dim + outputs - 1) / outputs;
    for (int i = 0; i < outputs; ++i) parts.push_back(std::min(each, dim - each * i));
  }
  LOOM_USER_CHECK(static_cast<int>(parts.size()) == outputs, "loom.onnx.E1105")
      << what_ << ": " << where() << ": " << parts.size() << " parts for " << outputs << " outputs";
  int64_t at = 0;
  for (int i = 0; i < outputs; ++i) {
    Shape b(static_cast<size_t>(x.rank()), 0), e(x.shape()), s(static_cast<size_t>(x.rank()), 1);
    b[axis] = at;
    e[axis] = at + parts[i];
    at += parts[i];
    if (n.output(i).empty()) continue;
    emit(untyped::slice(x.t, b, e, s, out_name(i)), {x}, i);
  }
  LOOM_USER_CHECK(at == x.shape()[axis], "loom.onnx.E1105")
      << what_ << ": " << where() << ": the parts " << shape_string(parts) << " do not add up to "
      << x.shape()[axis];
}

inline void Importer::gather(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const Value& idx = constant_in(1, "indices");
  const int axis = untyped::normalize_axis("Gather", attr_int("axis", 0), x.rank());
  emit(untyped::take(x.t, axis, as_ints(idx), idx.shape(), out_name()), {x, idx});
}

inline void Importer::expand(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const Shape target = as_ints(constant_in(1, "shape"));
  const Shape shape = untyped::broadcast_shape("Expand", {x.shape(), target});
  emit(untyped::broadcast_to(x.t, shape, out_name()), {x});
}

inline void Importer::pad(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const std::string mode = attr_string("mode", "constant");
  if (mode != "constant")
    unsupported_attribute("mode", "is '" + mode + "' (loom imports constant padding)");
  Shape pads = opset_ < 11 ? attr_ints("pads") : as_ints(constant_in(1, "pads"));
  double value = opset_ < 11    ? attr_float("value", 0.0f)
                 : has_input(2) ? as_doubles(constant_in(2, "constant_value"))[0]
                                : 0.0;
  const int rank = x.rank();
  Shape axes;
  if (has_input(3)) axes = as_ints(constant_in(3, "axes"));
  if (axes.empty())
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  LOOM_USER_CHECK(pads.size() == 2 * axes.size(), "loom.onnx.E1105")
      << what_ << ": " << where() << ": " << pads.size() << " pads for " << axes.size() << " axes";
  Shape before(static_cast<size_t>(rank), 0), after(static_cast<size_t>(rank), 0);
  const std::vector<int> ax = int_axes(axes, rank);
  bool crop = false;
  for (size_t i = 0; i < ax.size(); ++i) {
    before[ax[i]] = pads[i];
    after[ax[i]] = pads[i + ax.size()];
    crop = crop || pads[i] < 0 || pads[i + ax.size()] < 0;
  }
  if (crop) {
    // Negative pads crop: a slice of the padded tensor.
    Shape pb(before), pa(after), b(static_cast<size_t>(rank), 0), e(static_cast<size_t>(rank)),
        s(static_cast<size_t>(rank), 1);
    for (int d = 0; d < rank; ++d) {
      pb[d] = std::max<int64_t>(before[d], 0);
      pa[d] = std::max<int64_t>(after[d], 0);
      b[d] = -std::min<int64_t>(before[d], 0);
      e[d] = x.shape()[d] + pb[d] + pa[d] + std::min<int64_t>(after[d], 0);
    }
    ir::Tensor padded = untyped::pad(x.t, pb, pa, value, fresh_name(node_->output(0) + "_pad"));
    emit(untyped::slice(padded, b, e, s, out_name()), {x});
    return;
  }
  emit(untyped::pad(x.t, before, after, value, out_name()), {x});
}

inline void Importer::tile(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const Shape repeats = as_ints(constant_in(1, "repeats"));
  LOOM_USER_CHECK(static_cast<int>(repeats.size()) == x.rank(), "loom.onnx.E1105")
      << what_ << ": " << where() << ": " << repeats.size() << " repeats for rank " << x.rank();
  emit(untyped::tile(x.t, repeats, out_name()), {x});
}

}  // namespace detail
LOOM_END_NAMESPACE
