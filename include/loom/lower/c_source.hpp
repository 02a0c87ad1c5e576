/// \file
/// A C source printer for lowered loop nests (layer lower/): what a kernel does, as C a user can
/// read, diff, or compile with any C compiler to cross-check the JIT. Vector statements become
/// `#pragma omp simd` loops over their lanes, parallel loops `#pragma omp parallel for`, and
/// `if_then_else` stays lazy as a `?:`.
#ifndef LOOM_LOWER_C_SOURCE_HPP
#define LOOM_LOWER_C_SOURCE_HPP

#include "loom/ir/stmt.hpp"

#include <string>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// The kernel as a C99 function `void name(T* restrict arg0, ...)` with a small prelude of
/// helpers (floor division, min/max); arguments in the kernel's order.
std::string to_c_source(const ir::LoweredFunc& f);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/c_source.ipp"
#endif

#endif  // LOOM_LOWER_C_SOURCE_HPP
