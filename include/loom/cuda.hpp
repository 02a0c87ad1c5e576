/// \file
/// The NVIDIA GPU umbrella header: everything in loom.hpp plus the CUDA backend (CUDA C
/// printer, NVRTC, the driver, the GPU measurer) and the GPU calls of the tuner. Link the CMake
/// target `loom::cuda`; nothing from CUDA is needed to build (NVRTC and the driver are loaded at
/// run time).
///
/// ```cpp
/// Task task(dag, Target::cuda("sm_90"));
/// TuneOptions opts; opts.trials = 1000; opts.records = "gemm.jsonl";
/// cuda::TuneResult r = cuda::tune(task, opts);   // measured on the GPU, see measurer.hpp
/// std::cout << r.source();                       // the best program as CUDA C
/// cuda::Program p = r.program();                 // loaded; p.launch({a, b, c})
/// ```
///
/// The tuner runs candidates in a worker process (backend/cuda/measurer.hpp): this process may
/// use the GPU itself before, during and after tuning.
#ifndef LOOM_CUDA_HPP
#define LOOM_CUDA_HPP

#include "loom/loom.hpp"

#include "loom/backend/cuda/codegen.hpp"
#include "loom/backend/cuda/driver.hpp"
#include "loom/backend/cuda/measurer.hpp"
#include "loom/backend/cuda/nvrtc.hpp"
#include "loom/backend/cuda/program.hpp"
#include "loom/lower/gpu.hpp"
#include "loom/sched/default_schedule.hpp"
#include "loom/search/evolution.hpp"
#include "loom/search/task.hpp"
#include "loom/search/tuner.hpp"

#include <memory>
#include <optional>
#include <string>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace cuda {

/// The target of device `device`: the newest architecture NVRTC compiles for at or below the
/// device's (nvrtc_arch_for), with the device's thread limit and its opt-in shared-memory
/// limit (227 KiB on an H100: kernels past 48 KiB take dynamic shared memory). Throws what
/// device_info and nvrtc_arch_for throw (no device, no NVRTC).
Target device_target(int device = 0);

/// Lowers `state` for the task's CUDA target and compiles it with NVRTC (no GPU needed).
/// Throws loom::user_error `[loom.cuda.E923]` when the task's target is not CUDA, and what
/// lower_gpu, the printer and NVRTC throw.
CompiledProgram build(const Task& task, const sched::State& state,
                      const std::vector<std::string>& nvrtc_options = {});
/// build() with the default GPU schedule (one thread per output element: correct, slow).
CompiledProgram build(const Task& task);

/// The outcome of cuda::tune.
class TuneResult {
 public:
  TuneResult(Task task, search::TuneReport report)
      : task_(std::move(task)), report_(std::move(report)) {}
  bool found() const { return report_.best.has_value(); }
  /// The best program's schedule. Throws `[loom.search.E850]` when nothing was found.
  const sched::State& best_state() const;
  /// The best program, compiled (CUDA C source, PTX, launch plan).
  CompiledProgram compiled() const { return build(task_, best_state()); }
  /// The best program as CUDA C.
  std::string source() const { return compiled().source; }
  /// The best program loaded on the current device, ready to launch.
  Program program() const {
    CompiledProgram c = compiled();
    return Program(c.image, std::move(c.plan));
  }
  double best_seconds() const { return report_.best_cost; }
  double best_gflops() const { return report_.best_gflops(); }
  const search::TuneReport& report() const { return report_; }
  const Task& task() const { return task_; }

 private:
  Task task_;
  search::TuneReport report_;
};

/// Tunes `task` (a CUDA target) on this machine's GPU: search/tuner.hpp's loop with the GPU
/// measurer, under tuning_options(options). Throws `[loom.cuda.E923]` for a task that is not
/// CUDA and `[loom.cuda.E924]` when the measurer's worker cannot start (no GPU, no driver).
TuneResult tune(const Task& task, const search::TuneOptions& options = {},
                const GpuMeasurerOptions& gpu = {});

