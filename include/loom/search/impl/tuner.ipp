// Bodies of loom/search/tuner.hpp.
//
// `tune_with` is a `Tuner` run: resume from the log, then rounds of next batch → measure and
// log → learn (features, refit) until a stop, then rerank the fastest. The phases are the
// Tuner's member functions, in that order below; what the user sees of them is the
// `TuneProgress` printer's (search/impl/tune_progress.ipp).
#include "loom/search/tuner.hpp"

#include "loom/cost/features.hpp"
#include "loom/detail/clock.hpp"
#include "loom/sched/state.hpp"
#include "loom/search/impl/tune_progress.ipp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace search {
namespace detail {

/// Runs `f` and adds its wall time to `seconds`.
template <class F>
decltype(auto) timed(double& seconds, F&& f) {
  struct Add {
    double& to;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Add() { to += ::loom::detail::seconds_since(start); }
  } add{seconds};
  return f();
}

/// A pretrained model's scores, mixed with those of the task's own model once it has learned:
/// `w · pretrained + (1 − w) · own` with w = k / (k + n) after n samples. Both models predict
/// throughputs normalized against a task's best, so the scores share a scale.
class PretrainedMix final : public cost::CostModel {
 public:
  PretrainedMix(std::shared_ptr<const cost::CostModel> pretrained,
                std::unique_ptr<cost::GbdtCostModel> own, double k)
      : pretrained_(std::move(pretrained)), own_(std::move(own)), k_(k) {}

  void update(const std::vector<cost::ProgramFeatures>& programs,
              const std::vector<double>& throughputs) override {
    own_->update(programs, throughputs);
  }
  std::vector<double> predict(const std::vector<cost::ProgramFeatures>& programs) const override {
    std::vector<double> scores = pretrained_->predict(programs);
    if (!own_->trained()) return scores;
    const double n = static_cast<double>(own_->num_samples());
    const double w = k_ / (k_ + n);
    const std::vector<double> own = own_->predict(programs);
    for (size_t i = 0; i < scores.size(); ++i) scores[i] = w * scores[i] + (1 - w) * own[i];
    return scores;
  }
  void save(std::ostream& out) const override { own_->save(out); }
  void load(std::istream& in) override { own_->load(in); }
  std::string name() const override { return "gbdt+pretrained"; }

 private:
  std::shared_ptr<const cost::CostModel> pretrained_;
  std::unique_ptr<cost::GbdtCostModel> own_;
  double k_;
};

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
    if (options.pretrained)
      return std::make_unique<PretrainedMix>(options.pretrained, std::move(model),
                                             options.pretrained_samples);
    return model;
  }
};

/// Every program measured in this run's setting (resumed or new) with the mean cost of each of
/// its measurements, for the final ranking by median (median_cost, search/records.hpp). A
/// program is kept as its step history (the index's key) and origins, 1-2 KiB, not as a
/// sched::State (7 KiB for a tiled matmul): a tuning run measures thousands and ranks a few.
class MeasuredPrograms {
 public:
  explicit MeasuredPrograms(std::shared_ptr<const ComputeDAG> dag) : dag_(std::move(dag)) {}

