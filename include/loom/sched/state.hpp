/// \file
/// The loop state of a schedule (layer sched/): Ansor's "lightweight loop structure IR".
///
/// A `State` holds one `Stage` per op of the (possibly rewritten) computation. A stage has
/// iterators (name, extent, kind, annotation), the relations that derived them from the op's axes
/// (split, fuse), a loop order (its leaf iterators) and a compute location: root, inlined, or at a
/// leaf iterator of another stage. Search edits states cheaply and serialises them as the history
/// of transform steps that built them: replaying the steps on the DAG rebuilds the same state.
///
/// Stages are named by a stable identity (the op's name; new stages get derived names such as
/// "C.local" or "A.shared"), never by position, so inserting a stage never breaks a saved history.
/// Iterators are named in steps by their position in the stage's current loop order.
///
/// How to add a new transform step (the compiler or a test stops at each place left out):
///  1. sched/steps.hpp: declare `XxxStep` with its fields, its record `tag`, its `fields` tuple
///     (record layout) and a defaulted `operator==`, and add it to `Step`. Record tags, layouts,
///     the JSON writer and reader and the structural hash follow from these.
///  2. sched/impl/apply.ipp: `step_applier::operator()(const XxxStep&)` validates with
///     LOOM_USER_CHECK (id loom.sched.E2xx naming the step and the reason), then edits the
///     state; a `State` method that applies it, declared here.
///  3. sched/impl/state.ipp: its line in `step_printer`.
///  4. search/impl/mutate.ipp: `structure_equal` (which fields are values the search may
///     change), `step_renumberer` (which fields are loop positions) and
///     `step_reference_shifter` (which fields refer to earlier steps).
///  5. If it changes loop structure or data flow, teach lower/ to honour it: loops in
///     lower/stage_loops (split/fuse arithmetic) and lower/build_loop_nests, buffers and regions
///     in lower/plan_buffers and lower/infer_regions.
///  6. tests/support/random_schedule.hpp: a `random_step_kinds()` entry that draws it, or a line
///     in `steps_not_drawn()` saying why not (tests/unit/sched/test_step_table.cpp checks).
///  7. Tests: the step alone against the reference interpreter and each illegal use's error
///     (tests/unit/sched/test_steps.cpp); its record round trip and hash are covered by
///     test_step_table.cpp.
#ifndef LOOM_SCHED_STATE_HPP
#define LOOM_SCHED_STATE_HPP

#include "loom/dag/compute_dag.hpp"
#include "loom/sched/steps.hpp"

#include <iosfwd>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace sched {

/// Whether an iterator walks the output (spatial) or a reduction: the IR's kind of its axis.
/// Fusing the two kinds is not allowed: a reduction's init could not be placed.
using IterKind = ir::IterKind;

/// One iterator of a stage: a root axis of the op or one derived by split/fuse.
struct Iterator {
  std::string name;
  int64_t extent = 1;
  IterKind kind = IterKind::Spatial;
  Annotation annotation = Annotation::Serial;
};

/// `parent` was split into `children` (outer to inner); `lengths` are the inner children's
/// extents, the outer one is ceil(parent / product(lengths)). Non-divisible splits leave a tail
/// that lowering guards.
struct SplitRelation {
  int parent;
  std::vector<int> children;
};
/// `fused` (outer to inner) were fused into `result`.
struct FuseRelation {
  std::vector<int> fused;
  int result;
};

enum class ComputeLocation : uint8_t { Root, Inlined, At };

/// How storage of a stage's buffer is aligned: the stride of dimension `axis` is padded so that
/// stride % factor == offset (Ansor/TVM storage_align, used against cache-bank conflicts).
struct StorageAlign {
  int axis;
  int64_t factor, offset;
};

/// A lane-major layout of one axis of a stage's buffer (StoragePermuteStep, sched/steps.hpp).
struct StoragePermute {
  int axis;
  int64_t lanes, per_lane, unit;
  /// Elements of the axis one permutation block covers: the buffer's axis is rounded up to it.
  int64_t block() const { return lanes * per_lane * unit; }
};

