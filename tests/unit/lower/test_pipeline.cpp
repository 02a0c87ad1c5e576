// Software pipelining (loom/lower/gpu.hpp, point 6): a loop annotated `pipeline` (2 stages,
// double buffering), `pipeline3` or `pipeline4`, at which shared stages are computed, copies the
// tiles of its next iterations into the other slots asynchronously while it computes with the
// current ones. Hand-written tensor-core schedules of bf16, fp16 and TF32 matmuls, pipelined,
// are emulated and compared with the DAG interpreter. The emulation lands each copy as late as
// the waits allow and poisons its destination until then, so a wait for too few groups, a copy
// into the slot being read, or a read of the wrong slot gives a wrong result: the tests break
// programs in each of these ways and check that the emulation sees it. And the loops the
// lowering refuses to pipeline.
#include <doctest/doctest.h>
#include <loom/loom.hpp>
#include <loom/lower/gpu.hpp>
#include <loom/lower/interpret.hpp>

#include <functional>
#include <string>
#include <vector>

#include "support/mma_schedule.hpp"

using namespace loom;
using loom::sched::Annotation;
using loom::sched::State;

namespace {

struct shape_of_body {
  int copies = 0;           // CopyAsync statements
  int waits = 0;            // barriers that wait for the copies
  int barriers = 0;         // all barriers
  int pending = -1;         // the copy groups the last waiting barrier leaves in flight
  bool wait_first = false;  // the serial loop's body starts with the waiting barrier
};

shape_of_body shape(const ir::Stmt& body) {
  shape_of_body s;
  std::function<void(const ir::Stmt&)> walk = [&](const ir::Stmt& st) {
    if (!st.defined()) return;
    if (auto* b = st.as<ir::Block>()) {
      for (const ir::Stmt& x : b->stmts) walk(x);
    } else if (auto* f = st.as<ir::For>()) {
      if (auto* inner = f->body.as<ir::Block>(); inner && !inner->stmts.empty())
        if (auto* w = inner->stmts[0].as<ir::Barrier>(); w && w->wait_async) s.wait_first = true;
      walk(f->body);
    } else if (auto* a = st.as<ir::Allocate>()) {
      walk(a->body);
    } else if (auto* i = st.as<ir::IfThenElse>()) {
      walk(i->then_case);
      walk(i->else_case);
    } else if (auto* c = st.as<ir::CopyAsync>()) {
      ++s.copies;
      walk(c->body);
    } else if (auto* w = st.as<ir::Barrier>()) {
      ++s.barriers;
      s.waits += w->wait_async;
      if (w->wait_async) s.pending = w->pending_groups;
    }
  };
  walk(body);
  return s;
}

int64_t shared_elements(const lower::GpuKernel& k, const std::string& name) {
  for (const ir::Buffer& b : k.shared)
    if (b->name == name) return b->num_elements();
  return -1;
}

// The program with its kernel's body rewritten by `edit`.
lower::GpuProgram with_kernel_body(lower::GpuProgram p,
                                   const std::function<ir::Stmt(const ir::Stmt&)>& edit) {
  for (lower::GpuKernel& k : p.kernels) k.body = edit(k.body);
  return p;
}

// Every waiting barrier leaves `pending` groups in flight.
ir::Stmt set_pending(const ir::Stmt& body, int pending) {
  struct setter : ir::StmtMutator {
    int pending;
    ir::Stmt visit_Barrier(const ir::Barrier* op, const ir::Stmt& self) override {
      return op->wait_async ? ir::Barrier::make(true, pending) : self;
    }
  } m;
  m.pending = pending;
  return m.mutate(body);
}

// The copies a pipelined loop's step starts fetch the tiles of the iteration after the one
// they should (into the slot the step computes with).
ir::Stmt copy_one_step_further(const ir::Stmt& body) {
  struct shifter : ir::StmtMutator {
    ir::Stmt visit_For(const ir::For* op, const ir::Stmt& self) override {
      const ir::Block* b = op->body.as<ir::Block>();
      if (b == nullptr || b->stmts.size() < 2 || !b->stmts[1].as<ir::CopyAsync>())
        return ir::StmtMutator::visit_For(op, self);
      std::vector<ir::Stmt> stmts = b->stmts;
      stmts[1] = ir::substitute(stmts[1], {{op->variable(), op->var + ir::Expr(int64_t{1})}});
      return ir::For::make(op->var, op->min, op->extent, op->for_kind,
                           ir::Block::make(std::move(stmts)));
    }
  } m;
  return m.mutate(body);
}

std::string check_bf16(const ComputeDAG& dag, const lower::GpuProgram& p) {
  return loom_test::check_half_matmul<bfloat16>(
      dag, 64, 64, 64, [&](std::vector<void*> a) { lower::emulate(p, a); });
}

}  // namespace

