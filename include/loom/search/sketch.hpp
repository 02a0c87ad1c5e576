/// \file
/// Sketch generation (layer search/): Ansor's derivation rules, which turn a computation into a
/// small set of *sketches* — schedules whose loop structure (tiling, fusion, cache stages) is
/// fixed but whose split lengths are left unset, to be filled by random annotation
/// (search/annotate.hpp).
///
/// The derivation engine (Ansor §4.1, TVM `SketchPolicy::GenerateSketches`) visits the stages of
/// a state from the last (the output) towards the inputs. For the working stage it tries the
/// rules in order; every rule whose condition is not `Skip` contributes the successor states its
/// `apply` returns, each paired with the next stage to work on, and a rule whose condition is
/// `ApplyAndSkipRest` stops the later rules. A state whose working stage is below 0 is a finished
/// sketch. There is no deduplication: the rules are written so that each path is a different
/// sketch.
///
/// The built-in CPU rules, in the order they are tried (ansor.md §1.4):
///
/// | rule                       | condition                                   | result            |
/// |----------------------------|---------------------------------------------|-------------------|
/// | AlwaysInline               | computed, not an output, no reduction,      | ApplyAndSkipRest  |
/// |                            | strictly inlineable                         |                   |
/// | AddRfactor                 | untouched reduction with more reduction     | Apply (2 sketches:|
/// |                            | than spatial parallelism (needs_rfactor)    | outer/inner part) |
/// | MemoryBoundReduction (loom)| untouched reduction, no multi-level tiling, | Apply             |
/// |                            | its consumers read it row by row            |                   |
/// | PackReusedInput (loom)     | input read by one multi-level-tiled stage   | Apply (2 sketches:|
/// |                            | along its innermost axis, reused across     | tile or panel;    |
/// |                            | another                                     | also unpacked)    |
/// | AddCacheWrite              | needs multi-level tiling, no element-wise   | Apply (the state  |
/// |                            | matched consumer, no cache-write stage yet  | goes on uncached) |
/// | MultiLevelTilingWithFusion | needs multi-level tiling and has a single   | ApplyAndSkipRest  |
/// |                            | element-wise matched consumer               | after cache_write,|
/// |                            |                                             | else Apply        |
/// | MultiLevelTiling           | needs multi-level tiling                    | ApplyAndSkipRest  |
/// | SkipStage                  | always                                      | Apply             |
///
/// Both tiling rules also emit each of their sketches with a *weight-vector axis* last in the
/// innermost spatial level (loom; `channel_innermost_axis`), when the stage has one: a spatial
/// axis, not the last, of at least one vector's extent, that indexes a constant input and no
/// other input. For an NCHW convolution that is the output channel: the rows of a late ResNet
/// layer (7 or 14 columns) fill no vector, and a strided window reads every other column, while
/// along the output channel the weights (stored in loop order by the layout rewrite) are
/// contiguous and the data is one broadcast value. On the 7x7x512 layer with 256 trials each,
/// the channels-last convolution (channel innermost by its layout) reached 461 GFLOP/s where
/// the NCHW one, rows innermost, reached 226.
///
/// loom's two rules:
///  - MemoryBoundReduction: softmax, norms and other row statistics are memory bound; TVM gives
///    them hand-written schedules. The rule computes the reduction inside its consumer's row
///    loop (the row stays in cache from the reduction to its use) and, for rows of at least two
///    vectors, accumulates into a vector of `lanes` partial results (rfactor by the target's
///    vector lanes, the lanes innermost) that is folded once per row.
///  - PackReusedInput: the tile of an input that the tiled loops reuse (B of a GEMM, the weights
///    of a dense layer) is copied into a contiguous buffer, so the innermost loops stream
///    through it with unit stride (what BLAS packing does). Two sketches: the tile of one reduce
///    step, copied at the reader's first reduce tile level, or the whole panel of the root
///    stage's outermost spatial tile (all reduce steps), copied once and reused by every row
///    tile inside it (BLAS's packed B panel).
///
/// The GPU rules (Ansor's GPU order; search/impl/gpu_sketch.ipp), for CUDA targets:
///
/// | rule                        | condition                                  | result            |
/// |-----------------------------|--------------------------------------------|-------------------|
/// | AddCacheReadShared          | direct producer of a multi-level-tiled     | ApplyAndSkipRest  |
/// |                             | consumer                                   | (stage stays)     |
/// | AlwaysInlineGpu             | computed, not an output, no reduction,     | ApplyAndSkipRest  |
/// |                             | inlineable (not only strictly)             |                   |
/// | CrossThreadReduction        | untouched reduction, more terms than a     | Apply             |
/// |                             | warp (or few outputs when tiled)           |                   |
/// | UntiledRowConsumerGpu       | element-wise, needs multi-level tiling,    | Apply (stage      |
/// |                             | walks the rows of such a reduction         | stays untiled)    |
/// | AddCacheWriteGpu            | as AddCacheWrite                           | ApplyAndSkipRest  |
/// | TensorCoreTilingGpu         | sum of float(P) float(Q), P and Q 16-bit   | Apply             |
/// |                             | floats (or float32 on a TF32 target),      |                   |
/// |                             | sm_80+, tile-divisible (see below)         |                   |
/// | MultiLevelTilingWithFusionGpu| as the CPU rule, consumer follows level 3 | ApplyAndSkipRest  |
/// |                             | (the thread level)                         |                   |
/// | MultiLevelTilingGpu         | needs multi-level tiling                   | ApplyAndSkipRest  |
/// | SkipStage                   | always                                     | Apply             |
///
/// AddCacheReadShared copies the tile of the producer that one step of the consumer's outer
/// reduction tile reads into shared memory, computed at that step (a tensor-core tile also gets
/// a sketch with the copies one level out, below); random annotation spreads
/// the copy over the block's threads (cooperative fetching). Multi-level tiling uses
/// `gpu_tiling_structure` ("SSSRRSRS"): random annotation binds the first three spatial levels to
/// blockIdx.x, vthread and threadIdx.x.
///
/// CrossThreadReduction (after AlwaysInlineGpu; Apply) takes a reduction that is not
/// multi-level tiled and has more terms than a warp, or a multi-level-tiled one with fewer
/// outputs than a block has threads and fewer outputs than terms (GEMV, the last dense layer):
/// its reduction loops are fused and split, the inner part on threadIdx.x (lower/gpu.hpp
/// combines the threads' partials with an AllReduce). When a consumer walks the same rows (a
/// softmax's division, a layer norm's result, the second reduction of the same rows computed
/// inside it), the consumer's innermost loop is split for the same threads and the reduction is
/// computed at its row loop: the whole row in one kernel. UntiledRowConsumerGpu keeps such a
/// consumer untiled in one more sketch when multi-level tiling would take it (a layer norm's
/// result, which reuses gamma and beta). ThreadBind draws the thread count
/// (gpu_thread_candidates up to the row's length) and binds the rows to blockIdx.x.
///
/// TensorCoreTilingGpu (SearchOptions::gpu_tensor_cores; Apply, so the SIMT sketches stay) tiles
/// a float32 sum of products of two fp16 or bf16 tensors for m16n8k16 tensor-core instructions,
/// or of two float32 tensors for m16n8k8 TF32 ones on a target that allows TF32 (Target::tf32),
/// (lower/mma.hpp) with `tensor_core_tiling_structure`: block, vthread, warp, lane, register and
/// fragment levels for the spatial loops, three for the reduction. Of the spatial axes, the last
/// one read by one operand only is N and the last before it read by the other operand only is
/// M. Where M's extent is no multiple of 16 (N's of 8), the shortest run of axes ending at it,
/// each read by that operand only, whose extents multiply to one makes M (N): a convolution's
/// output rows and columns (and batch) are the M of an implicit GEMM in NHWC, its N in NCHW.
/// M's lanes (8) and fragment level (2) are spread over its run, N's (4 and 2) over its own,
/// innermost axis first, each axis taking the powers of two its extent has; every other axis
/// takes 1 and 1. A thread's rows are so a box of the run's axes, whose region (and
/// accumulator array) is exact, where tiles of the fused run would straddle image rows and
/// have whole rows in their bounding box. Where no run has a multiple of 16 rows (ResNet's
/// 14 x 14 and 7 x 7 layers at batch 1), M is the whole run, padded: the factors of 2 its
/// extents lack go to axes they do not divide (7 x 7: 4 columns, 2 x 2 rows; tiles of 8 x 8),
/// the rows past the end compute from zero padding (lower/infer_regions.hpp) and the
/// consumer's guards drop them. The last reduction axis read by both whose extent
/// is a multiple of 16 (8 for TF32; a convolution's input channels) is K, with an innermost
/// level of 16 (8; tensorized), the others 1; the vthread level is 1.
/// On a target that runs warpgroup MMAs (Target::warpgroup_mma: sm_90a), a product whose M and
/// N are one axis each (a GEMM, a batched one; TF32 only with B stored along k, as [N, K],
/// the one layout wgmma reads TF32 operands in) also gets two warpgroup variants: 4
/// and 8 warps along M (where they divide it), one instruction's 16 rows each (register level
/// 1), none along N, so that each four consecutive warps' instructions of a k-step are one
/// wgmma.mma_async of their 64 rows and the warp's 8 nt columns (lower::WgmmaNest) once
/// ThreadBind has stored the copies in its layouts.
/// These lengths are set in the sketch and stay. The consumer (the cache_write copy) follows the
/// block, vthread, warp and lane levels; its warp and lane levels fuse into threadIdx.x, lane
/// fastest, so lane bits 2-4 select M and bits 0-1 select N as the instruction wants.
/// AddCacheReadShared then gives a tensor-core tile two sketches (SearchOptions::
/// gpu_deep_k_tiles; not in Ansor): the operands' shared copies at the middle reduce level, one
/// instruction's k (16) a copy as Ansor places them, and at the outermost, every middle step a
/// copy (k of 32, 64, ...: one barrier and one pipeline stage for several instruction steps).
/// Both operands' copies sit at the same level.
///
/// Left out: SimplifyComputeWithConstTensor (winograd; loom has no constant-tensor ops).
///
/// How to add a sketch rule:
///  1. Write its condition as a function of the context, the state and the working stage; keep
///     it cheap and side-effect free, and decide Apply vs ApplyAndSkipRest by whether the
///     stage may still take the later rules' shapes.
///  2. Write its apply: copy the state, edit it with `sched::State` steps (stages by name; a
///     cache stage inserted at the working index shifts later stages, so return the index of
///     the stage to visit next explicitly), and return one (state, next stage) per sketch.
///  3. Built-in: add a `rule_xxx()` factory below and put it in `cpu_sketch_rules()` at its
///     place in Ansor's order. User rule: pass it to `generate_sketches` in `custom_rules`; it
///     runs before the built-in ones.
///  4. Tests (tests/unit/search/test_sketch.cpp): the condition on its own for a stage that
///     meets it and one that does not, and the sketch counts of the workloads it changes.
#ifndef LOOM_SEARCH_SKETCH_HPP
#define LOOM_SEARCH_SKETCH_HPP

