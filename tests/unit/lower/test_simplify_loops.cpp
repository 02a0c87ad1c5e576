// lower::simplify_loops (loom/lower/simplify_loops.hpp): loops of one iteration and of none
// disappear, conditions the loop ranges settle disappear, GPU-bound loops stay, the pass is
// idempotent on lowering's nests, and the kernel computes the same values after it.
#include <doctest/doctest.h>
#include <loom/ir/verify.hpp>
#include <loom/lower/simplify_loops.hpp>

#include "pass_support.hpp"

using namespace loom::ir;
using loom::lower::simplify_loops;
using namespace loom_test::passes;

TEST_SUITE("lower") {
  TEST_CASE("simplify_loops removes trivial loops and settled conditions") {
    Buffer out = make_buffer("out", DType::i32(), {8}, MemoryScope::Global, 0);
    Expr i = Variable::make("i"), j = Variable::make("j"), t = Variable::make("t");
    auto store = [&](const Expr& at) {
      return Store::make(out, at, IntImm::make(DType::i32(), 1));
    };
    // for i in [0, 8): for j in [0, 1): if (i < 10) out[i + j] = 1
    Stmt one = For::make(j, Expr(0), Expr(1), ForKind::Serial,
                         IfThenElse::make(LT::make(i, Expr(10)), store(i + j)));
    Stmt s = simplify_loops(For::make(i, Expr(0), Expr(8), ForKind::Parallel, one));
    const For* f = s.as<For>();
    REQUIRE(f);
    CHECK(f->for_kind == ForKind::Parallel);  // kinds stay
    const Store* st = f->body.as<Store>();    // no j loop, no condition
    REQUIRE(st);
    CHECK(to_string(st->index) == "i");
    // A loop of no iterations is nothing; a GPU-bound loop of one iteration stays a loop.
    CHECK(simplify_loops(For::make(i, Expr(0), Expr(0), ForKind::Serial, store(i)))
              .as<Block>()
              ->stmts.empty());
    Stmt thread = simplify_loops(For::make(t, Expr(0), Expr(1), ForKind::ThreadIdxX, store(t)));
    REQUIRE(thread.as<For>());
    CHECK(to_string(thread.as<For>()->body.as<Store>()->index) == "t");
  }

  TEST_CASE("simplify_loops keeps what random schedules compute and is idempotent") {
    int checked = 0;
    for (const scheduled& s : lowerable_schedules(25, 501)) {
      INFO(s.w.name, ": ", s.state);
      const LoweredFunc raw = built(s);
      const Stmt once = simplify_loops(raw.body);
      verify(once, {.after = "simplify_loops", .scalar = true});
      for (const For* f : loops_of(once)) {
        const int64_t* e = as_const_int(f->extent);
        CHECK((!e || *e > 1));
      }
      CHECK(to_string(simplify_loops(once)) == to_string(once));
      CHECK(same_results(raw.args, raw.body, once) == "");
      ++checked;
    }
    CHECK(checked > 150);
  }
}
