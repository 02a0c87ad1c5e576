// Fuzz target: the whole compiler against the DAG interpreter (issue 35 §2). The bytes choose a
// random program from the DSL's building blocks and a random legal schedule
// (tests/support/random_program.hpp says what is generated and how outputs are compared); the
// program is lowered and run with the loop-nest interpreter and, where loom is built with LLVM,
// JIT-compiled for the host and run; each run's outputs are compared with the DAG interpreter's.
// A loom::user_error (the program or the schedule refused) is fine; a wrong result, another
// exception or a crash is a finding and aborts with the program, the schedule's record and the
// first difference. Runs as the ctest loom_fuzz_compile_corpus over tests/fuzz/corpus/compile,
// and as a libFuzzer executable (tests/fuzz/CMakeLists.txt).
#include <loom/config.hpp>
#if LOOM_WITH_LLVM
#include <loom/cpu.hpp>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "support/random_program.hpp"

namespace {

#if LOOM_WITH_LLVM
void jit_runner(const loom::ir::LoweredFunc& f, std::vector<void*>& ptrs) {
  auto k = loom::cpu_jit::compile(f);
  k.fn(ptrs.data());
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom_test::difffuzz;
#if LOOM_WITH_LLVM
  const kernel_runner jit = jit_runner;
  const check_result r = check_program(data, size, &jit);
#else
  const check_result r = check_program(data, size, nullptr);
#endif
  if (!r.finding.empty()) {
    std::fprintf(stderr, "fuzz_compile: %s\n", report(r).c_str());
    std::abort();
  }
  return 0;
}
