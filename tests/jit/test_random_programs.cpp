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
#include <loom/lower/interpret.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
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

// Found by the random programs (seed 58691 of LOOM_DIFFFUZZ_FIRST=50792 runs). LLVM 19's SLP
// vectorizer miscompiled the fully unrolled nest below at O2 and O3 on AVX-512 hosts: S[29] and
// S[39] (the peeled i2 = 9 iteration, 8.0f + A[19]) came out wrong. The IR loom emits is not at
// fault: its only nuw/nsw are on loop counters, every GEP and load is in bounds (the select that
// loads became branches, folded away in the tail), its fptosi convert values in range, its
// noalias arguments do not alias, and the straight-line IR that reaches the SLP pass is of the
// same kind. `opt-19 -passes=slp-vectorizer` alone on that IR builds the operand vector of an
// <8 x float> fadd whose lane 3 should be the constant 8.0 as a shuffle with a poison lane there.
// It happens with 512-bit SLP trees (stores of <8 x i64>; every AVX-512 target-cpu tried shows
// it); with 256-bit trees or without SLP the result is right. So kernels with 64-bit buffers get
// 256-bit vectorizer trees (backend/llvm/impl/codegen.ipp). Capping every kernel instead made
// some tuned float32 kernels of benchmarks/results several times slower on an AVX-512 host
// (Sapphire Rapids, 2026-11-28, alternated runs: GEMM 1024³ at 1 thread 0.22×, GEMM 512³ and the
// NHWC conv at 1 thread 0.32×), where SLP had packed their unrolled register tiles into 512-bit
// vectors. Of LLVM's SLP options only ones that cripple it more avoid the bug (slp-max-vf=4,
// slp-schedule-budget=50, slp-recursion-max-depth=2).
TEST_CASE("an unrolled int64(float) nest with a peeled tail (an LLVM 19 SLP miscompile)") {
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

// Found by the random programs (seed 54858 of LOOM_DIFFFUZZ_FIRST=50792 runs): the simplifier
// rewrote floordiv(x - 2, 3) into floordiv(x + 1, 3) - 1, whose x + 1 wraps for x = INT32_MAX,
// so the lowered code (loop-nest interpreter and JIT alike) divided INT32_MIN. Integers wrap at
// their width (ir/node_kinds.hpp): every evaluator must give the DAG interpreter's value, and a
// division by -1 negates, wrapping, instead of trapping (x86's idiv) at the type's minimum.
TEST_CASE("integer division at the ends of int32 and int64 agrees with the DAG interpreter") {
  using namespace loom;
  constexpr int64_t n = 8;
  constexpr int32_t lo = std::numeric_limits<int32_t>::min(),
                    hi = std::numeric_limits<int32_t>::max();
  constexpr int64_t lo64 = std::numeric_limits<int64_t>::min(),
                    hi64 = std::numeric_limits<int64_t>::max();
  auto A = placeholder<int32_t>("A", {n});
  auto D = placeholder<int32_t>("D", {n});
  auto L = placeholder<int64_t>("L", {n});
  auto E = placeholder<int64_t>("E", {n});
  std::vector<Tensor<int32_t, 1>> outs32 = {
      compute("fdiv", {n}, [&](Var i) { return floordiv(A(i) - 2, 3); }),
      compute("fmod", {n}, [&](Var i) { return floormod(A(i) - 2, 3); }),
      compute("fdiv_d", {n}, [&](Var i) { return floordiv(A(i), D(i)); }),
      compute("fmod_d", {n}, [&](Var i) { return floormod(A(i), D(i)); }),
      compute("div_d", {n}, [&](Var i) { return A(i) / D(i); }),
      compute("mod_d", {n}, [&](Var i) { return A(i) % D(i); }),
      compute("div_m1", {n}, [&](Var i) { return floordiv(A(i), -1) + A(i) / -1; })};
  std::vector<Tensor<int64_t, 1>> outs64 = {
      compute("fdiv64", {n}, [&](Var i) { return floordiv(L(i) - 2, 3); }),
      compute("fdiv64_d", {n}, [&](Var i) { return floordiv(L(i), E(i)); }),
      compute("fmod64_d", {n}, [&](Var i) { return floormod(L(i), E(i)); })};
  std::vector<ir::Tensor> outputs(outs32.begin(), outs32.end());
  outputs.insert(outputs.end(), outs64.begin(), outs64.end());
  auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({A, D, L, E}, outputs));
  std::vector<int32_t> a = {lo, lo + 1, lo + 2, -7, 0, 5, hi - 1, hi};
  std::vector<int32_t> d = {-1, -1, 3, -1, -3, 2, -1, 7};
  std::vector<int64_t> l = {lo64, lo64 + 1, -5, 0, 4, hi64 - 2, hi64 - 1, hi64};
  std::vector<int64_t> e = {-1, 3, -1, 2, -1, -5, -1, 3};
  const size_t outs = outputs.size();
  // One buffer per output, int64-sized (int32 outputs use half of it).
  auto run = [&](auto&& f) {
    std::vector<std::vector<int64_t>> o(outs, std::vector<int64_t>(n, 0x5A5A5A5A));
    std::vector<void*> args = {a.data(), d.data(), l.data(), e.data()};
    for (auto& v : o) args.push_back(v.data());
    f(args);
    return o;
  };
  const auto ref = run([&](std::vector<void*>& args) { evaluate(*dag, args); });
  CHECK(reinterpret_cast<const int32_t*>(ref[0].data())[7] == 715827881);  // (INT32_MAX-2)/3
  CHECK(reinterpret_cast<const int32_t*>(ref[2].data())[0] == lo);         // INT32_MIN / -1
  sched::State vectorized(dag);
  for (const auto& t : outputs) vectorized.annotate(t.name(), 0, sched::Annotation::Vectorized);
  for (const sched::State& s : {sched::State(dag), vectorized}) {
    const ir::LoweredFunc f = lower::lower(s, "int_division");
    CHECK(run([&](std::vector<void*>& args) { lower::interpret(f, args); }) == ref);
    auto k = cpu_jit::compile(f);
    CHECK(run([&](std::vector<void*>& args) { k.fn(args.data()); }) == ref);
  }
}
