// Bodies of loom/tune.hpp.
#include "loom/tune.hpp"

#include "loom/backend/llvm/measurer.hpp"
#include "loom/compile_threads.hpp"
#include "loom/detail/clock.hpp"
#include "loom/runtime/buffer.hpp"
#include "loom/runtime/parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <iostream>
#include <limits>
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

namespace detail {

LOOM_DECL search::TuneOptions with_warm_start(const search::TuneOptions& options) {
  search::TuneOptions o = options;
  if (o.warm_start && !o.pretrained && o.model == search::ModelKind::gbdt)
    o.pretrained = cost::pretrained_cost_model();
  return o;
}

}  // namespace detail

LOOM_DECL TuneResult tune(const Task& task, const TuneOptions& options) {
  LOOM_USER_CHECK(task.target.is_cpu(), "loom.search.E852")
      << "tune(): task targets " << task.target.to_string()
      << " but loom/tune.hpp tunes for the CPU; tune GPU tasks with loom::cuda::tune "
         "(loom/cuda.hpp, target loom::cuda)";
  cpu_jit::LocalMeasurerOptions local;
  local.constant_inputs = options.constant_inputs;
  cpu_jit::LocalMeasurer measurer(options.measure, local);
  return TuneResult(task, search::tune_with(task, detail::with_warm_start(options), measurer),
                    options.constant_inputs);
}

namespace detail {

LOOM_DECL search::TaskSchedulerOptions prepared_for_cpu(
    const std::vector<search::WeightedTask>& tasks, const search::TaskSchedulerOptions& options) {
  for (const WeightedTask& t : tasks)
    LOOM_USER_CHECK(t.task.target.is_cpu(), "loom.search.E852")
        << "tune_tasks(): a task targets " << t.task.target.to_string()
        << " but loom/tune.hpp tunes for the CPU; tune GPU tasks with loom::cuda::tune "
           "(loom/cuda.hpp, target loom::cuda)";
  TaskSchedulerOptions warm = options;
  warm.tune = with_warm_start(options.tune);
  return warm;
}

}  // namespace detail

LOOM_DECL search::TaskSchedulerReport tune_tasks(const std::vector<WeightedTask>& tasks,
                                                 const TaskSchedulerOptions& options) {
  const TaskSchedulerOptions warm = detail::prepared_for_cpu(tasks, options);
  cpu_jit::LocalMeasurerOptions local;
  local.constant_inputs = options.tune.constant_inputs;
  cpu_jit::LocalMeasurer measurer(options.tune.measure, local);
  return search::tune_tasks_with(tasks, warm, measurer);
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

namespace detail {

/// Seconds per call of `kernel` on zeroed buffers: the fastest of a few timings, each of enough
/// calls to last `min_seconds`. Stops early once a timing is more than `give_up` times `beat`,
/// or the first call more than `give_up_first` times (a kernel that slow will not be picked).
inline double quick_time(const Task& task, const Kernel& kernel, double beat) {
  // give_up_first: the first call also pays page faults and the runtime's threads, so it may
  // be slower than the candidate is; a candidate that slow even so is out without timing, which
  // on a large kernel is most of the time this stage takes (GEMM 1024³: six candidates timed in
  // 0.48 s, most of it the default schedule's and the model's slower picks).
  constexpr double min_seconds = 2e-3, give_up = 1.5, give_up_first = 3;
  std::vector<aligned_vector<std::byte>> storage;
  std::vector<void*> pointers;
  for (const ir::Tensor& t : task.dag->arguments()) {
    storage.emplace_back(static_cast<size_t>(t.num_elements() * t.dtype().bytes()));
    pointers.push_back(storage.back().data());
  }
  // A kernel that stops early (out of memory) is no candidate.
  const auto first_start = std::chrono::steady_clock::now();
  if (kernel.run_unchecked(pointers.data()) != 0) return std::numeric_limits<double>::infinity();
  const double first = ::loom::detail::seconds_since(first_start);
  if (first > give_up_first * beat) return first;
  double best = std::numeric_limits<double>::infinity();
  for (int timing = 0; timing < 3; ++timing) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t calls = 0;
    double elapsed = 0;
    do {
      kernel.run_unchecked(pointers.data());
      ++calls;
      elapsed = ::loom::detail::seconds_since(t0);
    } while (elapsed < min_seconds);
    best = std::min(best, elapsed / static_cast<double>(calls));
    if (best > give_up * beat) break;
  }
  return best;
}

}  // namespace detail

