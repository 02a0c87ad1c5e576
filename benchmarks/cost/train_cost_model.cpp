// Trains loom's pretrained CPU cost model (include/loom/cost/pretrained/cpu.model, read by
// cost/pretrained.hpp) from the tuning logs of whole networks, and measures how well it ranks
// programs of workloads it never saw (benchmarks/README.md, "Pretrained cost model";
// scripts/train-cost-model.sh regenerates the shipped file).
//
// Samples are made as a tuning run makes them for its own GbdtCostModel (search/impl/tuner.ipp),
// so that the shipped model learns exactly what the tuner's model learns, only from more tasks:
//  - a record belongs to the network task with its workload key and target; its steps are
//    replayed on that task's DAG (sched::replay) and featurized with cost::extract_features(
//    states, task.target), the tuner's call;
//  - records are grouped by (network, workload, threads, device, cold weights): the setting a
//    resumed tuning run takes as its own. A record's label is the group's best mean cost over
//    its own mean cost, 0 for a failed measurement, and the GbdtCostModel weighs it by that label
//    (Ansor's w = y), with its default parameters.
// A network's logs are read together and a line they share counts once: a 1-thread log that
// resumed from the 2-thread log holds a copy of it.
//
// --evaluate measures, per test group (a workload in one setting), the metrics of cost/model.hpp:
//  (a) leave-one-network-out: trained on four networks, tested on the fifth. Training leaves out
//      every group whose workload the tested network also has (ResNet-18 and ResNet-50 share
//      seven), so that no tested workload was seen;
//  (b) trained on all networks, tested on data no network log holds: the logs of
//      benchmarks/tune/tune_workloads.hpp (--heldout DIR, one file per workload) and the random
//      programs of tests/data/cost/measurements.tsv.gz (--measurements; bench_cost_model's data
//      set, 1 thread), the latter also as bench_cost_model reports it: means over its six
//      workloads, recall at 10 % of each workload's programs;
//  (fit) the model of (b) on its own training groups: how much of what it learned carries over.
// Metrics per group: pairwise accuracy, recall@8, a-peak@32, and top-1 (the label of the
// model's first pick: what a compilation from the model alone would get, as a fraction of the
// best program measured). Each table row gives their medians over the groups (and the pairwise
// mean), beside the same for random scores: in a tuning log most programs are near the best,
// so a random pick scores high on a-peak and top-1 there.
//
// Usage: train_cost_model [options] MODEL.onnx LOG.jsonl [MODEL.onnx LOG.jsonl ...]
//   A network is named after its model file (resnet50.onnx: resnet50); pairs that name the same
//   model add logs to one network, imported once.
//   --out PATH          write the model trained on every log (GbdtCostModel::save)
//   --evaluate          run (a), and (b) on the held-out data given
//   --heldout DIR       tune_workloads logs DIR/<workload>.jsonl (repeatable)
//   --picks DIR         collect_model_picks logs DIR/<workload>.jsonl (repeatable: one per
//                       round), trained on as one more family, "picks" (in (a) also left out
//                       and tested on: how the networks' model ranks programs its own search
//                       picks at new shapes)
//   --measurements PATH the measured data set (default: the checked-in one)
//   --max-per-group N   keep at most N samples per group, drawn with a fixed seed (default 2000;
//                       0: all)
//   --dim NAME=N        value of a symbolic dimension of the models (loomc's --dim)
//   --gbdt KEY=VALUE    a GbdtParams field: max_depth, learning_rate, max_rounds,
//                       early_stopping_rounds, validation_fraction, max_bins, lambda, gamma,
//                       min_child_weight, colsample, subsample, seed
//   --threads N         threads for replay and feature extraction (default: loom's compile
//                       threads); the results do not depend on it
//   --verbose           one line per test group
// A plain program, not a Google Benchmark: the numbers are accuracies and sample counts.
#include "../tune/tune_workloads.hpp"
#include "cost_workloads.hpp"
#include "pick_workloads.hpp"
#include "gz_io.hpp"

#include <loom/compile_threads.hpp>
#include <loom/cost/features.hpp>
#include <loom/cost/model.hpp>
#include <loom/onnx.hpp>
#include <loom/sched/record.hpp>
#include <loom/sched/state.hpp>
#include <loom/search/records.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#ifndef LOOM_COST_DATASET
#define LOOM_COST_DATASET "tests/data/cost/measurements.tsv.gz"
#endif

