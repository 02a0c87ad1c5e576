/// \file
/// fp32 row-wise softmax (memory-bound) at 1 and 2 threads: the naive three-pass loop with std::exp
/// (strict IEEE), Eigen array expressions per row, oneDNN's softmax primitive, loom's tuned program
/// and (LOOM_BENCH_HALIDE=ON) the kernels of Halide's autoschedulers. Named
/// BM_Softmax_<Contender>/<rows>/<cols>/<threads>; reports GB/s counting one read of x and one
/// write of y (2 * rows * cols * 4 bytes per call). Checked once against a double reference.
#include "baselines/common.hpp"
#include "baselines/context.hpp"
#include "baselines/dnnl.hpp"
#include "baselines/eigen.hpp"
#include "baselines/naive.hpp"
#include "baselines/timing.hpp"
#if defined(LOOM_BENCH_HAVE_LOOM)
#include "baselines/loom_tuned.hpp"
#endif
#if defined(LOOM_BENCH_HAVE_HALIDE)
#include "baselines/halide.hpp"
#endif

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using loom_bench::AlignedFloats;

using SoftmaxCall = std::function<void(const float* x, float* y)>;

struct SoftmaxContender {
  std::string name;
  /// Prepares one (rows, cols, threads) instance outside timing; returns the call and a label.
  std::function<std::pair<SoftmaxCall, std::string>(int64_t rows, int64_t cols, int threads)>
      prepare;
  std::function<void(int)> set_threads;
  int max_threads = 1;
  /// Shapes this contender is registered for; empty means every shape.
  std::function<bool(int64_t rows, int64_t cols)> accepts;
};

std::vector<SoftmaxContender> make_contenders() {
  std::vector<SoftmaxContender> all;
#if defined(_OPENMP)
  constexpr int kOmpMax = 1 << 20;
#else
  constexpr int kOmpMax = 1;
#endif
  all.push_back({"NaiveStrict",
                 [](int64_t rows, int64_t cols, int threads) {
                   return std::pair<SoftmaxCall, std::string>(
                       [=](const float* x, float* y) {
                         loom_bench::softmax_naive_rows(x, y, rows, cols, threads);
                       },
                       "std::exp, rows split by OpenMP");
                 },
                 {},
                 kOmpMax});
#if defined(LOOM_BENCH_HAVE_EIGEN)
  all.push_back({"Eigen",
                 [](int64_t rows, int64_t cols, int threads) {
                   return std::pair<SoftmaxCall, std::string>(
                       [=](const float* x, float* y) {
                         loom_bench::softmax_eigen_rows(x, y, rows, cols, threads);
                       },
                       "per row, rows split by OpenMP");
                 },
                 {},
                 kOmpMax});
#endif
#if defined(LOOM_BENCH_HAVE_DNNL)
  all.push_back({"OneDNN",
                 [](int64_t rows, int64_t cols, int threads) {
                   auto sm = std::make_shared<loom_bench::DnnlSoftmax>(rows, cols, threads);
                   std::string label = sm->impl_name();
                   return std::pair<SoftmaxCall, std::string>(
                       [sm](const float* x, float* y) { (*sm)(x, y); }, std::move(label));
                 },
                 loom_bench::dnnl_set_threads,
                 loom_bench::dnnl_threads_controllable() ? (1 << 20) : 1});
#endif
#if defined(LOOM_BENCH_HAVE_LOOM)
  // loom's tuned softmax (baselines/loom_tuned.hpp), for the shapes the tuning logs hold.
  all.push_back({"LoomTuned",
                 [](int64_t rows, int64_t cols, int threads) {
                   using namespace loom;
                   // Built exactly as tune_workloads builds it, so that the workload keys match.
                   auto x = placeholder<float>("X", {rows, cols});
                   Task task(ComputeDAG({x}, {ops::softmax(x)}));
                   runtime::set_num_threads(threads);
                   auto best = loom_bench::tuned_program(task);
                   auto kernel = std::make_shared<Kernel>(build(task, best.first));
                   return std::pair<SoftmaxCall, std::string>(
                       [kernel](const float* in, float* out) {
                         void* args[] = {const_cast<float*>(in), out};
                         kernel->run_unchecked(args);
                       },
                       "tuned (" + best.second + ")");
                 },
                 [](int n) { loom::runtime::set_num_threads(n); }, 2});
#endif
#if defined(LOOM_BENCH_HAVE_HALIDE)
  // Halide 14's autoschedulers, compiled ahead of time per shape (benchmarks/halide/).
  for (const std::string& variant : loom_bench::halide_variants()) {
    if (variant == "Hand") continue;  // hand-scheduled for bench_gemm only
    const auto kernel = [variant](int64_t rows, int64_t cols) {
      return loom_bench::find_halide_kernel("softmax", variant, {rows, cols, 0, 0});
    };
    all.push_back({"Halide" + variant,
                   [kernel](int64_t rows, int64_t cols, int) {
                     auto call = std::make_shared<loom_bench::HalideCall>(
                         *kernel(rows, cols), std::initializer_list<std::vector<int>>{
                                                  {int(rows), int(cols)}, {int(rows), int(cols)}});
                     std::string label = call->label();
                     return std::pair<SoftmaxCall, std::string>(
                         [call](const float* in, float* out) {
                           call->set(0, in);
                           call->set(1, out);
                           (*call)();
                         },
                         std::move(label));
                   },
                   loom_bench::halide_set_threads, 1 << 20,
                   [kernel](int64_t rows, int64_t cols) { return kernel(rows, cols) != nullptr; }});
  }
#endif
  return all;
}

