// Tunes the workloads of the tuner issue (#6) with loom::tune and writes what a user needs to see:
//  - one records file per workload, <dir>/<name>.jsonl (what the kernel benchmarks and
//    loom::tuned_kernel build from);
//  - a table per workload: trials, failures, wall time split into search / model / build / run,
//    seconds per trial, best GFLOP/s;
//  - the best-so-far curves (GFLOP/s against measured trials) as <dir>/curves.csv and as a
//    picture, <dir>/curves.svg (one panel per workload).
//
//   tune_workloads [--trials N] [--dir D] [--only a,b,...] [--set issue|transfer] [--seconds S]
//                  [--threads T]
//                  [--constant-weights] [--seed N] [--build-parallelism N] [--per-round N]
//                  [--no-slow-kill]
//                  [--mode full|random|no-evolution|limited|non-divisible|register-tile|
//                         no-transfer|no-wide-vectorize|pretrained]
//
// --set transfer tunes the shapes of the transfer experiment instead (transfer_workloads(),
// bench_transfer). --mode runs an ablation: `random` measures random programs (no model),
// `no-evolution` ranks sampled programs with the model but never mutates them, `limited` switches
// off the cache-write, fusion-related and packing sketch rules, `non-divisible` lets every split
// draw lengths that do not divide the extent (SearchOptions::allow_non_divisible_tiles; the default
// draws them only for awkward extents such as primes), `register-tile` evolves with loom's
// opt-in MutateRegisterTile next to Ansor's four mutation rules, `no-transfer` keeps every child
// in its parent's sketch, as Ansor does (EvolutionOptions::sketch_transfer_probability = 0; the
// default moves 5 % of them onto another sketch), `no-wide-vectorize` leaves a tile's innermost
// loop longer than max_vectorize_size to LLVM, as Ansor does
// (SearchOptions::wide_vectorize_probability = 0), `pretrained` starts from the cost model that
// ships with loom (TuneOptions::pretrained: its picks instead of random ones until the task's
// own model has learned, then mixed with it; loom::tune's default, TuneOptions::warm_start, which
// every other mode here turns off). Records of an ablation go to
// <dir>/<name>.<mode>.jsonl. --seed sets TuneOptions::seed (0 by default); runs of several seeds
// go to different directories. --per-round sets TuneOptions::measures_per_round (64 by default).
// --no-slow-kill lets every build and run go on to build_timeout_s and run_timeout_s
// (MeasureOptions::slow_build_kill_factor and slow_run_kill_factor 0), to measure what the two
// cut-offs save.
#include "tune_workloads.hpp"

#include <loom/tune.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

using namespace loom;

namespace {

/// One panel per curve: GFLOP/s (y) against trials (x), with the final best written on it.
void write_svg(const std::string& path, const std::vector<std::string>& names,
               const std::vector<std::vector<search::CurvePoint>>& curves) {
  const int cols = 3, pw = 320, ph = 220, margin = 40;
  const int rows = static_cast<int>((names.size() + cols - 1) / cols);
  std::ofstream out(path);
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << cols * pw << "' height='" << rows * ph
      << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' "
         "fill='white'/>\n";
  for (size_t c = 0; c < names.size(); ++c) {
    const int x0 = static_cast<int>(c % cols) * pw, y0 = static_cast<int>(c / cols) * ph;
    const auto& pts = curves[c];
    double ymax = 1, xmax = 1;
    for (const auto& p : pts) {
      ymax = std::max(ymax, p.best_gflops);
      xmax = std::max(xmax, static_cast<double>(p.trial));
    }
    const double w = pw - 1.5 * margin, h = ph - 2 * margin;
    auto X = [&](double v) { return x0 + margin + v / xmax * w; };
    auto Y = [&](double v) { return y0 + ph - margin - v / (ymax * 1.1) * h; };
    out << "<text x='" << x0 + margin << "' y='" << y0 + 20 << "' font-weight='bold'>" << names[c]
        << "</text>\n";
    out << "<line x1='" << X(0) << "' y1='" << Y(0) << "' x2='" << X(xmax) << "' y2='" << Y(0)
        << "' stroke='black'/>\n<line x1='" << X(0) << "' y1='" << Y(0) << "' x2='" << X(0)
        << "' y2='" << Y(ymax * 1.1) << "' stroke='black'/>\n";
    out << "<text x='" << X(xmax) - 40 << "' y='" << Y(0) + 28 << "'>trials " << xmax
        << "</text>\n";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f GFLOP/s", ymax);
    out << "<text x='" << X(0) + 4 << "' y='" << Y(ymax) - 4 << "'>" << buf << "</text>\n";
    out << "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='";
    for (const auto& p : pts) out << X(p.trial) << "," << Y(p.best_gflops) << " ";
    out << "'/>\n";
  }
  out << "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 200;
  std::string dir = "tuning";
  std::vector<std::string> only;
  double seconds = 0;
  int threads = 0;
  uint64_t seed = 0;
  int build_parallelism = 0;
  int per_round = 0;
  bool constant_weights = false;
  bool slow_kill = true;
  std::string mode = "full";
  std::string set = "issue";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--trials")
      trials = std::atoi(next().c_str());
    else if (a == "--dir")
      dir = next();
    else if (a == "--only")
      only = loom_bench::split_list(next(), ',');
    else if (a == "--set")
      set = next();
    else if (a == "--seconds")
      seconds = std::atof(next().c_str());
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--constant-weights")
      constant_weights = true;
    else if (a == "--mode")
      mode = next();
    else if (a == "--seed")
      seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--build-parallelism")
      build_parallelism = std::atoi(next().c_str());
    else if (a == "--per-round")
      per_round = std::atoi(next().c_str());
    else if (a == "--no-slow-kill")
      slow_kill = false;
    else {
      std::fprintf(stderr,
                   "usage: %s [--trials N] [--dir D] [--only a,b] [--set issue|transfer] "
                   "[--seconds S] [--threads T] "
                   "[--constant-weights] [--seed N] [--build-parallelism N] [--per-round N]\n"
                   "       [--no-slow-kill]\n"
                   "       [--mode full|random|no-evolution|limited|non-divisible|register-tile|\n"
                   "               no-transfer|no-wide-vectorize|pretrained]\n",
                   argv[0]);
      return 2;
    }
  }
  if (threads > 0) runtime::set_num_threads(threads);
  std::filesystem::create_directories(dir);

