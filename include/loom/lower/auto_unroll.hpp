/// \file
/// Lowering pass `auto_unroll` (layer lower/): TVM's auto_unroll_max_step pragma, which marks
/// the small innermost loops of one stage's nest for the unroller.
///
/// Expects: the loop nest of one stage (build_loop_nests applies it to each stage whose
/// pragma asks for it, the nests of the stages computed inside it included).
///
/// Guarantees: a Serial loop of constant extent becomes Unrolled when the number of statement
/// instances under it (its extent times its body's, a Block adding up its statements, an
/// IfThenElse both branches, a loop of unknown extent counting as too many) stays within
/// `max_step`. Loops of other kinds keep them; nothing is expanded yet (unroll_loops does).
#ifndef LOOM_LOWER_AUTO_UNROLL_HPP
#define LOOM_LOWER_AUTO_UNROLL_HPP

#include "loom/ir/stmt.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

/// `nest` with its innermost serial loops marked Unrolled while they run at most `max_step`
/// statement instances.
ir::Stmt auto_unroll(const ir::Stmt& nest, int max_step);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/auto_unroll.ipp"
#endif

#endif  // LOOM_LOWER_AUTO_UNROLL_HPP
