/// \file
/// The CPU umbrella header: everything in loom.hpp plus lowering, the LLVM ORC backend and
/// `build()`. Link the CMake target `loom::llvm` to use it.
#ifndef LOOM_CPU_HPP
#define LOOM_CPU_HPP

#include "loom/loom.hpp"

#if !LOOM_WITH_LLVM
#error "loom/cpu.hpp needs the LLVM backend: link the CMake target loom::llvm (apt install llvm-19-dev)"
#endif

#include "loom/backend/llvm/codegen.hpp"
#include "loom/lower/lower.hpp"
#include "loom/runtime/kernel.hpp"
#include "loom/runtime/parallel.hpp"
#include "loom/sched/default_schedule.hpp"
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

LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/impl/cpu.ipp"
#endif

#endif  // LOOM_CPU_HPP
