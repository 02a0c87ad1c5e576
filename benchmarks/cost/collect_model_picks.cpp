// Measures what a cost model picks, so that the next model learns from its own mistakes: for each
// workload of cost/pick_workloads.hpp, the model's best programs by a model-only search (what
// compile_from_model builds), random programs from the sketches and the default schedule, each
// measured as tuning measures it (forked children), written as tuning records to
// <dir>/<workload>.jsonl. train_cost_model --picks <dir> trains on them.
//
// Why: a model trained on tuning logs only has seen programs that a tuner found promising; a
// model-only search then climbs to programs the logs never held, which it may rate highly by
// extrapolation (trained on five networks' logs alone, its first picks ran at 0.3-0.4x the tuned
// kernel on BERT's FFN GEMM and the odd-sized one). Measuring those picks and training on them
// (rounds of what imitation learning calls DAgger) corrects exactly that region of the space.
//
// Usage: collect_model_picks --dir D [--model PATH] [--top N] [--random N] [--seed S]
//                            [--threads T] [--only a,b,...]
//   --model   the model that picks (default: the pretrained one, cost/pretrained.hpp)
//   --top     the model's best programs measured per workload (default 16)
//   --random  random programs per workload (default 16)
//   --seed    of the search and the sampling (default 0); a later round takes another seed
//   --threads threads of the measured kernels (default 2)
// A workload whose log exists is skipped (delete it to measure again).
#include "pick_workloads.hpp"

#include <loom/cost/pretrained.hpp>
#include <loom/sched/default_schedule.hpp>
#include <loom/search/evolution.hpp>
#include <loom/search/records.hpp>
#include <loom/search/sketch.hpp>
#include <loom/backend/llvm/measurer.hpp>
#include <loom/tune.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace loom;

int main(int argc, char** argv) {
  std::string dir, model_path;
  int top = 16, random = 16, threads = 2;
  uint64_t seed = 0;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dir")
      dir = next();
    else if (a == "--model")
      model_path = next();
    else if (a == "--top")
      top = std::atoi(next().c_str());
    else if (a == "--random")
      random = std::atoi(next().c_str());
    else if (a == "--seed")
      seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--only")
      only = loom_bench::split_list(next(), ',');
    else {
      std::fprintf(stderr,
                   "usage: %s --dir D [--model PATH] [--top N] [--random N] [--seed S] "
                   "[--threads T] [--only a,b,...]\n",
                   argv[0]);
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "--dir is required\n");
    return 2;
  }
  std::shared_ptr<const cost::CostModel> model;
  if (model_path.empty())
    model = cost::pretrained_cost_model();
  else
    model = cost::load_pretrained_model(model_path);
  if (!model) {
    std::fprintf(stderr, "no cost model to pick with (see the warning)\n");
    return 2;
  }
  runtime::set_num_threads(threads);
  std::filesystem::create_directories(dir);
  cpu_jit::LocalMeasurer measurer;

  // Speeds relative to the best program measured for the workload: the model's first pick, the
  // best of its first three and the default schedule (what compile_from_model keeps), the best
  // of its picks, the best random program, the default schedule.
  std::printf("%-40s %5s %5s %8s %6s %6s %6s %6s %6s\n", "workload", "progs", "fail", "wall_s",
              "pick1", "top3+d", "picks", "random", "deflt");
  for (const loom_bench::TuneWorkload& w : loom_bench::pick_workloads()) {
    if (!only.empty() && std::find(only.begin(), only.end(), w.name) == only.end()) continue;
    const std::string path = dir + "/" + w.name + ".jsonl";
    if (std::filesystem::exists(path)) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const Task task = w.make();

    search::ModelSearchOptions so;
    so.top = top;
    so.seed = seed;
    std::vector<sched::State> programs = search::best_predicted(task, *model, so);
    const size_t picks = programs.size();
    std::set<std::string> seen;
    for (const sched::State& s : programs) seen.insert(s.to_string());
    std::mt19937_64 rng(seed * 7919 + 17);
    const std::vector<sched::State> sketches = search::generate_sketches(task, so.space);
    for (sched::State& s : search::sample_programs(sketches, task, so.space, rng, random + picks))
      if (programs.size() < picks + static_cast<size_t>(random) &&
          seen.insert(s.to_string()).second)
        programs.push_back(std::move(s));
    const size_t randoms = programs.size() - picks;
    programs.push_back(sched::default_schedule(task.dag, task.target));

    const std::vector<search::MeasureResult> results = measurer.measure(task, programs);
    std::vector<search::TuningRecord> records;
    int failed = 0;
    double best_pick = 0, best_top3 = 0, best_random = 0, best = 0;
    std::vector<double> costs(results.size(), 0);
    for (size_t i = 0; i < results.size(); ++i) {
      records.push_back(search::make_tuning_record(task, programs[i], results[i]));
      if (!results[i].ok()) {
        ++failed;
        continue;
      }
      costs[i] = results[i].mean_cost();
    }
    for (double c : costs)
      if (c > 0 && (best == 0 || c < best)) best = c;
    for (size_t i = 0; i < costs.size(); ++i) {
      if (costs[i] <= 0) continue;
      const double rel = best / costs[i];
      if (i < picks) best_pick = std::max(best_pick, rel);
      if (i >= picks && i < picks + randoms) best_random = std::max(best_random, rel);
      if (i < std::min<size_t>(3, picks) || i + 1 == costs.size())
        best_top3 = std::max(best_top3, rel);
    }
    search::append_records(path, records);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto relative = [&](size_t i) { return costs[i] > 0 ? best / costs[i] : 0.0; };
    std::printf("%-40s %5zu %5d %8.1f %6.3f %6.3f %6.3f %6.3f %6.3f\n", w.name.c_str(),
                programs.size(), failed, wall, picks ? relative(0) : 0.0, best_top3, best_pick,
                best_random, relative(costs.size() - 1));
    std::fflush(stdout);
  }
  return 0;
}
