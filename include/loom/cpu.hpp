/// \file
/// The CPU umbrella header: everything in loom.hpp plus lowering, the LLVM ORC backend and
/// `build()`. Link the CMake target `loom::llvm` to use it.
#ifndef LOOM_CPU_HPP
#define LOOM_CPU_HPP

#include "loom/loom.hpp"

#if !LOOM_WITH_LLVM
// clang-format off: the header test finds the target this #error names on its line
#error "loom/cpu.hpp needs the LLVM backend: link the CMake target loom::llvm (apt install llvm-19-dev)"
// clang-format on
#endif

#include "loom/backend/llvm/codegen.hpp"
#include "loom/backend/llvm/measurer.hpp"
#include "loom/lower/lower.hpp"
#include "loom/runtime/kernel.hpp"
#include "loom/runtime/parallel.hpp"
#include "loom/runtime/workspace.hpp"
#include "loom/sched/default_schedule.hpp"
#include "loom/sched/layout_rewrite.hpp"
#include "loom/search/task.hpp"

LOOM_BEGIN_NAMESPACE

struct BuildOptions {
  std::string name = "kernel";
  lower::LowerOptions lower;
  cpu_jit::CodegenOptions codegen;
};

/// Lowers `state` and JIT-compiles it for the host CPU.
Kernel build(const Task& task, const sched::State& state, const BuildOptions& options = {});
/// Builds `task` with the default schedule (sched/default_schedule.hpp).
Kernel build(const Task& task, const BuildOptions& options = {});

/// A kernel whose constant input (a weight) is stored in the layout its loop nest walks
/// (sched/layout_rewrite.hpp). Run `pack` once per value of the input — arguments (input,
/// packed buffer of `packed_shape`) — then call `kernel` as often as needed, with the packed
/// buffer at position `argument` instead of the input.
struct PackedKernel {
  Kernel pack;
  Kernel kernel;
  std::string input;
  std::vector<int64_t> packed_shape;
  int argument = -1;
};

/// Rewrites input `input`'s layout for `state` and builds both kernels; throws what
/// sched::rewrite_layout and build() throw.
PackedKernel build_with_packed_input(const Task& task, const sched::State& state,
                                     const std::string& input, const BuildOptions& options = {});

/// Why `kernel`, built for `task`, differs from the reference interpreter; empty when it agrees.
/// The kernel runs once on the measurer's seeded random inputs (backend/measure_data.hpp) and
/// `points` elements of each output (its first and last, the rest spread at random with a fixed
/// seed) are compared with dag/evaluate.hpp's evaluate_points as the measurers compare outputs
/// (measure_data::agrees: integers exactly, floats within `atol + rtol × |expected|`).
/// evaluate_points computes only what those elements depend on: milliseconds on GEMM 1024³,
/// where evaluating the whole DAG takes 19 s. The kernel runs in this process: a kernel that
/// crashes ends it.
std::string spot_check(const Task& task, const Kernel& kernel, int points = 64, double rtol = 1e-3,
                       double atol = 1e-4);

LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/impl/cpu.ipp"
#endif

#endif  // LOOM_CPU_HPP
