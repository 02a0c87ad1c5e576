/// \file
/// The measurement interface of the search (layer search/): what the tuner asks a backend to do
/// with the programs it picked, and what comes back. The search never includes a backend; a
/// backend implements `Measurer` (the CPU one is `cpu_jit::LocalMeasurer`,
/// backend/llvm/measurer.hpp; the GPU one `cuda::GpuMeasurer`, backend/cuda/measurer.hpp; both
/// measure in child processes, backend/child_process.hpp).
///
/// A measurement builds a program (lowering and code generation), checks its result against a
/// trusted reference, and times it. Everything that can go wrong is a result, never an exception
/// that ends the tuning run: an illegal schedule, a compiler error, a crash, a hang or a wrong
/// answer is a `MeasureResult` with its `MeasureError` and a message, and the search goes on.
///
/// Error numbers follow Ansor's `MeasureErrorNo` (ansor.md §2.4), so logs read the same.
#ifndef LOOM_SEARCH_MEASURE_HPP
#define LOOM_SEARCH_MEASURE_HPP

#include "loom/detail/clock.hpp"
#include "loom/sched/state.hpp"
#include "loom/search/task.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// Why a measurement failed (Ansor's numbers).
enum class MeasureError : int {
  none = 0,
  instantiation = 1,    ///< the schedule could not be replayed or lowered
  compile = 2,          ///< code generation failed or the compiler process died
  runtime = 4,          ///< the program crashed (signal) or returned an error while running
  wrong_answer = 5,     ///< the result differs from the reference
  compile_timeout = 6,  ///< building took longer than `build_timeout_s`
  run_timeout = 7,      ///< running took longer than `run_timeout_s`
  unknown = 8,
};

/// "none", "instantiation", "compile", "runtime", "wrong_answer", "compile_timeout",
/// "run_timeout" or "unknown".
inline const char* measure_error_name(MeasureError e) {
  switch (e) {
    case MeasureError::none: return "none";
    case MeasureError::instantiation: return "instantiation";
    case MeasureError::compile: return "compile";
    case MeasureError::runtime: return "runtime";
    case MeasureError::wrong_answer: return "wrong_answer";
    case MeasureError::compile_timeout: return "compile_timeout";
    case MeasureError::run_timeout: return "run_timeout";
    case MeasureError::unknown: return "unknown";
  }
  return "unknown";
}

/// What a failed program costs in logs and model updates (Ansor's MAX_FLOAT).
inline constexpr double kFailedCost = 1e10;

/// One measured program.
struct MeasureResult {
  /// Seconds per run, one entry per repeat (empty when the measurement failed).
  std::vector<double> costs;
  MeasureError error = MeasureError::none;
  /// What went wrong, for logs: the compiler's message, the signal, the largest difference.
  std::string error_message;
  /// Wall seconds spent building (lowering + code generation) and running (checking + timing).
  double compile_seconds = 0;
  double run_seconds = 0;

  bool ok() const { return error == MeasureError::none && !costs.empty(); }
  /// The mean of `costs`, or kFailedCost when the measurement failed.
  double mean_cost() const {
    if (!ok()) return kFailedCost;
    double s = 0;
    for (double c : costs) s += c;
    return s / static_cast<double>(costs.size());
  }
};

