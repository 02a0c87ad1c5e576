/// \file
/// Transform steps (layer sched/): the records a schedule is made of. Each step names its stage
/// by stable name and its iterators by position in that stage's current loop order. See
/// sched/state.hpp for the checklist to add one.
#ifndef LOOM_SCHED_STEPS_HPP
#define LOOM_SCHED_STEPS_HPP

#include "loom/ir/expr.hpp"

#include <optional>
#include <string>
#include <variant>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace sched {

/// Loop annotations. GPU bindings map a loop to a hardware index.
enum class Annotation : uint8_t {
  None,
  Parallel,
  Vectorize,
  Unroll,
  BlockIdxX,
  BlockIdxY,
  BlockIdxZ,
  VThread,
  ThreadIdxX,
  ThreadIdxY,
  ThreadIdxZ
};
const char* annotation_name(Annotation a);
Annotation parse_annotation(const std::string& s);

/// Split leaf `iter` into an outer loop and one inner loop per entry of `lengths` (outer to
/// inner). An unset length (sketches) must be filled before the state can be lowered.
struct SplitStep {
  std::string stage;
  int iter;
  int64_t extent;  ///< the iterator's extent when the step was made (checked on replay)
  std::vector<std::optional<int64_t>> lengths;
};
/// Split like the (n_split - 1) innermost lengths of an earlier split step (cache stages follow
/// the tiling of their consumer this way).
struct FollowSplitStep {
  std::string stage;
  int iter;
  int src_step;
  int n_split;
};
/// Split by the product of `level`-th lengths of several earlier split steps (GPU thread binding
/// of cooperative fetches); `factor_or_nparts` says whether it sets the inner or the outer extent.
struct FollowFusedSplitStep {
  std::string stage;
  int iter;
  std::vector<int> src_steps;
  int level;
  bool factor_or_nparts;
};
/// Fuse consecutive leaves into one loop.
struct FuseStep {
  std::string stage;
  std::vector<int> iters;
};
/// New loop order: `order[k]` is the current position of the loop that goes to position k.
struct ReorderStep {
  std::string stage;
  std::vector<int> order;
};
struct AnnotationStep {
  std::string stage;
  int iter;
  Annotation annotation;
};
struct ComputeAtStep {
  std::string stage;
  std::string target;
  int target_iter;
};
struct ComputeRootStep {
  std::string stage;
};
struct ComputeInlineStep {
  std::string stage;
};
/// Add a stage "<stage>.<scope>" that copies `stage`, read by `readers` instead of `stage`.
struct CacheReadStep {
  std::string stage;
  ir::MemoryScope scope;
  std::vector<std::string> readers;
};
/// Add a stage "<stage>.<scope>" computing `stage`'s body; `stage` becomes a copy of it.
struct CacheWriteStep {
  std::string stage;
  ir::MemoryScope scope;
};
/// Factor a reduction: leaf `iter` (a reduce loop, typically one part of a split reduction) becomes
/// a spatial axis, at position `factor_axis` among the output axes, of a new stage "<stage>.rf"
/// that reduces over the stage's other reduce loops; the stage then reduces "<stage>.rf" over that
/// axis. Parallel or vectorized partial sums of a long reduction come from this.
struct RfactorStep {
  std::string stage;
  int iter;
  int factor_axis;
};
/// auto_unroll_max_step: unroll the innermost loops under `iter` while their product stays within
/// `max_step`.
struct PragmaStep {
  std::string stage;
  int iter;
  int max_step;
};
struct StorageAlignStep {
  std::string stage;
  int axis;
  int64_t factor, offset;
};

using Step = std::variant<SplitStep, FollowSplitStep, FollowFusedSplitStep, FuseStep, ReorderStep,
                          AnnotationStep, ComputeAtStep, ComputeRootStep, ComputeInlineStep,
                          CacheReadStep, CacheWriteStep, PragmaStep, StorageAlignStep,
                          RfactorStep>;

/// Short record prefix of a step ("SP", "FU", ...), as in Ansor's records.
const char* step_tag(const Step& s);
/// The stage a step edits.
const std::string& step_stage(const Step& s);
/// One readable line, e.g. `split C i0 [8, 16]`.
std::string to_string(const Step& s);

const char* scope_name(ir::MemoryScope s);
ir::MemoryScope parse_scope(const std::string& s);

}  // namespace sched
LOOM_END_NAMESPACE

#endif  // LOOM_SCHED_STEPS_HPP
