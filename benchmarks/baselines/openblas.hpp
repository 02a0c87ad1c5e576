/// \file
/// OpenBLAS fp32 GEMM baseline: cblas_sgemm, row-major, no transposes, alpha 1, beta 0.
///
/// Threading: Debian's default libopenblas is the pthreads build (openblas-pthread; the OpenMP
/// build is libopenblas0-openmp). Its own thread pool is sized at load time to the core count and
/// `openblas_set_num_threads(n)` sets how many of those threads a call uses; it works for the
/// OpenMP build too. openblas_threading() reports which build was loaded.
///
/// Pitfall: after a multi-threaded call the pthreads workers busy-wait for
/// 2^OPENBLAS_THREAD_TIMEOUT TSC cycles (default 2^28, ~0.1 s) before sleeping, taking a core from
/// whatever runs next. The GEMM harness therefore waits for the process to go idle before every
/// timed loop.
#ifndef LOOM_BENCH_BASELINES_OPENBLAS_HPP
#define LOOM_BENCH_BASELINES_OPENBLAS_HPP

#if defined(LOOM_BENCH_HAVE_OPENBLAS)

#include <cblas.h>

#include <cstdint>
#include <string>

// OpenBLAS's extensions, declared here as well because the cblas.h found first may be the netlib
// one (Debian's alternatives); the declarations match OpenBLAS's own cblas.h.
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
int openblas_get_parallel(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace loom_bench {

/// C = A * B with cblas_sgemm, all row-major.
inline void gemm_openblas(const float* a, const float* b, float* c, int64_t m, int64_t n,
                          int64_t k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a, int(k), b,
              int(n), 0.0f, c, int(n));
}

/// Sets the number of threads OpenBLAS calls use (at most the pool size chosen at load time).
inline void openblas_set_threads(int n) { openblas_set_num_threads(n); }

/// Threads a call can use: the pool size OpenBLAS was loaded with (1 for the serial build).
inline int openblas_max_threads() { return openblas_get_parallel() == 0 ? 1 : (1 << 20); }

/// "sequential", "pthreads" or "OpenMP": the build of libopenblas that was loaded.
inline std::string openblas_threading() {
  switch (openblas_get_parallel()) {
    case 0: return "sequential";
    case 1: return "pthreads";
    case 2: return "OpenMP";
    default: return "unknown";
  }
}

/// "OpenBLAS 0.3.21 ... (core Zen), threads: pthreads".
inline std::string openblas_info() {
  return std::string(openblas_get_config()) + " (core " + openblas_get_corename() +
         "), threads: " + openblas_threading();
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_HAVE_OPENBLAS
#endif  // LOOM_BENCH_BASELINES_OPENBLAS_HPP
