/// \file
/// The stable text form of expressions and tensors (layer ir/). Golden tests depend on it: change
/// it only deliberately, and update the golden files in tests/golden with the change.
#ifndef LOOM_IR_PRINTER_HPP
#define LOOM_IR_PRINTER_HPP

#include "loom/ir/expr.hpp"

#include <iosfwd>
#include <string>

LOOM_BEGIN_NAMESPACE
namespace ir {

/// Infix form with only the parentheses that precedence needs: `A[i, k]*B[k, j] + 1.5f`.
/// Constants: index (int64) integers plain, other integers as `int32(3)`, float32 with an `f`
/// suffix, float64 plain; floats in their shortest round-trip form.
std::ostream& operator<<(std::ostream& os, const Expr& e);
/// `C[i, j] = body` for computes (with the reduce axes listed), `A: float32[64, 32]` for inputs.
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Expr& e);
std::string to_string(const Tensor& t);

}  // namespace ir
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ir/impl/printer.ipp"
#endif

#endif  // LOOM_IR_PRINTER_HPP
