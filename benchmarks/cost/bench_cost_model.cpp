// How well does each cost model rank real programs? Issue 5's evaluation on the measured data
// set tests/data/cost/measurements.tsv.gz (make_cost_dataset.cpp, scripts/make-cost-dataset.sh):
// every record is replayed on its workload's DAG (cost_workloads.hpp) and featurized again
// (cost::extract_features, so the data set outlives feature-version changes); the label is the
// normalized throughput y = workload's best cost / cost (0 for a failed measurement).
//
// Splits:
//  (a) random: 80 % of the programs (fixed seed) train, 20 % test;
//  (b) leave-one-workload-out: train on five workloads, test on the sixth, for each.
// Metrics, computed per workload on its test programs and averaged over workloads:
//  - pairwise: cost::pairwise_accuracy (pairs with different labels ordered right);
//  - recall@10%: cost::recall_at_k with k = 10 % of the workload's test programs (at least 1);
//  - a-peak@32: cost::average_peak_score with n = 32 (Ansor's plan size).
// Models:
//  - gbdt: loom's embedded cost::Gbdt, pack-sum objective, w = y, GbdtParams defaults (Ansor's
//    XGBoost parameters, 64 bins) unless overridden on the command line;
//  - xgb-packsum: XGBoost (C API) with the *same* pack-sum objective, implemented through the
//    custom-gradient API XGBoosterBoostOneIter (grad = (Σ group prediction − y)·w, hess = w),
//    Ansor's parameters (depth 10, eta 0.2, gamma 0.001, min_child_weight 0, seed 43, early stop
//    after 50 rounds without training p-rmse gain, the kept model is the best round);
//  - xgb-sumrows: XGBoost on one row per program, the sum of its rows' (log-scaled) features,
//    plain weighted squared error — what stock XGBoost can do without a custom objective;
//  - random: cost::RandomCostModel; roofline: cost::AnalyticCostModel::roofline over the float
//    operation counts and the bytes of the five buffer blocks (8 FLOP/byte).
// Timings: training on the full data set (one thread) and prediction throughput.
//
// Usage: bench_cost_model [DATASET] [key=value ...]
//   gbdt.max_bins= gbdt.max_depth= gbdt.eta= gbdt.lambda= gbdt.min_child_weight= gbdt.gamma=
//   gbdt.colsample= gbdt.subsample= gbdt.weight=y|1 gbdt.label=throughput|log
//   xgb.tree_method=exact|hist|approx xgb.max_bin=
//   models=gbdt,xgb-packsum,xgb-sumrows,random,roofline parts=random,lowo,timing dump=PATH (write
//   every feature row as TSV: program, workload, seconds, label, values) logs=DIR (evaluate on the
//   tuning logs DIR/<name>.jsonl of tune_workloads instead: programs the search chose to measure,
//   as Ansor's training data were, timed by the tuner) gpu_logs=FILE[,FILE] (evaluate on GPU
//   tuning logs of bench_gpu's workloads instead, plain or .gz, featurized for an H100/H200;
//   e.g. benchmarks/results/h200_tuning_logs.jsonl.gz) save=PATH (train cost::GbdtCostModel, the
//   tuner's model with its default settings, on every program of the data set and write it to
//   PATH; with the H200's logs that is the shipped GPU model,
//   include/loom/cost/pretrained/gpu.model, cost/pretrained.hpp)
// Model gbdt-ansor: gbdt on Ansor's 164 features alone (loom's GPU features zeroed), which
// measures what those are worth for ranking (models=gbdt,gbdt-ansor).
// A plain program, not a Google Benchmark: the numbers are accuracies, not times.
#include "cost_workloads.hpp"
#include "gz_io.hpp"
#include "../gpu/gpu_workloads.hpp"
#include "../tune/tune_workloads.hpp"

#include <loom/cost/features.hpp>
#include <loom/cost/model.hpp>
#include <loom/sched/record.hpp>
#include <loom/search/records.hpp>

#if defined(LOOM_BENCH_HAVE_XGBOOST)
#include <xgboost/c_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifndef LOOM_COST_DATASET
#define LOOM_COST_DATASET "tests/data/cost/measurements.tsv.gz"
#endif

