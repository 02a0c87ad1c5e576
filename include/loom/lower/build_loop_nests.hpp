/// \file
/// Lowering pass `build_loop_nests` (layer lower/): the kernel's body as loop statements, from
/// the stages' bodies, regions and buffers.
///
/// Expects: the bodies of inline_stages, the regions and loops of infer_regions and the
/// buffers of plan_buffers, all of the same state.
///
/// Guarantees:
/// - every stage computed at the root gets its nest, in stage order: a For per leaf iterator,
///   outermost first, over [0, extent) with the iterator's annotation as its ForKind, and the
///   root buffers of plan_buffers allocated around all of them;
/// - a stage computes its body at its coordinates into its buffer (reads of other stages
///   become loads at their flat indices), under the tail guards of its non-dividing splits;
/// - a reduction is an init nest (its spatial loops from the first reduction loop on, storing
///   the identity) and an update nest (combining into the stored value, also under the
///   reduction guards and the Reduce's condition) below the loops before its first reduction
///   loop. When every loop from the first reduction loop on is a reduction loop, exactly one
///   of them is bound to a thread index and no stage is computed inside them, that thread loop
///   goes outside the others, each of its iterations sums into an accumulator of its own, and
///   the accumulators are combined into the output once (lower/gpu.hpp turns that combine
///   into one AllReduce); the init of a root or shared-memory output then runs in a thread
///   loop of one iteration;
/// - a stage computed at a loop of another is built the same way, placed in that loop's body
///   before the rest of it, and its buffer allocated around that body;
/// - a stage with the auto_unroll_max_step pragma has its nest, the stages inside it included,
///   marked by auto_unroll.
/// The result holds no TensorRead and no Reduce; every expression has one lane.
///
/// Loop construction and buffer placement stay one recursive walk: a stage computed inside
/// another is built in its consumer's loop and its Allocate scopes that loop's body, so where
/// the nests go is where the buffers live. What separates from it already stands apart: the
/// loops' arithmetic (stage_loops), their regions (infer_regions), the buffers' shapes and
/// layouts (plan_buffers), inlining (inline_stages) and the auto_unroll marking.
#ifndef LOOM_LOWER_BUILD_LOOP_NESTS_HPP
#define LOOM_LOWER_BUILD_LOOP_NESTS_HPP

#include "loom/ir/stmt.hpp"
#include "loom/lower/infer_regions.hpp"
#include "loom/lower/plan_buffers.hpp"
#include "loom/sched/state.hpp"

#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// The loop nest of `state`: `bodies` from inline_stages, `regions` from infer_regions,
/// `buffers` from plan_buffers.
ir::Stmt build_loop_nests(const sched::State& state, const std::vector<ir::Expr>& bodies,
                          const std::vector<StageRegion>& regions, const BufferPlan& buffers);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/build_loop_nests.ipp"
#endif

#endif  // LOOM_LOWER_BUILD_LOOP_NESTS_HPP