LOOM_DECL ModelCompiled compile_from_model(const Task& task, const ModelCompileOptions& options) {
  LOOM_USER_CHECK(task.target.is_cpu(), "loom.search.E852")
      << "compile_from_model(): task targets " << task.target.to_string()
      << " but loom/tune.hpp compiles for the CPU";
  LOOM_USER_CHECK(options.time_top >= 0 && options.measure_top >= 0 && options.check_points >= 0,
                  "loom.search.E864")
      << "ModelCompileOptions out of range: time_top " << options.time_top << ", measure_top "
      << options.measure_top << ", check_points " << options.check_points << " (each ≥ 0)";
  std::shared_ptr<const cost::CostModel> model = options.model;
  if (!model) model = cost::pretrained_cost_model();
  LOOM_USER_CHECK(model != nullptr, "loom.search.E862")
      << "compile_from_model(): no cost model: none was given and the pretrained one ("
      << cost::pretrained_model_path() << ") could not be read (see the warning above)";
  double search_seconds = 0, build_seconds = 0, measure_seconds = 0;
  auto t0 = std::chrono::steady_clock::now();
  search::ModelSearchOptions search = options.search;
  search.top = std::max({search.top, options.time_top, options.measure_top});
  std::vector<sched::State> picks = search::best_predicted(task, *model, search);
  search_seconds = ::loom::detail::seconds_since(t0);

  // Candidates in the order they are tried: the model's picks, best first; measuring or timing
  // reorders the first few, fastest first.
  std::vector<size_t> order(picks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (options.measure_top > 0 && !picks.empty()) {
    // Measured like tuning measures (forked children), fastest first; failures go last.
    t0 = std::chrono::steady_clock::now();
    const size_t k = std::min(picks.size(), static_cast<size_t>(options.measure_top));
    const std::vector<sched::State> top(picks.begin(), picks.begin() + static_cast<long>(k));
    cpu_jit::LocalMeasurer measurer(search::MeasureOptions{}, cpu_jit::LocalMeasurerOptions{});
    const std::vector<search::MeasureResult> measured = measurer.measure(task, top);
    std::stable_sort(order.begin(), order.begin() + static_cast<long>(k), [&](size_t a, size_t b) {
      const double ca = measured[a].ok() ? measured[a].mean_cost() : search::kFailedCost;
      const double cb = measured[b].ok() ? measured[b].mean_cost() : search::kFailedCost;
      return ca < cb;
    });
    measure_seconds = ::loom::detail::seconds_since(t0);
  }

  // Builds and checks one program; an empty kernel and the reason when it cannot be used.
  auto make = [&](const sched::State& state, std::string& failure) -> Kernel {
    Kernel kernel;
    try {
      kernel = build(task, state, options.build);
    } catch (const error& e) {
      failure = std::string("building it failed: ") + e.what();
      return {};
    }
    if (options.check_points > 0) {
      failure = spot_check(task, kernel, options.check_points, options.rtol, options.atol);
      if (!failure.empty()) return {};
    }
    return kernel;
  };
  std::string last_failure = "the search found no program";

  if (options.time_top > 0 && options.measure_top == 0) {
    // The model's first picks and the default schedule, built on the compile threads, checked,
    // then timed here one after another: the model alone sometimes prefers a program several
    // times slower than the default (benchmarks/README.md, "Model-only compilation"). The
    // default schedule goes last (rank −1).
    std::vector<sched::State> candidates(
        picks.begin(), picks.begin() + static_cast<long>(std::min(
                                           picks.size(), static_cast<size_t>(options.time_top))));
    candidates.push_back(sched::default_schedule(task.dag, task.target));
    std::vector<Kernel> kernels(candidates.size());
    std::vector<std::string> failures(candidates.size());
    t0 = std::chrono::steady_clock::now();
    ::loom::detail::parallel_chunks(candidates.size(), candidates.size(),
                                    [&](size_t begin, size_t end) {
                                      for (size_t c = begin; c < end; ++c)
                                        kernels[c] = make(candidates[c], failures[c]);
                                    });
    build_seconds = ::loom::detail::seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    size_t best = candidates.size();
    double best_seconds = std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < candidates.size(); ++c) {
      if (!kernels[c]) {
        last_failure = failures[c];
        continue;
      }
      const double seconds = detail::quick_time(task, kernels[c], best_seconds);
      if (seconds == std::numeric_limits<double>::infinity())
        last_failure = "it stopped before the end (out of memory)";
      if (seconds < best_seconds) {
        best_seconds = seconds;
        best = c;
      }
    }
    measure_seconds = ::loom::detail::seconds_since(t0);
    if (best < candidates.size()) {
      const int rank = best + 1 < candidates.size() ? static_cast<int>(best) : -1;
      return ModelCompiled{std::move(kernels[best]),
                           std::move(candidates[best]),
                           rank,
                           search_seconds,
                           build_seconds,
                           measure_seconds};
    }
  } else {
    for (size_t r = 0; r < order.size(); ++r) {
      t0 = std::chrono::steady_clock::now();
      Kernel kernel = make(picks[order[r]], last_failure);
      build_seconds += ::loom::detail::seconds_since(t0);
      if (!kernel) continue;
      return ModelCompiled{std::move(kernel), picks[order[r]], static_cast<int>(order[r]),
                           search_seconds,    build_seconds,   measure_seconds};
    }
  }
  LOOM_USER_FAIL("loom.search.E863")
      << "compile_from_model(): none of the cost model's " << picks.size() << " picks for "
      << search::task_name(task) << " could be used (the last: " << last_failure
      << "); tune the task, or build it with the default schedule";
  __builtin_unreachable();  // LOOM_USER_FAIL throws
}

LOOM_DECL std::pair<Kernel, ScheduleSource> kernel_from_records(const Task& task,
                                                                const std::string& records) {
  const std::vector<search::TuningRecord> log = search::read_records(records);
  if (std::optional<sched::State> best = detail::best_recorded_schedule(task, log, records))
    return {build(task, *best), ScheduleSource::Recorded};
  if (auto moved = search::transferred_state(task, log, runtime::num_threads()))
    return {build(task, moved->state), ScheduleSource::Transferred};
  if (cost::pretrained_cost_model()) {
    try {
      return {compile_from_model(task).kernel, ScheduleSource::Predicted};
    } catch (const user_error& e) {
      std::cerr << "loom: warning: " << e.what() << "\n";
    }
  }
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
             else if (built.second == ScheduleSource::Predicted)
               std::cerr << "loom: note: " << records << " has no record of workload "
                         << task.workload_key() << " on " << task.target.to_string()
                         << "; using the pretrained cost model's pick (tune the task into this "
                            "file for a faster kernel)\n";
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