/// How programs are measured; the defaults favour short tuning runs (see each field).
struct MeasureOptions {
  /// Runs averaged into one cost. Raised until one repeat lasts at least `min_repeat_ms`
  /// (Ansor: number 3, min_repeat_ms 100).
  int number = 1;
  /// Costs recorded per program.
  int repeat = 3;
  /// The shortest time one repeat may take; `number` grows until it does. loom's default (20 ms)
  /// is lower than Ansor's 100 ms: a trial costs less, and the median of the repeats absorbs
  /// most of the noise that longer repeats would average out.
  double min_repeat_ms = 20;
  /// Untimed runs before the first repeat (the first run also pays page faults). With the
  /// default 1 the checked first run is that warm-up; when it lasts `min_repeat_ms` or more
  /// (without `flush_cache`) it is also the first repeat: its one-off costs (the measuring
  /// process starts its worker threads, pages fault in) are far below a millisecond.
  int warmup = 1;
  /// Evict the caches between runs by writing a buffer larger than the last-level cache; then
  /// `number` stays 1 and `min_repeat_ms` is ignored (Ansor's enable_cpu_cache_flush).
  bool flush_cache = false;
  /// Evict the task's constant inputs (TuneOptions::constant_inputs, packed or not) from the
  /// caches before each timed call, leaving the other inputs where the previous call left them
  /// (a repeat is then the mean of at least `number` such calls lasting `min_repeat_ms` in all;
  /// a task without constants is timed as usual). This is how a layer of a network meets its
  /// data: the layer before has just written its input, while its weights were pushed out by
  /// everyone else's (ResNet-50 reads 100 MB of weights per image through a 32 MB L3). Programs
  /// tuned warm read their weights in orders that only a warm cache forgives: a BERT layer's
  /// Q/K/V products tuned so ran at 320 µs alone and 0.61 ms inside the network, tuned cold at
  /// 0.38 ms inside it.
  /// Unset: cold when loom::tune tunes a network, warm otherwise. CPU measurer only; loom
  /// addition. `flush_cache` wins when both are set.
  std::optional<bool> cold_constants;
  /// A program whose first (checked) run is more than this many times slower than the best
  /// program measured for the task so far is not timed further: that one run is its cost, so a
  /// hopeless program costs one run instead of warm-up and repeats (0: time every program
  /// fully). loom addition; it cuts the run time of a tuning round on large workloads, where
  /// random programs are often 10–100× slower than the best.
  double slow_program_factor = 10;
  /// The same for a first run of `min_repeat_ms` or more, whose time the one-off costs of a
  /// first run cannot inflate: such a program is timed further only within this factor of the
  /// best (at most slow_program_factor; ignored when that is 0). CPU measurer only. With the
  /// first run counted as a repeat (`warmup`), 200 trials of GEMM 1024³ on 2 threads took
  /// 112 s instead of 141 s (run time 91 s instead of 123 s), with as good a best.
  double slow_long_program_factor = 3;
  /// A program whose first timed repeat is more than this many times the best cost measured for
  /// the task so far gets no further repeats: a repeat is enough to say it will not be the best,
  /// which is what the repeats are for (0: every timed program gets `repeat` repeats). Above the
  /// machine's run-to-run noise (5-30 %), so a contender is not cut by a slow spell. CPU measurer
  /// only; loom addition.
  double contender_factor = 1.5;
  /// Limits per program; a program that exceeds one is killed and recorded as a timeout.
  double build_timeout_s = 15;
  double run_timeout_s = 10;
  /// A build that lasts more than this many times the median build of the task's programs
  /// built so far (at least 8 of them), and at least `slow_build_kill_min_s`, is killed and
  /// recorded as `compile_timeout` (0: only build_timeout_s limits builds). CPU measurer only;
  /// loom addition. Build times are heavy-tailed: a program whose loops LLVM unrolls into huge
  /// blocks spends seconds in the machine scheduler or the SLP vectorizer. Of 236 programs of a
  /// GEMM 1024³ tuning run built at O3, the median took 0.11 s and three took 7.6 to 16 s, a
  /// third of all build time, and a batch waits for its slowest build. Such programs are
  /// hopeless: the 26 killed in one 200-program run of GEMM 1024³ ran at 1.3–9.7 GFLOP/s (the
  /// best at 200) and took 2–217 s each to build when let finish.
  double slow_build_kill_factor = 20;
  double slow_build_kill_min_s = 2;
  /// A program whose first (checked) run has not finished after this many times the best
  /// cost measured for the task so far, and at least `slow_run_kill_min_s`, is killed and
  /// recorded as `run_timeout`: slow_program_factor would make that one run its cost anyway,
  /// and its exact time teaches the search little more than a failure does (0: only
  /// run_timeout_s limits runs). loom addition; the GPU measurer counts from the run request to
  /// the end of the program's first launch, and takes its reference program's time as the
  /// task's best before any program's (an H200 tuning the bf16 GEMM 4096³ for 128 trials lost
  /// 50 of 111 s to 23 SIMT programs killed at run_timeout_s = 2 s). Together with
  /// slow_build_kill_factor, 200 trials of GEMM 1024³ on 2 threads took 46–72 s instead of
  /// 81–142 s (seeds 0–2, same machine and hour), the best by median 163–217 GFLOP/s against
  /// 213–222.
  double slow_run_kill_factor = 20;
  double slow_run_kill_min_s = 0.1;
  /// MiB a measuring process may allocate beyond what it holds when it starts (heap and private
  /// mappings: LLVM's build, the program's intermediate buffers); past it, allocations fail, so
  /// a program whose build or buffers would take the machine's memory fails alone instead: its
  /// build as `compile` ("LLVM ERROR: out of memory"), its run as `runtime` (the kernel stops
  /// with kernel_status_out_of_memory). 0: no limit. Each of the `build_parallelism` processes
  /// gets this much. The GPU measurer limits its build processes (NVRTC) so; its runs are on the
  /// device. Linux (RLIMIT_DATA); loom addition.
  double memory_limit_mb = 4096;
  /// Programs built at once (0: the number of cores). Runs are always one at a time, so that
  /// a timed program never shares the machine with a build.
  int build_parallelism = 0;
  /// Threads the measured program may use (0: the runtime's default, LOOM_NUM_THREADS or the
  /// cores).
  int num_threads = 0;
  /// Compare every measured program's output with the reference before timing it; a program
  /// whose output differs is `wrong_answer` and is never timed. The reference is the reference
  /// interpreter on the task's real shapes when the DAG is small enough
  /// (`interpreter_flop_limit`), otherwise the task's default schedule (itself tested against
  /// the interpreter); inputs are random.
  bool check_correctness = true;
  double interpreter_flop_limit = 2e7;
  double rtol = 1e-3;
  double atol = 1e-4;
  /// For fault-injection tests only: called in the measuring process right before the program
  /// at `index` of the batch is built (`phase` 0) and run (`phase` 1).
  std::function<void(size_t index, int phase)> fault_injection_hook;
};

