// softmax, layer_norm and batch_norm against plain loops computed in double.
//
// Tolerance: ref::float_tolerance(len) for the row reductions over len elements (atol
// 1e-5 + 5e-7 len, rtol 1e-4); it also absorbs the few-ulp error of float32 exp and rsqrt.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include "support/random.hpp"
#include "support/ops_check.hpp"
#include "support/reference_ops.hpp"

#include <array>
#include <cmath>
#include <vector>

namespace {

using namespace loom;
namespace ref = loom_test::ref;

using loom_test::run;
using loom_test::scaled_error;

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("softmax normalizes each row of the last axis") {
    const int64_t rows = 7, len = 13;
    auto x = placeholder<float>("X", {rows, len});
    auto y = ops::softmax(x);
    CHECK(y.ir()->tag == "softmax");
    ComputeDAG dag({x}, {y});
    CHECK(dag.num_ops() == 5);  // X, max, exp, sum, divide
    auto xv = loom_test::random_vector<float>(rows * len, 61, -3, 3);
    auto got = run<float>(dag, {&xv});
    CHECK(scaled_error(got, ref::softmax(xv, rows, len), ref::float_tolerance(len)) <= 1);
    for (int64_t r = 0; r < rows; ++r) {
      double total = 0;
      for (int64_t j = 0; j < len; ++j) total += got[r * len + j];
      CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
    }
  }

  TEST_CASE("softmax subtracts the row maximum, so large inputs do not overflow") {
    // exp(100) overflows float32; exp(x - max) cannot.
    const int64_t rows = 3, len = 6;
    auto x = placeholder<float>("X", {rows, len});
    ComputeDAG dag({x}, {ops::softmax(x)});
    auto xv = loom_test::random_vector<float>(rows * len, 62, 80, 100);
    auto got = run<float>(dag, {&xv});
    for (float v : got) CHECK(std::isfinite(v));
    CHECK(scaled_error(got, ref::softmax(xv, rows, len), ref::float_tolerance(len)) <= 1);
  }

  TEST_CASE("softmax works on rank 1 and rank 3 tensors") {
    SUBCASE("rank 1: the row statistics are rank-0 tensors") {
      auto x = placeholder<float>("X", {9});
      ComputeDAG dag({x}, {ops::softmax(x)});
      auto xv = loom_test::random_vector<float>(9, 63, -2, 2);
      CHECK(scaled_error(run<float>(dag, {&xv}), ref::softmax(xv, 1, 9), ref::float_tolerance(9)) <=
            1);
    }
    SUBCASE("rank 3") {
      auto x = placeholder<float>("X", {2, 3, 11});
      ComputeDAG dag({x}, {ops::softmax(x)});
      auto xv = loom_test::random_vector<float>(66, 64, -2, 2);
      CHECK(scaled_error(run<float>(dag, {&xv}), ref::softmax(xv, 6, 11),
                         ref::float_tolerance(11)) <= 1);
    }
  }

  TEST_CASE("layer_norm normalizes the last axis and applies gamma and beta") {
    const int64_t b = 2, s = 5, len = 17;
    auto x = placeholder<float>("X", {b, s, len});
    auto gamma = placeholder<float>("gamma", {len});
    auto beta = placeholder<float>("beta", {len});
    auto y = ops::layer_norm(x, gamma, beta, 1e-5);
    CHECK(y.ir()->tag == "layer_norm");
    ComputeDAG dag({x, gamma, beta}, {y});
    // An offset of 3 makes the mean matter: a one-pass variance would lose digits here.
    auto xv = loom_test::random_vector<float>(b * s * len, 65, 2, 4);
    auto gv = loom_test::random_vector<float>(len, 66, 0.5, 1.5);
    auto bv = loom_test::random_vector<float>(len, 67);
    auto want = ref::layer_norm(xv, gv, bv, b * s, len, 1e-5);
    // Normalized values reach ~|x - mean| / std ~ 1.7, and the relative error of the variance
    // (a sum of len squares) carries into them: float_tolerance(len) scaled by 4 covers it.
    auto tol = ref::float_tolerance(len);
    tol.atol *= 4;
    CHECK(scaled_error(run<float>(dag, {&xv, &gv, &bv}), want, tol) <= 1);
  }

  TEST_CASE("batch_norm normalizes every channel with its own statistics") {
    SUBCASE("NCHW") {
      const int64_t n = 2, c = 3, h = 5, w = 4;
      auto x = placeholder<float>("X", {n, c, h, w});
      auto gamma = placeholder<float>("gamma", {c});
      auto beta = placeholder<float>("beta", {c});
      auto mean = placeholder<float>("mean", {c});
      auto var = placeholder<float>("var", {c});
      auto y = ops::batch_norm(x, gamma, beta, mean, var, 1e-3);
      CHECK(y.ir()->tag == "batch_norm");
      ComputeDAG dag({x, gamma, beta, mean, var}, {y});
      auto xv = loom_test::random_vector<float>(n * c * h * w, 68);
      auto gv = loom_test::random_vector<float>(c, 69, 0.5, 1.5);
      auto bv = loom_test::random_vector<float>(c, 70);
      auto mv = loom_test::random_vector<float>(c, 71);
      auto vv = loom_test::random_vector<float>(c, 72, 0.1, 2.0);
      CHECK(scaled_error(run<float>(dag, {&xv, &gv, &bv, &mv, &vv}),
                         ref::batch_norm(xv, gv, bv, mv, vv, n, c, h * w, 1e-3),
                         ref::float_tolerance(1)) <= 1);
    }
    SUBCASE("NC (rank 2)") {
      const int64_t n = 5, c = 7;
      auto x = placeholder<float>("X", {n, c});
      auto p = placeholder<float>("p", {c});
      auto q = placeholder<float>("q", {c});
      ComputeDAG dag({x, p, q}, {ops::batch_norm(x, p, q, q, p)});
      auto xv = loom_test::random_vector<float>(n * c, 73);
      auto pv = loom_test::random_vector<float>(c, 74, 0.5, 1.5);
      auto qv = loom_test::random_vector<float>(c, 75, 0.5, 1.5);
      CHECK(scaled_error(run<float>(dag, {&xv, &pv, &qv}),
                         ref::batch_norm(xv, pv, qv, qv, pv, n, c, 1, 1e-5),
                         ref::float_tolerance(1)) <= 1);
    }
  }
}
