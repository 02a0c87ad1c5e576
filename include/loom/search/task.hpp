/// \file
/// `Task`: a computation and the target it is built for — what the search tunes and what tuning
/// records are keyed on (layer search/).
#ifndef LOOM_SEARCH_TASK_HPP
#define LOOM_SEARCH_TASK_HPP

#include "loom/dag/compute_dag.hpp"
#include "loom/target.hpp"

#include <memory>

LOOM_BEGIN_NAMESPACE

struct Task {
  std::shared_ptr<const ComputeDAG> dag;
  Target target;

  Task(const ComputeDAG& d, Target t = Target::host())
      : dag(std::make_shared<const ComputeDAG>(d)), target(std::move(t)) {}
  Task(std::shared_ptr<const ComputeDAG> d, Target t = Target::host())
      : dag(std::move(d)), target(std::move(t)) {}
  const std::string& workload_key() const { return dag->workload_key(); }
};

LOOM_END_NAMESPACE

#endif  // LOOM_SEARCH_TASK_HPP
