// Bodies of loom/search/tuner.hpp.
#include "loom/search/tuner.hpp"

#include "loom/cost/features.hpp"
#include "loom/detail/clock.hpp"
#include "loom/sched/state.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <unordered_map>

LOOM_BEGIN_NAMESPACE
namespace search {
namespace detail_tuner {

using ::loom::detail::seconds_since;

/// The model data of a task: every measured program's features and cost. Labels are made
/// afresh at each fit, against the best cost known then.
struct Samples {
  std::vector<cost::ProgramFeatures> features;
  std::vector<double> costs;

  void add(std::vector<cost::ProgramFeatures> f, const std::vector<MeasureResult>& results) {
    for (size_t i = 0; i < f.size(); ++i) {
      features.push_back(std::move(f[i]));
      costs.push_back(results[i].ok() ? results[i].mean_cost() : kFailedCost);
    }
  }
  std::vector<double> labels() const {
    std::vector<double> l(costs.size());
    if (costs.empty()) return l;
    const double best = *std::min_element(costs.begin(), costs.end());
    for (size_t i = 0; i < costs.size(); ++i)
      l[i] = costs[i] >= kFailedCost ? 0.0 : best / costs[i];
    return l;
  }
  std::unique_ptr<cost::CostModel> fit(const TuneOptions& options, uint64_t round) const {
    if (options.model == ModelKind::random)
      return std::make_unique<cost::RandomCostModel>(options.seed + round);
    cost::GbdtCostModelOptions gbdt = options.gbdt;
    gbdt.seed = options.gbdt.seed + round;
    auto model = std::make_unique<cost::GbdtCostModel>(gbdt);
    const ModelSamples* shared = options.shared_samples.get();
    if (shared && !shared->features.empty()) {
      // One update with both sets: the model trains once, on all of them.
      std::vector<cost::ProgramFeatures> all(features);
      all.insert(all.end(), shared->features.begin(), shared->features.end());
      std::vector<double> all_labels = labels();
      all_labels.insert(all_labels.end(), shared->labels.begin(), shared->labels.end());
      model->update(all, all_labels);
    } else if (!features.empty()) {
      model->update(features, labels());
    }
    return model;
  }
};

}  // namespace detail_tuner

LOOM_DECL std::string task_name(const Task& task) {
  const auto& outs = task.dag->outputs();
  std::string name = outs.empty() ? std::string("task") : outs.front().name();
  return name + "@" + task.workload_key().substr(0, 8);
}

LOOM_DECL const sched::State& TuneReport::best_or_throw(const std::string& workload_key) const {
  LOOM_USER_CHECK(best.has_value(), "loom.search.E850")
      << "tuning found no correct program for workload " << workload_key << " (" << trials
      << " measured, " << failures << " failed); raise TuneOptions::trials or look at the errors "
      << "in the records";
  return *best;
}

LOOM_DECL TuneReport tune_with(const Task& task, const TuneOptions& options, Measurer& measurer) {
  using detail_tuner::seconds_since;
  LOOM_USER_CHECK(options.trials >= 0 && options.measures_per_round >= 1 &&
                      options.early_stopping >= 0 && options.time_limit_s >= 0 &&
                      options.remeasure_foreign >= 0 && options.rerank_top >= 0 &&
                      options.rerank_measures >= 0,
                  "loom.search.E840")
      << "TuneOptions out of range: trials " << options.trials << " (≥ 0), measures_per_round "
      << options.measures_per_round << " (≥ 1), early_stopping " << options.early_stopping
      << " (≥ 0), time_limit_s " << options.time_limit_s << " (≥ 0), remeasure_foreign "
      << options.remeasure_foreign << " (≥ 0), rerank_top " << options.rerank_top
      << " (≥ 0), rerank_measures " << options.rerank_measures << " (≥ 0)";
  const auto wall_start = std::chrono::steady_clock::now();
  std::ostream& log = options.log ? *options.log : std::cerr;
  const std::string name = options.name.empty() ? task_name(task) : options.name;
  const std::string& workload = task.workload_key();
  const std::string target = task.target.to_string();

  TuneReport report;
  report.flops = task.dag->flop_count();
  EvolutionarySearch search(task, options.space, options.evolution, options.seed,
                            options.constant_inputs);
  detail_tuner::Samples samples;
  int best_trial = 0;  // trial of this run that found the current best (0: resumed or none)

  auto consider = [&](const sched::State& state, const MeasureResult& r) {
    if (r.ok() && r.mean_cost() < report.best_cost) {
      report.best_cost = r.mean_cost();
      report.best = state;
      return true;
    }
    return false;
  };
  // Every program measured in this run's setting (resumed or new) with the mean cost of each of
  // its measurements, for the final ranking by median (median_cost, search/records.hpp).
  std::vector<std::pair<sched::State, std::vector<double>>> measured;
  std::unordered_map<ProgramKey, size_t, ProgramKey::Hash> measured_index;
  auto note = [&](const sched::State& state, const MeasureResult& r) {
    const auto [it, added] =
        measured_index.emplace(EvolutionarySearch::program_key(state), measured.size());
    if (added) measured.emplace_back(state, std::vector<double>{});
    measured[it->second].second.push_back(r.mean_cost());
  };
  auto by_median = [&] {
    std::vector<std::pair<double, size_t>> order;
    for (size_t p = 0; p < measured.size(); ++p) {
      const double cost = median_cost(measured[p].second);
      if (cost < kFailedCost) order.emplace_back(cost, p);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    return order;
  };
  auto take_best_by_median = [&] {
    if (const auto order = by_median(); !order.empty()) {
      report.best = measured[order.front().second].first;
      report.best_cost = order.front().first;
    }
  };
  auto throughputs = [](const std::vector<MeasureResult>& results) {
    std::vector<double> t(results.size());
    for (size_t i = 0; i < results.size(); ++i)
      t[i] = results[i].ok() ? 1.0 / results[i].mean_cost() : 0.0;
    return t;
  };

  // --- resume from the log --------------------------------------------------------------------
  // Programs measured with another thread count, on another device or with the weights in the
  // other cache state (Measurer::cold_constants), fastest first: measured again before the
  // search's own picks.
  const int threads = measurer.threads();
  const std::string device = measurer.device();
  const bool cold = measurer.cold_constants(task);
  std::vector<sched::State> carried;
  if (!options.records.empty()) {
    auto replay = [&](const TuningRecord& r) -> std::optional<sched::State> {
      try {
        return sched::replay(task.dag, r.steps);
      } catch (const loom::error& e) {
        if (!options.quiet)
          log << "loom: warning: " << options.records << ": a record of " << name
              << " does not replay on this DAG and is ignored: " << e.what() << "\n";
        return std::nullopt;
      }
    };
    std::vector<sched::State> states;
    std::vector<MeasureResult> results;
    std::vector<TuningRecord> foreign;  // correct ones only
    for (TuningRecord& r : read_records(options.records)) {
      if (r.workload_key != workload || r.target != target) continue;
      if ((threads > 0 && r.threads > 0 && r.threads != threads) ||
          (!device.empty() && !r.device.empty() && r.device != device) ||
          r.cold_constants != cold) {
        if (r.result.ok()) foreign.push_back(std::move(r));
      } else if (std::optional<sched::State> state = replay(r)) {
        states.push_back(std::move(*state));
        results.push_back(std::move(r.result));
      }
    }
    report.resumed = static_cast<int>(states.size());
    if (!states.empty()) {
      const auto start = std::chrono::steady_clock::now();
      samples.add(cost::extract_features(states, task.target), results);
      report.search_seconds += seconds_since(start);
      for (size_t i = 0; i < states.size(); ++i) note(states[i], results[i]);
      // A log that an earlier run ranked again holds several measurements of its best programs:
      // they compete with their medians, as in best_record().
      take_best_by_median();
      search.add_measured(states, throughputs(results));
      if (!options.quiet)
        log << "[loom] " << name << ": resumed " << states.size() << " records from "
            << options.records << ", best "
            << (report.best ? std::to_string(report.best_gflops()) + " GFLOP/s" : "none") << "\n";
    }
    std::stable_sort(foreign.begin(), foreign.end(), [](const auto& a, const auto& b) {
      return a.result.mean_cost() < b.result.mean_cost();
    });
    // The fastest ones, less those measured here already: a resumed run does not go on down
    // the foreign list.
    if (foreign.size() > static_cast<size_t>(options.remeasure_foreign))
      foreign.erase(foreign.begin() + options.remeasure_foreign, foreign.end());
    std::unordered_set<ProgramKey, ProgramKey::Hash> carried_keys;
    for (const TuningRecord& r : foreign) {
      std::optional<sched::State> state = replay(r);
      if (state && !search.was_measured(*state) &&
          carried_keys.insert(EvolutionarySearch::program_key(*state)).second)
        carried.push_back(std::move(*state));
    }
    if (!carried.empty() && !options.quiet)
      log << "[loom] " << name << ": " << carried.size() << " programs of records measured with "
          << "another thread count, on another device or with warm/cold weights are measured "
          << "first with " << threads << " threads" << (device.empty() ? "" : " on " + device)
          << (cold ? ", weights cold" : "") << "\n";
  }

  // Measures `batch` and appends each record to the log as soon as its program is measured: a
  // killed tuner loses at most the program being measured, not the batch.
  auto measure_and_log = [&](const std::vector<sched::State>& batch) {
    std::vector<std::optional<TuningRecord>> made(batch.size());
    auto keep = [&](size_t i, const MeasureResult& r) {
      if (i >= made.size() || made[i]) return;
      made[i] = make_tuning_record(task, batch[i], r);
      made[i]->threads = threads;
      made[i]->device = device;
      made[i]->cold_constants = cold;
      if (!options.records.empty()) append_records(options.records, {*made[i]});
    };
    const auto start = std::chrono::steady_clock::now();
    std::vector<MeasureResult> results = measurer.measure_each(task, batch, keep);
    report.measure_seconds += seconds_since(start);
    LOOM_INTERNAL_CHECK(results.size() == batch.size())
        << measurer.name() << " returned " << results.size() << " results for " << batch.size()
        << " programs";
    for (size_t i = 0; i < batch.size(); ++i) {
      keep(i, results[i]);  // a measurer that did not tell every result
      report.records.push_back(std::move(*made[i]));
      report.compile_seconds += results[i].compile_seconds;
      report.run_seconds += results[i].run_seconds;
      note(batch[i], results[i]);
    }
    return results;
  };

  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<cost::CostModel> model;
  if (options.trials > 0) model = samples.fit(options, 0);
  report.train_seconds += seconds_since(start);

  report.stop_reason = "trials";
  bool retried = false;
  while (report.trials < options.trials) {
    if (options.time_limit_s > 0 && seconds_since(wall_start) >= options.time_limit_s) {
      report.stop_reason = "time limit";
      break;
    }
    if (options.early_stopping > 0 && report.trials - best_trial >= options.early_stopping) {
      report.stop_reason = "early stopping";
      break;
    }
    const int count = std::min(options.measures_per_round, options.trials - report.trials);
    const size_t from_carried = std::min(carried.size(), static_cast<size_t>(count));
    std::vector<sched::State> batch(carried.begin(), carried.begin() + from_carried);
    carried.erase(carried.begin(), carried.begin() + from_carried);
    report.remeasured += static_cast<int>(from_carried);
    start = std::chrono::steady_clock::now();
    if (static_cast<int>(batch.size()) < count) {
      std::unordered_set<ProgramKey, ProgramKey::Hash> keys;
      for (const sched::State& s : batch) keys.insert(EvolutionarySearch::program_key(s));
      for (sched::State& s : search.next_batch(count - static_cast<int>(batch.size()), *model))
        if (!keys.count(EvolutionarySearch::program_key(s))) batch.push_back(std::move(s));
    }
    report.search_seconds += seconds_since(start);
    if (batch.empty()) {
      // Ansor retries a round that found nothing new once, then calls the space exhausted.
      if (retried) {
        report.stop_reason = "space exhausted";
        break;
      }
      retried = true;
      continue;
    }
    retried = false;

    const std::vector<MeasureResult> results = measure_and_log(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      ++report.trials;
      const MeasureResult& r = results[i];
      if (!r.ok()) {
        ++report.failures;
        const int e = static_cast<int>(r.error);
        if (e >= 0 && e < static_cast<int>(report.failures_by_error.size()))
          ++report.failures_by_error[e];
      }
      if (consider(batch[i], r)) best_trial = report.trials;
      report.curve.push_back({report.trials, seconds_since(wall_start), report.best_gflops()});
    }
    search.add_measured(batch, throughputs(results));

    start = std::chrono::steady_clock::now();
    samples.add(cost::extract_features(batch, task.target), results);
    report.search_seconds += seconds_since(start);
    // The model is for the next round; the last round needs none (nor does a task scheduler
    // that runs one round per call).
    start = std::chrono::steady_clock::now();
    if (report.trials < options.trials)
      model = samples.fit(options, static_cast<uint64_t>(report.rounds) + 1);
    report.train_seconds += seconds_since(start);
    ++report.rounds;

    if (!options.quiet) {
      const double elapsed = seconds_since(wall_start);
      const double left =
          elapsed / report.trials * static_cast<double>(options.trials - report.trials);
      char line[256];
      std::snprintf(line, sizeof line,
                    "[loom] %s: round %d: %d/%d trials, best %.2f GFLOP/s, %d failed, %s "
                    "elapsed, ~%s left\n",
                    name.c_str(), report.rounds, report.trials, options.trials,
                    report.best_gflops(), report.failures,
                    ::loom::detail::format_duration(elapsed).c_str(),
                    ::loom::detail::format_duration(left).c_str());
      log << line;
    }
  }

  // --- measure the fastest again ----------------------------------------------------------------
  // In passes that measure each due program once, so that a slow phase of the machine falls on
  // all of them. A program that a pass pushes down leaves the top and the next one comes in;
  // the passes are bounded in case the top keeps changing.
  if (options.rerank_top > 0 && options.rerank_measures > 1 &&
      (report.trials > 0 || options.rerank_resumed)) {
    const auto rerank_start = std::chrono::steady_clock::now();
    for (int pass = 0; pass < 3 * options.rerank_measures; ++pass) {
      const auto order = by_median();
      std::vector<sched::State> due;
      for (size_t j = 0; j < order.size() && j < static_cast<size_t>(options.rerank_top); ++j) {
        const auto& [state, costs] = measured[order[j].second];
        if (costs.size() < static_cast<size_t>(options.rerank_measures)) due.push_back(state);
      }
      if (due.empty()) break;
      measure_and_log(due);
      report.reranked += static_cast<int>(due.size());
    }
    report.rerank_seconds = seconds_since(rerank_start);
  }
  take_best_by_median();
  if (options.keep_samples) {
    auto kept = std::make_shared<ModelSamples>();
    kept->labels = samples.labels();
    kept->features = std::move(samples.features);
    report.samples = std::move(kept);
  }

  report.wall_seconds = seconds_since(wall_start);
  if (!options.quiet) {
    if (report.reranked > 0)
      log << "[loom] " << name << ": measured the " << options.rerank_top << " fastest again ("
          << report.reranked << " measurements, "
          << ::loom::detail::format_duration(report.rerank_seconds) << "); best by median "
          << report.best_gflops() << " GFLOP/s\n";
    // Which errors, since most failures of a healthy run are the measurer's slow-program
    // cut-offs (timeouts), not broken programs.
    std::string failed = std::to_string(report.failures) + " failed";
    const char* sep = ": ";
    for (size_t e = 0; e < report.failures_by_error.size(); ++e)
      if (report.failures_by_error[e] > 0) {
        failed = failed + sep + measure_error_name(static_cast<MeasureError>(e)) + " " +
                 std::to_string(report.failures_by_error[e]);
        sep = ", ";
      }
    char line[448];
    std::snprintf(
        line, sizeof line,
        "[loom] %s: done (%s): %d trials (%s; %d resumed) in %s, best %.2f "
        "GFLOP/s (%.3f ms); time: search %.1f s, model %.1f s, build %.1f s, run %.1f s\n",
        name.c_str(), report.stop_reason.c_str(), report.trials, failed.c_str(), report.resumed,
        ::loom::detail::format_duration(report.wall_seconds).c_str(), report.best_gflops(),
        report.best_cost < kFailedCost ? report.best_cost * 1e3 : 0.0, report.search_seconds,
        report.train_seconds, report.compile_seconds, report.run_seconds);
    log << line;
  }
  return report;
}

}  // namespace search
LOOM_END_NAMESPACE
