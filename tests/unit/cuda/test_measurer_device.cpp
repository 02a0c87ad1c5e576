// cuda::GpuMeasurer on a real GPU (label gpu): sampled programs of a small and a large matmul are
// built, checked against the reference and timed; a program over run_timeout_s, or whose first
// launch outlasts slow_run_kill_factor times the best, kills the worker, which the next program
// replaces; cuda::compile_from_model keeps a model's pick. main.cpp skips the executable without a
// device.
#include <loom/backend/cuda/measurer.hpp>
#include <loom/cuda.hpp>
#include <loom/ops.hpp>
#include <loom/sched/default_schedule.hpp>
#include <loom/search/annotate.hpp>

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

using namespace loom;

namespace {

Task matmul_task(int64_t n) {
  auto a = placeholder<float>("A", {n, n});
  auto b = placeholder<float>("B", {n, n});
  return Task(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                 std::vector<ir::Tensor>{ops::matmul(a, b)}),
              Target::cuda("sm_90"));
}

/// Measures the default schedule of an n³ matmul twice under `o`, which kills both: each is a
/// run_timeout, and each kill leaves the next program a fresh worker.
std::vector<search::MeasureResult> measure_twice_killed(const search::MeasureOptions& o,
                                                        int64_t n) {
  cuda::GpuMeasurer m(o);
  const Task task = matmul_task(n);
  const auto results = m.measure(task, {sched::default_schedule(task.dag, task.target),
                                        sched::default_schedule(task.dag, task.target)});
  for (const search::MeasureResult& r : results) {
    CAPTURE(r.error_message);
    CHECK(r.error == search::MeasureError::run_timeout);
  }
  CHECK(m.stats().worker_starts == 2);
  return results;
}

}  // namespace

TEST_SUITE("cuda.measurer.device") {
  TEST_CASE("sampled programs are checked and timed; the interpreter and the GPU reference agree") {
    search::MeasureOptions o;
    o.slow_program_factor = 0;  // time every program fully, however slow
    o.slow_run_kill_factor = 0;
    cuda::GpuMeasurer m(o);
    for (int64_t n : {64, 512}) {  // 512^3 is past interpreter_flop_limit: GPU reference
      const Task task = matmul_task(n);
      std::mt19937_64 rng(static_cast<uint64_t>(n));
      std::vector<sched::State> programs =
          search::sample_programs(search::generate_sketches(task), task, {}, rng, 12);
      programs.push_back(sched::default_schedule(task.dag, task.target));
      const auto results = m.measure(task, programs);
      int ok = 0;
      for (const search::MeasureResult& r : results) {
        CAPTURE(r.error_message);
        CHECK(r.error != search::MeasureError::wrong_answer);
        if (!r.ok()) continue;
        ++ok;
        CHECK(r.costs.size() == 3);
        for (double c : r.costs) CHECK(c > 0);
      }
      MESSAGE("matmul " << n << ": " << ok << " of " << results.size() << " measured");
      CHECK(ok >= static_cast<int>(results.size()) - 2);
    }
    CHECK(m.stats().worker_starts == 1);
  }

  TEST_CASE("compile_from_model keeps the fastest correct of the model's picks") {
    auto a = placeholder<bfloat16>("A", {1024, 1024});
    auto b = placeholder<bfloat16>("B", {1024, 1024});
    const Task task(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                       std::vector<ir::Tensor>{ops::matmul(a, b)}),
                    cuda::device_target());
    const cuda::ModelCompiled c = cuda::compile_from_model(task);
    MESSAGE("bf16 GEMM 1024^3 from the model: rank "
            << c.rank << ", " << c.seconds * 1e6 << " us (search " << c.search_seconds
            << " s, measuring " << c.measure_seconds << " s)");
    CHECK(c.seconds > 0);
    CHECK(c.rank >= 0);  // a model's pick beats one thread per output
    CHECK(c.program.source.find("mma.sync") != std::string::npos);
  }

  TEST_CASE("a first launch past slow_run_kill_factor times the best is killed") {
    // 1024^3 is past interpreter_flop_limit: the worker runs the reference program, whose time
    // is the task's best before any program; a factor of 1e-6 leaves no program time to finish.
    search::MeasureOptions o;
    o.slow_run_kill_factor = 1e-6;
    o.slow_run_kill_min_s = 0;
    for (const search::MeasureResult& r : measure_twice_killed(o, 1024)) {
      CAPTURE(r.error_message);
      CHECK(r.error_message.find("killed in its first run") != std::string::npos);
      CHECK(r.run_seconds < 1);
    }
  }

  TEST_CASE("a program over run_timeout_s is killed and the next one gets a fresh worker") {
    search::MeasureOptions o;
    o.run_timeout_s = 1e-3;  // nothing on a GPU answers this fast, reference included
    (void)measure_twice_killed(o, 64);
  }
}
