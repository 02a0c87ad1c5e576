/// \file
/// The CPU code generator (layer backend/llvm): a lowered loop nest becomes an LLVM module, JIT
/// compiled for the host. No LLVM type appears here; the implementation is in impl/codegen.ipp.
///
/// Generated kernels have the C signature `int32_t name(void** args)`: `args[i]` points to the
/// data of argument i (the ComputeDAG's inputs, then outputs); the return value is 0. The body is
/// an internal function whose arguments are `noalias`, so LLVM may keep values in registers.
/// Parallel loops are outlined into closures run by `loom_parallel_for` (runtime/parallel.hpp);
/// vector expressions become LLVM vector code (contiguous loads/stores, gathers/scatters
/// otherwise); small constant allocations live on the stack, large ones in blocks of
/// `loom_workspace_alloc` (runtime/workspace.hpp), which are kept for the next call.
#ifndef LOOM_BACKEND_LLVM_CODEGEN_HPP
#define LOOM_BACKEND_LLVM_CODEGEN_HPP

#include "loom/backend/llvm/jit.hpp"
#include "loom/ir/stmt.hpp"

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {

struct CodegenOptions {
  int opt_level = 3;
  bool dump_ir = false;   ///< keep the optimised IR (CompiledModule::optimized_ir())
  bool dump_asm = false;  ///< keep the assembly (CompiledModule::assembly())
  /// Allocations up to this many bytes go on the stack (hoisted to the function entry).
  int64_t max_stack_bytes = 64 * 1024;
};

/// The kernel function type of compiled loop nests.
using kernel_fn = int32_t (*)(void** args);

/// A compiled loop nest: the module that owns the code and the kernel's entry point.
struct CompiledKernel {
  CompiledModule module;
  kernel_fn fn = nullptr;
  std::string symbol;  ///< the entry point's (unique) symbol name
};

/// Compiles `f` under a unique symbol derived from `f.name`. Throws loom::backend_error with
/// LLVM's message when LLVM rejects the module, loom::user_error for loop nests the CPU cannot
/// run (GPU thread bindings).
CompiledKernel compile(const ir::LoweredFunc& f, const CodegenOptions& options = {});

}  // namespace cpu_jit
LOOM_END_NAMESPACE

#if !defined(LOOM_SEPARATE_COMPILATION) && !LOOM_LLVM_COMPILED
#include "loom/backend/llvm/impl/codegen.ipp"
#endif

#endif  // LOOM_BACKEND_LLVM_CODEGEN_HPP
