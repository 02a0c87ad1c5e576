/// \file
/// Google Benchmark integration: one call registers a loom kernel as a benchmark with FLOP and
/// byte counters (GFLOP/s and GB/s in the harness's output), next to whatever baseline the user
/// registers in the same program. Needs Google Benchmark (`benchmark::benchmark`).
///
/// \code
///   loom::Kernel k = loom::build(task, schedule);
///   loom::register_benchmark("BM_Matmul_Loom", k, task);        // inputs: fixed-seed random
///   BENCHMARK(BM_Matmul_MyCurrentImplementation);
///   BENCHMARK_MAIN();
/// \endcode
#ifndef LOOM_BENCHMARK_HPP
#define LOOM_BENCHMARK_HPP

#include "loom/runtime/kernel.hpp"
#include "loom/search/task.hpp"

#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>

LOOM_BEGIN_NAMESPACE

struct BenchmarkOptions {
  double flops = -1;      ///< per call; < 0 means the DAG's FLOP count
  double bytes = -1;      ///< per call; < 0 means the arguments' total size
  uint32_t seed = 42;     ///< inputs are uniform in [-1, 1) (floats) or [-8, 8] (integers)
  bool real_time = true;  ///< wall clock (right for threaded kernels)
};

/// Registers `kernel` as a benchmark called `name`. Buffers are allocated and filled once, outside
/// the timed loop; the counters `GFLOPS` and `GBps` are rates over real time.
inline benchmark::internal::Benchmark* register_benchmark(const std::string& name, Kernel kernel,
                                                          const Task& task,
                                                          BenchmarkOptions options = {}) {
  auto storage = std::make_shared<std::vector<std::vector<std::byte>>>();
  auto ptrs = std::make_shared<std::vector<void*>>();
  double bytes = 0;
  std::mt19937 gen(options.seed);
  for (const KernelArg& a : kernel.args()) {
    int64_t n = 1;
    for (int64_t s : a.shape) n *= s;
    storage->emplace_back(static_cast<size_t>(n * a.dtype.bytes()));
    bytes += static_cast<double>(n * a.dtype.bytes());
    void* p = storage->back().data();
    for (int64_t i = 0; i < n; ++i) {
      if (a.dtype.is_16bit_float()) {
        const float f = std::uniform_real_distribution<float>(-1, 1)(gen);
        static_cast<uint16_t*>(p)[i] = a.dtype.is_bfloat()
                                           ? ::loom::detail::float_to_bfloat16_bits(f)
                                           : ::loom::detail::float_to_float16_bits(f);
      } else if (a.dtype.is_float() && a.dtype.bits == 32)
        static_cast<float*>(p)[i] = std::uniform_real_distribution<float>(-1, 1)(gen);
      else if (a.dtype.is_float())
        static_cast<double*>(p)[i] = std::uniform_real_distribution<double>(-1, 1)(gen);
      else if (a.dtype.bits == 32)
        static_cast<int32_t*>(p)[i] = std::uniform_int_distribution<int32_t>(-8, 8)(gen);
      else
        static_cast<int64_t*>(p)[i] = std::uniform_int_distribution<int64_t>(-8, 8)(gen);
    }
    ptrs->push_back(p);
  }
  const double flops = options.flops >= 0 ? options.flops : task.dag->flop_count();
  if (options.bytes >= 0) bytes = options.bytes;
  auto* b = benchmark::RegisterBenchmark(
      name.c_str(), [kernel, storage, ptrs, flops, bytes](benchmark::State& state) {
        for (auto _ : state) {
          kernel.run_unchecked(ptrs->data());
          benchmark::ClobberMemory();
        }
        state.counters["GFLOPS"] =
            benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
        state.counters["GBps"] =
            benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
      });
  if (options.real_time) b->UseRealTime();
  return b;
}

LOOM_END_NAMESPACE

#endif  // LOOM_BENCHMARK_HPP
