// The speed of one evolutionary search round (search/evolution.hpp), measurement excluded:
// sampling the initial population, `generations` rounds of mutation and selection, and feature
// extraction and prediction for every member, at Ansor's defaults (population 2048, 4
// generations: 5 × 2048 programs scored) on GEMM 1024^3 and the conv2d+bias+ReLU layer.
//
// The model is a GbdtCostModel trained on 512 programs with a synthetic label (the analytic
// roofline of their features), so prediction costs what a trained model costs. Threads: the
// runtime's (LOOM_NUM_THREADS or all cores); the counters split the round into its parts
// (wall seconds).
#include <benchmark/benchmark.h>
#include <loom/loom.hpp>
#include <loom/cost/features.hpp>
#include <loom/runtime/parallel.hpp>
#include <loom/search/evolution.hpp>

#include <random>

namespace {

using namespace loom;

Task gemm_task(int64_t n) {
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  auto k = reduce_axis(n, "k");
  auto C = compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  return Task(ComputeDAG({A, B}, {C}));
}

Task conv_task() {
  auto data = placeholder<float>("data", {1, 64, 56, 56});
  auto weight = placeholder<float>("weight", {64, 64, 3, 3});
  auto bias = placeholder<float>("bias", {64});
  auto conv = ops::conv2d_nchw(data, weight, {.padding = {1, 1}});
  auto out = ops::relu(ops::bias_add(conv, bias, 1));
  return Task(ComputeDAG({data, weight, bias}, {out}));
}

/// A GBDT trained on `n` sampled programs labelled by their roofline estimate.
cost::GbdtCostModel trained_model(const Task& task, int n) {
  search::SearchOptions space;
  const auto sketches = search::generate_sketches(task, space);
  std::mt19937_64 rng(5);
  const auto programs = search::sample_programs(sketches, task, space, rng, n);
  const auto features = cost::extract_features(programs, task.target);
  std::vector<double> cost(features.size(), 0), labels(features.size(), 0);
  double best = 1e300;
  for (size_t i = 0; i < features.size(); ++i) {
    for (int r = 0; r < features[i].num_rows; ++r) {
      const float* row = cost::feature_row(features[i], r);
      cost[i] += std::max(cost::row_float_ops(row), 4.0 * cost::row_bytes(row)) + 1;
    }
    if (cost[i] > 0) best = std::min(best, cost[i]);
  }
  for (size_t i = 0; i < features.size(); ++i) labels[i] = cost[i] > 0 ? best / cost[i] : 0;
  cost::GbdtCostModelOptions o;
  o.warmup_samples = 1;
  cost::GbdtCostModel model(o);
  model.update(features, labels);
  return model;
}

void run_rounds(benchmark::State& state, const Task& task) {
  const cost::GbdtCostModel model = trained_model(task, 512);
  search::EvolutionOptions evo;
  evo.population = static_cast<int>(state.range(0));
  evo.generations = static_cast<int>(state.range(1));
  search::EvolutionarySearch search(task, {}, evo, 1);
  search::RoundStats sum;
  for (auto _ : state) {
    auto batch = search.next_batch(64, model);
    benchmark::DoNotOptimize(batch);
    const auto& s = search.last_round();
    sum.sample_seconds += s.sample_seconds;
    sum.features_seconds += s.features_seconds;
    sum.predict_seconds += s.predict_seconds;
    sum.evolve_seconds += s.evolve_seconds;
    sum.scored += s.scored;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["sample_s"] = sum.sample_seconds / n;
  state.counters["features_s"] = sum.features_seconds / n;
  state.counters["predict_s"] = sum.predict_seconds / n;
  state.counters["evolve_s"] = sum.evolve_seconds / n;
  state.counters["scored"] = sum.scored / n;
  state.counters["threads"] = runtime::num_threads();
}

void BM_SearchRound_Gemm1024(benchmark::State& state) { run_rounds(state, gemm_task(1024)); }
void BM_SearchRound_ConvBiasRelu(benchmark::State& state) { run_rounds(state, conv_task()); }

BENCHMARK(BM_SearchRound_Gemm1024)
    ->Args({2048, 4})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK(BM_SearchRound_ConvBiasRelu)
    ->Args({2048, 4})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