/// The options tune() runs with: `options`, with
///  - the pretrained GPU model (cost::pretrained_gpu_cost_model) as `pretrained` where none is
///    given and `warm_start` is set, as loom::tune does with the CPU's;
///  - the learned model training from the first measured round (GbdtCostModelOptions::
///    warmup_samples at most measures_per_round).
///
/// Why: Ansor waits for 100 programs before it trains, and the first rounds were random before
/// loom had a GPU model. On a task with tensor-core sketches, half of those rounds went to SIMT
/// programs, 100 times slower: 69 of 128 trials of an H200's bf16 GEMM 4096³, 23 of them
/// killed at the timeout.
///
/// Replayed on the H200's logs (test_gpu_model_warmup.cpp), the next round's 64 picks hold
/// tensor-core programs as follows:
///
/// | model | tensor-core picks of 64 |
/// |---|---|
/// | trained on a run's first 64 programs (bf16 GEMM, BERT FFN1, ResNet conv, TF32 GEMM) | 62–63 |
/// | untrained | 23–36 |
/// | the pretrained GPU model alone, first round: fp16 GEMM, 512-channel ResNet conv (unseen) | 63
/// | | random, the same first round | 33, 43 |
search::TuneOptions tuning_options(const search::TuneOptions& options);

/// Settings of compile_from_model.
struct ModelCompileOptions {
  /// The model that ranks programs; null: the GPU one shipped with loom
  /// (cost::pretrained_gpu_cost_model).
  std::shared_ptr<const cost::CostModel> model;
  /// The search: sketches, sampling and evolution, nothing measured.
  search::ModelSearchOptions search = search::model_compile_search();
  /// How many of the model's best programs are measured on the GPU, with the default schedule
  /// beside them: each is checked against the reference and timed as tuning does (GpuMeasurer),
  /// and the fastest correct one is kept. The model alone sometimes ranks first a program
  /// slower than others it ranks lower. At least 1.
  int measure_top = 8;
  search::MeasureOptions measure;
  GpuMeasurerOptions gpu;
};

/// What compile_from_model returns.
struct ModelCompiled {
  CompiledProgram program;
  sched::State state;
  int rank = 0;  ///< of the kept program among the model's picks (0: its best; −1: the default)
  double seconds = 0;  ///< its measured time
  double search_seconds = 0;
  double measure_seconds = 0;  ///< building, checking and timing the candidates (wall)
};

/// A kernel for a CUDA task nobody tuned, in seconds rather than a tuning run's minutes: the
/// programs the cost model ranks best (search::best_predicted), measured on this machine's GPU
/// with the default schedule, the fastest correct one kept. Needs a GPU: without one the
/// measurer's worker cannot start (`[loom.cuda.E924]`).
/// Throws loom::user_error `[loom.cuda.E923]` for a task that is not CUDA, `[loom.cuda.E926]`
/// when there is no model (none given, and the pretrained one cannot be read),
/// `[loom.cuda.E927]` for options out of range and `[loom.cuda.E928]` when no candidate, the
/// default schedule included, passes the check (it names each one's failure).
ModelCompiled compile_from_model(const Task& task, const ModelCompileOptions& options = {});

/// The fastest correct record of the task's workload and target in the log, replayed; nothing
/// when the log has none. Records measured on this machine's GPU (device 0, by name) come
/// first: a time measured on an H100 does not rank programs for an H200.
std::optional<sched::State> best_recorded_schedule(const Task& task, const std::string& records);

/// A program for `task` from the log `records`, for an application that wants one call: the
/// log's best record of this workload (best_recorded_schedule); without one, compile_from_model's
/// kernel, measured on this GPU; when that cannot be had (no GPU, no model, no candidate passed:
/// a warning on stderr says why), the default schedule. The second member says which. Unlike
/// loom::kernel_from_records (CPU), no schedule is carried over from another shape
/// (ScheduleSource::Transferred): an adapted GPU program would run unchecked.
std::pair<CompiledProgram, search::ScheduleSource> program_from_records(const Task& task,
                                                                        const std::string& records);

}  // namespace cuda
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/impl/cuda.ipp"
#endif

#endif  // LOOM_CUDA_HPP
