// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it after importer.ipp): pooling
// and reductions. MaxPool and AveragePool (2-D windows), the global pools and the Reduce*
// operators, which are one reduction over the whole spatial extent or the listed axes.
#include "loom/ops/pool.hpp"

#include <cctype>
#include <limits>

LOOM_BEGIN_NAMESPACE
namespace detail {

inline void Importer::pool(const ::onnx::NodeProto& n) {
  Value x = in(0);
  const bool is_max = n.op_type() == "MaxPool";
  if (is_max && n.output_size() > 1 && !n.output(1).empty())
    LOOM_USER_CHECK(false, "loom.onnx.E1103")
        << what_ << ": " << where()
        << ": the Indices output is requested (loom computes the values only)";
  LOOM_USER_CHECK(x.rank() == 4 && x.t.dtype() == ir::DType::f32(), "loom.onnx.E1103")
      << what_ << ": " << where() << ": " << ir::to_string(x.t.dtype()) << " data "
      << shape_string(x.shape()) << " (loom imports 2-D pooling of float32 NCHW data)";
  if (!attr("kernel_shape")) unsupported_attribute("kernel_shape", "is missing");
  const Shape kernel = window_attr("kernel_shape", 2, 1, 1);
  const Shape stride = window_attr("strides", 2, 1, 1);
  if (attr_ints("dilations", {1, 1}) != Shape{1, 1})
    unsupported_attribute("dilations", "is not [1, 1]");
  if (attr_int("storage_order", 0) != 0) unsupported_attribute("storage_order", "is column-major");
  Shape pads = window_pads({x.shape()[2], x.shape()[3]}, kernel, stride, {1, 1});
  const bool count_include_pad = attr_int("count_include_pad", 0) != 0;
  if (attr_int("ceil_mode", 0) != 0) {
    // Ceil mode adds the windows a partial last window starts; extra padding at the end makes
    // them whole, which is exact for max pooling (the padding is never the maximum).
    if (!is_max) unsupported_attribute("ceil_mode", "is 1 for AveragePool");
    for (int d = 0; d < 2; ++d) {
      const int64_t padded = x.shape()[2 + d] + pads[d] + pads[d + 2];
      const int64_t floor_out = (padded - kernel[d]) / stride[d] + 1;
      int64_t ceil_out = (padded - kernel[d] + stride[d] - 1) / stride[d] + 1;
      if ((ceil_out - 1) * stride[d] >= x.shape()[2 + d] + pads[d])
        --ceil_out;  // a window must start inside
      pads[d + 2] += (ceil_out - floor_out) * stride[d];
    }
  }
  const float lowest = std::numeric_limits<float>::lowest();
  if (pads[0] != pads[2] || pads[1] != pads[3] || pads[0] >= kernel[0] || pads[1] >= kernel[1] ||
      pads[2] >= kernel[0] || pads[3] >= kernel[1]) {
    if (!is_max && !count_include_pad && (pads[0] || pads[1] || pads[2] || pads[3]))
      unsupported_attribute("pads",
                            "is asymmetric " + shape_string(pads) + " with count_include_pad 0");
    x = Value{untyped::pad(x.t, {0, 0, pads[0], pads[1]}, {0, 0, pads[2], pads[3]},
                           is_max ? lowest : 0.0, fresh_name(n.output(0) + "_pad")),
              nullptr};
    pads.assign(4, 0);
  }
  ir::Tensor y = is_max ? ops::max_pool2d(Tensor<float, 4>(x.t), {kernel[0], kernel[1]},
                                          {stride[0], stride[1]}, {pads[0], pads[1]}, out_name())
                        : ops::avg_pool2d(Tensor<float, 4>(x.t), {kernel[0], kernel[1]},
                                          {stride[0], stride[1]}, {pads[0], pads[1]},
                                          count_include_pad, out_name());
  emit(y, {x});
}

inline void Importer::global_pool(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  LOOM_USER_CHECK(x.rank() >= 3, "loom.onnx.E1105")
      << what_ << ": " << where() << ": data of rank " << x.rank();
  std::vector<int> axes;
  for (int d = 2; d < x.rank(); ++d) axes.push_back(d);
  ir::Tensor y =
      n.op_type() == "GlobalAveragePool"
          ? untyped::reduce_mean(x.t, axes, true, out_name())
          : untyped::reduce(x.t, axes, true, ir::ReduceOp::Max, out_name(), "global_max_pool");
  emit(y, {x});
}

inline void Importer::reduce(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const std::string& op = n.op_type();
  Shape axes = attr_ints("axes");
  if (has_input(1)) axes = as_ints(constant_in(1, "axes"));
  const bool keep = attr_int("keepdims", 1) != 0;
  std::vector<int> ax;
  if (axes.empty()) {
    if (attr_int("noop_with_empty_axes", 0) != 0) {
      set_output(0, x);
      return;
    }
    for (int d = 0; d < x.rank(); ++d) ax.push_back(d);
  } else {
    ax = int_axes(axes, x.rank());
  }
  ir::Tensor y;
  if (op == "ReduceMean") {
    y = untyped::reduce_mean(x.t, ax, keep, out_name());
  } else {
    const ir::ReduceOp r = op == "ReduceSum"   ? ir::ReduceOp::Sum
                           : op == "ReduceMax" ? ir::ReduceOp::Max
                           : op == "ReduceMin" ? ir::ReduceOp::Min
                                               : ir::ReduceOp::Prod;
    std::string tag = op.substr(6);
    for (char& ch : tag) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    y = untyped::reduce(x.t, ax, keep, r, out_name(), tag);
  }
  emit(y, {x});
}

}  // namespace detail
LOOM_END_NAMESPACE