namespace {

using namespace loom;

constexpr uint64_t kSplitSeed = 20240605;
constexpr double kTestFraction = 0.2;
constexpr double kRecallFraction = 0.1;
constexpr size_t kPeakN = 32;
constexpr double kInf = std::numeric_limits<double>::infinity();

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --- the data set --------------------------------------------------------------------------------

struct Program {
  int workload = -1;
  double cost = kInf;  ///< seconds; inf for a failed measurement
  double label = 0;    ///< best / cost
  cost::ProgramFeatures features;
};

struct Dataset {
  std::vector<loom_bench::CostWorkload> workloads;
  std::vector<Program> programs;
};

/// The tuning logs `dir`/<name>.jsonl of the tuner's workloads (tune_workloads.hpp) as data-set
/// lines: the successful and failed records of each workload's own task, cost = mean of the
/// repeats. Adds the workloads that have a log to `workloads`.
std::string logs_as_dataset(const std::string& dir,
                            std::vector<loom_bench::CostWorkload>& workloads) {
  std::string text;
  for (const auto& w : loom_bench::tune_workloads()) {
    const std::string file = dir + "/" + w.name + ".jsonl";
    if (!std::ifstream(file)) continue;
    const Task task = w.make();
    int n = 0;
    for (const auto& r : search::read_records(file, [](const std::string&) {})) {
      if (r.workload_key != task.workload_key()) continue;
      char seconds[64] = "inf";
      if (r.result.ok()) std::snprintf(seconds, sizeof seconds, "%.6e", r.result.mean_cost());
      text += w.name + "\t" + seconds + "\t" + sched::to_record(r.steps) + "\n";
      ++n;
    }
    if (n > 0) workloads.push_back({w.name, task});
  }
  return text;
}

/// GPU tuning logs (bench_gpu's records, plain or gzipped; comma-separated paths) as data-set
/// lines of bench_gpu's workloads (gpu_workloads.hpp) on an H100 or H200: every record whose
/// workload and target are one of theirs. Adds those workloads to `workloads`.
std::string gpu_logs_as_dataset(const std::string& paths,
                                std::vector<loom_bench::CostWorkload>& workloads) {
  const Target hopper = loom_bench_gpu::hopper_target();
  std::map<std::string, loom_bench::CostWorkload> by_key;  // workload key and target
  for (const loom_bench_gpu::Spec& spec :
       loom_bench_gpu::workload_specs([](const std::string&) { return true; }))
    if (auto task = loom_bench_gpu::loom_task(spec, hopper))
      by_key.emplace(task->workload_key() + " " + task->target.to_string(),
                     loom_bench::CostWorkload{spec.name, *task});
  std::map<std::string, std::string> lines;  // by workload name, in name order
  for (const std::string& path : loom_bench::split_list(paths, ',')) {
    const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    std::string text;
    if (gz) {
      text = loom_bench::read_gz(path);
    } else {
      std::ifstream in(path);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      search::TuningRecord r;
      try {
        r = search::record_from_json_line(line);
      } catch (const std::exception&) {
        continue;  // a torn line, as every reader of a log skips it
      }
      const auto w = by_key.find(r.workload_key + " " + r.target);
      if (w == by_key.end()) continue;
      char seconds[64] = "inf";
      if (r.result.ok()) std::snprintf(seconds, sizeof seconds, "%.6e", r.result.mean_cost());
      lines[w->second.name] +=
          w->second.name + "\t" + seconds + "\t" + sched::to_record(r.steps) + "\n";
    }
  }
  std::string text;
  for (const auto& [name, l] : lines) {
    text += l;
    for (const auto& [key, w] : by_key)
      if (w.name == name) workloads.push_back(w);
  }
  return text;
}

/// The data set at `path`, or with `logs_dir` the tuning logs in it (logs_as_dataset), or with
/// `gpu_logs` those GPU tuning logs (gpu_logs_as_dataset).
Dataset load(const std::string& path, const std::string& logs_dir, const std::string& gpu_logs) {
  Dataset d;
  std::string text;
  if (!gpu_logs.empty()) {
    text = gpu_logs_as_dataset(gpu_logs, d.workloads);
  } else if (logs_dir.empty()) {
    d.workloads = loom_bench::cost_workloads();
    text = loom_bench::read_gz(path);
  } else {
    text = logs_as_dataset(logs_dir, d.workloads);
  }
  std::map<std::string, int> index;
  for (size_t w = 0; w < d.workloads.size(); ++w) index[d.workloads[w].name] = static_cast<int>(w);
  if (text.empty()) {
    std::fprintf(stderr, "cannot read %s (run scripts/make-cost-dataset.sh)\n",
                 logs_dir.empty() ? path.c_str() : logs_dir.c_str());
    std::exit(1);
  }
  std::istringstream in(text);
  std::string line;
  int unknown = 0, replay_failed = 0, no_rows = 0;
  std::vector<sched::State> states;
  std::vector<int> state_workload;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    const auto it = index.find(line.substr(0, t1));
    if (t1 == std::string::npos || t2 == std::string::npos || it == index.end()) {
      ++unknown;
      continue;
    }
    Program p;
    p.workload = it->second;
    const std::string seconds = line.substr(t1 + 1, t2 - t1 - 1);
    p.cost = seconds == "inf" ? kInf : std::strtod(seconds.c_str(), nullptr);
    try {
      const auto& task = d.workloads[static_cast<size_t>(p.workload)].task;
      sched::State s = sched::replay(task.dag, sched::from_record(line.substr(t2 + 1)));
      states.push_back(std::move(s));
    } catch (const std::exception& e) {
      ++replay_failed;
      std::fprintf(stderr, "replay failed: %s\n", e.what());
      continue;
    }
    d.programs.push_back(std::move(p));
  }
  const auto t0 = std::chrono::steady_clock::now();
  // GPU programs are featurized for their own target (threads, shared memory, tensor cores);
  // the CPU ones for the data set's one-core host, whatever their task says.
  std::vector<cost::ProgramFeatures> features(states.size());
  for (size_t w = 0; w < d.workloads.size(); ++w) {
    std::vector<size_t> at;
    std::vector<sched::State> mine;
    for (size_t i = 0; i < states.size(); ++i)
      if (d.programs[i].workload == static_cast<int>(w)) {
        at.push_back(i);
        mine.push_back(states[i]);
      }
    const Target& own = d.workloads[w].task.target;
    const auto f =
        cost::extract_features(mine, own.is_cuda() ? own : loom_bench::cost_target(), false);
    for (size_t k = 0; k < at.size(); ++k) features[at[k]] = f[k];
  }
  const double extract_s = seconds_since(t0);
  std::vector<double> best(d.workloads.size(), kInf);
  for (size_t i = 0; i < d.programs.size(); ++i) {
    d.programs[i].features = features[i];
    if (features[i].num_rows == 0) ++no_rows;
    auto& b = best[static_cast<size_t>(d.programs[i].workload)];
    b = std::min(b, d.programs[i].cost);
  }
  for (Program& p : d.programs)
    p.label = std::isfinite(p.cost) ? best[static_cast<size_t>(p.workload)] / p.cost : 0.0;
  std::printf(
      "data set %s: %zu programs, %d replay failures, %d unknown lines, %d without "
      "feature rows; features of all programs in %.2f s (%.0f programs/s)\n",
      !gpu_logs.empty()  ? (gpu_logs + " (GPU tuning logs)").c_str()
      : logs_dir.empty() ? path.c_str()
                         : (logs_dir + " (tuning logs)").c_str(),
      d.programs.size(), replay_failed, unknown, no_rows, extract_s,
      static_cast<double>(d.programs.size()) / extract_s);
  for (size_t w = 0; w < d.workloads.size(); ++w) {
    int n = 0, failed = 0, rows = 0;
    for (const Program& p : d.programs)
      if (p.workload == static_cast<int>(w)) {
        ++n;
        failed += !std::isfinite(p.cost);
        rows += p.features.num_rows;
      }
    std::vector<double> labels;
    for (const Program& p : d.programs)
      if (p.workload == static_cast<int>(w)) labels.push_back(p.label);
    std::sort(labels.begin(), labels.end());
    std::printf(
        "  %-38s %4d programs, %3d failed, %.1f rows/program, best %.3f ms, median y %.3f\n",
        d.workloads[w].name.c_str(), n, failed, n ? double(rows) / n : 0.0, best[w] * 1e3,
        labels.empty() ? 0.0 : labels[labels.size() / 2]);
  }
  return d;
}

