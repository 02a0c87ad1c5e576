/// \file
/// Symbolic bound inference (layer lower/): the range an index expression covers while some loop
/// variables run over their ranges and the others stay fixed. Used to size the region of a stage
/// computed inside another (compute_at) and of cache stages.
#ifndef LOOM_LOWER_BOUNDS_HPP
#define LOOM_LOWER_BOUNDS_HPP

#include "loom/ir/simplify.hpp"

#include <optional>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// Lower and upper bound (inclusive) of `e` while the variables in `ranging` cover their
/// intervals; every other variable is treated as a fixed symbol and may appear in the result.
/// nullopt when the expression is beyond the analysis (a product of two varying terms, a load).
std::optional<std::pair<ir::Expr, ir::Expr>> symbolic_bounds(const ir::Expr& e,
                                                             const ir::RangeMap& ranging);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/bounds.ipp"
#endif

#endif  // LOOM_LOWER_BOUNDS_HPP
