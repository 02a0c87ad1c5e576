/// \file
/// Lowering pass `partition_loops` (layer lower/): loops whose first or last iteration is the
/// only one that needs a tail guard, a clamp or a padding condition lose that iteration to a
/// copy of their body outside the loop.
///
/// Expects: a loop nest whose tail guards, clamped regions and padding conditions are
/// conditions (IfThenElse, Select) and mins and maxes over loop variables, as lowering writes
/// them.
///
/// Guarantees: a loop of constant bounds and at least 3 iterations, not bound to a GPU index,
/// whose body holds conditions (each conjunct of a conjunction counted alone), mins or maxes
/// that depend on its variable and are not all settled over its range, is split when that
/// settles every one of them in the remaining iterations (with the ranges of the loops inside):
/// its last iteration peeled, else its first, else both (at least 4 iterations then). A peeled
/// iteration is the body with the variable replaced by its value; the main loop keeps its
/// kind and runs over the remaining range. Every other loop stays as it is. The conditions
/// themselves stay: simplify_loops, run after, removes them from the main loop, which stays
/// vectorizable and keeps constant offsets into register tiles.
#ifndef LOOM_LOWER_PARTITION_LOOPS_HPP
#define LOOM_LOWER_PARTITION_LOOPS_HPP

#include "loom/ir/stmt.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

/// Peels the first and/or last iteration of loops whose remaining iterations then need no tail
/// guard, clamp or padding condition.
ir::Stmt partition_loops(const ir::Stmt& s);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/partition_loops.ipp"
#endif

#endif  // LOOM_LOWER_PARTITION_LOOPS_HPP
