/// \file
/// 2-D pooling of the operator library (layer ops/): `max_pool2d` and `avg_pool2d` over NCHW
/// data, with TVM's window arithmetic (see conv.hpp) and a separate "pad" stage when padded.
#ifndef LOOM_OPS_POOL_HPP
#define LOOM_OPS_POOL_HPP

#include "loom/ops/common.hpp"
#include "loom/ops/transform.hpp"

#include <limits>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace ops {

namespace detail {

/// Validates pooling parameters (E308, E309, E310) and returns the output extents [OH, OW].
template <class T>
std::array<int64_t, 2> pool_out_shape(const char* op, const Tensor<T, 4>& x,
                                      const std::array<int64_t, 2>& kernel,
                                      const std::array<int64_t, 2>& stride,
                                      const std::array<int64_t, 2>& padding) {
  check_window(op, stride, padding, filled<2>(1));
  const auto out =
      window_out_shape<2>(op, {x.shape(2), x.shape(3)}, kernel, stride, padding, filled<2>(1));
  // A window made only of padding would make max pooling return the pad value and the
  // count-excluding average divide by zero; PyTorch rejects it for the same reason.
  LOOM_USER_CHECK(padding[0] < kernel[0] && padding[1] < kernel[1], "loom.ops.E310")
      << op << ": padding " << shape_str(padding) << " must be smaller than the kernel "
      << shape_str(kernel) << " on " << describe(x);
  return out;
}

/// `x` padded on H and W with `value`, or `x` itself when there is no padding.
template <class T>
Tensor<T, 4> pool_input(const Tensor<T, 4>& x, const std::array<int64_t, 2>& padding, T value,
                        const std::string& name) {
  if (!any_nonzero(padding)) return x;
  const std::array<int64_t, 4> pad{0, 0, padding[0], padding[1]};
  return pad_dims<2, 3>(x, pad, pad, value, name + "_pad");
}

}  // namespace detail

/// Max pooling over NCHW data: [N, C, H, W] -> [N, C, OH, OW], each output the maximum of a
/// `kernel` window moved by `stride`, on the input padded by `padding` on both sides with the
/// lowest value of T (so padding never wins). Tagged "max_pool2d" (its pad stage "pad").
/// Throws loom::user_error for a non-positive kernel or stride or negative padding (E308), a
/// kernel larger than the padded input (E309) or padding not smaller than the kernel (E310).
///
///     auto y = ops::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});  // ResNet's stem pool
///
/// The output extent rounds down (no ceil mode): trailing input rows that do not fill a whole
/// window are dropped, as in TVM's and PyTorch's defaults.
template <class T>
Tensor<T, 4> max_pool2d(const Tensor<T, 4>& x, const std::array<int64_t, 2>& kernel,
                        const std::array<int64_t, 2>& stride,
                        const std::array<int64_t, 2>& padding = {0, 0},
                        std::string name = "max_pool2d") {
  const auto out = detail::pool_out_shape("max_pool2d", x, kernel, stride, padding);
  const auto xp = detail::pool_input(x, padding, std::numeric_limits<T>::lowest(), name);
  const RVar rh = reduce_axis(kernel[0], "rh");
  const RVar rw = reduce_axis(kernel[1], "rw");
  const int64_t sh = stride[0], sw = stride[1];
  return compute(
      std::move(name), {x.shape(0), x.shape(1), out[0], out[1]},
      [&](Var n, Var c, Var h, Var w) { return max(xp(n, c, h * sh + rh, w * sw + rw), {rh, rw}); },
      "max_pool2d");
}

/// Average pooling over NCHW data, windows as in max_pool2d with zero padding. With
/// `count_include_pad` (the default, as in TVM and PyTorch) every window is divided by
/// KH * KW; without it, by the number of its elements that lie inside the unpadded input.
/// Two computes: the window sums `<name>_sum` (tagged "avg_pool2d_sum", a reduction) and the
/// division `<name>` (tagged "avg_pool2d"). On integer tensors the division truncates.
/// Errors as max_pool2d.
///
/// The window sum is its own compute because a reduction must be the whole body of a compute;
/// the division then fuses into it as an element-wise consumer. Summing and dividing once
/// (rather than summing x / (KH * KW)) keeps the rounding of the usual definition.
template <class T>
Tensor<T, 4> avg_pool2d(const Tensor<T, 4>& x, const std::array<int64_t, 2>& kernel,
                        const std::array<int64_t, 2>& stride,
                        const std::array<int64_t, 2>& padding = {0, 0},
                        bool count_include_pad = true, std::string name = "avg_pool2d") {
  const auto out = detail::pool_out_shape("avg_pool2d", x, kernel, stride, padding);
  const auto xp = detail::pool_input(x, padding, T(0), name);
  const RVar rh = reduce_axis(kernel[0], "rh");
  const RVar rw = reduce_axis(kernel[1], "rw");
  const int64_t sh = stride[0], sw = stride[1], ph = padding[0], pw = padding[1];
  const int64_t kh = kernel[0], kw = kernel[1], in_h = x.shape(2), in_w = x.shape(3);
  const std::array<int64_t, 4> shape{x.shape(0), x.shape(1), out[0], out[1]};
  const auto window_sum = compute(
      name + "_sum", shape,
      [&](Var n, Var c, Var h, Var w) { return sum(xp(n, c, h * sh + rh, w * sw + rw), {rh, rw}); },
      "avg_pool2d_sum");
  // Without padding every window lies inside the input, so both conventions divide by KH * KW.
  if (count_include_pad || !detail::any_nonzero(padding))
    return compute(
        std::move(name), shape,
        [&](Var n, Var c, Var h, Var w) { return window_sum(n, c, h, w) / T(kh * kw); },
        "avg_pool2d");
  return compute(
      std::move(name), shape,
      [&](Var n, Var c, Var h, Var w) {
        // The window covers padded rows [h sh, h sh + kh), i.e. input rows
        // [h sh - ph, h sh - ph + kh) clipped to [0, in_h); columns likewise.
        auto rows = min(h * sh + (kh - ph), in_h) - max(h * sh - ph, 0);
        auto cols = min(w * sw + (kw - pw), in_w) - max(w * sw - pw, 0);
        return window_sum(n, c, h, w) / cast<T>(rows * cols);
      },
      "avg_pool2d");
}

}  // namespace ops
LOOM_END_NAMESPACE

#endif  // LOOM_OPS_POOL_HPP
