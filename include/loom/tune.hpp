/// \file
/// Tuning on the CPU, the public calls (link `loom::llvm`):
///
/// ```cpp
/// Task task(dag, Target::host());
/// TuneOptions opts; opts.trials = 1000; opts.records = "gemm.jsonl";
/// TuneResult r = tune(task, opts);
/// Kernel k = r.kernel();            // the best program, compiled
/// k(a.data(), b.data(), c.data());
/// std::cout << r.best_schedule();   // the winning loop nest, readable
/// ```
///
/// Shipping a tuned kernel: tune once with a records file, ship the file, and in the
/// application call `tuned_kernel(task, "gemm.jsonl")` — it builds the best recorded program of
/// the workload once per process (thread-safe, cached), takes the schedule of the same
/// computation tuned at the nearest other shape when the file has none of this one, and the
/// pretrained cost model's pick (compile_from_model, about a second) when it has neither.
/// `build_best` is the same without the cache and without the fallbacks.
///
/// Measurement runs every candidate in a forked child (cpu_jit::LocalMeasurer): a candidate
/// that crashes, hangs or computes a wrong result is recorded as a failure and tuning goes on.
#ifndef LOOM_TUNE_HPP
#define LOOM_TUNE_HPP

#include "loom/config.hpp"

#if !LOOM_WITH_LLVM
// clang-format off: the header test finds the target this #error names on its line
#error "loom/tune.hpp needs the LLVM backend: link the CMake target loom::llvm (apt install llvm-19-dev)"
// clang-format on
#endif

#include "loom/cost/pretrained.hpp"
#include "loom/cpu.hpp"
#include "loom/search/evolution.hpp"
#include "loom/search/task_scheduler.hpp"
#include "loom/search/tuner.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE

using search::TuneOptions;

/// The outcome of tune(): the report (curve, timings, records) and the best program.
class TuneResult {
 public:
  TuneResult(Task task, search::TuneReport report, std::vector<std::string> constant_inputs = {})
      : task_(std::move(task)),
        report_(std::move(report)),
        constant_inputs_(std::move(constant_inputs)) {}

  /// Whether any program was measured correct (and so kernel() can build one).
  bool found() const { return report_.best.has_value(); }
  /// The best program's schedule. Throws loom::user_error `[loom.search.E850]` when nothing
  /// was found.
  const sched::State& best_state() const;
  /// The best program, compiled. Throws `[loom.search.E850]` when nothing was found.
  Kernel kernel(const BuildOptions& options = {}) const;
  /// The best program as it was measured when TuneOptions::constant_inputs named a weight whose
  /// layout its loop nest can be rewritten for: the pack kernel and the kernel reading the
  /// packed weight (cpu.hpp, build_with_packed_input; the first such input). Nothing when no
  /// input was packed; kernel() is then the measured program.
  std::optional<PackedKernel> packed_kernel(const BuildOptions& options = {}) const;
  /// The best program's lowered loop nest, printed.
  std::string best_schedule() const;
  double best_seconds() const { return report_.best_cost; }
  double best_gflops() const { return report_.best_gflops(); }
  const search::TuneReport& report() const { return report_; }
  const Task& task() const { return task_; }

 private:
  Task task_;
  search::TuneReport report_;
  std::vector<std::string> constant_inputs_;
};

/// Tunes `task` on this machine's CPU (see search/tuner.hpp for the loop and the options). Its
/// first rounds are the shipped cost model's picks (TuneOptions::warm_start).
TuneResult tune(const Task& task, const TuneOptions& options = {});

namespace detail {
/// `options` as tune and tune_tasks run them: TuneOptions::warm_start carried out (the shipped
/// model as `pretrained` where none is given and the learned model is used).
search::TuneOptions with_warm_start(const search::TuneOptions& options);
/// `options` as tune_tasks runs them on `tasks`, checked: every task's target is the CPU
/// (E852 otherwise) and warm_start is carried out. Shared with loom::mpi::tune_tasks.
search::TaskSchedulerOptions prepared_for_cpu(const std::vector<search::WeightedTask>& tasks,
                                              const search::TaskSchedulerOptions& options);
}  // namespace detail

