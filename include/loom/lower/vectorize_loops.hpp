/// \file
/// Lowering pass `vectorize_loops` (layer lower/): Vectorized loops turned into vector code
/// (Ramp, Broadcast, vector loads and stores), or into serial loops where the body is beyond
/// it.
///
/// Expects: any loop nest. Loops are handled innermost first: a Vectorized loop around one
/// already turned into vector code stays serial.
///
/// Guarantees: no loop is Vectorized afterwards. A Vectorized loop of constant extent from 2
/// to max_vectorized_extent becomes vector code when its body allows it: stores and loads
/// whose indices vary with the lanes (a store to one element from every lane is a reduction
/// along the loop), no inner loop, no allocation, no lane-dependent IfThenElse, no
/// lane-dependent Select with a load in a branch (vector code evaluates both branches, and a
/// padding branch may read out of bounds where it is not taken), no vector already in it
/// (loom's vectors have one level of lanes). Its body is then emitted once per chunk of lanes
/// (see vector_chunks in the body: one chunk when the extent is a power of two), the loop
/// variable a Ramp of stride 1 from the chunk's start; ramps stay ramps under affine
/// arithmetic, so the code generator sees unit-stride accesses as such. Every other
/// Vectorized loop becomes a Serial loop.
#ifndef LOOM_LOWER_VECTORIZE_LOOPS_HPP
#define LOOM_LOWER_VECTORIZE_LOOPS_HPP

#include "loom/ir/stmt.hpp"

#include <cstdint>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// The longest Vectorized loop (iterations) that vectorize_loops turns into vector code.
inline constexpr int64_t max_vectorized_extent = 64;

/// Turns Vectorized loops into vector code where the body allows it (stores and loads with
/// lane-linear indices, no inner loops, no lane-dependent branches with loads, at most
/// max_vectorized_extent iterations), otherwise makes them serial loops.
ir::Stmt vectorize_loops(const ir::Stmt& s);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/vectorize_loops.ipp"
#endif

#endif  // LOOM_LOWER_VECTORIZE_LOOPS_HPP