#include "loom/sched/state.hpp"
#include "loom/search/options.hpp"
#include "loom/search/task.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// What a sketch rule's condition says about the working stage.
enum class RuleCondition : uint8_t {
  Skip,             ///< the rule does not apply
  Apply,            ///< apply it, and try the later rules too
  ApplyAndSkipRest  ///< apply it, and try no later rule on this state
};

/// Where a stage's computation comes from: which op of the DAG it computes and whether a
/// cache_write made it. The DAG's static analysis (OpInfo) is per op, so the rules look a stage
/// up through this.
struct StageOrigin {
  int op = -1;                     ///< index into dag.ops(); -1 for stages the DAG does not have
  bool cache_write_local = false;  ///< "X.local": computes X's body (X is `op`)
  bool cache_write_copy = false;   ///< X after cache_write(X): only copies "X.local"
};

/// What the rules need besides the state: the task, the options, and the names the initial
/// state gives the DAG's ops (to map stages back to ops), and which inputs hold constant weights
/// (TuneOptions::constant_inputs: the measurer stores them in the layout their loop nest walks,
/// so a sketch may read them in any order). It refers to `task` and `options`, which must
/// outlive it.
class SketchContext {
 public:
  SketchContext(const Task& task, const SearchOptions& options,
                std::vector<std::string> constant_inputs = {});

