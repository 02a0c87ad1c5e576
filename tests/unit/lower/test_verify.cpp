// ir::verify (loom/ir/verify.hpp): it accepts what lowering makes after every pass (lower() with
// LowerOptions::verify over random schedules, and programs sampled from the CPU and GPU search
// spaces), and rejects hand-built loop nests that break each invariant with that invariant's id,
// naming the pass that made them.
#include <doctest/doctest.h>
#include <loom/ir/verify.hpp>
#include <loom/lower/gpu.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <random>
#include <string>

#include "pass_support.hpp"
#include "support/op_workloads.hpp"

using namespace loom;
using namespace loom::ir;

namespace {

/// Whether verify(s, options) throws loom::internal_error with `id` and names the pass.
void check_rejected(const Stmt& s, VerifyOptions options, const std::string& id) {
  options.after = "test_pass";
  CAPTURE(id);
  CAPTURE(s);
  try {
    verify(s, options);
    FAIL("accepted");
  } catch (const loom::internal_error& e) {
    const std::string what = e.what();
    CHECK(what.rfind("[" + id + "]", 0) == 0);
    CHECK(what.find("after test_pass: ") != std::string::npos);
  }
}

lower::LowerOptions verified(lower::LowerOptions o) {
  o.verify = true;
  return o;
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("ir::verify accepts the loop nests of random schedules after every pass") {
    int checked = 0;
    lower::LowerOptions no_loop_passes = loom_test::passes::no_loop_passes();
    lower::LowerOptions no_unroll;  // feature extraction's passes
    no_unroll.unroll = no_unroll.partition = no_unroll.vectorize = false;
    for (const loom_test::passes::scheduled& s : loom_test::passes::lowerable_schedules(40, 1001)) {
      INFO(s.w.name, ": ", s.state);
      for (const lower::LowerOptions& o : {lower::LowerOptions{}, no_loop_passes, no_unroll})
        CHECK_NOTHROW((void)lower::lower(s.state, s.w.name, verified(o)));
      ++checked;
    }
    CHECK(checked > 250);
  }

  TEST_CASE("ir::verify accepts the programs of the CPU and GPU search spaces") {
    using namespace loom_test::op_workloads;
    int programs = 0;
    uint64_t seed = 40;
    for (const loom_test::workload& w :
         {op_matmul(), op_conv2d(), op_depthwise(), op_softmax(), op_layer_norm(), op_matvec()}) {
      for (const Target& target : {Target::host(), Target::cuda()}) {
        const Task task(w.dag, target);
        const search::SearchOptions options;
        std::mt19937_64 rng(++seed);
        const lower::LowerOptions lo =
            target.kind == Target::Kind::CUDA ? lower::gpu_lower_options() : lower::LowerOptions{};
        for (const sched::State& p : search::sample_programs(
                 search::generate_sketches(task, options), task, options, rng, 12)) {
          INFO(w.name, " on ", target.to_string(), ": ", p);
          CHECK_NOTHROW((void)lower::lower(p, "kernel", verified(lo)));
          ++programs;
        }
      }
    }
    CHECK(programs > 60);
  }

  TEST_CASE("ir::verify rejects each broken invariant with its id") {
    Buffer in = make_buffer("in", DType::f32(), {16}, MemoryScope::Global, 0);
    Buffer out = make_buffer("out", DType::f32(), {16}, MemoryScope::Global, 1);
    Buffer tmp = make_buffer("tmp", DType::f32(), {16}, MemoryScope::Local);
    Expr i = Variable::make("i"), j = Variable::make("j");
    auto loop = [](const Expr& v, int64_t extent, const Stmt& body, ForKind k = ForKind::Serial) {
      return For::make(v, Expr(0), Expr(extent), k, body);
    };
    const Stmt copy = Store::make(out, i, Load::make(in, i));
    const Stmt ok = loop(i, 16, copy);
    CHECK_NOTHROW(verify(ok, {.after = "test_pass", .scalar = true}));

    // E050: a free variable; a loop's variable in its own extent; a loop rebinding one.
    check_rejected(loop(j, 16, copy), {}, "loom.ir.E050");
    check_rejected(For::make(i, Expr(0), i + 1, ForKind::Serial, copy), {}, "loom.ir.E050");
    check_rejected(loop(i, 4, loop(i, 4, copy)), {}, "loom.ir.E050");
    // E051: a buffer neither an argument nor allocated; an argument allocated.
    check_rejected(loop(i, 16, Store::make(tmp, i, Load::make(in, i))), {}, "loom.ir.E051");
    CHECK_NOTHROW(verify(Allocate::make(tmp, loop(i, 16, Store::make(tmp, i, Load::make(in, i))))));
    check_rejected(Stmt(new Allocate(out, ok)), {}, "loom.ir.E051");
    // E052: a negative extent; a loop over a non-index variable.
    check_rejected(For::make(i, Expr(0), Expr(-1), ForKind::Serial, copy), {}, "loom.ir.E052");
    check_rejected(
        Stmt(new For(Variable::make("x", DType::i32()), Expr(0), Expr(4), ForKind::Serial,
                     Store::make(out, Expr(0), Load::make(in, Expr(0))))),
        {}, "loom.ir.E052");
    // E053: a store whose value has other lanes than its index; a vector condition.
    const Expr ramp = Ramp::make(i * 4, Expr(1), 4);
    check_rejected(loop(i, 4, Stmt(new Store(out, ramp, Load::make(in, i)))), {}, "loom.ir.E053");
    check_rejected(loop(i, 4,
                        Stmt(new IfThenElse(LT::make(ramp, Broadcast::make(Expr(9), 4)),
                                            Store::make(out, i, Load::make(in, i)), Stmt()))),
                   {}, "loom.ir.E053");
    // E054: a TensorRead left in the nest.
    const auto w = loom_test::row_sum(4, 16);
    const ir::Tensor x = w.dag->inputs()[0];
    check_rejected(loop(i, 4, Store::make(out, i, TensorRead::make(x, {i, Expr(0)}))), {},
                   "loom.ir.E054");
    // E055: a vector before vectorization (fine after it).
    const Stmt vector = loop(i, 4, Store::make(out, ramp, Load::make(in, ramp)));
    check_rejected(vector, {.after = "", .scalar = true}, "loom.ir.E055");
    CHECK_NOTHROW(verify(vector, {.after = "", .no_vectorized_loops = true}));
    // E056: an Unrolled loop the unroller should have expanded (a larger one may stay).
    check_rejected(loop(i, 16, copy, ForKind::Unrolled), {.after = "", .max_unrolled_extent = 256},
                   "loom.ir.E056");
    CHECK_NOTHROW(
        verify(loop(i, 16, copy, ForKind::Unrolled), {.after = "", .max_unrolled_extent = 8}));
    // E057: a Vectorized loop after vectorization.
    check_rejected(loop(i, 16, copy, ForKind::Vectorized),
                   {.after = "", .no_vectorized_loops = true}, "loom.ir.E057");
  }
}
