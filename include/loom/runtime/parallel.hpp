/// \file
/// The parallel runtime that JIT-compiled kernels call (layer runtime/).
///
/// Generated code outlines the body of a parallel loop into a function
/// `int body(int64_t begin, int64_t end, void* closure)` that runs tasks `[begin, end)`, packs the
/// loop's free variables into a closure, and calls `loom_parallel_for(n, body, closure)` once per
/// parallel loop. The CPU JIT binds the symbol `loom_parallel_for` to the function below through an
/// absolute symbol definition, so the host program needs no `-rdynamic`.
///
/// Contract of `loom_parallel_for`:
/// - the `n` tasks are split into `min(n, num_threads())` contiguous chunks of nearly equal size
///   (chunk k covers `[k*(n/c) + min(k, n%c), ...)`, larger chunks first), and `body` is called
///   once per chunk, concurrently on different threads. Chunk boundaries are deterministic for a
///   given `n` and thread count; which thread runs which chunk is not;
/// - the calling thread runs chunks too. It returns as soon as every chunk has finished and never
///   waits for a worker that has not started yet (on a loaded machine it simply runs more chunks
///   itself);
/// - with one thread or `n == 1`, from inside a body (a nested parallel loop), or while another
///   thread's parallel loop is running, the body runs once, serially, on the calling thread as
///   `body(0, n, closure)`;
/// - the result is 0 when every call returned 0, otherwise one of the non-zero codes returned;
///   all chunks run even when one fails (there is no cancellation);
/// - `body` must not throw (it is normally generated code; `loom::runtime::parallel_for` below
///   wraps C++ callables and carries their exceptions across).
///
/// Why a small thread pool and not OpenMP. OpenMP (libgomp) was the first choice; it was
/// implemented and measured against this pool on the 2-core development machine while other
/// builds kept it loaded (load average 5-8), which is also what a tuner's measurement phase
/// looks like. libgomp's join barrier waits for every team thread, so whenever its worker had
/// lost the core, a 2-thread loop stalled for a scheduler time slice: an isolated empty loop took
/// 6 us to 20 ms (median; p90 12-30 ms), 2 tasks of 50 us took 52 us when the worker had a core
/// and 12-24 ms otherwise. Here the caller takes over every chunk no worker has claimed, so the
/// same loops cost 0.15-0.3 us (p90 about 1 us) and at worst the serial time (100 us). OpenMP
/// also fits a header-only library badly: every including translation unit would need
/// `-fopenmp` (a TU without it silently gets a serial, ODR-violating copy of the inline
/// function), the flag would switch on `#pragma omp` in users' own code, libgomp's teams do not
/// survive `fork()` (search measurers fork) and every calling thread gets a team of its own.
/// The pool needs only `Threads::Threads`, which `loom::loom` already links.
///
/// The pool: `num_threads() - 1` persistent workers, started on first use, never stopped. They
/// spin (yielding) while a loop runs and for about 50 microseconds after it, so the consecutive
/// parallel loops of a kernel need no wake-up, then sleep on a condition variable. The default
/// thread count is `LOOM_NUM_THREADS` when set, otherwise the number of cores the process may
/// run on.
#ifndef LOOM_RUNTIME_PARALLEL_HPP
#define LOOM_RUNTIME_PARALLEL_HPP

#include "loom/config.hpp"

#include <atomic>
#include <cstdint>
#include <exception>
#include <type_traits>
#include <utility>

extern "C" {

/// Body of an outlined parallel loop: runs tasks `[begin, end)` and returns 0 on success or a
/// non-zero error code. `closure` is the pointer handed to loom_parallel_for.
typedef int (*loom_parallel_body)(int64_t begin, int64_t end, void* closure);

/// Runs tasks `[0, n)` of `body` over the runtime's threads (see the contract in the file
/// comment). Returns 0, or a non-zero code returned by a call of `body`. `n <= 0` does nothing.
LOOM_DECL int loom_parallel_for(int64_t n, loom_parallel_body body, void* closure) noexcept;

/// The number of threads loom_parallel_for uses now (for generated code that sizes scratch
/// buffers per thread).
LOOM_DECL int loom_parallel_num_threads(void) noexcept;

}  // extern "C"

LOOM_BEGIN_NAMESPACE
namespace runtime {

/// Sets the number of threads loom_parallel_for uses from now on, for every calling thread.
/// `n == 0` restores the default (`default_num_threads()`); a negative `n` is a loom::user_error
/// (`[loom.runtime.E601]`). Values above the core count are allowed (and oversubscribe).
LOOM_DECL void set_num_threads(int n);

/// The number of threads loom_parallel_for uses now (at least 1).
LOOM_DECL int num_threads() noexcept;

/// The default thread count: the environment variable LOOM_NUM_THREADS when set to a positive
/// number, otherwise the number of cores this process may run on. Read once, on first use.
LOOM_DECL int default_num_threads() noexcept;

/// C++ front end of loom_parallel_for: calls `f(begin, end)` over chunks of `[0, n)`.
///
/// `f` may return void, or int (non-zero is an error code, returned from here). An exception
/// thrown by `f` is caught on the worker thread, the remaining chunks still run, and the first
/// exception is rethrown on the calling thread.
template <class F>
int parallel_for(int64_t n, F&& f) {
  struct closure_t {
    std::remove_reference_t<F>* fn;
    std::exception_ptr error;
    std::atomic<bool> has_error{false};
  } closure{&f, nullptr};
  auto trampoline = [](int64_t begin, int64_t end, void* p) -> int {
    auto* c = static_cast<closure_t*>(p);
    try {
      if constexpr (std::is_void_v<decltype((*c->fn)(begin, end))>) {
        (*c->fn)(begin, end);
        return 0;
      } else {
        return static_cast<int>((*c->fn)(begin, end));
      }
    } catch (...) {
      // Only the first failing chunk keeps its exception; the join at the end of the parallel
      // region publishes it to the calling thread.
      if (!c->has_error.exchange(true, std::memory_order_acq_rel))
        c->error = std::current_exception();
      return -1;
    }
  };
  int rc = loom_parallel_for(n, +trampoline, &closure);
  if (closure.has_error.load(std::memory_order_acquire)) std::rethrow_exception(closure.error);
  return rc;
}

}  // namespace runtime
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/runtime/impl/parallel.ipp"
#endif

#endif  // LOOM_RUNTIME_PARALLEL_HPP
