/// \file
/// Lowering pass `simplify_loops` (layer lower/): every expression of a loop nest simplified
/// with what the loops around it say about their variables.
///
/// Expects: a loop nest (the IR of ir/stmt.hpp); nothing about its loops' kinds or bounds.
///
/// Guarantees:
/// - every expression is simplified (ir/simplify.hpp) with the ranges of the enclosing loops
///   of constant bounds;
/// - a loop of constant extent <= 0 is gone; a loop of one iteration is its body at that
///   iteration, unless it is bound to a GPU index (BlockIdx and after in ir::ForKind), which
///   the GPU lowering still needs as a loop;
/// - a conditional whose condition is provably true or false is the branch taken;
/// - it is idempotent on lowering's nests: lower() skips running it twice in a row.
#ifndef LOOM_LOWER_SIMPLIFY_LOOPS_HPP
#define LOOM_LOWER_SIMPLIFY_LOOPS_HPP

#include "loom/ir/stmt.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

/// Simplifies every expression using the ranges of the enclosing loops; removes loops of extent
/// 1 and conditions that are provably true.
ir::Stmt simplify_loops(const ir::Stmt& s);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/simplify_loops.ipp"
#endif

#endif  // LOOM_LOWER_SIMPLIFY_LOOPS_HPP
