// Helpers shared by the operator-library tests: run a DAG on given inputs, compare with a
// reference under the tolerances of reference_ops.hpp.
#ifndef LOOM_TESTS_SUPPORT_OPS_CHECK_HPP
#define LOOM_TESTS_SUPPORT_OPS_CHECK_HPP

#include <doctest/doctest.h>
#include <loom/loom.hpp>

#include <vector>

#include "support/random.hpp"
#include "support/reference_ops.hpp"

namespace loom_test {

/// Evaluates `dag` with `inputs` (in the DAG's input order) and returns its single output.
template <class T>
std::vector<T> run(const loom::ComputeDAG& dag, std::vector<std::vector<T>*> inputs) {
  std::vector<T> out(dag.outputs().at(0).num_elements());
  std::vector<void*> buffers;
  for (auto* v : inputs) buffers.push_back(v->data());
  buffers.push_back(out.data());
  loom::evaluate(dag, buffers);
  return out;
}

template <class T>
double scaled_error(const std::vector<T>& got, const std::vector<T>& want, ref::tolerance tol) {
  REQUIRE(got.size() == want.size());
  return max_scaled_error(got, want, tol.atol, tol.rtol);
}

}  // namespace loom_test

#endif
