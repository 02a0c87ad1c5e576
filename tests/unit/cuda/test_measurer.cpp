// cuda::GpuMeasurer without a GPU (loom/backend/cuda/measurer.hpp): option and task errors, the
// error when its worker process finds no driver, and the worker's protocol end to end against
// the fake driver (fake_libcuda.cpp), which loads modules and accepts launches but runs no
// generated kernel, so every output stays poison and the check must catch it. The measurer on a
// real GPU is test_measurer_device.cpp.
#include <loom/backend/cuda/measurer.hpp>
#include <loom/cuda.hpp>
#include <loom/ops.hpp>
#include <loom/sched/default_schedule.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/records.hpp>

#include <doctest/doctest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

using namespace loom;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Task matmul_task(int64_t n, Target target = Target::cuda("sm_90")) {
  auto a = placeholder<float>("A", {n, n / 2});
  auto b = placeholder<float>("B", {n / 2, n});
  return Task(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                 std::vector<ir::Tensor>{ops::matmul(a, b)}),
              target);
}

// Sets an environment variable for the scope (the worker process inherits it), then restores it.
class scoped_env {
 public:
  scoped_env(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_SUITE("cuda.measurer") {
  TEST_CASE("options out of range and a CPU task are user errors") {
    search::MeasureOptions o;
    o.repeat = 0;
    CHECK_THROWS_WITH_AS(cuda::GpuMeasurer{o}, doctest::Contains("[loom.cuda.E922]"), user_error);
    cuda::GpuMeasurer m;
    CHECK_THROWS_WITH_AS(m.measure(matmul_task(32, Target::host()), {}),
                         doctest::Contains("[loom.cuda.E923]"), user_error);
  }

  TEST_CASE("without a driver the first measurement says why the worker has no device") {
    scoped_env no_driver("LOOM_CUDA_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1");
    const Task task = matmul_task(32);
    cuda::GpuMeasurer m;
    std::string message;
    try {
      m.measure(task, {sched::default_schedule(task.dag, task.target)});
    } catch (const user_error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(contains(message, "[loom.cuda.E924]"));
    CHECK(contains(message, "no CUDA device in the worker process"));
    CHECK(contains(message, "LOOM_CUDA_DRIVER_LIBRARY"));
  }

#ifdef LOOM_FAKE_LIBCUDA
  TEST_CASE("the worker sets up, runs and checks every program; unwritten outputs are caught") {
    scoped_env fake("LOOM_CUDA_DRIVER_LIBRARY", LOOM_FAKE_LIBCUDA);
    cuda::GpuMeasurerOptions gpu;
    gpu.image = cuda::ImageKind::ptx;  // the fake loads PTX only
    cuda::GpuMeasurer m({}, gpu);

    // Small: the interpreter's reference, sent by the measurer.
    const Task task = matmul_task(48);
    std::mt19937_64 rng(5);
    std::vector<sched::State> programs =
        search::sample_programs(search::generate_sketches(task), task, {}, rng, 4);
    programs.push_back(sched::default_schedule(task.dag, task.target));
    std::vector<int> told(programs.size(), 0);
    const auto results =
        m.measure_each(task, programs, [&](size_t i, const search::MeasureResult&) { ++told[i]; });
    REQUIRE(results.size() == programs.size());
    for (size_t i = 0; i < results.size(); ++i) {
      CAPTURE(results[i].error_message);
      CHECK(told[i] == 1);
      // The fake runs no generated kernel: the output keeps its NaN poison.
      CHECK(results[i].error == search::MeasureError::wrong_answer);
      CHECK(contains(results[i].error_message, "output 'matmul' differs from the reference"));
      CHECK(contains(results[i].error_message, "nan, expected"));
      CHECK(results[i].compile_seconds > 0);
    }
    CHECK(m.stats().worker_starts == 1);

    // Large: the reference is the default GPU schedule, run by the worker, which the fake
    // leaves unwritten: no reference, every program of the task fails with that reason.
    const Task big = matmul_task(512);
    const auto big_results = m.measure(big, {sched::default_schedule(big.dag, big.target)});
    REQUIRE(big_results.size() == 1);
    CHECK(big_results[0].error == search::MeasureError::unknown);
    CHECK(contains(big_results[0].error_message, "no reference output for this task"));
    CHECK(contains(big_results[0].error_message, "unwritten"));

    // Back to the first task after a failed setup: it is set up again (the worker forgot it).
    const auto again = m.measure(task, {programs.back()});
    CAPTURE(again[0].error_message);
    CHECK(again[0].error == search::MeasureError::wrong_answer);

    // A program that is not the task's computation never reaches the worker.
    const Task other = matmul_task(32);
    const auto bad = m.measure(task, {sched::default_schedule(other.dag, other.target)});
    CAPTURE(bad[0].error_message);
    CHECK(bad[0].error == search::MeasureError::instantiation);
    CHECK(contains(bad[0].error_message, "not the task's"));
    CHECK(m.stats().worker_starts == 1);
  }

  TEST_CASE("a build that hangs, allocates without bound or crashes fails alone") {
    // Each program builds in a process of its own; the fault-injection hook runs there, before
    // the build, and stands for an NVRTC build that hangs, takes the memory or dies.
    scoped_env fake("LOOM_CUDA_DRIVER_LIBRARY", LOOM_FAKE_LIBCUDA);
    cuda::GpuMeasurerOptions gpu;
    gpu.image = cuda::ImageKind::ptx;
    search::MeasureOptions o;
    o.build_timeout_s = 2;
    o.memory_limit_mb = 256;
    o.build_parallelism = 2;
    o.fault_injection_hook = [](size_t index, int phase) {
      if (phase != 0) return;
      if (index == 0) ::sleep(60);
      if (index == 1) {
        std::vector<std::unique_ptr<char[]>> blocks;  // untouched: address space, not RSS
        for (;;) blocks.emplace_back(new char[size_t{64} << 20]);
      }
      if (index == 2) std::raise(SIGSEGV);
    };
    cuda::GpuMeasurer m(o, gpu);
    const Task task = matmul_task(48);
    const sched::State program = sched::default_schedule(task.dag, task.target);
    const auto results = m.measure(task, {program, program, program, program});
    REQUIRE(results.size() == 4);

    CAPTURE(results[0].error_message);
    CHECK(results[0].error == search::MeasureError::compile_timeout);
    CHECK(contains(results[0].error_message, "build_timeout_s"));
    CHECK(results[0].compile_seconds >= 2);
    CHECK(results[0].compile_seconds < 30);

    CAPTURE(results[1].error_message);
    CHECK(results[1].error == search::MeasureError::compile);
    CHECK(contains(results[1].error_message, "bad_alloc"));
    CHECK(contains(results[1].error_message, "memory_limit_mb, 256 MiB"));

    CAPTURE(results[2].error_message);
    CHECK(results[2].error == search::MeasureError::compile);
    CHECK(contains(results[2].error_message, "SIGSEGV while building"));

    // The one that built normally reached the worker (whose fake driver runs no kernel).
    CAPTURE(results[3].error_message);
    CHECK(results[3].error == search::MeasureError::wrong_answer);
    CHECK(results[3].compile_seconds > 0);
  }

  TEST_CASE("a first launch far slower than the task's best is cut short") {
    // Without the check the fake's launches succeed, and the test sets how long they last.
    scoped_env fake("LOOM_CUDA_DRIVER_LIBRARY", LOOM_FAKE_LIBCUDA);
    const std::string delay_file =
        "/tmp/loom_fake_launch_delay_" + std::to_string(::getpid()) + ".txt";
    auto set_launch_ms = [&](int ms) {
      FILE* f = std::fopen(delay_file.c_str(), "w");
      REQUIRE(f != nullptr);
      std::fprintf(f, "%d\n", ms);
      std::fclose(f);
    };
    set_launch_ms(0);
    scoped_env delay("LOOM_FAKE_LIBCUDA_LAUNCH_DELAY_FILE", delay_file);
    cuda::GpuMeasurerOptions gpu;
    gpu.image = cuda::ImageKind::ptx;
    search::MeasureOptions o;
    o.check_correctness = false;
    o.slow_run_kill_factor = 20;
    o.slow_run_kill_min_s = 0.3;
    o.run_timeout_s = 30;
    cuda::GpuMeasurer m(o, gpu);
    const Task task = matmul_task(48);
    const sched::State program = sched::default_schedule(task.dag, task.target);

    // The task's best: microseconds.
    const auto fast = m.measure(task, {program});
    CAPTURE(fast[0].error_message);
    REQUIRE(fast[0].ok());
    CHECK(fast[0].costs.size() == 3);

    // A first launch of 300 ms is slow (slow_program_factor) and long enough to be the cost: no
    // second launch (which would make the run last 600 ms or more).
    o.slow_run_kill_factor = 0;
    cuda::GpuMeasurer no_kill(o, gpu);
    (void)no_kill.measure(task, {program});  // its best, microseconds
    set_launch_ms(300);
    const auto slow = no_kill.measure(task, {program});
    CAPTURE(slow[0].error_message);
    REQUIRE(slow[0].ok());
    REQUIRE(slow[0].costs.size() == 1);
    CHECK(slow[0].costs[0] >= 0.29);
    CHECK(slow[0].run_seconds < 0.55);

    // A launch of 5 s, against a best of microseconds: killed after slow_run_kill_min_s, long
    // before run_timeout_s, and the next program gets a fresh worker.
    set_launch_ms(5000);
    const auto killed = m.measure(task, {program});
    CAPTURE(killed[0].error_message);
    CHECK(killed[0].error == search::MeasureError::run_timeout);
    CHECK(contains(killed[0].error_message, "slow_run_kill_factor"));
    CHECK(killed[0].run_seconds >= o.slow_run_kill_min_s);
    CHECK(killed[0].run_seconds < 4);
    set_launch_ms(0);
    const auto after = m.measure(task, {program});
    CAPTURE(after[0].error_message);
    CHECK(after[0].ok());
    CHECK(m.stats().worker_starts == 2);
    std::remove(delay_file.c_str());
  }

  TEST_CASE("compile_from_model measures the model's picks and the default schedule") {
    // The fake runs no kernel, so every candidate leaves its output poisoned: the error names
    // each one's failure. (test_measurer_device.cpp keeps a program on a real GPU.)
    scoped_env fake("LOOM_CUDA_DRIVER_LIBRARY", LOOM_FAKE_LIBCUDA);
    auto a = placeholder<bfloat16>("A", {128, 64});
    auto b = placeholder<bfloat16>("B", {64, 96});
    const Task task(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                       std::vector<ir::Tensor>{ops::matmul(a, b)}),
                    Target::cuda("sm_90"));
    cuda::ModelCompileOptions o;
    o.gpu.image = cuda::ImageKind::ptx;
    o.measure_top = 3;
    std::string message;
    try {
      (void)cuda::compile_from_model(task, o);
    } catch (const user_error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(contains(message, "[loom.cuda.E928]"));
    CHECK(contains(message, "none of the model's 3 picks"));
    for (const char* who :
         {"pick 0: wrong_answer", "pick 2: wrong_answer", "default: wrong_answer"})
      CHECK(contains(message, who));

    o.measure_top = 0;
    CHECK_THROWS_WITH_AS(cuda::compile_from_model(task, o), doctest::Contains("[loom.cuda.E927]"),
                         user_error);
    CHECK_THROWS_WITH_AS(
        cuda::compile_from_model(Task(task.dag, Target::host()), cuda::ModelCompileOptions{}),
        doctest::Contains("[loom.cuda.E923]"), user_error);
  }

  TEST_CASE("program_from_records: the log's record, else the model's pick, else the default") {
    scoped_env fake("LOOM_CUDA_DRIVER_LIBRARY", LOOM_FAKE_LIBCUDA);
    const Task task = matmul_task(48);
    // No log, and the model's picks cannot pass on the fake (it loads no CUBIN and runs no
    // kernel): the default schedule.
    const auto [fallback, fallback_source] =
        cuda::program_from_records(task, "/nonexistent/loom_gpu_records.jsonl");
    CHECK(fallback_source == search::ScheduleSource::Default);
    CHECK(fallback.source == cuda::build(task).source);

    // A log with a record of the task: that program.
    std::mt19937_64 rng(3);
    const std::vector<sched::State> sampled =
        search::sample_programs(search::generate_sketches(task), task, {}, rng, 4);
    REQUIRE(!sampled.empty());
    const sched::State& recorded = sampled.front();
    search::MeasureResult measured;
    measured.costs = {1e-5, 1.1e-5};
    const std::string log = "/tmp/loom_gpu_records_" + std::to_string(::getpid()) + ".jsonl";
    std::remove(log.c_str());
    search::append_records(log, {search::make_tuning_record(task, recorded, measured)});
    const auto [program, source] = cuda::program_from_records(task, log);
    CHECK(source == search::ScheduleSource::Recorded);
    CHECK(program.source == cuda::build(task, recorded).source);
    std::remove(log.c_str());
  }
#endif
}
