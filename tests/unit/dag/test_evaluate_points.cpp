// Point-wise evaluation against the whole-DAG interpreter: bit-identical values, a cost that
// follows the points' dependence cones, and its errors.
#include <doctest/doctest.h>
#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include <bit>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include "support/random.hpp"

using namespace loom;
using loom_test::random_vector;

namespace {

/// Every argument of a DAG in memory: inputs random from a fixed seed, outputs written by
/// evaluate().
struct evaluated_dag {
  std::vector<std::vector<std::byte>> storage;
  std::vector<const void*> inputs;

  evaluated_dag(const ComputeDAG& dag, uint32_t seed) {
    const auto args = dag.arguments();
    std::vector<void*> pointers;
    for (size_t i = 0; i < args.size(); ++i) {
      const ir::DType t = args[i].dtype();
      const auto n = static_cast<size_t>(args[i].num_elements());
      storage.emplace_back(n * t.bytes());
      std::byte* p = storage.back().data();
      if (i < dag.inputs().size()) {
        if (t == ir::DType::f32())
          std::memcpy(p, random_vector<float>(n, seed + i).data(), n * 4);
        else if (t == ir::DType::f64())
          std::memcpy(p, random_vector<double>(n, seed + i).data(), n * 8);
        else  // small integers: valid gather indices into the tensors below
          std::memcpy(p, random_vector<int32_t>(n, seed + i, 0, 5).data(), n * 4);
        inputs.push_back(p);
      }
      pointers.push_back(p);
    }
    evaluate(dag, pointers);
  }

  /// Element `k` of output `o` as evaluate() wrote it.
  double output(const ComputeDAG& dag, size_t o, int64_t k) const {
    const ir::DType t = dag.outputs()[o].dtype();
    const std::byte* p = storage[dag.inputs().size() + o].data();
    if (t == ir::DType::f32()) return reinterpret_cast<const float*>(p)[k];
    if (t == ir::DType::f64()) return reinterpret_cast<const double*>(p)[k];
    return reinterpret_cast<const int32_t*>(p)[k];
  }
};

/// Number of points of output `o` at `points` whose evaluate_points value differs in any bit
/// from evaluate()'s.
int64_t mismatches(const ComputeDAG& dag, const evaluated_dag& e, size_t o,
                   const std::vector<int64_t>& points) {
  const std::vector<double> got = evaluate_points(dag, e.inputs, o, points);
  REQUIRE(got.size() == points.size());
  int64_t bad = 0;
  for (size_t k = 0; k < points.size(); ++k) {
    const double want = e.output(dag, o, points[k]);
    if (std::bit_cast<uint64_t>(got[k]) != std::bit_cast<uint64_t>(want) && bad++ == 0) {
      std::ostringstream why;
      why.precision(17);
      why << "output " << o << " at " << points[k] << ": " << got[k] << ", evaluate() wrote "
          << want;
      FAIL_CHECK(why.str());
    }
  }
  return bad;
}

/// Every element of every output of `dag` agrees with evaluate(), bit for bit.
void check_every_point(const ComputeDAG& dag, uint32_t seed) {
  const evaluated_dag e(dag, seed);
  for (size_t o = 0; o < dag.outputs().size(); ++o) {
    std::vector<int64_t> all(static_cast<size_t>(dag.outputs()[o].num_elements()));
    std::iota(all.begin(), all.end(), int64_t{0});
    CHECK(mismatches(dag, e, o, all) == 0);
  }
}

/// A chain of `levels` 3-point stencils over X[n]: level j has n - 2j elements, and one element
/// of the last level depends on 2d + 1 elements of the level d steps below it.
ComputeDAG stencil_chain(int64_t n, int levels) {
  auto X = placeholder<float>("X", {n});
  Tensor<float, 1> y = X;
  for (int j = 1; j <= levels; ++j) {
    const Tensor<float, 1> prev = y;
    std::string name = "Y";
    name += std::to_string(j);  // not "Y" + ...: GCC 12 misreports that as overlapping memcpy
    y = compute(name, {n - 2 * j},
                [&](Var i) { return prev(i) + prev(i + 1) * 0.5f + prev(i + 2); });
  }
  return ComputeDAG({X}, {y});
}

}  // namespace

