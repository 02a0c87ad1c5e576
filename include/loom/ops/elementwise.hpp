/// \file
/// Element-wise operators of the operator library (layer ops/): `relu`, `bias_add` and the
/// binary arithmetic `add`, `sub`, `mul`, `div` (equal shapes, or a lower-rank operand broadcast
/// along the leading dimensions of the other).
///
/// Every result reads its operands with simple, in-order accesses and contains no expensive call
/// or branch, so the DAG analysis marks these ops strictly inlineable: the search always folds
/// them into their consumer (or producer) instead of giving them loops of their own.
#ifndef LOOM_OPS_ELEMENTWISE_HPP
#define LOOM_OPS_ELEMENTWISE_HPP

#include "loom/ops/common.hpp"

#include <algorithm>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace ops {

/// `max(x, 0)` element by element, for any element type. Tagged "relu".
/// A NaN input gives 0: the DSL's max follows fmax, which prefers the number to the NaN.
template <class T, std::size_t R>
Tensor<T, R> relu(const Tensor<T, R>& x, std::string name = "relu") {
  return compute(std::move(name), x.shape(), [&](auto... v) { return max(x(v...), T(0)); }, "relu");
}

/// `x + bias` with the vector `bias` added along dimension `axis` of `x` (negative counts from
/// the end: -1 is the last axis). TVM's bias_add: axis 1 for NCHW data, -1 for NHWC or dense.
/// Tagged "bias_add". Throws loom::user_error if `axis` is out of range (E304) or `bias` does
/// not have x.shape(axis) elements (E303).
///
///     auto y = ops::bias_add(conv, b);         // conv [N, C, H, W], b [C]
///     auto z = ops::bias_add(fc, b2, -1);      // fc [M, N], b2 [N]
///
/// The axis is a run-time value, unlike the padded dimensions of pad: the bias is read with a
/// single axis variable, whichever axis that is, so the expression's type does not depend on it.
template <class T, std::size_t R>
Tensor<T, R> bias_add(const Tensor<T, R>& x, const Tensor<T, 1>& bias, int axis = 1,
                      std::string name = "bias_add") {
  const int rank = static_cast<int>(R);
  LOOM_USER_CHECK(axis >= -rank && axis < rank, "loom.ops.E304")
      << "bias_add: axis " << axis << " is out of range for " << detail::describe(x)
      << "; use an axis in [" << -rank << ", " << rank - 1 << "]";
  const std::size_t a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
  LOOM_USER_CHECK(bias.shape(0) == x.shape(a), "loom.ops.E303")
      << "bias_add: bias " << detail::describe(bias) << " does not match dimension " << a << " of "
      << detail::describe(x) << "; the bias needs " << x.shape(a) << " elements";
  return compute(
      std::move(name), x.shape(),
      [&](auto... v) {
        const std::array<Var, R> ax{v...};
        return x(v...) + bias(ax[a]);
      },
      "bias_add");
}

namespace detail {

/// `f(a, b)` element by element over the shape of the higher-rank operand; the lower-rank one is
/// indexed by the trailing output axes (numpy's broadcasting, restricted to whole leading
/// dimensions: an operand's extents must equal the output's, never be 1 in their place).
/// Size-1 broadcasting would need a constant index in some dimensions and an axis in others,
/// chosen at run time, while the DSL fixes the index expressions in the type.
template <class F, class T, std::size_t RA, std::size_t RB>
Tensor<T, std::max(RA, RB)> broadcast_binary(const Tensor<T, RA>& a, const Tensor<T, RB>& b,
                                             const F& f, const char* op, std::string name) {
  constexpr std::size_t R = std::max(RA, RB);
  const std::array<int64_t, R> big = [&] {
    if constexpr (RA >= RB)
      return a.shape();
    else
      return b.shape();
  }();
  bool ok = true;
  for (std::size_t d = 0; d < RA; ++d) ok = ok && a.shape(d) == big[R - RA + d];
  for (std::size_t d = 0; d < RB; ++d) ok = ok && b.shape(d) == big[R - RB + d];
  LOOM_USER_CHECK(ok, "loom.ops.E305")
      << op << ": " << describe(a) << " and " << describe(b)
      << " do not match; the shapes must be equal, or the lower-rank operand's shape must equal "
         "the trailing dimensions of the other (size-1 dimensions do not broadcast)";
  return compute(
      std::move(name), big,
      [&](auto... v) {
        const std::array<Var, R> ax{v...};
        auto read = [&]<std::size_t RT>(const Tensor<T, RT>& t) {
          return [&]<std::size_t... D>(std::index_sequence<D...>) {
            return t(ax[R - RT + D]...);
          }(std::make_index_sequence<RT>{});
        };
        return f(read(a), read(b));
      },
      op);
}

}  // namespace detail

/// `a + b` element by element. The operands have equal shapes, or one has lower rank and a
/// shape equal to the trailing dimensions of the other (`add(x[N, C, H, W], y[H, W])`). Tagged
/// "add". Throws loom::user_error (E305) for other shapes.
template <class T, std::size_t RA, std::size_t RB>
Tensor<T, std::max(RA, RB)> add(const Tensor<T, RA>& a, const Tensor<T, RB>& b,
                                std::string name = "add") {
  return detail::broadcast_binary(
      a, b, [](const auto& x, const auto& y) { return x + y; }, "add", std::move(name));
}

/// `a - b` element by element; shapes as for add(). Tagged "sub".
template <class T, std::size_t RA, std::size_t RB>
Tensor<T, std::max(RA, RB)> sub(const Tensor<T, RA>& a, const Tensor<T, RB>& b,
                                std::string name = "sub") {
  return detail::broadcast_binary(
      a, b, [](const auto& x, const auto& y) { return x - y; }, "sub", std::move(name));
}

/// `a * b` element by element; shapes as for add(). Tagged "mul".
template <class T, std::size_t RA, std::size_t RB>
Tensor<T, std::max(RA, RB)> mul(const Tensor<T, RA>& a, const Tensor<T, RB>& b,
                                std::string name = "mul") {
  return detail::broadcast_binary(
      a, b, [](const auto& x, const auto& y) { return x * y; }, "mul", std::move(name));
}

/// `a / b` element by element (integers truncate towards zero); shapes as for add().
/// Tagged "div".
template <class T, std::size_t RA, std::size_t RB>
Tensor<T, std::max(RA, RB)> div(const Tensor<T, RA>& a, const Tensor<T, RB>& b,
                                std::string name = "div") {
  return detail::broadcast_binary(
      a, b, [](const auto& x, const auto& y) { return x / y; }, "div", std::move(name));
}

}  // namespace ops
LOOM_END_NAMESPACE

#endif  // LOOM_OPS_ELEMENTWISE_HPP
