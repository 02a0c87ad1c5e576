// Bodies of loom/mpi.hpp.
#include "loom/mpi.hpp"

#include <iostream>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace mpi {

LOOM_DECL search::TaskSchedulerReport tune_tasks(const std::vector<WeightedTask>& tasks,
                                                 const TaskSchedulerOptions& options,
                                                 MpiMeasurerOptions mpi) {
  if (size() == 1) return loom::tune_tasks(tasks, options);
  // Every rank checks the options, so that a bad call fails on each rank alike instead of
  // leaving the workers waiting for a search rank that has thrown.
  const TaskSchedulerOptions prepared = loom::detail::prepared_for_cpu(tasks, options);
  cpu_jit::LocalMeasurerOptions local;
  local.constant_inputs = options.tune.constant_inputs;
  if (rank() != 0) {
    std::vector<Task> own;
    for (const WeightedTask& t : tasks) own.push_back(t.task);
    serve_measurements(own, options.tune.measure, local);
    search::TaskSchedulerReport report;
    report.stop_reason = "worker";
    return report;
  }
  if (!mpi.progress && !options.quiet) mpi.progress = options.log ? options.log : &std::cerr;
  MpiMeasurer measurer(options.tune.measure, local, mpi);
  return search::tune_tasks_with(tasks, prepared, measurer);
}

LOOM_DECL search::TaskSchedulerReport tune(const net::Network& network,
                                           const TaskSchedulerOptions& options,
                                           MpiMeasurerOptions mpi) {
  const loom::detail::NetworkTuning t = loom::detail::network_tuning(network, options);
  return tune_tasks(t.tasks, t.options, std::move(mpi));
}

}  // namespace mpi
LOOM_END_NAMESPACE
