/// \file
/// The tuning loop (layer search/): Ansor's `SketchPolicy::Search` for one task. Each round picks
/// a batch of programs with the evolutionary search (search/evolution.hpp), measures it through
/// a `Measurer` (search/measure.hpp; the backend provides it), appends the results to the
/// tuning log (search/records.hpp) and retrains the cost model on everything measured so far.
///
/// `loom::tune` (loom/tune.hpp) is the public call; it supplies the CPU measurer and builds the
/// winner. This layer knows no backend.
///
/// Resuming: with `records` naming an existing log, its records of this workload and target are
/// read first. Their programs are never measured again by the search, the model is trained on
/// them before the first round, the best of them seeds the search, and `trials` counts only new
/// measurements.
///
/// Ranking again: after the last round the fastest programs are measured a few more times and
/// the best is the one with the lowest median (TuneOptions::rerank_top).
///
/// Labels: the model learns normalized throughputs, the task's best cost divided by the
/// program's (ansor.md §4); since the best moves as tuning goes, the tuner keeps every measured
/// program's features and cost and refits a fresh model on relabelled data after each round (the
/// learned model retrains from scratch anyway).
#ifndef LOOM_SEARCH_TUNER_HPP
#define LOOM_SEARCH_TUNER_HPP

#include "loom/search/evolution.hpp"
#include "loom/search/measure.hpp"
#include "loom/search/records.hpp"

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// Which cost model guides the search.
enum class ModelKind {
  gbdt,    ///< the learned model (cost::GbdtCostModel), retrained every round
  random,  ///< random scores: with `evolution.generations = 0` this is random search
};

/// Measured programs as a cost model learns from them: each program's features and its label,
/// the normalized throughput (its task's best cost over its own; 0 for a failure). Labels are
/// normalized per task, so programs of several tasks train one model (Ansor's shared model).
struct ModelSamples {
  std::vector<cost::ProgramFeatures> features;
  std::vector<double> labels;
};

/// Everything a tuning run can be told. Plain data.
struct TuneOptions {
  /// Programs to measure in this run (resumed records do not count).
  int trials = 1000;
  /// Programs measured per round (Ansor `num_measures_per_round`).
  int measures_per_round = 64;
  /// Stop when the best has not improved for this many measured programs (0: never).
  int early_stopping = 0;
  /// Stop after this many seconds of wall time, checked between rounds (0: no limit).
  double time_limit_s = 0;
  /// The tuning log: read to resume, appended to after every round ("" for none).
  std::string records;
  /// Records of the log measured with another thread count or on another device than the
  /// measurer's (their `threads` and `device` fields; a record without one counts as this
  /// run's), or with the weights in the other cache state (`cold_constants`), are not resumed:
  /// their costs are not this run's, so they neither compete for the best nor train the model.
  /// Instead the fastest this many of them are measured again, first, here; they count as
  /// trials. A program tuned on 2 threads is often a better start on 1 than what a short
  /// 1-thread run finds (GEMM 1024³: 70–79 GFLOP/s against 58), and one tuned on another CPU a
  /// better start than a random one. 0: ignore those records.
  int remeasure_foreign = 16;
  /// At the end of a run that measured anything, the `rerank_top` fastest programs (by
  /// median_cost(), search/records.hpp) are measured again until each has `rerank_measures`
  /// measurements in this setting (in at most 3 × `rerank_measures` passes, as programs that
  /// fall out of the top let others in), and the best is the one with the lowest median. The extra
  /// measurements go to the log (so best_record() and a resumed run see them too) and are not
  /// trials: they measure no new program. Why: on a noisy machine the fastest of a thousand
  /// single measurements is often a lucky one. The odd GEMM (127×131×129) on 2 threads: one
  /// run's best was logged at 10.8 µs and took 12.5 µs (median of 12 timings) later, while
  /// another run's best, logged at 11.9 µs, took 11.5. 0 (or `rerank_measures` ≤ 1): off, the
  /// best single measurement wins, as in Ansor.
  int rerank_top = 8;
  int rerank_measures = 5;
  /// Rank again also when this run measures no new program (`trials` = 0): the fastest
  /// programs of the resumed records are measured until each has `rerank_measures`
  /// measurements. The task scheduler (search/task_scheduler.hpp) ends each task this way.
  bool rerank_resumed = false;
  /// Seed of every random choice of the search (measurement noise aside, a seed gives the same
  /// programs).
  uint64_t seed = 0;
  ModelKind model = ModelKind::gbdt;
  /// Settings of the learned model.
  cost::GbdtCostModelOptions gbdt;
  /// A model trained before this run, e.g. the one shipped with loom
  /// (cost::pretrained_cost_model()): it picks the programs of the rounds before the task's own
  /// model has warmed up (instead of random scores), and afterwards its scores are mixed with the
  /// task model's, weighing `pretrained_samples / (pretrained_samples + n)` after n measured
  /// programs, as Ansor mixes what the programs of a network's other tasks taught its model.
  /// Null: the first rounds are random (Ansor), unless `warm_start`. Ignored with
  /// ModelKind::random.
  std::shared_ptr<const cost::CostModel> pretrained;
  /// Where `pretrained` is null, loom::tune and loom::tune_tasks (loom/tune.hpp, and the network
  /// tuning built on them) take the model shipped with loom, and cuda::tune the GPU's
  /// (cost::pretrained_gpu_cost_model()) (cost::pretrained_cost_model(); none
  /// when it cannot be read, with its warning). It reached 90 % of the 1,000-trial kernels in a
  /// few trials where random first rounds took 40-200 or more (benchmarks/README.md, "Warm start
  /// from the pretrained model"). false: random first rounds, as Ansor. search::tune_with itself
  /// never loads a model.
  bool warm_start = true;
  double pretrained_samples = 128;
  SearchOptions space;
  EvolutionOptions evolution;
  MeasureOptions measure;
  /// Inputs that hold constant weights (placeholder names): the CPU measurer times programs with
  /// them stored in the layout their loop nest walks (sched/layout_rewrite.hpp), as an
  /// application would deploy them (loom::TuneResult::packed_kernel). Ignored by measurers that
  /// do not support it.
  std::vector<std::string> constant_inputs;
  /// A line per round (trials, best GFLOP/s, estimated time left) and a summary, to `log`
  /// (std::cerr when null), unless `quiet`.
  bool quiet = false;
  std::ostream* log = nullptr;
  /// A name for progress lines (default: task_name()).
  std::string name;
  /// Other tasks' measurements for the cost model to learn from as well, appended to this
  /// task's own at every fit; they also count towards the model's warm-up. The task scheduler
  /// passes those of a network's other tasks (TaskSchedulerOptions::share_cost_model).
  std::shared_ptr<const ModelSamples> shared_samples;
  /// Return this task's own samples (features and labels at the end of the run, resumed
  /// records included) in TuneReport::samples.
  bool keep_samples = false;
};

