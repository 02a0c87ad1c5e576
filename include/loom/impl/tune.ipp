// Bodies of loom/tune.hpp.
#include "loom/tune.hpp"

#include "loom/backend/llvm/measurer.hpp"
#include "loom/runtime/parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <iostream>
#include <map>
#include <mutex>

LOOM_BEGIN_NAMESPACE

LOOM_DECL const sched::State& TuneResult::best_state() const {
  return report_.best_or_throw(task_.workload_key());
}

LOOM_DECL Kernel TuneResult::kernel(const BuildOptions& options) const {
  return build(task_, best_state(), options);
}

LOOM_DECL std::optional<PackedKernel> TuneResult::packed_kernel(const BuildOptions& options) const {
  const std::vector<std::string> packed =
      cpu_jit::LocalMeasurer::packed_inputs(best_state(), constant_inputs_);
  if (packed.empty()) return std::nullopt;
  return build_with_packed_input(task_, best_state(), packed.front(), options);
}

LOOM_DECL std::string TuneResult::best_schedule() const {
  return ir::to_string(lower::lower(best_state(), "tuned").body);
}

LOOM_DECL TuneResult tune(const Task& task, const TuneOptions& options) {
  LOOM_USER_CHECK(task.target.is_cpu(), "loom.search.E852")
      << "tune(): task targets " << task.target.to_string()
      << " but loom/tune.hpp tunes for the CPU; tune GPU tasks with loom::cuda::tune "
         "(loom/cuda.hpp, target loom::cuda)";
  cpu_jit::LocalMeasurerOptions local;
  local.constant_inputs = options.constant_inputs;
  cpu_jit::LocalMeasurer measurer(options.measure, local);
  return TuneResult(task, search::tune_with(task, options, measurer), options.constant_inputs);
}

LOOM_DECL search::TaskSchedulerReport tune_tasks(const std::vector<WeightedTask>& tasks,
                                                 const TaskSchedulerOptions& options) {
  for (const WeightedTask& t : tasks)
    LOOM_USER_CHECK(t.task.target.is_cpu(), "loom.search.E852")
        << "tune_tasks(): a task targets " << t.task.target.to_string()
        << " but loom/tune.hpp tunes for the CPU; tune GPU tasks with loom::cuda::tune "
           "(loom/cuda.hpp, target loom::cuda)";
  cpu_jit::LocalMeasurerOptions local;
  local.constant_inputs = options.tune.constant_inputs;
  cpu_jit::LocalMeasurer measurer(options.tune.measure, local);
  return search::tune_tasks_with(tasks, options, measurer);
}

namespace detail {

/// best_recorded_schedule over the records of the log `path`, already read.
inline std::optional<sched::State> best_recorded_schedule(
    const Task& task, const std::vector<search::TuningRecord>& records, const std::string& path) {
  const std::string device = cpu_jit::Engine::global().cpu_name();
  const std::optional<search::TuningRecord> best = search::best_record(
      records, task.workload_key(), task.target.to_string(), runtime::num_threads(), device);
  if (!best) return std::nullopt;
  if (!best->device.empty() && best->device != device)
    std::cerr << "loom: warning: " << path << " has no record of workload " << task.workload_key()
              << " measured on this CPU (" << device << "); using one measured on " << best->device
              << ", which may be far from the best here (tune the task on this machine)\n";
  sched::State state = sched::replay(task.dag, best->steps);
  state.set_origins(best->origins);
  return state;
}

}  // namespace detail

LOOM_DECL std::optional<sched::State> best_recorded_schedule(const Task& task,
                                                             const std::string& records) {
  return detail::best_recorded_schedule(task, search::read_records(records), records);
}

LOOM_DECL Kernel build_best(const Task& task, const std::string& records,
                            const BuildOptions& options) {
  std::optional<sched::State> best = best_recorded_schedule(task, records);
  LOOM_USER_CHECK(best.has_value(), "loom.search.E851")
      << "build_best(): " << records << " has no correct record of workload " << task.workload_key()
      << " on " << task.target.to_string() << "; tune this task with TuneOptions::records = \""
      << records << "\" first";
  return build(task, *best, options);
}

LOOM_DECL std::pair<Kernel, ScheduleSource> kernel_from_records(const Task& task,
                                                                const std::string& records) {
  const std::vector<search::TuningRecord> log = search::read_records(records);
  if (std::optional<sched::State> best = detail::best_recorded_schedule(task, log, records))
    return {build(task, *best), ScheduleSource::Recorded};
  if (auto moved = search::transferred_state(task, log, runtime::num_threads()))
    return {build(task, moved->state), ScheduleSource::Transferred};
  return {build(task), ScheduleSource::Default};
}

