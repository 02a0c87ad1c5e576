/// \file
/// Random annotation (layer search/): Ansor's "init rules", which turn a sketch
/// (search/sketch.hpp) into a complete program by random choices. CPU order (ansor.md §1.5):
///
///  1. FillTileSize — every unset split length is drawn: a uniformly chosen ordered
///     factorization of the loop's extent whose innermost factor is at most
///     `max_innermost_split_factor`; with `allow_non_divisible_tiles`, or for an awkward extent
///     such as a prime (`non_divisible_for_awkward_extents`), sometimes free lengths that need
///     not divide (loom lowers the tails). The sketch's history is replayed with the
///     lengths filled in, so every later step (follow_split, compute_at) sees real extents.
///  2. ChangeComputeLocation — every stage that is not tiled, not multi-level-tiled, not
///     inlined and not placed by the sketch (a compute_at/root/inline step in its history) moves
///     to the root, or to one of the candidate loops of its consumer (and of the stage that
///     consumer is computed inside), uniformly.
///  3. Parallel — the outer spatial loops of every root stage are fused and parallelized until
///     their product exceeds `parallel_granularity × num_cores`.
///  4. Unroll — every stage with a reduction gets `auto_unroll_max_step` from the candidates.
///  5. Vectorization — a random number of the innermost spatial loops (product at most
///     `max_vectorize_size`; one loop for a tiled stage) is fused and vectorized.
///
/// GPU order (search/impl/gpu_annotate.ipp): FillTileSize, ThreadBind, DoubleBuffer, Unroll
/// (with `gpu_auto_unroll_candidates`), VerifyGpuProgram:
///  - ThreadBind: a multi-level-tiled root stage fuses its level-0, level-1 and level-2 spatial
///    loops and binds them to blockIdx.x, vthread and threadIdx.x (the draw is rejected when the
///    vthread extent exceeds `max_vthread_extent`, or when fewer threads than a warp run and
///    the stage has more than two warps of work); another root stage fuses its outer spatial
///    loops and splits them into blockIdx.x × threadIdx.x with the threads drawn from
///    `gpu_thread_candidates` (threadIdx.x alone when they fit in a warp); a shared-memory copy
///    fuses its loops and splits them by the thread count of the stage it is computed in
///    (follow_fused_split of that stage's thread level), the inner part bound to threadIdx.x:
///    cooperative fetching. A copy feeding a tensor-core tile has its rows padded
///    (storage_align) to an odd number of 16 bytes with probability
///    `gpu_pad_shared_probability` (not in Ansor): consecutive rows an `ldmatrix` phase reads
///    then hit 8 different bank groups (B's k rows: no bank conflict), rows two apart 4 (A's
///    where a lane holds one tile: 2-way conflicts, more with more tiles). Rows of 32, 64 or
///    128 bytes whose phases read consecutive rows are instead swizzled with probability
///    `gpu_swizzle_shared_probability` (storage_swizzle, Hopper's layout: the same 8 bank
///    groups without the padding's shared memory). With probability
///    `gpu_lane_major_probability` (not in Ansor) the copy's axes that the tile reads by a
///    lane-split variable are stored lane-major (storage_permute;
///    detail::tensor_core_lane_major): the rows (columns) one ldmatrix phase reads lie side by
///    side whatever the lanes' register tiles, so padded A reads have no conflict and B's
///    columns of one instruction are contiguous (ldmatrix .trans where a lane has several
///    tiles along N), a convolution's window axes at stride 1 (h + rh) included. Where A's 8
///    lanes of a phase spread over several axes (a convolution's image rows and columns), the
///    outer axes' strides are padded too (detail::tensor_core_phase_aligns), so that the
///    phase's rows still hit 8 bank groups. A permuted innermost axis narrows the copy's vectors
///    to its unit (the fragment's two columns, 4 bytes). On a target that runs warpgroup MMAs
///    (Target::warpgroup_mma, sm_90a) every tensor-core copy is stored lane-major and swizzled
///    wherever its rows allow, rows past 128 bytes in chunks of 128 (storage_chunk): the
///    canonical layouts a wgmma's descriptors read (lower::WgmmaOperand), with no draw. Each
///    thread copies a vector of the
///    copy's innermost elements: the widest its extent and layout allow (16 bytes at most) with
///    probability `gpu_widest_copy_probability` (not in Ansor, which starts at 1 lane), else 1,
///    2, 4 or 8 lanes drawn uniformly from those allowed. With `gpu_vector_stores` (not in
///    Ansor) a root stage bound to threads that reduces nothing (a tile's consumer) has its
///    innermost loop, the thread's run of outputs along the last axis, vectorized over the
///    widest of 2, 4 or 8 lanes of at most 16 bytes that divides it: one vector store.
///  - DoubleBuffer (not in Ansor): on sm_80 and later, a reduction loop of two or more
///    iterations that shared stages are computed at is pipelined with probability
///    `gpu_double_buffer_probability`, in 2 to `gpu_max_pipeline_stages` stages drawn uniformly
///    (`pipeline`, `pipeline3`, `pipeline4`): the tiles of the next stages - 1 iterations are
///    copied asynchronously while the current ones are used (lower/gpu.hpp, point 6).
///  - VerifyGpuProgram: the draw is rejected if lower::lower_gpu refuses the program (too many
///    threads or too much shared memory for the target, see lower/gpu.hpp).
///
/// The five CPU rules are `InitRule` objects in a table (cpu_init_rules()); users can pass their
/// own, which run first, in the order given, on the sketch with its unset lengths (so a custom
/// rule may set some lengths itself, and FillTileSize fills only the rest) — see
/// examples/03_custom_annotation_rule.cpp.
///
/// Randomness: only `rng()` is used, reduced modulo the number of choices, so a seed gives the
/// same programs on every platform (the standard fixes mt19937_64's output, not the
/// distributions').
#ifndef LOOM_SEARCH_ANNOTATE_HPP
#define LOOM_SEARCH_ANNOTATE_HPP

