// Feature-extraction speed (loom/cost/features.hpp): programs per second for GEMM 1024^3
// programs sampled from the search space, the work every search round repeats for thousands of
// candidates. Extraction alone (from nests lowered beforehand), lowering alone, both (what the
// search pays per candidate), and the batched, multi-threaded call.
#include <loom/cost/features.hpp>
#include <loom/loom.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

namespace {

using namespace loom;

Task gemm_task(int64_t n) {
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  auto k = reduce_axis(n, "k");
  auto C = compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  return Task(ComputeDAG({A, B}, {C}));
}

// 256 programs sampled once (fixed seed), shared by every benchmark.
const std::vector<sched::State>& programs() {
  static const std::vector<sched::State> p = [] {
    Task task = gemm_task(1024);
    std::mt19937_64 rng(2024);
    return search::sample_programs(search::generate_sketches(task), task, {}, rng, 256);
  }();
  return p;
}

void set_rate(benchmark::State& state, double programs_per_iteration) {
  state.counters["programs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * programs_per_iteration,
                         benchmark::Counter::kIsRate);
}

// Extraction only: the nests are lowered (feature_lower_options) outside the timed loop.
void BM_Features_Extract(benchmark::State& state) {
  std::vector<ir::LoweredFunc> funcs;
  for (auto& p : programs()) funcs.push_back(lower::lower(p, "f", cost::feature_lower_options()));
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
  state.SetLabel(std::to_string(funcs.size()) + " sampled GEMM 1024^3 programs");
}
BENCHMARK(BM_Features_Extract)->Unit(benchmark::kMicrosecond);

// Lowering only, with the options feature extraction uses: the other half of the search's cost.
void BM_Features_LowerOnly(benchmark::State& state) {
  const auto& p = programs();
  size_t i = 0;
  for (auto _ : state) {
    auto f = lower::lower(p[i++ % p.size()], "f", cost::feature_lower_options());
    benchmark::DoNotOptimize(f.body.get());
  }
  set_rate(state, 1);
}
BENCHMARK(BM_Features_LowerOnly)->Unit(benchmark::kMicrosecond);

// Lowering and extraction, one program at a time, on one thread.
void BM_Features_LowerAndExtract(benchmark::State& state) {
  const auto& p = programs();
  const Target target = Target::host();
  size_t i = 0;
  for (auto _ : state) {
    auto f = cost::extract_features(p[i++ % p.size()], target);
    benchmark::DoNotOptimize(f.values.data());
  }
  set_rate(state, 1);
}
BENCHMARK(BM_Features_LowerAndExtract)->Unit(benchmark::kMicrosecond);

// The batched call the search makes: all 256 programs over the runtime's threads.
void BM_Features_Batch(benchmark::State& state) {
  const auto& p = programs();
  const Target target = Target::host();
  for (auto _ : state) {
    auto f = cost::extract_features(p, target, state.range(0) != 0);
    benchmark::DoNotOptimize(f.data());
  }
  set_rate(state, static_cast<double>(p.size()));
  state.SetLabel(state.range(0) ? "parallel" : "one thread");
}
BENCHMARK(BM_Features_Batch)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
