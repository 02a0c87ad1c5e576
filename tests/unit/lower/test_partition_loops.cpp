// lower::partition_loops (loom/lower/partition_loops.hpp): a loop whose tail guard, clamp or
// padding condition fails only in its first or last iteration loses that iteration to a copy
// outside it; other loops stay; and the kernel computes the same values after it.
#include <doctest/doctest.h>
#include <loom/ir/verify.hpp>
#include <loom/lower/partition_loops.hpp>
#include <loom/lower/simplify_loops.hpp>
#include <loom/lower/unroll_loops.hpp>

#include "pass_support.hpp"

using namespace loom::ir;
using loom::lower::partition_loops;
using loom::lower::simplify_loops;
using loom::lower::unroll_loops;
using namespace loom_test::passes;

TEST_SUITE("lower") {
  TEST_CASE("partition_loops peels the iterations a condition singles out") {
    Buffer in = make_buffer("in", DType::i64(), {10}, MemoryScope::Global, 0);
    Buffer out = make_buffer("out", DType::i64(), {10}, MemoryScope::Global, 1);
    Expr i = Variable::make("i");
    auto loop = [&](const Stmt& body) {
      return For::make(i, Expr(0), Expr(10), ForKind::Vectorized, body);
    };
    // A tail guard: the last iteration is peeled, the main loop keeps its kind.
    Stmt tail =
        partition_loops(loop(IfThenElse::make(LT::make(i, Expr(9)), Store::make(out, i, i))));
    REQUIRE(tail.as<Block>());
    REQUIRE(tail.as<Block>()->stmts.size() == 2);
    const For* main = tail.as<Block>()->stmts[0].as<For>();
    REQUIRE(main);
    CHECK(main->for_kind == ForKind::Vectorized);
    CHECK(to_string(main->min) + " " + to_string(main->extent) == "0 9");
    // The condition stays for simplify_loops, which settles it in the main loop.
    CHECK(to_string(main->body).find("if (i < 9)") != std::string::npos);
    CHECK(to_string(simplify_loops(tail)).find("if") == std::string::npos);
    // A clamp at the start: the first iteration is peeled.
    Stmt clamp = partition_loops(loop(Store::make(out, i, Load::make(in, max(i - 1, Expr(0))))));
    REQUIRE(clamp.as<Block>());
    CHECK(to_string(clamp.as<Block>()->stmts[0]) == "out[0] = in[max(0 - 1, 0)]\n");
    // Both ends: both peeled.
    Stmt pad =
        partition_loops(loop(Store::make(out, i,
                                         Select::make(GE::make(i, Expr(1)) && LT::make(i, Expr(9)),
                                                      Load::make(in, i), Expr(int64_t{0})))));
    REQUIRE(pad.as<Block>());
    CHECK(pad.as<Block>()->stmts.size() == 3);
    // Nothing settles by peeling (a condition true in the middle only): the loop stays.
    Stmt middle = loop(IfThenElse::make(EQ::make(i, Expr(5)), Store::make(out, i, i)));
    CHECK(partition_loops(middle).same_as(middle));
  }

  TEST_CASE("partition_loops keeps what random schedules compute") {
    int checked = 0, peeled = 0;
    for (const scheduled& s : lowerable_schedules(25, 701)) {
      INFO(s.w.name, ": ", s.state);
      const LoweredFunc raw = built(s);
      const Stmt before = unroll_loops(simplify_loops(raw.body), 256);  // as lower() runs it
      const Stmt after = partition_loops(before);
      verify(after, {.after = "partition_loops", .scalar = true});
      peeled += loops_of(after).size() != loops_of(before).size() ||
                to_string(after) != to_string(before);
      CHECK(same_results(raw.args, before, after) == "");
      ++checked;
    }
    CHECK(checked > 150);
    CHECK(peeled > 10);
  }
}
