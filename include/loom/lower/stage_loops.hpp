/// \file
/// Lowering pass `stage_loops` (layer lower/): the loops of one stage over one box of its
/// tensor, as numbers and expressions, before any loop statement exists.
///
/// Expects: a complete stage (every leaf has a known extent, lower() checks) and the extents of
/// its root iterators for the box it computes: the box's extent per tensor dimension, then the
/// whole extent of each reduction axis.
///
/// Guarantees:
/// - every iterator has an extent for this box: a split's outer part loops over no more tiles
///   than the box needs (a stage computed inside a tile of its consumer covers one tile, so its
///   outer tile loops shrink to one iteration instead of running guarded), a fused iterator the
///   product of its parts;
/// - every leaf has a fresh loop variable, named after its iterator, that runs over
///   [0, extent), and every iterator a value in those variables, relative to the box's start
///   (a split parent is the mixed-radix number of its parts, a fused part a digit of the fused
///   value: sched::iterator_value);
/// - where a split's parts cover more than its parent, a guard `parent value < parent extent`:
///   spatial ones in `guards`, reduction ones in `reduce_guards`.
#ifndef LOOM_LOWER_STAGE_LOOPS_HPP
#define LOOM_LOWER_STAGE_LOOPS_HPP

#include "loom/ir/expr.hpp"
#include "loom/sched/state.hpp"

#include <cstdint>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// The loops of one stage for one box; every vector is indexed by iterator id.
struct StageLoops {
  std::vector<int64_t> extent;
  std::vector<ir::Expr> var;            ///< leaves only: the loop variable
  std::vector<ir::Expr> rel;            ///< the iterator's value relative to the box's start
  std::vector<ir::Expr> guards;         ///< tails of non-dividing splits of spatial iterators
  std::vector<ir::Expr> reduce_guards;  ///< the same for reduction iterators
};

/// The loops of `stage` when its root iterators have `root_extent` (the box's extent per tensor
/// dimension, then each reduction axis's extent).
StageLoops stage_loops(const sched::Stage& stage, const std::vector<int64_t>& root_extent);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/stage_loops.ipp"
#endif

#endif  // LOOM_LOWER_STAGE_LOOPS_HPP