namespace {

using namespace loom;

constexpr uint64_t kCapSeed = 20261127;  // which samples a capped group keeps
constexpr size_t kRecallK = 8;           // the programs a tuning run ranks again at its end
constexpr size_t kPeakN = 32;            // Ansor's a-peak@32
constexpr double kRecallFraction = 0.1;  // bench_cost_model's recall@10 %
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "train_cost_model: %s\n", message.c_str());
  std::exit(2);
}

// --- samples -------------------------------------------------------------------------------------

/// The programs of one workload measured in one setting, labelled against their best.
struct Group {
  std::string family;  ///< the network, or the held-out set
  std::string name;    ///< what the tables print: task name and setting
  std::string workload_key;
  std::vector<cost::ProgramFeatures> features;
  std::vector<double> labels;
};

/// What happened to the records of one family on their way to samples.
struct Counts {
  size_t records = 0;       ///< lines read
  size_t duplicates = 0;    ///< lines another log of the family holds too
  size_t unmatched = 0;     ///< no task of the model has the record's workload and target
  size_t not_replayed = 0;  ///< the steps no longer replay on the task's DAG
  size_t failed = 0;        ///< failed measurements (label 0, weight 0: never learned from)
  size_t no_rows = 0;       ///< lowering failed: no features (never learned from)
  size_t capped = 0;        ///< dropped by --max-per-group
  size_t samples = 0;       ///< kept, with rows
  size_t bad_lines = 0;     ///< lines read_records rejected (torn, another format version)
};

struct Family {
  std::string name;
  std::vector<Group> groups;
  Counts counts;
};

/// 64-bit FNV-1a: a seed from a name that is the same with every standard library (std::hash
/// is not).
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

/// Keeps at most `cap` of [0, n), drawn by a Fisher-Yates pass over the raw output of a seeded
/// std::mt19937_64 (portable, unlike the standard distributions), in their original order.
std::vector<size_t> capped_indices(size_t n, size_t cap, uint64_t seed) {
  std::vector<size_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = i;
  if (cap == 0 || n <= cap) return idx;
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < cap; ++i) std::swap(idx[i], idx[i + rng() % (n - i)]);
  idx.resize(cap);
  std::sort(idx.begin(), idx.end());
  return idx;
}

/// The measured records of one task in one setting: replayed (in parallel), labelled as the
/// tuner labels them (Samples::labels in search/impl/tuner.ipp: over the replayed records),
/// capped, and featurized with the tuner's call.
Group make_group(const Task& task, const std::vector<search::TuningRecord>& records, size_t cap,
                 Counts& counts) {
  std::vector<std::optional<sched::State>> replayed(records.size());
  loom::detail::parallel_chunks(records.size(), records.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      try {
        replayed[i] = sched::replay(task.dag, records[i].steps);
      } catch (const loom::error&) {
        // The search space or the DAG changed since the log was written: the tuner skips it too.
      }
    }
  });
  std::vector<sched::State> states;
  std::vector<double> costs;
  for (size_t i = 0; i < records.size(); ++i) {
    if (!replayed[i]) {
      ++counts.not_replayed;
      continue;
    }
    states.push_back(std::move(*replayed[i]));
    costs.push_back(records[i].result.mean_cost());
  }
  Group g;
  g.workload_key = task.workload_key();
  if (states.empty()) return g;
  const double best = *std::min_element(costs.begin(), costs.end());
  const std::vector<size_t> keep =
      capped_indices(states.size(), cap, kCapSeed ^ fnv1a(g.workload_key));
  counts.capped += states.size() - keep.size();
  std::vector<sched::State> kept;
  for (size_t i : keep) {
    kept.push_back(std::move(states[i]));
    const bool ok = costs[i] < search::kFailedCost;
    counts.failed += !ok;
    g.labels.push_back(ok ? best / costs[i] : 0.0);
  }
  g.features = cost::extract_features(kept, task.target);
  for (const cost::ProgramFeatures& f : g.features)
    (f.num_rows > 0 ? counts.samples : counts.no_rows)++;
  return g;
}

/// The setting a record was measured in; a resumed tuning run learns only from its own.
using Setting = std::tuple<int, std::string, bool>;  // threads, device, cold weights

