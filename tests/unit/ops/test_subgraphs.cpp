// The Ansor paper's subgraphs, conv_layer and tbg, against compositions of plain loops.
//
// Tolerance: ref::float_tolerance of the convolution's or matmul's reduction length (atol
// 1e-5 + 5e-7 len, rtol 1e-4). conv_layer's batch norm scales the convolution's error by
// gamma / sqrt(var + eps) < 1.5 / sqrt(0.5); the atol is doubled for that.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include "support/random.hpp"
#include "support/ops_check.hpp"
#include "support/reference_ops.hpp"

#include <array>
#include <string>
#include <vector>

namespace {

using namespace loom;
namespace ref = loom_test::ref;

using loom_test::run;

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("conv_layer is conv2d, then batch norm, then relu") {
    const int64_t n = 1, c = 4, h = 9, w = 9, o = 6, k = 3;
    auto x = placeholder<float>("X", {n, c, h, w});
    auto wt = placeholder<float>("W", {o, c, k, k});
    auto gamma = placeholder<float>("gamma", {o});
    auto beta = placeholder<float>("beta", {o});
    auto mean = placeholder<float>("mean", {o});
    auto var = placeholder<float>("var", {o});
    const ops::ConvParams<2> p{.stride = {2, 2}, .padding = {1, 1}};
    auto y = ops::conv_layer(x, wt, gamma, beta, mean, var, p);
    CHECK(y.ir()->tag == "relu");
    ComputeDAG dag({x, wt, gamma, beta, mean, var}, {y});
    std::vector<std::string> tags;
    for (auto& op : dag.ops())
      if (!op.is_placeholder()) tags.push_back(op->tag);
    CHECK(tags == std::vector<std::string>{"pad", "conv2d_nchw", "batch_norm", "relu"});

    auto xv = loom_test::random_vector<float>(n * c * h * w, 81);
    auto wv = loom_test::random_vector<float>(o * c * k * k, 82);
    auto gv = loom_test::random_vector<float>(o, 83, 0.5, 1.5);
    auto bv = loom_test::random_vector<float>(o, 84);
    auto mv = loom_test::random_vector<float>(o, 85);
    auto vv = loom_test::random_vector<float>(o, 86, 0.5, 2.0);
    auto conv = ref::conv2d_nchw(xv, wv, n, c, {h, w}, o, {k, k}, p.stride, p.padding, {1, 1}, 1);
    const int64_t spatial = static_cast<int64_t>(conv.size()) / o;
    auto want = ref::relu(ref::batch_norm(conv, gv, bv, mv, vv, n, o, spatial, 1e-5));
    auto got = run<float>(dag, {&xv, &wv, &gv, &bv, &mv, &vv});
    auto tol = ref::float_tolerance(c * k * k);
    REQUIRE(got.size() == want.size());
    CHECK(loom_test::max_scaled_error(got, want, 2 * tol.atol, tol.rtol) <= 1);
  }

  TEST_CASE("tbg transposes query and key to [B, H, ., .] and multiplies them per head") {
    const int64_t b = 2, m = 5, n = 3, heads = 4, d = 8;
    auto q = placeholder<float>("Q", {b, m, heads, d});
    auto k = placeholder<float>("K", {b, n, heads, d});
    auto y = ops::tbg(q, k);
    REQUIRE(y.shape() == std::array<int64_t, 4>{b, heads, m, n});
    CHECK(y.ir()->tag == "batch_matmul");
    ComputeDAG dag({q, k}, {y});
    std::vector<std::string> names;
    for (auto& op : dag.ops())
      if (!op.is_placeholder()) names.push_back(op.name());
    CHECK(names == std::vector<std::string>{"tbg_q", "tbg_k", "tbg"});
    auto qv = loom_test::random_vector<float>(b * m * heads * d, 87);
    auto kv = loom_test::random_vector<float>(b * n * heads * d, 88);
    auto got = run<float>(dag, {&qv, &kv});
    auto want = ref::tbg(qv, kv, b, m, n, heads, d);
    auto tol = ref::float_tolerance(d);
    REQUIRE(got.size() == want.size());
    CHECK(loom_test::max_scaled_error(got, want, tol.atol, tol.rtol) <= 1);
  }
}
