/// \file
/// Integer division rounding towards negative infinity, as loom's FloorDiv and FloorMod mean it
/// (the simplifier folds, the interpreter runs and the tensor-core matcher evaluates indices
/// with these).
#ifndef LOOM_DETAIL_INT_MATH_HPP
#define LOOM_DETAIL_INT_MATH_HPP

#include "loom/config.hpp"

#include <cstdint>

LOOM_BEGIN_NAMESPACE
namespace detail {

/// a / b rounded down; b != 0.
constexpr int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

/// a - b * floor_div(a, b): the remainder with b's sign; b != 0.
constexpr int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

}  // namespace detail
LOOM_END_NAMESPACE

#endif  // LOOM_DETAIL_INT_MATH_HPP