/// How long a program's first run may last before the measurer kills it
/// (MeasureOptions::slow_run_kill_factor), given the task's best cost so far (0 or kFailedCost:
/// none yet); 0 when only run_timeout_s limits it. The CPU and GPU measurers share it.
inline double slow_run_limit(double best_cost, const MeasureOptions& o) {
  if (o.slow_run_kill_factor <= 0 || best_cost <= 0 || best_cost >= kFailedCost) return 0;
  const double limit = std::max(o.slow_run_kill_min_s, o.slow_run_kill_factor * best_cost);
  return limit < o.run_timeout_s ? limit : 0;
}

/// Why a measurer killed a program that ran for `limit` seconds: in its first run
/// (slow_run_limit, when `limit` is below run_timeout_s) or past run_timeout_s.
inline std::string run_kill_message(double limit, double best_cost, const MeasureOptions& o) {
  if (limit < o.run_timeout_s)
    return "killed in its first run after " + ::loom::detail::format_seconds(limit) +
           " s, more than " + ::loom::detail::format_seconds(o.slow_run_kill_factor) +
           " times the best cost of the task so far, " + ::loom::detail::format_seconds(best_cost) +
           " s (slow_run_kill_factor)";
  return "killed after running for longer than " + ::loom::detail::format_seconds(o.run_timeout_s) +
         " s (run_timeout_s)";
}