std::string setting_name(const Setting& s) {
  const auto& [threads, device, cold] = s;
  return std::to_string(threads) + "t" + (cold ? " cold" : " warm") +
         (device.empty() ? "" : " " + device);
}

/// Groups `records` of the tasks `tasks` (by workload key; the target must match too) by task and
/// setting, in order of task and setting, and makes each a Group of `family`.
void add_groups(Family& family, const std::vector<Task>& tasks,
                std::vector<search::TuningRecord> records, size_t cap,
                const std::function<std::string(const Task&, const Setting&)>& group_label) {
  std::map<std::string, size_t> task_of;
  for (size_t t = 0; t < tasks.size(); ++t) task_of.emplace(tasks[t].workload_key(), t);
  std::map<std::pair<size_t, Setting>, std::vector<search::TuningRecord>> by_group;
  for (search::TuningRecord& r : records) {
    const auto it = task_of.find(r.workload_key);
    if (it == task_of.end() || r.target != tasks[it->second].target.to_string()) {
      ++family.counts.unmatched;
      continue;
    }
    by_group[{it->second, Setting{r.threads, r.device, r.cold_constants}}].push_back(std::move(r));
  }
  for (const auto& [key, rs] : by_group) {
    const Task& task = tasks[key.first];
    Group g = make_group(task, rs, cap, family.counts);
    g.family = family.name;
    g.name = group_label(task, key.second);
    if (!g.labels.empty()) family.groups.push_back(std::move(g));
  }
}

/// Reads a log, counting the lines read_records skips.
std::vector<search::TuningRecord> read_log(const std::string& path, Counts& counts) {
  if (!std::ifstream(path)) fail("cannot read " + path);
  return search::read_records(path, [&](const std::string& warning) {
    ++counts.bad_lines;
    std::fprintf(stderr, "warning: %s\n", warning.c_str());
  });
}

/// One network: its model imported once, the records of all its logs (a line that several logs
/// hold counts once).
Family load_network(const std::string& name, const std::string& model,
                    const std::vector<std::string>& logs, const OnnxOptions& onnx, size_t cap) {
  const auto t0 = std::chrono::steady_clock::now();
  Family f;
  f.name = name;
  const OnnxModel m = import_onnx(model, onnx);
  std::vector<Task> tasks;
  // What loom::tune(network) tunes (impl/network.ipp): each task's DAG for the host.
  for (const net::NetworkTask& t : m.network->tasks()) tasks.emplace_back(t.dag, Target::host());
  std::vector<search::TuningRecord> records;
  std::unordered_set<std::string> seen;
  for (const std::string& log : logs)
    for (search::TuningRecord& r : read_log(log, f.counts)) {
      ++f.counts.records;
      if (!seen.insert(search::to_json_line(r)).second) {
        ++f.counts.duplicates;
        continue;
      }
      records.push_back(std::move(r));
    }
  add_groups(f, tasks, std::move(records), cap, [](const Task& t, const Setting& setting) {
    // As the tuner names a task in its progress lines (search::task_name).
    const auto& outputs = t.dag->outputs();
    return (outputs.empty() ? std::string("task") : outputs.front().name()) + "@" +
           t.workload_key().substr(0, 8) + " " + setting_name(setting);
  });
  std::printf("  %-13s %3zu tasks, %zu groups, %zu samples (%.0f s)\n", name.c_str(), tasks.size(),
              f.groups.size(), f.counts.samples, seconds_since(t0));
  std::fflush(stdout);
  return f;
}

/// The tune_workloads logs in `dirs` (DIR/<workload>.jsonl of tune_workloads.hpp's registries),
/// one group per directory, workload and setting.
Family load_tune_logs(const std::vector<std::string>& dirs) {
  Family f;
  f.name = "tune_workloads";
  std::vector<loom_bench::TuneWorkload> workloads = loom_bench::tune_workloads();
  for (auto& w : loom_bench::transfer_workloads()) workloads.push_back(std::move(w));
  for (const std::string& dir : dirs)
    for (const loom_bench::TuneWorkload& w : workloads) {
      const std::string path = dir + "/" + w.name + ".jsonl";
      if (!std::filesystem::exists(path)) continue;
      std::vector<search::TuningRecord> records = read_log(path, f.counts);
      f.counts.records += records.size();
      const std::string label = std::filesystem::path(dir).filename().string() + "/" + w.name;
      add_groups(f, {w.make()}, std::move(records), 0, [&](const Task&, const Setting& setting) {
        return label + " " + setting_name(setting);
      });
    }
  return f;
}