  std::vector<std::string> names;
  std::vector<std::vector<search::CurvePoint>> curves;
  std::ofstream csv(dir + "/curves" + (mode == "full" ? "" : "." + mode) + ".csv");
  csv << "workload,trial,elapsed_s,best_gflops\n";
  std::printf("%-36s %6s %6s %8s %8s %8s %8s %8s %8s %9s\n", "workload", "trials", "failed",
              "wall_s", "search_s", "model_s", "build_s", "run_s", "s/trial", "GFLOP/s");
  if (set != "issue" && set != "transfer") {
    std::fprintf(stderr, "--set is 'issue' (the default) or 'transfer', not '%s'\n", set.c_str());
    return 2;
  }
  const std::vector<loom_bench::TuneWorkload> workloads =
      set == "transfer" ? loom_bench::transfer_workloads() : loom_bench::tune_workloads();
  for (const loom_bench::TuneWorkload& w : workloads) {
    if (!only.empty() && std::find(only.begin(), only.end(), w.name) == only.end()) continue;
    Task task = w.make();
    TuneOptions o;
    o.trials = trials;
    o.seed = seed;
    o.measure.build_parallelism = build_parallelism;
    if (!slow_kill) o.measure.slow_build_kill_factor = o.measure.slow_run_kill_factor = 0;
    if (per_round > 0) o.measures_per_round = per_round;
    o.time_limit_s = seconds;
    o.name = w.name;
    o.records = dir + "/" + w.name + (mode == "full" ? "" : "." + mode) + ".jsonl";
    if (constant_weights) o.constant_inputs = w.weights;
    // Random first rounds (Ansor's), as every log of benchmarks/README.md was tuned, so that the
    // modes compare with each other and with those logs; --mode pretrained starts from the
    // shipped model, as loom::tune does by default (TuneOptions::warm_start).
    o.warm_start = false;
    if (mode == "random") {
      o.model = search::ModelKind::random;
      o.evolution.generations = 0;
    } else if (mode == "no-evolution") {
      o.evolution.generations = 0;
    } else if (mode == "limited") {
      o.space.enable_cache_write = false;
      o.space.enable_packing = false;
      o.space.enable_rfactor = false;
      o.space.enable_memory_bound_reduction = false;
    } else if (mode == "non-divisible") {
      o.space.allow_non_divisible_tiles = true;
    } else if (mode == "register-tile") {
      o.evolution.mutation_rules = search::cpu_mutation_rules();
      o.evolution.mutation_rules.push_back(search::register_tile_mutation_rule());
    } else if (mode == "no-transfer") {
      o.evolution.sketch_transfer_probability = 0;
    } else if (mode == "no-wide-vectorize") {
      o.space.wide_vectorize_probability = 0;
    } else if (mode == "pretrained") {
      o.pretrained = cost::pretrained_cost_model();
      if (!o.pretrained) {
        std::fprintf(stderr, "--mode pretrained: no pretrained cost model (see the warning)\n");
        return 2;
      }
    } else if (mode != "full") {
      std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
      return 2;
    }
    TuneResult r = tune(task, o);
    const auto& rep = r.report();
    std::printf("%-36s %6d %6d %8.1f %8.1f %8.1f %8.1f %8.1f %8.3f %9.2f\n", w.name.c_str(),
                rep.trials, rep.failures, rep.wall_seconds, rep.search_seconds, rep.train_seconds,
                rep.compile_seconds, rep.run_seconds,
                rep.trials ? rep.wall_seconds / rep.trials : 0.0, r.best_gflops());
    std::fflush(stdout);
    for (const auto& p : rep.curve)
      csv << w.name << "," << p.trial << "," << p.elapsed_seconds << "," << p.best_gflops << "\n";
    names.push_back(w.name);
    curves.push_back(rep.curve);
  }
  write_svg(dir + "/curves" + (mode == "full" ? "" : "." + mode) + ".svg", names, curves);
  return 0;
}
