// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it after importer.ipp):
// convolutions. Conv (1-D to 3-D) and ConvTranspose (2-D), each taking in the BatchNormalization
// the driver found after it (Importer::run) and the bias as one per-channel add.
#include "loom/ops/conv.hpp"

#include <algorithm>

LOOM_BEGIN_NAMESPACE
namespace detail {

inline void Importer::conv(const ::onnx::NodeProto& n) {
  Value x = in(0);
  Value w = in(1);
  const int rank = x.rank();
  LOOM_USER_CHECK(rank >= 3 && rank <= 5 && w.rank() == rank, "loom.onnx.E1103")
      << what_ << ": " << where() << ": data " << shape_string(x.shape()) << " and weight "
      << shape_string(w.shape()) << " (loom imports 1-D, 2-D and 3-D convolutions, NC... layout)";
  LOOM_USER_CHECK(x.t.dtype() == ir::DType::f32() && w.t.dtype() == ir::DType::f32(),
                  "loom.onnx.E1104")
      << what_ << ": " << where() << ": convolution of " << ir::to_string(x.t.dtype())
      << " (float32 only)";
  const size_t s = static_cast<size_t>(rank - 2);
  const Shape kernel(w.shape().begin() + 2, w.shape().end());
  if (attr("kernel_shape") && attr_ints("kernel_shape") != kernel)
    unsupported_attribute("kernel_shape", "is " + shape_string(attr_ints("kernel_shape")) +
                                              " but the weight's window is " +
                                              shape_string(kernel));
  const Shape stride = window_attr("strides", s, 1, 1);
  const Shape dilation = window_attr("dilations", s, 1, 1);
  const int64_t groups = attr_int("group", 1);
  Shape pads = window_pads(Shape(x.shape().begin() + 2, x.shape().end()), kernel, stride, dilation);
  // Batch norm folding: w' = w · scale per output channel, b' = b · scale + shift; in double,
  // rounded once.
  const int64_t out_channels = w.shape()[0];
  std::vector<double> bias;
  if (has_input(2)) bias = as_doubles(constant_in(2, "bias"));
  auto bn = bn_after_.find(n.output(0));
  if (bn != bn_after_.end() && w.constant()) {
    const Affine a = batch_norm_affine(*bn->second, out_channels);
    std::vector<double> wv = as_doubles(w);
    const int64_t per = w.t.num_elements() / out_channels;
    if (bias.empty()) bias.assign(static_cast<size_t>(out_channels), 0.0);
    for (int64_t o = 0; o < out_channels; ++o) {
      for (int64_t i = 0; i < per; ++i) wv[o * per + i] *= a.scale[o];
      bias[o] = bias[o] * a.scale[o] + a.shift[o];
    }
    w = constant_f32(node_->input(1) + "_bn", w.shape(), wv);
    folded_bn_.insert(bn->second);
    ++stats_.folded_batch_norms;
  }
  bool symmetric = true;
  for (size_t d = 0; d < s; ++d) symmetric = symmetric && pads[d] == pads[d + s];
  if (!symmetric) {
    Shape before(2, 0), after(2, 0);
    for (size_t d = 0; d < s; ++d) {
      before.push_back(pads[d]);
      after.push_back(pads[d + s]);
    }
    x = Value{untyped::pad(x.t, before, after, 0.0, fresh_name(n.output(0) + "_pad")), nullptr};
    std::fill(pads.begin(), pads.end(), 0);
  }
  const std::string name = bias.empty() ? out_name() : fresh_name(n.output(0) + "_conv");
  ir::Tensor y;
  auto params = [&]<std::size_t S>(ops::ConvParams<S>& p) {
    for (size_t d = 0; d < S; ++d) {
      p.stride[d] = stride[d];
      p.dilation[d] = dilation[d];
      p.padding[d] = pads[d];
    }
    p.groups = groups;
  };
  if (s == 1) {
    ops::ConvParams<1> p;
    params(p);
    y = ops::conv1d_ncw(Tensor<float, 3>(x.t), Tensor<float, 3>(w.t), p, name);
  } else if (s == 2) {
    ops::ConvParams<2> p;
    params(p);
    y = ops::conv2d_nchw(Tensor<float, 4>(x.t), Tensor<float, 4>(w.t), p, name);
  } else {
    ops::ConvParams<3> p;
    params(p);
    y = ops::conv3d_ncdhw(Tensor<float, 5>(x.t), Tensor<float, 5>(w.t), p, name);
  }
  if (!bias.empty()) {
    Shape bs(static_cast<size_t>(rank - 1), 1);
    bs[0] = out_channels;
    Value b = constant_f32(n.output(0) + "_bias", bs, bias);
    y = untyped::map(out_name(), "bias_add", {y, b.t},
                     [](const std::vector<ir::Expr>& v) { return ir::Add::make(v[0], v[1]); });
  }
  emit(y, {x, w});
}

inline void Importer::conv_transpose(const ::onnx::NodeProto& n) {
  Value x = in(0);
  Value w = in(1);
  LOOM_USER_CHECK(x.rank() == 4 && w.rank() == 4, "loom.onnx.E1103")
      << what_ << ": " << where() << ": data " << shape_string(x.shape()) << " and weight "
      << shape_string(w.shape()) << " (loom imports 2-D transposed convolutions, NCHW)";
  LOOM_USER_CHECK(x.t.dtype() == ir::DType::f32(), "loom.onnx.E1104")
      << what_ << ": " << where() << ": " << ir::to_string(x.t.dtype()) << " (float32 only)";
  if (attr_int("group", 1) != 1)
    unsupported_attribute("group",
                          "is " + std::to_string(attr_int("group", 1)) + " (loom imports group 1)");
  if (attr_ints("dilations", {1, 1}) != Shape{1, 1})
    unsupported_attribute("dilations", "is not [1, 1]");
  if (attr("output_shape"))
    unsupported_attribute("output_shape", "is given (give pads and output_padding instead)");
  const std::string auto_pad = attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    unsupported_attribute("auto_pad", "is '" + auto_pad + "'");
  const Shape kernel(w.shape().begin() + 2, w.shape().end());
  if (attr("kernel_shape") && attr_ints("kernel_shape") != kernel)
    unsupported_attribute("kernel_shape", "differs from the weight's window");
  const Shape stride = window_attr("strides", 2, 1, 1);
  const Shape pads = auto_pad == "VALID" ? Shape(4, 0) : window_attr("pads", 4, 0, 0);
  const Shape output_padding = window_attr("output_padding", 2, 0, 0);
  if (pads[0] != pads[2] || pads[1] != pads[3])
    unsupported_attribute("pads", "is asymmetric " + shape_string(pads));
  const int64_t out_channels = w.shape()[1];
  std::vector<double> bias;
  if (has_input(2)) bias = as_doubles(constant_in(2, "bias"));
  auto bn = bn_after_.find(n.output(0));
  if (bn != bn_after_.end() && w.constant()) {  // as in conv(), the weight being [C, O, KH, KW]
    const Affine a = batch_norm_affine(*bn->second, out_channels);
    std::vector<double> wv = as_doubles(w);
    const int64_t in_channels = w.shape()[0], taps = kernel[0] * kernel[1];
    if (bias.empty()) bias.assign(static_cast<size_t>(out_channels), 0.0);
    for (int64_t o = 0; o < out_channels; ++o) {
      for (int64_t c = 0; c < in_channels; ++c)
        for (int64_t i = 0; i < taps; ++i) wv[(c * out_channels + o) * taps + i] *= a.scale[o];
      bias[o] = bias[o] * a.scale[o] + a.shift[o];
    }
    w = constant_f32(node_->input(1) + "_bn", w.shape(), wv);
    folded_bn_.insert(bn->second);
    ++stats_.folded_batch_norms;
  }
  ops::ConvTransposeParams<2> p;
  p.stride = {stride[0], stride[1]};
  p.padding = {pads[0], pads[1]};
  p.output_padding = {output_padding[0], output_padding[1]};
  const std::string name = bias.empty() ? out_name() : fresh_name(n.output(0) + "_conv");
  ir::Tensor y = ops::conv2d_transpose_nchw(Tensor<float, 4>(x.t), Tensor<float, 4>(w.t), p, name);
  if (!bias.empty()) {
    Value b = constant_f32(n.output(0) + "_bias", {out_channels, 1, 1}, bias);
    y = untyped::map(out_name(), "bias_add", {y, b.t},
                     [](const std::vector<ir::Expr>& v) { return ir::Add::make(v[0], v[1]); });
  }
  emit(y, {x, w});
}

}  // namespace detail
LOOM_END_NAMESPACE
