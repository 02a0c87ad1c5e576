/// \file
/// Naive fp32 GEMM baselines, single-threaded: what a compiler makes of the textbook loops.
///  - gemm_naive_ijk: the truly naive i,j,k order with a scalar accumulator. Strict IEEE keeps
///    the k-reduction sequential, and B is walked down a column (stride N), so it is scalar,
///    latency-bound and cache-hostile. Only sensible for small shapes.
///  - gemm_naive_ikj: the i,k,j order, whose inner loop streams a row of B into a row of C and is
///    auto-vectorized at -O3 -march=native. The "no schedule" baseline a tuner must beat by far.
#ifndef LOOM_BENCH_BASELINES_NAIVE_HPP
#define LOOM_BENCH_BASELINES_NAIVE_HPP

#include <cstdint>

namespace loom_bench {

/// C = A * B, row-major, i,j,k loop order.
// GCC's -O3 loop interchange (-floop-interchange) may turn this nest into i,k,j, which would make
// "naive" silently fast; keep the textbook order by disabling that one pass here.
__attribute__((noinline, optimize("no-loop-interchange"))) inline void gemm_naive_ijk(
    const float* __restrict a, const float* __restrict b, float* __restrict c, int64_t m,
    int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
      c[i * n + j] = acc;
    }
  }
}

/// C = A * B, row-major, i,k,j loop order (inner loop vectorizes over j).
__attribute__((noinline)) inline void gemm_naive_ikj(const float* __restrict a,
                                                     const float* __restrict b,
                                                     float* __restrict c, int64_t m, int64_t n,
                                                     int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    float* crow = c + i * n;
    for (int64_t j = 0; j < n; ++j) crow[j] = 0.0f;
    for (int64_t p = 0; p < k; ++p) {
      const float aip = a[i * k + p];
      const float* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) crow[j] += aip * brow[j];
    }
  }
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_BASELINES_NAIVE_HPP
