/// \file
/// GPU lowering (layer lower/): a schedule whose loops are bound to blockIdx / vthread /
/// threadIdx becomes a `GpuProgram`, a sequence of kernels in the execution model of CUDA, which
/// the CUDA code generator prints (backend/cuda/codegen.hpp) and `emulate()` runs on the CPU.
///
/// The loop nest that `lower()` makes means what it says when its loops run one after the other:
/// that meaning is what the reference interpreter checks. On a GPU a loop bound to threadIdx.x
/// is not a loop: every thread of the block runs the body once with the loop variable equal to
/// its own index. `make_gpu_program` turns the first meaning into the second:
///
///  1. Each statement at the root of the nest (a root stage and everything computed inside it)
///     becomes one kernel, launched in order. Intermediate tensors computed at the root become
///     workspaces in global memory that the host allocates.
///  2. A kernel's outermost loops bound to blockIdx.x/y/z give the grid; every threadIdx loop
///     inside gives the block (the largest extent per dimension) and becomes the thread's index,
///     guarded with `threadIdx.x < extent` where its extent is smaller than the block's.
///     vthread loops run serially inside the thread (loom does not interleave virtual threads).
///  3. Shared-memory stages (cache_read "shared") are allocated once per block; lowering sizes
///     their region for every thread of the block (the threadIdx loops around their attach
///     point range, as TVM's bound inference relaxes them), and their own loops, bound to
///     threadIdx.x by the search, fetch cooperatively.
///  4. Barriers (`ir::Barrier`, `__syncthreads()`) are inserted where a thread may read shared
///     memory another thread wrote (or write what another may still read) since the last one,
///     including across iterations of the loops around them; a barrier is only placed where all
///     threads of the block run the same control flow.
///  5. A reduction across threads: a threadIdx.x loop around the update `b[i] = b[i] (op) v`
///     of an element that does not depend on it (a reduction loop bound to threadIdx.x;
///     `lower()` puts that loop outside the stage's other reduction loops, each iteration
///     accumulating in registers of its own). Each thread combines its iterations' values in a
///     partial of its own, an `ir::AllReduce` (warp shuffles, and shared memory past a warp)
///     gives every thread the whole combination, and `b[i]` takes it: a thread's own copy of b
///     in every thread, a global one from thread 0.
///  6. Software pipelining: a loop annotated `pipeline`, `pipeline3` or `pipeline4`
///     (ir::pipeline_stages: 2, 3 or 4 stages; sm_80 and later), at which shared stages are
///     computed, gets a slot per stage of each array those stages fill. Each iteration starts the
///     asynchronous copies (`ir::CopyAsync`, CUDA's `cp.async`) of the tiles of the iteration
///     stages - 1 ahead into the slot the previous iteration used, and computes with its own,
///     which a barrier that waits for all but the last stages - 2 copy groups
///     (`Barrier::pending_groups`, `cp.async.wait_group`) made visible; a prologue before the
///     loop fetches the first stages - 1 (2 stages: double buffering). The loop's body must be
///     those copies from global memory, a barrier, then code that reads but does not write them
///     (what lowering makes of shared stages computed at the loop). The emulation lands copies
///     as late as the waits allow and poisons their destinations until then.
///
/// Programs whose GPU meaning could differ from their sequential one, or that the device cannot
/// run, are rejected with loom::user_error (the search drops them before measuring):
///  - `[loom.lower.E420]` a stage writes global or shared memory outside the threadIdx loops of
///    its kernel (every thread would write it), or a thread-bound loop does not enclose the
///    writes it should distribute (a store that ignores the thread index but reads what it
///    writes, other than a reduction across threadIdx.x of point 5), or a reduction across
///    threads runs across threadIdx.y or z, into shared memory, into an element that depends on
///    a loop inside the thread loop, or two into one thread loop;
///  - `[loom.lower.E421]` a thread's private (local) buffer is written inside a threadIdx loop
///    that does not enclose its allocation (the threads would each fill only their part);
///  - `[loom.lower.E422]` a threadIdx loop inside another of the same dimension uses the outer
///    one's variable (both are the same hardware index);
///  - `[loom.lower.E423]` a loop bound to blockIdx is not among the outermost loops of its root
///    stage, a GPU-bound loop has a non-constant extent, or a loop is marked parallel;
///  - `[loom.lower.E424]` a barrier, or a reduction across threads, would be needed where the
///    threads of a block diverge;
///  - `[loom.lower.E425]` more threads per block, shared memory per block, or local memory per
///    thread than the target allows, or a grid dimension beyond CUDA's limits.
///  - `[loom.lower.E428]` a pipelined loop that cannot be pipelined (point 6): a target
///    before sm_80, bounds that depend on the thread index, a pipelined loop inside another,
///    a body not of the form above, or a fetched array also used outside the loop.
#ifndef LOOM_LOWER_GPU_HPP
#define LOOM_LOWER_GPU_HPP

