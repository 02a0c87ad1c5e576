/// \file
/// Lowering pass `unroll_loops` (layer lower/): Unrolled loops replaced by copies of their
/// body.
///
/// Expects: loops marked Unrolled by the schedule (an unroll annotation) or by auto_unroll.
///
/// Guarantees:
/// - every Unrolled loop of constant min and of constant extent up to `max_extent` is gone: a
///   Block of one copy of its body per iteration, in order, its variable replaced by that
///   iteration's value (inner Unrolled loops are expanded first). The copies are not simplified
///   (lower() runs simplify_loops after the passes);
/// - larger Unrolled loops, and those of symbolic bounds, stay loops marked Unrolled: expanding
///   them would multiply the code without bound;
/// - loops of every other kind are left as they are.
#ifndef LOOM_LOWER_UNROLL_LOOPS_HPP
#define LOOM_LOWER_UNROLL_LOOPS_HPP

#include "loom/ir/stmt.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

/// Replaces Unrolled loops of constant extent (<= max_extent) by copies of their body.
ir::Stmt unroll_loops(const ir::Stmt& s, int max_extent = 256);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/unroll_loops.ipp"
#endif

#endif  // LOOM_LOWER_UNROLL_LOOPS_HPP
