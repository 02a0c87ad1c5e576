/// \file
/// The core umbrella header: the DSL, the runtime IR, the compute DAG, the reference interpreter
/// and the operator library. Compiles with no LLVM, CUDA or Eigen installed; backends have their
/// own umbrellas (`loom/cpu.hpp`, `loom/cuda.hpp`) and CMake targets.
#ifndef LOOM_LOOM_HPP
#define LOOM_LOOM_HPP

#include "loom/config.hpp"
#include "loom/error.hpp"
#include "loom/half.hpp"
#include "loom/ir/dtype.hpp"
#include "loom/ir/expr.hpp"
#include "loom/ir/visitor.hpp"
#include "loom/ir/printer.hpp"
#include "loom/ir/equal_hash.hpp"
#include "loom/ir/simplify.hpp"
#include "loom/ir/stmt.hpp"
#include "loom/dsl/expr.hpp"
#include "loom/dsl/tensor.hpp"
#include "loom/dsl/operators.hpp"
#include "loom/dsl/reduce.hpp"
#include "loom/dsl/compute.hpp"
#include "loom/dag/compute_dag.hpp"
#include "loom/dag/evaluate.hpp"
#include "loom/ops.hpp"

#endif  // LOOM_LOOM_HPP