// --- learners ------------------------------------------------------------------------------------

/// Scores the programs `idx` of the data set (higher = faster).
using Predictor = std::function<std::vector<double>(const std::vector<size_t>& idx)>;
/// Trains on the programs `idx`.
using Trainer = std::function<Predictor(const std::vector<size_t>& idx)>;

struct Settings {
  cost::GbdtParams gbdt;
  bool gbdt_weight_by_y = true;
  /// What the embedded model is trained against: "throughput" (y, Ansor's) or "log" (log-scaled
  /// y, see train_label()).
  std::string gbdt_label = "throughput";
  std::string xgb_tree_method = "exact";
  int xgb_max_bin = 256;
  std::vector<std::string> models = {"gbdt", "xgb-packsum", "xgb-sumrows", "random", "roofline"};
  std::string parts = "random,lowo,timing";
  /// Where to write the feature rows of every program (a TSV for analysis elsewhere), if set.
  std::string dump;
  /// A directory of tuning logs to evaluate on instead of the data set (see logs_as_dataset).
  std::string logs;
  /// GPU tuning logs to evaluate on instead (see gpu_logs_as_dataset).
  std::string gpu_logs;
  /// Where to write the tuner's model trained on the whole data set, if set.
  std::string save;
  bool has(const char* part) const {
    return ("," + parts + ",").find(std::string(",") + part + ",") != std::string::npos;
  }
};

