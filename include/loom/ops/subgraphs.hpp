/// \file
/// The two subgraph benchmarks of the Ansor paper (OSDI'20, section 7.2), built from the
/// operator library (layer ops/): `conv_layer` (conv2d + batch norm + ReLU, the building block
/// of ResNet-style networks) and `tbg` (transpose + batch matmul, the attention score of BERT).
///
/// They exercise fusion: the element-wise tail of conv_layer should end up inside the
/// convolution's tiles, and tbg's transposes are layout changes the search can inline into the
/// matmul's reads.
#ifndef LOOM_OPS_SUBGRAPHS_HPP
#define LOOM_OPS_SUBGRAPHS_HPP

#include "loom/ops/conv.hpp"
#include "loom/ops/elementwise.hpp"
#include "loom/ops/matmul.hpp"
#include "loom/ops/norm.hpp"
#include "loom/ops/transform.hpp"

#include <utility>

LOOM_BEGIN_NAMESPACE
namespace ops {

/// Ansor's ConvLayer: `relu(batch_norm(conv2d_nchw(x, w, p)))`. Data [N, C, H, W], weight
/// [O, C / groups, KH, KW], per-channel gamma, beta, moving_mean and moving_var of shape [O];
/// result [N, O, OH, OW]. Computes: `<name>_conv_pad` (only when padded), `<name>_conv`,
/// `<name>_bn` and `<name>` (tags "pad", "conv2d_nchw", "batch_norm", "relu"). Errors are those
/// of conv2d_nchw and batch_norm.
template <class T>
Tensor<T, 4> conv_layer(const Tensor<T, 4>& x, const Tensor<T, 4>& w, const Tensor<T, 1>& gamma,
                        const Tensor<T, 1>& beta, const Tensor<T, 1>& moving_mean,
                        const Tensor<T, 1>& moving_var, const ConvParams<2>& p = {},
                        double eps = 1e-5, std::string name = "conv_layer") {
  auto conv = conv2d_nchw(x, w, p, name + "_conv");
  auto bn = batch_norm(conv, gamma, beta, moving_mean, moving_var, eps, name + "_bn");
  return relu(bn, std::move(name));
}

/// Ansor's TBG (transpose + batch matmul), the attention scores of a transformer layer:
/// query [B, M, H, D] and key [B, N, H, D] (batch, sequence, heads, head size, as a linear
/// layer produces them) are transposed to [B, H, M, D] and [B, H, D, N] and multiplied per batch
/// and head:
///
///     out[b, h, m, n] = sum_d query[b, m, h, d] * key[b, n, h, d]      -> [B, H, M, N]
///
/// Computes: `<name>_q` and `<name>_k` (tagged "transpose") and `<name>` ("batch_matmul").
/// Throws loom::user_error (E315) when query and key disagree on B, H or D.
template <class T>
Tensor<T, 4> tbg(const Tensor<T, 4>& query, const Tensor<T, 4>& key, std::string name = "tbg") {
  const auto q = query.shape();
  const auto k = key.shape();
  LOOM_USER_CHECK(q[0] == k[0] && q[2] == k[2] && q[3] == k[3], "loom.ops.E315")
      << "tbg: query " << detail::describe(query) << " and key " << detail::describe(key)
      << " must agree on batch (dimension 0), heads (2) and head size (3); both are "
         "[batch, sequence, heads, head size]";
  auto q_t = transpose(query, {0, 2, 1, 3}, name + "_q");
  auto k_t = transpose(key, {0, 2, 3, 1}, name + "_k");
  return batch_matmul(q_t, k_t, false, false, std::move(name));
}

}  // namespace ops
LOOM_END_NAMESPACE

#endif  // LOOM_OPS_SUBGRAPHS_HPP