/// One point of the best-so-far curve: after `trial` measured programs of this run, the best
/// program ran at `best_gflops` (0 before the first success).
struct CurvePoint {
  int trial = 0;
  double elapsed_seconds = 0;
  double best_gflops = 0;
};

/// What a tuning run found and what it cost.
struct TuneReport {
  /// The fastest correct program measured (in this run or in the resumed log) by the median of
  /// its measurements (TuneOptions::rerank_top); empty when every measurement failed.
  std::optional<sched::State> best;
  double best_cost = kFailedCost;  ///< seconds per run of `best`, the median of its measurements
  double flops = 0;                ///< of one run of the task
  int trials = 0;                  ///< programs measured in this run
  int failures = 0;                ///< of them, failed (any MeasureError)
  int resumed = 0;                 ///< records of this workload read from the log
  /// Of this run's trials, programs of records measured with another thread count, on another
  /// device or with the weights in the other cache state, measured again
  /// (TuneOptions::remeasure_foreign).
  int remeasured = 0;
  int rounds = 0;
  /// Measurements of programs measured before, at the end of the run (TuneOptions::rerank_top),
  /// and the wall time they took (also counted in the build, run and measure times).
  int reranked = 0;
  double rerank_seconds = 0;
  /// One point per measured program of this run: the best single measurement so far (the final
  /// `best_cost` is a median, so it may be above the last point).
  std::vector<CurvePoint> curve;
  /// Failures by MeasureError number (index 0 unused).
  std::vector<int> failures_by_error = std::vector<int>(9, 0);
  /// Wall time: in the search (sampling, evolution, features, model), in training the model,
  /// measuring (as the measurer reports: building and running), and in all.
  double search_seconds = 0;
  double train_seconds = 0;
  double compile_seconds = 0;
  double run_seconds = 0;
  double measure_seconds = 0;
  double wall_seconds = 0;
  /// The records this run appended (also in the log when one was named).
  std::vector<TuningRecord> records;
  /// Why tuning stopped: "trials", "early stopping", "time limit", "space exhausted".
  std::string stop_reason;
  /// With TuneOptions::keep_samples: what the task's cost model learned from.
  std::shared_ptr<const ModelSamples> samples;

  double best_gflops() const { return best && best_cost > 0 ? flops / best_cost * 1e-9 : 0; }
  /// `best`, or loom::user_error `[loom.search.E850]` (naming `workload_key`) when every
  /// measurement failed.
  const sched::State& best_or_throw(const std::string& workload_key) const;
};

/// The name progress lines give a task by default: its DAG's first output and the workload
/// key's first characters ("D@wk-1a2b").
std::string task_name(const Task& task);

/// Tunes `task`: rounds of search and measurement until `options.trials` programs are measured
/// (or another stop). Throws loom::user_error for bad options (`[loom.search.E840]`); failed
/// measurements never throw.
TuneReport tune_with(const Task& task, const TuneOptions& options, Measurer& measurer);

}  // namespace search
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/search/impl/tuner.ipp"
#endif

#endif  // LOOM_SEARCH_TUNER_HPP
