/// \file
/// Lowering (layer lower/): a schedule (`sched::State`) becomes a loop nest (`ir::LoweredFunc`).
///
/// `lower()` (impl/lower.ipp) is the table of contents. It runs these passes in order, each a
/// free function in its own header, which opens with what the pass expects and guarantees:
///  1. inline_stages.hpp: the bodies of inlined stages substituted into their consumers;
///  2. infer_regions.hpp: the box of its tensor each stage computes. A stage computed inside
///     another covers the symbolic bounds (bounds.hpp) of its consumers' reads over the loops
///     inside its attach point, sized as a constant box clamped inside the tensor (not along an
///     axis where all its reads are of inputs that stay in bounds past the end, as a weight
///     zero-padded to whole tiles by sched::rewrite_layout does). Each stage's loops over its
///     box come from stage_loops.hpp: extents, variables and values of its iterators through
///     the split/fuse relations, with a guard where a split does not divide its loop (tails);
///  3. plan_buffers.hpp: a buffer for every stage: the kernel's arguments, full-size at the
///     root, region-size at the attach point;
///  4. build_loop_nests.hpp: the loop statements. Reductions get an init nest and an update
///     nest, a stage computed inside another goes into its consumer's loop with its Allocate,
///     and auto_unroll.hpp marks the loops of stages with auto_unroll_max_step;
///  5. simplify_loops.hpp, unroll_loops.hpp (explicit and auto_unroll_max_step),
///     partition_loops.hpp (peel tails), simplify_loops.hpp, vectorize_loops.hpp,
///     simplify_loops.hpp again (not with unroll, partition and vectorize all off, as for
///     feature extraction: it would change nothing).
/// With LowerOptions::verify, ir::verify (ir/verify.hpp) checks the nest after each pass of 4-5.
#ifndef LOOM_LOWER_LOWER_HPP
#define LOOM_LOWER_LOWER_HPP

#include "loom/ir/stmt.hpp"
#include "loom/lower/partition_loops.hpp"
#include "loom/lower/simplify_loops.hpp"
#include "loom/lower/unroll_loops.hpp"
#include "loom/lower/vectorize_loops.hpp"
#include "loom/sched/state.hpp"

#include <string>

LOOM_BEGIN_NAMESPACE
namespace lower {

struct LowerOptions {
  bool simplify = true;
  bool unroll = true;     ///< expand Unrolled loops (else they stay loops marked Unrolled)
  bool vectorize = true;  ///< turn Vectorized loops into vector code (else they run serially)
  bool partition = true;  ///< peel the tail iterations of loops (see partition_loops)
  /// Largest loop the unroller expands; bigger Unrolled loops stay loops.
  int max_unroll_extent = 256;
  /// Run ir::verify after every pass: a pass that breaks an invariant of the loop nest throws
  /// loom::internal_error naming itself. On by default where LOOM_ENABLE_ASSERTS is.
  bool verify = LOOM_ENABLE_ASSERTS != 0;
};

/// Lowers a complete schedule. Throws loom::user_error `[loom.lower.E410]` if the state still has
/// unfilled split lengths (a sketch), `[loom.lower.E411]` if a stage computed inside another is
/// read from outside it, and the other errors of infer_regions.hpp.
ir::LoweredFunc lower(const sched::State& state, const std::string& name = "kernel",
                      const LowerOptions& options = {});

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/lower.ipp"
#endif

#endif  // LOOM_LOWER_LOWER_HPP
