// Double buffering (loom/lower/gpu.hpp, point 6): a loop annotated `pipeline`, at which shared
// stages are computed, copies the next iteration's tiles into a second slot asynchronously
// while it computes with the current ones. Hand-written tensor-core schedules of bf16, fp16 and
// TF32 matmuls, pipelined, are emulated and compared with the DAG interpreter; the emulation
// lands every copy at once, so a copy into the slot being read, or a read of the wrong slot,
// gives a wrong result. And the loops the lowering refuses to pipeline.
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

}  // namespace

TEST_SUITE("lower.pipeline") {
  TEST_CASE("a pipelined k loop gives A and B two slots and computes the matmul's result") {
    struct workload {
      const char* what;
      int64_t m, n, k;
      int64_t k_step;
    };
    for (const workload w :
         {workload{"bf16", 64, 64, 64, 16}, workload{"fp16", 32, 32, 96, 16},
          workload{"tf32", 64, 32, 40, 8}, workload{"bf16 one step", 32, 32, 16, 16}}) {
      CAPTURE(w.what);
      const std::string kind = w.what;
      const bool tf32 = kind == "tf32";
      const auto dag = tf32             ? loom_test::float_matmul(w.m, w.n, w.k)
                       : kind == "fp16" ? loom_test::half_matmul<float16>(w.m, w.n, w.k)
                                        : loom_test::half_matmul<bfloat16>(w.m, w.n, w.k);
      const Target target = tf32 ? Target::cuda().with_tf32() : Target::cuda();
      loom_test::mma_tiling t{1, 2, 2, 2, true, true, w.k_step, false};
      const lower::GpuProgram plain =
          lower::lower_gpu(loom_test::tensor_core_matmul(dag, t), target);
      t.pipeline = true;
      const State s = loom_test::tensor_core_matmul(dag, t);
      const lower::GpuProgram piped = lower::lower_gpu(s, target);
      REQUIRE(piped.kernels.size() == 1);
      const lower::GpuKernel& k = piped.kernels[0];
      INFO(piped);
      // Two slots of each operand's tile, each a whole number of 16-byte lines.
      for (const char* operand : {"A.shared", "B.shared"}) {
        const int64_t one = shared_elements(plain.kernels[0], operand);
        const int64_t per16 = tf32 ? 4 : 8;
        CHECK(shared_elements(k, operand) == 2 * ((one + per16 - 1) / per16 * per16));
      }
      // The prologue's copies and the next step's, the wait at the top of each step.
      const shape_of_body b = shape(k.body);
      CHECK(b.copies == 2);
      CHECK(b.waits == 1);
      CHECK(b.wait_first);
      const std::string r =
          tf32 ? loom_test::check_half_matmul<float>(
                     *dag, w.m, w.n, w.k, [&](std::vector<void*> a) { lower::emulate(piped, a); })
          : kind == "fp16"
              ? loom_test::check_half_matmul<float16>(
                    *dag, w.m, w.n, w.k, [&](std::vector<void*> a) { lower::emulate(piped, a); })
              : loom_test::check_half_matmul<bfloat16>(
                    *dag, w.m, w.n, w.k, [&](std::vector<void*> a) { lower::emulate(piped, a); });
      CHECK_MESSAGE(r == "", s.to_string());
    }
  }

  TEST_CASE("on the CPU a pipelined loop is the serial loop it stands for") {
    const auto dag = loom_test::half_matmul<bfloat16>(32, 32, 48);
    const State s = loom_test::tensor_core_matmul(dag, {1, 2, 2, 2, true, true, 16, true});
    const ir::LoweredFunc f = lower::lower(s, "pipelined_cpu");
    const std::string r = loom_test::check_half_matmul<bfloat16>(
        *dag, 32, 32, 48, [&](std::vector<void*> a) { lower::interpret(f, a); });
    CHECK(r == "");
  }

  TEST_CASE("loops that cannot be double-buffered are refused with what is wrong") {
    const auto dag = loom_test::half_matmul<bfloat16>(64, 64, 64);
    // Before Ampere there is no cp.async.
    {
      const std::string e = loom_test::lowering_error(
          loom_test::tensor_core_matmul(dag, {1, 2, 2, 2, true, true, 16, true}),
          Target::cuda("sm_75"));
      CHECK(e.find("[loom.lower.E428]") != std::string::npos);
      CHECK(e.find("sm_80") != std::string::npos);
    }
    // No shared stage computed at the loop: nothing to double-buffer.
    {
      State s = loom_test::tensor_core_matmul(dag, {1, 2, 2, 2, false, true, 16, false});
      s.annotate(dag->outputs()[0].name() + ".local", 0, Annotation::Pipelined);
      const std::string e = loom_test::lowering_error(s);
      CHECK(e.find("[loom.lower.E428]") != std::string::npos);
      CHECK(e.find("copies from global memory into shared memory") != std::string::npos);
    }
  }
}
