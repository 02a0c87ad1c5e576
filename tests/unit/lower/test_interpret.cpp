// The loop-nest interpreter against plainly written loops, on hand-built lowered kernels.
#include <doctest/doctest.h>
#include <loom/loom.hpp>
#include <loom/lower/interpret.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/random.hpp"

using loom::user_error;
using loom::lower::interpret;
using loom_test::random_vector;
using namespace loom::ir;

namespace {

/// `for (v, min, extent)` with constant bounds.
Stmt loop(const Expr& v, int64_t extent, Stmt body, ForKind kind = ForKind::Serial,
          int64_t min = 0) {
  return For::make(v, Expr(min), Expr(extent), kind, std::move(body));
}

Expr f32(float v) { return FloatImm::make(DType::f32(), v); }
Expr i32(int64_t v) { return IntImm::make(DType::i32(), v); }

LoweredFunc kernel(std::string name, std::vector<Buffer> args, Stmt body) {
  return LoweredFunc{std::move(name), std::move(args), std::move(body)};
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("a matmul loop nest agrees with a plain loop") {
    const int64_t M = 64, N = 96, K = 128;  // 786k inner iterations
    Buffer A = make_buffer("A", DType::f32(), {M, K}, MemoryScope::Global, 0);
    Buffer B = make_buffer("B", DType::f32(), {K, N}, MemoryScope::Global, 1);
    Buffer C = make_buffer("C", DType::f32(), {M, N}, MemoryScope::Global, 2);
    Expr i = Variable::make("i"), j = Variable::make("j"), k = Variable::make("k");
    Expr c_ij = i * N + j;
    Stmt update = Store::make(
        C, c_ij, Load::make(C, c_ij) + Load::make(A, i * K + k) * Load::make(B, k * N + j));
    Stmt body =
        loop(i, M, loop(j, N, Block::make({Store::make(C, c_ij, f32(0)), loop(k, K, update)})));
    auto a = random_vector<float>(M * K, 1), b = random_vector<float>(K * N, 2);
    std::vector<float> c(M * N, -1.0f);
    interpret(kernel("matmul", {A, B, C}, body), {a.data(), b.data(), c.data()});
    for (int64_t ii = 0; ii < M; ++ii)
      for (int64_t jj = 0; jj < N; ++jj) {
        float acc = 0;  // same summation order as the kernel: exact equality
        for (int64_t kk = 0; kk < K; ++kk) acc += a[ii * K + kk] * b[kk * N + jj];
        REQUIRE(c[ii * N + jj] == acc);
      }
  }

  TEST_CASE("a tiled matmul with a local accumulator: init, update, write back") {
    const int64_t M = 32, N = 48, K = 20, TI = 8, TJ = 16;
    Buffer A = make_buffer("A", DType::f32(), {M, K}, MemoryScope::Global, 0);
    Buffer B = make_buffer("B", DType::f32(), {K, N}, MemoryScope::Global, 1);
    Buffer C = make_buffer("C", DType::f32(), {M, N}, MemoryScope::Global, 2);
    Buffer acc = make_buffer("C.local", DType::f32(), {TI, TJ}, MemoryScope::Local);
    Expr io = Variable::make("i.o"), jo = Variable::make("j.o"), k = Variable::make("k");
    Expr ii = Variable::make("i.i"), ji = Variable::make("j.i");
    Expr a_idx = ii * TJ + ji;
    // Every loop kind runs serially here, so the annotations must not change the result.
    Stmt init = loop(ii, TI, loop(ji, TJ, Store::make(acc, a_idx, f32(0)), ForKind::Vectorized));
    Stmt update = loop(
        k, K,
        loop(ii, TI,
             loop(ji, TJ,
                  Store::make(acc, a_idx,
                              Load::make(acc, a_idx) + Load::make(A, (io * TI + ii) * K + k) *
                                                           Load::make(B, k * N + jo * TJ + ji)),
                  ForKind::Vectorized),
             ForKind::Unrolled));
    Stmt write_back = loop(
        ii, TI,
        loop(ji, TJ, Store::make(C, (io * TI + ii) * N + jo * TJ + ji, Load::make(acc, a_idx))));
    Stmt body = loop(io, M / TI,
                     loop(jo, N / TJ, Allocate::make(acc, Block::make({init, update, write_back}))),
                     ForKind::Parallel);
    auto a = random_vector<float>(M * K, 3), b = random_vector<float>(K * N, 4);
    std::vector<float> c(M * N, -1.0f);
    interpret(kernel("tiled", {A, B, C}, body), {a.data(), b.data(), c.data()});
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float s = 0;
        for (int64_t kk = 0; kk < K; ++kk) s += a[i * K + kk] * b[kk * N + j];
        REQUIRE(c[i * N + j] == s);
      }
  }

