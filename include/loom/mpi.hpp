/// \file
/// Tuning a network across machines with MPI (link `loom::mpi`; Debian `libopenmpi-dev`). The
/// same program runs on every rank, under `mpirun` or `srun`:
///
/// ```cpp
/// int main(int argc, char** argv) {
///   loom::mpi::Environment mpi(argc, argv);          // MPI_Init ... MPI_Finalize
///   net::Network n = my_network();                    // the same network on every rank
///   TaskSchedulerOptions o; o.trials = 2000; o.tune.records = "net.jsonl";
///   auto report = loom::mpi::tune(n, o);              // rank 0 searches, the others measure
///   if (loom::mpi::rank() == 0) print(report);
/// }
/// ```
///
/// Rank 0 runs the task scheduler, the search and the shared cost model, and writes the records
/// log (the usual format, appended as results arrive; a rerun of the same command resumes from
/// it and measures nothing twice); every other rank builds and times the programs it is sent
/// (backend/mpi/measurer.hpp). With one rank, everything runs on this machine as loom::tune
/// does. A rank that dies ends the job (MPI's model); a crashing or hanging program does not.
#ifndef LOOM_MPI_HPP
#define LOOM_MPI_HPP

#include "loom/config.hpp"

#if !LOOM_WITH_MPI
// clang-format off: the header test finds the target this #error names on its line
#error "loom/mpi.hpp needs MPI: link the CMake target loom::mpi (apt install libopenmpi-dev openmpi-bin)"
// clang-format on
#endif

#include "loom/backend/mpi/measurer.hpp"
#include "loom/network.hpp"

LOOM_BEGIN_NAMESPACE
namespace mpi {

/// tune_tasks over the ranks: rank 0 searches and returns the report; every other rank serves
/// measurements until rank 0 is done and returns an empty report (stop_reason "worker"). Call it
/// on every rank with the same tasks and options. `options.log` also gets a progress line per
/// batch (trials per second, in all and per rank) unless `options.quiet`. Errors as tune_tasks,
/// plus MpiMeasurer's ([loom.mpi.E1301], [loom.mpi.E1302]).
search::TaskSchedulerReport tune_tasks(const std::vector<WeightedTask>& tasks,
                                       const TaskSchedulerOptions& options,
                                       MpiMeasurerOptions mpi = {});

/// loom::tune(network, options) over the ranks, as tune_tasks above.
search::TaskSchedulerReport tune(const net::Network& network, const TaskSchedulerOptions& options,
                                 MpiMeasurerOptions mpi = {});

}  // namespace mpi
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/impl/mpi.ipp"
#endif

#endif  // LOOM_MPI_HPP