using search::TaskSchedulerOptions;
using search::WeightedTask;

/// Tunes the tasks of a network together on this machine's CPU, a round of programs at a time
/// to the task whose next round should cut Σ weight × best cost most (Ansor's gradient-based
/// task scheduler; search/task_scheduler.hpp). Every task's measurements go to
/// `options.tune.records`, so `tuned_kernel(task, records)` then returns each task's kernel.
///
/// ```cpp
/// std::vector<WeightedTask> net = {{Task(conv1), 3}, {Task(conv2), 4}, {Task(dense), 1}};
/// TaskSchedulerOptions opts; opts.trials = 2000; opts.tune.records = "net.jsonl";
/// search::TaskSchedulerReport r = tune_tasks(net, opts);
/// ```
search::TaskSchedulerReport tune_tasks(const std::vector<WeightedTask>& tasks,
                                       const TaskSchedulerOptions& options);

/// The fastest correct record of the task's workload and target in the log, replayed on the
/// task's DAG; nothing when the log has none (a missing file has none). Records measured on this
/// CPU win over faster ones measured on another (with a one-line warning on stderr when only
/// those exist), then records of the current thread count (runtime::num_threads()) over faster
/// ones of another count: the best schedule for 2 threads is rarely the best for 1.
std::optional<sched::State> best_recorded_schedule(const Task& task, const std::string& records);

/// Builds the best recorded program without searching (Ansor's ApplyHistoryBest). Throws
/// loom::user_error `[loom.search.E851]` when the log has no correct record of this workload.
Kernel build_best(const Task& task, const std::string& records, const BuildOptions& options = {});

/// The drop-in call for applications: the best recorded program of `task` in `records`,
/// compiled once per process and then returned from a cache (safe to call from many threads).
/// When the log has no record of this workload and target but has records of the same
/// computation at other extents (a batch size or sequence length nobody tuned), the best
/// program of the nearest one, adapted (search::transferred_state), with a one-line note on
/// stderr; when it has neither, the pretrained model's pick (compile_from_model), with a note;
/// when that cannot be had either, the default schedule, with a one-line warning.
Kernel tuned_kernel(const Task& task, const std::string& records);

/// How a kernel built from a log got its schedule (search/records.hpp).
using ScheduleSource = search::ScheduleSource;

/// Settings of compile_from_model.
struct ModelCompileOptions {
  /// The model that ranks programs; null: the one shipped with loom (cost::pretrained_cost_model).
  std::shared_ptr<const cost::CostModel> model;
  /// The search (population, generations, how many of the model's best to keep, seed).
  search::ModelSearchOptions search = search::model_compile_search();
  /// Build the model's `time_top` best programs and the default schedule (on the compile
  /// threads), check them, time each for a few milliseconds in this process and keep the
  /// fastest: the shipped model alone sometimes ranks first a program several times slower than
  /// the default schedule. 0: build the model's best, untimed.
  int time_top = 5;
  /// Instead, measure the model's `measure_top` best programs as tuning does (each in a forked
  /// child, a few seconds in all) and keep the fastest that passes the check.
  int measure_top = 0;
  /// Output elements checked against the reference interpreter (spot_check, loom/cpu.hpp) on
  /// seeded random inputs before a kernel is kept; a program that fails to build or differs is
  /// dropped. 0: no check.
  int check_points = 64;
  /// Tolerances of that check (as MeasureOptions').
  double rtol = 1e-3;
  double atol = 1e-4;
  BuildOptions build;
};

