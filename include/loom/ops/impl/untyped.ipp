// Bodies of loom/ops/untyped.hpp.
#include "loom/ops/untyped.hpp"

#include "loom/error.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace ops::untyped {

namespace detail {

inline std::string shape_string(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

inline std::string describe(const ir::Tensor& t) {
  return "'" + t.name() + "' " + shape_string(t.shape());
}

// Fresh spatial axes i0, i1, ... for a result of shape `shape`.
inline std::vector<ir::IterVar> spatial_axes(const Shape& shape, const char* prefix = "i") {
  std::vector<ir::IterVar> axes;
  axes.reserve(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    std::string name = prefix;
    name += std::to_string(d);
    axes.push_back(
        ir::IterVar{ir::Variable::make(std::move(name)), shape[d], ir::IterKind::Spatial});
  }
  return axes;
}

inline std::vector<ir::Expr> vars_of(const std::vector<ir::IterVar>& axes) {
  std::vector<ir::Expr> v;
  v.reserve(axes.size());
  for (const auto& a : axes) v.push_back(a.var);
  return v;
}

inline int64_t product(const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}

}  // namespace detail

LOOM_DECL int normalize_axis(const char* op, int64_t axis, int rank) {
  LOOM_USER_CHECK(axis >= -rank && axis < rank, "loom.ops.E304")
      << op << ": axis " << axis << " is out of range for a tensor of rank " << rank
      << "; use an axis in [" << -rank << ", " << rank << ")";
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

LOOM_DECL Shape broadcast_shape(const char* op, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& o = out[rank - s.size() + d];
      const int64_t e = s[d];
      if (e == o || e == 1) continue;
      if (o == 1) {
        o = e;
        continue;
      }
      std::ostringstream all;
      for (size_t i = 0; i < shapes.size(); ++i)
        all << (i ? " and " : "") << detail::shape_string(shapes[i]);
      LOOM_USER_CHECK(false, "loom.ops.E305")
          << op << ": shapes " << all.str() << " do not broadcast: dimension "
          << (d + rank - s.size()) << " of the result has extents " << o << " and " << e
          << " (numpy's rule: equal, or one of them 1)";
    }
  }
  return out;
}

LOOM_DECL ir::Expr read_broadcast(const ir::Tensor& t, const std::vector<ir::IterVar>& axes) {
  const size_t rank = static_cast<size_t>(t.rank());
  LOOM_INTERNAL_CHECK(rank <= axes.size())
      << "read_broadcast: " << t.name() << " has rank " << rank << " > " << axes.size();
  std::vector<ir::Expr> idx;
  idx.reserve(rank);
  for (size_t d = 0; d < rank; ++d) {
    const ir::IterVar& a = axes[axes.size() - rank + d];
    idx.push_back(t.shape()[d] == 1 && a.extent != 1 ? ir::Expr(int64_t{0}) : a.var);
  }
  return ir::TensorRead::make(t, std::move(idx));
}

LOOM_DECL ir::Tensor map(std::string name, std::string tag, const std::vector<ir::Tensor>& inputs,
                         const std::function<ir::Expr(const std::vector<ir::Expr>&)>& f) {
  std::vector<Shape> shapes;
  for (const auto& t : inputs) shapes.push_back(t.shape());
  const Shape shape = broadcast_shape(tag.c_str(), shapes);
  auto axes = detail::spatial_axes(shape);
  std::vector<ir::Expr> reads;
  reads.reserve(inputs.size());
  for (const auto& t : inputs) reads.push_back(read_broadcast(t, axes));
  return ir::make_compute(std::move(name), std::move(axes), f(reads), std::move(tag));
}

