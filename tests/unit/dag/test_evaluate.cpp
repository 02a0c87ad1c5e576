// The reference interpreter against plainly written loops.
#include <doctest/doctest.h>
#include <loom/loom.hpp>

#include <cmath>
#include <limits>

#include "support/random.hpp"

using namespace loom;
using loom_test::random_vector;

TEST_SUITE("dag") {
  TEST_CASE("matmul + bias + relu agrees with a plain loop") {
    const int64_t M = 13, N = 17, K = 19;
    auto A = placeholder<float>("A", {M, K});
    auto B = placeholder<float>("B", {K, N});
    auto bias = placeholder<float>("bias", {N});
    auto k = reduce_axis(K, "k");
    auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
    auto D = compute("D", {M, N}, [&](Var i, Var j) { return max(C(i, j) + bias(j), 0.0f); });
    ComputeDAG dag({A, B, bias}, {D});
    auto a = random_vector<float>(M * K, 1), b = random_vector<float>(K * N, 2),
         bb = random_vector<float>(N, 3);
    std::vector<float> d(M * N, -1.0f);
    evaluate(dag, {a.data(), b.data(), bb.data(), d.data()});
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0;  // same summation order as the interpreter: exact equality
        for (int64_t kk = 0; kk < K; ++kk) acc += a[i * K + kk] * b[kk * N + j];
        CHECK(d[i * N + j] == std::max(acc + bb[j], 0.0f));
      }
  }

  TEST_CASE("padding reads out of bounds only in the branch not taken") {
    const int64_t H = 5;
    auto X = placeholder<float>("X", {H});
    auto r = reduce_axis(3, "r");
    auto Y = compute("Y", {H}, [&](Var i) {
      return sum(if_then_else(i + r - 1 >= 0 && i + r - 1 < H, X(i + r - 1), 0.0f), r);
    });
    ComputeDAG dag({X}, {Y});
    std::vector<float> x{1, 2, 3, 4, 5}, y(H);
    evaluate(dag, {x.data(), y.data()});
    CHECK(y == std::vector<float>{3, 6, 9, 12, 9});
  }

  TEST_CASE("out-of-bounds reads are reported") {
    auto X = placeholder<float>("X", {4});
    auto Y = compute("Y", {4}, [&](Var i) { return X(i + 1); });
    ComputeDAG dag({X}, {Y});
    std::vector<float> x(4), y(4);
    CHECK_THROWS_WITH_AS(evaluate(dag, {x.data(), y.data()}),
                         "[loom.dag.E212] compute 'Y' reads 'X' out of bounds: index 4 in "
                         "dimension 0 (extent 4), at [4]",
                         user_error);
    CHECK_THROWS_WITH_AS(evaluate(dag, {x.data()}),
                         "[loom.dag.E210] evaluate got 1 buffers but the DAG has 2 arguments (1 "
                         "inputs, then 1 outputs)",
                         user_error);
    CHECK_THROWS_WITH_AS(evaluate(dag, {x.data(), nullptr}),
                         "[loom.dag.E213] buffer 1 (tensor 'Y') is null", user_error);
  }

  TEST_CASE("reductions: max, min, prod, conditional sum, several axes") {
    auto X = placeholder<double>("X", {3, 4, 5});
    auto a = reduce_axis(4, "a"), b = reduce_axis(5, "b");
    auto mx = compute("mx", {3}, [&](Var i) { return max(X(i, a, b), {a, b}); });
    auto mn = compute("mn", {3}, [&](Var i) { return min(X(i, a, b), {a, b}); });
    auto pr = compute("pr", {3}, [&](Var i) { return prod(X(i, a, b) + 1.0, {a, b}); });
    auto cs = compute("cs", {3}, [&](Var i) { return sum(X(i, a, b), {a, b}, a < b && b < 3); });
    ComputeDAG dag({X}, {mx, mn, pr, cs});
    auto x = random_vector<double>(60, 7);
    std::vector<double> o1(3), o2(3), o3(3), o4(3);
    evaluate(dag, {x.data(), o1.data(), o2.data(), o3.data(), o4.data()});
    for (int i = 0; i < 3; ++i) {
      double m1 = -INFINITY, m2 = INFINITY, p = 1, s = 0;
      for (int aa = 0; aa < 4; ++aa)
        for (int bb = 0; bb < 5; ++bb) {
          double v = x[i * 20 + aa * 5 + bb];
          m1 = std::max(m1, v);
          m2 = std::min(m2, v);
          p *= v + 1.0;
          if (aa < bb && bb < 3) s += v;
        }
      CHECK(o1[i] == m1);
      CHECK(o2[i] == m2);
      CHECK(o3[i] == p);
      CHECK(o4[i] == s);
    }
  }

  TEST_CASE("integer arithmetic wraps at its width and floor division rounds down") {
    auto X = placeholder<int32_t>("X", {4});
    auto w = compute("w", {4}, [&](Var i) { return X(i) * 65536 * 65536 + X(i) * 2147483647; });
    auto fd = compute("fd", {4}, [&](Var i) { return floordiv(X(i), 3) * 10 + floormod(X(i), 3); });
    auto td = compute("td", {4}, [&](Var i) { return X(i) / 3 * 10 + X(i) % 3; });
    ComputeDAG dag({X}, {w, fd, td});
    std::vector<int32_t> x{-7, -1, 5, 100000}, o1(4), o2(4), o3(4);
    evaluate(dag, {x.data(), o1.data(), o2.data(), o3.data()});
    for (int i = 0; i < 4; ++i) {
      uint32_t u = static_cast<uint32_t>(x[i]);
      CHECK(o1[i] == static_cast<int32_t>(u * 65536u * 65536u + u * 2147483647u));
      int32_t q = x[i] / 3, r = x[i] % 3;
      if (r != 0 && x[i] < 0) --q, r += 3;
      CHECK(o2[i] == q * 10 + r);
      CHECK(o3[i] == x[i] / 3 * 10 + x[i] % 3);
    }
    auto Z = compute("Z", {4}, [&](Var i) { return X(i) / (X(i) - X(i)); });
    ComputeDAG zdag({X}, {Z});
    CHECK_THROWS_WITH_AS(evaluate(zdag, {x.data(), o1.data()}),
                         "[loom.dag.E211] integer division by zero in compute 'Z'", user_error);
  }

  TEST_CASE("float32 math rounds like float arithmetic") {
    auto X = placeholder<float>("X", {64});
    auto Y = compute("Y", {64}, [&](Var i) {
      return exp(X(i)) * sigmoid(X(i)) + tanh(X(i)) - erf(X(i)) / (abs(X(i)) + 1.0f) +
             pow(abs(X(i)), 1.5f) + rsqrt(X(i) * X(i) + 1.0f) + floor(X(i) * 3.0f) + ceil(X(i));
    });
    ComputeDAG dag({X}, {Y});
    auto x = random_vector<float>(64, 11, -3, 3);
    std::vector<float> y(64);
    evaluate(dag, {x.data(), y.data()});
    for (int i = 0; i < 64; ++i) {
      float v = x[i];
      float ref = std::exp(v) * (1.0f / (1.0f + std::exp(-v))) + std::tanh(v) -
                  std::erf(v) / (std::fabs(v) + 1.0f) + std::pow(std::fabs(v), 1.5f) +
                  1.0f / std::sqrt(v * v + 1.0f) + std::floor(v * 3.0f) + std::ceil(v);
      CHECK(y[i] == ref);
    }
  }

  TEST_CASE("casts between element types") {
    auto X = placeholder<float>("X", {4});
    auto I = compute("I", {4}, [&](Var i) { return cast<int64_t>(X(i)) + i; });
    auto D = compute("D", {4}, [&](Var i) { return cast<double>(X(i)) * 0.1; });
    ComputeDAG dag({X}, {I, D});
    std::vector<float> x{-2.7f, -0.5f, 0.5f, 3.9f};
    std::vector<int64_t> oi(4);
    std::vector<double> od(4);
    evaluate(dag, {x.data(), oi.data(), od.data()});
    CHECK(oi == std::vector<int64_t>{-2, 1, 2, 6});
    for (int i = 0; i < 4; ++i) CHECK(od[i] == static_cast<double>(x[i]) * 0.1);
  }

  TEST_CASE("a gather through an integer tensor") {
    auto X = placeholder<float>("X", {5});
    auto idx = placeholder<int32_t>("idx", {3});
    auto G = compute("G", {3}, [&](Var i) { return X(idx(i)); });
    ComputeDAG dag({X, idx}, {G});
    std::vector<float> x{10, 11, 12, 13, 14}, g(3);
    std::vector<int32_t> ix{4, 0, 2};
    evaluate(dag, {x.data(), ix.data(), g.data()});
    CHECK(g == std::vector<float>{14, 10, 12});
  }
}