  const Task& task() const { return *task_; }
  const ComputeDAG& dag() const { return *task_->dag; }
  const SearchOptions& options() const { return *options_; }
  /// The origin of stage `stage` of `state`.
  StageOrigin origin(const sched::State& state, int stage) const;
  /// Whether the input named `name` holds a constant weight.
  bool is_constant_input(const std::string& name) const;

 private:
  const Task* task_;
  const SearchOptions* options_;
  std::vector<std::string> op_stage_names_;
  std::vector<std::string> constant_inputs_;
};

/// One derivation rule. `condition` and `apply` receive the working stage's index.
struct SketchRule {
  using ConditionFn =
      std::function<RuleCondition(const SketchContext&, const sched::State&, int stage)>;
  /// Successor states, each with the index of the stage to work on next (-1: done).
  using ApplyFn = std::function<std::vector<std::pair<sched::State, int>>(
      const SketchContext&, const sched::State&, int stage)>;

  std::string name;
  ConditionFn condition;
  ApplyFn apply;
};

// --- the built-in rules (factories, so tests can run one condition on its own) -----------------

/// Ansor rule 2: inline a strictly inlineable element-wise stage.
SketchRule rule_always_inline();
/// Ansor rule 6: factor a reduction (all reduce loops fused, then split in two) on the outer or
/// the inner part (two sketches; the inner part becomes the innermost, vectorizable loop).
SketchRule rule_add_rfactor();
/// loom: a memory-bound reduction (not multi-level tiled) whose rows are consumed row by row is
/// computed inside its consumer's row loop, with partial results in a vector of accumulators
/// (rfactor by the target's vector lanes) when the rows are long enough.
SketchRule rule_memory_bound_reduction();
/// loom: an input whose tile a multi-level-tiled stage reuses is copied into a contiguous
/// buffer (cache_read) at the stage's first reduce tile level.
SketchRule rule_pack_reused_input();
/// Ansor rule 5: add a local accumulator stage ("X.local") and tile that instead.
SketchRule rule_add_cache_write();
/// Ansor rule 4: multi-level tiling, and the single element-wise consumer follows the spatial
/// tiling at level 1 or 2 with the tiled stage computed inside it (two sketches).
SketchRule rule_multi_level_tiling_with_fusion();
/// Ansor rule 3: multi-level tiling with the options' structure.
SketchRule rule_multi_level_tiling();
/// Ansor rule 1: leave the stage as it is.
SketchRule rule_skip_stage();

