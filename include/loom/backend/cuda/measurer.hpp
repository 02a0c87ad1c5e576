/// \file
/// The CUDA backend's measurer (layer backend/cuda, namespace loom::cuda): builds the programs
/// the search picks with NVRTC, checks them against a reference and times them on the GPU, so
/// that `search::tune_with` tunes for an NVIDIA GPU as it does for the CPU.
///
/// One batch (`measure_each`):
/// - **Build, on the host, in parallel**, each program in a forked process of its own
///   (`build_parallelism` at once): lower_gpu (instantiation errors: the program breaks a GPU
///   rule), the CUDA C printer and NVRTC with its optimizer, straight to machine code for the
///   target's architecture (a CUBIN: the worker loads it without the driver's JIT; compile
///   errors carry NVRTC's log). NVRTC cannot be interrupted nor its memory bounded in-process,
///   so a build process may allocate `memory_limit_mb` (past it the build fails) and is killed
///   after `build_timeout_s` (compile_timeout); one that dies fails its program alone (compile).
///   The task's reference program (below) is built in the measurer's process.
/// - **Run, on the device, one program at a time, in a worker process.** A kernel that faults
///   (illegal address, trap) leaves the CUDA context of its process unusable, and a kernel that
///   hangs cannot be stopped from the host: so the GPU is used by a separate process that the
///   measurer starts, and kills and replaces when a program crashed it or ran longer than
///   `run_timeout_s`. The measurer's own process never initialises the CUDA driver for it.
///   The worker is this same executable started again (`/proc/self/exe` with
///   `LOOM_CUDA_MEASURE_WORKER` in its environment): a static initialiser of this file takes
///   over before `main` and serves the measurer over a socket. A program that is not a loom
///   executable at /proc/self/exe (an interpreter embedding loom) cannot host the worker: the
///   first measurement then fails with `[loom.cuda.E924]` after `worker_start_timeout_s`.
/// - **Check, then time.** Per task, the worker fills the inputs once with random values
///   (floats in [0.5, 1.5), integers in [1, 8], as the CPU measurer does) and keeps a reference
///   output: the DAG interpreter's, computed on the host and sent over, when the DAG has at most
///   `interpreter_flop_limit` FLOPs; otherwise the task's default GPU schedule's
///   (sched/default_schedule.hpp: one thread per output element), run on the device. Each
///   program runs once on outputs poisoned with NaN (integers: 0x5A bytes) and is compared
///   with the reference (wrong_answer, naming the worst element); then it is timed with CUDA
///   events: one run after the checked one, `warmup` runs, then `repeat` costs of `number`
///   back-to-back runs each, `number` raised until a repeat lasts `min_repeat_ms`. A program
///   whose run after the check was more than `slow_program_factor` times slower than the task's
///   best so far (or than the reference program, before any) is not timed further: that run is
///   its cost; so is the checked run itself when it already was that slow and lasted 50 ms or
///   more (long enough that loading the module, which it also pays, does not decide). A
///   program whose first launch has not finished after `slow_run_kill_factor` times that best
///   (at least `slow_run_kill_min_s`) is killed with its worker, as one over `run_timeout_s` is.
///
/// Errors (search::MeasureError): lowering throws → instantiation; printing or NVRTC throws, or
/// the driver rejects the PTX → compile; a launch is refused (too many registers for the
/// block), the kernel faults, or the worker dies → runtime; timeouts → compile_timeout /
/// run_timeout; a result that differs → wrong_answer; no reference for the task → unknown.
///
/// POSIX only (posix_spawn, socketpair, poll). `measure` must not be called concurrently on one
/// measurer.
#ifndef LOOM_BACKEND_CUDA_MEASURER_HPP
#define LOOM_BACKEND_CUDA_MEASURER_HPP

#include "loom/backend/cuda/program.hpp"
#include "loom/search/measure.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cuda {

/// What the GPU measurer needs beyond search::MeasureOptions.
struct GpuMeasurerOptions {
  /// The device the worker measures on.
  int device = 0;
  /// Seed of the random inputs (one stream per input).
  uint64_t seed = 0x6c6f6f6d;
  /// NVRTC options added to every build (e.g. "--use_fast_math"; "-G" would time debug code).
  std::vector<std::string> nvrtc_options;
  /// What the builders hand the worker: machine code (no JIT in the worker) or PTX (what a
  /// driver that cannot load CUBINs, like the tests' fake one, needs).
  ImageKind image = ImageKind::cubin;
  /// Longest time the reference may take (interpreter on the host, or the default GPU schedule's
  /// build and run).
  double reference_timeout_s = 120;
  /// Longest time the worker process may take to start and find the device.
  double worker_start_timeout_s = 60;
};

/// Counters over the measurer's lifetime.
struct GpuMeasurerStats {
  size_t batches = 0;
  size_t programs = 0;
  /// Worker processes started (the first, and one after each crash or timeout).
  size_t worker_starts = 0;
  double wall_seconds = 0;
  /// Summed NVRTC build seconds (builds overlap) and the worker's check-and-time seconds.
  double compile_seconds = 0;
  double run_seconds = 0;
  double reference_seconds = 0;
};

/// search::Measurer for an NVIDIA GPU with crash isolation (see the file comment).
class GpuMeasurer : public search::StreamingMeasurer {
 public:
  /// Throws loom::user_error `[loom.cuda.E922]` for options out of range
  /// (search::measure_options_problems, timeouts of GpuMeasurerOptions that are not positive,
  /// a negative device).
  explicit GpuMeasurer(search::MeasureOptions options = {}, GpuMeasurerOptions gpu = {});
  ~GpuMeasurer() override;
  GpuMeasurer(const GpuMeasurer&) = delete;
  GpuMeasurer& operator=(const GpuMeasurer&) = delete;

  /// Tells each result as soon as it is final (build failures first, then each run).
  /// Throws loom::user_error `[loom.cuda.E923]` for a task whose target is not CUDA.
  std::vector<search::MeasureResult> measure_each(const Task& task,
                                                  const std::vector<sched::State>& states,
                                                  const ResultCallback& on_result) override;
  std::string name() const override { return "local-cuda"; }
  /// The GPU's name as the driver gives it ("NVIDIA H200"), recorded with each measurement:
  /// a resumed run re-measures programs timed on another GPU. "" without a device.
  std::string device() const override;

  const search::MeasureOptions& options() const { return options_; }
  const GpuMeasurerOptions& gpu_options() const { return gpu_; }
  const GpuMeasurerStats& stats() const { return stats_; }

  /// The worker process and the per-task data (defined in the .ipp).
  struct Worker;
  struct TaskData;

 private:
  search::MeasureOptions options_;
  GpuMeasurerOptions gpu_;
  GpuMeasurerStats stats_;
  std::unique_ptr<Worker> worker_;
  std::map<std::string, std::shared_ptr<TaskData>> tasks_;
};

}  // namespace cuda
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/backend/cuda/impl/measurer.ipp"
#endif

#endif  // LOOM_BACKEND_CUDA_MEASURER_HPP