/// One op of the computation and how its loops are scheduled.
struct Stage {
  std::string name;  ///< stable identity
  ir::Tensor op;     ///< what this stage computes (rewritten by cache_read/cache_write/rfactor)
  bool is_placeholder = false;
  bool is_output = false;
  std::vector<Iterator> iters;  ///< every iterator ever created; ids index this table
  std::vector<int> leaves;      ///< current loop order, outermost first (iterator ids)
  std::vector<SplitRelation> splits;
  std::vector<FuseRelation> fuses;
  ComputeLocation location = ComputeLocation::Root;
  std::string attach_stage;                         ///< with location At
  int attach_iter = -1;                             ///< iterator id in attach_stage
  ir::MemoryScope scope = ir::MemoryScope::Global;  ///< where an intermediate buffer lives
  int auto_unroll_max_step = 0;
  std::vector<StorageAlign> storage_aligns;
  std::vector<StoragePermute> storage_permutes;
  /// Swizzled rows of this many bytes (StorageSwizzleStep), 0 for none.
  int64_t storage_swizzle = 0;
  /// The innermost axis in chunks of this many bytes (StorageChunkStep), 0 for none.
  int64_t storage_chunk = 0;
  /// Number of root iterators that are the op's spatial axes (then come the reduce axes).
  int num_spatial_axes = 0;

  const Iterator& leaf(int position) const { return iters.at(leaves.at(position)); }
  int leaf_position(int iter_id) const;  ///< -1 if not a leaf
};

/// Which part of a complete program's history a step belongs to, by what made it
/// (search/annotate.hpp): the sketch (its rules' steps, custom init rules', and the split lengths
/// FillTileSize fills in), the compute-location rule (ChangeComputeLocation), or annotation
/// (Parallel, Unroll, Vectorization; ThreadBind on GPUs). Mutation and crossover edit each part
/// by its own rules (search/mutate.hpp).
enum class StepPart : uint8_t { Sketch, Location, Annotation };

/// Where the parts of a history begin: steps [0, location_begin) are the sketch's,
/// [location_begin, annotate_begin) the compute-location rule's, [annotate_begin, end)
/// annotation's. Steps applied later extend the annotation part. Unknown (-1) for a state the
/// search did not sample: a schedule written by hand, or a record of a log written before
/// records carried them (the search then infers them from the steps, search/impl/mutate.ipp).
struct StepOrigins {
  int location_begin = -1;
  int annotate_begin = -1;

  bool known() const { return location_begin >= 0; }
  StepPart part_of(int step) const {
    return step < location_begin   ? StepPart::Sketch
           : step < annotate_begin ? StepPart::Location
                                   : StepPart::Annotation;
  }
  bool operator==(const StepOrigins&) const = default;
};

/// A schedule: stages plus the history of steps that built them from the DAG.
class State {
 public:
  /// The initial state of a DAG: one root stage per op, loops in the op's axis order (spatial
  /// axes, then reduce axes), no step applied.
  explicit State(std::shared_ptr<const ComputeDAG> dag);
  explicit State(const ComputeDAG& dag);

  const ComputeDAG& dag() const { return *dag_; }
  const std::shared_ptr<const ComputeDAG>& dag_ptr() const { return dag_; }
  const std::vector<Stage>& stages() const { return stages_; }
  const std::vector<Step>& steps() const { return steps_; }
  /// The stage named `name`; throws loom::user_error if there is none.
  const Stage& stage(const std::string& name) const { return stages_.at(stage_index(name)); }
  int stage_index(const std::string& name) const;
  /// The stage that computes (or aliases) `t`; -1 if none.
  int stage_of(const ir::TensorNode* t) const;

  /// Applies a step: validates it, edits the state and appends it to the history. Throws
  /// loom::user_error (with the state unchanged) when the step is illegal here.
  void apply(const Step& step);

  // Convenience wrappers around apply(); iterators are leaf positions of the stage.
  /// Splits leaf `iter` into 1 + lengths.size() loops; returns nothing, the new leaves replace it.
  void split(const std::string& stage, int iter, std::vector<int64_t> lengths);
  void fuse(const std::string& stage, std::vector<int> iters);
  void reorder(const std::string& stage, std::vector<int> order);
  void annotate(const std::string& stage, int iter, Annotation a);
  void compute_at(const std::string& stage, const std::string& target, int target_iter);
  void compute_root(const std::string& stage);
  void compute_inline(const std::string& stage);
  /// Returns the new stage's name ("<stage>.<scope>").
  std::string cache_read(const std::string& stage, ir::MemoryScope scope,
                         std::vector<std::string> readers);
  std::string cache_write(const std::string& stage, ir::MemoryScope scope);
  /// Returns the new stage's name ("<stage>.rf").
  std::string rfactor(const std::string& stage, int iter, int factor_axis);
  void pragma_unroll(const std::string& stage, int iter, int max_step);
  void storage_align(const std::string& stage, int axis, int64_t factor, int64_t offset);
  void storage_permute(const std::string& stage, int axis, int64_t lanes, int64_t per_lane,
                       int64_t unit);
  void storage_swizzle(const std::string& stage, int64_t bytes);
  void storage_chunk(const std::string& stage, int64_t bytes);
  void follow_split(const std::string& stage, int iter, int src_step, int n_split);
  void follow_fused_split(const std::string& stage, int iter, std::vector<int> src_steps, int level,
                          bool factor_or_nparts);

