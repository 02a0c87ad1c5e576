/// \file
/// Shared helpers of the operator library (layer ops/, which sits on top of dsl/): how error
/// messages print shapes and tensors, and the sliding-window arithmetic that convolutions and
/// pooling share.
///
/// Error ids of the operator library (every message starts with one of them):
/// | id   | what went wrong                                                              |
/// |------|------------------------------------------------------------------------------|
/// | E301 | matmul / batch_matmul / dense: the operands' reduction lengths differ         |
/// | E302 | batch_matmul: the operands' batch dimensions differ                          |
/// | E303 | a bias vector does not match the dimension it is added along                 |
/// | E304 | an axis argument is out of range                                             |
/// | E305 | element-wise operands have shapes that neither match nor broadcast           |
/// | E306 | convolution: the weight's input channels do not match the data's channels    |
/// | E307 | convolution: invalid `groups`                                                |
/// | E308 | convolution / pooling: non-positive stride, dilation or kernel, or negative padding |
/// | E309 | convolution / pooling: the window is larger than the padded input            |
/// | E310 | pooling: padding as large as the kernel (a window could see only padding)    |
/// | E311 | normalization: a parameter vector has the wrong length                       |
/// | E312 | normalization: negative or NaN epsilon                                       |
/// | E313 | transpose: the permutation is not a permutation                              |
/// | E314 | pad: negative padding                                                        |
/// | E315 | tbg: query and key disagree on batch, heads or head size                     |
/// | E316 | conv2d_transpose: output_padding not smaller than the stride                 |
/// | E317 | reshape: the new shape has another element count (ops/untyped.hpp)           |
/// | E318 | concat: the inputs' shapes or types disagree outside the axis               |
/// | E319 | slice / take: an empty slice or an index out of range                       |
#ifndef LOOM_OPS_COMMON_HPP
#define LOOM_OPS_COMMON_HPP

#include "loom/dsl/compute.hpp"
#include "loom/error.hpp"

#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

LOOM_BEGIN_NAMESPACE
namespace ops::detail {

/// A shape (or any small integer array) as error messages print it: `[2, 3, 4]`.
template <std::size_t N>
std::string shape_str(const std::array<int64_t, N>& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t d = 0; d < N; ++d) os << (d ? ", " : "") << s[d];
  os << ']';
  return os.str();
}

/// A tensor as error messages name it: `'A' [2, 3]`.
template <class T, std::size_t R>
std::string describe(const Tensor<T, R>& t) {
  return "'" + t.name() + "' " + shape_str(t.shape());
}

/// An array of N equal values; default arguments of window parameters.
template <std::size_t N>
constexpr std::array<int64_t, N> filled(int64_t v) {
  std::array<int64_t, N> a{};
  for (auto& x : a) x = v;
  return a;
}

/// The first `N` entries of `a` (the leading dimensions of a shape).
template <std::size_t N, std::size_t R>
std::array<int64_t, N> leading(const std::array<int64_t, R>& a) {
  static_assert(N <= R);
  std::array<int64_t, N> out{};
  for (std::size_t d = 0; d < N; ++d) out[d] = a[d];
  return out;
}

/// Throws E308 unless every stride and dilation is positive and every padding non-negative.
template <std::size_t N>
void check_window(const char* op, const std::array<int64_t, N>& stride,
                  const std::array<int64_t, N>& padding, const std::array<int64_t, N>& dilation) {
  bool ok = true;
  for (std::size_t d = 0; d < N; ++d)
    ok = ok && stride[d] > 0 && dilation[d] > 0 && padding[d] >= 0;
  LOOM_USER_CHECK(ok, "loom.ops.E308")
      << op << ": stride " << shape_str(stride) << ", padding " << shape_str(padding)
      << " and dilation " << shape_str(dilation)
      << " are invalid; strides and dilations must be positive and paddings non-negative";
}

/// Output extents of a sliding window over `in` (both sides padded by `padding`):
/// floor((in + 2 padding - dilation (kernel - 1) - 1) / stride) + 1 per dimension, as in TVM and
/// PyTorch. Throws E308 for a non-positive kernel and E309 when a window does not fit at all.
template <std::size_t N>
std::array<int64_t, N> window_out_shape(const char* op, const std::array<int64_t, N>& in,
                                        const std::array<int64_t, N>& kernel,
                                        const std::array<int64_t, N>& stride,
                                        const std::array<int64_t, N>& padding,
                                        const std::array<int64_t, N>& dilation) {
  std::array<int64_t, N> out{};
  for (std::size_t d = 0; d < N; ++d) {
    LOOM_USER_CHECK(kernel[d] > 0, "loom.ops.E308")
        << op << ": kernel " << shape_str(kernel) << " is invalid; kernel extents must be positive";
    const int64_t span = dilation[d] * (kernel[d] - 1) + 1;
    const int64_t padded = in[d] + 2 * padding[d];
    LOOM_USER_CHECK(padded >= span, "loom.ops.E309")
        << op << ": the window (kernel " << shape_str(kernel) << ", dilation "
        << shape_str(dilation) << ") does not fit in the input " << shape_str(in) << " padded by "
        << shape_str(padding) << "; use a smaller kernel or dilation, or more padding";
    out[d] = (padded - span) / stride[d] + 1;
  }
  return out;
}

/// Whether any entry is non-zero: convolutions add a pad stage only when they need one, so an
/// unpadded convolution reads its input directly (as TVM does).
template <std::size_t N>
bool any_nonzero(const std::array<int64_t, N>& a) {
  for (int64_t v : a)
    if (v != 0) return true;
  return false;
}

/// The element type of a product of T operands: float16 and bfloat16 operands (storage-only)
/// are converted and summed in float32, so their products are float32; other types keep theirs.
template <class T>
using product_t = std::conditional_t<is_half_v<T>, float, T>;

/// `a * b` in product_t: 16-bit operands are converted to float32 first (mixed precision).
template <class A, class B>
auto widened_product(const A& a, const B& b) {
  if constexpr (is_half_v<value_type_t<A>>)
    return cast<float>(a) * cast<float>(b);
  else
    return a * b;
}

}  // namespace ops::detail
LOOM_END_NAMESPACE

#endif  // LOOM_OPS_COMMON_HPP