/// What compile_from_model returns: the kernel, its schedule and where the time went.
struct ModelCompiled {
  Kernel kernel;
  sched::State state;
  int rank = 0;  ///< of the kept program among the model's picks (0: its best; −1: the default)
  double search_seconds = 0;
  double build_seconds = 0;    ///< builds and checks (wall)
  double measure_seconds = 0;  ///< timing (time_top) or measuring (measure_top)
};

/// A kernel for `task` without tuning: the programs the cost model ranks best (search::
/// best_predicted: sketches, sampling, evolution, nothing measured), built and checked against
/// the interpreter at `check_points` outputs, the fastest of the first `time_top` and the
/// default schedule kept. 0.3-0.7 s on most benchmark workloads, more where a candidate is slow
/// to build (benchmarks/README.md, "Kernels from the cost model alone"). tuned_kernel uses it for
/// a computation its log has never seen.
/// Throws loom::user_error `[loom.search.E862]` when there is no model (options.model null and
/// the pretrained one cannot be read), `[loom.search.E863]` when no candidate builds and passes
/// the check, `[loom.search.E864]` for options out of range, `[loom.search.E852]` for a GPU task.
ModelCompiled compile_from_model(const Task& task, const ModelCompileOptions& options = {});

/// The kernel tuned_kernel builds, without its cache and without a line on stderr, and where its
/// schedule came from.
std::pair<Kernel, ScheduleSource> kernel_from_records(const Task& task, const std::string& records);

/// `count` sizes spread over [lo, hi] to tune an operator whose extent varies at run time: the
/// two ends and geometric steps between them (1, 8, 64, 512 for [1, 512] and 4), rounded and
/// without repeats. Throws loom::user_error `[loom.search.E860]` unless 1 <= lo <= hi and
/// count >= 1.
std::vector<int64_t> representative_sizes(int64_t lo, int64_t hi, int count);

/// An operator whose extent varies at run time (a batch, a sequence length): `make(n)` is the
/// computation at size `n`, every size of one structure (ComputeDAG::structure_key). Tune a few
/// sizes into one log (tune_dynamic), ship the log, and call `kernel(n)`: each size is compiled
/// on first use from its own record, else from the nearest tuned size's schedule adapted to it,
/// else with the default schedule, then cached. Thread-safe: threads that ask for one size at
/// once wait for one compilation.
///
/// ```cpp
/// DynamicKernel ffn([](int64_t m) { return Task(dense_layer(m)); }, "ffn.jsonl");
/// tune_dynamic(ffn, representative_sizes(1, 384, 4), opts);  // once, offline
/// ffn.kernel(batch).run(x, w, b, y);                          // at run time, any batch
/// ```
class DynamicKernel {
 public:
  DynamicKernel(std::function<Task(int64_t)> make, std::string records);
  ~DynamicKernel();
  DynamicKernel(const DynamicKernel&) = delete;
  DynamicKernel& operator=(const DynamicKernel&) = delete;

  /// The kernel at size `n` (compiled once). Throws what `make` and compiling throw; a failure
  /// is not cached.
  Kernel kernel(int64_t n) const;
  /// Where the kernel at size `n` got its schedule (compiling it if needed).
  ScheduleSource source(int64_t n) const;
  /// The computation at size `n`.
  Task task(int64_t n) const { return make_(n); }
  const std::string& records() const { return records_; }
  /// The sizes compiled so far, ascending.
  std::vector<int64_t> compiled_sizes() const;

 private:
  struct Cache;
  std::function<Task(int64_t)> make_;
  std::string records_;
  std::unique_ptr<Cache> cache_;
};

/// Tunes `op` at `sizes` together (tune_tasks, every size of weight 1) into `op.records()`;
/// `options.tune.records` is set to it. Throws loom::user_error `[loom.search.E861]` for no
/// sizes.
search::TaskSchedulerReport tune_dynamic(const DynamicKernel& op, const std::vector<int64_t>& sizes,
                                         TaskSchedulerOptions options);

LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/impl/tune.ipp"
#endif

#endif  // LOOM_TUNE_HPP
