/// \file
/// What the Halide contenders share (only with LOOM_BENCH_HAVE_HALIDE, see benchmarks/halide/):
/// the registry of the kernels Halide 14 generated ahead of time, one per (workload family,
/// schedule variant, shape), calls that wrap the harness's row-major buffers as halide_buffer_t,
/// and the thread setting of Halide's runtime. The bench programs never load libHalide: they link
/// the generated code and the one Halide runtime it shares.
///
/// Variants: "Adams2019", "Mullapudi2016", "Li2018" (Halide's autoschedulers, no autotuning) and
/// "Hand" (a short hand schedule, GEMM only); contenders are named "Halide" + variant.
#ifndef LOOM_BENCH_BASELINES_HALIDE_HPP
#define LOOM_BENCH_BASELINES_HALIDE_HPP

#include <benchmark/benchmark.h>

#include <HalideBuffer.h>
#include <HalideRuntime.h>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom_halide_kernels.h"  // generated: every kernel's header and LOOM_HALIDE_KERNELS

namespace loom_bench {

/// One generated kernel. `shape` is what the family's bench program looks it up by:
///   gemm (M, N, K, 0), batch_matmul (batch, M, N, K), conv2d_bias_relu (C, H, W, K) with N=1,
///   3x3, pad 1, depthwise (C, H, W, 0) with N=1, 3x3, pad 1, softmax (rows, cols, 0, 0).
struct HalideKernel {
  std::string family;
  std::string variant;
  std::array<int64_t, 4> shape;
  /// Halide's uniform entry point: one halide_buffer_t* per argument, inputs then output.
  int (*argv)(void** args);
  /// Names, types and the target the kernel was compiled for.
  const halide_filter_metadata_t* (*metadata)();
};

inline const std::vector<HalideKernel>& halide_kernels() {
#define LOOM_HALIDE_ENTRY(family, variant, s0, s1, s2, s3, fn) \
  HalideKernel{#family, #variant, {s0, s1, s2, s3}, &fn##_argv, &fn##_metadata},
  static const std::vector<HalideKernel> all = {LOOM_HALIDE_KERNELS(LOOM_HALIDE_ENTRY)};
#undef LOOM_HALIDE_ENTRY
  return all;
}

/// The kernel of (family, variant, shape), or nullptr when this build generated none.
inline const HalideKernel* find_halide_kernel(const std::string& family, const std::string& variant,
                                              const std::array<int64_t, 4>& shape) {
  for (const HalideKernel& k : halide_kernels())
    if (k.family == family && k.variant == variant && k.shape == shape) return &k;
  return nullptr;
}

/// The variants, in the order their contenders are registered.
inline const std::vector<std::string>& halide_variants() {
  static const std::vector<std::string> v = {"Adams2019", "Mullapudi2016", "Li2018", "Hand"};
  return v;
}

/// Makes the next Halide calls use `threads` threads (the calling thread included). Halide's
/// runtime has one thread pool for every generated function. halide_set_num_threads() alone does
/// not shrink a pool that is already running: after a 2-thread run, the "1-thread" runs of
/// bench_gemm used 1.96–1.99 cores (busy_cores). So a change of the count also shuts the pool
/// down; the next parallel loop starts it again with `threads` workers, and 1 really is the
/// calling thread alone.
inline void halide_set_threads(int threads) {
  if (halide_set_num_threads(threads) != threads) halide_shutdown_thread_pool();
}

/// A prepared call of one kernel: a halide_buffer_t per argument, each describing a dense
/// row-major array (extents outermost first, as the C++ code indexes it). The host pointers can
/// be changed between calls (GEMM's harness passes them per call); the shapes cannot.
class HalideCall {
 public:
  HalideCall(const HalideKernel& kernel, std::initializer_list<std::vector<int>> row_major_extents)
      : kernel_(&kernel) {
    for (const std::vector<int>& ext : row_major_extents) {
      // Halide lists dimensions innermost first.
      std::vector<int> sizes(ext.rbegin(), ext.rend());
      buffers_.push_back(
          std::make_unique<Halide::Runtime::Buffer<float>>(static_cast<float*>(nullptr), sizes));
    }
    args_.resize(buffers_.size());
  }

  /// Points argument `i` at `data` (which must hold its whole array).
  void set(std::size_t i, const float* data) {
    buffers_[i]->raw_buffer()->host = reinterpret_cast<uint8_t*>(const_cast<float*>(data));
  }

  /// Runs the kernel; throws when Halide reports an error (its message went to stderr).
  void operator()() {
    for (std::size_t i = 0; i < buffers_.size(); ++i) args_[i] = buffers_[i]->raw_buffer();
    const int rc = kernel_->argv(args_.data());
    if (rc != 0)
      throw std::runtime_error("Halide kernel " + kernel_->family + "/" + kernel_->variant +
                               " returned error " + std::to_string(rc));
  }

  /// "Halide <variant> schedule, AOT", the label next to the result.
  std::string label() const {
    return "Halide " + kernel_->variant +
           (kernel_->variant == "Hand" ? " schedule, AOT" : " autoschedule, AOT");
  }

 private:
  const HalideKernel* kernel_;
  std::vector<std::unique_ptr<Halide::Runtime::Buffer<float>>> buffers_;
  std::vector<void*> args_;
};

/// Adds the "halide" context line: version, the autoschedulers' machine model and the target the
/// kernels were compiled for (with the ISA features "host" stood for).
inline void add_halide_context() {
  std::string info = LOOM_HALIDE_INFO;
  if (!halide_kernels().empty())
    info += ", target " + std::string(halide_kernels().front().metadata()->target);
  benchmark::AddCustomContext("halide", info);
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_BASELINES_HALIDE_HPP
