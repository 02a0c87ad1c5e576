// GPU tuning end to end without a GPU: search::tune_with on a CUDA task, with a measurer that runs
// every candidate on the CPU emulation of lower/gpu.hpp and checks it against the DAG
// interpreter, then the records: resumed without measuring again, and turned back into a
// program by cuda::best_recorded_schedule and cuda::build (NVRTC, no device). The measurer's
// costs are a deterministic stand-in (fewer, fuller blocks cost less), not times: this tests the
// loop, not the speed of what it finds.
#include <loom/cuda.hpp>
#include <loom/ops.hpp>

#include <doctest/doctest.h>

#include "support/random_schedule.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

using namespace loom;

namespace {

class EmulatingMeasurer final : public search::Measurer {
 public:
  explicit EmulatingMeasurer(loom_test::workload w)
      : w_(std::move(w)), ref_(loom_test::make_reference(w_, 9)) {}

  std::vector<search::MeasureResult> measure(const Task& task,
                                             const std::vector<sched::State>& states) override {
    std::vector<search::MeasureResult> out(states.size());
    for (size_t i = 0; i < states.size(); ++i) {
      ++measured;
      try {
        const lower::GpuProgram g = lower::lower_gpu(states[i], task.target);
        auto r = loom_test::run_and_compare(
            w_, ref_, states[i],
            [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(g, ptrs); });
        if (!r.ok) {
          ++wrong;
          out[i].error = search::MeasureError::wrong_answer;
          out[i].error_message = r.message;
          continue;
        }
        double cost = 1e-6;
        for (const lower::GpuKernel& k : g.kernels)
          cost += 1e-6 * static_cast<double>(k.grid[0] * k.grid[1] * k.grid[2]) /
                  static_cast<double>(std::min<int64_t>(k.threads_per_block(), 256));
        out[i].costs = {cost, cost, cost};
      } catch (const std::exception& e) {
        out[i].error = search::MeasureError::instantiation;
        out[i].error_message = e.what();
      }
    }
    return out;
  }
  std::string name() const override { return "emulated-gpu"; }

  int measured = 0, wrong = 0;

 private:
  loom_test::workload w_;
  loom_test::reference ref_;
};

}  // namespace

TEST_SUITE("cuda.tune") {
  TEST_CASE("tune_with on a CUDA task: emulated candidates, records, resume, build the best") {
    auto a = placeholder<float>("A", {64, 48});
    auto b = placeholder<float>("B", {48, 80});
    const loom_test::workload w =
        loom_test::make_workload("matmul 64x80x48", {a, b}, {ops::matmul(a, b)}, 48);
    const Task task(w.dag, Target::cuda("sm_90"));
    const std::string log =
        (std::filesystem::temp_directory_path() / "loom_test_tune_emulated.jsonl").string();
    std::filesystem::remove(log);

    search::TuneOptions o;
    o.trials = 48;
    o.measures_per_round = 16;
    o.records = log;
    o.quiet = true;
    o.seed = 21;
    o.rerank_top = 0;  // counts the measurements; ranking again is tested in tests/tune
    EmulatingMeasurer m(w);
    const search::TuneReport first = search::tune_with(task, o, m);
    CHECK(first.trials == 48);
    CHECK(m.measured == 48);
    CHECK(m.wrong == 0);
    CHECK(first.failures == 0);  // the search picks only programs lower_gpu accepts
    REQUIRE(first.best.has_value());

    // Resuming measures only new programs.
    EmulatingMeasurer again(w);
    o.trials = 16;
    const search::TuneReport second = search::tune_with(task, o, again);
    CHECK(second.resumed == 48);
    CHECK(again.measured == 16);
    CHECK(second.best_cost <= first.best_cost);

    // The log gives the best program back, as CUDA C compiled by NVRTC.
    const std::optional<sched::State> best = cuda::best_recorded_schedule(task, log);
    REQUIRE(best.has_value());
    const cuda::CompiledProgram c = cuda::build(task, *best);
    CHECK(c.source.find("__global__") != std::string::npos);
    CHECK(c.image.compare(0, 4,
                          "\x7f"
                          "ELF") == 0);
    CHECK(c.plan.arg_bytes.size() == 3);
    CHECK(!c.plan.kernels.empty());
    // A workload the log does not know has no record.
    auto x = placeholder<float>("X", {32, 32});
    const Task other(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{x},
                                                        std::vector<ir::Tensor>{ops::relu(x)}),
                     Target::cuda("sm_90"));
    CHECK(!cuda::best_recorded_schedule(other, log).has_value());
    std::filesystem::remove(log);
  }
}
