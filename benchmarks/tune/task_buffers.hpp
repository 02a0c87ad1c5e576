// Buffers for running the kernels of one task side by side in a benchmark (bench_transfer,
// bench_model_compile): every argument allocated aligned, inputs seeded uniform, the check that
// a contender's output matches the reference contender's, and the checked timing loop.
#pragma once

#include <benchmark/benchmark.h>
#include <loom/loom.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "baselines/common.hpp"

namespace loom_bench {

/// One buffer per argument of a task (inputs then outputs), inputs filled with seeded uniform
/// values, and views over them as kernels take them.
class TaskBuffers {
 public:
  TaskBuffers() = default;
  explicit TaskBuffers(const loom::Task& task) {
    uint32_t seed = 1;
    for (const loom::ir::Tensor& t : task.dag->arguments()) {
      const auto n = static_cast<size_t>(t.num_elements());
      buffers_.emplace_back(n);
      fill_uniform(buffers_.back().data(), n, seed++);
      views_.emplace_back(buffers_.back().data(), t.shape());
    }
  }

  const std::vector<loom::BufferView>& views() const { return views_; }

  /// The (last) output after running `kernel` once, NaN first so that an unwritten element
  /// shows.
  std::vector<float> output_of(const loom::Kernel& kernel) {
    AlignedFloats& out = buffers_.back();
    fill_nan(out.data(), out.size());
    kernel.run(views_);
    return std::vector<float>(out.data(), out.data() + out.size());
  }

 private:
  std::vector<AlignedFloats> buffers_;
  std::vector<loom::BufferView> views_;
};

/// Why `got` is not `want` (empty when every element is within 1e-4 of the largest magnitude of
/// `want`, or of 1); `reference` names `want`'s contender in the message.
inline std::string output_mismatch(const std::vector<float>& got, const std::vector<float>& want,
                                   const std::string& reference) {
  float scale = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    const float d = std::abs(got[i] - want[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  if (worst <= 1e-4f * std::max(scale, 1.0f)) return {};
  return "output differs from " + reference + "'s by " + std::to_string(worst);
}

/// Checks `kernel`'s output against `reference` (the output of contender `reference_name`), then
/// times it in `state`'s loop with a GFLOPS counter for `task`. False, the benchmark skipped
/// with the reason, when the outputs differ.
inline bool check_and_time(benchmark::State& state, const loom::Task& task, TaskBuffers& buffers,
                           const loom::Kernel& kernel, const std::vector<float>& reference,
                           const std::string& reference_name) {
  const std::string mismatch =
      output_mismatch(buffers.output_of(kernel), reference, reference_name);
  if (!mismatch.empty()) {
    state.SkipWithError(mismatch.c_str());
    return false;
  }
  for (auto _ : state) kernel.run(buffers.views());
  state.counters["GFLOPS"] = benchmark::Counter(task.dag->flop_count() * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  return true;
}

}  // namespace loom_bench
