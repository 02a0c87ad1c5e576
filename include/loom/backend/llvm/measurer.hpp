/// \file
/// The CPU backend's measurer (layer backend/llvm, namespace loom::cpu_jit): builds, checks and
/// times the programs the search picks, each in a forked child process, so that nothing a
/// program does (a crash, an LLVM fatal error, a hang, a wrong result) can end the tuning run.
///
/// One batch (`measure`):
/// - Per task (cached by workload key), random inputs are written once into shared memory
///   (`MAP_SHARED | MAP_ANONYMOUS`, mapped before any child is forked), and the reference output
///   is computed once, itself in a forked child, into the same region: the DAG interpreter when
///   the DAG's FLOP count is at most `interpreter_flop_limit`, otherwise the task's default
///   schedule, compiled. Children read inputs and reference without copying them; each child
///   maps the region read-only, so a program that writes out of bounds into it crashes instead
///   of corrupting what later programs are checked against.
/// - Every program gets its own child. Up to `build_parallelism` children build at once
///   (lowering + code generation, plus the layout rewrite of constant inputs). A child that has
///   built says so on its socket and waits. Children run strictly one at a time, and while one
///   runs, every child still building is stopped (SIGSTOP) and no new child is forked, so a
///   timed program has the machine to itself. Stopped time does not count against a child's
///   build timeout.
/// - A running child calls its program once on fresh output buffers filled with NaN (integers:
///   0x5A bytes), compares every output with the reference (`wrong_answer`, with the worst
///   element, instead of timing), then times it (see `measure_child_run` in impl/timing.ipp for
///   the number/repeat rules), and writes its result back.
/// - The parent enforces `build_timeout_s` and `run_timeout_s` by SIGKILL and reaps every child
///   before `measure` returns. Tighter limits come from the task's own history: a build that
///   lasts `slow_build_kill_factor` times the median of the task's builds so far, and a first
///   run that lasts `slow_run_kill_factor` times the task's best cost (the child says when its
///   first call has returned), are killed the same way and recorded as timeouts. A child's stderr
///   is captured: the last lines (for instance LLVM's "LLVM ERROR: ...") end up in the error
///   message.
///
/// Errors (search::MeasureError): lowering or the layout rewrite throws → instantiation; code
/// generation throws, or the child dies while building → compile; the child dies (signal,
/// non-zero exit) or the kernel returns an error code while running → runtime; timeouts →
/// compile_timeout / run_timeout; a result that differs from the reference → wrong_answer; the
/// reference itself could not be computed → unknown (for every program of that task).
///
/// Inputs are uniform in [0.5, 1.5) for floating-point types and in [1, 8] for integers (true or
/// false for bool): the ops that need positive inputs (a variance under rsqrt, a divisor, a log)
/// get them, and sums of positive values do not cancel, so rtol/atol stay meaningful.
///
/// A state whose computation is not the task's (another workload key) is measured only when its
/// kernel arguments have the task's names, types and shapes and `check_correctness` is on: then
/// the check decides (tests use this to inject a genuine wrong answer). Otherwise it is an
/// instantiation error.
///
/// POSIX only (fork, socketpair, poll, mmap). `measure` must not be called concurrently on one
/// measurer. The parent process never compiles; it creates the LLVM engine once before the
/// first fork so that children inherit it instead of each creating it, so call `measure` from a
/// thread that is not racing another thread's use of the JIT.
#ifndef LOOM_BACKEND_LLVM_MEASURER_HPP
#define LOOM_BACKEND_LLVM_MEASURER_HPP

#include "loom/search/measure.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {

/// What the CPU measurer needs beyond search::MeasureOptions.
struct LocalMeasurerOptions {
  /// Inputs that hold constant weights (by placeholder name). A program is measured with such
  /// an input stored in the layout its loop nest walks (sched::rewrite_layout: the pack kernel
  /// runs once, untimed, then the main kernel is timed on the packed buffer), as the program
  /// would be deployed with build_with_packed_input. Where the rewrite does not apply to a
  /// program (sched::rewrite_layout throws a user_error), the program is measured as it is.
  /// Names that are not inputs of a task are ignored for that task, so one list can serve the
  /// tasks of a whole network.
  std::vector<std::string> constant_inputs;
  /// Seed of the random inputs (one stream per input).
  uint64_t seed = 0x6c6f6f6d;
  /// Longest time the reference output may take (interpreter, or default schedule build + run).
  double reference_timeout_s = 120;
};

/// Counters over the measurer's lifetime, for logs and overhead measurements.
struct LocalMeasurerStats {
  size_t batches = 0;
  size_t programs = 0;
  /// Programs measured ok with at least one constant input packed.
  size_t packed_programs = 0;
  /// Wall seconds spent in measure(), and the children's own compile and run seconds (summed;
  /// builds overlap, so the sum of compile seconds can exceed the wall time).
  double wall_seconds = 0;
  double compile_seconds = 0;
  double run_seconds = 0;
  /// Seconds spent computing reference outputs (included in wall_seconds).
  double reference_seconds = 0;
};

/// search::Measurer for the host CPU with crash isolation (see the file comment).
class LocalMeasurer : public search::StreamingMeasurer {
 public:
  /// Throws loom::user_error `[loom.llvm.E530]` for options out of range
  /// (search::measure_options_problems, or a reference_timeout_s that is not positive).
  explicit LocalMeasurer(search::MeasureOptions options = {}, LocalMeasurerOptions local = {});
  ~LocalMeasurer() override;
  LocalMeasurer(const LocalMeasurer&) = delete;
  LocalMeasurer& operator=(const LocalMeasurer&) = delete;

  /// Tells each result when its process is done (a failure before any process starts: at once).
  std::vector<search::MeasureResult> measure_each(const Task& task,
                                                  const std::vector<sched::State>& states,
                                                  const ResultCallback& on_result) override;
  std::string name() const override { return "local-cpu"; }
  /// MeasureOptions::num_threads, or the parallel runtime's count it leaves in place.
  int threads() const override;
  /// LLVM's name of the host CPU, the one the JIT compiles for ("znver5", "skylake-avx512").
  std::string device() const override;
  /// Cold constants asked for (and no flush_cache), and some constant input is `task`'s.
  bool cold_constants(const Task& task) const override;

  const search::MeasureOptions& options() const { return options_; }
  const LocalMeasurerOptions& local_options() const { return local_; }
  const LocalMeasurerStats& stats() const { return stats_; }

  /// The constant inputs that are measured packed for `state`: those of `constant_inputs` that
  /// are inputs of its computation and that sched::rewrite_layout accepts, in order (each
  /// rewrite applied to the previous one's state). The tuner uses it to build the best program
  /// the way it was measured.
  static std::vector<std::string> packed_inputs(const sched::State& state,
                                                const std::vector<std::string>& constant_inputs);

  /// Shared inputs and reference output of one task (defined in impl/reference.ipp).
  struct TaskData;

 private:
  TaskData& task_data(const Task& task);
  /// The task's data, ready to measure against (its reference computed when programs are
  /// checked); nullptr, with `failure` saying why, when no program of the task can be measured.
  TaskData* ready_task(const Task& task, search::MeasureResult& failure);

  search::MeasureOptions options_;
  LocalMeasurerOptions local_;
  LocalMeasurerStats stats_;
  std::map<std::string, std::unique_ptr<TaskData>> tasks_;
};

}  // namespace cpu_jit
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/backend/llvm/impl/measurer.ipp"
#endif

#endif  // LOOM_BACKEND_LLVM_MEASURER_HPP
