// max_pool2d and avg_pool2d against a plain loop that visits only the taps inside the input.
//
// Tolerance: max pooling is exact (it only compares). Average pooling sums at most 9 values in
// float32 and divides once: ref::float_tolerance(9).
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include "support/random.hpp"
#include "support/ops_check.hpp"
#include "support/reference_ops.hpp"

#include <array>
#include <vector>

namespace {

using namespace loom;
namespace ref = loom_test::ref;

using loom_test::run;

struct pool_case {
  ref::dims2 kernel, stride, padding;
};

const pool_case pool_cases[] = {
    {{2, 2}, {2, 2}, {0, 0}},  // the classic non-overlapping 2x2
    {{3, 3}, {2, 2}, {1, 1}},  // ResNet's stem pool
    {{3, 2}, {1, 2}, {2, 1}},  // unequal everything, windows that are mostly padding
    {{3, 3}, {3, 3}, {1, 0}},
};

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE_TEMPLATE("max_pool2d takes the maximum of each window and never picks padding", T,
                     float, int32_t) {
    const int64_t n = 2, c = 3, h = 9, w = 7;
    // All-negative data: a zero from the padding would win any window that touches it.
    auto xv = loom_test::random_vector<T>(n * c * h * w, 41, -100.0, -1.0);
    for (const auto& tc : pool_cases) {
      CAPTURE(tc.kernel[0]);
      CAPTURE(tc.padding[0]);
      auto x = placeholder<T>("X", {n, c, h, w});
      auto y = ops::max_pool2d(x, tc.kernel, tc.stride, tc.padding);
      CHECK(y.ir()->tag == "max_pool2d");
      ComputeDAG dag({x}, {y});
      auto want = ref::pool2d_nchw(xv, n, c, {h, w}, tc.kernel, tc.stride, tc.padding, true, true);
      CHECK(run<T>(dag, {&xv}) == want);
    }
  }

  TEST_CASE("avg_pool2d divides by the whole window or by the taps inside the input") {
    const int64_t n = 2, c = 3, h = 9, w = 7;
    auto xv = loom_test::random_vector<float>(n * c * h * w, 42);
    for (bool include_pad : {true, false})
      for (const auto& tc : pool_cases) {
        CAPTURE(include_pad);
        CAPTURE(tc.kernel[0]);
        CAPTURE(tc.padding[0]);
        auto x = placeholder<float>("X", {n, c, h, w});
        auto y = ops::avg_pool2d(x, tc.kernel, tc.stride, tc.padding, include_pad);
        CHECK(y.ir()->tag == "avg_pool2d");
        ComputeDAG dag({x}, {y});
        auto want = ref::pool2d_nchw(xv, n, c, {h, w}, tc.kernel, tc.stride, tc.padding, false,
                                     include_pad);
        auto got = run<float>(dag, {&xv});
        REQUIRE(got.size() == want.size());
        const auto tol = ref::float_tolerance(9);
        CHECK(loom_test::max_scaled_error(got, want, tol.atol, tol.rtol) <= 1);
      }
  }

  TEST_CASE("avg_pool2d without count_include_pad averages constant data to that constant") {
    auto x = placeholder<double>("X", {1, 2, 5, 5});
    ComputeDAG dag({x}, {ops::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false)});
    std::vector<double> xv(50, 2.5);
    for (double v : run<double>(dag, {&xv})) CHECK(v == 2.5);
  }
}
