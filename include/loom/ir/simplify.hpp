/// \file
/// Simplification of index arithmetic and interval bounds (layer ir/).
///
/// Integer expressions are put into a canonical linear form (sum of coefficient*atom plus a
/// constant, atoms in order of first appearance), constants are folded, and floor division and
/// modulus by positive constants are resolved where the bounds of the operand allow it, e.g.
/// `floordiv(i*4 + j, 4) -> i` when `0 <= j < 4`. Bound inference and lowering rely on it.
#ifndef LOOM_IR_SIMPLIFY_HPP
#define LOOM_IR_SIMPLIFY_HPP

#include "loom/ir/expr.hpp"

#include <limits>
#include <unordered_map>

LOOM_BEGIN_NAMESPACE
namespace ir {

/// A closed integer interval [min, max]; the int64 extremes stand for "unbounded".
struct Interval {
  static constexpr int64_t neg_inf = std::numeric_limits<int64_t>::min();
  static constexpr int64_t pos_inf = std::numeric_limits<int64_t>::max();
  int64_t min = neg_inf;
  int64_t max = pos_inf;
  bool bounded() const { return min != neg_inf && max != pos_inf; }
  bool is_point() const { return bounded() && min == max; }
  static Interval point(int64_t v) { return {v, v}; }
  /// [0, extent): the range of a loop variable.
  static Interval range(int64_t extent) { return {0, extent - 1}; }
  friend bool operator==(const Interval&, const Interval&) = default;
};

/// Known ranges of variables.
using RangeMap = std::unordered_map<const Variable*, Interval>;

/// Interval that contains every value `e` takes when its variables stay in `ranges`
/// (integer expressions only; unknown or float expressions give an unbounded interval).
Interval bounds_of(const Expr& e, const RangeMap& ranges = {});

/// The largest d known to divide every value of integer expression `e` (0 when `e` is 0): from
/// constants through +, -, *, floordiv and floormod by constants, select, min and max; a
/// variable counts as 1. Alignment proofs use it (a vector access at `e` with d % lanes == 0).
int64_t known_divisor(const Expr& e);

/// Simplified equivalent of `e` under `ranges`.
Expr simplify(const Expr& e, const RangeMap& ranges = {});

/// True only if `condition` (bool) holds for every value of its variables within `ranges`.
bool can_prove(const Expr& condition, const RangeMap& ranges = {});

/// Variables replaced by expressions (ir::substitute's map).
using SubstitutionMap = std::unordered_map<const Variable*, Expr>;

/// simplify(substitute(e, substitutions), ranges) without building the substituted copy of `e`
/// (lower::simplify_loops replaces the variables of the one-iteration loops it removes so). The
/// values must not use the substituted variables. `known`, when not null, is a node of `e` whose
/// simplified form (with the same substitutions and ranges) is `known_result`: a store's value
/// that reads the stored element through the very index node of the store reuses it.
Expr simplify_substituted(const Expr& e, const SubstitutionMap& substitutions,
                          const RangeMap& ranges, const Expr* known = nullptr,
                          const Expr* known_result = nullptr);

}  // namespace ir
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ir/impl/simplify.ipp"
#endif

#endif  // LOOM_IR_SIMPLIFY_HPP
