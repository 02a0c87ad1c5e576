/// \file
/// Transform steps (layer sched/): the records a schedule is made of. Each step names its stage
/// by stable name and its iterators by position in that stage's current loop order. See
/// sched/state.hpp for the checklist to add one.
#ifndef LOOM_SCHED_STEPS_HPP
#define LOOM_SCHED_STEPS_HPP

#include "loom/ir/expr.hpp"

#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace sched {

/// Loop annotations: how the loop of an iterator runs once lowered (serial, parallel,
/// vectorized, unrolled, or bound to a GPU index), the IR's own kinds of loop. Records spell them
/// as Ansor does (annotation_name).
using Annotation = ir::ForKind;
const char* annotation_name(Annotation a);
/// The annotation `annotation_name` spells `s`, or nothing.
std::optional<Annotation> find_annotation(const std::string& s);
/// As find_annotation; throws loom::user_error `[loom.sched.E230]` for an unknown name.
Annotation parse_annotation(const std::string& s);

/// How a record reads an `int` field: most count or index something and must be >= 0.
enum class FieldRange : uint8_t { NonNegative, Any };

/// One field of a step as its record lays it out: the name errors and docs use, the member, and
/// for `int` members the range a record may hold. A step's `fields` tuple lists all of them in
/// record order; the JSON writer and reader, the structural hash and the layout table in error
/// messages are generated from it (sched/impl/record.ipp, sched/impl/state.ipp).
template <class S, class T>
struct StepField {
  const char* name;
  T S::* member;
  FieldRange range = FieldRange::NonNegative;
};

/// Split leaf `iter` into an outer loop and one inner loop per entry of `lengths` (outer to
/// inner). An unset length (sketches) must be filled before the state can be lowered.
struct SplitStep {
  std::string stage;
  int iter;
  int64_t extent;  ///< the iterator's extent when the step was made (checked on replay)
  std::vector<std::optional<int64_t>> lengths;

  static constexpr const char* tag = "SP";
  static constexpr auto fields = std::tuple{
      StepField{"stage", &SplitStep::stage}, StepField{"iter", &SplitStep::iter},
      StepField{"extent", &SplitStep::extent}, StepField{"lengths", &SplitStep::lengths}};
  bool operator==(const SplitStep&) const = default;
};
/// Split like the (n_split - 1) innermost lengths of an earlier split step (cache stages follow
/// the tiling of their consumer this way).
struct FollowSplitStep {
  std::string stage;
  int iter;
  int src_step;
  int n_split;

  static constexpr const char* tag = "FSP";
  static constexpr auto fields = std::tuple{StepField{"stage", &FollowSplitStep::stage},
                                            StepField{"iter", &FollowSplitStep::iter},
                                            StepField{"src_step", &FollowSplitStep::src_step},
                                            StepField{"n_split", &FollowSplitStep::n_split}};
  bool operator==(const FollowSplitStep&) const = default;
};
/// Split by the product of `level`-th lengths of several earlier split steps (GPU thread binding
/// of cooperative fetches); `factor_or_nparts` says whether it sets the inner or the outer extent.
struct FollowFusedSplitStep {
  std::string stage;
  int iter;
  std::vector<int> src_steps;
  int level;
  bool factor_or_nparts;

  static constexpr const char* tag = "FFSP";
  static constexpr auto fields =
      std::tuple{StepField{"stage", &FollowFusedSplitStep::stage},
                 StepField{"iter", &FollowFusedSplitStep::iter},
                 StepField{"src_steps", &FollowFusedSplitStep::src_steps},
                 StepField{"level", &FollowFusedSplitStep::level},
                 StepField{"factor_or_nparts", &FollowFusedSplitStep::factor_or_nparts}};
  bool operator==(const FollowFusedSplitStep&) const = default;
};
/// Fuse consecutive leaves into one loop.
struct FuseStep {
  std::string stage;
  std::vector<int> iters;

  static constexpr const char* tag = "FU";
  static constexpr auto fields =
      std::tuple{StepField{"stage", &FuseStep::stage}, StepField{"iters", &FuseStep::iters}};
  bool operator==(const FuseStep&) const = default;
};
/// New loop order: `order[k]` is the current position of the loop that goes to position k.
struct ReorderStep {
  std::string stage;
  std::vector<int> order;

  static constexpr const char* tag = "RE";
  static constexpr auto fields =
      std::tuple{StepField{"stage", &ReorderStep::stage}, StepField{"order", &ReorderStep::order}};
  bool operator==(const ReorderStep&) const = default;
};
struct AnnotationStep {
  std::string stage;
  int iter;
  Annotation annotation;