#include "loom/search/sketch.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <random>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// One init rule: a random edit of a program on its way from a sketch to a complete program.
/// It may throw loom::user_error (an illegal step): the draw is then rejected. A rule must use
/// only `rng()` for randomness to stay reproducible across platforms.
struct InitRule {
  using ApplyFn = std::function<void(const SketchContext&, sched::State&, std::mt19937_64&)>;
  std::string name;
  ApplyFn apply;
  /// The part of the history the rule's steps belong to (sched::StepOrigins): the sampled
  /// program records where each part begins, and mutation and crossover rely on it. Rules run
  /// in part order; custom rules run first, on the sketch, and their steps are the sketch's.
  sched::StepPart part = sched::StepPart::Sketch;
};

/// The built-in CPU init rules in Ansor's order: FillTileSize, ChangeComputeLocation, Parallel,
/// Unroll, Vectorization.
const std::vector<InitRule>& cpu_init_rules();
/// The built-in GPU init rules: FillTileSize, ThreadBind, DoubleBuffer, Unroll, VerifyGpuProgram.
const std::vector<InitRule>& gpu_init_rules();
/// The init rules for the task's target.
const std::vector<InitRule>& init_rules(const Target& target);

/// One random complete program from `sketch`, or nothing when the draw is rejected (a step was
/// illegal in the state it met, e.g. a split length that leaves no loop to fuse).
/// `custom_rules` run before the built-in ones. The program records where the parts of its
/// history begin (sched::State::origins(), from the rules' `part`). Throws loom::user_error
/// `[loom.search.E814]` if a custom rule declares a part other than the sketch's.
std::optional<sched::State> try_sample_program(const sched::State& sketch, const Task& task,
                                               const SearchOptions& options, std::mt19937_64& rng,
                                               const std::vector<InitRule>& custom_rules = {});

/// Like try_sample_program, retrying up to `options.max_sample_attempts` draws. Throws
/// loom::user_error `[loom.search.E810]` if every draw is rejected.
sched::State sample_program(const sched::State& sketch, const Task& task,
                            const SearchOptions& options, std::mt19937_64& rng,
                            const std::vector<InitRule>& custom_rules = {});

/// Up to `count` distinct programs (by printed loop nest), each from a sketch chosen uniformly
/// (Ansor's SampleInitPopulation without the cost model); gives up after `20 × count` draws.
std::vector<sched::State> sample_programs(const std::vector<sched::State>& sketches,
                                          const Task& task, const SearchOptions& options,
                                          std::mt19937_64& rng, int count,
                                          const std::vector<InitRule>& custom_rules = {});