  void note(const sched::State& state, const MeasureResult& r) {
    const auto [it, added] =
        index_.emplace(EvolutionarySearch::program_key(state), programs_.size());
    // Keys of an unordered_map keep their address: the entry points at its own.
    if (added) programs_.push_back({&it->first, state.origins(), {}});
    programs_[it->second].costs.push_back(r.mean_cost());
  }
  /// (median cost, program) of the correct programs, fastest first.
  std::vector<std::pair<double, size_t>> by_median() const {
    std::vector<std::pair<double, size_t>> order;
    for (size_t p = 0; p < programs_.size(); ++p) {
      const double cost = median_cost(programs_[p].costs);
      if (cost < kFailedCost) order.emplace_back(cost, p);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    return order;
  }
  /// Program `p` again, replayed from its steps.
  sched::State state(size_t p) const {
    sched::State s = sched::replay(dag_, programs_[p].key->steps);
    s.set_origins(programs_[p].origins);
    return s;
  }
  size_t measurements(size_t p) const { return programs_[p].costs.size(); }

 private:
  struct Program {
    const ProgramKey* key;
    sched::StepOrigins origins;
    std::vector<double> costs;
  };
  std::shared_ptr<const ComputeDAG> dag_;
  std::vector<Program> programs_;
  std::unordered_map<ProgramKey, size_t, ProgramKey::Hash> index_;
};

inline std::vector<double> throughputs(const std::vector<MeasureResult>& results) {
  std::vector<double> t(results.size());
  for (size_t i = 0; i < results.size(); ++i)
    t[i] = results[i].ok() ? 1.0 / results[i].mean_cost() : 0.0;
  return t;
}

/// One tuning run of one task (SketchPolicyNode::Search in TVM). Single use: construct, run().
class Tuner {
 public:
  Tuner(const Task& task, const TuneOptions& options, Measurer& measurer)
      : task_(task),
        options_(options),
        measurer_(measurer),
        progress_(options, options.name.empty() ? task_name(task) : options.name),
        search_(task, options.space, options.evolution, options.seed, options.constant_inputs),
        threads_(measurer.threads()),
        device_(measurer.device()),
        cold_(measurer.cold_constants(task)),
        measured_(task.dag) {
    report_.flops = task.dag->flop_count();
  }

  TuneReport run() {
    resume();
    if (options_.trials > 0) refit(0);
    report_.stop_reason = "trials";
    bool retried = false;
    while (report_.trials < options_.trials) {
      if (const char* stop = early_stop()) {
        report_.stop_reason = stop;
        break;
      }
      const std::vector<sched::State> batch = next_batch();
      if (batch.empty()) {
        // Ansor retries a round that found nothing new once, then calls the space exhausted.
        if (retried) {
          report_.stop_reason = "space exhausted";
          break;
        }
        retried = true;
        continue;
      }
      retried = false;
      const std::vector<MeasureResult> results = measure_and_log(batch);
      count_trials(batch, results);
      learn(batch, results);
      progress_.round(report_, options_.trials, ::loom::detail::seconds_since(wall_start_));
    }
    rerank();
    return finish();
  }

 private:
  /// Why to stop before all trials are done (null: go on).
  const char* early_stop() const {
    if (options_.time_limit_s > 0 &&
        ::loom::detail::seconds_since(wall_start_) >= options_.time_limit_s)
      return "time limit";
    if (options_.early_stopping > 0 && report_.trials - best_trial_ >= options_.early_stopping)
      return "early stopping";
    return nullptr;
  }

  std::optional<sched::State> replay(const TuningRecord& r) const {
    try {
      sched::State state = sched::replay(task_.dag, r.steps);
      state.set_origins(r.origins);
      return state;
    } catch (const loom::error& e) {
      progress_.not_replayed(e);
      return std::nullopt;
    }
  }

  /// Reads the log: records of this setting train the model, compete for the best and are never
  /// measured again; the fastest of those measured with another thread count, on another device
  /// or with the weights in the other cache state are queued to be measured first.
  void resume() {
    if (options_.records.empty()) return;
    const std::string& workload = task_.workload_key();
    const std::string target = task_.target.to_string();
    std::vector<sched::State> states;
    std::vector<MeasureResult> results;
    std::vector<TuningRecord> foreign;  // correct ones only
    for (TuningRecord& r : read_records(options_.records)) {
      if (r.workload_key != workload || r.target != target) continue;
      if ((threads_ > 0 && r.threads > 0 && r.threads != threads_) ||
          (!device_.empty() && !r.device.empty() && r.device != device_) ||
          r.cold_constants != cold_) {
        if (r.result.ok()) foreign.push_back(std::move(r));
      } else if (std::optional<sched::State> state = replay(r)) {
        states.push_back(std::move(*state));
        results.push_back(std::move(r.result));
      }
    }
    report_.resumed = static_cast<int>(states.size());
    if (!states.empty()) {
      timed(report_.search_seconds,
            [&] { samples_.add(cost::extract_features(states, task_.target), results); });
      for (size_t i = 0; i < states.size(); ++i) measured_.note(states[i], results[i]);
      // A log that an earlier run ranked again holds several measurements of its best programs:
      // they compete with their medians, as in best_record().
      take_best_by_median();
      search_.add_measured(states, throughputs(results));
      progress_.resumed(states.size(), report_);
    }
    std::stable_sort(foreign.begin(), foreign.end(), [](const auto& a, const auto& b) {
      return a.result.mean_cost() < b.result.mean_cost();
    });
    // The fastest ones, less those measured here already: a resumed run does not go on down
    // the foreign list.
    if (foreign.size() > static_cast<size_t>(options_.remeasure_foreign))
      foreign.erase(foreign.begin() + options_.remeasure_foreign, foreign.end());
    std::unordered_set<ProgramKey, ProgramKey::Hash> carried_keys;
    for (const TuningRecord& r : foreign) {
      std::optional<sched::State> state = replay(r);
      if (state && !search_.was_measured(*state) &&
          carried_keys.insert(EvolutionarySearch::program_key(*state)).second)
        carried_.push_back(std::move(*state));
    }
    if (!carried_.empty()) progress_.carried(carried_.size(), threads_, device_, cold_);
  }