  static constexpr const char* tag = "AN";
  static constexpr auto fields = std::tuple{StepField{"stage", &AnnotationStep::stage},
                                            StepField{"iter", &AnnotationStep::iter},
                                            StepField{"annotation", &AnnotationStep::annotation}};
  bool operator==(const AnnotationStep&) const = default;
};
struct ComputeAtStep {
  std::string stage;
  std::string target;
  int target_iter;

  static constexpr const char* tag = "CA";
  static constexpr auto fields = std::tuple{StepField{"stage", &ComputeAtStep::stage},
                                            StepField{"target", &ComputeAtStep::target},
                                            StepField{"target_iter", &ComputeAtStep::target_iter}};
  bool operator==(const ComputeAtStep&) const = default;
};
struct ComputeRootStep {
  std::string stage;

  static constexpr const char* tag = "CR";
  static constexpr auto fields = std::tuple{StepField{"stage", &ComputeRootStep::stage}};
  bool operator==(const ComputeRootStep&) const = default;
};
struct ComputeInlineStep {
  std::string stage;

  static constexpr const char* tag = "CI";
  static constexpr auto fields = std::tuple{StepField{"stage", &ComputeInlineStep::stage}};
  bool operator==(const ComputeInlineStep&) const = default;
};
/// Add a stage "<stage>.<scope>" that copies `stage`, read by `readers` instead of `stage`.
struct CacheReadStep {
  std::string stage;
  ir::MemoryScope scope;
  std::vector<std::string> readers;

  static constexpr const char* tag = "CHR";
  static constexpr auto fields = std::tuple{StepField{"stage", &CacheReadStep::stage},
                                            StepField{"scope", &CacheReadStep::scope},
                                            StepField{"readers", &CacheReadStep::readers}};
  bool operator==(const CacheReadStep&) const = default;
};
/// Add a stage "<stage>.<scope>" computing `stage`'s body; `stage` becomes a copy of it.
struct CacheWriteStep {
  std::string stage;
  ir::MemoryScope scope;

  static constexpr const char* tag = "CHW";
  static constexpr auto fields = std::tuple{StepField{"stage", &CacheWriteStep::stage},
                                            StepField{"scope", &CacheWriteStep::scope}};
  bool operator==(const CacheWriteStep&) const = default;
};
/// auto_unroll_max_step: unroll the innermost loops under `iter` while their product stays within
/// `max_step`.
struct PragmaStep {
  std::string stage;
  int iter;
  int max_step;

  static constexpr const char* tag = "PR";
  // max_step's range is checked when the step is applied ([loom.sched.E233]), not when read.
  static constexpr auto fields =
      std::tuple{StepField{"stage", &PragmaStep::stage}, StepField{"iter", &PragmaStep::iter},
                 StepField{"max_step", &PragmaStep::max_step, FieldRange::Any}};
  bool operator==(const PragmaStep&) const = default;
};
struct StorageAlignStep {
  std::string stage;
  int axis;
  int64_t factor, offset;

  static constexpr const char* tag = "SA";
  static constexpr auto fields = std::tuple{StepField{"stage", &StorageAlignStep::stage},
                                            StepField{"axis", &StorageAlignStep::axis},
                                            StepField{"factor", &StorageAlignStep::factor},
                                            StepField{"offset", &StorageAlignStep::offset}};
  bool operator==(const StorageAlignStep&) const = default;
};
/// Store the elements of tensor axis `axis` of a stage's buffer lane-major: read as units of
/// `unit` consecutive elements, unit u = (a * lanes + l) * per_lane + i (lane l of a group of
/// `lanes`, each holding `per_lane` consecutive units) is stored at (a * per_lane + i) * lanes +
/// l. The units one instruction reads across lanes then lie side by side (tensor-core operands
/// in shared memory, against bank conflicts: search/annotate.hpp).
struct StoragePermuteStep {
  std::string stage;
  int axis;
  int64_t lanes, per_lane, unit;

