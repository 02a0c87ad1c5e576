/// \file
/// The GEMM benchmark harness: a registry of contenders (vendor baselines now, loom kernels later)
/// and the Google Benchmark registration that runs them side by side in one program.
///
/// Every contender runs on the same fixed-seed inputs, is checked once against a double-precision
/// reference before it is timed (a wrong result skips it with an error instead of reporting a fast
/// number), and reports GFLOP/s. Benchmarks are named
///   BM_Gemm_<Contender>/<M>/<N>/<K>/<threads>[/process_time/real_time]
/// and registered shape by shape, thread count by thread count, contender by contender, so that
/// contenders alternate (A B C A B C ...); `--benchmark_enable_random_interleaving=true` also
/// interleaves the repetitions.
///
/// How to add a contender (a loom kernel):
///  1. Write a `GemmContender` (or use the plain-function overload of add_gemm_contender): a name,
///     a `prepare` that does all setup for one shape and thread count (tuning, JIT compilation,
///     packing of B) and returns the call to time, a `set_threads`, and `max_threads`.
///  2. Register it with `add_gemm_contender(...)`, from `main` before register_gemm_benchmarks()
///     or from a static initializer in a source added to the bench_gemm target.
///  3. That's all: the harness checks its result, times it next to the baselines and reports
///     GFLOPS and busy_cores (see benchmarks/README.md).
#ifndef LOOM_BENCH_BASELINES_GEMM_BENCH_HPP
#define LOOM_BENCH_BASELINES_GEMM_BENCH_HPP

#include "baselines/common.hpp"
#include "baselines/timing.hpp"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace loom_bench {

/// The timed call: C = A * B on the harness's buffers (A, B row-major; C row-major, written whole).
using GemmCall = std::function<void(const float* a, const float* b, float* c)>;

/// A plain GEMM function: C = A * B for the given shape, nothing prepared in advance.
using GemmKernel =
    std::function<void(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k)>;

/// What a contender prepared for one shape and thread count, outside every timed loop.
struct GemmInstance {
  GemmCall call;
  std::string label;  ///< shown next to the result: chosen implementation or schedule
};

/// One library or kernel generator taking part in the GEMM benchmarks.
struct GemmContender {
  /// Benchmark names are BM_Gemm_<name>/...; CamelCase, no '/'.
  std::string name;
  /// Prepares one (shape, threads) instance. Called once per pair, after set_threads(threads),
  /// with the harness's fixed inputs (a contender may pack `b`: the inputs never change).
  /// Throwing skips that pair with the exception's message.
  std::function<GemmInstance(const GemmShape& shape, int threads, const float* a, const float* b)>
      prepare;
  /// Makes the next calls use `threads` threads. Called before every benchmark run, since the
  /// contender before it may have changed shared state (OpenMP's thread count). May be empty.
  std::function<void(int threads)> set_threads;
  /// Thread counts above this are not registered (1 for single-threaded kernels).
  int max_threads = 1;
  /// Shapes this contender is registered for; empty means every shape.
  std::function<bool(const GemmShape&)> accepts;
};

/// The contenders, in registration order. A function-local static, so static initializers in
/// other translation units may add to it before main.
inline std::vector<GemmContender>& gemm_contenders() {
  static std::vector<GemmContender> contenders;
  return contenders;
}

/// Adds a contender; returns true so it can initialize a namespace-scope `static const bool`.
inline bool add_gemm_contender(GemmContender c) {
  gemm_contenders().push_back(std::move(c));
  return true;
}

/// Makes a contender from a plain function, without preparation.
inline GemmContender make_gemm_contender(std::string name, GemmKernel kernel,
                                         std::function<void(int)> set_threads = {},
                                         int max_threads = 1,
                                         std::function<bool(const GemmShape&)> accepts = {},
                                         std::string label = {}) {
  GemmContender c;
  c.name = std::move(name);
  c.prepare = [kernel = std::move(kernel), label = std::move(label)](const GemmShape& s, int,
                                                                     const float*, const float*) {
    return GemmInstance{[kernel, s](const float* a, const float* b, float* out) {
                          kernel(a, b, out, s.m, s.n, s.k);
                        },
                        label};
  };
  c.set_threads = std::move(set_threads);
  c.max_threads = max_threads;
  c.accepts = std::move(accepts);
  return c;
}

/// Adds a contender that is a plain function, without preparation (see make_gemm_contender).
inline bool add_gemm_contender(std::string name, GemmKernel kernel,
                               std::function<void(int)> set_threads = {}, int max_threads = 1,
                               std::function<bool(const GemmShape&)> accepts = {},
                               std::string label = {}) {
  return add_gemm_contender(make_gemm_contender(std::move(name), std::move(kernel),
                                                std::move(set_threads), max_threads,
                                                std::move(accepts), std::move(label)));
}

