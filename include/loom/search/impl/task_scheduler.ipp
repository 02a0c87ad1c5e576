// Bodies of loom/search/task_scheduler.hpp.
#include "loom/search/task_scheduler.hpp"

#include "loom/detail/random.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

LOOM_BEGIN_NAMESPACE
namespace search {
namespace detail {

// A task that has had this many rounds and still has no correct program is given up: its
// programs all fail (a broken computation or target), and its "infinitely slow" best would
// otherwise draw every round.
inline constexpr int rounds_without_any_correct_program = 3;

inline bool has_cost(double cost) { return cost < kFailedCost; }

/// Σ weight × cost, or kFailedCost when some task has no cost.
inline double weighted_latency(const std::vector<double>& weights,
                               const std::vector<double>& costs) {
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!has_cost(costs[i])) return kFailedCost;
    sum += weights[i] * costs[i];
  }
  return sum;
}

}  // namespace detail

LOOM_DECL TaskAllocator::TaskAllocator(std::vector<double> weights, std::vector<double> flops,
                                       std::vector<std::string> tags,
                                       const TaskSchedulerOptions& options)
    : weights_(std::move(weights)),
      flops_(std::move(flops)),
      tags_(std::move(tags)),
      options_(options),
      rounds_(weights_.size(), 0),
      programs_(weights_.size(), 0),
      last_improved_(weights_.size(), 0),
      history_(weights_.size()),
      dead_(weights_.size(), 0),
      rng_(options.tune.seed ^ 0x7461736b73ULL) {
  LOOM_INTERNAL_CHECK(flops_.size() == weights_.size() && tags_.size() == weights_.size())
      << "TaskAllocator: " << weights_.size() << " weights, " << flops_.size() << " FLOP counts, "
      << tags_.size() << " tags";
}

LOOM_DECL double TaskAllocator::objective() const {
  std::vector<double> costs(weights_.size());
  for (size_t i = 0; i < costs.size(); ++i) costs[i] = best_cost(i);
  return detail::weighted_latency(weights_, costs);
}

LOOM_DECL double TaskAllocator::gradient(int task) const {
  const size_t i = static_cast<size_t>(task);
  const double g = best_cost(i);
  // Nothing correct yet (or no round yet): the network's latency is unknown until this task
  // has a program, so it comes first.
  if (!detail::has_cost(g) || rounds_[i] == 0) return -std::numeric_limits<double>::infinity();
  const int t = rounds_[i];
  const int window = options_.backward_window;
  double backward = 0;
  if (t > window) {
    const double then = history_[i][static_cast<size_t>(t - 1 - window)];
    if (detail::has_cost(then)) backward = (g - then) / window;
  }
  double bound = std::numeric_limits<double>::infinity();
  double group_best_throughput = 0;
  int group_size = 0;
  for (size_t j = 0; j < weights_.size(); ++j) {
    if (tags_[j].empty() || tags_[j] != tags_[i]) continue;
    ++group_size;
    if (detail::has_cost(best_cost(j)) && flops_[j] > 0)
      group_best_throughput = std::max(group_best_throughput, flops_[j] / best_cost(j));
  }
  if (group_size > 1 && group_best_throughput > 0 && flops_[i] > 0)
    bound = options_.beta * flops_[i] / group_best_throughput;
  const double next = std::min(g - g / t, bound);
  const double forward = next - g;
  return weights_[i] * (options_.alpha * backward + (1 - options_.alpha) * forward);
}

LOOM_DECL int TaskAllocator::next() {
  std::vector<int> live;
  for (size_t i = 0; i < weights_.size(); ++i)
    if (!dead_[i]) live.push_back(static_cast<int>(i));
  if (live.empty()) {
    reason_ = "none left";
    return -1;
  }
  for (int i : live)
    if (rounds_[static_cast<size_t>(i)] == 0) {
      reason_ = "warm-up";
      return i;
    }
  if (options_.round_robin) {
    // The ablation baseline: the live task after the last one picked, in order.
    int total = 0;
    for (int r : rounds_) total += r;
    reason_ = "round-robin";
    return live[static_cast<size_t>(total) % live.size()];
  }
  if (::loom::detail::chance(rng_, options_.eps_greedy)) {
    reason_ = "random";
    return live[::loom::detail::draw(rng_, live.size())];
  }
  int best = live.front();
  double lowest = gradient(best), highest = lowest;
  for (int i : live) {
    const double grad = gradient(i);
    highest = std::max(highest, grad);
    if (grad < lowest) {
      lowest = grad;
      best = i;
    }
  }
  if (lowest == highest) {
    reason_ = "tie";
    return live[::loom::detail::draw(rng_, live.size())];
  }
  reason_ = "gradient";
  return best;
}