  TEST_CASE("vectorized elementwise code with Ramp and Broadcast") {
    for (int lanes : {8, 16}) {
      CAPTURE(lanes);
      const int64_t N = 64;
      Buffer X = make_buffer("X", DType::f32(), {N}, MemoryScope::Global, 0);
      Buffer bias = make_buffer("bias", DType::f32(), {1}, MemoryScope::Global, 1);
      Buffer Y = make_buffer("Y", DType::f32(), {N}, MemoryScope::Global, 2);
      Buffer Z = make_buffer("Z", DType::f32(), {N / 2}, MemoryScope::Global, 3);
      Expr o = Variable::make("o");
      Expr x = Load::make(X, Ramp::make(o * lanes, Expr(1), lanes));
      // y = max(exp(x) * 2.5 + bias[0], 0): a Call, a Broadcast of a constant and of a scalar load.
      Expr y = max(Call::make(CallOp::exp, {x}) * Broadcast::make(f32(2.5f), lanes) +
                       Broadcast::make(Load::make(bias, Expr(0)), lanes),
                   Broadcast::make(f32(0), lanes));
      // z gathers every other element of x with a stride-2 Ramp.
      Expr half = lanes / 2;
      Stmt body = Block::make(
          {loop(o, N / lanes, Store::make(Y, Ramp::make(o * lanes, Expr(1), lanes), y)),
           loop(o, N / lanes,
                Store::make(Z, Ramp::make(o * half, Expr(1), lanes / 2),
                            Load::make(X, Ramp::make(o * lanes, Expr(2), lanes / 2))))});
      auto xs = random_vector<float>(N, 5, -3.0, 3.0);
      std::vector<float> bs{-4.0f}, ys(N, -1.0f), zs(N / 2, -1.0f);
      interpret(kernel("elementwise", {X, bias, Y, Z}, body),
                {xs.data(), bs.data(), ys.data(), zs.data()});
      for (int64_t n = 0; n < N; ++n) {
        CAPTURE(n);
        float expected = std::exp(xs[n]) * 2.5f + bs[0];
        CHECK(ys[n] == std::max(expected, 0.0f));
      }
      for (int64_t n = 0; n < N / 2; ++n) CHECK(zs[n] == xs[2 * n]);
    }
  }

  TEST_CASE("a vector Select is lazy lane by lane, so padded reads stay in bounds") {
    Buffer X = make_buffer("X", DType::f32(), {6}, MemoryScope::Global, 0);
    Buffer Y = make_buffer("Y", DType::f32(), {8}, MemoryScope::Global, 1);
    Expr idx = Ramp::make(Expr(-2), Expr(1), 8);
    Expr v = Select::make(idx >= Broadcast::make(Expr(0), 8), Load::make(X, idx),
                          Broadcast::make(f32(0), 8));
    std::vector<float> x{1, 2, 3, 4, 5, 6}, y(8, -1.0f);
    interpret(kernel("pad", {X, Y}, Store::make(Y, Ramp::make(Expr(0), Expr(1), 8), v)),
              {x.data(), y.data()});
    CHECK(y == std::vector<float>{0, 0, 1, 2, 3, 4, 5, 6});
  }