/// The pack-sum training set of the programs `idx` that have rows (others are never learned
/// from, as in cost::GbdtCostModel).
/// The label a program is trained against. "log" maps y in [1e-3, 1] to log10(y) / 3 + 1 in
/// [0, 1] (0 below): the squared error then separates slow programs from each other as well,
/// where normalized throughput puts most random programs at almost 0.
double train_label(double y, const std::string& kind) {
  if (kind != "log") return y;
  return y > 0 ? std::max(0.0, std::log10(y) / 3.0 + 1.0) : 0.0;
}

cost::GbdtDataset packsum_dataset(const Dataset& d, const std::vector<size_t>& idx,
                                  bool weight_by_y, const std::string& label = "throughput") {
  cost::GbdtDataset data;
  data.num_features = cost::kNumFeatures;
  data.group_offsets.push_back(0);
  for (size_t i : idx) {
    const Program& p = d.programs[i];
    if (p.features.num_rows == 0) continue;
    data.features.insert(data.features.end(), p.features.values.begin(), p.features.values.end());
    data.group_offsets.push_back(data.features.size() / cost::kNumFeatures);
    const double y = train_label(p.label, label);
    data.labels.push_back(y);
    data.weights.push_back(weight_by_y ? y : 1.0);
  }
  return data;
}

/// Rows of the programs `idx`, their group offsets, and the positions in `idx` that have rows.
struct Rows {
  std::vector<float> values;
  std::vector<size_t> offsets{0};
  std::vector<size_t> with_rows;
};

Rows rows_of(const Dataset& d, const std::vector<size_t>& idx) {
  Rows r;
  for (size_t k = 0; k < idx.size(); ++k) {
    const Program& p = d.programs[idx[k]];
    if (p.features.num_rows == 0) continue;
    r.values.insert(r.values.end(), p.features.values.begin(), p.features.values.end());
    r.offsets.push_back(r.values.size() / cost::kNumFeatures);
    r.with_rows.push_back(k);
  }
  return r;
}

/// −∞ for every program, then the group scores where a program has rows.
std::vector<double> scatter(const Rows& r, const std::vector<double>& group_scores, size_t n) {
  std::vector<double> out(n, -kInf);
  for (size_t g = 0; g < r.with_rows.size(); ++g) out[r.with_rows[g]] = group_scores[g];
  return out;
}

Trainer gbdt_trainer(const Dataset& d, const Settings& s) {
  return [&d, &s](const std::vector<size_t>& idx) -> Predictor {
    auto model = std::make_shared<cost::Gbdt>(
        cost::Gbdt::train(packsum_dataset(d, idx, s.gbdt_weight_by_y, s.gbdt_label), s.gbdt));
    return [&d, model](const std::vector<size_t>& test) {
      const Rows r = rows_of(d, test);
      std::vector<double> g(r.with_rows.size());
      model->predict_groups(r.values.data(), r.offsets.data(), g.size(), g.data());
      return scatter(r, g, test.size());
    };
  };
}

#if defined(LOOM_BENCH_HAVE_XGBOOST)
void xgb_check(int rc) {
  if (rc != 0) {
    std::fprintf(stderr, "XGBoost: %s\n", XGBGetLastError());
    std::exit(1);
  }
}

/// A trained XGBoost booster and the number of trees it keeps (the best round).
struct XgbModel {
  BoosterHandle booster = nullptr;
  int best_rounds = 0;
  int rounds = 0;
  XgbModel() = default;
  XgbModel(const XgbModel&) = delete;
  XgbModel& operator=(const XgbModel&) = delete;
  ~XgbModel() {
    if (booster) XGBoosterFree(booster);
  }
};

/// Group sums of XGBoost's predictions for `data` (rows with `offsets`), `trees` trees (0: all).
std::vector<double> xgb_group_predict(BoosterHandle b, DMatrixHandle data,
                                      const std::vector<size_t>& offsets, int trees,
                                      bool training) {
  const std::string config =
      std::string("{\"type\": 0, \"training\": ") + (training ? "true" : "false") +
      ", \"iteration_begin\": 0, \"iteration_end\": " + std::to_string(trees) +
      ", \"strict_shape\": false}";
  const bst_ulong* shape = nullptr;
  bst_ulong dim = 0;
  const float* pred = nullptr;
  xgb_check(XGBoosterPredictFromDMatrix(b, data, config.c_str(), &shape, &dim, &pred));
  std::vector<double> g(offsets.size() - 1, 0.0);
  for (size_t i = 0; i + 1 < offsets.size(); ++i)
    for (size_t r = offsets[i]; r < offsets[i + 1]; ++r) g[i] += pred[r];
  return g;
}

