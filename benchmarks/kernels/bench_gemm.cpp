/// \file
/// fp32 GEMM C[M,N] = A[M,K] * B[K,N] (row-major), every available baseline side by side at 1 and
/// 2 threads: naive loops, Eigen, OpenBLAS, oneDNN (B row-major and B prepacked), and with
/// LOOM_BENCH_HALIDE=ON Halide 14's kernels (kernels/gemm_halide.cpp). Benchmarks are
/// named BM_Gemm_<Contender>/<M>/<N>/<K>/<threads>; see benchmarks/README.md for how to run them
/// and how a loom kernel joins as one more contender.
#include "baselines/common.hpp"
#include "baselines/context.hpp"
#include "baselines/dnnl.hpp"
#include "baselines/eigen.hpp"
#include "baselines/gemm_bench.hpp"
#include "baselines/naive.hpp"
#include "baselines/openblas.hpp"
#if defined(LOOM_BENCH_HAVE_HALIDE)
#include "baselines/halide.hpp"
#endif

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

using loom_bench::GemmContender;
using loom_bench::GemmInstance;
using loom_bench::GemmShape;

/// The baselines, in the order they alternate in the run.
std::vector<GemmContender> baseline_contenders() {
  std::vector<GemmContender> out;
  // The i,j,k loop is scalar and strided (~1 GFLOP/s): only the two small shapes.
  out.push_back(loom_bench::make_gemm_contender(
      "NaiveIJK", loom_bench::gemm_naive_ijk, {}, 1,
      [](const GemmShape& s) { return s.m * s.n * s.k <= 256 * 256 * 256; }));
  out.push_back(loom_bench::make_gemm_contender("NaiveIKJ", loom_bench::gemm_naive_ikj));

#if defined(LOOM_BENCH_HAVE_EIGEN)
  out.push_back(loom_bench::make_gemm_contender(
      "Eigen", loom_bench::gemm_eigen, loom_bench::eigen_set_threads,
      loom_bench::eigen_max_threads(), {}, loom_bench::eigen_simd()));
#endif

#if defined(LOOM_BENCH_HAVE_OPENBLAS)
  out.push_back(loom_bench::make_gemm_contender(
      "OpenBLAS", loom_bench::gemm_openblas, loom_bench::openblas_set_threads,
      loom_bench::openblas_max_threads(), {}, openblas_get_corename()));
#endif

#if defined(LOOM_BENCH_HAVE_DNNL)
  for (auto layout : {loom_bench::DnnlBLayout::RowMajor, loom_bench::DnnlBLayout::Prepacked}) {
    GemmContender c;
    c.name = layout == loom_bench::DnnlBLayout::RowMajor ? "OneDNN_RowMajorB" : "OneDNN_PackedB";
    c.prepare = [layout](const GemmShape& s, int threads, const float*, const float* b) {
      auto mm = std::make_shared<loom_bench::DnnlMatmul>(s.m, s.n, s.k, b, layout, threads);
      std::string label = mm->impl_name();
      return GemmInstance{[mm](const float* a, const float* bb, float* dst) { (*mm)(a, bb, dst); },
                          std::move(label)};
    };
    c.set_threads = loom_bench::dnnl_set_threads;
    c.max_threads = loom_bench::dnnl_threads_controllable() ? (1 << 20) : 1;
    out.push_back(std::move(c));
  }
#endif
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  // Baselines first, then whatever other translation units registered (loom kernels).
  std::vector<GemmContender> contenders = baseline_contenders();
  for (GemmContender& c : loom_bench::gemm_contenders()) contenders.push_back(std::move(c));
  loom_bench::gemm_contenders() = std::move(contenders);

  loom_bench::register_gemm_benchmarks(loom_bench::default_gemm_shapes(), {1, 2});

  loom_bench::add_library_context();
#if defined(LOOM_BENCH_HAVE_HALIDE)
  loom_bench::add_halide_context();
#endif

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