  TEST_CASE("a non-divisible split runs under an IfThenElse guard") {
    const int64_t N = 10, F = 4;
    Buffer X = make_buffer("X", DType::f32(), {N}, MemoryScope::Global, 0);
    Buffer Y = make_buffer("Y", DType::f32(), {N}, MemoryScope::Global, 1);
    Expr o = Variable::make("o"), i = Variable::make("i");
    Expr n = o * F + i;
    Stmt store = Store::make(Y, n, Load::make(X, n) + f32(1));
    auto x = random_vector<float>(N, 6);
    std::vector<float> y(N, -1.0f);
    Stmt guarded = loop(o, (N + F - 1) / F, loop(i, F, IfThenElse::make(n < N, store)));
    interpret(kernel("split", {X, Y}, guarded), {x.data(), y.data()});
    for (int64_t k = 0; k < N; ++k) CHECK(y[k] == x[k] + 1.0f);

    // The same nest without its guard overruns in the last outer iteration.
    Stmt unguarded = loop(o, (N + F - 1) / F, loop(i, F, store));
    CHECK_THROWS_WITH_AS(interpret(kernel("split", {X, Y}, unguarded), {x.data(), y.data()}),
                         "[loom.lower.E401] kernel 'split' reads buffer 'X' out of bounds at "
                         "index 10 (size 10), with o = 2, i = 2",
                         user_error);

    // An else branch and a loop that does not start at zero.
    Stmt both = loop(i, N - 3,
                     IfThenElse::make(i < 7, Store::make(Y, i, f32(1)), Store::make(Y, i, f32(2))),
                     ForKind::Serial, 3);
    std::fill(y.begin(), y.end(), 0.0f);
    interpret(kernel("else", {X, Y}, both), {x.data(), y.data()});
    CHECK(y == std::vector<float>{0, 0, 0, 1, 1, 1, 1, 2, 2, 2});
  }

  TEST_CASE("int32 arithmetic wraps around") {
    Buffer A = make_buffer("A", DType::i32(), {4}, MemoryScope::Global, 0);
    Buffer B = make_buffer("B", DType::i32(), {6}, MemoryScope::Global, 1);
    Buffer L = make_buffer("L", DType::i64(), {1}, MemoryScope::Global, 2);
    Expr a0 = Load::make(A, Expr(0)), a1 = Load::make(A, Expr(1)), a2 = Load::make(A, Expr(2));
    Expr a3 = Load::make(A, Expr(3));
    Stmt body = Block::make({
        Store::make(B, Expr(0), a0 + i32(1)),             // INT32_MAX + 1
        Store::make(B, Expr(1), a1 * a1),                 // 65536^2
        Store::make(B, Expr(2), Div::make(a2, i32(-1))),  // INT32_MIN / -1
        Store::make(B, Expr(3), Cast::make(DType::i32(), Load::make(L, Expr(0)))),  // truncation
        Store::make(B, Expr(4), Sub::make(a2, i32(1))),                             // INT32_MIN - 1
        Store::make(B, Expr(5), FloorDiv::make(a3, i32(2)) + Mod::make(a3, i32(2)) * i32(100)),
    });
    std::vector<int32_t> a{std::numeric_limits<int32_t>::max(), 65536,
                           std::numeric_limits<int32_t>::min(), -7};
    std::vector<int32_t> b(6, 0);
    std::vector<int64_t> l{(int64_t{1} << 32) + 5};
    interpret(kernel("wrap", {A, B, L}, body), {a.data(), b.data(), l.data()});
    CHECK(b[0] == std::numeric_limits<int32_t>::min());
    CHECK(b[1] == 0);
    CHECK(b[2] == std::numeric_limits<int32_t>::min());
    CHECK(b[3] == 5);
    CHECK(b[4] == std::numeric_limits<int32_t>::max());
    CHECK(b[5] == -4 + -1 * 100);  // floor(-7 / 2) = -4; C's -7 % 2 = -1
  }