  /// The next round's programs: queued records of another setting first, then the search's.
  std::vector<sched::State> next_batch() {
    const int count = std::min(options_.measures_per_round, options_.trials - report_.trials);
    const size_t from_carried = std::min(carried_.size(), static_cast<size_t>(count));
    std::vector<sched::State> batch(carried_.begin(), carried_.begin() + from_carried);
    carried_.erase(carried_.begin(), carried_.begin() + from_carried);
    report_.remeasured += static_cast<int>(from_carried);
    timed(report_.search_seconds, [&] {
      if (static_cast<int>(batch.size()) >= count) return;
      std::unordered_set<ProgramKey, ProgramKey::Hash> keys;
      for (const sched::State& s : batch) keys.insert(EvolutionarySearch::program_key(s));
      for (sched::State& s : search_.next_batch(count - static_cast<int>(batch.size()), *model_))
        if (!keys.count(EvolutionarySearch::program_key(s))) batch.push_back(std::move(s));
    });
    return batch;
  }

  /// Measures `batch` and appends each record to the log as soon as its program is measured: a
  /// killed tuner loses at most the program being measured, not the batch.
  std::vector<MeasureResult> measure_and_log(const std::vector<sched::State>& batch) {
    std::vector<std::optional<TuningRecord>> made(batch.size());
    auto keep = [&](size_t i, const MeasureResult& r) {
      if (i >= made.size() || made[i]) return;
      made[i] = make_tuning_record(task_, batch[i], r);
      made[i]->threads = threads_;
      made[i]->device = device_;
      made[i]->cold_constants = cold_;
      if (!options_.records.empty()) append_records(options_.records, {*made[i]});
    };
    std::vector<MeasureResult> results =
        timed(report_.measure_seconds, [&] { return measurer_.measure_each(task_, batch, keep); });
    LOOM_INTERNAL_CHECK(results.size() == batch.size())
        << measurer_.name() << " returned " << results.size() << " results for " << batch.size()
        << " programs";
    for (size_t i = 0; i < batch.size(); ++i) {
      keep(i, results[i]);  // a measurer that did not tell every result
      report_.records.push_back(std::move(*made[i]));
      report_.compile_seconds += results[i].compile_seconds;
      report_.run_seconds += results[i].run_seconds;
      measured_.note(batch[i], results[i]);
    }
    return results;
  }

  /// Trials, failures, the best single measurement and the best-so-far curve.
  void count_trials(const std::vector<sched::State>& batch,
                    const std::vector<MeasureResult>& results) {
    for (size_t i = 0; i < batch.size(); ++i) {
      ++report_.trials;
      const MeasureResult& r = results[i];
      if (!r.ok()) {
        ++report_.failures;
        const int e = static_cast<int>(r.error);
        if (e >= 0 && e < static_cast<int>(report_.failures_by_error.size()))
          ++report_.failures_by_error[e];
      }
      if (r.ok() && r.mean_cost() < report_.best_cost) {
        report_.best_cost = r.mean_cost();
        report_.best = batch[i];
        best_trial_ = report_.trials;
      }
      report_.curve.push_back(
          {report_.trials, ::loom::detail::seconds_since(wall_start_), report_.best_gflops()});
    }
  }

