// Model-only compilation (compile_from_model: the pretrained cost model picks the program,
// nothing is measured) against the tuned kernel of the same shape and the default schedule,
// on the workloads of tune_workloads.hpp. Contenders per workload:
//  - Tuned: the best program of the shipped records (<LOOM_BENCH_RECORDS>/cpu_best.jsonl,
//    1,000-trial runs; default dir benchmarks/results);
//  - Predicted: compile_from_model with its defaults;
//  - PredictedTop4: the model's four best measured (forked children, as tuning does) and the
//    fastest kept;
//  - Default: loom's default schedule, the floor.
// The Predicted rows carry the time to the kernel (compile_s: search, builds, spot check; wall
// seconds, measured once per process after the model is loaded, whose time is model_load_s).
// Every output is checked against Tuned's (difference below 1e-4 of the largest magnitude).
// Then operators of the library at shapes no record has (new_shapes() below): Predicted against
// Default only, outputs checked against Default's.
//
//   ./bench_model_compile --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
//       --benchmark_report_aggregates_only=true
#include <loom/cost/pretrained.hpp>
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

std::string records_file() {
  const char* v = std::getenv("LOOM_BENCH_RECORDS");
  return std::string(v ? v : LOOM_BENCH_SOURCE_DIR "/results") + "/cpu_best.jsonl";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The time to read the pretrained model, once per process (what the first kernel pays).
double model_load_seconds() {
  static const double seconds = [] {
    const auto t0 = std::chrono::steady_clock::now();
    if (!cost::pretrained_cost_model()) throw std::runtime_error("no pretrained cost model");
    return seconds_since(t0);
  }();
  return seconds;
}

/// Operators of the library at shapes that no shipped record has: the time to a kernel and its
/// speed against the default schedule.
std::vector<loom_bench::TuneWorkload> new_shapes() {
  using loom_bench::TuneWorkload;
  std::vector<TuneWorkload> w;
  w.push_back({"new_gemm_200x300x150", [] { return loom_bench::gemm_task(200, 300, 150); }, {}});
  w.push_back({"new_dense_relu_64x512x1000",
               [] {
                 auto x = placeholder<float>("X", {64, 512});
                 auto wt = placeholder<float>("W", {512, 1000});
                 auto b = placeholder<float>("b", {1000});
                 return Task(
                     ComputeDAG({x, wt, b}, {ops::relu(ops::bias_add(ops::matmul(x, wt), b, -1))}));
               },
               {}});
  w.push_back({"new_conv2d_1x32x40x40_k48_3x3",
               [] { return loom_bench::conv2d_bias_relu_task(1, 32, 40, 40, 48, 3, 3, 1, false); },
               {}});
  w.push_back({"new_conv2d_nhwc_1x20x20x96_k128_3x3",
               [] { return loom_bench::conv2d_bias_relu_task(1, 96, 20, 20, 128, 3, 3, 1, true); },
               {}});
  w.push_back({"new_depthwise_1x96x28x28_3x3",
               [] {
                 auto x = placeholder<float>("X", {1, 96, 28, 28});
                 auto wt = placeholder<float>("W", {96, 1, 3, 3});
                 return Task(
                     ComputeDAG({x, wt}, {ops::depthwise_conv2d_nchw(x, wt, {.padding = {1, 1}})}));
               },
               {}});
  w.push_back({"new_batch_matmul_8x100x70x96",
               [] {
                 auto a = placeholder<float>("A", {8, 100, 70});
                 auto b = placeholder<float>("B", {8, 70, 96});
                 return Task(ComputeDAG({a, b}, {ops::batch_matmul(a, b)}));
               },
               {}});
  w.push_back({"new_softmax_333x777",
               [] {
                 auto x = placeholder<float>("X", {333, 777});
                 return Task(ComputeDAG({x}, {ops::softmax(x)}));
               },
               {}});
  w.push_back({"new_layer_norm_96x1000",
               [] {
                 auto x = placeholder<float>("X", {96, 1000});
                 auto g = placeholder<float>("gamma", {1000});
                 auto b = placeholder<float>("beta", {1000});
                 return Task(ComputeDAG({x, g, b}, {ops::layer_norm(x, g, b)}));
               },
               {}});
  w.push_back({"new_max_pool_1x64x56x56_3x3s2",
               [] {
                 auto x = placeholder<float>("X", {1, 64, 56, 56});
                 return Task(ComputeDAG({x}, {ops::max_pool2d(x, {3, 3}, {2, 2}, {1, 1})}));
               },
               {}});
  return w;
}

/// The kernels of one workload and their buffers.
struct Shape {
  Task task;
  std::map<std::string, Kernel> kernels;
  std::map<std::string, ModelCompiled> compiled;
  std::map<std::string, double> compile_seconds;
  loom_bench::TaskBuffers buffers;
  std::vector<float> reference_output;
  std::string error;
};

/// The kernels of `w`, built once: Tuned (from the records) only when `tuned`.
Shape& shape(const loom_bench::TuneWorkload& w, bool tuned) {
  static std::map<std::string, std::unique_ptr<Shape>> shapes;
  auto& slot = shapes[w.name];
  if (slot) return *slot;
  slot = std::make_unique<Shape>(Shape{w.make(), {}, {}, {}, {}, {}, {}});
  Shape& s = *slot;
  try {
    model_load_seconds();
    if (tuned) {
      const auto best = best_recorded_schedule(s.task, records_file());
      if (!best) throw std::runtime_error("no records of " + w.name + " in " + records_file());
      s.kernels.emplace("Tuned", build(s.task, *best));
    }
    for (int top : {0, 4}) {
      ModelCompileOptions o;
      o.measure_top = top;
      const std::string name = top ? "PredictedTop4" : "Predicted";
      const auto t0 = std::chrono::steady_clock::now();
      ModelCompiled c = compile_from_model(s.task, o);
      s.compile_seconds[name] = seconds_since(t0);
      s.kernels.emplace(name, c.kernel);
      s.compiled.emplace(name, std::move(c));
    }
    s.kernels.emplace("Default", build(s.task));
    s.buffers = loom_bench::TaskBuffers(s.task);
  } catch (const std::exception& e) {
    s.error = e.what();
  }
  return s;
}

void BM_ModelCompile(benchmark::State& state, loom_bench::TuneWorkload w, bool tuned,
                     std::string contender) {
  Shape& s = shape(w, tuned);
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  const std::string reference = tuned ? "Tuned" : "Default";
  if (s.reference_output.empty()) s.reference_output = s.buffers.output_of(s.kernels.at(reference));
  if (!loom_bench::check_and_time(state, s.task, s.buffers, s.kernels.at(contender),
                                  s.reference_output, reference))
    return;
  if (auto it = s.compiled.find(contender); it != s.compiled.end()) {
    state.counters["compile_s"] = s.compile_seconds.at(contender);
    state.counters["search_s"] = it->second.search_seconds;
    state.counters["build_s"] = it->second.build_seconds;
    state.counters["measure_s"] = it->second.measure_seconds;
    state.counters["rank"] = it->second.rank;
    state.counters["model_load_s"] = model_load_seconds();
  }
}

const bool registered = [] {
  auto add = [](const loom_bench::TuneWorkload& w, bool tuned, const char* contender) {
    benchmark::RegisterBenchmark(("BM_Model_" + std::string(contender) + "/" + w.name).c_str(),
                                 BM_ModelCompile, w, tuned, std::string(contender))
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  };
  for (const loom_bench::TuneWorkload& w : loom_bench::tune_workloads())
    for (const char* contender : {"Tuned", "Predicted", "PredictedTop4", "Default"})
      add(w, true, contender);
  for (const loom_bench::TuneWorkload& w : new_shapes())
    for (const char* contender : {"Predicted", "PredictedTop4", "Default"})
      add(w, false, contender);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