#include "loom/ir/stmt.hpp"
#include "loom/lower/lower.hpp"
#include "loom/lower/mma.hpp"
#include "loom/sched/state.hpp"
#include "loom/target.hpp"

#include <array>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// One kernel launch: what each thread of a `grid` × `block` launch runs.
struct GpuKernel {
  std::string name;
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  /// The variables that stand for blockIdx.x/y/z and threadIdx.x/y/z in `body`.
  std::array<ir::Expr, 3> block_index, thread_index;
  /// Global buffers the body reads or writes: program arguments (in argument order), then
  /// workspaces (in the program's order).
  std::vector<ir::Buffer> params;
  /// The block's shared-memory arrays.
  std::vector<ir::Buffer> shared;
  /// What one thread runs. Allocations inside it are the thread's own (local) arrays.
  ir::Stmt body;
  /// The target's Target::min_blocks_per_sm (0: none), for the kernel's launch bounds.
  int min_blocks_per_sm = 0;
  /// Tensor-core nests that are warpgroup MMAs run as such (Target::warpgroup_mma).
  bool warpgroup_mma = false;
  /// The shared arrays a warpgroup MMA reads: each starts at a multiple of 1024 bytes, where
  /// the hardware's swizzle of the shared address is the layout's (lower::WgmmaOperand).
  std::vector<ir::Buffer> wgmma_operands;

  int64_t threads_per_block() const { return block[0] * block[1] * block[2]; }
  /// The shared arrays' bytes and those the kernel's AllReduces use.
  int64_t shared_bytes() const;
  /// The entries of `params` that the body stores to (the others it only reads).
  std::vector<ir::Buffer> written_params() const;
};

/// How many elements of shared memory an AllReduce (ir/stmt.hpp) uses in a block of `block`
/// threads: none when each row of threadIdx.x is a power of two no longer than a warp (warp
/// shuffles alone), one per warp and row when rows are whole warps (shuffles, then the warps'
/// results through shared memory), else one per thread (every thread's value through shared
/// memory).
int64_t all_reduce_scratch_elements(const std::array<int64_t, 3>& block);

/// The warpgroup MMA that loop `f` of kernel `k` heads, where the kernel runs them
/// (GpuKernel::warpgroup_mma) and `f` heads an MmaNest that is one (lower::match_wgmma); none
/// otherwise. What the CUDA printer and the emulation both ask, so that they agree.
std::optional<WgmmaNest> kernel_wgmma(const GpuKernel& k, const ir::For& f);

/// A schedule as GPU kernels, launched in order on one stream.
struct GpuProgram {
  std::string name;
  /// The kernel arguments, as in `ir::LoweredFunc` (arg_index 0, 1, ...).
  std::vector<ir::Buffer> args;
  /// Intermediate tensors in global memory, allocated by the host for the whole program.
  std::vector<ir::Buffer> workspaces;
  std::vector<GpuKernel> kernels;
};

/// The options `lower()` takes for GPU programs: no unrolling (Unrolled loops stay loops and
/// become `#pragma unroll`), no vectorization (Vectorized loops stay scalar loops: the CUDA
/// printer makes a copy of 4, 8 or 16 aligned bytes one vector access and unrolls the rest), no
/// loop partitioning (its peeled iterations would run outside the thread loops).
LowerOptions gpu_lower_options();

/// Lowers `state` for `target` (a CUDA target) and makes its kernels. Throws the errors of
/// `lower()` and those listed at the top of this file.
GpuProgram lower_gpu(const sched::State& state, const Target& target,
                     const std::string& name = "kernel");

/// Makes the kernels of a loop nest lowered with `gpu_lower_options()`.
GpuProgram make_gpu_program(const ir::LoweredFunc& f, const Target& target);

/// The program as one sequential loop nest that computes what the GPU computes: the grid and
/// the threads of each block become loops, split at every barrier (all threads run up to a
/// barrier before any goes on), and a thread's arrays that live across a barrier get one copy
/// per thread. Asynchronous copies (ir::CopyAsync) land at the first barrier that waits for
/// their group, after every thread has reached it, and their destinations hold poison from the
/// start of the copy until then. Run by the loop-nest interpreter, it checks a GPU program on
/// the CPU: a missing barrier, a wait for too few copy groups, or a copy into memory still being
/// read shows up as a read of poison or of a stale value.
ir::LoweredFunc emulation_func(const GpuProgram& program);

/// Runs `program` on the CPU through `emulation_func` and the loop-nest interpreter (`args` as
/// for `interpret`).
void emulate(const GpuProgram& program, const std::vector<void*>& args);

/// The kernels with their launch shapes and bodies, for reading.
std::ostream& operator<<(std::ostream& os, const GpuProgram& program);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/gpu.ipp"
#endif

#endif  // LOOM_LOWER_GPU_HPP