LOOM_DECL ir::Tensor matmul(const ir::Tensor& a_in, const ir::Tensor& b_in, std::string name) {
  LOOM_USER_CHECK(a_in.rank() >= 1 && b_in.rank() >= 1, "loom.ops.E301")
      << "matmul: operands " << detail::describe(a_in) << " and " << detail::describe(b_in)
      << " must have rank 1 or more";
  Shape as = a_in.shape(), bs = b_in.shape();
  const bool vec_a = as.size() == 1, vec_b = bs.size() == 1;
  if (vec_a) as.insert(as.begin(), 1);
  if (vec_b) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  LOOM_USER_CHECK(bs[bs.size() - 2] == k, "loom.ops.E301")
      << "matmul: " << detail::describe(a_in) << " and " << detail::describe(b_in)
      << " disagree on the reduction length K (" << k << " vs " << bs[bs.size() - 2]
      << "); a must be [..., M, K] and b [..., K, N]";
  const Shape batch_a(as.begin(), as.end() - 2), batch_b(bs.begin(), bs.end() - 2);
  Shape batch;
  try {
    batch = broadcast_shape("matmul", {batch_a, batch_b});
  } catch (const user_error&) {
    LOOM_USER_CHECK(false, "loom.ops.E302")
        << "matmul: the batch dimensions of " << detail::describe(a_in) << " and "
        << detail::describe(b_in) << " do not broadcast";
  }
  Shape shape = batch;
  shape.push_back(m);
  shape.push_back(n);
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  const ir::IterVar kv{ir::Variable::make("k"), k, ir::IterKind::Reduce};
  // The operand's batch dimensions align with the result's at the end; extent 1 reads index 0.
  auto read = [&](const ir::Tensor& t, const Shape& batch_t, bool vec, ir::Expr row, ir::Expr col,
                  bool drop_row, bool drop_col) {
    std::vector<ir::Expr> idx;
    for (size_t d = 0; d < batch_t.size(); ++d)
      idx.push_back(batch_t[d] == 1 && batch[batch.size() - batch_t.size() + d] != 1
                        ? ir::Expr(int64_t{0})
                        : vars[batch.size() - batch_t.size() + d]);
    if (!(vec && drop_row)) idx.push_back(std::move(row));
    if (!(vec && drop_col)) idx.push_back(std::move(col));
    return ir::TensorRead::make(t, std::move(idx));
  };
  const size_t r = shape.size();
  ir::Expr lhs = read(a_in, batch_a, vec_a, vars[r - 2], kv.var, true, false);
  ir::Expr rhs = read(b_in, batch_b, vec_b, kv.var, vars[r - 1], false, true);
  ir::Expr body = ir::Reduce::make(ir::ReduceOp::Sum, ir::Mul::make(lhs, rhs), {kv});
  std::string tag = r > 2 ? "batch_matmul" : "matmul";
  ir::Tensor product =
      ir::make_compute(vec_a || vec_b ? name + "_2d" : name, std::move(axes), body, tag);
  if (!vec_a && !vec_b) return product;
  Shape squeezed = batch;
  if (!vec_a) squeezed.push_back(m);
  if (!vec_b) squeezed.push_back(n);
  return reshape(product, squeezed, std::move(name));
}

LOOM_DECL ir::Tensor reshape(const ir::Tensor& x, const Shape& shape, std::string name) {
  const Shape& in = x.shape();
  LOOM_USER_CHECK(detail::product(in) == detail::product(shape), "loom.ops.E317")
      << "reshape: " << detail::describe(x) << " has " << detail::product(in)
      << " elements; the new shape " << detail::shape_string(shape) << " has "
      << detail::product(shape);
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  std::vector<ir::Expr> idx(in.size());
  // Runs [ib, ie) of input dims and [ob, oe) of output dims with equal products: within a run,
  // the output point's offset is unflattened into input indices. Extent-1 dims join any run.
  size_t ib = 0, ob = 0;
  while (ib < in.size() || ob < shape.size()) {
    size_t ie = ib, oe = ob;
    int64_t pi = 1, po = 1;
    if (ie < in.size()) pi *= in[ie++];
    if (oe < shape.size()) po *= shape[oe++];
    while (pi != po) {
      if (pi < po && ie < in.size())
        pi *= in[ie++];
      else if (oe < shape.size())
        po *= shape[oe++];
      else
        break;
    }
    // Take trailing extent-1 dims into this run so that none is left without a run.
    while (ie < in.size() && in[ie] == 1 && !(oe < shape.size() && shape[oe] == 1)) ++ie;
    while (oe < shape.size() && shape[oe] == 1 && !(ie < in.size() && in[ie] == 1)) ++oe;
    ir::Expr offset = int64_t{0};
    bool first = true;
    for (size_t o = ob; o < oe; ++o) {
      if (shape[o] == 1) continue;
      offset = first ? vars[o] : ir::Add::make(ir::Mul::make(offset, ir::Expr(shape[o])), vars[o]);
      first = false;
    }
    int64_t stride = 1;
    for (size_t i = ie; i-- > ib;) {
      if (in[i] == 1) {
        idx[i] = int64_t{0};
        continue;
      }
      ir::Expr e = stride == 1 ? offset : ir::floordiv(offset, ir::Expr(stride));
      // The outermost non-unit input dim of the run needs no modulo: offset < the run's product.
      bool outermost = true;
      for (size_t j = ib; j < i; ++j) outermost = outermost && in[j] == 1;
      idx[i] = outermost ? e : ir::floormod(e, ir::Expr(in[i]));
      stride *= in[i];
    }
    ib = ie;
    ob = oe;
  }
  return ir::make_compute(std::move(name), std::move(axes), ir::TensorRead::make(x, std::move(idx)),
                          "reshape");
}