TEST_SUITE("dag") {
  TEST_CASE("evaluate_points agrees bit for bit with evaluate at every point of the ops") {
    SUBCASE("matmul") {
      auto A = placeholder<float>("A", {13, 19});
      auto B = placeholder<float>("B", {19, 17});
      check_every_point(ComputeDAG({A, B}, {ops::matmul(A, B)}), 1);
    }
    SUBCASE("matmul + relu") {
      auto A = placeholder<float>("A", {9, 7});
      auto B = placeholder<float>("B", {7, 12});
      check_every_point(ComputeDAG({A, B}, {ops::relu(ops::matmul(A, B))}), 2);
    }
    SUBCASE("conv2d + bias + relu with padding") {
      auto X = placeholder<float>("X", {1, 3, 7, 7});
      auto W = placeholder<float>("W", {4, 3, 3, 3});
      auto bias = placeholder<float>("bias", {4});
      auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(X, W, {.padding = {1, 1}}), bias, 1));
      check_every_point(ComputeDAG({X, W, bias}, {y}), 3);
    }
    SUBCASE("strided conv layer with batch norm") {
      auto X = placeholder<float>("X", {2, 3, 9, 8});
      auto W = placeholder<float>("W", {5, 3, 3, 3});
      auto g = placeholder<float>("gamma", {5}), b = placeholder<float>("beta", {5});
      auto m = placeholder<float>("mean", {5}), v = placeholder<float>("var", {5});
      auto y = ops::conv_layer(X, W, g, b, m, ops::relu(v), {.stride = {2, 2}, .padding = {1, 1}});
      check_every_point(ComputeDAG({X, W, g, b, m, v}, {y}), 4);
    }
    SUBCASE("depthwise conv2d") {
      auto X = placeholder<float>("X", {1, 3, 7, 5});
      auto W = placeholder<float>("W", {3, 1, 3, 3});
      check_every_point(ComputeDAG({X, W}, {ops::depthwise_conv2d_nchw(X, W, {.padding = {1, 1}})}),
                        5);
    }
    SUBCASE("softmax") {
      auto X = placeholder<float>("X", {5, 11});
      check_every_point(ComputeDAG({X}, {ops::softmax(X)}), 6);
    }
    SUBCASE("layer_norm") {
      auto X = placeholder<float>("X", {5, 13});
      auto g = placeholder<float>("gamma", {13}), b = placeholder<float>("beta", {13});
      check_every_point(ComputeDAG({X, g, b}, {ops::layer_norm(X, g, b)}), 7);
    }
    SUBCASE("batch_matmul of transposes (TBG)") {
      auto q = placeholder<float>("q", {2, 5, 3, 4});
      auto k = placeholder<float>("k", {2, 6, 3, 4});
      check_every_point(ComputeDAG({q, k}, {ops::tbg(q, k)}), 8);
    }
    SUBCASE("max pooling with padding") {
      auto X = placeholder<float>("X", {1, 2, 9, 9});
      check_every_point(ComputeDAG({X}, {ops::max_pool2d(X, {3, 3}, {2, 2}, {1, 1})}), 9);
    }
    SUBCASE("float64, int32 and gathers, with one output read by the other") {
      auto X = placeholder<float>("X", {6, 7});
      auto idx = placeholder<int32_t>("idx", {5});
      auto I = compute("I", {6, 7}, [&](Var i, Var j) {
        return floordiv(cast<int32_t>(X(i, j) * 100.0f), 3) * 65536 * 65536 +
               cast<int32_t>(floormod(i - j, 4));
      });
      auto D = compute("D", {6, 7}, [&](Var i, Var j) { return cast<double>(X(i, j)) * 0.1; });
      auto G = compute("G", {5, 7}, [&](Var i, Var j) {
        return cast<float>(D(idx(i), j) / 3.0) + cast<float>(I(idx(i), j));
      });
      check_every_point(ComputeDAG({X, idx}, {G, I}), 10);
    }
  }

  TEST_CASE("evaluate_points at sampled points, in their order and with repeats") {
    auto X = placeholder<float>("X", {2, 8, 20, 20});
    auto W = placeholder<float>("W", {8, 8, 3, 3});
    auto bias = placeholder<float>("bias", {8});
    auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(X, W, {.padding = {1, 1}}), bias, 1));
    ComputeDAG dag({X, W, bias}, {y});
    const evaluated_dag e(dag, 21);
    const int64_t n = dag.outputs()[0].num_elements();
    std::mt19937_64 rng(21);
    std::vector<int64_t> points{n - 1, 0, 5, 5};
    for (int k = 0; k < 200; ++k) points.push_back(static_cast<int64_t>(rng() % n));
    CHECK(mismatches(dag, e, 0, points) == 0);
    CHECK(evaluate_points(dag, e.inputs, 0, {}).empty());
  }

  TEST_CASE("evaluate_points computes only the points' dependence cones, each element once") {
    const int64_t n = int64_t{1} << 16;
    const int levels = 10;
    ComputeDAG dag = stencil_chain(n, levels);
    const evaluated_dag e(dag, 31);
    const int64_t last = n - 2 * levels;
    auto computed = [&](const std::vector<int64_t>& points) {
      int64_t count = 0;
      detail::evaluate_points_counted(dag, e.inputs, 0, points, count);
      return count;
    };
    // d steps below the point: 2d + 1 elements, d = 0 .. levels - 1 (level 0 is the input).
    // Evaluated without memoization the same point would cost 3^d elements per level.
    CHECK(computed({7}) == levels * levels);
    // A neighbour shares all but one element per level; a repeat costs nothing.
    CHECK(computed({7, 8, 7}) == levels * levels + levels);
    CHECK(computed({0, last - 1}) == 2 * levels * levels);
    CHECK(mismatches(dag, e, 0, {0, 7, 8, last / 2, last - 1}) == 0);
  }

  TEST_CASE("evaluate_points: a GEMM point is one dot product; other outputs are not touched") {
    {
      auto A = placeholder<float>("A", {300, 200});
      auto B = placeholder<float>("B", {200, 400});
      auto C = ops::relu(ops::matmul(A, B));
      auto other =
          compute("other", {1000, 1000}, [&](Var i, Var j) { return A(i % 300, j % 200); });
      ComputeDAG gemm({A, B}, {C, other});
      const auto a = random_vector<float>(300 * 200, 32), b = random_vector<float>(200 * 400, 33);
      int64_t count = 0;
      const auto v =
          detail::evaluate_points_counted(gemm, {a.data(), b.data()}, 0, {0, 401, 119999}, count);
      CHECK(count == 6);  // per point: its relu element and its matmul element
      float want = 0;     // the interpreter's summation order: exact equality
      for (int k = 0; k < 200; ++k) want += a[1 * 200 + k] * b[k * 400 + 1];
      CHECK(v[1] == std::max(want, 0.0f));
    }
  }

  TEST_CASE("evaluate_points reports misuse and out-of-bounds reads") {
    auto A = placeholder<float>("A", {3, 4});
    auto B = placeholder<float>("B", {4, 4});
    auto C = compute("C", {3, 4}, [&](Var i, Var j) { return A(i, j) + B(i, j); });
    ComputeDAG dag({A, B}, {C});
    std::vector<float> a(12), b(16);
    CHECK_THROWS_WITH_AS(evaluate_points(dag, {a.data()}, 0, {0}),
                         "[loom.dag.E214] evaluate_points got 1 inputs but the DAG has 2 inputs",
                         user_error);
    CHECK_THROWS_WITH_AS(evaluate_points(dag, {a.data(), nullptr}, 0, {0}),
                         "[loom.dag.E215] input 1 (tensor 'B') is null", user_error);
    CHECK_THROWS_WITH_AS(evaluate_points(dag, {a.data(), b.data()}, 1, {0}),
                         "[loom.dag.E216] evaluate_points: output 1 is out of range (the DAG has 1 "
                         "outputs)",
                         user_error);
    CHECK_THROWS_WITH_AS(evaluate_points(dag, {a.data(), b.data()}, 0, {0, 12}),
                         "[loom.dag.E217] evaluate_points: point 1 (flat index 12) is out of "
                         "range for output 'C' of 12 elements",
                         user_error);
    CHECK_THROWS_WITH_AS(evaluate_points(dag, {a.data(), b.data()}, 0, {-1}),
                         doctest::Contains("[loom.dag.E217] evaluate_points: point 0 (flat index "
                                           "-1)"),
                         user_error);

    // Y's last element reads past X: evaluate() fails, points outside that cone do not.
    auto X = placeholder<float>("X", {4});
    auto Y = compute("Y", {4}, [&](Var i) { return X(i + 1); });
    auto Z = compute("Z", {4}, [&](Var i) { return Y(i) * 2.0f; });
    ComputeDAG shifted({X}, {Z});
    std::vector<float> x{1, 2, 3, 4};
    CHECK(evaluate_points(shifted, {x.data()}, 0, {0, 2}) == std::vector<double>{4, 8});
    CHECK_THROWS_WITH_AS(evaluate_points(shifted, {x.data()}, 0, {3}),
                         "[loom.dag.E212] compute 'Y' reads 'X' out of bounds: index 4 in "
                         "dimension 0 (extent 4), at [4]",
                         user_error);
  }
}