  /// Rewrites the lengths of split step `step` in the history (std::nullopt: unset) and leaves
  /// the stages as they are until the history is replayed. For sketch rules whose later steps
  /// (rfactor) need concrete extents: they split with a stand-in length, apply the step, then
  /// unset the length so that random annotation draws it when it replays the history
  /// (search/annotate.hpp); and for custom annotation rules that choose some lengths before
  /// FillTileSize draws the rest. Throws loom::user_error `[loom.sched.E245]` if `step` is not
  /// a split step or `lengths` has another size than the step's.
  void set_split_lengths(int step, std::vector<std::optional<int64_t>> lengths);

  /// Where the parts of the history begin (unknown unless set).
  const StepOrigins& origins() const { return origins_; }
  /// Records where the parts of the history begin; StepOrigins{} makes them unknown. Throws
  /// loom::user_error `[loom.sched.E264]` unless 0 <= location_begin <= annotate_begin <= the
  /// number of steps.
  void set_origins(StepOrigins origins);

  /// The stages that read `stage` directly or through inlined stages.
  std::vector<int> consumers(int stage) const;
  /// The stages whose tensors `stage` reads directly or through inlined stages.
  std::vector<int> producers(int stage) const;
  /// The stages computed at loop `iter_id` (an iterator id) of the stage named `target`, in
  /// stage order.
  std::vector<int> attached_at(const std::string& target, int iter_id) const;
  /// Whether `stage` is computed inside the stage named `target`: at one of its loops, or
  /// inside a stage that is, through any chain of compute_at stages.
  bool computed_inside(const Stage& stage, const std::string& target) const;

  /// Loop-nest pseudo code with annotations and compute locations.
  std::string to_string() const;

 private:
  friend struct step_applier;
  std::shared_ptr<const ComputeDAG> dag_;
  std::vector<Stage> stages_;
  std::vector<Step> steps_;
  StepOrigins origins_;
  /// Every tensor a stage computes or computed (consumers may still read an old node), held
  /// alive so that its address cannot be reused, and the stage's name.
  std::vector<std::pair<ir::Tensor, std::string>> aliases_;
  /// Tensor node -> stage index, rebuilt from aliases_ whenever stages change.
  std::unordered_map<const ir::TensorNode*, int> tensor_stage_;
  void rebuild_tensor_map();
};

/// The value of iterator `id` of `s` from the values of its leaves, through the split relations
/// (a parent is the mixed-radix number of its parts) and fuse relations (a fused part is a digit of
/// the fused value). `value` is indexed by iterator id and holds the leaves' values; derived values
/// are memoized in it. `extent` gives every iterator's extent (the state's, or those lowering
/// recomputed for a region). A split whose parts cover more than its parent appends
/// `(parent id, parent value < parent extent)` to `tails`.
ir::Expr iterator_value(const Stage& s, int id, const std::vector<int64_t>& extent,
                        std::vector<ir::Expr>& value, std::vector<std::pair<int, ir::Expr>>& tails);

/// Rebuilds a state by applying `steps` in order to the initial state of `dag`.
State replay(std::shared_ptr<const ComputeDAG> dag, const std::vector<Step>& steps);

/// Replays `steps`, recorded on a DAG of the same structure (ComputeDAG::structure_key) with
/// other extents, on `dag`: each split takes the extent its loop has here and its lengths are
/// adapted (adapted_split_lengths). Every other step applies as recorded. Throws what
/// State::apply throws when a step does not fit this DAG's structure.
State replay_adapted(std::shared_ptr<const ComputeDAG> dag, const std::vector<Step>& steps);

/// The split lengths replay_adapted gives a loop of `extent` that a recorded split cut into
/// `lengths` (outer to inner) when its loop had `recorded_extent` (0: unknown). A split that
/// tiled its loop perfectly tiles the new one perfectly: each length, innermost first, becomes
/// the divisor of what is left that is nearest to it in ratio, if every one is within a factor
/// of 2 of the recorded length. Otherwise (the recorded split left a tail, the lengths still
/// divide, or no divisor is near enough, as for a prime extent) the lengths are kept from the
/// innermost outwards while their product fits the extent, the first that does not cut to what fits
/// (at least 1), and the rest with it; a tail that appears is guarded by lowering.
std::vector<std::optional<int64_t>> adapted_split_lengths(
    int64_t extent, const std::vector<std::optional<int64_t>>& lengths,
    int64_t recorded_extent = 0);

std::ostream& operator<<(std::ostream& os, const State& s);

}  // namespace sched
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/sched/impl/state.ipp"
#endif

#endif  // LOOM_SCHED_STATE_HPP