LOOM_DECL ir::Tensor transpose(const ir::Tensor& x, const std::vector<int>& perm,
                               std::string name) {
  const int rank = x.rank();
  std::vector<int> source_axis(rank, -1);
  bool ok = static_cast<int>(perm.size()) == rank;
  for (size_t d = 0; ok && d < perm.size(); ++d) {
    const int p = perm[d];
    ok = p >= 0 && p < rank && source_axis[p] < 0;
    if (ok) source_axis[p] = static_cast<int>(d);
  }
  LOOM_USER_CHECK(ok, "loom.ops.E313")
      << "transpose: " << detail::shape_string(Shape(perm.begin(), perm.end()))
      << " is not a permutation of the " << rank << " axes of " << detail::describe(x);
  Shape shape(rank);
  for (int d = 0; d < rank; ++d) shape[d] = x.shape()[perm[d]];
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  std::vector<ir::Expr> idx(rank);
  for (int s = 0; s < rank; ++s) idx[s] = vars[source_axis[s]];
  return ir::make_compute(std::move(name), std::move(axes), ir::TensorRead::make(x, std::move(idx)),
                          "transpose");
}

LOOM_DECL ir::Tensor concat(const std::vector<ir::Tensor>& inputs, int axis, std::string name) {
  LOOM_USER_CHECK(!inputs.empty(), "loom.ops.E318") << "concat: no inputs";
  const int rank = inputs[0].rank();
  axis = normalize_axis("concat", axis, rank);
  Shape shape = inputs[0].shape();
  shape[axis] = 0;
  for (const auto& t : inputs) {
    bool ok = t.rank() == rank && t.dtype() == inputs[0].dtype();
    for (int d = 0; ok && d < rank; ++d) ok = d == axis || t.shape()[d] == shape[d];
    LOOM_USER_CHECK(ok, "loom.ops.E318")
        << "concat: " << detail::describe(t) << " (" << ir::to_string(t.dtype())
        << ") does not match " << detail::describe(inputs[0]) << " ("
        << ir::to_string(inputs[0].dtype()) << ") outside axis " << axis;
    shape[axis] += t.shape()[axis];
  }
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  // The last input's read is the default; each earlier one is selected where the axis index
  // lies before its end. Select evaluates only the branch taken, so no read leaves its input.
  std::vector<int64_t> begin(inputs.size());
  int64_t at = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    begin[i] = at;
    at += inputs[i].shape()[axis];
  }
  auto read = [&](size_t i) {
    std::vector<ir::Expr> idx = vars;
    if (begin[i] != 0) idx[axis] = ir::Sub::make(vars[axis], ir::Expr(begin[i]));
    return ir::TensorRead::make(inputs[i], std::move(idx));
  };
  ir::Expr body = read(inputs.size() - 1);
  for (size_t i = inputs.size() - 1; i-- > 0;)
    body = ir::Select::make(ir::LT::make(vars[axis], ir::Expr(begin[i + 1])), read(i), body);
  return ir::make_compute(std::move(name), std::move(axes), body, "concatenate");
}

LOOM_DECL ir::Tensor slice(const ir::Tensor& x, const Shape& start, const Shape& end,
                           const Shape& step, std::string name) {
  const size_t rank = static_cast<size_t>(x.rank());
  LOOM_USER_CHECK(start.size() == rank && end.size() == rank && step.size() == rank,
                  "loom.ops.E319")
      << "slice: " << detail::describe(x) << " needs one start, end and step per dimension";
  Shape shape(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t s = step[d];
    const int64_t n = s > 0   ? (end[d] - start[d] + s - 1) / s
                      : s < 0 ? (start[d] - end[d] - s - 1) / -s
                              : 0;
    const bool in_range = start[d] >= 0 && start[d] < x.shape()[d];
    LOOM_USER_CHECK(s != 0 && n > 0 && in_range, "loom.ops.E319")
        << "slice: dimension " << d << " of " << detail::describe(x) << " from " << start[d]
        << " to " << end[d] << " by " << s << " selects no element";
    shape[d] = n;
  }
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  std::vector<ir::Expr> idx(rank);
  for (size_t d = 0; d < rank; ++d) {
    ir::Expr e = step[d] == 1 ? vars[d] : ir::Mul::make(vars[d], ir::Expr(step[d]));
    idx[d] = start[d] == 0 ? e : ir::Add::make(e, ir::Expr(start[d]));
  }
  return ir::make_compute(std::move(name), std::move(axes), ir::TensorRead::make(x, std::move(idx)),
                          "strided_slice");
}

