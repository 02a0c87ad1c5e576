// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it after importer.ipp): the
// operators whose result is known when the model is imported. Constant, ConstantOfShape, Range,
// and Shape and Size, which read the static shapes: with them, the shape arithmetic exporters
// emit folds away.
#include <cmath>
#include <cstring>

LOOM_BEGIN_NAMESPACE
namespace detail {

inline void Importer::constant(const ::onnx::NodeProto& n) {
  const auto& a = n.attribute();
  LOOM_USER_CHECK(a.size() == 1, "loom.onnx.E1105")
      << what_ << ": " << where() << " needs exactly one value attribute";
  const auto& v = a.Get(0);
  const std::string& out = n.output(0);
  if (v.name() == "value") {
    set_output(0, from_tensor_proto(v.t(), out));
  } else if (v.name() == "value_float") {
    set_output(0, constant_f32(out, {}, {v.f()}));
  } else if (v.name() == "value_floats") {
    set_output(0, constant_f32(out, {v.floats_size()},
                               std::vector<double>(v.floats().begin(), v.floats().end())));
  } else if (v.name() == "value_int") {
    set_output(0, constant_i64(out, {}, {v.i()}));
  } else if (v.name() == "value_ints") {
    set_output(0, constant_i64(out, {v.ints_size()}, Shape(v.ints().begin(), v.ints().end())));
  } else {
    unsupported_attribute(v.name().c_str(), "(a sparse or string constant) is not imported");
  }
}

inline void Importer::constant_of_shape(const ::onnx::NodeProto& n) {
  const Shape shape = as_ints(constant_in(0, "shape"));
  const int64_t count = checked_count(shape, what_ + ": " + where());
  Value fill = constant_f32(n.output(0) + "_value", {1}, {0.0});
  if (const auto* a = attr("value")) fill = from_tensor_proto(a->t(), n.output(0) + "_value");
  LOOM_USER_CHECK(fill.t.num_elements() == 1, "loom.onnx.E1105")
      << what_ << ": " << where() << ": value must have one element";
  const size_t bytes = static_cast<size_t>(fill.t.dtype().bytes());
  auto data = std::make_shared<std::vector<unsigned char>>(static_cast<size_t>(count) * bytes);
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(data->data() + i * bytes, fill.data->data(), bytes);
  set_output(0, make_constant(n.output(0), fill.t.dtype(), shape, std::move(data)));
}

inline void Importer::shape(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const int rank = x.rank();
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clamp(attr_int("start", 0)), end = clamp(attr_int("end", rank));
  Shape dims;
  for (int64_t d = start; d < end; ++d) dims.push_back(x.shape()[d]);
  set_output(0, constant_i64(node_->output(0), {static_cast<int64_t>(dims.size())}, dims));
}

inline void Importer::size(const ::onnx::NodeProto&) {
  set_output(0, constant_i64(node_->output(0), {}, {in(0).t.num_elements()}));
}

inline void Importer::range(const ::onnx::NodeProto&) {
  const Value& start = constant_in(0, "start");
  const Value& limit = constant_in(1, "limit");
  const Value& delta = constant_in(2, "delta");
  const double s = as_doubles(start)[0], l = as_doubles(limit)[0], d = as_doubles(delta)[0];
  LOOM_USER_CHECK(d != 0, "loom.onnx.E1105") << what_ << ": " << where() << ": delta 0";
  const int64_t count = std::max<int64_t>(static_cast<int64_t>(std::ceil((l - s) / d)), 0);
  if (start.t.dtype().code == ir::DType::Code::Float) {
    std::vector<double> v;
    for (int64_t i = 0; i < count; ++i) v.push_back(s + d * static_cast<double>(i));
    set_output(0, start.t.dtype() == ir::DType::f32()
                      ? constant_f32(node_->output(0), {count}, v)
                      : make_constant(node_->output(0), ir::DType::f64(), {count}, bytes_of(v)));
  } else {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < count; ++i)
      v.push_back(static_cast<int64_t>(s) + static_cast<int64_t>(d) * i);
    if (start.t.dtype() == ir::DType::i64()) {
      set_output(0, constant_i64(node_->output(0), {count}, v));
    } else {
      std::vector<int32_t> w(v.begin(), v.end());
      set_output(0, make_constant(node_->output(0), ir::DType::i32(), {count}, bytes_of(w)));
    }
  }
}

}  // namespace detail
LOOM_END_NAMESPACE
