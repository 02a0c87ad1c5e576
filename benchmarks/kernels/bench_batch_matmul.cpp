/// \file
/// fp32 batch matmul C[b] = A[b] * B[b] (A [batch, M, K], B [batch, K, N], C [batch, M, N], all
/// row-major and densely packed) at 1 and 2 threads: naive loops, Eigen, OpenBLAS, oneDNN's matmul
/// with a batch dimension, loom's tuned program and (LOOM_BENCH_HALIDE=ON) the kernels of Halide's
/// autoschedulers. The shape is 12 x (128x64 * 64x128), the
/// attention-score product of BERT-base (12 heads, 128 tokens, head size 64). Named
/// BM_BatchMatmul_<Contender>/<batch>/<M>/<N>/<K>/<threads>; every contender is checked once
/// against a double-precision reference before it is timed.
#include "baselines/common.hpp"
#include "baselines/context.hpp"
#include "baselines/dnnl.hpp"
#include "baselines/eigen.hpp"
#include "baselines/naive.hpp"
#include "baselines/openblas.hpp"
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

/// `batch` independent fp32 GEMMs of one shape.
struct BatchGemmShape {
  int64_t batch = 0, m = 0, n = 0, k = 0;

  double flop() const { return 2.0 * double(batch) * double(m) * double(n) * double(k); }
  /// "batch/M/N/K", the order used in benchmark names (bench_gemm's M/N/K behind the batch).
  std::string name() const {
    return std::to_string(batch) + "/" + std::to_string(m) + "/" + std::to_string(n) + "/" +
           std::to_string(k);
  }
  friend auto operator<=>(const BatchGemmShape&, const BatchGemmShape&) = default;
};

using BatchCall = std::function<void(const float* a, const float* b, float* c)>;
/// One GEMM of a batch, as bench_gemm's plain contenders take it.
using GemmFn = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t);

struct BatchContender {
  std::string name;
  /// Prepares one (shape, threads) instance outside timing; returns the call and a label.
  std::function<std::pair<BatchCall, std::string>(const BatchGemmShape&, int threads)> prepare;
  std::function<void(int)> set_threads;
  int max_threads = 1;
  int min_threads = 1;  ///< for a variant that only differs from another one above 1 thread
};

/// C[b] = A[b] * B[b] for every b with one GEMM function, batch after batch.
BatchCall batch_loop(GemmFn gemm, const BatchGemmShape& s) {
  return [gemm, s](const float* a, const float* b, float* c) {
    for (int64_t i = 0; i < s.batch; ++i)
      gemm(a + i * s.m * s.k, b + i * s.k * s.n, c + i * s.m * s.n, s.m, s.n, s.k);
  };
}