  TEST_CASE("int64 floor division and modulo round towards negative infinity") {
    Buffer X = make_buffer("X", DType::i64(), {3}, MemoryScope::Global, 0);
    Buffer Y = make_buffer("Y", DType::i64(), {3}, MemoryScope::Global, 1);
    Buffer Q = make_buffer("Q", DType::i64(), {9}, MemoryScope::Global, 2);
    Buffer R = make_buffer("R", DType::i64(), {9}, MemoryScope::Global, 3);
    Expr i = Variable::make("i"), j = Variable::make("j");
    Expr x = Load::make(X, i), y = Load::make(Y, j);
    Stmt body = loop(i, 3,
                     loop(j, 3,
                          Block::make({Store::make(Q, i * 3 + j, floordiv(x, y)),
                                       Store::make(R, i * 3 + j, floormod(x, y))})));
    const int64_t lo = std::numeric_limits<int64_t>::min();
    std::vector<int64_t> xs{-7, 7, lo}, ys{2, -2, 3}, q(9), r(9);
    interpret(kernel("floor", {X, Y, Q, R}, body), {xs.data(), ys.data(), q.data(), r.data()});
    CHECK(q == std::vector<int64_t>{-4, 3, -3, 3, -4, 2, lo / 2, lo / -2, lo / 3 - 1});
    CHECK(r == std::vector<int64_t>{1, -1, 2, 1, -1, 1, 0, 0, 1});
  }

  TEST_CASE("float64, uint8 and bool buffers") {
    const DType u8{DType::Code::UInt, 8, 1};
    Buffer D = make_buffer("D", DType::f64(), {2}, MemoryScope::Global, 0);
    Buffer U = make_buffer("U", u8, {2}, MemoryScope::Global, 1);
    Buffer P = make_buffer("P", DType::boolean(), {2}, MemoryScope::Global, 2);
    Expr i = Variable::make("i");
    Expr d = Load::make(D, i);
    Stmt body = loop(i, 2,
                     Block::make({
                         Store::make(D, i, d * d + 0.1),  // float64 keeps its precision
                         Store::make(U, i, Load::make(U, i) + IntImm::make(u8, 200)),
                         Store::make(P, i, Load::make(D, i) > 1.0),
                     }));
    std::vector<double> ds{1.5, 0.25};
    std::vector<uint8_t> us{100, 7};
    bool ps[2] = {false, true};
    interpret(kernel("types", {D, U, P}, body), {ds.data(), us.data(), ps});
    CHECK(ds == std::vector<double>{1.5 * 1.5 + 0.1, 0.25 * 0.25 + 0.1});
    CHECK(us == std::vector<uint8_t>{44, 207});  // 300 wraps to 44
    CHECK(ps[0]);
    CHECK(!ps[1]);
  }

  TEST_CASE("integer division by zero is reported") {
    Buffer A = make_buffer("A", DType::i32(), {2}, MemoryScope::Global, 0);
    Expr i = Variable::make("i");
    Stmt body = loop(i, 2, Store::make(A, i, Mod::make(i32(7), Load::make(A, i))));
    std::vector<int32_t> a{3, 0};
    CHECK_THROWS_WITH_AS(interpret(kernel("div", {A}, body), {a.data()}),
                         "[loom.lower.E402] integer division by zero in kernel 'div', with i = 1",
                         user_error);
    CHECK(a[0] == 1);
  }

  TEST_CASE("nested allocations, and an inner Allocate shadowing an outer one") {
    Buffer X = make_buffer("X", DType::f32(), {4}, MemoryScope::Global, 0);
    Buffer Y = make_buffer("Y", DType::f32(), {12}, MemoryScope::Global, 1);
    Buffer t1 = make_buffer("t1", DType::f32(), {4}, MemoryScope::Local);
    Buffer t2 = make_buffer("t2", DType::f32(), {2, 2}, MemoryScope::Shared);
    Expr i = Variable::make("i"), j = Variable::make("j");
    Expr jf = Cast::make(DType::f32(), j);
    Stmt inner =
        Allocate::make(t2, Block::make({loop(i, 4, Store::make(t2, i, Load::make(t1, i) + jf)),
                                        loop(i, 4, Store::make(Y, j * 4 + i, Load::make(t2, i)))}));
    // t1 again, inside t1: writes to the inner one must not reach the outer one.
    Stmt shadow = Allocate::make(t1, loop(i, 4, Store::make(t1, i, f32(-100))));
    Stmt body =
        Allocate::make(t1, Block::make({loop(i, 4, Store::make(t1, i, Load::make(X, i) * f32(2))),
                                        loop(j, 2, Block::make({inner, shadow})),
                                        loop(i, 4, Store::make(Y, 8 + i, Load::make(t1, i)))}));
    std::vector<float> x{1, 2, 3, 4}, y(12, -1.0f);
    interpret(kernel("nested", {X, Y}, body), {x.data(), y.data()});
    CHECK(y == std::vector<float>{2, 4, 6, 8, 3, 5, 7, 9, 2, 4, 6, 8});
  }

