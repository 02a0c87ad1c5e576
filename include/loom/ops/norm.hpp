/// \file
/// Normalizations of the operator library (layer ops/): `softmax` and `layer_norm` over the last
/// axis, and inference-time `batch_norm` over the channel axis.
///
/// A reduction must be the whole body of a compute, so softmax and layer_norm are small chains of
/// computes: the row statistics are tensors of their own (one element per row), which the
/// element-wise stages read. The intermediates are named `<name>_<stage>` and tagged
/// `<op>_<stage>`; only the last compute carries the operator's own tag.
#ifndef LOOM_OPS_NORM_HPP
#define LOOM_OPS_NORM_HPP

#include "loom/ops/common.hpp"

#include <cmath>
#include <type_traits>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace ops {

namespace detail {

/// Calls `f(rows..., last)`: splits the R axes a compute lambda receives into the leading R-1
/// ("row") axes and the last one, the axis that softmax and layer_norm reduce.
template <std::size_t R, class F>
auto split_last(const std::array<Var, R>& ax, const F& f) {
  return [&]<std::size_t... D>(std::index_sequence<D...>) {
    return f(ax[R - 1], ax[D]...);
  }(std::make_index_sequence<R - 1>{});
}

/// Throws E312 unless eps is a non-negative number.
inline void check_eps(const char* op, double eps) {
  LOOM_USER_CHECK(eps >= 0, "loom.ops.E312")
      << op << ": eps = " << eps << " must be a non-negative number (it keeps the variance "
      << "away from zero; 1e-5 is usual)";
}

}  // namespace detail

/// Numerically stable softmax over the last axis: `exp(x - max) / sum(exp(x - max))` per row.
/// Four computes, as TVM writes it: the row maxima `<name>_max` (tagged "softmax_max"), the
/// shifted exponentials `<name>_exp` ("softmax_exp"), their row sums `<name>_sum`
/// ("softmax_sum") and the normalized result `<name>` ("softmax"). Subtracting the row maximum
/// keeps exp from overflowing; the exponentials are a tensor of their own so that each is
/// computed once, not once per use. Works for any rank >= 1 (rank 1: the row statistics are
/// rank-0 tensors). Float element types only (a compile error otherwise).
///
/// The exp stage calls an expensive intrinsic, so the DAG never treats it as strictly
/// inlineable: the search keeps it a stage of its own (or computes it at the sum's loops).
template <class T, std::size_t R>
Tensor<T, R> softmax(const Tensor<T, R>& x, std::string name = "softmax") {
  LOOM_STATIC_ASSERT(std::is_floating_point_v<T>, LOOM_SOFTMAX_NEEDS_A_FLOAT_TENSOR);
  static_assert(R >= 1);
  const auto rows = detail::leading<R - 1>(x.shape());
  const int64_t len = x.shape(R - 1);
  const RVar k_max = reduce_axis(len, "k");
  const auto row_max = compute(
      name + "_max", rows, [&](auto... v) { return max(x(v..., k_max), k_max); }, "softmax_max");
  const auto e = compute(
      name + "_exp", x.shape(),
      [&](auto... v) {
        return detail::split_last(std::array<Var, R>{v...}, [&](const Var& last, const auto&... r) {
          return exp(x(r..., last) - row_max(r...));
        });
      },
      "softmax_exp");
  const RVar k_sum = reduce_axis(len, "k");
  const auto row_sum = compute(
      name + "_sum", rows, [&](auto... v) { return sum(e(v..., k_sum), k_sum); }, "softmax_sum");
  return compute(
      std::move(name), x.shape(),
      [&](auto... v) {
        return detail::split_last(std::array<Var, R>{v...}, [&](const Var& last, const auto&... r) {
          return e(r..., last) / row_sum(r...);
        });
      },
      "softmax");
}

