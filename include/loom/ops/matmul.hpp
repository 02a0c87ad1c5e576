/// \file
/// Matrix products of the operator library (layer ops/): `matmul`, `batch_matmul` and `dense`.
///
/// All three are one reduction over k, `C[..., i, j] = sum_k A[..., i, k] * B[..., k, j]`, and
/// differ only in operand layout and tag. float16/bfloat16 operands give a float32 product
/// summed in float32: `sum(cast<float>(A) * cast<float>(B))` (mixed precision). Each operand misses
/// one output axis (A does not depend on j, B not on i), which is the data reuse that makes the DAG
/// analysis ask for multi-level tiling; the FLOP count is 2 M N K per batch.
#ifndef LOOM_OPS_MATMUL_HPP
#define LOOM_OPS_MATMUL_HPP

#include "loom/ops/common.hpp"
#include "loom/ops/elementwise.hpp"

#include <utility>

LOOM_BEGIN_NAMESPACE
namespace ops {

namespace detail {

/// The product compute for rank-R operands whose leading R-2 dimensions are batch dimensions.
/// The transposes are template parameters because they change the order of the index
/// expressions in the reads, which the DSL records in the expression's type.
template <bool TransA, bool TransB, class T, std::size_t R>
Tensor<product_t<T>, R> matmul_compute(const Tensor<T, R>& a, const Tensor<T, R>& b,
                                       const std::array<int64_t, R>& shape, int64_t k_extent,
                                       std::string name, std::string tag) {
  const RVar k = reduce_axis(k_extent, "k");
  return compute(
      std::move(name), shape,
      [&](auto... v) {
        const std::array<Var, R> ax{v...};
        const Var& i = ax[R - 2];
        const Var& j = ax[R - 1];
        return [&]<std::size_t... B>(std::index_sequence<B...>) {
          auto lhs = [&] {
            if constexpr (TransA)
              return a(ax[B]..., k, i);
            else
              return a(ax[B]..., i, k);
          }();
          auto rhs = [&] {
            if constexpr (TransB)
              return b(ax[B]..., j, k);
            else
              return b(ax[B]..., k, j);
          }();
          return sum(widened_product(lhs, rhs), k);
        }(std::make_index_sequence<R - 2>{});
      },
      std::move(tag));
}

/// The layout an operand must have, for error messages: "[M, K]", "[batch..., K, M]".
inline std::string matmul_layout(bool batched, bool trans, const char* rows, const char* cols) {
  std::string s = batched ? "[batch..., " : "[";
  s += trans ? cols : rows;
  s += ", ";
  s += trans ? rows : cols;
  return s + "]";
}

/// Validates the operands and builds the product (shared by matmul and batch_matmul).
template <class T, std::size_t R>
Tensor<product_t<T>, R> matmul_nd(const Tensor<T, R>& a, const Tensor<T, R>& b, bool trans_a,
                                  bool trans_b, const char* op, std::string name) {
  static_assert(R >= 2);
  const auto as = a.shape();
  const auto bs = b.shape();
  const int64_t m = trans_a ? as[R - 1] : as[R - 2];
  const int64_t ka = trans_a ? as[R - 2] : as[R - 1];
  const int64_t kb = trans_b ? bs[R - 1] : bs[R - 2];
  const int64_t n = trans_b ? bs[R - 2] : bs[R - 1];
  bool same_batch = true;
  for (std::size_t d = 0; d + 2 < R; ++d) same_batch = same_batch && as[d] == bs[d];
  LOOM_USER_CHECK(same_batch, "loom.ops.E302")
      << op << ": " << describe(a) << " and " << describe(b) << " have different batch dimensions ("
      << shape_str(leading<R - 2>(as)) << " vs " << shape_str(leading<R - 2>(bs))
      << "); all but the last two dimensions must be equal (there is no broadcasting)";
  LOOM_USER_CHECK(ka == kb, "loom.ops.E301")
      << op << ": " << describe(a) << " and " << describe(b)
      << " disagree on the reduction length K (" << ka << " vs " << kb
      << "); with trans_a = " << (trans_a ? "true" : "false")
      << " and trans_b = " << (trans_b ? "true" : "false") << ", a must be "
      << matmul_layout(R > 2, trans_a, "M", "K") << " and b must be "
      << matmul_layout(R > 2, trans_b, "K", "N");
  std::array<int64_t, R> shape = as;
  shape[R - 2] = m;
  shape[R - 1] = n;
  if (!trans_a && !trans_b)
    return matmul_compute<false, false>(a, b, shape, ka, std::move(name), op);
  if (!trans_a) return matmul_compute<false, true>(a, b, shape, ka, std::move(name), op);
  if (!trans_b) return matmul_compute<true, false>(a, b, shape, ka, std::move(name), op);
  return matmul_compute<true, true>(a, b, shape, ka, std::move(name), op);
}

}  // namespace detail

/// `C[M, N] = A[M, K] * B[K, N]`. With `trans_a` A is given as [K, M], with `trans_b` B as
/// [N, K] (the product uses their transposes). Tagged "matmul". Throws loom::user_error (E301)
/// when the reduction lengths differ.
///
///     auto c = ops::matmul(a, b);               // a [M, K], b [K, N]
///     auto d = ops::matmul(a, bt, false, true); // bt [N, K]: an "NT" product, as dense
///
/// The transposes are folded into the reads (no transpose stage), so a transposed operand
/// costs nothing until a schedule decides how to lay it out.
template <class T>
Tensor<detail::product_t<T>, 2> matmul(const Tensor<T, 2>& a, const Tensor<T, 2>& b,
                                       bool trans_a = false, bool trans_b = false,
                                       std::string name = "matmul") {
  return detail::matmul_nd(a, b, trans_a, trans_b, "matmul", std::move(name));
}

/// A matrix product per batch: `C[batch..., M, N] = A[batch..., M, K] * B[batch..., K, N]`,
/// where every dimension but the last two is a batch dimension (rank 3 is the usual
/// [batch, M, K]; rank 4 serves attention's [batch, heads, M, K]). The transpose flags swap the
/// last two dimensions of an operand, as in matmul(). Batch dimensions must be equal (no
/// broadcasting). Tagged "batch_matmul". Throws loom::user_error for different batch dimensions
/// (E302) or reduction lengths (E301).
template <class T, std::size_t R>
Tensor<detail::product_t<T>, R> batch_matmul(const Tensor<T, R>& a, const Tensor<T, R>& b,
                                             bool trans_a = false, bool trans_b = false,
                                             std::string name = "batch_matmul") {
  static_assert(R >= 3, "batch_matmul needs operands of rank 3 or more; use matmul for rank 2");
  return detail::matmul_nd(a, b, trans_a, trans_b, "batch_matmul", std::move(name));
}

/// A fully connected layer without bias: `Y[M, N] = X[M, K] * W[N, K]^T` (the weight is stored
/// one output feature per row, as in TVM and PyTorch). Tagged "dense": the same computation as
/// `matmul(x, w, false, true)`, kept apart so that tuning records and printed DAGs say which
/// layer they belong to. Throws loom::user_error (E301) when X and W disagree on K.
template <class T>
Tensor<detail::product_t<T>, 2> dense(const Tensor<T, 2>& x, const Tensor<T, 2>& w,
                                      std::string name = "dense") {
  LOOM_USER_CHECK(x.shape(1) == w.shape(1), "loom.ops.E301")
      << "dense: " << detail::describe(x) << " and weight " << detail::describe(w)
      << " disagree on the reduction length K (" << x.shape(1) << " vs " << w.shape(1)
      << "); x must be [M, K] and w must be [N, K]";
  return detail::matmul_compute<false, true>(x, w, {x.shape(0), w.shape(0)}, x.shape(1),
                                             std::move(name), "dense");
}

/// A fully connected layer with bias: `Y[M, N] = X[M, K] * W[N, K]^T + bias[N]`. The reduction
/// must be the whole body of its compute, so the bias is a second compute (`<name>_bias`,
/// tagged "bias_add") that reads the product `<name>` (tagged "dense"); the result is the former.
/// Throws loom::user_error when X and W disagree on K (E301) or bias does not have N elements
/// (E303).
template <class T>
Tensor<detail::product_t<T>, 2> dense(const Tensor<T, 2>& x, const Tensor<T, 2>& w,
                                      const Tensor<detail::product_t<T>, 1>& bias,
                                      std::string name = "dense") {
  LOOM_USER_CHECK(bias.shape(0) == w.shape(0), "loom.ops.E303")
      << "dense: bias " << detail::describe(bias) << " needs N = " << w.shape(0)
      << " elements, one per row of the weight " << detail::describe(w);
  auto y = dense(x, w, name);
  return bias_add(y, bias, 1, name + "_bias");
}

}  // namespace ops
LOOM_END_NAMESPACE

#endif  // LOOM_OPS_MATMUL_HPP
