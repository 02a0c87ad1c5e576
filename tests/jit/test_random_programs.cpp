// Differential testing of the compiler (issue 35): random programs from the DSL's building
// blocks with random legal schedules (tests/support/random_program.hpp says what is generated
// and how outputs are compared), lowered, run with the loop-nest interpreter and JIT-compiled
// through LLVM, each compared with the DAG interpreter. Each seed's bytes are those of an
// mt19937, so a seed names one program and schedule on every machine; the libFuzzer target
// tests/fuzz/fuzz_compile.cpp runs the same generator on mutated bytes.
//
// Count: kSeeds programs in CI, about 10 s of one core (each program is one LLVM O3 compilation,
// most of the time). The environment variables LOOM_DIFFFUZZ_SEEDS and LOOM_DIFFFUZZ_FIRST choose
// another range of seeds for long runs, LOOM_DIFFFUZZ_VERBOSE prints each program and schedule
// before it runs (the last one printed is the culprit of a crash); a failure prints the seed, the
// program, the schedule's record and the first difference. Run with -s to see the counts.
#include <loom/cpu.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "support/random_program.hpp"

namespace {

constexpr uint32_t kSeeds = 400;

uint32_t env_or(const char* name, uint32_t fallback) {
  const char* v = std::getenv(name);
  return v ? static_cast<uint32_t>(std::strtoul(v, nullptr, 10)) : fallback;
}

/// The generator's bytes for `seed`.
std::vector<uint8_t> seed_bytes(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(512);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

void jit_runner(const loom::ir::LoweredFunc& f, std::vector<void*>& ptrs) {
  auto k = loom::cpu_jit::compile(f);
  k.fn(ptrs.data());
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("random programs with random schedules agree with the DAG interpreter") {
    using namespace loom_test::difffuzz;
    const uint32_t first = env_or("LOOM_DIFFFUZZ_FIRST", 1);
    const uint32_t count = env_or("LOOM_DIFFFUZZ_SEEDS", kSeeds);
    const kernel_runner jit = jit_runner;
    int compared = 0, refused = 0, found = 0;
    int by_schedule[3] = {0, 0, 0};
    for (uint32_t seed = first; seed < first + count; ++seed) {
      const auto bytes = seed_bytes(seed);
      if (std::getenv("LOOM_DIFFFUZZ_VERBOSE")) {  // the program first, in case the JIT crashes
        const check_result dry = check_program(bytes.data(), bytes.size(), nullptr);
        MESSAGE("seed " << seed << ":\n" << dry.program << "schedule: " << dry.record);
      }
      const check_result r = check_program(bytes.data(), bytes.size(), &jit);
      if (!r.refused.empty()) {
        ++refused;
        if (std::getenv("LOOM_DIFFFUZZ_VERBOSE"))
          MESSAGE("seed " << seed << " refused: " << r.refused);
      }
      if (r.compared > 0) ++compared;
      if (r.schedule >= 0) ++by_schedule[r.schedule];
      if (!r.finding.empty()) ++found;
      CHECK_MESSAGE(r.finding.empty(), "seed " << seed << ": " << report(r));
    }
    MESSAGE("random programs: " << count << " seeds, " << compared
                                << " compared through the loop-nest interpreter and the JIT ("
                                << by_schedule[0] << " unscheduled, " << by_schedule[1]
                                << " random steps, " << by_schedule[2] << " sampled programs), "
                                << refused << " refused, " << found << " findings");
  }
}

// KNOWN FAILURE, skipped (run with --no-skip): found by the random programs (seed 58691 of
// LOOM_DIFFFUZZ_FIRST=50792 runs), not fixed. LLVM 19's SLP vectorizer, at O2 and O3, fills one
// lane of the fully unrolled nest below with poison: S[29] (the peeled i2 = 9 iteration with
// i1 = 2, 8.0f + A[19]) comes out wrong; O0 and O1 are right, and so is `opt-19 -O3
// -vectorize-slp=false` on the same module, while plain `opt-19 -O3` shows the poison lane, so
// the input IR looks fine and the fault looks like LLVM's. A workaround (SLP off in the JIT's
// pipeline) costs performance and is not made here.
TEST_CASE("KNOWN FAILURE: an unrolled int64(float) nest with a peeled tail" * doctest::skip()) {
  using namespace loom;
  auto A = placeholder<int32_t>("A", {1, 6, 10});
  auto S = compute("S", {1, 5, 10}, [&](Var i0, Var i1, Var i2) {
    return cast<int64_t>(cast<float>(if_then_else(i2 + 1 >= 0 && i2 + 1 < 10, A(0, 0, i2 + 1), 8)) +
                         cast<float>(cast<int64_t>(A(0, floordiv(i1, 2), floormod(i0 - 1, 10)))));
  });
  auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({A}, {S}));
  std::vector<int32_t> a(60);
  for (int i = 0; i < 60; ++i) a[i] = (i * 7) % 41 - 20;
  std::vector<int64_t> out(50), ref(50);
  evaluate(*dag, {a.data(), ref.data()});
  auto k = cpu_jit::compile(lower::lower(sched::State(dag), "unrolled_tail"));
  void* args[] = {a.data(), out.data()};
  k.fn(args);
  CHECK(out == ref);
}
