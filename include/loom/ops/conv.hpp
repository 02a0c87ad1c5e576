/// \file
/// Convolutions of the operator library (layer ops/): `conv1d_ncw`, `conv2d_nchw`,
/// `conv2d_nhwc`, `conv3d_ncdhw`, `depthwise_conv2d_nchw` and `conv2d_transpose_nchw`.
///
/// They follow TVM's topi: padding is a separate "pad" compute (an if_then_else that reads the
/// input only inside its bounds) and the convolution proper is one sum over input channels and
/// kernel positions, reading the padded input at `out * stride + r * dilation`. The pad stage
/// exists only when some padding is non-zero; it is named `<name>_pad`.
///
/// Shapes (S spatial dimensions, G groups):
/// - channels first: data [N, C, spatial...], weight [O, C / G, kernel...] -> [N, O, out...]
/// - conv2d_nhwc: data [N, H, W, C], weight [KH, KW, C / G, O] (HWIO) -> [N, OH, OW, O]
/// - out = floor((in + 2 padding - dilation (kernel - 1) - 1) / stride) + 1 per dimension
/// Padding is symmetric: `padding[d]` zeros on both sides of spatial dimension d. There is no
/// asymmetric padding and no ceil mode; pad explicitly with ops::pad for those.
///
/// The reduction runs over the input channels first, then the kernel taps, in TVM's order
/// (rc, ry, rx) for channels-first layouts and (ry, rx, rc) for NHWC: innermost is the axis
/// along which the weight is contiguous in memory. The interpreter sums in exactly this order,
/// so it also fixes the float rounding that tests compare against.
///
/// float16 and bfloat16 data and weights (all but conv2d_transpose_nchw) give a float32 result,
/// as the matrix products do: each product is formed from the operands converted to float32 and
/// summed in float32; the pad stage stays 16-bit (selected in float32 and rounded back, exactly).
#ifndef LOOM_OPS_CONV_HPP
#define LOOM_OPS_CONV_HPP

#include "loom/ops/common.hpp"
#include "loom/ops/transform.hpp"

#include <utility>