/// The model's own picks (collect_model_picks) at the shapes of cost/pick_workloads.hpp: one
/// group per workload and setting, the logs of every directory (one per collection round)
/// together, so that each pick is labelled against the best of all rounds.
Family load_pick_logs(const std::vector<std::string>& dirs, size_t cap) {
  Family f;
  f.name = "picks";
  for (const loom_bench::TuneWorkload& w : loom_bench::pick_workloads()) {
    std::vector<search::TuningRecord> records;
    for (const std::string& dir : dirs) {
      const std::string path = dir + "/" + w.name + ".jsonl";
      if (!std::filesystem::exists(path)) continue;
      for (search::TuningRecord& r : read_log(path, f.counts)) records.push_back(std::move(r));
    }
    if (records.empty()) continue;
    f.counts.records += records.size();
    add_groups(f, {w.make()}, std::move(records), cap, [&](const Task&, const Setting& setting) {
      return "picks/" + w.name + " " + setting_name(setting);
    });
  }
  return f;
}

/// bench_cost_model's data set: `workload \t seconds \t record` per line, 1 thread, one group
/// per workload, labelled as bench_cost_model labels it (workload's best / cost, 0 for inf).
Family load_measurements(const std::string& path) {
  Family f;
  f.name = "measurements";
  const std::string text = loom_bench::read_gz(path);
  if (text.empty()) fail("cannot read " + path + " (scripts/make-cost-dataset.sh writes it)");
  const std::vector<loom_bench::CostWorkload> workloads = loom_bench::cost_workloads();
  std::map<std::string, size_t> index;
  for (size_t w = 0; w < workloads.size(); ++w) index.emplace(workloads[w].name, w);
  std::vector<std::vector<search::TuningRecord>> per_workload(workloads.size());
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++f.counts.records;
    const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    const auto it = t2 == std::string::npos ? index.end() : index.find(line.substr(0, t1));
    if (it == index.end()) {
      ++f.counts.unmatched;
      continue;
    }
    search::TuningRecord r;
    r.workload_key = workloads[it->second].task.workload_key();
    r.target = workloads[it->second].task.target.to_string();
    r.threads = 1;
    const std::string seconds = line.substr(t1 + 1, t2 - t1 - 1);
    if (seconds == "inf") {
      r.result.error = search::MeasureError::unknown;
    } else {
      r.result.costs = {std::strtod(seconds.c_str(), nullptr)};
    }
    try {
      r.steps = sched::from_record(line.substr(t2 + 1));
    } catch (const loom::error&) {
      ++f.counts.not_replayed;
      continue;
    }
    per_workload[it->second].push_back(std::move(r));
  }
  for (size_t w = 0; w < workloads.size(); ++w)
    add_groups(f, {workloads[w].task}, std::move(per_workload[w]), 0,
               [&](const Task&, const Setting&) { return workloads[w].name; });
  return f;
}

// --- training and evaluation ---------------------------------------------------------------------

/// Trains a GbdtCostModel on `groups` as a tuner would with all of them in its log: one update.
std::unique_ptr<cost::GbdtCostModel> train(const std::vector<const Group*>& groups,
                                           const cost::GbdtParams& params, double* seconds) {
  cost::GbdtCostModelOptions options;
  options.params = params;
  options.warmup_samples = 0;
  std::vector<cost::ProgramFeatures> features;
  std::vector<double> labels;
  for (const Group* g : groups) {
    features.insert(features.end(), g->features.begin(), g->features.end());
    labels.insert(labels.end(), g->labels.begin(), g->labels.end());
  }
  auto model = std::make_unique<cost::GbdtCostModel>(options);
  const auto t0 = std::chrono::steady_clock::now();
  model->update(features, labels);
  if (seconds) *seconds = seconds_since(t0);
  return model;
}

struct Metrics {
  double pairwise = kNaN, recall = kNaN, peak = kNaN, top1 = kNaN, recall_tenth = kNaN;
};

