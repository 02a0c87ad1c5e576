/// \file
/// Measuring across machines with MPI (layer backend/mpi, namespace loom::mpi): one rank, the
/// search rank (rank 0), runs the task scheduler and the search; every other rank, a worker,
/// builds and times the programs it is sent with its own cpu_jit::LocalMeasurer (a forked child
/// per program, as on one machine) and sends each result back as soon as it has it.
///
/// The protocol (point to point on MPI_COMM_WORLD, JSON text in MPI_CHAR messages):
/// - a worker starts by sending `hello`: its host name, LLVM's name of its CPU and its thread
///   count;
/// - the search rank splits each batch into chunks and sends a worker a chunk (`work`: the
///   task's workload key and each program's index in the batch and transform steps, the
///   record format's, sched/record.hpp) whenever the worker has none; the worker rebuilds each
///   program by replaying its steps on its own copy of the task (every rank extracts the same
///   tasks from the same network, so a workload key names the same computation everywhere);
/// - the worker sends one `result` per program as it finishes, then `done` with the seconds its
///   measurer spent on the chunk (the difference to the round trip the search rank saw is the
///   protocol's overhead, MpiMeasurerStats::overhead_seconds);
/// - `stop` ends a worker's loop (MpiMeasurer's destructor sends it to all).
/// A program that crashes or hangs is a failed result inside its worker, as on one machine. A
/// rank that dies (a lost host) ends the whole job: that is MPI's model. The records log, written
/// by the search rank as results arrive, is what a rerun resumes from.
///
/// Differing hosts: a record keeps the CPU it ran on (Measurer::device), and costs from
/// different CPUs must not compete in one search, so the workers must report the same CPU and
/// thread count; otherwise the MpiMeasurer refuses to start (E1302), naming the hosts. Run one
/// job per kind of machine (one hostfile each), or give the odd hosts a separate job.
///
/// Threads: MPI is called only from the thread that constructs the MpiMeasurer and calls
/// measure (the tuner's calling thread); Environment asks for MPI_THREAD_FUNNELED.
#ifndef LOOM_BACKEND_MPI_MEASURER_HPP
#define LOOM_BACKEND_MPI_MEASURER_HPP

#include "loom/backend/llvm/measurer.hpp"

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace mpi {

/// MPI_Init on construction (unless MPI is already initialized), MPI_Finalize on destruction
/// (when this object initialized it). Construct one in main(), before any other loom::mpi call.
class Environment {
 public:
  Environment(int& argc, char**& argv);
  Environment();
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

 private:
  bool owns_ = false;
};

/// Whether this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI or
/// PMIx), from its environment: a program can then construct an Environment only when it is.
bool launched_by_mpi();
/// This process's rank in MPI_COMM_WORLD, and the number of ranks. These, barrier() and
/// everything else here throw loom::user_error `[loom.mpi.E1303]` before an Environment has
/// initialized MPI.
int rank();
int size();
/// Waits until every rank has called it (MPI_Barrier on MPI_COMM_WORLD).
void barrier();

/// What the MPI measurer needs beyond the local measurer's options.
struct MpiMeasurerOptions {
  /// Programs per chunk sent to a worker (0: a batch's programs over twice the workers, so that
  /// a worker that finishes early takes another chunk instead of waiting for the slowest).
  int chunk = 0;
  /// A progress line per batch (trials per second in all and per rank), written here; none when
  /// null.
  std::ostream* progress = nullptr;
};

/// Counters of the search rank's measurer.
struct MpiMeasurerStats {
  std::size_t batches = 0;
  std::size_t programs = 0;
  /// Wall seconds inside measure_each, and the part of the chunks' round trips that the workers'
  /// measurers did not account for (messages, replaying the steps, waiting to be read).
  double wall_seconds = 0;
  double overhead_seconds = 0;
  /// Per rank (index = rank; rank 0 stays 0): programs measured and measuring seconds.
  std::vector<std::size_t> rank_programs;
  std::vector<double> rank_seconds;
};

/// search::Measurer of the search rank: each batch measured by the worker ranks (see the file
/// comment). Construct it on rank 0 of a world of at least two ranks, while every other rank
/// runs serve_measurements(); throws loom::user_error `[loom.mpi.E1301]` otherwise, and
/// `[loom.mpi.E1302]` when the workers' CPUs or thread counts differ.
class MpiMeasurer : public search::StreamingMeasurer {
 public:
  MpiMeasurer(search::MeasureOptions options, cpu_jit::LocalMeasurerOptions local,
              MpiMeasurerOptions mpi = {});
  /// Sends `stop` to every worker.
  ~MpiMeasurer() override;
  MpiMeasurer(const MpiMeasurer&) = delete;
  MpiMeasurer& operator=(const MpiMeasurer&) = delete;

  /// Tells each result as its worker's message arrives.
  std::vector<search::MeasureResult> measure_each(const Task& task,
                                                  const std::vector<sched::State>& states,
                                                  const ResultCallback& on_result) override;
  std::string name() const override { return "mpi-cpu"; }
  /// The workers' (all the same, checked at construction).
  int threads() const override { return threads_; }
  std::string device() const override { return device_; }
  bool cold_constants(const Task& task) const override { return local_.cold_constants(task); }

  const MpiMeasurerStats& stats() const { return stats_; }
  /// The workers' host names, by rank (rank 0: "").
  const std::vector<std::string>& hosts() const { return hosts_; }

 private:
  // Answers the queries a worker's measurer would answer the same way (cold_constants); never
  // measures.
  cpu_jit::LocalMeasurer local_;
  MpiMeasurerOptions mpi_;
  MpiMeasurerStats stats_;
  std::vector<std::string> hosts_;
  std::string device_;
  int threads_ = 0;
  double started_ = 0;
};

/// A worker rank's loop: measures what the search rank sends, with a LocalMeasurer built from
/// `options` and `local`, on the programs' tasks looked up by workload key in `tasks`, until it
/// is told to stop. A workload key it does not know is an `unknown` failure of that program.
void serve_measurements(const std::vector<Task>& tasks, const search::MeasureOptions& options,
                        const cpu_jit::LocalMeasurerOptions& local);

}  // namespace mpi
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/backend/mpi/impl/measurer.ipp"
#endif

#endif  // LOOM_BACKEND_MPI_MEASURER_HPP
