// lower::unroll_loops (loom/lower/unroll_loops.hpp): Unrolled loops of constant bounds up to the
// limit become copies of their body, inner ones first; larger or symbolic ones stay loops; and
// the kernel computes the same values after it.
#include <doctest/doctest.h>
#include <loom/ir/verify.hpp>
#include <loom/lower/simplify_loops.hpp>
#include <loom/lower/unroll_loops.hpp>

#include "pass_support.hpp"

using namespace loom::ir;
using loom::lower::simplify_loops;
using loom::lower::unroll_loops;
using namespace loom_test::passes;

TEST_SUITE("lower") {
  TEST_CASE("unroll_loops copies the body of small constant Unrolled loops") {
    Buffer out = make_buffer("out", DType::i64(), {12}, MemoryScope::Global, 0);
    Expr i = Variable::make("i"), j = Variable::make("j"), n = Variable::make("n");
    // for i in [0, 3) unrolled: for j in [0, 4) unrolled: out[i * 4 + j] = i
    Stmt inner = For::make(j, Expr(0), Expr(4), ForKind::Unrolled, Store::make(out, i * 4 + j, i));
    Stmt s = unroll_loops(For::make(i, Expr(0), Expr(3), ForKind::Unrolled, inner));
    REQUIRE(s.as<Block>());
    CHECK(s.as<Block>()->stmts.size() == 12);
    CHECK(loops_of(s).empty());
    CHECK(to_string(s.as<Block>()->stmts[5]) == "out[1*4 + 1] = 1\n");  // not simplified
    verify(s, {.after = "unroll_loops", .scalar = true, .max_unrolled_extent = 256});
    // Over the limit, or of symbolic extent: still a loop, still marked.
    Stmt big =
        unroll_loops(For::make(i, Expr(0), Expr(12), ForKind::Unrolled, Store::make(out, i, i)), 8);
    REQUIRE(big.as<For>());
    CHECK(big.as<For>()->for_kind == ForKind::Unrolled);
    Stmt symbolic = For::make(n, Expr(1), Expr(3), ForKind::Serial,
                              For::make(i, Expr(0), n, ForKind::Unrolled, Store::make(out, i, n)));
    CHECK(unroll_loops(symbolic).same_as(symbolic));
  }

  TEST_CASE("unroll_loops keeps what random schedules compute") {
    int checked = 0, unrolled = 0;
    for (const scheduled& s : lowerable_schedules(25, 601)) {
      INFO(s.w.name, ": ", s.state);
      const LoweredFunc raw = built(s);
      const Stmt before = simplify_loops(raw.body);  // as lower() runs it
      const Stmt after = unroll_loops(before, 256);
      verify(after, {.after = "unroll_loops", .scalar = true, .max_unrolled_extent = 256});
      unrolled += count_loops(before, ForKind::Unrolled) > 0;
      CHECK(same_results(raw.args, before, after) == "");
      ++checked;
    }
    CHECK(checked > 150);
    CHECK(unrolled > 10);
  }
}
