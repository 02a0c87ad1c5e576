// Bodies of loom/backend/llvm/measurer.hpp: the timing policy. How a measuring child runs, checks
// and times its program (number and repeat, cache flushing, cold constants, the slow-program
// cut-off), and how long the parent lets a build or a first run go on before it kills the child
// (slow_build_kill_factor, slow_run_kill_factor). Compiled through measurer.ipp, whose child
// protocol it uses, after reference.ipp (cmake/LoomCompiled.cmake).
#include "loom/backend/llvm/measurer.hpp"

#include "loom/backend/child_process.hpp"
#include "loom/backend/measure_data.hpp"
#include "loom/runtime/buffer.hpp"
#include "loom/runtime/parallel.hpp"
#include "loom/runtime/workspace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {
namespace detail {

/// Scratch memory of the child on kernel_buffer_alignment, as applications are told to hold
/// kernel buffers (never freed: the child ends with _exit).
inline void* child_alloc(size_t bytes) {
  constexpr size_t align = kernel_buffer_alignment;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

/// Bytes written between runs when flushing caches: twice the last-level cache, at most
/// 128 MiB, or 64 MiB when the system does not say. The cap matters: some systems report the
/// whole socket's L3 (256 MiB on a 64-core EPYC), of which one core's share is far smaller.
inline size_t cache_flush_bytes() {
  long llc = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return llc > 0 ? std::min(2 * static_cast<size_t>(llc), size_t{128} << 20) : size_t{64} << 20;
}

/// Whether `o` asks for a task's constant inputs to be evicted before each timed call (flush_cache,
/// which evicts everything, wins).
inline bool evicts_constants(const search::MeasureOptions& o) {
  return o.cold_constants.value_or(false) && !o.flush_cache;
}

/// Writes back and drops every cache line of [data, data + bytes) from every level of the
/// hierarchy, as a buffer last touched long ago would be (MeasureOptions::cold_constants).
inline void evict_from_caches(const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
#if defined(__x86_64__) || defined(__i386__)
  for (size_t b = 0; b < bytes; b += 64) _mm_clflush(p + b);
  _mm_mfence();
#elif defined(__aarch64__)
  for (size_t b = 0; b < bytes; b += 64) asm volatile("dc civac, %0" ::"r"(p + b) : "memory");
  asm volatile("dsb ish" ::: "memory");
#else
  // No portable way to drop lines: write a buffer larger than the last-level cache instead.
  static_cast<void>(p);
  static_cast<void>(bytes);
  static std::vector<unsigned char> flush(cache_flush_bytes());
  static unsigned char round = 0;
  std::memset(flush.data(), ++round, flush.size());
  static_cast<void>(*static_cast<volatile unsigned char*>(flush.data() + flush.size() / 2));
#endif
}

/// Runs, checks and times a built program in the child (see MeasureOptions for the knobs).
///
/// The first call runs on fresh poisoned outputs and is checked; it counts as the first warm-up
/// run. Without cache flushing, `number` starts at options.number and is raised (to the
/// estimate that reaches min_repeat_ms, at least doubling) until one repeat lasts
/// min_repeat_ms; that repeat is the first cost. With cache flushing every repeat is one call
/// after writing a buffer larger than the last-level cache.
inline void measure_child_run(const search::MeasureOptions& o, const LocalMeasurer::TaskData& td,
                              const ChildProgram& prog,
                              const std::vector<std::string>& constant_inputs, int sock,
                              ChildResult& r) {
  const auto t0 = clock::now();
  if (o.num_threads > 0) runtime::set_num_threads(o.num_threads);
  std::vector<void*> args(td.args.size());
  for (size_t i = 0; i < td.args.size(); ++i) {
    const auto& a = td.args[i];
    if (a.is_output) {
      args[i] = child_alloc(a.bytes);
      poison(args[i], a.dtype, a.elements);
    } else {
      args[i] = td.data(i);
    }
  }
  auto finish = [&] { r.run_seconds = seconds_since(t0); };
  for (const ChildProgram::Pack& p : prog.packs) {
    void* packed = child_alloc(p.packed_bytes);
    void* pack_args[2] = {td.data(static_cast<size_t>(p.argument)), packed};
    if (const int32_t rc = p.kernel.fn(pack_args); rc != 0) {
      r.error = MeasureError::runtime;
      r.message = "the pack kernel of constant input '" + p.input +
                  "' stopped before the end: " + runtime::kernel_status_text(rc);
      return finish();
    }
    args[static_cast<size_t>(p.argument)] = packed;
  }
  // One-off costs that are not the program's, paid before its first call: that call decides
  // whether the program is timed at all (slow_program_factor). A forked child has no pool
  // workers yet (the first parallel loop starts them), and its pages of the shared inputs are
  // not mapped yet. On 2 threads, starting the worker made the first call of a 12 µs GEMM take
  // 110–200 µs, and 2 programs in 3 of a tuning run were judged by that call alone.
  // The inputs lie before the reference outputs in the mapping (task_data).
  const volatile unsigned char* inputs = td.base;
  for (size_t b = 0; b < td.outputs_offset; b += 4096) (void)inputs[b];
  runtime::parallel_for(runtime::num_threads(), [](int64_t, int64_t) {});
  void** argv = args.data();
  const kernel_fn fn = prog.kernel.fn;
  const auto first_start = clock::now();
  const int32_t first_rc = fn(argv);
  const double first_seconds = seconds_since(first_start);
  // Ends the parent's slow_run_kill_factor window.
  send_frame(sock, frame_of(kFirstRunDone).body());
  if (const int32_t rc = first_rc; rc != 0) {
    r.error = MeasureError::runtime;
    r.message = "the kernel stopped before the end: " + runtime::kernel_status_text(rc);
    return finish();
  }
  if (o.check_correctness) {
    if (std::string diff = first_difference(td, args, o.rtol, o.atol); !diff.empty()) {
      r.error = MeasureError::wrong_answer;
      r.message = std::move(diff);
      return finish();
    }
  }
  // A program far slower than the task's best is not worth timing precisely: its checked run
  // is its cost (the first call also pays cold caches, so this errs on the slow side). A long
  // first run is trusted at a tighter factor: its one-off costs are a negligible part of it.
  const bool long_first_run = o.min_repeat_ms > 0 && first_seconds >= o.min_repeat_ms * 1e-3;
  const double slow_factor = long_first_run && o.slow_long_program_factor > 0
                                 ? std::min(o.slow_program_factor, o.slow_long_program_factor)
                                 : o.slow_program_factor;
  if (o.slow_program_factor > 0 && td.best_cost > 0 && first_seconds > slow_factor * td.best_cost) {
    // A short first run can be mostly one-off costs: a BERT layer's attention-times-V product
    // (about 80 µs) sometimes took 1-2 ms on its first call, and once the task's best was that
    // fast every later measurement of its top programs was that single call. A second call
    // decides; a long first run has no such excuse.
    double seconds = first_seconds;
    if (!long_first_run) {
      const auto start = clock::now();
      const int32_t second_rc = fn(argv);
      seconds = std::min(seconds, seconds_since(start));
      if (second_rc != 0) {
        r.error = MeasureError::runtime;
        r.message = "the kernel stopped before the end: " + runtime::kernel_status_text(second_rc);
        return finish();
      }
    }
    if (seconds > slow_factor * td.best_cost) {
      r.costs.push_back(seconds);
      return finish();
    }
  }
  int32_t rc = 0;
  for (int w = 1; w < o.warmup; ++w) rc |= fn(argv);
  auto time_calls = [&](int64_t number) {
    const auto start = clock::now();
    for (int64_t k = 0; k < number; ++k) rc |= fn(argv);
    return seconds_since(start);
  };
  // Repeats after the first are for programs that may be the best (contender_factor).
  auto contends = [&] {
    return o.contender_factor <= 0 || td.best_cost <= 0 ||
           r.costs.front() <= o.contender_factor * td.best_cost;
  };
  std::vector<std::pair<const void*, size_t>> constants;
  if (evicts_constants(o)) {
    for (size_t i = 0; i < td.args.size(); ++i) {
      const auto& a = td.args[i];
      if (a.is_output || std::find(constant_inputs.begin(), constant_inputs.end(), a.name) ==
                             constant_inputs.end())
        continue;
      size_t bytes = a.bytes;
      for (const ChildProgram::Pack& p : prog.packs)
        if (p.argument == static_cast<int>(i)) bytes = p.packed_bytes;
      constants.emplace_back(args[i], bytes);
    }
  }
  // A task without constants has nothing to evict: timed warm, like any other.
  if (!constants.empty()) {
    // A repeat is the mean of single calls, each after an eviction (untimed), that add up to
    // min_repeat_ms: one cold call of a 20 µs kernel is mostly noise.
    const double min_repeat_s = o.min_repeat_ms * 1e-3;
    for (int k = 0; k < o.repeat && (k == 0 || contends()); ++k) {
      double total = 0;
      int64_t calls = 0;
      do {
        for (const auto& [data, bytes] : constants) evict_from_caches(data, bytes);
        total += time_calls(1);
        ++calls;
      } while (calls < o.number || (total < min_repeat_s && calls < 100000));
      r.costs.push_back(total / static_cast<double>(calls));
    }
  } else if (o.flush_cache) {
    const size_t flush_bytes = cache_flush_bytes();
    auto* flush = static_cast<unsigned char*>(child_alloc(flush_bytes));
    for (int k = 0; k < o.repeat; ++k) {
      std::memset(flush, k + 1, flush_bytes);
      // A read the compiler must perform keeps the writes.
      static_cast<void>(*static_cast<volatile unsigned char*>(flush + flush_bytes / 2));
      r.costs.push_back(time_calls(1));
    }
  } else {
    const double min_repeat_s = o.min_repeat_ms * 1e-3;
    int64_t number = std::max(1, o.number);
    // A checked run long enough to be a repeat is one (MeasureOptions::warmup).
    const bool first_is_repeat = long_first_run && o.warmup <= 1 && o.number <= 1;
    if (first_is_repeat) r.costs.push_back(first_seconds);
    double t = first_is_repeat ? first_seconds : time_calls(number);
    while (t < min_repeat_s) {
      const double per_call = std::max(t / static_cast<double>(number), 1e-9);
      const double wanted = std::ceil(1.1 * min_repeat_s / per_call);
      number =
          static_cast<int64_t>(std::min(std::max(wanted, 2.0 * static_cast<double>(number)), 1e9));
      t = time_calls(number);
    }
    if (!first_is_repeat) r.costs.push_back(t / static_cast<double>(number));
    for (int k = 1; k < o.repeat && contends(); ++k)
      r.costs.push_back(time_calls(number) / static_cast<double>(number));
  }
  if (rc != 0) {
    r.error = MeasureError::runtime;
    r.message = "the kernel returned an error code while being timed";
    r.costs.clear();
  }
  finish();
}

/// The median of the task's successful build times (0 when there is none).
inline double median_build_seconds(const LocalMeasurer::TaskData& td) {
  if (td.build_seconds.empty()) return 0;
  std::vector<double> v = td.build_seconds;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

/// How long a build of the task may take (MeasureOptions::slow_build_kill_factor).
inline double slow_build_limit(const LocalMeasurer::TaskData& td, const search::MeasureOptions& o) {
  constexpr size_t kMinBuilds = 8;  // a median of fewer says little
  if (o.slow_build_kill_factor <= 0 || td.build_seconds.size() < kMinBuilds)
    return o.build_timeout_s;
  return std::min(o.build_timeout_s, std::max(o.slow_build_kill_min_s,
                                              o.slow_build_kill_factor * median_build_seconds(td)));
}

/// Seconds a running child may run from its go: run_timeout_s, or less until its first call has
/// returned (search::slow_run_limit).
inline double run_limit(bool first_run_done, const LocalMeasurer::TaskData& td,
                        const search::MeasureOptions& o) {
  const double slow = first_run_done ? 0.0 : search::slow_run_limit(td.best_cost, o);
  return slow > 0 ? slow : o.run_timeout_s;
}

/// Why the parent killed a child that built for `limit` seconds (slow_build_limit).
inline std::string build_kill_message(double limit, const LocalMeasurer::TaskData& td,
                                      const search::MeasureOptions& o) {
  if (limit < o.build_timeout_s)
    return "killed after building for " + format_seconds(limit) + " s, more than " +
           format_seconds(o.slow_build_kill_factor) +
           " times the median build of the task's programs (" +
           format_seconds(median_build_seconds(td)) + " s) (slow_build_kill_factor)";
  return "killed after building for longer than " + format_seconds(o.build_timeout_s) +
         " s (build_timeout_s)";
}

}  // namespace detail
}  // namespace cpu_jit
LOOM_END_NAMESPACE
