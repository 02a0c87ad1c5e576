/// \file
/// The JIT engine of the CPU backend: host detection, one process-wide LLVM ORC `LLJIT`, and
/// RAII handles to compiled modules (layer backend/llvm, namespace loom::cpu_jit).
///
/// This header declares no LLVM type (pimpl). With LOOM_SEPARATE_COMPILATION the code that only
/// runs kernels or queries the host therefore compiles without LLVM's headers; in header-only mode
/// the bodies (`impl/jit.ipp`) come along and bring them in. The code generator hands LLVM modules
/// to the engine through `backend/llvm/module_builder.hpp`, which always includes LLVM.
///
/// What the engine does with a module (`add_module`):
/// 1. verifies it (`llvm::verifyModule`); an invalid module is a loom::backend_error;
/// 2. sets the host triple and data layout when the module has none;
/// 3. adds it to the JIT under a fresh `ResourceTracker`;
/// 4. compiles it eagerly: the IRTransformLayer runs the `default<O3>` pipeline (PassBuilder, with
///    the host TargetMachine so that the vectorisers see the real vector width), then the
///    IRCompileLayer emits machine code and JITLink links it;
/// 5. resolves every external definition of the module, and returns a CompiledModule that owns
///    the tracker. Dropping the handle removes the code and frees its memory.
///
/// Undefined symbols in a module resolve, in order, against loom's runtime functions (defined as
/// absolute symbols, so the executable needs no `-rdynamic`: `loom_parallel_for`,
/// `loom_parallel_num_threads`, `loom_workspace_alloc`, `loom_workspace_free`) and then against
/// every symbol of the host process (libc, libm: `expf`, `memset`, ...).
///
/// Conventions the code generator must follow:
/// - External symbol names must be unique among the live modules (they share one JITDylib);
///   `Engine::unique_name()` makes such names. Internal/private symbols may repeat freely.
/// - Fast-math is off: the engine sets no global FP flags. Put fast-math flags on the
///   instructions (or `"unsafe-fp-math"`-style function attributes) where the IR allows them.
/// - Static constructors (`llvm.global_ctors`) are not run: kernels must not need them.
///
/// Thread safety: every member of Engine and `add_module` may be called concurrently from any
/// thread. A CompiledModule is a plain value: do not destroy it while another thread uses it or
/// runs its code.
#ifndef LOOM_BACKEND_LLVM_JIT_HPP
#define LOOM_BACKEND_LLVM_JIT_HPP

#include "loom/config.hpp"

#if !LOOM_WITH_LLVM
#error "link loom::llvm: loom/backend/llvm/jit.hpp needs the LLVM CPU backend (LOOM_WITH_LLVM=1)"
#endif

#include "loom/error.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {

namespace detail {
struct engine_access;
}

/// Per-module compilation options.
struct CompileOptions {
  /// IR optimisation level: the PassBuilder pipeline `default<O0..O3>`. Machine code is always
  /// generated at the aggressive codegen level.
  int opt_level = 3;
  /// Keep the optimised LLVM IR as text (CompiledModule::optimized_ir()). Costs a print.
  bool dump_ir = false;
  /// Keep the assembly (CompiledModule::assembly()). Costs a second code generation.
  bool dump_asm = false;
};

/// Move-only owner of one compiled module's code.
///
/// The destructor removes the code from the JIT (through the module's ResourceTracker); function
/// pointers obtained from it dangle afterwards. A default-constructed handle owns nothing.
class CompiledModule {
 public:
  CompiledModule() noexcept;
  CompiledModule(CompiledModule&& other) noexcept;
  CompiledModule& operator=(CompiledModule&& other) noexcept;
  CompiledModule(const CompiledModule&) = delete;
  CompiledModule& operator=(const CompiledModule&) = delete;
  ~CompiledModule();

  /// True when the handle owns code.
  explicit operator bool() const noexcept { return impl_ != nullptr; }

