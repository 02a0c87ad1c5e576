/// \file
/// Eigen 3.4 fp32 GEMM baseline: row-major Maps over the caller's buffers and a noalias product
/// (Eigen's GEBP kernel with its own packing, SIMD width fixed at compile time by -march).
///
/// Threading: Eigen parallelizes GEMM with OpenMP (`#pragma omp parallel num_threads(n)`) only
/// when the translation unit is compiled with OpenMP; `Eigen::setNbThreads(n)` sets n. Without
/// OpenMP Eigen is single-threaded and eigen_max_threads() says so.
#ifndef LOOM_BENCH_BASELINES_EIGEN_HPP
#define LOOM_BENCH_BASELINES_EIGEN_HPP

#if defined(LOOM_BENCH_HAVE_EIGEN)

#include <cstdint>
#include <string>

#include <Eigen/Core>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace loom_bench {

/// C = A * B with Eigen, all row-major.
inline void gemm_eigen(const float* a, const float* b, float* c, int64_t m, int64_t n,
                       int64_t k) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMajor, Eigen::Aligned64> ma(a, m, k);
  Eigen::Map<const RowMajor, Eigen::Aligned64> mb(b, k, n);
  Eigen::Map<RowMajor, Eigen::Aligned64> mc(c, m, n);
  mc.noalias() = ma * mb;
}

/// Threads Eigen can use in this build: 1 without OpenMP.
inline int eigen_max_threads() {
#if defined(_OPENMP)
  return 1 << 20;
#else
  return 1;
#endif
}

/// Sets Eigen's GEMM thread count. OpenMP's own count is set too, because Eigen falls back to
/// omp_get_max_threads() where setNbThreads was never called and other code reads it.
inline void eigen_set_threads(int n) {
#if defined(_OPENMP)
  omp_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

/// "Eigen 3.4.0, SIMD AVX2 FMA, OpenMP": version, instruction sets and threading.
inline std::string eigen_info() {
  std::string s = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                  std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
                  ", SIMD " + Eigen::SimdInstructionSetsInUse();
#if defined(_OPENMP)
  s += ", threads: OpenMP (" + std::to_string(_OPENMP) + ")";
#else
  s += ", threads: none (built without OpenMP)";
#endif
  return s;
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_HAVE_EIGEN
#endif  // LOOM_BENCH_BASELINES_EIGEN_HPP