LOOM_DECL ir::Tensor take(const ir::Tensor& x, int axis, const std::vector<int64_t>& indices,
                          const Shape& index_shape, std::string name) {
  axis = normalize_axis("take", axis, x.rank());
  const int64_t extent = x.shape()[axis];
  std::vector<int64_t> idx_values(indices);
  for (auto& i : idx_values) {
    LOOM_USER_CHECK(i >= -extent && i < extent, "loom.ops.E319")
        << "take: index " << i << " is out of range for axis " << axis << " of "
        << detail::describe(x);
    if (i < 0) i += extent;
  }
  LOOM_USER_CHECK(static_cast<int64_t>(idx_values.size()) == detail::product(index_shape),
                  "loom.ops.E319")
      << "take: " << idx_values.size() << " indices for an index shape "
      << detail::shape_string(index_shape);
  Shape shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), index_shape.begin(), index_shape.end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  // The position within the index tensor, flattened; then a select chain over the constant
  // indices (short in practice: exporters gather one element of a shape, or a few rows).
  ir::Expr flat = int64_t{0};
  for (size_t d = 0; d < index_shape.size(); ++d)
    flat = d == 0 ? vars[axis]
                  : ir::Add::make(ir::Mul::make(flat, ir::Expr(index_shape[d])), vars[axis + d]);
  ir::Expr source = ir::Expr(idx_values.empty() ? int64_t{0} : idx_values.back());
  bool affine = true;  // indices start + position? then no select chain is needed
  for (size_t i = 0; i < idx_values.size(); ++i)
    affine = affine && idx_values[i] == idx_values[0] + static_cast<int64_t>(i);
  if (affine && !idx_values.empty()) {
    source = idx_values.size() == 1 ? ir::Expr(idx_values[0])
                                    : ir::Add::make(flat, ir::Expr(idx_values[0]));
  } else {
    for (size_t i = idx_values.size() - 1; i-- > 0;)
      source = ir::Select::make(ir::EQ::make(flat, ir::Expr(static_cast<int64_t>(i))),
                                ir::Expr(idx_values[i]), source);
  }
  std::vector<ir::Expr> read;
  for (int d = 0; d < axis; ++d) read.push_back(vars[d]);
  read.push_back(source);
  for (int d = axis + 1; d < x.rank(); ++d) read.push_back(vars[d - 1 + index_shape.size()]);
  return ir::make_compute(std::move(name), std::move(axes),
                          ir::TensorRead::make(x, std::move(read)), "take");
}

LOOM_DECL ir::Tensor broadcast_to(const ir::Tensor& x, const Shape& shape, std::string name) {
  const Shape out = broadcast_shape("broadcast_to", {x.shape(), shape});
  LOOM_USER_CHECK(out == shape, "loom.ops.E305")
      << "broadcast_to: " << detail::describe(x) << " does not stretch to "
      << detail::shape_string(shape) << " (the result would be " << detail::shape_string(out)
      << ")";
  auto axes = detail::spatial_axes(shape);
  ir::Expr body = read_broadcast(x, axes);
  return ir::make_compute(std::move(name), std::move(axes), body, "broadcast_to");
}

LOOM_DECL ir::Tensor tile(const ir::Tensor& x, const Shape& repeats, std::string name) {
  LOOM_USER_CHECK(static_cast<int>(repeats.size()) == x.rank(), "loom.ops.E304")
      << "tile: " << repeats.size() << " repeats for " << detail::describe(x)
      << " (one per dimension)";
  Shape shape(repeats.size());
  for (size_t d = 0; d < repeats.size(); ++d) {
    LOOM_USER_CHECK(repeats[d] >= 1, "loom.ops.E304")
        << "tile: repeat " << repeats[d] << " of dimension " << d;
    shape[d] = x.shape()[d] * repeats[d];
  }
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  std::vector<ir::Expr> idx(repeats.size());
  for (size_t d = 0; d < repeats.size(); ++d)
    idx[d] = repeats[d] == 1 ? vars[d] : ir::floormod(vars[d], ir::Expr(x.shape()[d]));
  return ir::make_compute(std::move(name), std::move(axes), ir::TensorRead::make(x, std::move(idx)),
                          "tile");
}

