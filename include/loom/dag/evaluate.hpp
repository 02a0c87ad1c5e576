/// \file
/// The naive reference interpreter (layer dag/): evaluates a ComputeDAG exactly as written, the
/// correctness oracle for every schedule, lowering and backend.
///
/// Semantics follow the IR contract (ir/node_kinds.hpp): float32 arithmetic is rounded to float32
/// after every operation, integers wrap at their width, reductions run in the order of their axes,
/// and only the taken branch of if_then_else is evaluated. Every tensor read is bounds-checked:
/// an out-of-bounds read throws loom::user_error naming the compute, the tensor and the index.
///
/// evaluate() computes every element of every op. evaluate_points() computes a few output
/// elements and only what they depend on, with the same semantics and bit-identical results: it
/// is how a kernel for a large shape (a 1024^3 GEMM, a ResNet convolution) is checked against
/// the interpreter in milliseconds instead of minutes.
#ifndef LOOM_DAG_EVALUATE_HPP
#define LOOM_DAG_EVALUATE_HPP

#include "loom/dag/compute_dag.hpp"

#include <cstdint>
#include <vector>

LOOM_BEGIN_NAMESPACE

/// Evaluates `dag`. `buffers` holds one pointer per argument, in the DAG's argument order (inputs
/// then outputs); each points to the tensor's elements, dense and row-major, of its element type.
/// Intermediate tensors are allocated internally. Throws loom::user_error when the number of
/// buffers is wrong or a pointer is null.
void evaluate(const ComputeDAG& dag, const std::vector<void*>& buffers);

/// The values of output `output` (an index into dag.outputs()) at the row-major flat indices
/// `points`, in their order (repeats allowed), computed from the inputs alone.
///
/// Only what those elements depend on is evaluated: each element of an intermediate op is
/// computed on its first read and kept, so the cost is that of the points' dependence cones (for
/// a GEMM, one dot product per point), not that of the whole DAG. Semantics are evaluate()'s,
/// including the float32 rounding of every value an op passes to the next, the order of
/// reductions and bounds-checked reads (loom.dag.E212), so the results are bit-identical to the
/// elements evaluate() would write.
///
/// `inputs` holds one pointer per DAG input, in order, each to the tensor's elements, dense and
/// row-major. Values come back as double: exact for float32, float64 and integers up to 2^53
/// (unsigned outputs as unsigned). Throws loom::user_error when the number of inputs is wrong
/// (E214), an input is null (E215), `output` is out of range (E216) or a point is (E217).
std::vector<double> evaluate_points(const ComputeDAG& dag, const std::vector<const void*>& inputs,
                                    size_t output, const std::vector<int64_t>& points);

namespace detail {
/// evaluate_points(), adding to `elements_computed` the number of op elements it evaluated
/// (output points included, each element once): what shows that the cost is the cone's.
std::vector<double> evaluate_points_counted(const ComputeDAG& dag,
                                            const std::vector<const void*>& inputs, size_t output,
                                            const std::vector<int64_t>& points,
                                            int64_t& elements_computed);
}  // namespace detail

LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/dag/impl/evaluate.ipp"
#endif

#endif  // LOOM_DAG_EVALUATE_HPP