/// The shapes of the standard sweep: square 1024, 512 and 128, an odd-sized 127x131x129
/// (M=127, K=131, N=129: every dimension a remainder for any vector or tile width) and the BERT
/// base FFN up-projection (sequence 128, hidden 768, intermediate 3072).
inline std::vector<GemmShape> default_gemm_shapes() {
  return {{1024, 1024, 1024}, {512, 512, 512}, {128, 128, 128}, {127, 129, 131}, {128, 3072, 768}};
}

namespace detail {

/// The inputs, output and reference of one shape, shared by every contender.
struct GemmData {
  AlignedFloats a, b, c, ref;
  bool have_ref = false;
};

inline GemmData& gemm_data(const GemmShape& s) {
  static std::map<GemmShape, std::unique_ptr<GemmData>> cache;
  auto& slot = cache[s];
  if (!slot) {
    slot = std::make_unique<GemmData>();
    slot->a = AlignedFloats(std::size_t(s.m * s.k));
    slot->b = AlignedFloats(std::size_t(s.k * s.n));
    slot->c = AlignedFloats(std::size_t(s.m * s.n));
    // Seeds fixed per operand (not per shape): a shape's inputs never depend on the run order.
    fill_uniform(slot->a.data(), slot->a.size(), 0x5eed0001u);
    fill_uniform(slot->b.data(), slot->b.size(), 0x5eed0002u);
  }
  if (!slot->have_ref) {
    slot->ref = AlignedFloats(std::size_t(s.m * s.n));
    gemm_reference(slot->a.data(), slot->b.data(), slot->ref.data(), s.m, s.n, s.k);
    slot->have_ref = true;
  }
  return *slot;
}

inline CheckedInstance<GemmInstance>& gemm_slot(std::size_t contender, const GemmShape& s,
                                                int threads) {
  static std::map<std::tuple<std::size_t, GemmShape, int>, CheckedInstance<GemmInstance>> slots;
  return slots[{contender, s, threads}];
}

/// The body of every GEMM benchmark.
inline void run_gemm(benchmark::State& state, std::size_t contender, GemmShape s, int threads) {
  GemmContender& c = gemm_contenders()[contender];
  GemmData& d = gemm_data(s);
  if (c.set_threads) c.set_threads(threads);
  const GemmInstance* instance = checked_instance(
      state, gemm_slot(contender, s, threads),
      [&] { return c.prepare(s, threads, d.a.data(), d.b.data()); },
      [&](const GemmInstance& i) {
        fill_nan(d.c.data(), d.c.size());
        i.call(d.a.data(), d.b.data(), d.c.data());
        return check_close(d.c.data(), d.ref.data(), d.c.size(), gemm_tolerance(s.k));
      });
  if (!instance) return;
  const GemmCall& call = instance->call;
  const float* a = d.a.data();
  const float* b = d.b.data();
  float* out = d.c.data();
  // GFLOPS is scaled to GFLOP per call (not FLOP with kIs1000) so that the plain number in
  // JSON/CSV reads in GFLOP/s.
  run_timed(state, [&] { call(a, b, out); }, "GFLOPS", s.flop() * 1e-9);
  state.SetLabel(instance->label);
}

}  // namespace detail

/// Registers BM_Gemm_<Contender>/<M>/<N>/<K>/<threads> for every contender added so far: for each
/// shape, for each thread count, every contender in turn (contenders alternate in the run order).
/// Every benchmark uses real time (the rate is per wall second) and measures the CPU time of the
/// whole process, so the CPU column over the Time column shows the cores really used.
inline void register_gemm_benchmarks(const std::vector<GemmShape>& shapes,
                                     const std::vector<int>& thread_counts) {
  const std::vector<GemmContender>& all = gemm_contenders();
  for (const GemmShape& s : shapes) {
    for (int t : thread_counts) {
      for (std::size_t ci = 0; ci < all.size(); ++ci) {
        const GemmContender& c = all[ci];
        if (t > c.max_threads || (c.accepts && !c.accepts(s))) continue;
        const std::string name = "BM_Gemm_" + c.name + "/" + s.name() + "/" + std::to_string(t);
        benchmark::RegisterBenchmark(
            name.c_str(), [ci, s, t](benchmark::State& st) { detail::run_gemm(st, ci, s, t); })
            ->Unit(benchmark::kMicrosecond)
            ->MeasureProcessCPUTime()
            ->UseRealTime();
      }
    }
  }
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_BASELINES_GEMM_BENCH_HPP