/// Ansor's XGBoost cost model: pack-sum objective through the custom-gradient API, early stop
/// after 50 rounds without improvement of the training p-rmse.
std::shared_ptr<XgbModel> xgb_train(const cost::GbdtDataset& data, const Settings& s) {
  auto m = std::make_shared<XgbModel>();
  DMatrixHandle dtrain;
  const size_t rows = data.num_rows();
  xgb_check(XGDMatrixCreateFromMat(data.features.data(), rows,
                                   static_cast<bst_ulong>(data.num_features),
                                   std::numeric_limits<float>::quiet_NaN(), &dtrain));
  xgb_check(XGBoosterCreate(&dtrain, 1, &m->booster));
  const std::pair<const char*, std::string> params[] = {{"max_depth", "10"},
                                                        {"gamma", "0.001"},
                                                        {"min_child_weight", "0"},
                                                        {"eta", "0.2"},
                                                        {"nthread", "1"},
                                                        {"seed", "43"},
                                                        {"disable_default_eval_metric", "1"},
                                                        {"verbosity", "0"},
                                                        {"tree_method", s.xgb_tree_method},
                                                        {"max_bin", std::to_string(s.xgb_max_bin)}};
  for (const auto& [k, v] : params) xgb_check(XGBoosterSetParam(m->booster, k, v.c_str()));
  // XGBoost starts every row at base_score 0.5, i.e. a program of n rows at n / 2, far above
  // labels in [0, 1]; with w = y the failed and slow programs (weight ~0) are never pulled
  // back, and training crawls for thousands of rounds. Start where loom's Gbdt starts: the
  // weighted least-squares constant of the pack-sum objective, Σ w·n·y / Σ w·n².
  {
    double num = 0, den = 0;
    for (size_t g = 0; g < data.num_groups(); ++g) {
      const double nr = static_cast<double>(data.group_offsets[g + 1] - data.group_offsets[g]);
      num += data.weights[g] * nr * data.labels[g];
      den += data.weights[g] * nr * nr;
    }
    const std::string base = std::to_string(den > 0 ? num / den : 0.0);
    xgb_check(XGBoosterSetParam(m->booster, "base_score", base.c_str()));
  }
  const size_t groups = data.num_groups();
  std::vector<float> grad(rows), hess(rows);
  double best_rmse = kInf;
  for (int round = 0; round < 10000; ++round) {
    // Predictions with `round` trees (XGBoost caches them for the training matrix; with no
    // tree yet they are the base score).
    const std::vector<double> sums =
        xgb_group_predict(m->booster, dtrain, data.group_offsets, 0, true);
    double se = 0;
    for (size_t g = 0; g < groups; ++g)
      se += (sums[g] - data.labels[g]) * (sums[g] - data.labels[g]);
    const double rmse = std::sqrt(se / static_cast<double>(groups));
    if (round > 0 && rmse < best_rmse) {
      best_rmse = rmse;
      m->best_rounds = round;
    } else if (round > 0 && round - m->best_rounds >= 50) {
      break;
    }
    for (size_t g = 0; g < groups; ++g)
      for (size_t r = data.group_offsets[g]; r < data.group_offsets[g + 1]; ++r) {
        grad[r] = static_cast<float>((sums[g] - data.labels[g]) * data.weights[g]);
        hess[r] = static_cast<float>(data.weights[g]);
      }
    xgb_check(XGBoosterBoostOneIter(m->booster, dtrain, grad.data(), hess.data(), rows));
    m->rounds = round + 1;
  }
  if (m->best_rounds == 0) m->best_rounds = m->rounds;
  XGDMatrixFree(dtrain);
  if (std::getenv("LOOM_BENCH_VERBOSE"))
    std::fprintf(stderr, "xgboost: %d trees kept of %d grown, train p-rmse %.5f\n", m->best_rounds,
                 m->rounds, best_rmse);
  return m;
}

/// Scores with the best round's trees.
std::vector<double> xgb_predict(const XgbModel& m, const std::vector<float>& values,
                                const std::vector<size_t>& offsets) {
  DMatrixHandle dtest;
  xgb_check(XGDMatrixCreateFromMat(values.data(), values.size() / cost::kNumFeatures,
                                   cost::kNumFeatures, std::numeric_limits<float>::quiet_NaN(),
                                   &dtest));
  auto g = xgb_group_predict(m.booster, dtest, offsets, m.best_rounds, false);
  XGDMatrixFree(dtest);
  return g;
}

/// One row per program: the sum of its rows (groups of one row).
Rows summed(const Rows& r) {
  Rows s;
  s.with_rows = r.with_rows;
  for (size_t g = 0; g + 1 < r.offsets.size(); ++g) {
    std::vector<float> row(cost::kNumFeatures, 0.0f);
    for (size_t i = r.offsets[g]; i < r.offsets[g + 1]; ++i)
      for (int f = 0; f < cost::kNumFeatures; ++f) row[f] += r.values[i * cost::kNumFeatures + f];
    s.values.insert(s.values.end(), row.begin(), row.end());
    s.offsets.push_back(g + 1);
  }
  return s;
}

