// The expression-template front end: what it builds and the run-time errors it raises.
// Compile-time misuse is covered by tests/compile_fail.
#include <doctest/doctest.h>
#include <loom/loom.hpp>

#include <sstream>

using namespace loom;

TEST_SUITE("dsl") {
  TEST_CASE("the issue's matmul + bias + relu program builds the expected IR") {
    const int64_t M = 64, N = 48, K = 32;
    auto A = placeholder<float>("A", {M, K});
    auto B = placeholder<float>("B", {K, N});
    auto bias = placeholder<float>("bias", {N});
    auto k = reduce_axis(K, "k");
    auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
    auto D = compute("D", {M, N}, [&](Var i, Var j) { return max(C(i, j) + bias(j), 0.0f); });
    static_assert(std::is_same_v<decltype(C), Tensor<float, 2>>);
    static_assert(std::is_same_v<decltype(D), Tensor<float, 2>>);
    CHECK(ir::to_string(C.ir()) == "C[i0, i1] = sum(A[i0, k]*B[k, i1], axis=[k:32])");
    CHECK(ir::to_string(D.ir()) == "D[i0, i1] = max(C[i0, i1] + bias[i1], 0.0f)");
    CHECK(D.shape() == std::array<int64_t, 2>{M, N});
  }

  TEST_CASE("literals adopt the element type of the other operand") {
    auto X = placeholder<double>("X", {4});
    auto Y = placeholder<int32_t>("Y", {4});
    auto a = compute("a", {4}, [&](Var i) { return X(i) * 2 + 1; });
    auto b = compute("b", {4}, [&](Var i) { return Y(i) * 3 - 1; });
    auto c = compute("c", {4}, [&](Var i) { return cast<float>(Y(i)) / 2.0; });
    static_assert(std::is_same_v<decltype(a)::value_type, double>);
    static_assert(std::is_same_v<decltype(b)::value_type, int32_t>);
    static_assert(std::is_same_v<decltype(c)::value_type, float>);
    CHECK(ir::to_string(a.ir()) == "a[i0] = X[i0]*2.0 + 1.0");
    CHECK(ir::to_string(b.ir()) == "b[i0] = Y[i0]*int32(3) - int32(1)");
    CHECK(ir::to_string(c.ir()) == "c[i0] = float32(Y[i0])/2.0f");
  }

  TEST_CASE("several reduce axes, affine indices and padding with if_then_else") {
    const int64_t N = 1, C = 3, H = 8, W = 8, K = 4;
    auto X = placeholder<float>("X", {N, C, H, W});
    auto Wt = placeholder<float>("W", {K, C, 3, 3});
    auto rc = reduce_axis(C, "rc"), ry = reduce_axis(3, "ry"), rx = reduce_axis(3, "rx");
    auto out = compute("conv", {N, K, H / 2, W / 2}, [&](Var n, Var f, Var y, Var x) {
      auto iy = y * 2 + ry - 1;
      auto ix = x * 2 + rx - 1;
      auto in_bounds = iy >= 0 && iy < H && ix >= 0 && ix < W;
      return sum(if_then_else(in_bounds, X(n, rc, iy, ix), 0.0f) * Wt(f, rc, ry, rx), {rc, ry, rx});
    });
    CHECK(ir::to_string(out.ir()) ==
          "conv[i0, i1, i2, i3] = sum(if_then_else(i2*2 + ry - 1 >= 0 && i2*2 + ry - 1 < 8 && "
          "i3*2 + rx - 1 >= 0 && i3*2 + rx - 1 < 8, X[i0, rc, i2*2 + ry - 1, i3*2 + rx - 1], 0.0f)"
          "*W[i1, rc, ry, rx], axis=[rc:3, ry:3, rx:3])");
  }

  TEST_CASE("max/min/prod reductions and reductions with a condition") {
    auto X = placeholder<float>("X", {5, 7});
    auto k = reduce_axis(7, "k");
    auto mx = compute("mx", {5}, [&](Var i) { return max(X(i, k), k); });
    auto mn = compute("mn", {5}, [&](Var i) { return min(X(i, k), k); });
    auto pr = compute("pr", {5}, [&](Var i) { return prod(X(i, k), k); });
    auto tri = compute("tri", {5}, [&](Var i) { return sum(X(i, k), k, k <= i); });
    CHECK(ir::to_string(mx.ir()) == "mx[i0] = max(X[i0, k], axis=[k:7])");
    CHECK(ir::to_string(mn.ir()) == "mn[i0] = min(X[i0, k], axis=[k:7])");
    CHECK(ir::to_string(pr.ir()) == "pr[i0] = prod(X[i0, k], axis=[k:7])");
    CHECK(ir::to_string(tri.ir()) == "tri[i0] = sum(X[i0, k], axis=[k:7], where=k <= i0)");
  }

  TEST_CASE("math, comparisons, logic and casts map to IR nodes") {
    auto X = placeholder<float>("X", {3});
    auto I = placeholder<int64_t>("I", {3});
    auto e = compute("e", {3}, [&](Var i) {
      return exp(X(i)) + log(X(i)) + sqrt(X(i)) + rsqrt(X(i)) + tanh(X(i)) + sigmoid(X(i)) +
             erf(X(i)) + pow(X(i), 2.0f) + abs(X(i)) + floor(X(i)) + ceil(X(i)) - X(i);
    });
    CHECK(ir::to_string(e.ir()) ==
          "e[i0] = exp(X[i0]) + log(X[i0]) + sqrt(X[i0]) + rsqrt(X[i0]) + tanh(X[i0]) + "
          "sigmoid(X[i0]) + erf(X[i0]) + pow(X[i0], 2.0f) + abs(X[i0]) + floor(X[i0]) + "
          "ceil(X[i0]) - X[i0]");
    auto g = compute("g", {3}, [&](Var i) {
      return if_then_else(!(I(i) == 2) || X(i) != 0.0f, -X(i), cast<float>(floordiv(I(i), 2)));
    });
    CHECK(ir::to_string(g.ir()) ==
          "g[i0] = if_then_else(!(I[i0] == 2) || X[i0] != 0.0f, 0.0f - X[i0], "
          "float32(floordiv(I[i0], 2)))");
    auto step = compute("step", {3}, [&](Var i) { return if_then_else(X(i) > 0.0f, 1.0f, 0.0f); });
    CHECK(ir::to_string(step.ir()) == "step[i0] = if_then_else(X[i0] > 0.0f, 1.0f, 0.0f)");
    // An int64 tensor value can index another tensor (a gather).
    auto gather = compute("gather", {3}, [&](Var i) { return X(I(i)); });
    CHECK(ir::to_string(gather.ir()) == "gather[i0] = X[I[i0]]");
  }

  TEST_CASE("run-time misuse throws loom::user_error with a clear message") {
    auto X = placeholder<float>("X", {4, 4});
    auto k = reduce_axis(4, "k");
    CHECK_THROWS_WITH_AS(compute("bad", {4}, [&](Var i) { return X(i, k); }),
                         "[loom.dsl.E104] reduce axis 'k' is used outside a reduction in compute "
                         "'bad'; use it only inside sum/min/max/prod over 'k'",
                         user_error);
    CHECK_THROWS_WITH_AS(
        reduce_axis(0, "r"),
        "[loom.dsl.E101] reduce_axis 'r' has extent 0; the extent must be positive", user_error);
    CHECK_THROWS_WITH_AS(placeholder<float>("Z", {4, -1}),
                         "[loom.ir.E029] tensor 'Z' has extent -1 in dimension 1; extents must be "
                         "positive",
                         user_error);
    CHECK_THROWS_WITH_AS((Tensor<double, 2>(X.ir())),
                         "[loom.dsl.E106] tensor 'X' is float32 of rank 2, not float64 of rank 2",
                         user_error);
    auto k2 = reduce_axis(4, "k2");
    CHECK_THROWS_WITH_AS(compute("nested", {4}, [&](Var i) { return sum(sum(X(i, k), k), k2); }),
                         "[loom.dsl.E105] a reduction inside a reduction in compute 'nested'; "
                         "compute the inner reduction in its own tensor",
                         user_error);
  }

  TEST_CASE("a DSL expression can be stored and reused after its operands go out of scope") {
    auto X = placeholder<float>("X", {4});
    auto make = [&]() {
      auto two = Const<float>(2.0f);
      return [=](Var i) { return X(i) * two + 1.0f; };
    };
    auto f = make();
    auto Y = compute("Y", {4}, f);
    CHECK(ir::to_string(Y.ir()) == "Y[i0] = X[i0]*2.0f + 1.0f");
  }
}