std::vector<SoftmaxContender>& contenders() {
  static std::vector<SoftmaxContender> all = make_contenders();
  return all;
}

struct SoftmaxData {
  AlignedFloats x, y, ref;
};

SoftmaxData& softmax_data(int64_t rows, int64_t cols) {
  static std::map<std::pair<int64_t, int64_t>, std::unique_ptr<SoftmaxData>> cache;
  auto& d = cache[{rows, cols}];
  if (!d) {
    d = std::make_unique<SoftmaxData>();
    const auto n = std::size_t(rows * cols);
    d->x = AlignedFloats(n);
    d->y = AlignedFloats(n);
    d->ref = AlignedFloats(n);
    // Logits in [-8, 8): exp spans e^16, so a softmax without the max shift would still be exact
    // here, but a wrong max or sum is not.
    loom_bench::fill_uniform(d->x.data(), n, 0x5eed0021u);
    for (std::size_t i = 0; i < n; ++i) d->x[i] *= 8.0f;
    loom_bench::softmax_reference(d->x.data(), d->ref.data(), rows, cols);
  }
  return *d;
}

using Prepared = std::pair<SoftmaxCall, std::string>;  // the call and its label

void run_softmax(benchmark::State& state, std::size_t ci, int64_t rows, int64_t cols, int threads) {
  SoftmaxContender& c = contenders()[ci];
  SoftmaxData& d = softmax_data(rows, cols);
  if (c.set_threads) c.set_threads(threads);
  static std::map<std::tuple<std::size_t, int64_t, int64_t, int>,
                  loom_bench::CheckedInstance<Prepared>>
      slots;
  const Prepared* prepared = loom_bench::checked_instance(
      state, slots[{ci, rows, cols, threads}], [&] { return c.prepare(rows, cols, threads); },
      [&](const Prepared& p) {
        loom_bench::fill_nan(d.y.data(), d.y.size());
        p.first(d.x.data(), d.y.data());
        // Outputs are probabilities (<= 1, ~1/cols on average): an absolute 1e-6 allows a few
        // ulp of a fast exp and a reassociated sum, not a wrong max or normalization.
        return loom_bench::check_close(d.y.data(), d.ref.data(), d.y.size(), 1e-6);
      });
  if (!prepared) return;
  const float* x = d.x.data();
  float* y = d.y.data();
  loom_bench::run_timed(
      state, [&] { prepared->first(x, y); }, "GBps",
      2.0 * double(rows * cols) * sizeof(float) * 1e-9);
  state.SetLabel(prepared->second);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1024, 1024}, {128 * 12, 128}};
  for (auto [rows, cols] : shapes) {
    for (int t : {1, 2}) {
      for (std::size_t ci = 0; ci < contenders().size(); ++ci) {
        const SoftmaxContender& c = contenders()[ci];
        if (t > c.max_threads || (c.accepts && !c.accepts(rows, cols))) continue;
        const std::string name = "BM_Softmax_" + contenders()[ci].name + "/" +
                                 std::to_string(rows) + "/" + std::to_string(cols) + "/" +
                                 std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [ci, rows = rows, cols = cols, t](benchmark::State& st) {
                                       run_softmax(st, ci, rows, cols, t);
                                     })
            ->Unit(benchmark::kMicrosecond)
            ->MeasureProcessCPUTime()
            ->UseRealTime();
      }
    }
  }
  loom_bench::add_library_context();
#if defined(LOOM_BENCH_HAVE_HALIDE)
  loom_bench::add_halide_context();
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