std::vector<BatchContender> make_contenders() {
  std::vector<BatchContender> all;
  // The naive loops of bench_gemm (which runs the scalar i,j,k order only up to 256^3 flops per
  // GEMM; 12 x 128x128x64 is below that), one GEMM after the other, 1 thread.
  all.push_back({"NaiveIJK",
                 [](const BatchGemmShape& s, int) {
                   return std::pair<BatchCall, std::string>(
                       batch_loop(loom_bench::gemm_naive_ijk, s), "i,j,k per batch, scalar");
                 },
                 {},
                 1});
  all.push_back({"NaiveIKJ",
                 [](const BatchGemmShape& s, int) {
                   return std::pair<BatchCall, std::string>(
                       batch_loop(loom_bench::gemm_naive_ikj, s), "i,k,j per batch, vectorized");
                 },
                 {},
                 1});
#if defined(LOOM_BENCH_HAVE_EIGEN)
  // As bench_gemm: Eigen's own threads split each product's rows.
  all.push_back({"Eigen",
                 [](const BatchGemmShape& s, int) {
                   return std::pair<BatchCall, std::string>(
                       batch_loop(loom_bench::gemm_eigen, s),
                       std::to_string(s.batch) + " products, Eigen threads per product, " +
                           loom_bench::eigen_simd());
                 },
                 loom_bench::eigen_set_threads, loom_bench::eigen_max_threads()});
#if defined(_OPENMP)
  // The batch split across OpenMP threads, each product single-threaded (Eigen does not nest
  // its parallel GEMM inside a parallel region): one barrier per call instead of one per product.
  // The same computation as Eigen at 1 thread, so only registered above it.
  all.push_back({"Eigen_BatchOmp",
                 [](const BatchGemmShape& s, int threads) {
                   return std::pair<BatchCall, std::string>(
                       [s, threads](const float* a, const float* b, float* c) {
#pragma omp parallel for num_threads(threads) schedule(static)
                         for (int64_t i = 0; i < s.batch; ++i)
                           loom_bench::gemm_eigen(a + i * s.m * s.k, b + i * s.k * s.n,
                                                  c + i * s.m * s.n, s.m, s.n, s.k);
                       },
                       "batch split by OpenMP, " + loom_bench::eigen_simd());
                 },
                 loom_bench::eigen_set_threads, loom_bench::eigen_max_threads(), 2});
#endif
#endif
#if defined(LOOM_BENCH_HAVE_OPENBLAS)
  // The OpenBLAS of this project (Debian 0.3.21) declares no cblas_sgemm_batch: one cblas_sgemm
  // per batch, each split over OpenBLAS's own thread pool.
  all.push_back({"OpenBLAS",
                 [](const BatchGemmShape& s, int) {
                   return std::pair<BatchCall, std::string>(
                       batch_loop(loom_bench::gemm_openblas, s),
                       std::to_string(s.batch) + " x cblas_sgemm, " + openblas_get_corename());
                 },
                 loom_bench::openblas_set_threads, loom_bench::openblas_max_threads()});
#endif
#if defined(LOOM_BENCH_HAVE_DNNL)
  all.push_back(
      {"OneDNN",
       [](const BatchGemmShape& s, int threads) {
         auto mm = std::make_shared<loom_bench::DnnlBatchMatmul>(s.batch, s.m, s.n, s.k, threads);
         std::string label = mm->impl_name() + ", one primitive, B row-major";
         return std::pair<BatchCall, std::string>(
             [mm](const float* a, const float* b, float* c) { (*mm)(a, b, c); }, std::move(label));
       },
       loom_bench::dnnl_set_threads, loom_bench::dnnl_threads_controllable() ? (1 << 20) : 1});
#endif
#if defined(LOOM_BENCH_HAVE_LOOM)
  // loom's tuned batch_matmul (baselines/loom_tuned.hpp), B read as it is.
  all.push_back({"LoomTuned",
                 [](const BatchGemmShape& s, int threads) {
                   using namespace loom;
                   // Built exactly as tune_workloads builds it, so that the workload keys match.
                   auto a = placeholder<float>("A", {s.batch, s.m, s.k});
                   auto b = placeholder<float>("B", {s.batch, s.k, s.n});
                   Task task(ComputeDAG({a, b}, {ops::batch_matmul(a, b)}));
                   runtime::set_num_threads(threads);
                   auto best = loom_bench::tuned_program(task);
                   auto kernel = std::make_shared<Kernel>(build(task, best.first));
                   return std::pair<BatchCall, std::string>(
                       [kernel](const float* x, const float* y, float* z) {
                         void* args[] = {const_cast<float*>(x), const_cast<float*>(y), z};
                         kernel->run_unchecked(args);
                       },
                       "tuned (" + best.second + ")");
                 },
                 [](int n) { loom::runtime::set_num_threads(n); }, 2});
#endif
#if defined(LOOM_BENCH_HAVE_HALIDE)
  // Halide 14's autoschedulers, compiled ahead of time for this shape (benchmarks/halide/).
  for (const std::string& variant : loom_bench::halide_variants()) {
    if (variant == "Hand") continue;  // hand-scheduled for bench_gemm only
    all.push_back(
        {"Halide" + variant,
         [variant](const BatchGemmShape& s, int) {
           const loom_bench::HalideKernel* k =
               loom_bench::find_halide_kernel("batch_matmul", variant, {s.batch, s.m, s.n, s.k});
           if (!k) throw std::runtime_error("no Halide kernel generated for this shape");
           auto call = std::make_shared<loom_bench::HalideCall>(
               *k, std::initializer_list<std::vector<int>>{{int(s.batch), int(s.m), int(s.k)},
                                                           {int(s.batch), int(s.k), int(s.n)},
                                                           {int(s.batch), int(s.m), int(s.n)}});
           std::string label = call->label();
           return std::pair<BatchCall, std::string>(
               [call](const float* a, const float* b, float* c) {
                 call->set(0, a);
                 call->set(1, b);
                 call->set(2, c);
                 (*call)();
               },
               std::move(label));
         },
         loom_bench::halide_set_threads, 1 << 20});
  }
#endif
  return all;
}

