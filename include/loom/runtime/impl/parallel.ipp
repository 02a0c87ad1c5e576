// Bodies of loom/runtime/parallel.hpp: a small persistent thread pool.
//
// Protocol (one job at a time; the calling thread is the "master"):
// - The master writes the job descriptor, resets `done_`, then publishes the job by storing
//   `claim_ = (generation << 32) | 0` with release, bumps `epoch_` and wakes sleeping workers.
// - Everyone (master included) claims chunk indices by CAS on `claim_`; a successful CAS on a
//   value of generation g proves the descriptor read just before belongs to g, because the
//   master rewrites the descriptor only after every chunk of g has finished.
// - The master returns as soon as `done_ == chunks`. It never waits for a worker that has not
//   started: a late worker finds every chunk claimed and goes back to sleep.
// - Workers spin while a job runs and for a short while after it (back-to-back parallel loops
//   of one kernel then cost no wake-up), then sleep on a condition variable.
#include "loom/runtime/parallel.hpp"

#include "loom/detail/cores.hpp"
#include "loom/error.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace runtime {
namespace detail {

/// How long an idle worker spins after the last loop before it sleeps.
inline constexpr std::chrono::microseconds worker_spin{50};

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class thread_pool {
 public:
  /// Runs `chunks` chunks of [0, n) on the master and up to `helpers` workers.
  int run(int64_t n, int64_t chunks, int helpers, loom_parallel_body body, void* closure) noexcept {
    helpers = spawn(helpers);
    const uint64_t gen = (claim_.load(std::memory_order_relaxed) >> 32) + 1;
    n_.store(n, std::memory_order_relaxed);
    chunks_.store(chunks, std::memory_order_relaxed);
    helpers_.store(helpers, std::memory_order_relaxed);
    body_.store(body, std::memory_order_relaxed);
    closure_.store(closure, std::memory_order_relaxed);
    status_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    claim_.store(gen << 32, std::memory_order_release);
    if (helpers > 0) {
      epoch_.fetch_add(1, std::memory_order_seq_cst);
      // Dekker pairing with the worker's sleepers_ increment: one of the two sees the other.
      if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        {
          std::lock_guard<std::mutex> lock(mutex_);
        }
        wake_.notify_all();
      }
    }
    work(-1);
    for (int spins = 0; done_.load(std::memory_order_acquire) != chunks; ++spins) {
      // Only chunks that a running worker has claimed are left: wait for it briefly, then give
      // it the core in case it was preempted on ours.
      if (spins < 4096)
        cpu_relax();
      else
        std::this_thread::yield();
    }
    return status_.load(std::memory_order_relaxed);
  }

 private:
  /// Claims and runs chunks of the current job until none is left. `worker` is the worker's
  /// index, or -1 for the master.
  void work(int worker) noexcept {
    uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
      const int64_t chunks = chunks_.load(std::memory_order_relaxed);
      const int64_t n = n_.load(std::memory_order_relaxed);
      const int helpers = helpers_.load(std::memory_order_relaxed);
      loom_parallel_body body = body_.load(std::memory_order_relaxed);
      void* closure = closure_.load(std::memory_order_relaxed);
      const int64_t k = static_cast<int64_t>(c & 0xffffffffu);
      if (k >= chunks || worker >= helpers) return;
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire))
        continue;
      const int64_t size = n / chunks, extra = n % chunks;
      const int64_t begin = k * size + std::min(k, extra);
      const int64_t end = begin + size + (k < extra ? 1 : 0);
      if (int rc = body(begin, end, closure); rc != 0) {
        int ok = 0;
        status_.compare_exchange_strong(ok, rc, std::memory_order_relaxed);
      }
      done_.fetch_add(1, std::memory_order_acq_rel);
      c = claim_.load(std::memory_order_acquire);
    }
  }

  /// `seen` is the epoch when the master started the worker, before it announced the loop it
  /// started the worker for: a worker reading the epoch itself could read it after that bump
  /// and sit out the first loop of the process.
  void worker_main(int index, uint64_t seen) noexcept {
    for (;;) {
      // A worker spins while a loop is still running and for a little while after it: the
      // next parallel loop of the same kernel usually follows at once, and a sleeping worker
      // can take longer to wake than a loop lasts; if it timed out during each loop it would
      // never get a chunk again. The spin yields often, so that on a loaded machine it does
      // not keep the thread it should help off the core.
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; epoch_.load(std::memory_order_acquire) == seen; ++i) {
        cpu_relax();
        if ((i & 63) != 63) continue;
        const auto now = std::chrono::steady_clock::now();
        if (done_.load(std::memory_order_relaxed) < chunks_.load(std::memory_order_relaxed))
          start = now;  // a loop is running
        if (now - start < worker_spin) {
          std::this_thread::yield();
          continue;
        }
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        break;
      }
      seen = epoch_.load(std::memory_order_acquire);
      work(index);
    }
  }

  /// Starts workers until `wanted` exist (or thread creation fails); returns how many exist.
  /// Only the master calls it, and only one master runs at a time.
  int spawn(int wanted) noexcept {
    int have = started_.load(std::memory_order_relaxed);
    const uint64_t epoch = epoch_.load(std::memory_order_acquire);
    while (have < wanted) {
      try {
        std::thread([this, have, epoch] { worker_main(have, epoch); }).detach();
      } catch (...) {
        break;  // out of threads: run with the ones we have
      }
      started_.store(++have, std::memory_order_relaxed);
    }
    return std::min(have, wanted);
  }

  // The job descriptor; atomics only so that a late worker's stale read is not a data race.
  std::atomic<int64_t> n_{0}, chunks_{0};
  std::atomic<int> helpers_{0};
  std::atomic<loom_parallel_body> body_{nullptr};
  std::atomic<void*> closure_{nullptr};
  std::atomic<int> status_{0};
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int64_t> done_{0};
  alignas(64) std::atomic<uint64_t> epoch_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> started_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};

