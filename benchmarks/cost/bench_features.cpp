// Feature-extraction speed (loom/cost/features.hpp): programs per second for programs sampled from
// the search spaces of three workloads, the work every search round repeats for thousands of
// candidates (a round scores 2048 programs x 5 generations). Extraction alone (from nests lowered
// beforehand), lowering alone, both (what the search pays per candidate), and the batched call on
// 1 and 2 threads.
//
// Workload argument: 0 = GEMM 1024^3, 1 = conv2d 1x64x56x56 3x3 pad 1 + bias + relu,
// 2 = softmax 1024x1024. The single-thread rates are per CPU second of the benchmark thread
// (google-benchmark's default), so other processes on the machine change them little; the batch
// rates are per wall-clock second and need idle cores to show the speed-up of the second thread.
#include <loom/cost/features.hpp>
#include <loom/loom.hpp>
#include <loom/ops.hpp>
#include <loom/runtime/parallel.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <benchmark/benchmark.h>

#include <array>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace loom;

Task workload_task(int w) {
  if (w == 0) {
    auto a = placeholder<float>("A", {1024, 1024});
    auto b = placeholder<float>("B", {1024, 1024});
    return Task(ComputeDAG({a, b}, {ops::matmul(a, b)}));
  }
  if (w == 1) {
    auto x = placeholder<float>("X", {1, 64, 56, 56});
    auto k = placeholder<float>("W", {64, 64, 3, 3});
    auto bias = placeholder<float>("bias", {64});
    return Task(ComputeDAG(
        {x, k, bias},
        {ops::relu(ops::bias_add(ops::conv2d_nchw(x, k, {.padding = {1, 1}}), bias, 1))}));
  }
  auto x = placeholder<float>("X", {1024, 1024});
  return Task(ComputeDAG({x}, {ops::softmax(x)}));
}

const char* workload_name(int w) {
  static const std::array<const char*, 3> names = {"GEMM 1024^3", "conv2d+bias+relu 1x64x56x56",
                                                   "softmax 1024x1024"};
  return names[static_cast<size_t>(w)];
}

// 256 programs per workload, sampled once (fixed seed) and shared by every benchmark.
const std::vector<sched::State>& programs(int w) {
  static std::array<std::vector<sched::State>, 3> p;
  auto& out = p[static_cast<size_t>(w)];
  if (out.empty()) {
    Task task = workload_task(w);
    std::mt19937_64 rng(2024);
    out = search::sample_programs(search::generate_sketches(task), task, {}, rng, 256);
  }
  return out;
}

void set_rate(benchmark::State& state, double programs_per_iteration) {
  state.counters["programs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * programs_per_iteration,
                         benchmark::Counter::kIsRate);
}

std::string label(int w) {
  return std::to_string(programs(w).size()) + " sampled " + workload_name(w) + " programs";
}

// Extraction only: the nests are lowered (feature_lower_options) outside the timed loop.
void BM_Features_Extract(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0));
  std::vector<ir::LoweredFunc> funcs;
  for (auto& p : programs(w)) funcs.push_back(lower::lower(p, "f", cost::feature_lower_options()));
  const Target target = Target::host();
  size_t i = 0, rows = 0;
  for (auto _ : state) {
    auto f = cost::extract_features(funcs[i++ % funcs.size()], target);
    rows += static_cast<size_t>(f.num_rows);
    benchmark::DoNotOptimize(f.values.data());
  }
  set_rate(state, 1);
  state.counters["rows_per_program"] =
      static_cast<double>(rows) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.SetLabel(label(w));
}
BENCHMARK(BM_Features_Extract)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

// Lowering only, with the options feature extraction uses: the larger part of the search's cost.
void BM_Features_LowerOnly(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0));
  const auto& p = programs(w);
  size_t i = 0;
  for (auto _ : state) {
    auto f = lower::lower(p[i++ % p.size()], "f", cost::feature_lower_options());
    benchmark::DoNotOptimize(f.body.get());
  }
  set_rate(state, 1);
  state.SetLabel(label(w));
}
BENCHMARK(BM_Features_LowerOnly)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

// Lowering and extraction, one program at a time, on one thread.
void BM_Features_LowerAndExtract(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0));
  const auto& p = programs(w);
  const Target target = Target::host();
  size_t i = 0;
  for (auto _ : state) {
    auto f = cost::extract_features(p[i++ % p.size()], target);
    benchmark::DoNotOptimize(f.values.data());
  }
  set_rate(state, 1);
  state.SetLabel(label(w));
}
BENCHMARK(BM_Features_LowerAndExtract)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

// The batched call the search makes, over the programs of all three workloads (768), on
// range(0) threads of the runtime's pool; wall-clock rate.
void BM_Features_Batch(benchmark::State& state) {
  std::vector<sched::State> all;
  for (int w = 0; w < 3; ++w) all.insert(all.end(), programs(w).begin(), programs(w).end());
  const Target target = Target::host();
  runtime::set_num_threads(static_cast<int>(state.range(0)));
  cost::extract_features(all, target);  // starts the pool's workers outside the timing
  for (auto _ : state) {
    auto f = cost::extract_features(all, target);
    benchmark::DoNotOptimize(f.data());
  }
  runtime::set_num_threads(0);
  set_rate(state, static_cast<double>(all.size()));
  state.SetLabel(std::to_string(all.size()) + " programs of 3 workloads, " +
                 std::to_string(state.range(0)) + " thread(s)");
}
BENCHMARK(BM_Features_Batch)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
