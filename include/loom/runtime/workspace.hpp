/// \file
/// Scratch memory for JIT-compiled kernels (layer runtime/): the heap buffers of a loop nest's
/// intermediate stages (a padded input, a cache stage, an unfused producer) that are too large for
/// the stack (CodegenOptions::max_stack_bytes).
///
/// Why not malloc and free. A kernel allocates its intermediates on every call and frees them
/// before returning. With glibc, whether that costs anything depends on the state of the whole
/// process's heap. Blocks above the mmap threshold are mapped and unmapped on every call. Blocks
/// below it can still be returned by the heap trim when the freed top of the heap exceeds the
/// trim threshold. In both cases every page is faulted in again on the next call. Measured on the
/// conv layer of issue 6 (a program with a 0.86 MB padded input and a 0.8 MB unfused conv output):
/// 600–630 µs in the tuner's child and in a fresh process, 1,160–1,580 µs in the same program's
/// benchmark process and in a process that had forked measurers. With glibc's thresholds raised
/// (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) it ran at 605–615 µs there too. So the
/// tuner ranked it first, but in an application it ran at half that speed.
///
/// So freed blocks are kept, per thread, for the next call:
/// - `loom_workspace_alloc` returns a 64-byte aligned block of at least `bytes` bytes: the
///   smallest cached block of this thread that is large enough and at most twice the request,
///   otherwise a new one;
/// - `loom_workspace_free` puts a block back in the cache of the thread that frees it (any
///   thread may free any block);
/// - a thread caches at most `workspace_cache_limit` bytes; beyond that, its oldest blocks are
///   freed. A block larger than the limit is never cached. The cache is freed when its thread ends,
///   or by `release_workspace()`.
///
/// The CPU JIT binds both symbols as absolute symbols, as it binds loom_parallel_for.
#ifndef LOOM_RUNTIME_WORKSPACE_HPP
#define LOOM_RUNTIME_WORKSPACE_HPP

#include "loom/config.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" {
/// A 64-byte aligned block of at least `bytes` bytes (null when memory is exhausted).
LOOM_DECL void* loom_workspace_alloc(int64_t bytes) noexcept;
/// Gives back a block of loom_workspace_alloc (null is ignored).
LOOM_DECL void loom_workspace_free(void* block) noexcept;
}  // extern "C"

LOOM_BEGIN_NAMESPACE
namespace runtime {

/// What a generated kernel returns (Kernel::entry_fn): 0 when it ran to the end, or this when a
/// workspace block could not be allocated; it then stops at once, its outputs incomplete, its
/// workspace given back (Kernel::run throws `[loom.runtime.E607]`).
inline constexpr int32_t kernel_status_out_of_memory = 1;

/// What a non-zero kernel status means, for error messages: "out of memory: ...", or
/// "status N" for a status loom does not know.
inline std::string kernel_status_text(int32_t status) {
  if (status == kernel_status_out_of_memory)
    return "out of memory: the memory for its intermediate buffers could not be allocated";
  return "status " + std::to_string(status);
}

/// Bytes of freed blocks each thread keeps for reuse.
inline constexpr size_t workspace_cache_limit = size_t{256} << 20;

/// Frees the calling thread's cached blocks (for a long-lived thread that is done with kernels).
LOOM_DECL void release_workspace() noexcept;

/// Bytes the calling thread holds in its cache now (for tests and diagnostics).
LOOM_DECL size_t cached_workspace_bytes() noexcept;

}  // namespace runtime
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/runtime/impl/workspace.ipp"
#endif

#endif  // LOOM_RUNTIME_WORKSPACE_HPP
