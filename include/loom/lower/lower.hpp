/// \file
/// Lowering (layer lower/): a schedule (`sched::State`) becomes a loop nest (`ir::LoweredFunc`).
///
/// `lower()` is the table of contents; each pass is a named function over immutable IR:
///  1. inline the bodies of inlined stages into their consumers;
///  2. build each stage's loop nest from its leaf iterators, deriving the op's axes through the
///     split/fuse relations, with a guard where a split does not divide its loop (tails);
///  3. infer the region a stage computed inside another must produce (symbolic bounds of its
///     consumer's reads over the inner loops), sized as a constant box clamped inside the tensor
///     (not along an axis where all its reads are of inputs that stay in bounds past the end,
///     as a weight zero-padded to whole tiles by sched::rewrite_layout does);
///  4. give every non-argument stage a buffer: full-size at the root, region-size at its attach
///     point; reductions get an init nest and an update nest;
///  5. `simplify_loops`, `unroll_loops` (explicit and auto_unroll_max_step), `partition_loops`
///     (peel tails), `simplify_loops`, `vectorize_loops`, `simplify_loops` again (not with
///     unroll, partition and vectorize all off, as for feature extraction: it would change
///     nothing).
#ifndef LOOM_LOWER_LOWER_HPP
#define LOOM_LOWER_LOWER_HPP

#include "loom/ir/stmt.hpp"
#include "loom/sched/state.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

struct LowerOptions {
  bool simplify = true;
  bool unroll = true;     ///< expand Unrolled loops (else they stay loops marked Unrolled)
  bool vectorize = true;  ///< turn Vectorized loops into vector code (else they run serially)
  bool partition = true;  ///< peel the tail iterations of loops (see partition_loops)
  /// Largest loop the unroller expands; bigger Unrolled loops stay loops.
  int max_unroll_extent = 256;
};

/// Lowers a complete schedule. Throws loom::user_error `[loom.lower.E410]` if the state still has
/// unfilled split lengths (a sketch), `[loom.lower.E411]` if a stage computed inside another is
/// read from outside it.
ir::LoweredFunc lower(const sched::State& state, const std::string& name = "kernel",
                      const LowerOptions& options = {});

/// Simplifies every expression using the ranges of the enclosing loops; removes loops of extent
/// 1 and conditions that are provably true.
ir::Stmt simplify_loops(const ir::Stmt& s);
/// Replaces Unrolled loops of constant extent (<= max_extent) by copies of their body.
ir::Stmt unroll_loops(const ir::Stmt& s, int max_extent = 256);
/// Peels the first and/or last iteration of loops whose remaining iterations then need no tail
/// guard, clamp or padding condition.
ir::Stmt partition_loops(const ir::Stmt& s);
/// The longest Vectorized loop (iterations) that vectorize_loops turns into vector code.
inline constexpr int64_t max_vectorized_extent = 64;
/// Turns Vectorized loops into vector code where the body allows it (stores and loads with
/// lane-linear indices, no inner loops, no lane-dependent branches with loads, at most
/// max_vectorized_extent iterations), otherwise makes them serial loops.
ir::Stmt vectorize_loops(const ir::Stmt& s);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/lower.ipp"
#include "loom/lower/impl/passes.ipp"
#endif

#endif  // LOOM_LOWER_LOWER_HPP