LOOM_DECL void TaskAllocator::finish_round(int task, double best_cost_now, int programs,
                                           bool exhausted) {
  const size_t i = static_cast<size_t>(task);
  const double before = best_cost(i);
  // A round's best is the lowest cost measured so far; keep the history monotone even if a
  // measurer reports otherwise, so that the backward gradient never says a round made it worse.
  const double now = std::min(before, best_cost_now);
  ++rounds_[i];
  programs_[i] += programs;
  if (now < before) last_improved_[i] = programs_[i];
  history_[i].push_back(now);
  if (exhausted) dead_[i] = 1;
  if (options_.early_stopping_per_task > 0 &&
      programs_[i] - last_improved_[i] >= options_.early_stopping_per_task)
    dead_[i] = 1;
  if (!detail::has_cost(now) && rounds_[i] >= detail::rounds_without_any_correct_program)
    dead_[i] = 1;
}

LOOM_DECL TaskSchedulerReport tune_tasks_with(const std::vector<WeightedTask>& tasks,
                                              const TaskSchedulerOptions& options,
                                              Measurer& measurer) {
  const auto wall_start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  };
  bool weights_ok = true;
  for (const WeightedTask& t : tasks)
    weights_ok = weights_ok && t.weight > 0 && std::isfinite(t.weight);
  LOOM_USER_CHECK(!tasks.empty() && options.trials >= 1 && !options.tune.records.empty() &&
                      options.tune.measures_per_round >= 1 && options.alpha >= 0 &&
                      options.alpha <= 1 && options.backward_window >= 1 && options.beta > 0 &&
                      options.eps_greedy >= 0 && options.eps_greedy <= 1 &&
                      options.early_stopping_per_task >= 0 && options.time_limit_s >= 0 &&
                      options.latency_target_s >= 0 && weights_ok,
                  "loom.search.E841")
      << "tune_tasks: bad input: " << tasks.size() << " tasks (≥ 1, each weight > 0"
      << (weights_ok ? "" : ", and some is not") << "), trials " << options.trials
      << " (≥ 1), tune.records \"" << options.tune.records
      << "\" (required: each task's rounds resume from it), tune.measures_per_round "
      << options.tune.measures_per_round << " (≥ 1), alpha " << options.alpha
      << " (in [0, 1]), backward_window " << options.backward_window << " (≥ 1), beta "
      << options.beta << " (> 0), eps_greedy " << options.eps_greedy
      << " (in [0, 1]), early_stopping_per_task " << options.early_stopping_per_task
      << " (≥ 0), time_limit_s " << options.time_limit_s << " (≥ 0), latency_target_s "
      << options.latency_target_s << " (≥ 0)";

  std::ostream& log = options.log ? *options.log : std::cerr;
  std::vector<double> weights, flops;
  std::vector<std::string> tags, names;
  for (const WeightedTask& t : tasks) {
    weights.push_back(t.weight);
    flops.push_back(t.task.dag->flop_count());
    const auto& outputs = t.task.dag->outputs();
    tags.push_back(!t.tag.empty() || outputs.empty() ? t.tag : outputs.front().name());
    names.push_back(task_name(t.task));
  }
  TaskAllocator allocator(weights, flops, tags, options);

  TaskSchedulerReport report;
  report.tasks.resize(tasks.size());
  auto latency_ms = [](double s) { return s < kFailedCost ? s * 1e3 : 0.0; };
  // Per task, what its model learned from (share_cost_model): the other tasks' go into each
  // round's model.
  std::vector<std::shared_ptr<const ModelSamples>> samples(tasks.size());
  auto shared_except = [&](size_t k) -> std::shared_ptr<const ModelSamples> {
    auto all = std::make_shared<ModelSamples>();
    for (size_t j = 0; j < tasks.size(); ++j) {
      if (j == k || !samples[j]) continue;
      all->features.insert(all->features.end(), samples[j]->features.begin(),
                           samples[j]->features.end());
      all->labels.insert(all->labels.end(), samples[j]->labels.begin(), samples[j]->labels.end());
    }
    return all->features.empty() ? nullptr : all;
  };
  report.stop_reason = "trials";
  while (report.trials < options.trials) {
    if (options.time_limit_s > 0 && elapsed() >= options.time_limit_s) {
      report.stop_reason = "time limit";
      break;
    }
    if (options.latency_target_s > 0 && allocator.objective() <= options.latency_target_s) {
      report.stop_reason = "latency target met";
      break;
    }
    const int i = allocator.next();
    if (i < 0) {
      report.stop_reason = "all tasks done";
      break;
    }
    const std::string reason = allocator.last_reason();
    const size_t k = static_cast<size_t>(i);
    TuneOptions round = options.tune;
    round.trials = std::min(options.tune.measures_per_round, options.trials - report.trials);
    round.early_stopping = 0;
    round.time_limit_s = 0;
    round.rerank_top = 0;  // once, at the end
    round.quiet = true;
    round.name = names[k];
    // Each round's search draws afresh (Ansor's rounds re-sample their initial population too).
    round.seed =
        options.tune.seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(allocator.rounds(i));
    if (options.share_cost_model) {
      round.keep_samples = true;
      round.shared_samples = shared_except(k);
    }
    TuneReport r = tune_with(tasks[k].task, round, measurer);
    if (r.samples) samples[k] = std::move(r.samples);

    TuneReport& total = report.tasks[k];
    total.trials += r.trials;
    total.failures += r.failures;
    total.remeasured += r.remeasured;
    total.rounds += 1;
    total.search_seconds += r.search_seconds;
    total.train_seconds += r.train_seconds;
    total.compile_seconds += r.compile_seconds;
    total.run_seconds += r.run_seconds;
    total.measure_seconds += r.measure_seconds;
    total.wall_seconds += r.wall_seconds;
    for (size_t e = 0; e < total.failures_by_error.size() && e < r.failures_by_error.size(); ++e)
      total.failures_by_error[e] += r.failures_by_error[e];
    total.flops = r.flops;
    if (total.rounds == 1) total.resumed = r.resumed;
    if (r.best && r.best_cost < total.best_cost) {
      total.best = r.best;
      total.best_cost = r.best_cost;
    }
    total.stop_reason = r.stop_reason;
    // A round that measured nothing new has nothing left to measure.
    const bool exhausted = r.stop_reason == "space exhausted" || r.trials == 0;
    allocator.finish_round(i, r.best_cost, r.trials, exhausted);
    report.trials += r.trials;
    report.allocation.push_back(i);
    report.curve.push_back({report.trials, elapsed(), allocator.objective()});

    if (!options.quiet) {
      // Time left: the trials left at this run's pace, or the time limit if that comes first.
      const double spent = elapsed();
      double left =
          report.trials > 0 ? spent / report.trials * (options.trials - report.trials) : 0;
      if (options.time_limit_s > 0)
        left = std::min(left, std::max(options.time_limit_s - spent, 0.0));
      const std::string budget =
          options.trials >= kUnlimitedTrials ? "" : "/" + std::to_string(options.trials);
      char line[448];
      std::snprintf(line, sizeof line,
                    "[loom] tasks: round %zu: %s (%s): %d programs, its best %.2f GFLOP/s; "
                    "latency %s%.3f ms; %d%s trials, %.0f s elapsed, ~%.0f s left\n",
                    report.allocation.size(), names[k].c_str(), reason.c_str(), r.trials,
                    total.best_gflops(), allocator.objective() < kFailedCost ? "" : "unknown, ",
                    latency_ms(allocator.objective()), report.trials, budget.c_str(), spent, left);
      log << line;
    }
  }

  // Each task's fastest programs measured again, as a single tune_with() run would end.
  for (size_t k = 0; k < tasks.size(); ++k) {
    TuneReport& total = report.tasks[k];
    if (total.rounds == 0 || options.tune.rerank_top == 0) continue;
    TuneOptions last = options.tune;
    last.trials = 0;
    last.rerank_resumed = true;
    last.remeasure_foreign = 0;
    last.quiet = true;
    last.name = names[k];
    const TuneReport r = tune_with(tasks[k].task, last, measurer);
    total.reranked = r.reranked;
    total.rerank_seconds = r.rerank_seconds;
    total.compile_seconds += r.compile_seconds;
    total.run_seconds += r.run_seconds;
    total.measure_seconds += r.measure_seconds;
    if (r.best) {
      total.best = r.best;
      total.best_cost = r.best_cost;
    }
  }
  std::vector<double> final_costs;
  for (const TuneReport& t : report.tasks) final_costs.push_back(t.best_cost);
  report.latency = detail::weighted_latency(weights, final_costs);
  report.wall_seconds = elapsed();
  if (!options.quiet) {
    log << "[loom] tasks: done (" << report.stop_reason << "): " << report.trials
        << " programs over " << tasks.size() << " tasks in " << report.wall_seconds
        << " s; latency " << (report.latency < kFailedCost ? "" : "unknown, ")
        << latency_ms(report.latency) << " ms (Σ weight × best, best by median)\n";
    for (size_t k = 0; k < tasks.size(); ++k) {
      const TuneReport& t = report.tasks[k];
      char line[256];
      std::snprintf(line, sizeof line,
                    "[loom]   %-28s weight %-4g %3d rounds %5d programs %8.2f GFLOP/s\n",
                    names[k].c_str(), tasks[k].weight, t.rounds, t.trials, t.best_gflops());
      log << line;
    }
  }
  return report;
}

}  // namespace search
LOOM_END_NAMESPACE
