/// \file
/// Lowering pass `infer_regions` (layer lower/): the box of its tensor every stage computes,
/// and its loops over that box.
///
/// Expects: a complete state (lower() checks) whose stages are in topological order, producers
/// first (sched::State keeps them so).
///
/// Guarantees, for every stage:
/// - a stage not computed inside another (root, inlined, a placeholder) covers its whole
///   tensor: starts 0, extents the tensor's shape;
/// - a stage computed inside another covers the box its consumers read while the loops between
///   its attach point and their reads run over their ranges: the symbolic bounds
///   (bounds.hpp) of every read, through the stages inlined into a consumer (inline_read), in
///   the variables of the loops outside the attach point. Each extent is a constant (the
///   largest over those variables' ranges) and the box is clamped inside the tensor; computing
///   a few extra valid points is harmless, reading outside the producer's inputs is not. Where
///   the points past the tensor's end read only inside the kernel's inputs (a weight
///   zero-padded to whole tiles by sched::rewrite_layout), or inside stages that may in turn
///   pass their end (computed inside another stage, or inlined), a select's condition bounding
///   what its taken branch reads (a pad stage's zeros: a tensor-core tile padded past an image's
///   rows), or inside a shared-memory copy of a kernel input (which then skips the points past
///   the input's end: StageRegion::skip_past_end), the box starts at the consumer's tile
///   instead of being shifted back inside; the axes that pass the end join one by one, each
///   checked together with those that joined before it. Shared-memory stages
///   cover what every thread of their GPU block reads (the thread loops around the attach point
///   range too), as TVM's bound inference does;
/// - every computed stage (not a placeholder, not inlined) has its loops over that box
///   (stage_loops.hpp) and the value of each axis of its op in them: absolute tensor
///   coordinates for spatial axes, loop values for reduction axes.
///
/// Region inference and loop construction (stage_loops) stay interleaved, stage by stage: the
/// region of a producer is written in the loop variables of its consumers, and a stage's loops
/// exist only once its region's extents are known. Regions are inferred consumers first, in
/// decreasing stage order under each root stage.
///
/// Throws loom::user_error `[loom.lower.E411]` when a stage computed inside another is read
/// from outside it (or not read at all), `[loom.lower.E412]` when a consumer inside the same
/// stage sits outside the producer's attach loop, `[loom.lower.E413]` when the attach loop no
/// longer exists, `[loom.lower.E414]` when a consumer's box passes its end reading a stage
/// whose own box cannot (the consumer's check saw less of the stage than its other readers).
#ifndef LOOM_LOWER_INFER_REGIONS_HPP
#define LOOM_LOWER_INFER_REGIONS_HPP

#include "loom/ir/expr.hpp"
#include "loom/lower/stage_loops.hpp"
#include "loom/sched/state.hpp"

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// The box of its tensor one stage computes, and its loops over it.
struct StageRegion {
  std::vector<ir::Expr> min;        ///< per tensor dimension; in the variables of enclosing loops
  std::vector<int64_t> extent;      ///< per tensor dimension
  std::optional<StageLoops> loops;  ///< computed stages only
  /// The op's axes (spatial, then reduction) -> their values in `loops`: absolute coordinates
  /// for spatial axes.
  std::unordered_map<const ir::Variable*, ir::Expr> axes;
  /// A shared-memory copy of a kernel input whose box passes the input's end: the points past
  /// it are left unwritten (build_loop_nests guards the copy), their readers being tiles padded
  /// past their own end, whose results there nothing reads.
  bool skip_past_end = false;
};

/// The region of every stage of `state`, by stage index.
std::vector<StageRegion> infer_regions(const sched::State& state);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/infer_regions.ipp"
#endif

#endif  // LOOM_LOWER_INFER_REGIONS_HPP
