// Schedules carried over to shapes nobody tuned (search::transferred_state, what tuned_kernel
// does for a shape its log lacks): each shape of tune_workloads' transfer set runs
//  - Own: the best program of its own records (<dir>/<name>.jsonl, tune_workloads --set transfer);
//  - Transferred: the best program of its family's source shape (transfer_source(): the dense
//    layer at M = 128, the convolution at 56x56), replayed with its splits adapted;
//  - Default: loom's default schedule, the floor a shape without records had before.
// Run with random interleaving so that the contenders' repetitions alternate; compare medians
// of one run. Every output is checked against Own's (difference below 1e-4 of the output's
// largest magnitude).
//
//   LOOM_BENCH_RECORDS=tuning ./bench_transfer --benchmark_repetitions=5 \
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <loom/tune.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tune/task_buffers.hpp"
#include "tune/tune_workloads.hpp"

namespace {

using namespace loom;

std::string records_dir() {
  const char* v = std::getenv("LOOM_BENCH_RECORDS");
  return v ? v : "tuning";
}

/// The three kernels of one shape and their buffers.
struct Shape {
  Task task;
  std::map<std::string, Kernel> kernels;
  loom_bench::TaskBuffers buffers;
  std::vector<float> own_output;
  std::string error;
};

Shape& shape(const loom_bench::TuneWorkload& w) {
  static std::map<std::string, std::unique_ptr<Shape>> shapes;
  auto& slot = shapes[w.name];
  if (slot) return *slot;
  slot = std::make_unique<Shape>(Shape{w.make(), {}, {}, {}, {}});
  Shape& s = *slot;
  try {
    const std::string dir = records_dir();
    const auto own = best_recorded_schedule(s.task, dir + "/" + w.name + ".jsonl");
    if (!own) throw std::runtime_error("no records of " + w.name + " in " + dir);
    s.kernels.emplace("Own", build(s.task, *own));
    const auto moved = search::transferred_state(
        s.task, dir + "/" + loom_bench::transfer_source(w.name) + ".jsonl", runtime::num_threads());
    if (!moved) throw std::runtime_error("nothing to transfer to " + w.name);
    s.kernels.emplace("Transferred", build(s.task, moved->state));
    s.kernels.emplace("Default", build(s.task));
    s.buffers = loom_bench::TaskBuffers(s.task);
  } catch (const std::exception& e) {
    s.error = e.what();
  }
  return s;
}

void BM_Transfer(benchmark::State& state, loom_bench::TuneWorkload w, std::string contender) {
  Shape& s = shape(w);
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  if (s.own_output.empty()) s.own_output = s.buffers.output_of(s.kernels.at("Own"));
  loom_bench::check_and_time(state, s.task, s.buffers, s.kernels.at(contender), s.own_output,
                             "Own");
}

const bool registered = [] {
  for (const loom_bench::TuneWorkload& w : loom_bench::transfer_workloads())
    for (const char* contender : {"Own", "Transferred", "Default"}) {
      if (std::string(contender) == "Transferred" && w.name == loom_bench::transfer_source(w.name))
        continue;
      benchmark::RegisterBenchmark(("BM_Transfer_" + std::string(contender) + "/" + w.name).c_str(),
                                   BM_Transfer, w, std::string(contender))
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
