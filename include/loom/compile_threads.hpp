/// \file
/// Threads for loom's own work (layer core): the search's sampling and evolution, feature
/// extraction and training the cost model run on these, never on the kernels' runtime
/// (runtime/parallel.hpp). The two counts mean different things: a kernel tuned for 1 thread is
/// measured with the runtime set to 1, and the search that proposes it should still use every
/// core; an application that runs kernels on 8 threads may want its compiler on 2.
///
/// The default is the environment variable LOOM_COMPILE_THREADS when set to a positive number,
/// otherwise the cores this process may run on. `set_compile_threads` changes it for every
/// thread. A thread count never changes a result: work is split into items that each write
/// their own output and draw from their own seeded generator.
///
/// Threads are started per parallel region and joined at its end, not kept in a pool: a region
/// is milliseconds of work (a generation of the evolutionary search, features of a batch, a
/// histogram over a large node) against tens of microseconds to start a thread, and no thread
/// is alive when a measurer forks a child. The caller works too and claims whatever chunk no
/// thread has taken yet, so a thread that does not get a core on a loaded machine delays
/// nothing. A region inside another one runs serially on its thread.
#ifndef LOOM_COMPILE_THREADS_HPP
#define LOOM_COMPILE_THREADS_HPP

#include "loom/detail/cores.hpp"
#include "loom/error.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE

namespace detail {
inline std::atomic<int>& compile_threads_setting() {
  static std::atomic<int> n{0};  // 0: the default
  return n;
}
inline thread_local bool in_compile_region = false;
}  // namespace detail

/// The default number of compile threads: LOOM_COMPILE_THREADS when set to a positive number,
/// otherwise the cores this process may run on. Read once.
inline int default_compile_threads() noexcept {
  static const int n = [] {
    if (const char* env = std::getenv("LOOM_COMPILE_THREADS")) {
      const int v = std::atoi(env);
      if (v > 0) return v;
    }
    return detail::available_cores();
  }();
  return n;
}

/// The number of threads loom's own work uses now (at least 1).
inline int compile_threads() noexcept {
  const int n = detail::compile_threads_setting().load(std::memory_order_relaxed);
  return n > 0 ? n : default_compile_threads();
}

/// Sets the number of threads loom's own work uses from now on; 0 restores the default. A
/// negative `n` is a loom::user_error `[loom.core.E010]`.
inline void set_compile_threads(int n) {
  LOOM_USER_CHECK(n >= 0, "loom.core.E010")
      << "set_compile_threads(" << n << "): the thread count must be >= 0 (0: the default, "
      << default_compile_threads() << " here)";
  detail::compile_threads_setting().store(n, std::memory_order_relaxed);
}

namespace detail {

/// Calls `fn(begin, end)` over `chunks` contiguous, nearly equal chunks of [0, n) (chunk k is
/// [n*k/chunks, n*(k+1)/chunks)), on up to `threads` threads (0: compile_threads()), the calling
/// thread included. Chunks are claimed in order from a shared counter. The first exception a
/// chunk throws is rethrown here after every thread has finished; the other chunks still run.
template <class Fn>
void parallel_chunks(size_t n, size_t chunks, Fn&& fn, int threads = 0) {
  if (n == 0) return;
  chunks = std::max<size_t>(1, std::min(chunks, n));
  if (threads <= 0) threads = compile_threads();
  const size_t workers = in_compile_region ? 0 : std::min<size_t>(threads, chunks) - 1;
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&] {
    const bool outer = !in_compile_region;
    in_compile_region = true;
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      try {
        fn(n * k / chunks, n * (k + 1) / chunks);
      } catch (...) {
        if (!failed.exchange(true, std::memory_order_acq_rel)) error = std::current_exception();
      }
    }
    if (outer) in_compile_region = false;
  };
  std::vector<std::thread> started;
  started.reserve(workers);
  for (size_t t = 0; t < workers; ++t) started.emplace_back(work);
  work();
  for (std::thread& th : started) th.join();
  if (failed.load(std::memory_order_acquire)) std::rethrow_exception(error);
}

/// parallel_chunks with one chunk per thread.
template <class Fn>
void parallel_chunks(size_t n, Fn&& fn) {
  parallel_chunks(n, static_cast<size_t>(compile_threads()), std::forward<Fn>(fn));
}

}  // namespace detail
LOOM_END_NAMESPACE

#endif  // LOOM_COMPILE_THREADS_HPP
