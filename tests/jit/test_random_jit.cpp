// Random legal schedules through the real backend: lowered, JIT-compiled through LLVM ORC, run on
// the CPU and compared with the reference interpreter (tests/support/random_schedule.hpp states
// the tolerance: float32 within 1e-5 + 1e-5 * reduction length relative, integers exactly).
// Fewer schedules than the interpreter-based property test: each one is a real compilation.
#include <doctest/doctest.h>
#include <loom/cpu.hpp>
#include <loom/sched/record.hpp>

#include "support/random_schedule.hpp"

using namespace loom_test;

namespace {

void jit_runner(const loom::ir::LoweredFunc& f, std::vector<void*>& ptrs) {
  auto k = loom::cpu_jit::compile(f);
  k.fn(ptrs.data());
}

void check_jit(const workload& w, uint32_t seed, int count) {
  const reference ref = make_reference(w, seed);
  std::mt19937 rng(seed);
  random_schedule_stats steps;
  int checked = 0, rejected = 0;
  for (int i = 0; i < count; ++i) {
    loom::sched::State s = random_schedule(w.dag, rng, 3 + pick(rng, 12), steps);
    INFO("workload ", w.name, ", schedule ", i, ": ", loom::sched::to_record(s.steps()));
    auto r = run_and_compare(w, ref, s, jit_runner);
    if (r.rejected_by_lower) {
      ++rejected;
      continue;
    }
    ++checked;
    CHECK_MESSAGE(r.ok, r.message);
  }
  MESSAGE(w.name << ": " << checked << " random schedules JIT-compiled and checked, " << rejected
                 << " rejected by lower()");
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("random legal schedules compute the reference result through the JIT") {
    check_jit(matmul(13, 17, 19), 101, 60);
    check_jit(matmul_i32(11, 9, 7), 102, 40);
    check_jit(matmul_bias_relu(9, 12, 7), 103, 40);
    check_jit(conv2d(3, 9, 9, 4, 3, 1, 2), 104, 40);
    check_jit(depthwise(3, 7, 5), 105, 30);
    check_jit(softmax(5, 11), 106, 30);
    check_jit(row_sum(4, 33), 107, 20);
    check_jit(elementwise_chain(6, 10), 108, 20);
  }

  TEST_CASE("random schedules of 16-bit matmuls (float32 sums) agree with the interpreter") {
    // Tolerance as random_schedule.hpp states, one more ulp for 16-bit outputs.
    check_jit(matmul_half<loom::bfloat16>(13, 17, 19), 109, 30);
    check_jit(matmul_half<loom::float16>(11, 16, 9), 110, 30);
    check_jit(matmul_half<loom::bfloat16>(9, 12, 7, true), 111, 20);
    check_jit(matmul_half<loom::float16>(8, 13, 7, true), 112, 20);
  }
}
