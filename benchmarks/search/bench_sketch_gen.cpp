// Search-space speed: sketch generation and random annotation (sketch -> complete, validated
// program) for GEMM 1024^3, the work the evolutionary search leans on. Also the number of
// distinct programs among the samples (diversity). Single-threaded.
#include <benchmark/benchmark.h>
#include <loom/loom.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <random>
#include <set>

namespace {

using namespace loom;

Task gemm_task(int64_t n) {
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  auto k = reduce_axis(n, "k");
  auto C = compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  return Task(ComputeDAG({A, B}, {C}));
}

void BM_Search_GenerateSketches(benchmark::State& state) {
  Task task = gemm_task(1024);
  size_t n = 0;
  for (auto _ : state) n = search::generate_sketches(task).size();
  state.counters["sketches"] = static_cast<double>(n);
}
BENCHMARK(BM_Search_GenerateSketches)->Unit(benchmark::kMicrosecond);

// Programs per second: one sketch chosen round robin, one complete program sampled from it.
void BM_Search_SampleProgram(benchmark::State& state) {
  Task task = gemm_task(1024);
  search::SearchOptions options;
  options.allow_non_divisible_tiles = state.range(0) != 0;
  auto sketches = search::generate_sketches(task, options);
  std::mt19937_64 rng(42);
  size_t i = 0;
  for (auto _ : state) {
    auto p = search::try_sample_program(sketches[i++ % sketches.size()], task, options, rng);
    benchmark::DoNotOptimize(p);
  }
  state.counters["programs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(options.allow_non_divisible_tiles ? "with non-divisible tiles" : "perfect tiles");
}
BENCHMARK(BM_Search_SampleProgram)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Diversity: distinct loop nests among 10,000 samples.
void BM_Search_Diversity10000(benchmark::State& state) {
  Task task = gemm_task(1024);
  auto sketches = search::generate_sketches(task);
  size_t distinct = 0;
  for (auto _ : state) {
    std::mt19937_64 rng(7);
    std::set<std::string> seen;
    for (int s = 0; s < 10000; ++s)
      if (auto p = search::try_sample_program(sketches[s % sketches.size()], task, {}, rng))
        seen.insert(p->to_string());
    distinct = seen.size();
  }
  state.counters["distinct_of_10000"] = static_cast<double>(distinct);
}
BENCHMARK(BM_Search_Diversity10000)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