std::vector<BatchContender>& contenders() {
  static std::vector<BatchContender> all = make_contenders();
  return all;
}

/// Inputs, output and reference of one shape, shared by every contender.
struct BatchData {
  AlignedFloats a, b, c, ref;
};

BatchData& batch_data(const BatchGemmShape& s) {
  static std::map<BatchGemmShape, std::unique_ptr<BatchData>> cache;
  auto& d = cache[s];
  if (!d) {
    d = std::make_unique<BatchData>();
    d->a = AlignedFloats(std::size_t(s.batch * s.m * s.k));
    d->b = AlignedFloats(std::size_t(s.batch * s.k * s.n));
    d->c = AlignedFloats(std::size_t(s.batch * s.m * s.n));
    d->ref = AlignedFloats(d->c.size());
    loom_bench::fill_uniform(d->a.data(), d->a.size(), 0x5eed0031u);
    loom_bench::fill_uniform(d->b.data(), d->b.size(), 0x5eed0032u);
    for (int64_t i = 0; i < s.batch; ++i)
      loom_bench::gemm_reference(d->a.data() + i * s.m * s.k, d->b.data() + i * s.k * s.n,
                                 d->ref.data() + i * s.m * s.n, s.m, s.n, s.k);
  }
  return *d;
}

using Prepared = std::pair<BatchCall, std::string>;  // the call and its label

void run_batch_matmul(benchmark::State& state, std::size_t ci, BatchGemmShape s, int threads) {
  BatchContender& c = contenders()[ci];
  BatchData& d = batch_data(s);
  if (c.set_threads) c.set_threads(threads);
  static std::map<std::tuple<std::size_t, BatchGemmShape, int>,
                  loom_bench::CheckedInstance<Prepared>>
      slots;
  const Prepared* prepared = loom_bench::checked_instance(
      state, slots[{ci, s, threads}], [&] { return c.prepare(s, threads); },
      [&](const Prepared& p) {
        loom_bench::fill_nan(d.c.data(), d.c.size());
        p.first(d.a.data(), d.b.data(), d.c.data());
        return loom_bench::check_close(d.c.data(), d.ref.data(), d.c.size(),
                                       loom_bench::gemm_tolerance(s.k));
      });
  if (!prepared) return;
  const float* a = d.a.data();
  const float* b = d.b.data();
  float* out = d.c.data();
  loom_bench::run_timed(state, [&] { prepared->first(a, b, out); }, "GFLOPS", s.flop() * 1e-9);
  state.SetLabel(prepared->second);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const std::vector<BatchGemmShape> shapes = {{.batch = 12, .m = 128, .n = 128, .k = 64}};
  for (const BatchGemmShape& s : shapes) {
    for (int t : {1, 2}) {
      for (std::size_t ci = 0; ci < contenders().size(); ++ci) {
        const BatchContender& c = contenders()[ci];
        if (t > c.max_threads || t < c.min_threads) continue;
        const std::string name =
            "BM_BatchMatmul_" + c.name + "/" + s.name() + "/" + std::to_string(t);
        benchmark::RegisterBenchmark(
            name.c_str(), [ci, s, t](benchmark::State& st) { run_batch_matmul(st, ci, s, t); })
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
