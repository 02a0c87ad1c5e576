// lower::vectorize_loops (loom/lower/vectorize_loops.hpp): Vectorized loops become vector code
// (one vector per power-of-two chunk of lanes) where the body allows it and serial loops where it
// does not; none is left; and the kernel computes the same values after it.
#include <doctest/doctest.h>
#include <loom/ir/verify.hpp>
#include <loom/lower/partition_loops.hpp>
#include <loom/lower/simplify_loops.hpp>
#include <loom/lower/unroll_loops.hpp>
#include <loom/lower/vectorize_loops.hpp>

#include "pass_support.hpp"

using namespace loom::ir;
using loom::lower::vectorize_loops;
using namespace loom_test::passes;

namespace {

/// The lane counts of the vector stores of `s`, in order.
std::vector<int> store_lanes(const Stmt& s) {
  struct collector : StmtVisitor {
    std::vector<int> lanes;
    using StmtVisitor::visit;
    void visit_Store(const Store* op) override { lanes.push_back(op->index.dtype().lanes); }
  } c;
  c.visit(s);
  return c.lanes;
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("vectorize_loops turns a loop into vectors of power-of-two lanes") {
    Buffer in = make_buffer("in", DType::f32(), {128}, MemoryScope::Global, 0);
    Buffer out = make_buffer("out", DType::f32(), {128}, MemoryScope::Global, 1);
    Expr i = Variable::make("i");
    auto loop = [&](int64_t extent, const Stmt& body) {
      return For::make(i, Expr(0), Expr(extent), ForKind::Vectorized, body);
    };
    const Stmt copy = Store::make(out, i, Load::make(in, i) * FloatImm::make(DType::f32(), 2));
    CHECK(store_lanes(vectorize_loops(loop(8, copy))) == std::vector<int>{8});
    CHECK(store_lanes(vectorize_loops(loop(14, copy))) == std::vector<int>{8, 4, 2});
    CHECK(store_lanes(vectorize_loops(loop(19, copy))) == std::vector<int>{16, 2, 1});
    const Stmt v = vectorize_loops(loop(8, copy));
    REQUIRE(v.as<Store>());
    CHECK(v.as<Store>()->index.as<Ramp>());  // unit stride stays visible
    verify(v, {.after = "vectorize_loops", .no_vectorized_loops = true});
    // Beyond vector code: all lanes into one element (a reduction), an inner loop, too long.
    const Stmt sum =
        loop(8, Store::make(out, Expr(0), Load::make(out, Expr(0)) + Load::make(in, i)));
    const Stmt nested =
        loop(4, For::make(Variable::make("j"), Expr(0), Expr(2), ForKind::Serial, copy));
    for (const Stmt& s : {sum, nested, loop(loom::lower::max_vectorized_extent + 1, copy)}) {
      const Stmt r = vectorize_loops(s);
      REQUIRE(r.as<For>());
      CHECK(r.as<For>()->for_kind == ForKind::Serial);
      CHECK_FALSE(has_vectors(r));
    }
  }

  TEST_CASE("vectorize_loops keeps what random schedules compute") {
    int checked = 0, vectorized = 0;
    for (const scheduled& s : lowerable_schedules(25, 801)) {
      INFO(s.w.name, ": ", s.state);
      const LoweredFunc raw = built(s);
      using namespace loom::lower;
      const Stmt before =  // as lower() runs it
          simplify_loops(partition_loops(unroll_loops(simplify_loops(raw.body), 256)));
      const Stmt after = vectorize_loops(before);
      verify(after, {.after = "vectorize_loops", .no_vectorized_loops = true});
      vectorized += has_vectors(after);
      CHECK(same_results(raw.args, before, after) == "");
      ++checked;
    }
    CHECK(checked > 150);
    CHECK(vectorized > 10);
  }
}
