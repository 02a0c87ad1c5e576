// Bodies of loom/cuda.hpp.
#include "loom/cuda.hpp"

#include "loom/cost/pretrained.hpp"
#include "loom/search/records.hpp"

#include <algorithm>

LOOM_BEGIN_NAMESPACE
namespace cuda {

LOOM_DECL Target device_target(int device) {
  const DeviceInfo info = device_info(device);
  Target target = Target::cuda(nvrtc_arch_for(info.compute_major, info.compute_minor));
  target.max_threads_per_block = info.max_threads_per_block;
  // Kernels past the 48 KiB of static shared memory take dynamic shared memory, which a kernel
  // may be allowed up to the opt-in limit (227 KiB on an H100).
  target.max_shared_memory_per_block =
      std::max(info.max_shared_memory_per_block, info.max_shared_memory_per_block_optin);
  target.warp_size = info.warp_size;
  return target;
}

LOOM_DECL CompiledProgram build(const Task& task, const sched::State& state,
                                const std::vector<std::string>& nvrtc_options) {
  LOOM_USER_CHECK(task.target.is_cuda(), "loom.cuda.E923")
      << "cuda::build: the task targets " << task.target.to_string()
      << "; make it with Target::cuda(\"sm_90\") (or loom::build for the CPU)";
  return compile_program(lower::lower_gpu(state, task.target, "loom_kernel"), task.target.arch,
                         nvrtc_options);
}

LOOM_DECL CompiledProgram build(const Task& task) {
  return build(task, sched::default_schedule(task.dag, task.target));
}

LOOM_DECL const sched::State& TuneResult::best_state() const {
  return report_.best_or_throw(task_.workload_key());
}

LOOM_DECL TuneResult tune(const Task& task, const search::TuneOptions& options,
                          const GpuMeasurerOptions& gpu) {
  LOOM_USER_CHECK(task.target.is_cuda(), "loom.cuda.E923")
      << "cuda::tune: the task targets " << task.target.to_string()
      << "; make it with Target::cuda(\"sm_90\") (or use loom::tune for the CPU)";
  GpuMeasurer measurer(options.measure, gpu);
  return TuneResult(task, search::tune_with(task, tuning_options(options), measurer));
}

LOOM_DECL search::TuneOptions tuning_options(const search::TuneOptions& options) {
  search::TuneOptions o = options;
  if (o.warm_start && !o.pretrained && o.model == search::ModelKind::gbdt)
    o.pretrained = cost::pretrained_gpu_cost_model();
  o.gbdt.warmup_samples = std::min(o.gbdt.warmup_samples, o.measures_per_round);
  return o;
}

LOOM_DECL std::optional<sched::State> best_recorded_schedule(const Task& task,
                                                             const std::string& records) {
  std::string why;
  const std::string device = device_available(&why) ? device_info(0).name : "";
  return search::best_recorded_state(task, records, 0, device);
}

}  // namespace cuda
LOOM_END_NAMESPACE
