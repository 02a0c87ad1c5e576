/// \file
/// The naive reference interpreter (layer dag/): evaluates a ComputeDAG exactly as written, the
/// correctness oracle for every schedule, lowering and backend.
///
/// Semantics follow the IR contract (ir/node_kinds.hpp): float32 arithmetic is rounded to float32
/// after every operation, integers wrap at their width, reductions run in the order of their axes,
/// and only the taken branch of if_then_else is evaluated. Every tensor read is bounds-checked:
/// an out-of-bounds read throws loom::user_error naming the compute, the tensor and the index.
#ifndef LOOM_DAG_EVALUATE_HPP
#define LOOM_DAG_EVALUATE_HPP

#include "loom/dag/compute_dag.hpp"

#include <vector>

LOOM_BEGIN_NAMESPACE

/// Evaluates `dag`. `buffers` holds one pointer per argument, in the DAG's argument order (inputs
/// then outputs); each points to the tensor's elements, dense and row-major, of its element type.
/// Intermediate tensors are allocated internally. Throws loom::user_error when the number of
/// buffers is wrong or a pointer is null.
void evaluate(const ComputeDAG& dag, const std::vector<void*>& buffers);

LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/dag/impl/evaluate.ipp"
#endif

#endif  // LOOM_DAG_EVALUATE_HPP