Trainer xgb_trainer(const Dataset& d, const Settings& s, bool sum_rows) {
  return [&d, &s, sum_rows](const std::vector<size_t>& idx) -> Predictor {
    cost::GbdtDataset data = packsum_dataset(d, idx, true);
    if (sum_rows) {
      Rows r;
      r.values = data.features;
      r.offsets = data.group_offsets;
      const Rows sr = summed(r);
      data.features = sr.values;
      data.group_offsets = sr.offsets;
    }
    auto model = xgb_train(data, s);
    return [&d, model, sum_rows](const std::vector<size_t>& test) {
      Rows r = rows_of(d, test);
      if (sum_rows) r = summed(r);
      return scatter(r, xgb_predict(*model, r.values, r.offsets), test.size());
    };
  };
}
#endif

/// The programs' features as cost::CostModel wants them.
std::vector<cost::ProgramFeatures> features_of(const Dataset& d, const std::vector<size_t>& idx) {
  std::vector<cost::ProgramFeatures> f;
  f.reserve(idx.size());
  for (size_t i : idx) f.push_back(d.programs[i].features);
  return f;
}

Trainer random_trainer(const Dataset& d) {
  return [&d](const std::vector<size_t>&) -> Predictor {
    auto model = std::make_shared<cost::RandomCostModel>(43);
    return [&d, model](const std::vector<size_t>& test) {
      return model->predict(features_of(d, test));
    };
  };
}

cost::AnalyticCostModel roofline_model() {
  std::vector<int> flops(cost::kFloatOpFeatures.begin(), cost::kFloatOpFeatures.end());
  std::vector<int> bytes;
  for (int b = 0; b < cost::kMaxFeatureBuffers; ++b)
    bytes.push_back(cost::buffer_feature(b, cost::kBufferBytes));
  return cost::AnalyticCostModel::roofline(flops, bytes);
}

Trainer roofline_trainer(const Dataset& d) {
  return [&d](const std::vector<size_t>&) -> Predictor {
    auto model = std::make_shared<cost::AnalyticCostModel>(roofline_model());
    return [&d, model](const std::vector<size_t>& test) {
      return model->predict(features_of(d, test));
    };
  };
}

// --- evaluation ----------------------------------------------------------------------------------

struct Metrics {
  double pairwise = 0, recall = 0, peak = 0;
  int workloads = 0;
};

/// Metrics of `scores` (one per program of `test`) per workload, and their mean.
Metrics evaluate(const Dataset& d, const std::vector<size_t>& test,
                 const std::vector<double>& scores, std::vector<Metrics>* per_workload = nullptr) {
  Metrics mean;
  for (size_t w = 0; w < d.workloads.size(); ++w) {
    std::vector<double> s, y;
    for (size_t k = 0; k < test.size(); ++k)
      if (d.programs[test[k]].workload == static_cast<int>(w)) {
        s.push_back(scores[k]);
        y.push_back(d.programs[test[k]].label);
      }
    if (s.empty()) continue;
    Metrics m;
    m.pairwise = cost::pairwise_accuracy(s, y);
    const size_t k =
        std::max<size_t>(1, static_cast<size_t>(std::lround(kRecallFraction * s.size())));
    m.recall = cost::recall_at_k(s, y, k);
    m.peak = cost::average_peak_score(s, y, kPeakN);
    m.workloads = 1;
    if (per_workload) per_workload->push_back(m);
    mean.pairwise += m.pairwise;
    mean.recall += m.recall;
    mean.peak += m.peak;
    ++mean.workloads;
  }
  if (mean.workloads) {
    mean.pairwise /= mean.workloads;
    mean.recall /= mean.workloads;
    mean.peak /= mean.workloads;
  }
  return mean;
}

void print_row(const std::string& model, const Metrics& m, double train_s) {
  std::printf("  %-12s %8.4f %10.4f %9.4f %9.2f\n", model.c_str(), m.pairwise, m.recall, m.peak,
              train_s);
}