TEST_SUITE("lower.pipeline") {
  TEST_CASE("a pipelined k loop gives A and B a slot per stage and computes the matmul") {
    struct workload {
      const char* what;
      int64_t m, n, k;
      int64_t k_step;
    };
    for (const int stages : {2, 3, 4})
      for (const workload w :
           {workload{"bf16", 64, 64, 64, 16}, workload{"fp16", 32, 32, 96, 16},
            workload{"tf32", 64, 32, 40, 8}, workload{"bf16 one step", 32, 32, 16, 16},
            workload{"bf16 two steps", 32, 32, 32, 16}}) {
        CAPTURE(stages);
        CAPTURE(w.what);
        const std::string kind = w.what;
        const bool tf32 = kind == "tf32";
        const auto dag = tf32             ? loom_test::float_matmul(w.m, w.n, w.k)
                         : kind == "fp16" ? loom_test::half_matmul<float16>(w.m, w.n, w.k)
                                          : loom_test::half_matmul<bfloat16>(w.m, w.n, w.k);
        const Target target = tf32 ? Target::cuda().with_tf32() : Target::cuda();
        loom_test::mma_tiling t{1, 2, 2, 2, true, true, w.k_step, 0};
        const lower::GpuProgram plain =
            lower::lower_gpu(loom_test::tensor_core_matmul(dag, t), target);
        t.pipeline_stages = stages;
        const State s = loom_test::tensor_core_matmul(dag, t);
        const lower::GpuProgram piped = lower::lower_gpu(s, target);
        REQUIRE(piped.kernels.size() == 1);
        const lower::GpuKernel& k = piped.kernels[0];
        INFO(piped);
        // A slot of each operand's tile per stage, each a whole number of 16-byte lines.
        for (const char* operand : {"A.shared", "B.shared"}) {
          const int64_t one = shared_elements(plain.kernels[0], operand);
          const int64_t per16 = tf32 ? 4 : 8;
          CHECK(shared_elements(k, operand) == stages * ((one + per16 - 1) / per16 * per16));
        }
        // The prologue's stages - 1 groups and the step's, the wait at the top of each step
        // for all but the last stages - 2 groups.
        const shape_of_body b = shape(k.body);
        CHECK(b.copies == stages);
        CHECK(b.waits == 1);
        CHECK(b.pending == stages - 2);
        CHECK(b.wait_first);
        auto run = [&](std::vector<void*> a) { lower::emulate(piped, a); };
        const std::string r =
            tf32             ? loom_test::check_half_matmul<float>(*dag, w.m, w.n, w.k, run)
            : kind == "fp16" ? loom_test::check_half_matmul<float16>(*dag, w.m, w.n, w.k, run)
                             : loom_test::check_half_matmul<bfloat16>(*dag, w.m, w.n, w.k, run);
        CHECK_MESSAGE(r == "", s.to_string());
      }
  }

  TEST_CASE("the emulation sees a wait for too few copy groups and a copy into a slot in use") {
    // 64^3 bf16, 4 steps of k. Each program is broken in one way the device would punish only
    // sometimes (a copy that happens to land early, a slot not yet overwritten); the emulation
    // lands copies as late as possible and poisons their destinations, so it always sees it.
    const auto dag = loom_test::half_matmul<bfloat16>(64, 64, 64);
    for (const int stages : {2, 3, 4}) {
      CAPTURE(stages);
      loom_test::mma_tiling t{1, 2, 2, 2, true, true, 16, stages};
      const lower::GpuProgram good =
          lower::lower_gpu(loom_test::tensor_core_matmul(dag, t), Target::cuda());
      CHECK(check_bf16(*dag, good) == "");
      // Waiting for every group (pending 0) is slower but right.
      CHECK(check_bf16(*dag, with_kernel_body(
                                 good, [](const ir::Stmt& b) { return set_pending(b, 0); })) == "");
      // One group too few: the step reads its slot before its copies land.
      CHECK(check_bf16(*dag, with_kernel_body(good, [&](const ir::Stmt& b) {
              return set_pending(b, stages - 1);
            })) != "");
      // The step copies the tiles of one iteration further ahead, into its own slot, which its
      // code then reads while the copy is in flight.
      CHECK(check_bf16(*dag, with_kernel_body(good, copy_one_step_further)) != "");
    }
  }

  TEST_CASE("on the CPU a pipelined loop is the serial loop it stands for") {
    const auto dag = loom_test::half_matmul<bfloat16>(32, 32, 48);
    const State s = loom_test::tensor_core_matmul(dag, {1, 2, 2, 2, true, true, 16, 3});
    const ir::LoweredFunc f = lower::lower(s, "pipelined_cpu");
    const std::string r = loom_test::check_half_matmul<bfloat16>(
        *dag, 32, 32, 48, [&](std::vector<void*> a) { lower::interpret(f, a); });
    CHECK(r == "");
  }

  TEST_CASE("loops that cannot be pipelined are refused with what is wrong") {
    const auto dag = loom_test::half_matmul<bfloat16>(64, 64, 64);
    // Before Ampere there is no cp.async.
    {
      const std::string e = loom_test::lowering_error(
          loom_test::tensor_core_matmul(dag, {1, 2, 2, 2, true, true, 16, 2}),
          Target::cuda("sm_75"));
      CHECK(e.find("[loom.lower.E428]") != std::string::npos);
      CHECK(e.find("sm_80") != std::string::npos);
    }
    // No shared stage computed at the loop: nothing to double-buffer.
    {
      State s = loom_test::tensor_core_matmul(dag, {1, 2, 2, 2, false, true, 16, 0});
      s.annotate(dag->outputs()[0].name() + ".local", 0, Annotation::Pipelined);
      const std::string e = loom_test::lowering_error(s);
      CHECK(e.find("[loom.lower.E428]") != std::string::npos);
      CHECK(e.find("copies from global memory into shared memory") != std::string::npos);
    }
  }
}