/// The pool, and whether a parallel loop is running (a second concurrent or nested loop runs
/// serially on its own thread instead of queueing behind the first).
struct runtime_state {
  std::atomic<thread_pool*> pool{nullptr};
  std::atomic<bool> busy{false};
  std::atomic<int> requested{0};  // set_num_threads; 0 = default
};

LOOM_DECL runtime_state& state() noexcept {
  // Never destroyed: detached workers use the pool until the process ends.
  static runtime_state* s = [] {
    auto* st = new runtime_state;
    // A forked child has none of the parent's workers: forget the pool, the child makes its own
    // (the old one is leaked, its threads do not exist there).
    pthread_atfork(nullptr, nullptr, [] {
      state().pool.store(nullptr, std::memory_order_relaxed);
      state().busy.store(false, std::memory_order_relaxed);
    });
    return st;
  }();
  return *s;
}

LOOM_DECL thread_pool* pool() noexcept {
  runtime_state& s = state();
  thread_pool* p = s.pool.load(std::memory_order_acquire);
  if (!p) {  // only the thread holding `busy` gets here, so there is no race to create it
    p = new (std::nothrow) thread_pool;
    s.pool.store(p, std::memory_order_release);
  }
  return p;
}

}  // namespace detail

LOOM_DECL int default_num_threads() noexcept {
  static const int n = [] {
    if (const char* env = std::getenv("LOOM_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) return v;
    }
    return ::loom::detail::available_cores();
  }();
  return n;
}

LOOM_DECL void set_num_threads(int n) {
  LOOM_USER_CHECK(n >= 0, "loom.runtime.E601")
      << "set_num_threads(" << n << "): the thread count must be >= 0 (0 restores the default)";
  detail::state().requested.store(n, std::memory_order_relaxed);
}

LOOM_DECL int num_threads() noexcept {
  int n = detail::state().requested.load(std::memory_order_relaxed);
  return n > 0 ? n : default_num_threads();
}

}  // namespace runtime
LOOM_END_NAMESPACE

extern "C" LOOM_DECL int loom_parallel_num_threads(void) noexcept {
  return ::loom::runtime::num_threads();
}

extern "C" LOOM_DECL int loom_parallel_for(int64_t n, loom_parallel_body body,
                                           void* closure) noexcept {
  namespace rt = ::loom::runtime::detail;
  if (n <= 0) return 0;
  const int64_t chunks = std::min<int64_t>(::loom::runtime::num_threads(), n);
  if (chunks <= 1) return body(0, n, closure);
  rt::runtime_state& s = rt::state();
  bool idle = false;
  // Nested loops (called from a body) and loops started concurrently by other threads run
  // inline: the cores are already busy with the running loop.
  if (!s.busy.compare_exchange_strong(idle, true, std::memory_order_acquire))
    return body(0, n, closure);
  int rc;
  if (rt::thread_pool* p = rt::pool())
    rc = p->run(n, chunks, static_cast<int>(chunks - 1), body, closure);
  else
    rc = body(0, n, closure);
  s.busy.store(false, std::memory_order_release);
  return rc;
}