  /// The search and the model learn from a measured round.
  void learn(const std::vector<sched::State>& batch, const std::vector<MeasureResult>& results) {
    search_.add_measured(batch, throughputs(results));
    timed(report_.search_seconds,
          [&] { samples_.add(cost::extract_features(batch, task_.target), results); });
    // The model is for the next round; the last round needs none (nor does a task scheduler
    // that runs one round per call).
    if (report_.trials < options_.trials) refit(static_cast<uint64_t>(report_.rounds) + 1);
    ++report_.rounds;
  }

  /// A fresh model on everything measured so far, relabelled against the best cost now; `round`
  /// varies its seed.
  void refit(uint64_t round) {
    timed(report_.train_seconds, [&] { model_ = samples_.fit(options_, round); });
  }

  /// Measures the fastest again, in passes that measure each due program once, so that a slow
  /// phase of the machine falls on all of them. A program that a pass pushes down leaves the top
  /// and the next one comes in; the passes are bounded in case the top keeps changing.
  void rerank() {
    if (options_.rerank_top <= 0 || options_.rerank_measures <= 1 ||
        (report_.trials == 0 && !options_.rerank_resumed))
      return;
    const auto rerank_start = std::chrono::steady_clock::now();
    for (int pass = 0; pass < 3 * options_.rerank_measures; ++pass) {
      const auto order = measured_.by_median();
      std::vector<sched::State> due;
      for (size_t j = 0; j < order.size() && j < static_cast<size_t>(options_.rerank_top); ++j) {
        const size_t p = order[j].second;
        if (measured_.measurements(p) < static_cast<size_t>(options_.rerank_measures))
          due.push_back(measured_.state(p));
      }
      if (due.empty()) break;
      measure_and_log(due);
      report_.reranked += static_cast<int>(due.size());
    }
    report_.rerank_seconds = ::loom::detail::seconds_since(rerank_start);
  }

  void take_best_by_median() {
    if (const auto order = measured_.by_median(); !order.empty()) {
      report_.best = measured_.state(order.front().second);
      report_.best_cost = order.front().first;
    }
  }

  TuneReport finish() {
    take_best_by_median();
    if (options_.keep_samples) {
      auto kept = std::make_shared<ModelSamples>();
      kept->labels = samples_.labels();
      kept->features = std::move(samples_.features);
      report_.samples = std::move(kept);
    }
    report_.wall_seconds = ::loom::detail::seconds_since(wall_start_);
    progress_.done(report_, options_.rerank_top);
    return std::move(report_);
  }

  const std::chrono::steady_clock::time_point wall_start_ = std::chrono::steady_clock::now();
  const Task& task_;
  const TuneOptions& options_;
  Measurer& measurer_;
  const TuneProgress progress_;
  EvolutionarySearch search_;
  const int threads_;
  const std::string device_;
  const bool cold_;

  TuneReport report_;
  Samples samples_;
  MeasuredPrograms measured_;
  std::unique_ptr<cost::CostModel> model_;
  std::vector<sched::State> carried_;  ///< records of another setting, measured first
  int best_trial_ = 0;  ///< trial of this run that found the current best (0: resumed or none)
};

inline void check_options(const TuneOptions& options) {
  LOOM_USER_CHECK(options.trials >= 0 && options.measures_per_round >= 1 &&
                      options.early_stopping >= 0 && options.time_limit_s >= 0 &&
                      options.remeasure_foreign >= 0 && options.rerank_top >= 0 &&
                      options.rerank_measures >= 0 && options.pretrained_samples >= 0,
                  "loom.search.E840")
      << "TuneOptions out of range: trials " << options.trials << " (≥ 0), measures_per_round "
      << options.measures_per_round << " (≥ 1), early_stopping " << options.early_stopping
      << " (≥ 0), time_limit_s " << options.time_limit_s << " (≥ 0), remeasure_foreign "
      << options.remeasure_foreign << " (≥ 0), rerank_top " << options.rerank_top
      << " (≥ 0), rerank_measures " << options.rerank_measures << " (≥ 0), pretrained_samples "
      << options.pretrained_samples << " (≥ 0)";
}

}  // namespace detail

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
  detail::check_options(options);
  return detail::Tuner(task, options, measurer).run();
}

}  // namespace search
LOOM_END_NAMESPACE
