/// \file
/// The LLVM-facing half of the CPU JIT: how the code generator hands an `llvm::Module` to the
/// engine, and the host target information it needs while building IR (layer backend/llvm).
///
/// Only the code generator (and the JIT tests) include this header: it brings in LLVM through
/// `llvm_headers.hpp`. Everything else uses `jit.hpp`.
///
/// Typical use:
/// \code
///   auto& engine = cpu_jit::Engine::global();
///   cpu_jit::ModuleBundle b = cpu_jit::new_module(engine, "kernel");
///   std::string name = engine.unique_name();
///   ... build a function `name` with llvm::IRBuilder in *b.context / *b.module ...
///   cpu_jit::CompiledModule m = cpu_jit::add_module(engine, std::move(b));
///   auto* fn = m.function<void(float*, int64_t)>(name);
/// \endcode
///
/// The bodies live in `impl/jit.ipp` together with the engine's.
#ifndef LOOM_BACKEND_LLVM_MODULE_BUILDER_HPP
#define LOOM_BACKEND_LLVM_MODULE_BUILDER_HPP

#include "loom/backend/llvm/jit.hpp"
#include "loom/backend/llvm/llvm_headers.hpp"

#include <memory>
#include <string>
#include <string_view>

#if LOOM_WITH_LLVM  // otherwise jit.hpp has already said which target to link

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {

/// A module under construction together with the context that owns it. The context is declared
/// first so that it is destroyed last.
struct ModuleBundle {
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
};

/// A fresh context and an empty module named `name`, already set to the host triple and data
/// layout (so that `DataLayout` queries made while building IR are the ones the JIT will use).
LOOM_LLVM_DECL ModuleBundle new_module(Engine& engine, std::string_view name);

/// Sets `module`'s triple and data layout to the host's when they are unset.
LOOM_LLVM_DECL void configure_module(Engine& engine, llvm::Module& module);

/// Verifies, optimises, compiles and links `module` (see the steps in jit.hpp) and returns the
/// handle that owns its code. `module` must belong to `context`; both are consumed.
///
/// Errors: loom::user_error `[loom.llvm.E508]` for a null or mismatched module/context;
/// loom::backend_error `[loom.llvm.E502]` when the verifier rejects the module,
/// `[loom.llvm.E503]` when the JIT refuses it (a symbol already defined by a live module, an
/// incompatible data layout) and `[loom.llvm.E504]` when compiling or linking fails (an
/// unresolved symbol, ...). Every message carries LLVM's own text. After an error the engine is
/// unchanged: nothing of the module stays in the JIT.
LOOM_LLVM_DECL CompiledModule add_module(Engine& engine, std::unique_ptr<llvm::Module> module,
                                         std::unique_ptr<llvm::LLVMContext> context,
                                         const CompileOptions& options = {});
/// add_module() on a bundle from new_module().
LOOM_LLVM_DECL CompiledModule add_module(Engine& engine, ModuleBundle&& bundle,
                                         const CompileOptions& options = {});

/// The JIT's data layout and target triple.
LOOM_LLVM_DECL const llvm::DataLayout& data_layout(Engine& engine);
LOOM_LLVM_DECL const llvm::Triple& target_triple(Engine& engine);

/// A new TargetMachine for the host, configured exactly as the JIT's (CPU, features, codegen
/// level, relocation and code model). The caller owns it; use it for TargetTransformInfo queries
/// while generating IR. Throws loom::backend_error `[loom.llvm.E501]` on failure.
LOOM_LLVM_DECL std::unique_ptr<llvm::TargetMachine> create_target_machine(Engine& engine);

/// Widest fixed-length vector register of `tm`'s subtarget in bits, ignoring the subtarget's
/// preference for narrower vectors (TTI asked with "prefer-vector-width" lifted).
LOOM_LLVM_DECL int max_vector_register_bits(llvm::TargetMachine& tm);
/// The vector width LLVM's vectorisers use by default for `tm` (TTI, no attributes).
LOOM_LLVM_DECL int preferred_vector_register_bits(llvm::TargetMachine& tm);

/// Runs the PassBuilder pipeline `default<O{opt_level}>` on `module` with `tm` supplying the
/// target information (the vectorisers' register widths and costs); what the engine's
/// IRTransformLayer does to every module. Loop and SLP vectorisation, interleaving and unrolling
/// are on from O2, as with clang. Throws loom::user_error `[loom.llvm.E508]` for a level outside
/// 0..3 and loom::backend_error `[loom.llvm.E506]` if LLVM reports an error.
LOOM_LLVM_DECL void optimize_module(llvm::Module& module, llvm::TargetMachine& tm,
                                    int opt_level = 3);

/// The textual IR of `module` (for debugging and printing).
LOOM_LLVM_DECL std::string print_module(const llvm::Module& module);

/// The assembly `tm` generates for a copy of `module` (which itself is left untouched).
/// Throws loom::backend_error `[loom.llvm.E507]` if the target cannot emit assembly.
LOOM_LLVM_DECL std::string emit_assembly(const llvm::Module& module, llvm::TargetMachine& tm);

}  // namespace cpu_jit
LOOM_END_NAMESPACE

#if !defined(LOOM_SEPARATE_COMPILATION) && !LOOM_LLVM_COMPILED
#include "loom/backend/llvm/impl/jit.ipp"
#endif

#endif  // LOOM_WITH_LLVM
#endif  // LOOM_BACKEND_LLVM_MODULE_BUILDER_HPP
