/// \file
/// What every loom benchmark shares: each contender instance prepared and checked against the
/// reference once, before its first timing; then the timed loop (quiesce, warm up, time) and the
/// rate counter plus `busy_cores` (process CPU time over wall time). Needs Google Benchmark.
#ifndef LOOM_BENCH_BASELINES_TIMING_HPP
#define LOOM_BENCH_BASELINES_TIMING_HPP

#include "baselines/common.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

namespace loom_bench {

/// Why a contender whose output failed check_close is not timed.
inline std::string wrong_result_message(const CheckResult& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "wrong result: max |err| %.3g > tolerance %.3g (first at flat index %lld)",
                r.max_abs_err, r.tolerance, static_cast<long long>(r.first_bad));
  return buf;
}

/// A contender's instance for one (shape, threads): prepared once, by the first benchmark that
/// needs it, or the reason it cannot run.
template <class Instance>
struct CheckedInstance {
  bool prepared = false;
  Instance instance;
  std::string error;
};

/// The instance of `slot`, prepared and checked on first use: `prepare()` returns it and
/// `check(instance)` calls it once and compares its output with the reference (a CheckResult).
/// A wrong result or an exception from either becomes the slot's error; then every benchmark of
/// the slot skips with it and this returns nullptr. Both run outside every timed loop.
template <class Instance, class Prepare, class Check>
Instance* checked_instance(benchmark::State& state, CheckedInstance<Instance>& slot,
                           Prepare&& prepare, Check&& check) {
  if (!slot.prepared) {
    slot.prepared = true;
    try {
      slot.instance = prepare();
      const CheckResult r = check(slot.instance);
      if (!r.ok) slot.error = wrong_result_message(r);
    } catch (const std::exception& e) {
      slot.error = std::string("prepare failed: ") + e.what();
    }
  }
  if (!slot.error.empty()) {
    state.SkipWithError(slot.error.c_str());
    return nullptr;
  }
  return &slot.instance;
}

/// The check of an instance that writes into `out` and hands its result over in the
/// reference's layout through `read_output(float*)`: `out` is filled with NaN first, so that an
/// element the contender never writes fails, then the instance is called once.
template <class Instance, class Floats>
CheckResult check_read_output(const Instance& instance, Floats& out, const float* reference,
                              double tolerance) {
  fill_nan(out.data(), out.size());
  instance.call();
  Floats got(out.size());
  instance.read_output(got.data());
  return check_close(got.data(), reference, got.size(), tolerance);
}

/// Times `call()` in `state`'s loop after waiting for the process to go idle and one untimed
/// warm-up call. Sets `busy_cores` and, when `rate_name` is not empty, the counter `rate_name` =
/// `units_per_call` per wall second (e.g. "GFLOPS" with 2*M*N*K*1e-9: the number reads in GFLOP/s)
/// and `<rate_name>_cpu`, the same per CPU-second of the process.
/// Register the benchmark with UseRealTime() so that Time and the rate are wall-clock based.
template <class Call>
void run_timed(benchmark::State& state, Call&& call, const std::string& rate_name = {},
               double units_per_call = 0) {
  wait_until_quiet();
  call();  // warm caches, page in the output, wake the library's threads

  const double cpu0 = process_cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    call();
    benchmark::ClobberMemory();
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const double cpu = process_cpu_seconds() - cpu0;

  if (!rate_name.empty()) {
    state.counters[rate_name] =
        benchmark::Counter(units_per_call, benchmark::Counter::kIsIterationInvariantRate,
                           benchmark::Counter::OneK::kIs1000);
    // The same amount per CPU-second of the whole process. On a shared, busy machine the wall
    // clock counts time the process was not scheduled; this one does not, so for 1-thread runs it
    // is the steadier figure. For n threads it is per-core throughput (spin-waiting counts).
    state.counters[rate_name + "_cpu"] =
        cpu > 0 ? units_per_call * double(state.iterations()) / cpu : 0.0;
  }
  // Cores kept busy by the whole process during the timed loop: ~threads when the thread setting
  // works, more when some pool spins, less when a library does not parallelize the shape or the
  // machine is busy.
  state.counters["busy_cores"] = wall > 0 ? cpu / wall : 0.0;
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_BASELINES_TIMING_HPP