Metrics evaluate(const cost::CostModel& model, const Group& g) {
  const std::vector<double> scores = model.predict(g.features);
  Metrics m;
  m.pairwise = cost::pairwise_accuracy(scores, g.labels);
  m.recall = cost::recall_at_k(scores, g.labels, kRecallK);
  m.peak = cost::average_peak_score(scores, g.labels, kPeakN);
  // What a compilation from the model alone would get: its first pick's speed against the best.
  m.top1 = cost::average_peak_score(scores, g.labels, 1);
  m.recall_tenth = cost::recall_at_k(
      scores, g.labels,
      std::max<size_t>(1, static_cast<size_t>(std::lround(kRecallFraction * g.labels.size()))));
  return m;
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  double s = 0;
  size_t n = 0;
  for (double x : v)
    if (!std::isnan(x)) s += x, ++n;
  return n ? s / static_cast<double>(n) : kNaN;
}

std::vector<double> column(const std::vector<Metrics>& ms, double Metrics::* field) {
  std::vector<double> v;
  for (const Metrics& m : ms) v.push_back(m.*field);
  return v;
}

/// The metrics of a model and of random scores (the bar any model must clear: with the labels
/// of a tuning log, most programs are near the best, and a random pick is a good one) on the
/// same test groups.
struct Scores {
  std::vector<Metrics> model, random;
  size_t programs = 0;

  void append(const Scores& o) {
    model.insert(model.end(), o.model.begin(), o.model.end());
    random.insert(random.end(), o.random.begin(), o.random.end());
    programs += o.programs;
  }
};

/// Evaluates `model` and random scores on every group of `test`; with `verbose`, one line per
/// group.
Scores evaluate_groups(const cost::CostModel& model, const std::vector<const Group*>& test,
                       bool verbose) {
  const cost::RandomCostModel random(43);
  Scores s;
  for (const Group* g : test) {
    s.model.push_back(evaluate(model, *g));
    s.random.push_back(evaluate(random, *g));
    s.programs += g->labels.size();
    const Metrics& m = s.model.back();
    if (verbose)
      std::printf("      %-58s %5zu  pairwise %.3f  recall@8 %.3f  a-peak@32 %.3f  top-1 %.3f\n",
                  g->name.c_str(), g->labels.size(), m.pairwise, m.recall, m.peak, m.top1);
  }
  return s;
}

void print_table_header() {
  std::printf(
      "| test set | groups | programs | pairwise | recall@8 | a-peak@32 | top-1 | random: "
      "pairwise, recall@8, a-peak@32, top-1 |\n|---|---|---|---|---|---|---|---|\n");
}

/// One table row: medians over the groups (the pairwise mean in parentheses).
void print_row(const std::string& name, const Scores& s) {
  const auto& m = s.model;
  const auto& r = s.random;
  std::printf(
      "| %-14s | %3zu | %6zu | %.3f (%.3f) | %.3f | %.3f | %.3f | %.3f, %.3f, %.3f, %.3f |\n",
      name.c_str(), m.size(), s.programs, median(column(m, &Metrics::pairwise)),
      mean(column(m, &Metrics::pairwise)), median(column(m, &Metrics::recall)),
      median(column(m, &Metrics::peak)), median(column(m, &Metrics::top1)),
      median(column(r, &Metrics::pairwise)), median(column(r, &Metrics::recall)),
      median(column(r, &Metrics::peak)), median(column(r, &Metrics::top1)));
  std::fflush(stdout);
}

struct Settings {
  std::vector<std::pair<std::string, std::vector<std::string>>> networks;  // model, logs
  std::string out;
  bool evaluate = false;
  std::vector<std::string> heldout;
  std::vector<std::string> picks;
  std::string measurements = LOOM_COST_DATASET;
  size_t max_per_group = 2000;
  OnnxOptions onnx;
  cost::GbdtParams params;
  int threads = 0;
  bool verbose = false;
};

void set_param(cost::GbdtParams& p, const std::string& kv) {
  const size_t eq = kv.find('=');
  if (eq == std::string::npos) fail("--gbdt wants KEY=VALUE, got '" + kv + "'");
  const std::string k = kv.substr(0, eq);
  const double v = std::atof(kv.c_str() + eq + 1);
  if (k == "max_depth")
    p.max_depth = static_cast<int>(v);
  else if (k == "learning_rate")
    p.learning_rate = v;
  else if (k == "max_rounds")
    p.max_rounds = static_cast<int>(v);
  else if (k == "early_stopping_rounds")
    p.early_stopping_rounds = static_cast<int>(v);
  else if (k == "validation_fraction")
    p.validation_fraction = v;
  else if (k == "max_bins")
    p.max_bins = static_cast<int>(v);
  else if (k == "lambda")
    p.lambda = v;
  else if (k == "gamma")
    p.gamma = v;
  else if (k == "min_child_weight")
    p.min_child_weight = v;
  else if (k == "colsample")
    p.colsample = v;
  else if (k == "subsample")
    p.subsample = v;
  else if (k == "seed")
    p.seed = static_cast<uint64_t>(v);
  else
    fail("unknown GbdtParams field '" + k + "'");
}