Settings parse(int argc, char** argv, std::string& path) {
  Settings s;
  s.gbdt.num_threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (eq == std::string::npos) {
      path = a;
      continue;
    }
    const std::string k = a.substr(0, eq), v = a.substr(eq + 1);
    const double x = std::atof(v.c_str());
    if (k == "gbdt.max_bins")
      s.gbdt.max_bins = static_cast<int>(x);
    else if (k == "gbdt.max_depth")
      s.gbdt.max_depth = static_cast<int>(x);
    else if (k == "gbdt.eta")
      s.gbdt.learning_rate = x;
    else if (k == "gbdt.lambda")
      s.gbdt.lambda = x;
    else if (k == "gbdt.gamma")
      s.gbdt.gamma = x;
    else if (k == "gbdt.min_child_weight")
      s.gbdt.min_child_weight = x;
    else if (k == "gbdt.colsample")
      s.gbdt.colsample = x;
    else if (k == "gbdt.subsample")
      s.gbdt.subsample = x;
    else if (k == "gbdt.early_stopping")
      s.gbdt.early_stopping_rounds = static_cast<int>(x);
    else if (k == "gbdt.weight")
      s.gbdt_weight_by_y = v == "y";
    else if (k == "gbdt.label")
      s.gbdt_label = v;
    else if (k == "xgb.tree_method")
      s.xgb_tree_method = v;
    else if (k == "xgb.max_bin")
      s.xgb_max_bin = static_cast<int>(x);
    else if (k == "parts")
      s.parts = v;
    else if (k == "dump")
      s.dump = v;
    else if (k == "logs")
      s.logs = v;
    else if (k == "gpu_logs")
      s.gpu_logs = v;
    else if (k == "save")
      s.save = v;
    else if (k == "models") {
      s.models.clear();
      std::stringstream ss(v);
      std::string m;
      while (std::getline(ss, m, ',')) s.models.push_back(m);
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return s;
}

/// One line per feature row: program index, workload, measured seconds, label, the row's values.
void dump_rows(const Dataset& d, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  for (size_t i = 0; i < d.programs.size(); ++i) {
    const Program& p = d.programs[i];
    for (int r = 0; r < p.features.num_rows; ++r) {
      std::fprintf(f, "%zu\t%s\t%g\t%g", i,
                   d.workloads[static_cast<size_t>(p.workload)].name.c_str(), p.cost, p.label);
      const float* row = cost::feature_row(p.features, r);
      for (int k = 0; k < p.features.num_features; ++k) std::fprintf(f, "\t%g", row[k]);
      std::fprintf(f, "\n");
    }
  }
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = LOOM_COST_DATASET;
  const Settings settings = parse(argc, argv, path);
  const Dataset d = load(path, settings.logs, settings.gpu_logs);
  // Model gbdt-ansor learns from Ansor's features alone: loom's later ones (tensor-core
  // multiply-adds, pipelining, shared bytes) set to 0, which no tree splits on, as
  // GbdtCostModelOptions::num_features = kNumAnsorFeatures does in the tuner.
  Dataset ansor_only = d;
  for (Program& p : ansor_only.programs)
    for (int r = 0; r < p.features.num_rows; ++r)
      for (int k = cost::kNumAnsorFeatures; k < cost::kNumFeatures; ++k)
        p.features.values[static_cast<size_t>(r) * cost::kNumFeatures + static_cast<size_t>(k)] = 0;
  const size_t n = d.programs.size();
  if (!settings.dump.empty()) dump_rows(d, settings.dump);
  if (!settings.save.empty()) {
    // The tuner's model as the tuner trains it (labels: throughput relative to the workload's
    // best), on everything; warm-up off, so that it trains at once.
    cost::GbdtCostModelOptions o;
    o.warmup_samples = 0;
    cost::GbdtCostModel model(o);
    std::vector<cost::ProgramFeatures> features;
    std::vector<double> labels;
    for (const Program& p : d.programs) {
      features.push_back(p.features);
      labels.push_back(p.label);
    }
    const auto t0 = std::chrono::steady_clock::now();
    model.update(features, labels);
    std::ofstream out(settings.save);
    model.save(out);
    out.close();
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", settings.save.c_str());
      return 1;
    }
    std::printf("saved the model trained on %zu programs to %s (%.1f s)\n", features.size(),
                settings.save.c_str(), seconds_since(t0));
  }

  std::vector<std::pair<std::string, Trainer>> models;
  for (const std::string& m : settings.models) {
    if (m == "gbdt")
      models.emplace_back(m, gbdt_trainer(d, settings));
    else if (m == "gbdt-ansor")
      models.emplace_back(m, gbdt_trainer(ansor_only, settings));
#if defined(LOOM_BENCH_HAVE_XGBOOST)
    else if (m == "xgb-packsum")
      models.emplace_back(m, xgb_trainer(d, settings, false));
    else if (m == "xgb-sumrows")
      models.emplace_back(m, xgb_trainer(d, settings, true));
#else
    else if (m == "xgb-packsum" || m == "xgb-sumrows")
      std::printf("(%s: built without XGBoost)\n", m.c_str());
#endif
    else if (m == "random")
      models.emplace_back(m, random_trainer(d));
    else if (m == "roofline")
      models.emplace_back(m, roofline_trainer(d));
    else
      std::printf("(unknown model %s)\n", m.c_str());
  }
  std::printf(
      "gbdt params: depth %d, eta %g, lambda %g, gamma %g, min_child_weight %g, bins %d, "
      "colsample %g, subsample %g, early stop %d, weight %s; xgboost tree_method %s, max_bin %d\n",
      settings.gbdt.max_depth, settings.gbdt.learning_rate, settings.gbdt.lambda,
      settings.gbdt.gamma, settings.gbdt.min_child_weight, settings.gbdt.max_bins,
      settings.gbdt.colsample, settings.gbdt.subsample, settings.gbdt.early_stopping_rounds,
      settings.gbdt_weight_by_y ? "y" : "1", settings.xgb_tree_method.c_str(),
      settings.xgb_max_bin);
  const char* header = "  model        pairwise recall@10%% a-peak@32   train_s\n";

  if (settings.has("random")) {
    // (a) random 80/20 split by program (Fisher-Yates on raw engine output: portable).
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::mt19937_64 rng(kSplitSeed);
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    const size_t n_test = static_cast<size_t>(kTestFraction * static_cast<double>(n));
    std::vector<size_t> test(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_test));
    std::vector<size_t> train(order.begin() + static_cast<std::ptrdiff_t>(n_test), order.end());
    std::sort(test.begin(), test.end());
    std::sort(train.begin(), train.end());
    std::printf(
        "\n(a) random split: %zu train / %zu test programs (seed %llu); metrics per workload, "
        "averaged over the %zu workloads\n",
        train.size(), test.size(), static_cast<unsigned long long>(kSplitSeed), d.workloads.size());
    std::printf(header);
    for (const auto& [name, trainer] : models) {
      const auto t0 = std::chrono::steady_clock::now();
      const Predictor p = trainer(train);
      const double train_s = seconds_since(t0);
      std::vector<Metrics> per;
      print_row(name, evaluate(d, test, p(test), &per), train_s);
      std::printf("      pairwise per workload:");
      for (const Metrics& m : per) std::printf(" %.3f", m.pairwise);
      std::printf("\n");
    }
  }
  if (settings.has("lowo")) {
    // (b) leave one workload out.
    std::printf("\n(b) leave-one-workload-out: train on %zu workloads, test on the other\n",
                d.workloads.size() - 1);
    std::map<std::string, Metrics> lowo_mean;
    for (size_t w = 0; w < d.workloads.size(); ++w) {
      std::vector<size_t> tr, te;
      for (size_t i = 0; i < n; ++i)
        (d.programs[i].workload == static_cast<int>(w) ? te : tr).push_back(i);
      std::printf(" held out %s (%zu test programs)\n", d.workloads[w].name.c_str(), te.size());
      std::printf(header);
      for (const auto& [name, trainer] : models) {
        const auto t0 = std::chrono::steady_clock::now();
        const Predictor p = trainer(tr);
        const double train_s = seconds_since(t0);
        const Metrics m = evaluate(d, te, p(te));
        print_row(name, m, train_s);
        Metrics& acc = lowo_mean[name];
        acc.pairwise += m.pairwise / static_cast<double>(d.workloads.size());
        acc.recall += m.recall / static_cast<double>(d.workloads.size());
        acc.peak += m.peak / static_cast<double>(d.workloads.size());
      }
    }
    std::printf(" mean over the held-out workloads\n");
    std::printf(header);
    for (const auto& [name, trainer] : models) print_row(name, lowo_mean[name], 0.0);
  }
  if (!settings.has("timing")) return 0;
  // Timings on the full data set, one thread.
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  const Rows rows = rows_of(d, all);
  const size_t n_rows = rows.values.size() / cost::kNumFeatures;
  std::printf("\ntimings on the full data set (%zu programs, %zu rows), one thread\n", n, n_rows);
  for (const auto& [name, trainer] : models) {
    if (name == "random" || name == "roofline") continue;
    const auto t0 = std::chrono::steady_clock::now();
    const Predictor p = trainer(all);
    const double train_s = seconds_since(t0);
    const int reps = 5;
    const auto t1 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) (void)p(all);
    const double pred_s = seconds_since(t1) / reps;
    std::printf(
        "  %-12s train %.2f s, predict %.1f ms for all = %.0f programs/s, %.0f rows/s "
        "(incl. gathering the rows)\n",
        name.c_str(), train_s, pred_s * 1e3, static_cast<double>(n) / pred_s,
        static_cast<double>(n_rows) / pred_s);
  }
  {
    cost::GbdtDataset data = packsum_dataset(d, all, settings.gbdt_weight_by_y);
    const cost::Gbdt g = cost::Gbdt::train(data, settings.gbdt);
    const auto& info = g.train_info();
    std::vector<float> out(n_rows);
    const auto t1 = std::chrono::steady_clock::now();
    for (int r = 0; r < 10; ++r) g.predict_rows(rows.values.data(), n_rows, out.data());
    const double s = seconds_since(t1) / 10;
    std::printf(
        "  gbdt: %d trees kept of %d grown, train p-rmse %.4f; predict_rows alone %.0f rows/s\n",
        info.best_rounds, info.rounds_trained, info.best_rmse, static_cast<double>(n_rows) / s);
  }
  return 0;
}
