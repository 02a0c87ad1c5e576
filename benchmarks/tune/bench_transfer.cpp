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

#include "baselines/common.hpp"
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
  std::vector<loom_bench::AlignedFloats> buffers;  // inputs then outputs
  std::vector<BufferView> views;
  std::vector<float> own_output;
  std::string error;
};

Shape& shape(const loom_bench::TuneWorkload& w) {
  static std::map<std::string, std::unique_ptr<Shape>> shapes;
  auto& slot = shapes[w.name];
  if (slot) return *slot;
  slot = std::make_unique<Shape>(Shape{w.make(), {}, {}, {}, {}, {}});
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
    uint32_t seed = 1;
    for (const ir::Tensor& t : s.task.dag->arguments()) {
      size_t n = 1;
      for (int64_t e : t.shape()) n *= static_cast<size_t>(e);
      s.buffers.emplace_back(n);
      loom_bench::fill_uniform(s.buffers.back().data(), n, seed++);
      s.views.emplace_back(s.buffers.back().data(), t.shape());
    }
  } catch (const std::exception& e) {
    s.error = e.what();
  }
  return s;
}

/// The output after running `name`'s kernel once, NaN first so that an unwritten element fails.
std::vector<float> output_of(Shape& s, const std::string& name) {
  loom_bench::AlignedFloats& out = s.buffers.back();
  loom_bench::fill_nan(out.data(), out.size());
  s.kernels.at(name).run(s.views);
  return std::vector<float>(out.data(), out.data() + out.size());
}

void BM_Transfer(benchmark::State& state, loom_bench::TuneWorkload w, std::string contender) {
  Shape& s = shape(w);
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  if (s.own_output.empty()) s.own_output = output_of(s, "Own");
  const std::vector<float> got = output_of(s, contender);
  float scale = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::abs(s.own_output[i]));
    const float d = std::abs(got[i] - s.own_output[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  if (!(worst <= 1e-4f * std::max(scale, 1.0f))) {
    state.SkipWithError(("output differs from Own's by " + std::to_string(worst)).c_str());
    return;
  }
  const Kernel& k = s.kernels.at(contender);
  for (auto _ : state) k.run(s.views);
  state.counters["GFLOPS"] = benchmark::Counter(s.task.dag->flop_count() * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
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
