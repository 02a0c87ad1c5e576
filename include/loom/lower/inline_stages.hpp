/// \file
/// Lowering pass `inline_stages` (layer lower/): the reads of inlined stages (compute_inline)
/// replaced by the values they read.
///
/// Expects: a state whose reads name stages of that state (sched::State::stage_of finds them);
/// an inlined stage is injective (sched/ refuses to inline a reduction), so its body is one
/// expression over its axes.
///
/// Guarantees: the body of every computed stage holds no read of an inlined stage; a read of one
/// becomes that stage's body with its axes replaced by the read's indices, expanded again where
/// that body reads inlined stages itself. Reads of other stages and placeholders stay
/// TensorReads (build_loop_nests turns them into loads once the buffers are known). Nothing else
/// changes: the body is neither simplified nor reordered.
///
/// `inline_read` is the pass's single step. Region inference (infer_regions.hpp) walks the
/// reads of a consumer step by step instead of expanding them all first: it takes every read of
/// a producer as written, also one in an index of an inlined read whose body then drops it.
#ifndef LOOM_LOWER_INLINE_STAGES_HPP
#define LOOM_LOWER_INLINE_STAGES_HPP

#include "loom/ir/expr.hpp"
#include "loom/sched/state.hpp"

#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// The body of every stage of `state` with the reads of inlined stages expanded, by stage
/// index; undefined for placeholders and inlined stages.
std::vector<ir::Expr> inline_stages(const sched::State& state);

/// The value of `read`, a read of an inlined stage: that stage's body at the read's indices, the
/// reads inside it not expanded.
ir::Expr inline_read(const sched::State& state, const ir::TensorRead& read);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/inline_stages.ipp"
#endif

#endif  // LOOM_LOWER_INLINE_STAGES_HPP