  /// Address of the external symbol `name` (a function or a global) as written in the IR,
  /// i.e. unmangled. Throws loom::user_error `[loom.llvm.E505]` when the module does not define
  /// it or the handle is empty.
  void* symbol(std::string_view name) const;
  /// Like symbol(), but returns nullptr instead of throwing.
  void* find_symbol(std::string_view name) const noexcept;
  /// symbol() cast to a function pointer: `m.function<void(float*, int64_t)>("add")`.
  template <class Signature>
  Signature* function(std::string_view name) const {
    return reinterpret_cast<Signature*>(symbol(name));
  }
  /// Names of every external symbol the module defines, sorted.
  std::vector<std::string> symbol_names() const;

  /// The IR after optimisation; empty unless CompileOptions::dump_ir was set.
  const std::string& optimized_ir() const noexcept;
  /// The host assembly; empty unless CompileOptions::dump_asm was set.
  const std::string& assembly() const noexcept;
  /// Wall time spent in add_module (verify + optimise + codegen + link), in seconds.
  double compile_seconds() const noexcept;

  /// Removes the code now; the handle becomes empty. Errors from LLVM are reported on stderr
  /// (a destructor cannot throw them).
  void reset() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend struct detail::engine_access;
};

/// The process-wide JIT for the host CPU.
///
/// Created on first use by global(): detects the host (CPU name and features, via
/// `JITTargetMachineBuilder::detectHost`) and builds the LLJIT. The engine is never destroyed
/// (it lives until the process exits), so CompiledModule handles held in static objects stay
/// valid during static destruction.
class Engine {
 public:
  /// The engine, created on the first call. Throws loom::backend_error `[loom.llvm.E501]` if the
  /// host cannot be targeted; a later call tries again.
  static Engine& global();

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// LLVM's name of the host CPU, e.g. "skylake-avx512", "znver3".
  const std::string& cpu_name() const noexcept;
  /// The subtarget feature string the engine compiles for, exactly as given to LLVM: every
  /// feature LLVM knows for the host, each "+name" or "-name", comma-separated.
  const std::string& features() const noexcept;
  /// Whether the host has LLVM feature `name` (without '+'), e.g. "avx2", "avx512f", "fma".
  bool has_feature(std::string_view name) const noexcept;
  /// The target triple, e.g. "x86_64-pc-linux-gnu"; and the data layout string.
  const std::string& triple() const noexcept;
  const std::string& data_layout() const noexcept;
  /// Width in bits of the widest fixed-length SIMD register the host has: 512 with AVX-512F,
  /// 256 with AVX/AVX2, 128 with SSE or NEON.
  int vector_bits() const noexcept;
  /// Vector width LLVM's vectorisers prefer by default; it can be smaller than vector_bits()
  /// (Intel AVX-512 cores prefer 256 bits unless a function sets "prefer-vector-width").
  int preferred_vector_bits() const noexcept;

  /// `prefix` followed by a process-wide counter, e.g. "loom_kernel_17": a name no other module
  /// of this engine uses (as long as callers do not invent names of that shape themselves).
  std::string unique_name(std::string_view prefix = "loom_kernel");
  /// How many CompiledModule handles currently own code.
  std::size_t live_modules() const noexcept;

 private:
  Engine();
  ~Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend struct detail::engine_access;
};

}  // namespace cpu_jit
LOOM_END_NAMESPACE

// When module_builder.hpp is the header being included, it includes the bodies itself, after its
// own declarations, which the bodies need.
#if LOOM_WITH_LLVM && !defined(LOOM_SEPARATE_COMPILATION) && !LOOM_LLVM_COMPILED && \
    !defined(LOOM_BACKEND_LLVM_MODULE_BUILDER_HPP)
#include "loom/backend/llvm/impl/jit.ipp"
#endif

#endif  // LOOM_BACKEND_LLVM_JIT_HPP
