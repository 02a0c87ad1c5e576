// Bodies of loom/runtime/parallel.hpp (OpenMP, libgomp).
#include "loom/runtime/parallel.hpp"

#include "loom/error.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

LOOM_BEGIN_NAMESPACE
namespace runtime {
namespace detail_parallel {

// 0 means "use the default". One process-wide setting, not OpenMP's per-thread nthreads ICV:
// omp_set_num_threads() would only affect the thread that calls it, while kernels may be run
// from any thread.
LOOM_DECL std::atomic<int>& requested_threads() noexcept {
  static std::atomic<int> n{0};
  return n;
}

}  // namespace detail_parallel

LOOM_DECL int default_num_threads() noexcept {
  // omp_get_max_threads() already folds in OMP_NUM_THREADS and the affinity mask; read it once
  // so that a user's later omp_set_num_threads() on some thread does not change loom's default.
  static const int n = std::max(1, omp_get_max_threads());
  return n;
}

LOOM_DECL void set_num_threads(int n) {
  LOOM_USER_CHECK(n >= 0, "loom.runtime.E601")
      << "set_num_threads(" << n << "): the thread count must be >= 0 (0 restores the default)";
  detail_parallel::requested_threads().store(n, std::memory_order_relaxed);
}

LOOM_DECL int num_threads() noexcept {
  int n = detail_parallel::requested_threads().load(std::memory_order_relaxed);
  return n > 0 ? n : default_num_threads();
}

}  // namespace runtime
LOOM_END_NAMESPACE

extern "C" LOOM_DECL int loom_parallel_num_threads(void) noexcept {
  return ::loom::runtime::num_threads();
}

extern "C" LOOM_DECL int loom_parallel_for(int64_t n, loom_parallel_body body,
                                           void* closure) noexcept {
  if (n <= 0) return 0;
  int64_t threads = std::min<int64_t>(::loom::runtime::num_threads(), n);
  // A nested parallel loop (or a kernel called from the user's own parallel region) runs inline:
  // entering another team would only oversubscribe the cores that the outer loop already uses.
  if (threads <= 1 || omp_in_parallel()) return body(0, n, closure);

  std::atomic<int> status{0};
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    // The team may be smaller than asked for (thread limits), so split by the actual size.
    const int64_t team = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t chunk = n / team, extra = n % team;
    const int64_t begin = id * chunk + std::min(id, extra);
    const int64_t end = begin + chunk + (id < extra ? 1 : 0);
    if (begin < end) {
      int rc = body(begin, end, closure);
      int ok = 0;
      if (rc != 0) status.compare_exchange_strong(ok, rc, std::memory_order_relaxed);
    }
  }
  return status.load(std::memory_order_relaxed);
}