namespace detail {

/// Kernels compiled once per key: the first caller of a key builds; callers of the same key that
/// come meanwhile wait on its future. A failure is not cached: the next call tries again.
class KernelCache {
 public:
  using Entry = std::pair<Kernel, ScheduleSource>;

  Entry get(const std::string& key, const std::function<Entry()>& build) {
    std::shared_future<Entry> future;
    std::optional<std::promise<Entry>> promise;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end()) {
        future = it->second;
      } else {
        promise.emplace();
        future = promise->get_future().share();
        entries_.emplace(key, future);
      }
    }
    if (promise) {
      try {
        promise->set_value(build());
      } catch (...) {
        promise->set_exception(std::current_exception());
        std::lock_guard<std::mutex> lock(mutex_);
        entries_.erase(key);
      }
    }
    return future.get();
  }

  /// The keys whose kernel is built.
  std::vector<std::string> ready_keys() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> keys;
    for (const auto& [key, entry] : entries_)
      if (entry.wait_for(std::chrono::seconds(0)) == std::future_status::ready) keys.push_back(key);
    return keys;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_future<Entry>> entries_;
};

}  // namespace detail

LOOM_DECL Kernel tuned_kernel(const Task& task, const std::string& records) {
  // One kernel per (log, workload, target) and process.
  static detail::KernelCache cache;
  const std::string key = records + '\n' + task.workload_key() + '\n' + task.target.to_string();
  return cache
      .get(key,
           [&] {
             auto built = kernel_from_records(task, records);
             if (built.second == ScheduleSource::Transferred)
               std::cerr << "loom: note: " << records << " has no record of workload "
                         << task.workload_key() << "; using the schedule tuned for the same "
                         << "computation at other extents, adapted (tune the task into this "
                            "file for its own)\n";
             else if (built.second == ScheduleSource::Default)
               std::cerr << "loom: warning: " << records << " has no record of workload "
                         << task.workload_key() << " on " << task.target.to_string()
                         << "; using the default schedule (tune the task into this file for a "
                            "fast kernel)\n";
             return built;
           })
      .first;
}

LOOM_DECL std::vector<int64_t> representative_sizes(int64_t lo, int64_t hi, int count) {
  LOOM_USER_CHECK(lo >= 1 && lo <= hi && count >= 1, "loom.search.E860")
      << "representative_sizes(" << lo << ", " << hi << ", " << count
      << "): needs 1 <= lo <= hi and count >= 1";
  std::vector<int64_t> sizes;
  for (int i = 0; i < count; ++i) {
    const double t = count == 1 ? 1.0 : static_cast<double>(i) / (count - 1);
    const auto n = static_cast<int64_t>(std::llround(std::exp(
        std::log(static_cast<double>(lo)) * (1 - t) + std::log(static_cast<double>(hi)) * t)));
    const int64_t clamped = std::clamp(n, lo, hi);
    if (sizes.empty() || sizes.back() != clamped) sizes.push_back(clamped);
  }
  return sizes;
}

struct DynamicKernel::Cache : detail::KernelCache {};

LOOM_DECL DynamicKernel::DynamicKernel(std::function<Task(int64_t)> make, std::string records)
    : make_(std::move(make)), records_(std::move(records)), cache_(std::make_unique<Cache>()) {}

LOOM_DECL DynamicKernel::~DynamicKernel() = default;

LOOM_DECL Kernel DynamicKernel::kernel(int64_t n) const {
  return cache_->get(std::to_string(n), [&] { return kernel_from_records(make_(n), records_); })
      .first;
}

LOOM_DECL ScheduleSource DynamicKernel::source(int64_t n) const {
  return cache_->get(std::to_string(n), [&] { return kernel_from_records(make_(n), records_); })
      .second;
}

LOOM_DECL std::vector<int64_t> DynamicKernel::compiled_sizes() const {
  std::vector<int64_t> sizes;
  for (const std::string& key : cache_->ready_keys()) sizes.push_back(std::stoll(key));
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

LOOM_DECL search::TaskSchedulerReport tune_dynamic(const DynamicKernel& op,
                                                   const std::vector<int64_t>& sizes,
                                                   TaskSchedulerOptions options) {
  LOOM_USER_CHECK(!sizes.empty(), "loom.search.E861")
      << "tune_dynamic: no sizes to tune (representative_sizes(lo, hi, count) chooses some)";
  std::vector<WeightedTask> tasks;
  for (int64_t n : sizes) tasks.push_back({op.task(n), 1.0, ""});
  options.tune.records = op.records();
  return tune_tasks(tasks, options);
}

LOOM_END_NAMESPACE
