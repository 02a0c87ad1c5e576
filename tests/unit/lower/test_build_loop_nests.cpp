// lower::build_loop_nests (loom/lower/build_loop_nests.hpp): a loop per leaf with its
// annotation, init and update nests for reductions, stages computed inside another placed in its
// loop with their Allocate, root buffers allocated around everything, the cross-thread form of a
// reduction over GPU threads, the auto_unroll pragma; and, for random schedules, a nest that
// computes what the DAG computes.
#include <doctest/doctest.h>
#include <loom/ir/verify.hpp>
#include <loom/lower/build_loop_nests.hpp>
#include <loom/lower/inline_stages.hpp>

#include <string>

#include "pass_support.hpp"

using namespace loom;
using loom_test::passes::count_loops;
using loom_test::passes::loops_of;

namespace {

/// The nest of `s`, pass by pass, as lower() makes it before its loop passes.
ir::Stmt nest_of(const sched::State& s) {
  const std::vector<lower::StageRegion> regions = lower::infer_regions(s);
  return lower::build_loop_nests(s, lower::inline_stages(s), regions,
                                 lower::plan_buffers(s, regions));
}

std::string name_of(const ir::For* f) { return f->variable()->name; }

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("build_loop_nests: a matmul's loops, init and update") {
    auto w = loom_test::matmul(4, 5, 6);
    sched::State s(w.dag);
    s.annotate("C", 1, sched::Annotation::Vectorized);
    const ir::Stmt nest = nest_of(s);
    ir::verify(nest, {.after = "build_loop_nests", .scalar = true});
    const ir::For* i0 = nest.as<ir::For>();
    REQUIRE(i0);
    CHECK(name_of(i0) == "i0");
    CHECK(ir::is_const_int(i0->extent, 4));
    const ir::For* i1 = i0->body.as<ir::For>();
    REQUIRE(i1);
    CHECK(i1->for_kind == ir::ForKind::Vectorized);  // the annotation, as the loop's kind
    const ir::Block* init_update = i1->body.as<ir::Block>();
    REQUIRE(init_update);
    REQUIRE(init_update->stmts.size() == 2);
    const ir::Store* init = init_update->stmts[0].as<ir::Store>();
    REQUIRE(init);
    CHECK(ir::to_string(init->value) == "0.0f");
    const ir::For* k = init_update->stmts[1].as<ir::For>();
    REQUIRE(k);
    CHECK(name_of(k) == "k");
    REQUIRE(k->body.as<ir::Store>());
  }

  TEST_CASE("build_loop_nests: a stage at its consumer's loop, a root buffer around all") {
    auto w = loom_test::matmul_bias_relu(13, 17, 19);
    sched::State s(w.dag);
    const ir::Stmt root = nest_of(s);
    REQUIRE(root.as<ir::Allocate>());  // C, between the two root nests
    CHECK(root.as<ir::Allocate>()->buffer->name == "C");
    REQUIRE(root.as<ir::Allocate>()->body.as<ir::Block>());
    CHECK(root.as<ir::Allocate>()->body.as<ir::Block>()->stmts.size() == 2);

    s.split("D", 1, {5});
    s.compute_at("C", "D", 1);
    const ir::Stmt nest = nest_of(s);
    ir::verify(nest, {.after = "build_loop_nests", .scalar = true});
    const ir::For* tile = nest.as<ir::For>()->body.as<ir::For>();
    REQUIRE(tile);
    CHECK(name_of(tile) == "i1.0");
    const ir::Allocate* c = tile->body.as<ir::Allocate>();
    REQUIRE(c);
    CHECK(c->buffer->name == "C");
    CHECK(c->buffer->shape == std::vector<int64_t>{1, 5});
    const ir::Block* seq = c->body.as<ir::Block>();
    REQUIRE(seq);
    REQUIRE(seq->stmts.size() == 2);  // C's nest, then the rest of D's loop
    CHECK(name_of(seq->stmts[0].as<ir::For>()) == "i0");
    CHECK(name_of(seq->stmts[1].as<ir::For>()) == "i1.1");
  }

  TEST_CASE("build_loop_nests: a reduction across GPU threads meets in one combine") {
    auto w = loom_test::row_sum(9, 23);
    sched::State s(w.dag);
    s.split("R", 1, {8});  // i0 k.0 k.1
    s.annotate("R", 0, sched::Annotation::BlockIdxX);
    s.annotate("R", 2, sched::Annotation::ThreadIdxX);
    const ir::Stmt nest = nest_of(s);
    ir::verify(nest, {.after = "build_loop_nests", .scalar = true});
    std::vector<std::string> names;
    for (const ir::For* f : loops_of(nest)) names.push_back(name_of(f));
    // The thread loop outside k.0; the init on one thread.
    CHECK(names == std::vector<std::string>{"i0", "k.1.init", "k.1", "k.0"});
    CHECK(ir::to_string(nest).find("allocate R.acc: float32[1] local") != std::string::npos);
  }

  TEST_CASE("build_loop_nests: the auto_unroll pragma marks the stage's innermost loops") {
    auto w = loom_test::matmul(4, 5, 6);
    sched::State s(w.dag);
    s.pragma_unroll("C", 0, 64);  // k: 6 steps, i1: 5 * (1 + 6), i0: 140
    CHECK(count_loops(nest_of(s), ir::ForKind::Unrolled) == 2);
  }

  TEST_CASE("build_loop_nests: a reduction's condition is read only inside the tail guard") {
    // Found by the random programs (tests/jit/test_random_programs.cpp): the condition of a
    // reduction was and-ed with the guard of a split's tail, `i < 8 && A[i] > 0`, whose operands
    // have no evaluation order, so the tail read A[8]. It now has an IfThenElse of its own.
    auto A = placeholder<float>("A", {8});
    auto k = reduce_axis(2, "k");
    auto B = compute("B", {8}, [&](Var i) { return sum(cast<float>(k) + 1.0f, k, A(i) > 0.0f); });
    auto w = loom_test::make_workload("conditional sum", {A}, {B}, 2);
    sched::State s(w.dag);
    s.split("B", 0, {6});  // 2 x 6 iterations for 8: a tail
    const auto ref = loom_test::make_reference(w, 3);
    const auto r = loom_test::run_and_compare(w, ref, s);
    CHECK_MESSAGE(r.ok, r.message);
  }

  TEST_CASE("build_loop_nests of random schedules computes what the DAG computes") {
    int checked = 0;
    for (const loom_test::passes::scheduled& s : loom_test::passes::lowerable_schedules(25, 901)) {
      INFO(s.w.name, ": ", s.state);
      const ir::LoweredFunc f = loom_test::passes::built(s);
      // lower() with its loop passes off is this pass's nest.
      CHECK(ir::to_string(nest_of(s.state)) == ir::to_string(f.body));
      ir::verify(f.body, {.after = "build_loop_nests", .scalar = true});
      const auto ref = loom_test::make_reference(s.w, 5);
      const auto r = loom_test::run_and_compare(
          s.w, ref, s.state,
          [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::interpret(f, ptrs); });
      CHECK_MESSAGE(r.ok, r.message);
      ++checked;
    }
    CHECK(checked > 150);
  }
}