/// The fields of `o` out of range, as "name value (must be ...)" joined by ", "; empty when every
/// field is in range. number and repeat must be at least 1, the timeouts positive, the others
/// at least 0. Each measurer reports this in its own error, after its own options' problems.
inline std::string measure_options_problems(const MeasureOptions& o) {
  std::string out;
  auto need = [&](bool ok, const char* name, double value, const char* rule) {
    if (ok) return;
    if (!out.empty()) out += ", ";
    char v[32];
    std::snprintf(v, sizeof v, "%g", value);
    out = out + name + " " + v + " (must be " + rule + ")";
  };
  need(o.number >= 1, "number", o.number, "≥ 1");
  need(o.repeat >= 1, "repeat", o.repeat, "≥ 1");
  need(o.warmup >= 0, "warmup", o.warmup, "≥ 0");
  need(o.min_repeat_ms >= 0, "min_repeat_ms", o.min_repeat_ms, "≥ 0");
  need(o.slow_program_factor >= 0, "slow_program_factor", o.slow_program_factor, "≥ 0");
  need(o.slow_long_program_factor >= 0, "slow_long_program_factor", o.slow_long_program_factor,
       "≥ 0");
  need(o.contender_factor >= 0, "contender_factor", o.contender_factor, "≥ 0");
  need(o.build_timeout_s > 0, "build_timeout_s", o.build_timeout_s, "> 0");
  need(o.slow_build_kill_factor >= 0, "slow_build_kill_factor", o.slow_build_kill_factor, "≥ 0");
  need(o.slow_build_kill_min_s >= 0, "slow_build_kill_min_s", o.slow_build_kill_min_s, "≥ 0");
  need(o.slow_run_kill_factor >= 0, "slow_run_kill_factor", o.slow_run_kill_factor, "≥ 0");
  need(o.slow_run_kill_min_s >= 0, "slow_run_kill_min_s", o.slow_run_kill_min_s, "≥ 0");
  need(o.run_timeout_s > 0, "run_timeout_s", o.run_timeout_s, "> 0");
  need(o.memory_limit_mb >= 0, "memory_limit_mb", o.memory_limit_mb, "≥ 0");
  need(o.build_parallelism >= 0, "build_parallelism", o.build_parallelism, "≥ 0");
  need(o.num_threads >= 0, "num_threads", o.num_threads, "≥ 0");
  need(o.rtol >= 0, "rtol", o.rtol, "≥ 0");
  need(o.atol >= 0, "atol", o.atol, "≥ 0");
  return out;
}

/// What a backend implements: measures programs of one task. Implementations must not throw
/// for a bad program (report it in its result); they may throw loom::user_error for bad options.
class Measurer {
 public:
  virtual ~Measurer() = default;
  /// One result per state, in order.
  virtual std::vector<MeasureResult> measure(const Task& task,
                                             const std::vector<sched::State>& states) = 0;

  /// Told each program's result (its index in the batch) as soon as it is final, in any order.
  using ResultCallback = std::function<void(std::size_t index, const MeasureResult& result)>;
  /// measure(), telling `on_result` every result as soon as it is known, so that the caller can
  /// keep it before the batch is over: the tuner appends each record at once, so a killed tuner
  /// loses at most the program being measured. The default measures the whole batch and then
  /// tells; a measurer that finishes programs one by one overrides it.
  virtual std::vector<MeasureResult> measure_each(const Task& task,
                                                  const std::vector<sched::State>& states,
                                                  const ResultCallback& on_result) {
    std::vector<MeasureResult> results = measure(task, states);
    if (on_result)
      for (std::size_t i = 0; i < results.size(); ++i) on_result(i, results[i]);
    return results;
  }
  /// A short name for logs ("local-cpu").
  virtual std::string name() const = 0;
  /// How many threads the programs run with, recorded with each measurement (0: unknown).
  virtual int threads() const { return 0; }
  /// The processor the programs run on, recorded with each measurement ("": unknown). Costs
  /// measured on one CPU model say little about another: a resumed run re-measures them.
  virtual std::string device() const { return ""; }
  /// Whether `task`'s programs are timed with its constant inputs evicted from the caches
  /// (MeasureOptions::cold_constants), recorded with each measurement: a cost measured cold is
  /// not comparable with one measured warm.
  virtual bool cold_constants(const Task& task) const { return static_cast<void>(task), false; }
};

/// A measurer that finishes programs one by one: it implements measure_each, and measure() is
/// measure_each without a listener.
class StreamingMeasurer : public Measurer {
 public:
  std::vector<MeasureResult> measure(const Task& task,
                                     const std::vector<sched::State>& states) final {
    return measure_each(task, states, nullptr);
  }
  std::vector<MeasureResult> measure_each(const Task& task, const std::vector<sched::State>& states,
                                          const ResultCallback& on_result) override = 0;
};

}  // namespace search
LOOM_END_NAMESPACE

#endif  // LOOM_SEARCH_MEASURE_HPP