/// The built-in CPU rules in Ansor's order (see the table at the top).
const std::vector<SketchRule>& cpu_sketch_rules();
/// GPU: a shared-memory copy of a direct producer of a multi-level-tiled stage.
SketchRule rule_add_cache_read_shared();
/// GPU: inline any inlineable element-wise stage.
SketchRule rule_always_inline_gpu();
/// The built-in GPU rules in Ansor's order (see the table at the top).
const std::vector<SketchRule>& gpu_sketch_rules();
/// Whether CrossThreadReduction split `stage` for threads: `step` is then the split step whose
/// inner part the next step binds to threadIdx.x (the one its reductions follow, and the one
/// ThreadBind draws the thread count of).
bool cross_thread_split(const sched::State& state, const std::string& stage, int& step);

/// All sketches of `task`: `custom_rules` are tried before the built-in rules for every state.
/// The rules are the CPU or the GPU ones by the task's target. Throws loom::user_error
/// `[loom.search.E801]` for a malformed tiling structure (for GPU targets: one that does not
/// start with "SSS" or has as many S levels as R levels),
/// `[loom.search.E803]` if the rules produce more than 10000 states or do not finish (a rule
/// that never advances the working stage). `constant_inputs` names the inputs that hold
/// constant weights (SketchContext).
std::vector<sched::State> generate_sketches(const Task& task, const SearchOptions& options = {},
                                            const std::vector<SketchRule>& custom_rules = {},
                                            const std::vector<std::string>& constant_inputs = {});

// --- predicates the rules share (Ansor's search_policy/utils.h), on states ---------------------

