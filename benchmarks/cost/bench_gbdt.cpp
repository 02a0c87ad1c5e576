// The embedded GBDT (loom/cost/gbdt.hpp) at the sizes Ansor's cost model sees: training time on
// 3,000, 10,000 and 30,000 programs of about 3 statement rows of 164 features each (Ansor's
// parameters: depth 10, eta 0.2, early stop after 50 rounds without training-RMSE gain), and
// prediction throughput in statement rows per second. Single-threaded unless the name says so.
// Targets (issue 5): train 10,000 programs in < 2 s on one core; predict >= 500,000 rows/s.
#include <benchmark/benchmark.h>
#include <loom/cost/gbdt.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace loom::cost;

constexpr int kFeatures = 164;

double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// `programs` synthetic programs of 1–5 rows (3 on average) whose features look like Ansor's:
/// log-scaled counts (slog, on a 1/8 grid), about half exactly 0, every 16th column constant.
/// The label is the normalized throughput best cost / cost of a hidden cost that sums a
/// nonlinear function of a dozen columns over the rows, with 5% measurement noise; the weight
/// is the label (Ansor's w = y). Labels average about 0.12.
GbdtDataset synthetic(size_t programs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GbdtDataset d;
  d.num_features = kFeatures;
  d.group_offsets = {0};
  std::vector<double> costs;
  for (size_t p = 0; p < programs; ++p) {
    const size_t rows = 1 + rng() % 5;
    double cost = 0;
    for (size_t r = 0; r < rows; ++r) {
      float x[kFeatures];
      for (int f = 0; f < kFeatures; ++f) {
        if (f % 16 == 15)
          x[f] = 1.0f;  // flags that never change in this task
        else if (rng() % 2 == 0)
          x[f] = 0.0f;
        else
          x[f] = static_cast<float>(std::floor(uniform(rng) * 20.0 * 8) / 8);  // slog of 1..2^20
      }
      d.features.insert(d.features.end(), x, x + kFeatures);
      cost += std::exp2(0.08 * x[0] - 0.04 * x[1] + (x[2] > 10 ? 0.6 : 0.0) +
                        0.01 * x[3] * x[4] / 20 - (x[5] > 0 && x[6] > 0 ? 0.5 : 0.0) +
                        0.02 * (x[7] + x[8] + x[9] - x[10] - x[11]));
    }
    cost *= 1 + 0.05 * (uniform(rng) - 0.5);
    d.group_offsets.push_back(d.group_offsets.back() + rows);
    costs.push_back(cost);
  }
  const double best = *std::min_element(costs.begin(), costs.end());
  for (double c : costs) {
    d.labels.push_back(best / c);
    d.weights.push_back(best / c);
  }
  return d;
}

const GbdtDataset& dataset(size_t programs, uint64_t seed) {
  static std::map<std::pair<size_t, uint64_t>, GbdtDataset> cache;
  auto it = cache.find({programs, seed});
  if (it == cache.end())
    it = cache.emplace(std::pair{programs, seed}, synthetic(programs, seed)).first;
  return it->second;
}

// Time is CPU time for the single-threaded runs (the fair measure on a shared machine) and
// wall time for the threaded one.
void BM_Gbdt_Train(benchmark::State& state) {
  const GbdtDataset& d = dataset(static_cast<size_t>(state.range(0)), 1);
  GbdtParams p;  // Ansor's parameters
  p.num_threads = static_cast<int>(state.range(1));
  Gbdt m;
  for (auto _ : state) {
    m = Gbdt::train(d, p);
    benchmark::DoNotOptimize(m);
  }
  state.counters["rows"] = static_cast<double>(d.num_rows());
  state.counters["trees"] = m.num_trees();
  state.counters["rounds"] = m.train_info().rounds_trained;
  state.counters["rounds_per_s"] = benchmark::Counter(
      static_cast<double>(m.train_info().rounds_trained) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.counters["train_rmse"] = m.train_info().best_rmse;
  state.SetLabel(p.num_threads == 1 ? "1 thread" : std::to_string(p.num_threads) + " threads");
}
BENCHMARK(BM_Gbdt_Train)
    ->Args({3000, 1})
    ->Args({10000, 1})
    ->Args({30000, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Gbdt_Train)->Args({10000, 4})->Unit(benchmark::kMillisecond)->UseRealTime();

/// A model trained on 10,000 programs (Ansor's parameters), kept for the prediction benchmarks.
const Gbdt& trained_model() {
  static const Gbdt m = Gbdt::train(dataset(10000, 1), GbdtParams{});
  return m;
}

void BM_Gbdt_PredictRows(benchmark::State& state) {
  const Gbdt& m = trained_model();
  const GbdtDataset& test = dataset(10000, 2);
  std::vector<float> out(test.num_rows());
  for (auto _ : state) {
    m.predict_rows(test.features.data(), test.num_rows(), out.data());
    benchmark::ClobberMemory();
  }
  state.counters["rows_per_s"] = benchmark::Counter(
      static_cast<double>(test.num_rows()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.counters["trees"] = m.num_trees();
}
BENCHMARK(BM_Gbdt_PredictRows)->Unit(benchmark::kMillisecond);

/// Prediction cost per tree: the same rows through a model with a fixed 300 trees of depth 10.
void BM_Gbdt_PredictRows300Trees(benchmark::State& state) {
  static const Gbdt m = [] {
    GbdtParams p;
    p.max_rounds = 300;
    p.early_stopping_rounds = 0;
    return Gbdt::train(dataset(3000, 3), p);
  }();
  const GbdtDataset& test = dataset(10000, 2);
  std::vector<float> out(test.num_rows());
  for (auto _ : state) {
    m.predict_rows(test.features.data(), test.num_rows(), out.data());
    benchmark::ClobberMemory();
  }
  state.counters["rows_per_s"] = benchmark::Counter(
      static_cast<double>(test.num_rows()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.counters["trees"] = m.num_trees();
}
BENCHMARK(BM_Gbdt_PredictRows300Trees)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
