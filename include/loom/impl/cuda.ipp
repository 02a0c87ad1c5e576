// Bodies of loom/cuda.hpp.
#include "loom/cuda.hpp"

#include "loom/cost/pretrained.hpp"
#include "loom/detail/clock.hpp"
#include "loom/search/records.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>

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

LOOM_DECL ModelCompiled compile_from_model(const Task& task, const ModelCompileOptions& options) {
  LOOM_USER_CHECK(task.target.is_cuda(), "loom.cuda.E923")
      << "cuda::compile_from_model: the task targets " << task.target.to_string()
      << "; make it with Target::cuda(\"sm_90\") (or use loom::compile_from_model for the CPU)";
  LOOM_USER_CHECK(options.measure_top >= 1, "loom.cuda.E927")
      << "cuda::ModelCompileOptions::measure_top is " << options.measure_top
      << "; it must be at least 1 (the model's best is measured before it is kept)";
  std::shared_ptr<const cost::CostModel> model = options.model;
  if (!model) model = cost::pretrained_gpu_cost_model();
  LOOM_USER_CHECK(model != nullptr, "loom.cuda.E926")
      << "cuda::compile_from_model: no cost model: none was given and the pretrained GPU model ("
      << cost::pretrained_gpu_model_path() << ") could not be read (see the warning above)";
  auto t0 = std::chrono::steady_clock::now();
  search::ModelSearchOptions search = options.search;
  search.top = std::max(search.top, options.measure_top);
  std::vector<sched::State> candidates = search::best_predicted(task, *model, search);
  if (candidates.size() > static_cast<size_t>(options.measure_top))
    candidates.erase(candidates.begin() + options.measure_top, candidates.end());
  const size_t picks = candidates.size();
  candidates.push_back(sched::default_schedule(task.dag, task.target));  // rank −1
  const double search_seconds = ::loom::detail::seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  GpuMeasurer measurer(options.measure, options.gpu);
  const std::vector<search::MeasureResult> results = measurer.measure(task, candidates);
  const double measure_seconds = ::loom::detail::seconds_since(t0);
  size_t best = candidates.size();
  std::string failures;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const search::MeasureResult& r = results[i];
    if (!r.ok()) {
      failures += std::string("\n  ") + (i < picks ? "pick " + std::to_string(i) : "default") +
                  ": " + search::measure_error_name(r.error) + ": " + r.error_message;
      continue;
    }
    if (best == candidates.size() || r.mean_cost() < results[best].mean_cost()) best = i;
  }
  LOOM_USER_CHECK(best < candidates.size(), "loom.cuda.E928")
      << "cuda::compile_from_model: none of the model's " << picks
      << " picks nor the default schedule passed the check on the GPU:" << failures;
  return ModelCompiled{build(task, candidates[best], options.gpu.nvrtc_options),
                       candidates[best],
                       best < picks ? static_cast<int>(best) : -1,
                       results[best].mean_cost(),
                       search_seconds,
                       measure_seconds};
}

LOOM_DECL std::optional<sched::State> best_recorded_schedule(const Task& task,
                                                             const std::string& records) {
  std::string why;
  const std::string device = device_available(&why) ? device_info(0).name : "";
  return search::best_recorded_state(task, records, 0, device);
}

LOOM_DECL std::pair<CompiledProgram, search::ScheduleSource> program_from_records(
    const Task& task, const std::string& records) {
  if (std::optional<sched::State> best = best_recorded_schedule(task, records))
    return {build(task, *best), search::ScheduleSource::Recorded};
  if (cost::pretrained_gpu_cost_model()) {
    try {
      return {compile_from_model(task).program, search::ScheduleSource::Predicted};
    } catch (const user_error& e) {
      std::cerr << "loom: warning: " << e.what() << "; using the default schedule\n";
    }
  }
  return {build(task), search::ScheduleSource::Default};
}

}  // namespace cuda
LOOM_END_NAMESPACE