/// Ansor's NeedsMultiLevelTiling for the stage (a cache_write copy never does).
bool needs_multi_level_tiling(const SketchContext& ctx, const sched::State& state, int stage);
/// Ansor's IsStrictlyInlineable for the stage (cache stages are not).
bool is_strictly_inlineable(const SketchContext& ctx, const sched::State& state, int stage);
/// The stage was made by cache_write (Ansor's HasCacheWriteStage).
bool has_cache_write_stage(const SketchContext& ctx, const sched::State& state, int stage);
/// The single consumer (through inlined stages) that reads the stage element by element, with
/// every op in between inlined and element-wise, or -1 (Ansor's
/// GetSingleElementwiseMatchedConsumer). The copy a cache_write leaves behind matches its
/// ".local" stage. An output has none: it stays at the root, whoever reads it.
int single_elementwise_matched_consumer(const SketchContext& ctx, const sched::State& state,
                                        int stage);
/// Whether the stage is still as the DAG made it: computed at the root, loops neither split,
/// fused, reordered nor annotated.
bool is_untouched(const sched::Stage& stage);
/// Ansor's NeedsRfactor: an untouched reduction with more reduction than spatial parallelism
/// (multi-level-tiled ops: spatial size ≤ reduce size and ≤ 16 × cores), or, for other
/// reductions, a reduction longer than the number of cores.
bool needs_rfactor(const SketchContext& ctx, const sched::State& state, int stage);
/// The index lists with which stage `reader` reads stage `target`, in `reader`'s axis variables,
/// looking through inlined stages in between.
std::vector<std::vector<ir::Expr>> read_indices(const sched::State& state, int reader, int target);
/// Whether the stage has been split (Ansor's IsTiled).
bool is_tiled(const sched::Stage& stage);
/// Whether the stage computes a reduction.
bool has_reduce(const sched::Stage& stage);

/// Multi-level tiling of stage `stage` with `structure` (e.g. "SSRSRS"), split lengths unset:
/// each spatial loop is split into #S parts, each reduction loop into #R parts, and the loops
/// are reordered level by level, axes in their order within a level except that root loop
/// `innermost_axis` (when ≥ 0) goes last in the last spatial level. Returns the split step ids
/// of the spatial loops, in axis order (what a consumer follows). Throws `[loom.search.E801]`
/// for a malformed structure.
std::vector<int> multi_level_tile(sched::State& state, int stage, const std::string& structure,
                                  int innermost_axis = -1);
/// TensorCoreTilingGpu's tiling structure: spatial levels block, vthread, warp, lane, register,
/// fragment; reduction levels outer, middle, 16.
inline constexpr const char* tensor_core_tiling_structure = "SSSSRRSRS";
/// Its number of spatial levels (the 'S's): what a tensor-core tiling's spatial splits have, one
/// length fewer.
inline constexpr int tensor_core_spatial_levels = [] {
  int n = 0;
  for (const char* c = tensor_core_tiling_structure; *c; ++c) n += *c == 'S';
  return n;
}();
/// The positions, in the lengths of a tensor-core tiling's spatial split (the block level has
/// none), of its warp and lane levels: cooperative fetches take threads from both.
inline constexpr int tensor_core_warp_length = 1, tensor_core_lane_length = 2;

/// Which lengths of split step `split` of `state` a sketch rule fixed, by position: a
/// tensor-core tiling's vthread, lane and fragment levels and its 16-step of k. Mutations leave
/// them as they are (the tile would no longer be one). With `warpgroup_target`
/// (Target::warpgroup_mma), a tiling whose warps are a warpgroup tiling's (M's warp level a
/// multiple of 4 and its register level 1, N's warp level 1, as TensorCoreTilingGpu's
/// warpgroup variants make them) keeps those too: changed, its instructions would no longer be
/// warpgroup MMAs.
std::vector<bool> fixed_split_lengths(const sched::State& state, const sched::SplitStep& split,
                                      bool warpgroup_target = false);

/// The spatial root loop of stage `stage` to put last in its innermost tile level, or -1: an
/// axis other than the last spatial one, at least one vector of the stage's type long, that
/// some constant input is read with (and not with the last spatial axis) and that no other
/// input or stage the stage reads depends on. The longest such axis (the later one on a tie).
int channel_innermost_axis(const SketchContext& ctx, const sched::State& state, int stage);

}  // namespace search
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/search/impl/sketch.ipp"
#endif

#endif  // LOOM_SEARCH_SKETCH_HPP