LOOM_DECL ir::Tensor pad(const ir::Tensor& x, const Shape& before, const Shape& after, double value,
                         std::string name) {
  const size_t rank = static_cast<size_t>(x.rank());
  bool ok = before.size() == rank && after.size() == rank;
  for (size_t d = 0; ok && d < rank; ++d) ok = before[d] >= 0 && after[d] >= 0;
  LOOM_USER_CHECK(ok, "loom.ops.E314")
      << "pad: " << detail::describe(x) << " needs one non-negative padding before and after each "
      << "dimension, not " << detail::shape_string(before) << " and "
      << detail::shape_string(after);
  Shape shape(rank);
  for (size_t d = 0; d < rank; ++d) shape[d] = x.shape()[d] + before[d] + after[d];
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  std::vector<ir::Expr> idx(rank);
  ir::Expr inside;
  for (size_t d = 0; d < rank; ++d) {
    idx[d] = before[d] == 0 ? vars[d] : ir::Sub::make(vars[d], ir::Expr(before[d]));
    ir::Expr cond;
    if (before[d] > 0) cond = ir::GE::make(vars[d], ir::Expr(before[d]));
    if (after[d] > 0) {
      ir::Expr hi = ir::LT::make(vars[d], ir::Expr(before[d] + x.shape()[d]));
      cond = cond.defined() ? ir::And::make(cond, hi) : hi;
    }
    if (cond.defined()) inside = inside.defined() ? ir::And::make(inside, cond) : cond;
  }
  ir::Expr body = ir::TensorRead::make(x, std::move(idx));
  if (inside.defined()) body = ir::Select::make(inside, body, ir::make_const(x.dtype(), value));
  return ir::make_compute(std::move(name), std::move(axes), body, "pad");
}

LOOM_DECL ir::Tensor reduce(const ir::Tensor& x, const std::vector<int>& axes_in, bool keep_dims,
                            ir::ReduceOp op, std::string name, std::string tag) {
  const int rank = x.rank();
  std::vector<bool> reduced(rank, false);
  for (int a : axes_in) {
    const int d = normalize_axis(tag.c_str(), a, rank);
    LOOM_USER_CHECK(!reduced[d], "loom.ops.E304") << tag << ": axis " << a << " is listed twice";
    reduced[d] = true;
  }
  Shape shape;
  for (int d = 0; d < rank; ++d)
    if (!reduced[d] || keep_dims) shape.push_back(reduced[d] ? 1 : x.shape()[d]);
  auto axes = detail::spatial_axes(shape);
  const auto vars = detail::vars_of(axes);
  std::vector<ir::IterVar> raxes;
  std::vector<ir::Expr> idx;
  size_t out = 0;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) {
      std::string rname = "r";
      rname += std::to_string(d);
      raxes.push_back(
          ir::IterVar{ir::Variable::make(std::move(rname)), x.shape()[d], ir::IterKind::Reduce});
      idx.push_back(raxes.back().var);
      if (keep_dims) ++out;
    } else {
      idx.push_back(vars[out++]);
    }
  }
  ir::Expr body = ir::TensorRead::make(x, std::move(idx));
  if (!raxes.empty()) body = ir::Reduce::make(op, body, std::move(raxes));
  return ir::make_compute(std::move(name), std::move(axes), body, std::move(tag));
}

LOOM_DECL ir::Tensor reduce_mean(const ir::Tensor& x, const std::vector<int>& axes, bool keep_dims,
                                 std::string name) {
  const ir::Tensor total = reduce(x, axes, keep_dims, ir::ReduceOp::Sum, name + "_sum", "mean_sum");
  const int64_t count = x.num_elements() / std::max<int64_t>(total.num_elements(), 1);
  return map(std::move(name), "mean", {total}, [&](const std::vector<ir::Expr>& v) {
    return ir::Div::make(v[0], ir::make_const(x.dtype(), static_cast<double>(count)));
  });
}

LOOM_DECL ir::Tensor cast(const ir::Tensor& x, ir::DType dtype, std::string name) {
  return map(std::move(name), "cast", {x},
             [&](const std::vector<ir::Expr>& v) { return ir::Cast::make(dtype, v[0]); });
}

}  // namespace ops::untyped
LOOM_END_NAMESPACE