Settings parse(int argc, char** argv) {
  Settings s;
  std::vector<std::string> positional;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) fail(std::string(argv[i]) + " wants a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out")
      s.out = value(i);
    else if (a == "--evaluate")
      s.evaluate = true;
    else if (a == "--heldout")
      s.heldout.push_back(value(i));
    else if (a == "--picks")
      s.picks.push_back(value(i));
    else if (a == "--measurements")
      s.measurements = value(i);
    else if (a == "--max-per-group")
      s.max_per_group = std::strtoull(value(i).c_str(), nullptr, 10);
    else if (a == "--gbdt")
      set_param(s.params, value(i));
    else if (a == "--threads")
      s.threads = std::atoi(value(i).c_str());
    else if (a == "--verbose")
      s.verbose = true;
    else if (a == "--dim") {
      const std::string d = value(i);
      const size_t eq = d.find('=');
      if (eq == std::string::npos) fail("--dim wants NAME=N, got '" + d + "'");
      s.onnx.dimensions[d.substr(0, eq)] = std::stoll(d.substr(eq + 1));
    } else if (a.rfind("--", 0) == 0)
      fail("unknown option " + a);
    else
      positional.push_back(a);
  }
  if (positional.empty() || positional.size() % 2 != 0)
    fail(
        "usage: train_cost_model [--out PATH] [--evaluate] [--heldout DIR]... [--picks DIR]... "
        "MODEL.onnx "
        "LOG.jsonl [MODEL.onnx LOG.jsonl ...]");
  for (size_t i = 0; i < positional.size(); i += 2) {
    const std::string& model = positional[i];
    auto it = std::find_if(s.networks.begin(), s.networks.end(),
                           [&](const auto& n) { return n.first == model; });
    if (it == s.networks.end()) {
      s.networks.emplace_back(model, std::vector<std::string>{});
      it = s.networks.end() - 1;
    }
    it->second.push_back(positional[i + 1]);
  }
  if (s.out.empty() && !s.evaluate) fail("nothing to do: give --out PATH and/or --evaluate");
  return s;
}

void print_counts(const Family& f) {
  const Counts& c = f.counts;
  std::printf("| %-14s | %3zu | %6zu | %5zu | %3zu | %3zu | %3zu | %3zu | %3zu | %5zu | %6zu |\n",
              f.name.c_str(), f.groups.size(), c.records, c.duplicates, c.bad_lines, c.unmatched,
              c.not_replayed, c.failed, c.no_rows, c.capped, c.samples);
}

void print_counts_header(const char* what) {
  std::printf(
      "| %-14s | groups | records | duplicates | bad lines | no task | not replayed | failed | "
      "no rows | capped | samples |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
      what);
}

}  // namespace