  TEST_CASE("a loop variable rebound by an inner loop is restored after it") {
    Buffer Y = make_buffer("Y", DType::i64(), {6}, MemoryScope::Global, 0);
    Expr i = Variable::make("i");
    // for i in 0..2 { for i in 0..2 { Y[i] = 1 }; Y[2 + i * 2] = i }
    Stmt body = loop(
        i, 2,
        Block::make({loop(i, 2, Store::make(Y, i, Expr(1))), Store::make(Y, 2 + i * 2, i + 10)}));
    std::vector<int64_t> y(6, 0);
    interpret(kernel("shadow", {Y}, body), {y.data()});
    CHECK(y == std::vector<int64_t>{1, 1, 10, 0, 11, 0});
  }

  TEST_CASE("reading an uninitialised allocation yields the poison value") {
    Buffer Y = make_buffer("Y", DType::f32(), {4}, MemoryScope::Global, 0);
    Buffer Z = make_buffer("Z", DType::i32(), {4}, MemoryScope::Global, 1);
    Buffer t = make_buffer("t", DType::f32(), {4}, MemoryScope::Local);
    Buffer u = make_buffer("u", DType::i32(), {4}, MemoryScope::Local);
    Expr i = Variable::make("i");
    Stmt body = Allocate::make(
        t, Allocate::make(u, loop(i, 4,
                                  Block::make({Store::make(Y, i, Load::make(t, i)),
                                               Store::make(Z, i, Load::make(u, i))}))));
    std::vector<float> y(4, 0.0f);
    std::vector<int32_t> z(4, 0);
    interpret(kernel("poison", {Y, Z}, body), {y.data(), z.data()});
    for (float v : y) CHECK(std::isnan(v));
    for (int32_t v : z) CHECK(v == 0x5A5A5A5A);

    // An allocation inside a loop is poisoned again on every entry: what iteration 0 wrote is
    // gone in iteration 1.
    Stmt per_iteration =
        loop(i, 2,
             Allocate::make(t, Block::make({Store::make(Y, i, Load::make(t, Expr(0))),
                                            Store::make(t, Expr(0), f32(1))})));
    std::fill(y.begin(), y.end(), 0.0f);
    interpret(kernel("poison", {Y, Z}, per_iteration), {y.data(), z.data()});
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(y[1]));
  }

  TEST_CASE("out-of-bounds loads and stores are reported with the loop variables") {
    Buffer X = make_buffer("X", DType::f32(), {5}, MemoryScope::Global, 0);
    Buffer Y = make_buffer("Y", DType::f32(), {12}, MemoryScope::Global, 1);
    Expr i = Variable::make("i"), o = Variable::make("o");
    std::vector<float> x(5, 1.0f), y(12, -1.0f);
    SUBCASE("scalar load") {
      Stmt body = loop(i, 5, Store::make(Y, i, Load::make(X, i + 1)));
      CHECK_THROWS_WITH_AS(interpret(kernel("oob", {X, Y}, body), {x.data(), y.data()}),
                           "[loom.lower.E401] kernel 'oob' reads buffer 'X' out of bounds at "
                           "index 5 (size 5), with i = 4",
                           user_error);
    }
    SUBCASE("negative load index outside any loop") {
      Stmt body = Store::make(Y, Expr(0), Load::make(X, Expr(-1)));
      CHECK_THROWS_WITH_AS(interpret(kernel("oob", {X, Y}, body), {x.data(), y.data()}),
                           "[loom.lower.E401] kernel 'oob' reads buffer 'X' out of bounds at "
                           "index -1 (size 5)",
                           user_error);
    }
    SUBCASE("scalar store") {
      Stmt body = loop(o, 2, loop(i, 5, Store::make(Y, o * 8 + i, f32(0))));
      CHECK_THROWS_WITH_AS(interpret(kernel("oob", {X, Y}, body), {x.data(), y.data()}),
                           "[loom.lower.E401] kernel 'oob' writes buffer 'Y' out of bounds at "
                           "index 12 (size 12), with o = 1, i = 4",
                           user_error);
    }
    SUBCASE("vector store: nothing of the failing store is written") {
      Stmt body =
          loop(o, 2, Store::make(Y, Ramp::make(o * 8, Expr(1), 8), Broadcast::make(f32(0), 8)));
      CHECK_THROWS_WITH_AS(interpret(kernel("oob", {X, Y}, body), {x.data(), y.data()}),
                           "[loom.lower.E401] kernel 'oob' writes buffer 'Y' out of bounds at "
                           "index 12 (size 12) in lane 4 of 8, with o = 1",
                           user_error);
      CHECK(y == std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1});
    }
    SUBCASE("vector load") {
      Stmt body = Store::make(Y, Ramp::make(Expr(0), Expr(1), 8),
                              Load::make(X, Ramp::make(Expr(0), Expr(1), 8)));
      CHECK_THROWS_WITH_AS(interpret(kernel("oob", {X, Y}, body), {x.data(), y.data()}),
                           "[loom.lower.E401] kernel 'oob' reads buffer 'X' out of bounds at "
                           "index 5 (size 5) in lane 5 of 8",
                           user_error);
    }
    SUBCASE("an allocation") {
      Buffer t = make_buffer("t", DType::f32(), {4}, MemoryScope::Local);
      Stmt body = Allocate::make(t, loop(i, 5, Store::make(t, i, f32(0))));
      CHECK_THROWS_WITH_AS(interpret(kernel("oob", {X, Y}, body), {x.data(), y.data()}),
                           "[loom.lower.E401] kernel 'oob' writes buffer 't' out of bounds at "
                           "index 4 (size 4), with i = 4",
                           user_error);
    }
  }

  TEST_CASE("bad arguments and malformed kernels are reported") {
    Buffer X = make_buffer("X", DType::f32(), {4}, MemoryScope::Global, 0);
    Buffer Y = make_buffer("Y", DType::f32(), {4}, MemoryScope::Global, 1);
    Buffer t = make_buffer("t", DType::f32(), {4}, MemoryScope::Local);
    Expr i = Variable::make("i"), j = Variable::make("j");
    std::vector<float> x(4), y(4);
    Stmt copy = loop(i, 4, Store::make(Y, i, Load::make(X, i)));
    CHECK_THROWS_WITH_AS(interpret(kernel("k", {X, Y}, copy), {x.data()}),
                         "[loom.lower.E403] kernel 'k' takes 2 buffers but interpret got 1",
                         user_error);
    CHECK_THROWS_WITH_AS(interpret(kernel("k", {X, Y}, copy), {x.data(), nullptr}),
                         "[loom.lower.E403] buffer 1 ('Y') of kernel 'k' is null", user_error);
    CHECK_THROWS_WITH_AS(interpret(kernel("k", {Y, X}, copy), {x.data(), y.data()}),
                         "[loom.lower.E404] argument 0 of kernel 'k' is buffer 'Y' with "
                         "arg_index 1; arguments must be in arg_index order",
                         user_error);
    CHECK_THROWS_WITH_AS(
        interpret(kernel("k", {X, Y}, loop(i, 4, Store::make(Y, j, f32(0)))), {x.data(), y.data()}),
        "[loom.lower.E404] kernel 'k' uses variable 'j' outside the loops that bind it",
        user_error);
    CHECK_THROWS_WITH_AS(
        interpret(kernel("k", {X, Y}, loop(i, 4, Store::make(Y, i, Load::make(t, i)))),
                  {x.data(), y.data()}),
        "[loom.lower.E404] kernel 'k' reads buffer 't', which is neither an argument of the "
        "kernel nor allocated around the access",
        user_error);
    // The loop variable is not bound in the loop's own extent.
    CHECK_THROWS_WITH_AS(
        interpret(kernel("k", {X, Y}, For::make(i, Expr(0), i + 1, ForKind::Serial, copy)),
                  {x.data(), y.data()}),
        "[loom.lower.E404] kernel 'k' uses variable 'i' outside the loops that "
        "bind it",
        user_error);
  }
}
