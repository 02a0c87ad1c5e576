/// \file
/// Layout transforms of the operator library (layer ops/): `pad` and `transpose`. Convolutions and
/// pooling build their pad stage with the same helper as the public `pad`.
#ifndef LOOM_OPS_TRANSFORM_HPP
#define LOOM_OPS_TRANSFORM_HPP

#include "loom/ops/common.hpp"

#include <type_traits>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace ops {

namespace detail {

/// Index into the unpadded tensor along dimension D: shifted back by the front padding when D is
/// one of the padded dimensions, the output axis itself otherwise.
template <std::size_t D, std::size_t... Padded>
auto unpadded_index(const Var& v, int64_t before) {
  if constexpr (((D == Padded) || ...))
    return v - before;
  else
    return v;
}

/// `x` padded with `value` along the dimensions `Padded...` only (before[d] elements in front of
/// dimension d, after[d] behind it; entries of other dimensions are ignored).
///
/// The padded dimensions are a compile-time list because each one adds a bounds test to the
/// select condition, and that condition's shape is part of the expression's type. Listing only
/// the spatial dimensions keeps a convolution's pad stage free of tests on N and C that can
/// never fail. The result is tagged "pad"; it contains a branch, so the DAG never treats it as
/// strictly inlineable (reading it costs a test per element, unlike a plain copy).
template <std::size_t... Padded, class T, std::size_t R>
Tensor<T, R> pad_dims(const Tensor<T, R>& x, const std::array<int64_t, R>& before,
                      const std::array<int64_t, R>& after, T value, std::string name) {
  static_assert(sizeof...(Padded) > 0 && ((Padded < R) && ...));
  const std::array<int64_t, R> in = x.shape();
  std::array<int64_t, R> shape = in;
  for (std::size_t d = 0; d < R; ++d) shape[d] += before[d] + after[d];
  return compute(
      std::move(name), shape,
      [&](auto... v) {
        const std::array<Var, R> ax{v...};
        auto inside =
            ((ax[Padded] >= before[Padded] && ax[Padded] < before[Padded] + in[Padded]) && ...);
        return [&]<std::size_t... D>(std::index_sequence<D...>) {
          // if_then_else is lazy: the read of `x` below is out of bounds whenever `inside` is
          // false, and it is never evaluated then.
          auto read = x(unpadded_index<D, Padded...>(ax[D], before[D])...);
          // 16-bit floats are storage-only (no select on them): select in float32, round back
          // (exact: the value was a 16-bit one).
          if constexpr (is_half_v<T>)
            return cast<T>(if_then_else(inside, cast<float>(read), static_cast<float>(value)));
          else
            return if_then_else(inside, read, value);
        }(std::make_index_sequence<R>{});
      },
      "pad");
}

}  // namespace detail

/// `x` padded with `value` (default 0): `before[d]` elements in front of dimension d and
/// `after[d]` behind it, so the result has extent `before[d] + x.shape(d) + after[d]`.
/// Tagged "pad". Throws loom::user_error (E314) for negative padding.
///
///     auto y = ops::pad(x, {0, 0, 1, 1}, {0, 0, 1, 1});  // one zero row/column around H, W
///
/// `value` does not take part in deducing T, so an int literal pads a float tensor.
/// Every dimension gets a bounds test, even an unpadded one: this generic pad cannot know the
/// paddings at compile time. Convolutions and pooling use detail::pad_dims to test only H, W.
template <class T, std::size_t R>
Tensor<T, R> pad(const Tensor<T, R>& x, const std::array<int64_t, R>& before,
                 const std::array<int64_t, R>& after, std::type_identity_t<T> value = T(0),
                 std::string name = "pad") {
  static_assert(R > 0, "pad needs a tensor of rank 1 or more");
  bool ok = true;
  for (std::size_t d = 0; d < R; ++d) ok = ok && before[d] >= 0 && after[d] >= 0;
  LOOM_USER_CHECK(ok, "loom.ops.E314")
      << "pad: padding " << detail::shape_str(before) << " before and " << detail::shape_str(after)
      << " after " << detail::describe(x)
      << " is invalid; paddings must be non-negative (crop with a compute instead)";
  return [&]<std::size_t... D>(std::index_sequence<D...>) {
    return detail::pad_dims<D...>(x, before, after, static_cast<T>(value), std::move(name));
  }(std::make_index_sequence<R>{});
}

/// The axes of `x` permuted: dimension d of the result is dimension `perm[d]` of `x`
/// (`transpose(x, {0, 2, 1, 3})` swaps the middle axes, as numpy.transpose). Tagged "transpose".
/// Throws loom::user_error (E313) if `perm` is not a permutation of 0 .. R-1.
template <class T, std::size_t R>
Tensor<T, R> transpose(const Tensor<T, R>& x, const std::array<int, R>& perm,
                       std::string name = "transpose") {
  // The read x(...) needs, for each input dimension s, the output axis that indexes it: the
  // inverse permutation. Building it also detects repeated and out-of-range entries.
  std::array<int, R> source_axis{};
  std::array<bool, R> seen{};
  bool ok = true;
  for (std::size_t d = 0; d < R; ++d) {
    const int p = perm[d];
    ok = ok && p >= 0 && p < static_cast<int>(R) && !seen[p];
    if (!ok) break;
    seen[p] = true;
    source_axis[p] = static_cast<int>(d);
  }
  std::array<int64_t, R> perm64{};
  for (std::size_t d = 0; d < R; ++d) perm64[d] = perm[d];
  LOOM_USER_CHECK(ok, "loom.ops.E313")
      << "transpose: " << detail::shape_str(perm64) << " is not a permutation of the " << R
      << " axes of " << detail::describe(x) << "; list each axis 0.." << R - 1 << " exactly once";
  std::array<int64_t, R> shape{};
  for (std::size_t d = 0; d < R; ++d) shape[d] = x.shape(perm[d]);
  return compute(
      std::move(name), shape,
      [&](auto... v) {
        const std::array<Var, R> ax{v...};
        return [&]<std::size_t... S>(std::index_sequence<S...>) {
          return x(ax[source_axis[S]]...);
        }(std::make_index_sequence<R>{});
      },
      "transpose");
}

}  // namespace ops
LOOM_END_NAMESPACE

#endif  // LOOM_OPS_TRANSFORM_HPP
