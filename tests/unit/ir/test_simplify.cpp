// The index-arithmetic simplifier and interval bounds.
#include <doctest/doctest.h>
#include <loom/loom.hpp>

#include <cstdint>
#include <limits>
#include <vector>

using namespace loom::ir;

TEST_SUITE("ir") {
  TEST_CASE("simplifier folds constants and canonicalises linear forms") {
    Expr x = Variable::make("x"), y = Variable::make("y");
    CHECK(to_string(simplify(Expr(3) + 4 * 5)) == "23");
    CHECK(to_string(simplify((x + 3) * 2 - x - x)) == "6");
    CHECK(to_string(simplify(x + y - x)) == "y");
    CHECK(to_string(simplify(x * 2 + y * 3 + x)) == "x*3 + y*3");
    CHECK(to_string(simplify(x - 1 + 1)) == "x");
    CHECK(to_string(simplify(x * 0 + y)) == "y");
    CHECK(to_string(simplify(Expr(0) - x + 5)) == "0 - x + 5");
  }

  TEST_CASE("floordiv and floormod resolve with known ranges") {
    Expr x = Variable::make("x"), y = Variable::make("y");
    RangeMap r{{x.as<Variable>(), Interval::range(16)}, {y.as<Variable>(), Interval::range(4)}};
    CHECK(to_string(simplify(floordiv(x * 4 + y, 4), r)) == "x");
    CHECK(to_string(simplify(floormod(x * 4 + y, 4), r)) == "y");
    CHECK(to_string(simplify(floormod(x * 4 + y + 8, 4), r)) == "y");
    CHECK(to_string(simplify(floordiv(x * 4 + y + 8, 4), r)) == "x + 2");
    CHECK(to_string(simplify(floordiv(floordiv(x, 2), 4), r)) == "floordiv(x, 8)");
    CHECK(to_string(simplify(floordiv(x * 8 + y * 2, 4), r)) == "x*2 + floordiv(y*2, 4)");
    // Without ranges nothing is assumed.
    CHECK(to_string(simplify(floormod(x * 4 + y, 4))) == "floormod(y, 4)");
    // Truncating division becomes floor division only when the dividend is provably >= 0.
    CHECK(to_string(simplify(Div::make(x * 4 + y, Expr(4)), r)) == "x");
    CHECK(to_string(simplify(Div::make(x - 20, Expr(4)), r)) == "(x - 20)/4");
    CHECK(to_string(simplify(floordiv(Expr(-7), 2))) == "-4");
    CHECK(to_string(simplify(floormod(Expr(-7), 2))) == "1");
  }

  TEST_CASE("simplify_substituted equals simplify after substitute, without the copy") {
    Expr x = Variable::make("x"), y = Variable::make("y"), z = Variable::make("z"),
         w = Variable::make("w");
    RangeMap r{{y.as<Variable>(), Interval::range(4)}, {w.as<Variable>(), Interval::range(8)}};
    const SubstitutionMap sub{{x.as<Variable>(), w * 4}, {z.as<Variable>(), Expr(0)}};
    for (const Expr& e :
         {floordiv(x + y, 4), floormod(x + y + z, 4), x * 2 + z - y, min(x, y * 4 + 3)}) {
      CAPTURE(to_string(e));
      CHECK(to_string(simplify_substituted(e, sub, r)) ==
            to_string(simplify(substitute(e, sub), r)));
    }
    CHECK(to_string(simplify_substituted(floordiv(x + y, 4), sub, r)) == "w");
    // Nothing to substitute: plain simplify.
    CHECK(to_string(simplify_substituted(x + y - x, {}, r)) == "y");
  }

  TEST_CASE("min, max, comparisons and selects use bounds") {
    Expr x = Variable::make("x"), y = Variable::make("y");
    RangeMap r{{x.as<Variable>(), Interval::range(8)}, {y.as<Variable>(), {10, 20}}};
    CHECK(to_string(simplify(min(x, y), r)) == "x");
    CHECK(to_string(simplify(max(x, y), r)) == "y");
    CHECK(to_string(simplify(min(x, Expr(100)), r)) == "x");
    CHECK(can_prove(x < y, r));
    CHECK(can_prove(x * 2 + 1 <= 15, r));
    CHECK_FALSE(can_prove(x * 2 + 1 < 15, r));
    CHECK(to_string(simplify(Select::make(x < 8, y, x), r)) == "y");
    CHECK(to_string(simplify(x >= 0 && y > 5, r)) == "true");
  }

  TEST_CASE("nested floor divisions fold while the divisors' product fits") {
    // Found by fuzz_simplify: 24 divisions by 9 were folded into one by a wrapped 9^24.
    Expr x = Variable::make("x");
    Expr e = x;
    for (int i = 0; i < 24; ++i) e = FloorDiv::make(e, Expr(int64_t{9}));
    RangeMap r{{x.as<Variable>(), Interval{-12, 30}}};
    for (int64_t v : {-12, -1, 0, 30}) {
      const Expr at = simplify(substitute(simplify(e, r), {{x.as<Variable>(), Expr(v)}}));
      REQUIRE(as_const_int(at) != nullptr);
      CHECK(*as_const_int(at) == (v < 0 ? -1 : 0));
    }
  }

  TEST_CASE("known_divisor: what divides every value, through the index arithmetic") {
    Expr x = Variable::make("x"), y = Variable::make("y");
    CHECK(known_divisor(Expr(int64_t{12})) == 12);
    CHECK(known_divisor(x) == 1);
    CHECK(known_divisor(x * Expr(int64_t{8}) + y * Expr(int64_t{4})) == 4);
    CHECK(known_divisor(x * Expr(int64_t{8}) + Expr(int64_t{2})) == 2);
    // floormod keeps what the divisor shares; floordiv divides it when it can.
    CHECK(known_divisor(FloorMod::make(x * Expr(int64_t{8}), Expr(int64_t{12}))) == 4);
    CHECK(known_divisor(FloorDiv::make(x * Expr(int64_t{32}), Expr(int64_t{4}))) == 8);
    CHECK(known_divisor(FloorDiv::make(x * Expr(int64_t{6}), Expr(int64_t{4}))) == 1);
    CHECK(known_divisor(x * y) == 1);
    CHECK(known_divisor(Expr(int64_t{0}) * x) == 0);
    // A xor keeps the low zero bits both operands have: a power of two.
    CHECK(known_divisor(bitxor(x * Expr(int64_t{24}), y * Expr(int64_t{16}))) == 8);
    CHECK(known_divisor(bitxor(x * Expr(int64_t{6}), y * Expr(int64_t{3}))) == 1);
    // Every value of a few such expressions is a multiple of what it says.
    for (int64_t a = -20; a <= 20; ++a)
      for (int64_t b = -5; b <= 5; ++b) {
        const Expr e =
            FloorMod::make(x * Expr(int64_t{6}) + Expr(int64_t{12}) * y, Expr(int64_t{8})) +
            FloorDiv::make(x * Expr(int64_t{16}), Expr(int64_t{2}));
        const int64_t d = known_divisor(e);
        const Expr v =
            simplify(substitute(e, {{x.as<Variable>(), Expr(a)}, {y.as<Variable>(), Expr(b)}}));
        REQUIRE(as_const_int(v) != nullptr);
        CHECK(*as_const_int(v) % d == 0);
      }
  }

  TEST_CASE("bounds_of follows interval arithmetic") {
    Expr x = Variable::make("x"), y = Variable::make("y");
    RangeMap r{{x.as<Variable>(), Interval::range(8)}, {y.as<Variable>(), {-2, 3}}};
    CHECK(bounds_of(x * 2 + y, r) == Interval{-2, 17});
    CHECK(bounds_of(x - y, r) == Interval{-3, 9});
    CHECK(bounds_of(x * y, r) == Interval{-14, 21});
    CHECK(bounds_of(floordiv(x, 3), r) == Interval{0, 2});
    CHECK(bounds_of(floormod(x + 8, 4), r) == Interval{0, 3});
    CHECK(bounds_of(bitxor(x, floormod(x, 4) + 1), r) == Interval{0, 7});  // x < 8, the other < 5
    CHECK(bounds_of(bitxor(x * 2, Expr(int64_t{1})), r) == Interval{0, 15});
    CHECK_FALSE(bounds_of(bitxor(x, y), r).bounded());  // y may be negative
    // Operands near the top of int64 have no power of two above them that int64 holds.
    CHECK_FALSE(bounds_of(bitxor(x, Expr(std::numeric_limits<int64_t>::max())), r).bounded());
    CHECK(to_string(simplify(bitxor(Expr(int64_t{5}), Expr(int64_t{3})))) == "6");
    CHECK(to_string(simplify(bitxor(x, Expr(int64_t{0})))) == "x");
    // The terms above the mask's bits leave the xor: a swizzled address keeps its offsets.
    CHECK(to_string(simplify(bitxor(x * 64 + floormod(y, 8), floordiv(x, 2)), r)) ==
          "x*64 + bitxor(floormod(y, 8), floordiv(x, 2))");
    CHECK_FALSE(bounds_of(x + Variable::make("z"), r).bounded());
  }

  TEST_CASE("simplify never changes the value of an integer expression") {
    // Exhaustive check over small ranges against direct evaluation.
    Expr x = Variable::make("x"), y = Variable::make("y");
    RangeMap r{{x.as<Variable>(), Interval::range(9)}, {y.as<Variable>(), Interval::range(5)}};
    std::vector<Expr> cases = {floordiv(x * 5 + y, 5),
                               floormod(x * 6 + y * 2 + 3, 4),
                               floordiv(x + y * 3 - 4, 3),
                               (x + 1) * (y + 2) - x * y,
                               min(x * 2, y + 9),
                               max(x - y, Expr(2)),
                               floordiv(floordiv(x * 7 + y, 2), 3),
                               floormod(x - 10, 4),
                               bitxor(floormod(x, 4), floordiv(y, 2)) * 8 + x * 32 + y,
                               bitxor(x * 16 + floormod(y, 4) + y * 8, floormod(x, 8)),
                               bitxor(floormod(y, 2), x * 8 + y + 3)};
    for (auto& e : cases) {
      Expr s = simplify(e, r);
      for (int64_t xv = 0; xv < 9; ++xv)
        for (int64_t yv = 0; yv < 5; ++yv) {
          std::unordered_map<const Variable*, Expr> m{{x.as<Variable>(), Expr(xv)},
                                                      {y.as<Variable>(), Expr(yv)}};
          Expr ea = simplify(substitute(e, m)), eb = simplify(substitute(s, m));
          auto* a = as_const_int(ea);
          auto* b = as_const_int(eb);
          REQUIRE(a);
          REQUIRE(b);
          CHECK_MESSAGE(*a == *b, to_string(e), " -> ", to_string(s), " at x=", xv, " y=", yv);
        }
    }
  }

  TEST_CASE("simplify keeps the value of int32 arithmetic that wraps") {
    // Found by the random programs (seed 54858): floordiv(x - 2, 3) became
    // floordiv(x + 1, 3) - 1, whose x + 1 wraps for x = INT32_MAX. Integers wrap at their width
    // (node_kinds.hpp); a value read from a buffer may be anything of its type.
    const DType i32 = DType::i32();
    Expr x = Variable::make("x", i32);
    auto c = [&](int64_t v) { return IntImm::make(i32, v); };
    // The value of `e` at x = v, wrapping to int32 after every operation; independent of the
    // simplifier, whose own folding of constants goes through the bounds it decides with.
    auto eval = [&](auto&& self, const Expr& e, int64_t v) -> int64_t {
      auto w = [](int64_t r) { return static_cast<int64_t>(static_cast<int32_t>(r)); };
      if (const int64_t* k = as_const_int(e)) return *k;
      if (e.as<Variable>()) return v;
      if (auto* s = e.as<Select>())
        return self(self, s->condition, v) ? self(self, s->true_value, v)
                                           : self(self, s->false_value, v);
      auto [pa, pb] = binary_operands(e);
      const int64_t a = self(self, *pa, v), b = self(self, *pb, v);
      auto q = [&] { return a / b - ((a % b != 0 && (a < 0) != (b < 0)) ? 1 : 0); };
      switch (e.kind()) {
        case NodeKind::Add: return w(a + b);
        case NodeKind::Sub: return w(a - b);
        case NodeKind::Mul: return w(a * b);
        case NodeKind::Div: return w(a / b);
        case NodeKind::FloorDiv: return w(q());
        case NodeKind::FloorMod: return w(a - q() * b);
        case NodeKind::LT: return a < b;
        case NodeKind::LE: return a <= b;
        case NodeKind::GT: return a > b;
        case NodeKind::NE: return a != b;
        default: FAIL("no evaluation of ", to_string(e)); return 0;
      }
    };
    const std::vector<Expr> cases = {floordiv(x - c(2), c(3)),
                                     floormod(x - c(2), c(3)),
                                     floordiv(x * c(3) + c(1), c(3)),
                                     floormod(x * c(-7), c(7)),
                                     floormod(x + c(3), c(2)),
                                     floordiv(floordiv(x - c(1), c(2)), c(3)),
                                     Div::make(x + c(1), c(4)),
                                     Select::make(x + c(1) > x, c(1), c(0)),
                                     Select::make(x - c(1) < x, c(1), c(0)),
                                     Select::make(x + c(1) <= x, c(1), c(0)),
                                     Select::make(NE::make(x + c(1), x), c(1), c(0))};
    const int64_t lo = std::numeric_limits<int32_t>::min(),
                  hi = std::numeric_limits<int32_t>::max();
    for (const Expr& e : cases)
      for (const RangeMap& r : {RangeMap{}, RangeMap{{x.as<Variable>(), Interval{0, hi}}}}) {
        const Expr s = simplify(e, r);
        for (int64_t v : {lo, lo + 1, lo + 2, int64_t{-7}, int64_t{-1}, int64_t{0}, int64_t{1},
                          int64_t{5}, hi - 2, hi - 1, hi}) {
          if (!r.empty() && v < 0) continue;  // outside the range
          CHECK_MESSAGE(eval(eval, e, v) == eval(eval, s, v), to_string(e), " -> ", to_string(s),
                        " at x=", v);
        }
      }
    // Where nothing can wrap, the rewrites still apply.
    RangeMap small{{x.as<Variable>(), Interval{0, 100}}};
    CHECK(to_string(simplify(floordiv(x * c(4) + c(7), c(4)), small)) == "x + int32(1)");
    CHECK(to_string(simplify(floordiv(x - c(2), c(3)), small)) ==
          "floordiv(x + int32(1), int32(3)) - int32(1)");
    CHECK(can_prove(x + c(1) > x, small));
    // Equal operands compare equal, whatever their bounds.
    CHECK(can_prove(x <= x));
    CHECK(to_string(simplify(x > x)) == "false");
  }
}
