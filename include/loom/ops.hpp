/// \file
/// The operator library umbrella (layer ops/, on top of the DSL): every operator of loom::ops,
/// written with the DSL and returning typed tensors that a ComputeDAG can take as outputs.
///
/// Conventions shared by all operators:
/// - They are templates on the element type T and take and return `Tensor<T, R>`.
/// - Shapes are checked when the operator is called; a mismatch throws loom::user_error whose
///   message starts with an id `[loom.ops.E3xx]` (listed in loom/ops/common.hpp), names the
///   operator and the offending tensors with their shapes, and says what was expected.
/// - Every compute's tag is the name of the operator (or `<op>_<stage>` for the inner stages of
///   a multi-stage operator); the last argument `name` names the result, and intermediate
///   tensors are named `<name>_<stage>`. An operator with intermediates returns only its final
///   tensor: the others are reachable through it (ComputeDAG finds them).
///
/// Not part of loom/loom.hpp, so that code using only the DSL does not pay for the operators.
#ifndef LOOM_OPS_HPP
#define LOOM_OPS_HPP

#include "loom/ops/common.hpp"
#include "loom/ops/conv.hpp"
#include "loom/ops/elementwise.hpp"
#include "loom/ops/matmul.hpp"
#include "loom/ops/norm.hpp"
#include "loom/ops/pool.hpp"
#include "loom/ops/subgraphs.hpp"
#include "loom/ops/transform.hpp"

#endif  // LOOM_OPS_HPP
