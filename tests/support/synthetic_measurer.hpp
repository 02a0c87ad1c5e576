// A measurer for tests of the search: a program's "cost" is a fixed formula of its features
// (no timing, so no noise, and fast), shared by the tuner's and the task scheduler's tests.
#pragma once

#include <loom/cost/features.hpp>
#include <loom/search/measure.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace loom_test {

using namespace loom;

/// A cost that depends on the program only: the analytic roofline of its features (FLOPs
/// against bytes moved, per store), as seconds at 1 GFLOP/s.
inline double synthetic_cost(const sched::State& state, const Target& target) {
  const cost::ProgramFeatures f = cost::extract_features(state, target);
  double total = 0;
  for (int r = 0; r < f.num_rows; ++r) {
    const float* row = cost::feature_row(f, r);
    total += std::max(cost::row_float_ops(row), 4.0 * cost::row_bytes(row)) + 1.0;
  }
  return total * 1e-9;
}

class SyntheticMeasurer final : public search::Measurer {
 public:
  std::vector<search::MeasureResult> measure(const Task& task,
                                             const std::vector<sched::State>& states) override {
    std::vector<search::MeasureResult> out(states.size());
    for (size_t i = 0; i < states.size(); ++i) {
      try {
        out[i].costs = {synthetic_cost(states[i], task.target)};
      } catch (const loom::error& e) {
        out[i].error = search::MeasureError::instantiation;
        out[i].error_message = e.what();
      }
    }
    measured += static_cast<int>(states.size());
    return out;
  }
  std::string name() const override { return "synthetic"; }
  int threads() const override { return threads_reported; }
  std::string device() const override { return device_reported; }
  bool cold_constants(const Task&) const override { return cold_reported; }
  int measured = 0;
  int threads_reported = 0;
  std::string device_reported;
  bool cold_reported = false;
};

}  // namespace loom_test