  static constexpr const char* tag = "SPM";
  static constexpr auto fields = std::tuple{StepField{"stage", &StoragePermuteStep::stage},
                                            StepField{"axis", &StoragePermuteStep::axis},
                                            StepField{"lanes", &StoragePermuteStep::lanes},
                                            StepField{"per_lane", &StoragePermuteStep::per_lane},
                                            StepField{"unit", &StoragePermuteStep::unit}};
  bool operator==(const StoragePermuteStep&) const = default;
};
/// Store a stage's buffer swizzled in `bytes`-byte rows (32, 64 or 128): byte offset o (after
/// its other layout steps) holds what o ^ (((o >> 7) mod (bytes / 16)) << 4) would, Hopper's
/// shared-memory swizzle (CUTLASS's Swizzle<log2(bytes / 16), 4, 3>): in rows of `bytes`
/// bytes, the 16-byte units of the rows of each run of 8 are permuted so that one unit of 8
/// consecutive rows lies in 8 different bank groups, without padding. Each 16-byte unit stays
/// whole (vector copies and ldmatrix rows keep their alignment) and within its aligned
/// `bytes`-byte span; the buffer is rounded up to whole spans.
struct StorageSwizzleStep {
  std::string stage;
  int64_t bytes;

  static constexpr const char* tag = "SSW";
  static constexpr auto fields = std::tuple{StepField{"stage", &StorageSwizzleStep::stage},
                                            StepField{"bytes", &StorageSwizzleStep::bytes}};
  bool operator==(const StorageSwizzleStep&) const = default;
};
/// Store the innermost axis of a stage's buffer in chunks of `bytes` bytes (32, 64 or 128),
/// chunk-major, where it is longer than one: seen as rows r (its other axes, flattened) of
/// columns c, element (r, c) lies at (c / w) R w + r w + c mod w, w the chunk's elements and R
/// the rows, the axis rounded up to whole chunks (before storage_swizzle, which then swizzles
/// rows of one chunk). Hopper's canonical tiles: an operand wider than a swizzled row (B of a
/// matmul stored along N, 64 columns a chunk; A with more than 64 of k) in rows a warpgroup
/// MMA's descriptor can step through (lower::WgmmaOperand). Not with storage_align.
struct StorageChunkStep {
  std::string stage;
  int64_t bytes;

  static constexpr const char* tag = "SCK";
  static constexpr auto fields = std::tuple{StepField{"stage", &StorageChunkStep::stage},
                                            StepField{"bytes", &StorageChunkStep::bytes}};
  bool operator==(const StorageChunkStep&) const = default;
};
/// Factor a reduction: leaf `iter` (a reduce loop, typically one part of a split reduction) becomes
/// a spatial axis, at position `factor_axis` among the output axes, of a new stage "<stage>.rf"
/// that reduces over the stage's other reduce loops; the stage then reduces "<stage>.rf" over that
/// axis. Parallel or vectorized partial sums of a long reduction come from this.
struct RfactorStep {
  std::string stage;
  int iter;
  int factor_axis;

  static constexpr const char* tag = "RF";
  static constexpr auto fields =
      std::tuple{StepField{"stage", &RfactorStep::stage}, StepField{"iter", &RfactorStep::iter},
                 StepField{"factor_axis", &RfactorStep::factor_axis}};
  bool operator==(const RfactorStep&) const = default;
};

/// Every transform step. This list is the one table of steps: record tags, record layouts, the
/// reader's dispatch and the structural hash are generated from it and from each step's `tag`
/// and `fields`; every other visit over steps is an overload set without a catch-all, so a step
/// that one of them does not handle fails to compile. See sched/state.hpp for the checklist.
using Step = std::variant<SplitStep, FollowSplitStep, FollowFusedSplitStep, FuseStep, ReorderStep,
                          AnnotationStep, ComputeAtStep, ComputeRootStep, ComputeInlineStep,
                          CacheReadStep, CacheWriteStep, PragmaStep, StorageAlignStep,
                          StoragePermuteStep, StorageSwizzleStep, StorageChunkStep, RfactorStep>;

/// Calls `f(field, value)` for each field of step `s` in record order (`value` a const
/// reference to the member).
template <class S, class F>
void for_each_field(const S& s, F&& f) {
  std::apply([&](const auto&... field) { (f(field, s.*(field.member)), ...); }, S::fields);
}

/// Short record prefix of a step ("SP", "FU", ...), as in Ansor's records.
const char* step_tag(const Step& s);
/// A hash of a step history that is equal for equal histories (every field of every step), the
/// same on every run and machine.
uint64_t structural_hash(const std::vector<Step>& steps);
/// The stage a step edits.
const std::string& step_stage(const Step& s);
/// One readable line, e.g. `split C i0 [8, 16]`.
std::string to_string(const Step& s);

const char* scope_name(ir::MemoryScope s);
/// The memory scope `scope_name` spells `s`, or nothing.
std::optional<ir::MemoryScope> find_scope(const std::string& s);
ir::MemoryScope parse_scope(const std::string& s);

}  // namespace sched
LOOM_END_NAMESPACE

#endif  // LOOM_SCHED_STEPS_HPP