/// Layer normalization over the last axis (length D): per row,
/// `(x - mean) / sqrt(var + eps) * gamma + beta` with the biased variance, gamma and beta of
/// shape [D]. Three computes: the row means `<name>_mean` (tagged "layer_norm_mean"), the row
/// variances `<name>_var` ("layer_norm_var", computed from the mean in a second pass, which stays
/// accurate where the one-pass E[x^2] - mean^2 cancels catastrophically) and the result `<name>`
/// ("layer_norm"). Throws loom::user_error if gamma or beta is not [D] (E311) or eps is negative
/// (E312).
///
///     auto y = ops::layer_norm(x, gamma, beta);  // x [batch, seq, hidden], gamma/beta [hidden]
///
/// `eps` is converted to T; float element types only (a compile error otherwise).
template <class T, std::size_t R>
Tensor<T, R> layer_norm(const Tensor<T, R>& x, const Tensor<T, 1>& gamma, const Tensor<T, 1>& beta,
                        double eps = 1e-5, std::string name = "layer_norm") {
  LOOM_STATIC_ASSERT(std::is_floating_point_v<T>, LOOM_LAYER_NORM_NEEDS_A_FLOAT_TENSOR);
  static_assert(R >= 1);
  const int64_t len = x.shape(R - 1);
  LOOM_USER_CHECK(gamma.shape(0) == len && beta.shape(0) == len, "loom.ops.E311")
      << "layer_norm: gamma " << detail::describe(gamma) << " and beta " << detail::describe(beta)
      << " must both have " << len << " elements, the last dimension of " << detail::describe(x);
  detail::check_eps("layer_norm", eps);
  const auto rows = detail::leading<R - 1>(x.shape());
  // Dividing each term (instead of the sum) keeps the mean one reduction, hence one compute.
  const T inv_len = static_cast<T>(1.0 / static_cast<double>(len));
  const RVar k_mean = reduce_axis(len, "k");
  const auto mean = compute(
      name + "_mean", rows, [&](auto... v) { return sum(x(v..., k_mean) * inv_len, k_mean); },
      "layer_norm_mean");
  const RVar k_var = reduce_axis(len, "k");
  const auto var = compute(
      name + "_var", rows,
      [&](auto... v) {
        auto centered = x(v..., k_var) - mean(v...);
        return sum(centered * centered * inv_len, k_var);
      },
      "layer_norm_var");
  const T eps_t = static_cast<T>(eps);
  return compute(
      std::move(name), x.shape(),
      [&](auto... v) {
        return detail::split_last(std::array<Var, R>{v...}, [&](const Var& last, const auto&... r) {
          return (x(r..., last) - mean(r...)) * rsqrt(var(r...) + eps_t) * gamma(last) + beta(last);
        });
      },
      "layer_norm");
}

/// Batch normalization at inference time over the channel axis 1 of [N, C, ...] data (NCHW for
/// rank 4): `(x - moving_mean[c]) / sqrt(moving_var[c] + eps) * gamma[c] + beta[c]`, one
/// element-wise compute tagged "batch_norm". Arguments in TVM's order. Throws loom::user_error if
/// a parameter vector does not have C elements (E311) or eps is negative (E312).
///
/// The normalization is written out rather than folded into one scale and shift per channel:
/// folding is a graph-level rewrite (it belongs before the DAG is built, where the statistics
/// are constants), and the unfolded form is what the reference implementations compute.
template <class T, std::size_t R>
Tensor<T, R> batch_norm(const Tensor<T, R>& x, const Tensor<T, 1>& gamma, const Tensor<T, 1>& beta,
                        const Tensor<T, 1>& moving_mean, const Tensor<T, 1>& moving_var,
                        double eps = 1e-5, std::string name = "batch_norm") {
  LOOM_STATIC_ASSERT(std::is_floating_point_v<T>, LOOM_BATCH_NORM_NEEDS_A_FLOAT_TENSOR);
  static_assert(R >= 2, "batch_norm needs [N, C, ...] data");
  const int64_t c = x.shape(1);
  const bool ok = gamma.shape(0) == c && beta.shape(0) == c && moving_mean.shape(0) == c &&
                  moving_var.shape(0) == c;
  LOOM_USER_CHECK(ok, "loom.ops.E311")
      << "batch_norm: gamma " << detail::describe(gamma) << ", beta " << detail::describe(beta)
      << ", moving_mean " << detail::describe(moving_mean) << " and moving_var "
      << detail::describe(moving_var) << " must all have " << c
      << " elements, the channels (dimension 1) of " << detail::describe(x);
  detail::check_eps("batch_norm", eps);
  const T eps_t = static_cast<T>(eps);
  return compute(
      std::move(name), x.shape(),
      [&](auto... v) {
        const std::array<Var, R> ax{v...};
        const Var& ch = ax[1];
        return (x(v...) - moving_mean(ch)) * rsqrt(moving_var(ch) + eps_t) * gamma(ch) + beta(ch);
      },
      "batch_norm");
}

}  // namespace ops
LOOM_END_NAMESPACE

#endif  // LOOM_OPS_NORM_HPP