LOOM_BEGIN_NAMESPACE
namespace ops {

/// Window parameters of an S-dimensional convolution, meant for designated initializers:
/// `conv2d_nchw(x, w, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2})`.
template <std::size_t S>
struct ConvParams {
  std::array<int64_t, S> stride = detail::filled<S>(1);    ///< step between windows
  std::array<int64_t, S> padding = detail::filled<S>(0);   ///< zeros on each side
  std::array<int64_t, S> dilation = detail::filled<S>(1);  ///< step between kernel taps
  /// Input and output channels split into this many independent groups (1: a dense conv).
  int64_t groups = 1;
};

/// Window parameters of a transposed convolution (the gradient of a strided convolution).
template <std::size_t S>
struct ConvTransposeParams {
  std::array<int64_t, S> stride = detail::filled<S>(1);  ///< stride of the forward convolution
  /// Padding of the forward convolution: crops this much from both sides of the full output.
  std::array<int64_t, S> padding = detail::filled<S>(0);
  /// Extra rows/columns at the end of the output, to pick one of the `stride` input sizes that a
  /// strided forward convolution maps to the same output size. Must be smaller than the stride.
  std::array<int64_t, S> output_padding = detail::filled<S>(0);
};

namespace detail {

/// Checks groups and channel counts for data with C channels and a weight with `weight_c`
/// channels per group and O output channels (E307, E306).
template <class T, std::size_t R>
void check_conv_channels(const char* op, const Tensor<T, R>& x, const Tensor<T, R>& w, int64_t c,
                         int64_t weight_c, int64_t o, int64_t groups) {
  LOOM_USER_CHECK(groups > 0 && c % groups == 0 && o % groups == 0, "loom.ops.E307")
      << op << ": groups = " << groups << " must be positive and divide both the " << c
      << " input channels of " << describe(x) << " and the " << o << " output channels of "
      << describe(w);
  LOOM_USER_CHECK(weight_c * groups == c, "loom.ops.E306")
      << op << ": weight " << describe(w) << " expects " << weight_c
      << " input channels per group, but data " << describe(x) << " has " << c << " channels in "
      << groups << " group(s) (" << c / groups << " per group)";
}

/// The input channel that reduction index `rc` reads for output channel `o`: `rc` itself for a
/// dense convolution, `rc` offset by o's group otherwise.
struct dense_channel {
  const RVar& operator()(const Var&, const RVar& rc) const { return rc; }
};
struct grouped_channel {
  int64_t out_per_group, in_per_group;
  auto operator()(const Var& o, const RVar& rc) const {
    return floordiv(o, out_per_group) * in_per_group + rc;
  }
};

/// The input position that kernel tap `r` of output position `o` reads along spatial dimension
/// D: `o + r` when every stride and dilation is 1, `o * stride + r * dilation` otherwise.
struct unit_window {
  template <std::size_t D>
  auto at(const Var& o, const RVar& r) const {
    return o + r;
  }
};
template <std::size_t S>
struct strided_window {
  std::array<int64_t, S> stride, dilation;
  template <std::size_t D>
  auto at(const Var& o, const RVar& r) const {
    return o * stride[D] + r * dilation[D];
  }
};

/// Calls `build(channel, window)` with the simplest index functors that are exact for `p`.
/// The DSL fixes index expressions in the expression's type, so a multiplication by a stride of
/// 1 cannot be dropped at run time; instantiating the compute once per case instead keeps the
/// IR of the common cases (dense, unit stride) free of `* 1` and of group arithmetic, which
/// later passes would otherwise have to simplify away.
template <std::size_t S, class Build>
auto with_conv_indices(const ConvParams<S>& p, int64_t out_per_group, int64_t in_per_group,
                       const Build& build) {
  bool unit = true;
  for (std::size_t d = 0; d < S; ++d) unit = unit && p.stride[d] == 1 && p.dilation[d] == 1;
  const strided_window<S> strided{p.stride, p.dilation};
  if (p.groups == 1)
    return unit ? build(dense_channel{}, unit_window{}) : build(dense_channel{}, strided);
  const grouped_channel grouped{out_per_group, in_per_group};
  return unit ? build(grouped, unit_window{}) : build(grouped, strided);
}

/// Reduction axes for S spatial kernel dimensions, named like TVM's (rz, ry, rx).
template <std::size_t S>
std::array<RVar, S> kernel_axes(const std::array<int64_t, S>& kernel) {
  static_assert(S >= 1 && S <= 3);
  static const char* names[] = {"rz", "ry", "rx"};
  return [&]<std::size_t... D>(std::index_sequence<D...>) {
    return std::array<RVar, S>{RVar(kernel[D], names[3 - S + D])...};
  }(std::make_index_sequence<S>{});
}

/// A channels-first convolution with S spatial dimensions: data [N, C, spatial...], weight
/// [O, C / groups, kernel...], result [N, O, out...]. Shared by conv1d/2d/3d.
template <std::size_t S, class T>
Tensor<product_t<T>, S + 2> conv_channels_first(const Tensor<T, S + 2>& x,
                                                const Tensor<T, S + 2>& w, const ConvParams<S>& p,
                                                const char* op, std::string name) {
  constexpr std::size_t R = S + 2;
  const auto xs = x.shape();
  const auto ws = w.shape();
  check_window(op, p.stride, p.padding, p.dilation);
  check_conv_channels(op, x, w, xs[1], ws[1], ws[0], p.groups);
  std::array<int64_t, S> in{}, kernel{};
  for (std::size_t d = 0; d < S; ++d) {
    in[d] = xs[2 + d];
    kernel[d] = ws[2 + d];
  }
  const auto out = window_out_shape(op, in, kernel, p.stride, p.padding, p.dilation);
  std::array<int64_t, R> shape{xs[0], ws[0]};
  std::array<int64_t, R> pad{};
  for (std::size_t d = 0; d < S; ++d) {
    shape[2 + d] = out[d];
    pad[2 + d] = p.padding[d];
  }
  // The tensor the windows read: x itself, or its padded copy. Only the spatial dimensions
  // (2 .. S+1) are padded, so only they get bounds tests.
  Tensor<T, R> xp = x;
  if (any_nonzero(p.padding))
    xp = [&]<std::size_t... D>(std::index_sequence<D...>) {
      return pad_dims<(D + 2)...>(x, pad, pad, T(0), name + "_pad");
    }(std::make_index_sequence<S>{});

  const RVar rc = reduce_axis(ws[1], "rc");
  const std::array<RVar, S> r = kernel_axes<S>(kernel);
  // y[n, o, out...] = sum over rc, r... of xp[n, channel(o, rc), window(out, r)...] *
  // w[o, rc, r...]; the pack expansions over D spell out the S spatial dimensions.
  auto build = [&](const auto& in_channel, const auto& window) {
    return compute(
        std::move(name), shape,
        [&](auto... v) {
          const std::array<Var, R> ax{v...};
          return [&]<std::size_t... D>(std::index_sequence<D...>) {
            return sum(widened_product(xp(ax[0], in_channel(ax[1], rc),
                                          window.template at<D>(ax[2 + D], r[D])...),
                                       w(ax[1], rc, r[D]...)),
                       {rc, r[D]...});
          }(std::make_index_sequence<S>{});
        },
        op);
  };
  return with_conv_indices(p, ws[0] / p.groups, ws[1], build);
}

}  // namespace detail

/// 1-D convolution, data [N, C, W] and weight [O, C / groups, KW] -> [N, O, OW].
/// Tagged "conv1d_ncw" (its pad stage "pad"). Throws loom::user_error for inconsistent channels
/// (E306), groups (E307), window parameters (E308) or a window larger than the padded input
/// (E309).
template <class T>
Tensor<detail::product_t<T>, 3> conv1d_ncw(const Tensor<T, 3>& x, const Tensor<T, 3>& w,
                                           const ConvParams<1>& p = {},
                                           std::string name = "conv1d_ncw") {
  return detail::conv_channels_first<1>(x, w, p, "conv1d_ncw", std::move(name));
}

/// 2-D convolution, data [N, C, H, W] and weight [O, C / groups, KH, KW] (OIHW) ->
/// [N, O, OH, OW]. Tagged "conv2d_nchw" (its pad stage "pad"). Errors as conv1d_ncw.
///
///     auto y = ops::conv2d_nchw(x, w, {.stride = {2, 2}, .padding = {1, 1}});
///
/// With groups G, output channel o reads input channels [g * C / G, (g + 1) * C / G) of its
/// group g = o / (O / G); G = C with a [C * M, 1, KH, KW] weight is a depthwise convolution.
template <class T>
Tensor<detail::product_t<T>, 4> conv2d_nchw(const Tensor<T, 4>& x, const Tensor<T, 4>& w,
                                            const ConvParams<2>& p = {},
                                            std::string name = "conv2d_nchw") {
  return detail::conv_channels_first<2>(x, w, p, "conv2d_nchw", std::move(name));
}

/// 3-D convolution, data [N, C, D, H, W] and weight [O, C / groups, KD, KH, KW] ->
/// [N, O, OD, OH, OW]. Tagged "conv3d_ncdhw" (its pad stage "pad"). Errors as conv1d_ncw.
/// The kernel axes are named rz, ry, rx (depth, height, width).
template <class T>
Tensor<detail::product_t<T>, 5> conv3d_ncdhw(const Tensor<T, 5>& x, const Tensor<T, 5>& w,
                                             const ConvParams<3>& p = {},
                                             std::string name = "conv3d_ncdhw") {
  return detail::conv_channels_first<3>(x, w, p, "conv3d_ncdhw", std::move(name));
}

/// 2-D convolution in channels-last layout, data [N, H, W, C] and weight [KH, KW, C / groups, O]
/// (HWIO) -> [N, OH, OW, O]; output channel o belongs to group o / (O / groups). The reduction
/// runs over (ry, rx, rc), channels innermost, matching the layout. Tagged "conv2d_nhwc" (its
/// pad stage "pad"). Errors as conv1d_ncw.
template <class T>
Tensor<detail::product_t<T>, 4> conv2d_nhwc(const Tensor<T, 4>& x, const Tensor<T, 4>& w,
                                            const ConvParams<2>& p = {},
                                            std::string name = "conv2d_nhwc") {
  const char* op = "conv2d_nhwc";
  const auto xs = x.shape();
  const auto ws = w.shape();
  detail::check_window(op, p.stride, p.padding, p.dilation);
  detail::check_conv_channels(op, x, w, xs[3], ws[2], ws[3], p.groups);
  const auto out = detail::window_out_shape<2>(op, {xs[1], xs[2]}, {ws[0], ws[1]}, p.stride,
                                               p.padding, p.dilation);
  Tensor<T, 4> xp = x;
  if (detail::any_nonzero(p.padding)) {
    const std::array<int64_t, 4> pad{0, p.padding[0], p.padding[1], 0};
    xp = detail::pad_dims<1, 2>(x, pad, pad, T(0), name + "_pad");
  }
  const RVar ry = reduce_axis(ws[0], "ry");
  const RVar rx = reduce_axis(ws[1], "rx");
  const RVar rc = reduce_axis(ws[2], "rc");
  auto build = [&](const auto& in_channel, const auto& window) {
    return compute(
        std::move(name), {xs[0], out[0], out[1], ws[3]},
        [&](Var n, Var h, Var x_, Var o) {
          return sum(detail::widened_product(xp(n, window.template at<0>(h, ry),
                                                window.template at<1>(x_, rx), in_channel(o, rc)),
                                             w(ry, rx, rc, o)),
                     {ry, rx, rc});
        },
        op);
  };
  return detail::with_conv_indices(p, ws[3] / p.groups, ws[2], build);
}

/// Depthwise 2-D convolution: every input channel is convolved with its own `M` filters (the
/// channel multiplier). Data [N, C, H, W], weight [C, M, KH, KW] -> [N, C * M, OH, OW]; output
/// channel c reads input channel c / M with filter (c / M, c % M), as in TVM. `p.groups` must stay
/// 1: the grouping is implied. Tagged "depthwise_conv2d_nchw" (its pad stage "pad"). Throws
/// loom::user_error if the weight's first dimension is not C (E306), groups is set (E307), or
/// the window is invalid (E308, E309).
template <class T>
Tensor<detail::product_t<T>, 4> depthwise_conv2d_nchw(const Tensor<T, 4>& x, const Tensor<T, 4>& w,
                                                      const ConvParams<2>& p = {},
                                                      std::string name = "depthwise_conv2d_nchw") {
  const char* op = "depthwise_conv2d_nchw";
  const auto xs = x.shape();
  const auto ws = w.shape();
  LOOM_USER_CHECK(p.groups == 1, "loom.ops.E307")
      << op << ": groups = " << p.groups
      << " was given, but a depthwise convolution already puts every channel in its own group; "
         "leave groups at 1 (or use conv2d_nchw with groups)";
  LOOM_USER_CHECK(ws[0] == xs[1], "loom.ops.E306")
      << op << ": weight " << detail::describe(w)
      << " must be [C, multiplier, KH, KW] with C = " << xs[1] << ", the channels of data "
      << detail::describe(x);
  detail::check_window(op, p.stride, p.padding, p.dilation);
  const auto out = detail::window_out_shape<2>(op, {xs[2], xs[3]}, {ws[2], ws[3]}, p.stride,
                                               p.padding, p.dilation);
  Tensor<T, 4> xp = x;
  if (detail::any_nonzero(p.padding)) {
    const std::array<int64_t, 4> pad{0, 0, p.padding[0], p.padding[1]};
    xp = detail::pad_dims<2, 3>(x, pad, pad, T(0), name + "_pad");
  }
  const int64_t mult = ws[1];  // the channel multiplier M
  const RVar ry = reduce_axis(ws[2], "ry");
  const RVar rx = reduce_axis(ws[3], "rx");
  const std::array<int64_t, 4> shape{xs[0], xs[1] * mult, out[0], out[1]};
  // Multiplier 1 (the common case) reads channel c itself: no division in the IR.
  auto build = [&](const auto&, const auto& window) {
    return mult == 1
               ? compute(
                     std::move(name), shape,
                     [&](Var n, Var c, Var h, Var x_) {
                       return sum(detail::widened_product(xp(n, c, window.template at<0>(h, ry),
                                                             window.template at<1>(x_, rx)),
                                                          w(c, 0, ry, rx)),
                                  {ry, rx});
                     },
                     op)
               : compute(
                     std::move(name), shape,
                     [&](Var n, Var c, Var h, Var x_) {
                       return sum(detail::widened_product(
                                      xp(n, floordiv(c, mult), window.template at<0>(h, ry),
                                         window.template at<1>(x_, rx)),
                                      w(floordiv(c, mult), floormod(c, mult), ry, rx)),
                                  {ry, rx});
                     },
                     op);
  };
  return detail::with_conv_indices(p, 1, 1, build);
}

/// Transposed 2-D convolution (the gradient of conv2d_nchw with respect to its data): data
/// [N, C, H, W] and weight [C, O, KH, KW] (IOHW, as in TVM and PyTorch) -> [N, O, OH, OW] with
/// OH = (H - 1) stride - 2 padding + KH + output_padding, out[y] = Σ x[h] w[ky] over
/// y = h stride - padding + ky.
///
/// Without a stride, and when the output is at most twice the data's size, it is TVM's form:
/// the data padded by KH - 1 - padding in front (plus output_padding behind; one compute
/// `<name>_pad`, tagged "pad"), then a convolution with the spatially flipped kernel. Otherwise
/// that form multiplies mostly zeros: with a stride it convolves the data dilated by stride - 1
/// zeros (all but one in stride² products read a zero), and on small data (DCGAN's 1x1 -> 4x4)
/// mostly padding. There it is a product and a gather instead, as im2col-based libraries
/// compute it (col2im):
///  - `<name>_cols` [N, O, KH, KW, H, W] = Σ_c x[n, c, h, w] w[c, o, ky, kx], tagged
///    "conv2d_transpose_cols": a matrix product [O·KH·KW, C] x [C, H·W] per image, every
///    multiplication useful, which the tiling rules schedule like any GEMM;
///  - `<name>` sums, for each output, the ⌈KH / stride⌉·⌈KW / stride⌉ columns that reach it:
///    for t = y + padding, taps ky = t mod stride + stride·j from rows h = ⌊t / stride⌋ − j
///    (those outside the kernel or the data read nothing). Tagged "conv2d_transpose_nchw".
/// Throws loom::user_error if the weight's first dimension is not C (E306), for an invalid
/// stride or padding (E308), output_padding >= stride (E316), or an empty output (E309).
template <class T>
Tensor<T, 4> conv2d_transpose_nchw(const Tensor<T, 4>& x, const Tensor<T, 4>& w,
                                   const ConvTransposeParams<2>& p = {},
                                   std::string name = "conv2d_transpose_nchw") {
  const char* op = "conv2d_transpose_nchw";
  const auto xs = x.shape();
  const auto ws = w.shape();
  LOOM_USER_CHECK(ws[0] == xs[1], "loom.ops.E306")
      << op << ": weight " << detail::describe(w) << " must be [C, O, KH, KW] with C = " << xs[1]
      << ", the channels of data " << detail::describe(x);
  detail::check_window(op, p.stride, p.padding, detail::filled<2>(1));
  bool ok = true;
  for (int d = 0; d < 2; ++d)
    ok = ok && p.output_padding[d] >= 0 && p.output_padding[d] < p.stride[d];
  LOOM_USER_CHECK(ok, "loom.ops.E316")
      << op << ": output_padding " << detail::shape_str(p.output_padding)
      << " must be non-negative and smaller than the stride " << detail::shape_str(p.stride);
  std::array<int64_t, 2> out{};
  for (int d = 0; d < 2; ++d)
    out[d] = (xs[2 + d] - 1) * p.stride[d] - 2 * p.padding[d] + ws[2 + d] + p.output_padding[d];
  LOOM_USER_CHECK(out[0] > 0 && out[1] > 0, "loom.ops.E309")
      << op << ": padding " << detail::shape_str(p.padding) << " crops the whole output of "
      << detail::describe(x) << " (output would be " << detail::shape_str(out)
      << "); use less padding";
  const int64_t sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1];
  const int64_t kh = ws[2], kw = ws[3];
  const RVar rc = reduce_axis(ws[0], "rc");
  // TVM's form multiplies OH·OW / (H·W) times more than there is work; on large data without a
  // stride that is about 1 and it needs no scratch, so it stays where that holds.
  if (sh == 1 && sw == 1 && out[0] * out[1] <= 2 * xs[2] * xs[3]) {
    // The stride-1 convolution reads out + kernel - 1 positions per dimension, the data placed
    // KH - 1 - padding in (a crop where that is negative; pad_dims's bounds test covers both).
    const int64_t fh = kh - 1 - ph, fw = kw - 1 - pw;
    const std::array<int64_t, 4> before{0, 0, fh, fw};
    const std::array<int64_t, 4> after{0, 0, out[0] + kh - 1 - xs[2] - fh,
                                       out[1] + kw - 1 - xs[3] - fw};
    const Tensor<T, 4> xd = detail::pad_dims<2, 3>(x, before, after, T(0), name + "_pad");
    const RVar ry = reduce_axis(kh, "ry");
    const RVar rx = reduce_axis(kw, "rx");
    return compute(
        std::move(name), {xs[0], ws[1], out[0], out[1]},
        [&](Var n, Var o, Var h, Var x_) {
          return sum(xd(n, rc, h + ry, x_ + rx) * w(rc, o, kh - 1 - ry, kw - 1 - rx), {rc, ry, rx});
        },
        op);
  }
  const Tensor<T, 6> cols = compute(
      name + "_cols", {xs[0], ws[1], kh, kw, xs[2], xs[3]},
      [&](Var n, Var o, Var ky, Var kx, Var h, Var x_) {
        return sum(x(n, rc, h, x_) * w(rc, o, ky, kx), rc);
      },
      "conv2d_transpose_cols");
  const int64_t jh = (kh + sh - 1) / sh, jw = (kw + sw - 1) / sw;
  const RVar rj = reduce_axis(jh, "rj");
  const RVar ri = reduce_axis(jw, "ri");
  const int64_t in_h = xs[2], in_w = xs[3];
  return compute(
      std::move(name), {xs[0], ws[1], out[0], out[1]},
      [&](Var n, Var o, Var y, Var x_) {
        auto ky = floormod(y + ph, sh) + rj * sh;
        auto kx = floormod(x_ + pw, sw) + ri * sw;
        auto h = floordiv(y + ph, sh) - rj;
        auto c = floordiv(x_ + pw, sw) - ri;
        auto inside = ky < kh && kx < kw && h >= 0 && h < in_h && c >= 0 && c < in_w;
        return sum(if_then_else(inside, cols(n, o, ky, kx, h, c), T(0)), {rj, ri});
      },
      op);
}

}  // namespace ops
LOOM_END_NAMESPACE

#endif  // LOOM_OPS_CONV_HPP