int main(int argc, char** argv) try {
  const Settings s = parse(argc, argv);
  if (s.threads > 0) set_compile_threads(s.threads);
  // GbdtParams' own thread count (1), whatever --threads says: the file keeps the parameters,
  // so it stays the same for any --threads, and the trees never depend on the count. Training
  // all networks took 5.4 s on 2 threads, 3.3 s on one (2026-11-27, 2-core Zen 5 VM).
  const cost::GbdtParams params = s.params;

  std::printf("reading %zu networks (at most %zu samples per group; %d threads)\n",
              s.networks.size(), s.max_per_group, compile_threads());
  std::vector<Family> networks;
  for (const auto& [model, logs] : s.networks)
    networks.push_back(load_network(std::filesystem::path(model).stem().string(), model, logs,
                                    s.onnx, s.max_per_group));
  if (!s.picks.empty()) networks.push_back(load_pick_logs(s.picks, s.max_per_group));
  std::printf("\n");
  print_counts_header("network");
  for (const Family& f : networks) print_counts(f);

  std::vector<const Group*> all;
  for (const Family& f : networks)
    for (const Group& g : f.groups) all.push_back(&g);
  std::printf(
      "\ngbdt params: depth %d, eta %g, lambda %g, gamma %g, min_child_weight %g, bins %d, "
      "colsample %g, subsample %g, max rounds %d, early stop %d, validation %g, seed %llu\n",
      params.max_depth, params.learning_rate, params.lambda, params.gamma, params.min_child_weight,
      params.max_bins, params.colsample, params.subsample, params.max_rounds,
      params.early_stopping_rounds, params.validation_fraction,
      static_cast<unsigned long long>(params.seed));

  if (s.evaluate && networks.size() > 1) {
    std::printf(
        "\n(a) leave one network out: train on the others (less the tested network's "
        "workloads), test on it\n");
    print_table_header();
    Scores every;
    for (const Family& tested : networks) {
      std::set<std::string> tested_keys;
      for (const Group& g : tested.groups) tested_keys.insert(g.workload_key);
      std::vector<const Group*> tr, te;
      for (const Group* g : all)
        if (g->family == tested.name)
          te.push_back(g);
        else if (!tested_keys.count(g->workload_key))
          tr.push_back(g);
      double train_s = 0;
      const auto model = train(tr, params, &train_s);
      const auto& info = model->model().train_info();
      const Scores scores = evaluate_groups(*model, te, s.verbose);
      print_row(tested.name, scores);
      every.append(scores);
      if (s.verbose)
        std::printf("      (trained on %zu groups in %.1f s, %d trees of %d grown)\n", tr.size(),
                    train_s, info.best_rounds, info.rounds_trained);
    }
    print_row("all networks", every);
  }

  std::unique_ptr<cost::GbdtCostModel> final_model;
  double train_s = 0;
  if (!s.out.empty() || s.evaluate) {
    size_t samples = 0;
    for (const Group* g : all) samples += g->labels.size();
    std::printf("\ntraining on every network: %zu groups, %zu programs\n", all.size(), samples);
    std::fflush(stdout);
    final_model = train(all, params, &train_s);
    const cost::Gbdt& g = final_model->model();
    std::printf("trained in %.1f s: %d trees kept of %d grown, %zu nodes, train p-rmse %.4f\n",
                train_s, g.num_trees(), g.train_info().rounds_trained, g.nodes().size(),
                g.train_info().best_rmse);
  }

  if (s.evaluate) {
    // What the model does on the programs it learned from: the distance to (a) is what it
    // learned that does not carry over to another network.
    std::printf("\n(fit) trained on every network, tested on its own training groups\n");
    print_table_header();
    print_row("training groups", evaluate_groups(*final_model, all, false));

    std::printf("\n(b) trained on every network, tested on held-out data\n");
    std::vector<Family> heldout;
    if (!s.heldout.empty()) heldout.push_back(load_tune_logs(s.heldout));
    heldout.push_back(load_measurements(s.measurements));
    print_counts_header("held-out set");
    for (const Family& f : heldout) print_counts(f);
    print_table_header();
    for (const Family& f : heldout) {
      std::vector<const Group*> te;
      for (const Group& g : f.groups) te.push_back(&g);
      const Scores scores = evaluate_groups(*final_model, te, s.verbose);
      print_row(f.name, scores);
      if (f.name == "measurements") {
        const auto& ms = scores.model;
        std::printf(
            "  measurements as bench_cost_model reports them (means over its %zu workloads): "
            "pairwise %.4f, recall@10%% %.4f, a-peak@32 %.4f\n  pairwise per workload:",
            ms.size(), mean(column(ms, &Metrics::pairwise)),
            mean(column(ms, &Metrics::recall_tenth)), mean(column(ms, &Metrics::peak)));
        for (size_t i = 0; i < ms.size(); ++i)
          std::printf(" %s %.3f", f.groups[i].name.c_str(), ms[i].pairwise);
        std::printf("\n");
      }
    }
  }

  if (!s.out.empty()) {
    std::ostringstream text;
    final_model->save(text);
    const std::string tmp = s.out + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary);
      out << text.str();
      if (!out) fail("cannot write " + tmp);
    }
    std::filesystem::rename(tmp, s.out);
    std::printf("\nwrote %s: %zu bytes, %d trees, %d features\n", s.out.c_str(), text.str().size(),
                final_model->model().num_trees(), final_model->model().num_features());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_cost_model: %s\n", e.what());
  return 1;
}
