// relu, bias_add, add/sub/mul/div (with broadcasting), transpose and pad against plain loops.
//
// Tolerance: none. Each output element is one float operation on the same float inputs, and
// the references round their double result to float, which gives the same correctly rounded
// value; so results are compared exactly.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include "support/random.hpp"
#include "support/ops_check.hpp"
#include "support/reference_ops.hpp"

#include <array>
#include <functional>
#include <vector>

namespace {

using namespace loom;
namespace ref = loom_test::ref;

using loom_test::run;

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE_TEMPLATE("relu clamps negative values to zero", T, float, double, int32_t, int64_t) {
    auto x = placeholder<T>("X", {3, 5, 7});
    auto y = ops::relu(x);
    CHECK(y.ir()->tag == "relu");
    auto xv = loom_test::random_vector<T>(105, 51, -10, 10);
    CHECK(run<T>(ComputeDAG({x}, {y}), {&xv}) == ref::relu(xv));
  }

  TEST_CASE("bias_add adds the bias along the given axis, negative axes counting from the end") {
    const std::vector<int64_t> shape{2, 3, 4, 5};
    auto x = placeholder<float>("X", {2, 3, 4, 5});
    auto xv = loom_test::random_vector<float>(120, 52);
    for (int axis : {0, 1, 3, -1, -3}) {
      CAPTURE(axis);
      const size_t a = static_cast<size_t>(axis < 0 ? axis + 4 : axis);
      auto bias = placeholder<float>("b", std::array<int64_t, 1>{shape[a]});
      auto y = ops::bias_add(x, bias, axis);
      CHECK(y.ir()->tag == "bias_add");
      auto bv = loom_test::random_vector<float>(shape[a], 53);
      CHECK(run<float>(ComputeDAG({x, bias}, {y}), {&xv, &bv}) == ref::bias_add(xv, shape, bv, a));
    }
  }

  TEST_CASE("add, sub, mul and div combine equal shapes element by element") {
    const std::vector<int64_t> shape{4, 3, 5};
    auto a = placeholder<float>("A", {4, 3, 5});
    auto b = placeholder<float>("B", {4, 3, 5});
    auto av = loom_test::random_vector<float>(60, 54);
    auto bv = loom_test::random_vector<float>(60, 55, 0.5, 2.0);  // no division by ~0
    struct binary_case {
      const char* tag;
      Tensor<float, 3> result;
      std::function<double(double, double)> f;
    };
    const binary_case cases[] = {
        {"add", ops::add(a, b), std::plus<double>()},
        {"sub", ops::sub(a, b), std::minus<double>()},
        {"mul", ops::mul(a, b), std::multiplies<double>()},
        {"div", ops::div(a, b), std::divides<double>()},
    };
    for (const auto& tc : cases) {
      CAPTURE(tc.tag);
      CHECK(tc.result.ir()->tag == tc.tag);
      CHECK(run<float>(ComputeDAG({a, b}, {tc.result}), {&av, &bv}) ==
            ref::broadcast_binary(av, shape, bv, shape, tc.f));
    }
  }

  TEST_CASE("a lower-rank operand broadcasts along the leading dimensions, on either side") {
    auto a = placeholder<float>("A", {2, 3, 4, 5});
    auto b = placeholder<float>("B", {4, 5});
    auto av = loom_test::random_vector<float>(120, 56);
    auto bv = loom_test::random_vector<float>(20, 57, 0.5, 2.0);
    const std::vector<int64_t> big{2, 3, 4, 5}, small{4, 5};

    auto sum = ops::add(a, b);
    REQUIRE(sum.shape() == std::array<int64_t, 4>{2, 3, 4, 5});
    CHECK(run<float>(ComputeDAG({a, b}, {sum}), {&av, &bv}) ==
          ref::broadcast_binary(av, big, bv, small, std::plus<double>()));

    // b / a: the broadcast operand on the left.
    auto quotient = ops::div(b, a);
    REQUIRE(quotient.shape() == std::array<int64_t, 4>{2, 3, 4, 5});
    CHECK(run<float>(ComputeDAG({a, b}, {quotient}), {&av, &bv}) ==
          ref::broadcast_binary(av, big, bv, small, [](double x, double y) { return y / x; }));
  }

  TEST_CASE("transpose permutes axes like numpy.transpose") {
    const std::vector<int64_t> shape{2, 3, 4, 5};
    auto x = placeholder<int32_t>("X", {2, 3, 4, 5});
    auto xv = loom_test::random_vector<int32_t>(120, 58, -1000, 1000);
    for (auto perm : {std::array{0, 1, 2, 3}, std::array{0, 2, 1, 3}, std::array{3, 0, 2, 1},
                      std::array{1, 3, 0, 2}}) {
      CAPTURE(perm[0]);
      CAPTURE(perm[1]);
      auto y = ops::transpose(x, perm);
      CHECK(y.ir()->tag == "transpose");
      for (int d = 0; d < 4; ++d) CHECK(y.shape(d) == shape[perm[d]]);
      CHECK(run<int32_t>(ComputeDAG({x}, {y}), {&xv}) ==
            ref::transpose(xv, shape, {perm.begin(), perm.end()}));
    }
  }

  TEST_CASE("pad surrounds the tensor with the pad value") {
    auto x = placeholder<float>("X", {2, 3, 4});
    auto xv = loom_test::random_vector<float>(24, 59);
    auto y = ops::pad(x, {0, 1, 2}, {1, 0, 3}, -7.5f);
    CHECK(y.ir()->tag == "pad");
    REQUIRE(y.shape() == std::array<int64_t, 3>{3, 4, 9});
    CHECK(run<float>(ComputeDAG({x}, {y}), {&xv}) ==
          ref::pad(xv, {2, 3, 4}, {0, 1, 2}, {1, 0, 3}, -7.5f));
  }
}