/// A split whose lengths the search will choose, for sketches written by hand (AutoTVM's
/// `define_split`): leaf `iter` of `stage` is split into `parts` loops, with the lengths in
/// `fixed` (outer to inner, `parts - 1` entries) where set and drawn by FillTileSize where
/// unset. Throws loom::user_error `[loom.search.E812]` for `parts < 2` or a `fixed` of the wrong
/// size, and the split's own errors for a bad stage or loop.
void define_split(sched::State& state, const std::string& stage, int iter, int parts,
                  std::vector<std::optional<int64_t>> fixed = {});

// --- the init rules on their own (for tests and for mutation) -----------------------------------

/// Every ordered list of `n` inner split lengths (outer to inner) whose product divides `extent`
/// and whose last entry is at most `max_innermost`; the outer loop takes the rest. Memoized.
const std::vector<std::vector<int64_t>>& perfect_tilings(int64_t extent, int n, int max_innermost);

/// FillTileSize: the sketch replayed with every unset split length drawn. Throws
/// loom::user_error from replay if a drawn length is illegal, and `[loom.search.E811]` if a
/// split with unset lengths has an unknown extent.
sched::State fill_tile_sizes(const sched::State& sketch, const SearchOptions& options,
                             std::mt19937_64& rng);
/// The loops of the stage's single consumer (and of the stage that consumer is computed inside)
/// where `stage` may be computed, as (stage index, leaf position); Ansor's
/// GetComputeLocationCandidates. loom also accepts several consumers when one is a root stage
/// and the others are computed inside it: then the candidates are that root's loops down to
/// the outermost loop where one of the others is computed.
std::vector<std::pair<int, int>> compute_location_candidates(const SketchContext& ctx,
                                                             const sched::State& state, int stage);
/// ChangeComputeLocation (see the file comment).
void change_compute_location(const SketchContext& ctx, sched::State& state, std::mt19937_64& rng);
/// Parallel (see the file comment).
void annotate_parallel(const SketchContext& ctx, sched::State& state);
/// Unroll (see the file comment); the candidates are the GPU ones for a CUDA target.
void annotate_unroll(const SketchContext& ctx, sched::State& state, std::mt19937_64& rng);
/// Vectorization (see the file comment).
void annotate_vectorize(const SketchContext& ctx, sched::State& state, std::mt19937_64& rng);
/// GPU ThreadBind (see the file comment). Throws loom::user_error `[loom.search.E813]` when the
/// drawn tiles give a multi-level-tiled stage too many vthreads or too few threads.
void gpu_thread_bind(const SketchContext& ctx, sched::State& state, std::mt19937_64& rng);
/// GPU DoubleBuffer (see the file comment).
void gpu_double_buffer(const SketchContext& ctx, sched::State& state, std::mt19937_64& rng);
/// The most pipeline stages DoubleBuffer and MutateDoubleBuffer give a loop:
/// `options.gpu_max_pipeline_stages`, kept within 2 to ir::kMaxPipelineStages.
int max_pipeline_stages(const SearchOptions& options);
/// A pipeline annotation of 2 to max_pipeline_stages(options) stages, drawn uniformly.
sched::Annotation draw_pipeline_kind(const SearchOptions& options, std::mt19937_64& rng);
/// Re-derives each storage_permute of a tensor-core operand's shared copy in `state` from the
/// tile's current register lengths, as a follow split follows its source, and each
/// storage_swizzle from the copy's current rows (padding the rows instead where they are no
/// longer 32, 64 or 128 bytes): a mutation or a crossover may have changed the lengths the
/// layout was drawn for (the program stays right either way, only its bank conflicts return).
/// Leaves `state` as it is where nothing changes or the edited history does not replay. With
/// `warpgroup_target` (Target::warpgroup_mma) rows grown past 128 bytes are stored in chunks of
/// 128 (storage_chunk, appended) and stay swizzled, as ThreadBind stores them there.
void follow_operand_layouts(sched::State& state, bool warpgroup_target = false);
/// The loops of `state` that DoubleBuffer may pipeline, as (stage, leaf position): reduction
/// loops of two or more iterations, not annotated, at which shared stages are computed.
std::vector<std::pair<std::string, int>> double_buffer_candidates(const sched::State& state);

}  // namespace search
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/search/impl/annotate.ipp"
#endif

#endif  // LOOM_SEARCH_ANNOTATE_HPP
