// The crash-isolated CPU measurer (loom/backend/llvm/measurer.hpp): good programs measure with
// positive costs; faults injected into single programs of a batch (a segfault while running, an
// abort while building, hangs while building and running, an exit, a genuinely wrong program)
// are each recorded with their MeasureError while the rest of the batch measures normally and
// this process survives with no child left behind; constant inputs are measured packed where
// the layout rewrite applies and as they are where it does not.
#include <doctest/doctest.h>

#include <loom/cpu.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/random_schedule.hpp"
#include "support/sanitizers.hpp"

using namespace loom;
using search::MeasureError;

namespace {

/// C[i, j] = sum_k A[i, k] * B[k, j], small enough for the reference interpreter.
std::shared_ptr<const ComputeDAG> matmul_dag(int64_t n, bool scaled = false) {
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  auto k = reduce_axis(n, "k");
  // `scaled` is another computation with the same arguments (a program of it is a genuinely
  // wrong program for the plain task).
  auto C =
      scaled ? compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j) * 2.0f, k); })
             : compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  return std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{A, B},
                                            std::vector<ir::Tensor>{C});
}

std::vector<sched::State> sample(const Task& task, int count, uint64_t seed) {
  const search::SearchOptions options;
  std::mt19937_64 rng(seed);
  auto programs =
      search::sample_programs(search::generate_sketches(task, options), task, options, rng, count);
  REQUIRE(static_cast<int>(programs.size()) == count);
  return programs;
}

/// Short, quick measurements. Every program is built and timed fully (no slow-build,
/// slow-program or contender cut-off): whether a random program runs 10× slower than the best so
/// far depends on the machine's mood, and check_ok() expects `repeat` costs.
search::MeasureOptions quick_options() {
  search::MeasureOptions o;
  o.repeat = 2;
  o.min_repeat_ms = 2;
  o.build_parallelism = 2;
  o.num_threads = 1;
  o.slow_program_factor = 0;
  o.contender_factor = 0;
  o.slow_build_kill_factor = 0;
  o.slow_run_kill_factor = 0;
  return o;
}

[[noreturn]] void spin_forever() {
  volatile unsigned long spin = 0;
  for (;;) spin = spin + 1;
}

/// A fault-injection hook that hangs the program at batch index `at` in `phase` (0: right
/// before building, 1: right before running).
std::function<void(size_t, int)> hang_at(size_t at, int phase) {
  return [at, phase](size_t index, int p) {
    if (index == at && p == phase) spin_forever();
  };
}

/// True when this process has no child, running or zombie.
bool no_children_left() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

/// Open file descriptors of this process (-1 where /proc is not there to say).
int open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (::readdir(d)) ++n;
  ::closedir(d);
  return n;
}

void check_ok(const search::MeasureResult& r, int repeat) {
  CHECK_MESSAGE(r.ok(), search::measure_error_name(r.error) << ": " << r.error_message);
  CHECK(r.costs.size() == static_cast<size_t>(repeat));
  for (double c : r.costs) CHECK(c > 0);
  CHECK(r.compile_seconds > 0);
  CHECK(r.run_seconds > 0);
  CHECK(r.mean_cost() < search::kFailedCost);
}

/// A program stopped by one of the measurer's cut-offs: `error`, the option named in the
/// message, and its build or run `seconds` at least the cut-off's floor and far below the hard
/// timeout.
void check_cut_off(const search::MeasureResult& r, MeasureError error, const std::string& option,
                   double seconds, double floor_s, double timeout_s) {
  CHECK(r.error == error);
  CHECK_MESSAGE(r.error_message.find("(" + option + ")") != std::string::npos, r.error_message);
  CHECK(seconds >= floor_s);
  CHECK(seconds < 0.5 * timeout_s);
}

}  // namespace

TEST_SUITE("tune") {
  TEST_CASE("a batch of good programs measures ok, and bad options are refused") {
    const Task task(matmul_dag(64));
    const auto programs = sample(task, 6, 7);
    cpu_jit::LocalMeasurer measurer(quick_options());
    CHECK(measurer.name() == "local-cpu");
    const int fds_before = open_fds();
    const auto results = measurer.measure(task, programs);
    CHECK(open_fds() == fds_before);  // every socket and pipe closed
    REQUIRE(results.size() == programs.size());
    for (const auto& r : results) check_ok(r, 2);
    CHECK(measurer.stats().programs == 6);
    CHECK(measurer.stats().batches == 1);
    CHECK(measurer.stats().compile_seconds > 0);
    CHECK(measurer.stats().wall_seconds > 0);
    CHECK(no_children_left());

    // A second batch of the same task reuses its inputs and reference; an empty batch is fine.
    CHECK(measurer.measure(task, {programs[0]})[0].ok());
    CHECK(measurer.measure(task, {}).empty());

    search::MeasureOptions bad = quick_options();
    bad.repeat = 0;
    CHECK_THROWS_WITH_AS(cpu_jit::LocalMeasurer{bad}, doctest::Contains("[loom.llvm.E530]"),
                         user_error);
  }

  TEST_CASE("a program slower than slow_program_factor × the task's best so far is timed once") {
    const Task task(matmul_dag(32));
    const auto programs = sample(task, 2, 13);
    search::MeasureOptions o = quick_options();
    // Any time is more than 1e-9 × the best: once a best is known, every program is cut off
    // after its first run, whatever the machine does.
    o.slow_program_factor = 1e-9;
    cpu_jit::LocalMeasurer measurer(o);
    check_ok(measurer.measure(task, {programs[0]})[0], 2);  // no best yet: timed fully
    for (const auto& r : measurer.measure(task, programs)) {
      CHECK(r.ok());
      CHECK(r.costs.size() == 1);
    }
    // Another task has its own best.
    const Task other(matmul_dag(16));
    check_ok(measurer.measure(other, sample(other, 1, 3))[0], 2);
  }

  TEST_CASE("a program whose first repeat is beyond contender_factor × the best gets no more") {
    const Task task(matmul_dag(32));
    const auto programs = sample(task, 3, 19);
    search::MeasureOptions o = quick_options();
    o.repeat = 3;
    // Any time is more than 1e-9 × the best and less than 1e9 × it: whatever the machine does,
    // once a best is known every program stops after its first repeat, or none does.
    o.contender_factor = 1e-9;
    cpu_jit::LocalMeasurer cut(o);
    check_ok(cut.measure(task, {programs[0]})[0], 3);  // no best yet: every repeat
    for (const auto& r : cut.measure(task, programs)) {
      CHECK(r.ok());
      CHECK(r.costs.size() == 1);
    }
    o.contender_factor = 1e9;
    cpu_jit::LocalMeasurer kept(o);
    check_ok(kept.measure(task, {programs[0]})[0], 3);
    for (const auto& r : kept.measure(task, programs)) check_ok(r, 3);
    o.contender_factor = -1;
    CHECK_THROWS_WITH_AS(cpu_jit::LocalMeasurer{o}, doctest::Contains("contender_factor"),
                         user_error);
  }

  TEST_CASE("a build far longer than the task's median build is killed (slow_build_kill_factor)") {
    const Task task(matmul_dag(32));
    const auto programs = sample(task, 10, 17);
    search::MeasureOptions o = quick_options();
    o.slow_build_kill_factor = 5;
    o.slow_build_kill_min_s = 0.5;
    o.build_timeout_s = 60;
    // One build at a time: the eight builds before the hanging one give the median.
    o.build_parallelism = 1;
    o.fault_injection_hook = hang_at(9, 0);
    cpu_jit::LocalMeasurer measurer(o);
    const auto results = measurer.measure(task, programs);
    for (size_t i = 0; i < 9; ++i) check_ok(results[i], 2);
    // Killed at max(min_s, factor × median), long before build_timeout_s.
    check_cut_off(results[9], MeasureError::compile_timeout, "slow_build_kill_factor",
                  results[9].compile_seconds, o.slow_build_kill_min_s, o.build_timeout_s);
    CHECK(no_children_left());
  }

  TEST_CASE("a first run far longer than the task's best is killed (slow_run_kill_factor)") {
    const Task task(matmul_dag(32));
    const auto programs = sample(task, 3, 19);
    search::MeasureOptions o = quick_options();
    o.slow_run_kill_factor = 20;
    o.slow_run_kill_min_s = 0.3;
    o.run_timeout_s = 60;
    // The third program's timing lasts far beyond the kill limit (3 repeats of 0.4 s each): only
    // its first run may be cut short.
    o.min_repeat_ms = 400;
    o.repeat = 3;
    o.fault_injection_hook = hang_at(1, 1);
    cpu_jit::LocalMeasurer measurer(o);
    // No best yet: nothing is killed, and the first program sets the task's best.
    check_ok(measurer.measure(task, {programs[0]})[0], 3);
    const auto results = measurer.measure(task, {programs[0], programs[1], programs[2]});
    check_ok(results[0], 3);
    check_cut_off(results[1], MeasureError::run_timeout, "slow_run_kill_factor",
                  results[1].run_seconds, o.slow_run_kill_min_s, o.run_timeout_s);
    check_ok(results[2], 3);
    CHECK(results[2].run_seconds > 1.0);  // timed past the kill limit
    CHECK(no_children_left());
  }

  TEST_CASE(
      "a first run of min_repeat_ms or more is the first repeat, and is cut off at "
      "slow_long_program_factor") {
    const Task task(matmul_dag(32));
    const auto programs = sample(task, 3, 17);
    search::MeasureOptions o = quick_options();
    // Every first run lasts more than 1 ns: every run is long. Then the checked run is the
    // first of the `repeat` costs, and once a best is known the tighter factor cuts off every
    // program after that run, while the short-run factor (1e9) would cut off none.
    o.min_repeat_ms = 1e-6;
    o.repeat = 3;
    o.slow_program_factor = 1e9;
    o.slow_long_program_factor = 1e-9;
    cpu_jit::LocalMeasurer measurer(o);
    check_ok(measurer.measure(task, {programs[0]})[0], 3);
    for (const auto& r : measurer.measure(task, programs)) {
      CHECK(r.ok());
      CHECK(r.costs.size() == 1);
    }
    // With the long-run factor off, only slow_program_factor counts: nothing is cut off.
    o.slow_long_program_factor = 0;
    cpu_jit::LocalMeasurer plain(o);
    for (const auto& r : plain.measure(task, programs)) check_ok(r, 3);

    search::MeasureOptions bad = quick_options();
    bad.slow_long_program_factor = -1;
    CHECK_THROWS_WITH_AS(cpu_jit::LocalMeasurer{bad}, doctest::Contains("slow_long_program_factor"),
                         user_error);
  }

  TEST_CASE("cache flushing times single calls; unchecked programs are timed too") {
    const Task task(matmul_dag(32));
    const auto programs = sample(task, 2, 11);
    search::MeasureOptions o = quick_options();
    o.flush_cache = true;
    o.repeat = 3;
    o.check_correctness = false;
    cpu_jit::LocalMeasurer measurer(o);
    for (const auto& r : measurer.measure(task, programs)) check_ok(r, 3);
    CHECK(measurer.stats().reference_seconds == 0);  // no reference without checking
  }

  TEST_CASE("faults in single programs are recorded and the rest of the batch measures ok") {
    const Task task(matmul_dag(64));
    auto programs = sample(task, 8, 3);
    // A program of another computation with the same arguments computes 2 A B: wrong.
    const Task scaled(matmul_dag(64, true));
    programs[4] = sample(scaled, 1, 5)[0];
    // A sketch (tile sizes unset) cannot be lowered.
    programs[6] = search::generate_sketches(task)[0];

    search::MeasureOptions o = quick_options();
    o.run_timeout_s = 1;
    o.fault_injection_hook = [](size_t index, int phase) {
      if (index == 1 && phase == 1) std::raise(SIGSEGV);
      if (index == 2 && phase == 0) std::abort();
      if (index == 3 && phase == 1) spin_forever();
      if (index == 5 && phase == 1) ::_exit(3);
      if (index == 7 && phase == 0) spin_forever();
    };
    // Long enough for a real build on a loaded machine (2.4 s seen beside a spinning build).
    o.build_timeout_s = 5;
    cpu_jit::LocalMeasurer measurer(o);
    const auto results = measurer.measure(task, programs);
    REQUIRE(results.size() == 8);
    check_ok(results[0], 2);

    CHECK(results[1].error == MeasureError::runtime);
    CHECK(results[1].error_message.find("killed by SIGSEGV while running") != std::string::npos);
    CHECK(results[1].compile_seconds > 0);

    CHECK(results[2].error == MeasureError::compile);
    CHECK(results[2].error_message.find("killed by SIGABRT while building") != std::string::npos);

    CHECK(results[3].error == MeasureError::run_timeout);
    CHECK(results[3].run_seconds == doctest::Approx(o.run_timeout_s));

    CHECK(results[4].error == MeasureError::wrong_answer);
    CHECK_MESSAGE(results[4].error_message.find("output 'C' differs") != std::string::npos,
                  results[4].error_message);
    CHECK(results[4].costs.empty());

    CHECK(results[5].error == MeasureError::runtime);
    CHECK(results[5].error_message.find("exited with status 3 while running") != std::string::npos);

    CHECK(results[6].error == MeasureError::instantiation);
    CHECK(results[6].error_message.find("[loom.lower.E410]") != std::string::npos);

    CHECK(results[7].error == MeasureError::compile_timeout);
    CHECK(results[7].compile_seconds == doctest::Approx(o.build_timeout_s));

    for (size_t i = 1; i < results.size(); ++i) {
      CHECK(!results[i].ok());
      CHECK(results[i].mean_cost() == search::kFailedCost);
    }
    CHECK(no_children_left());

    // The measurer goes on measuring after the faults.
    o.fault_injection_hook = nullptr;
    cpu_jit::LocalMeasurer again(o);
    check_ok(again.measure(task, {programs[1]})[0], 2);

    // A program of a computation with other arguments is refused without a process.
    const auto other = sample(Task(matmul_dag(32)), 1, 9);
    const auto r = again.measure(task, other)[0];
    CHECK(r.error == MeasureError::instantiation);
    CHECK(r.error_message.find("made for workload") != std::string::npos);
    CHECK(no_children_left());
  }

  TEST_CASE(
      "memory_limit_mb: a program past it fails alone, its run or its build; the rest measure") {
    // The sanitizers' allocators abort on a failed allocation instead of returning null.
    if (loom_test::address_sanitizer || loom_test::thread_sanitizer) return;
    // At the root the intermediate takes 1 GiB, inlined nothing.
    const Task task(loom_test::oversized_intermediate().dag);
    const sched::State root(task.dag);
    sched::State inlined(task.dag);
    inlined.compute_inline("P");

    search::MeasureOptions o = quick_options();
    o.memory_limit_mb = 256;
    cpu_jit::LocalMeasurer measurer(o);
    const auto results = measurer.measure(task, {root, inlined});
    CHECK(results[0].error == MeasureError::runtime);
    const std::string& m = results[0].error_message;
    CHECK_MESSAGE(m.find("out of memory") != std::string::npos, m);
    CHECK_MESSAGE(m.find("memory_limit_mb, 256 MiB") != std::string::npos, m);
    check_ok(results[1], 2);
    CHECK(no_children_left());

    // 1 MiB is too little for LLVM to build anything: every build fails, the measurer goes on.
    o.memory_limit_mb = 1;
    cpu_jit::LocalMeasurer starved(o);
    const auto r = starved.measure(task, {inlined})[0];
    CHECK(r.error == MeasureError::compile);
    CHECK_MESSAGE(
        r.error_message.find("(past MeasureOptions::memory_limit_mb, 1 MiB)") != std::string::npos,
        r.error_message);
    CHECK(no_children_left());

    o.memory_limit_mb = -1;
    CHECK_THROWS_WITH_AS(cpu_jit::LocalMeasurer{o}, doctest::Contains("memory_limit_mb -1"),
                         user_error);
  }

  TEST_CASE("constant inputs are measured packed where the layout rewrite applies") {
    const Task task(matmul_dag(64));
    // A program of a PackReusedInput sketch (B copied per call into a contiguous buffer): its
    // rewrite replaces the per-call copy by B stored once in tile order.
    search::SearchOptions options;
    std::vector<sched::State> pack_sketches;
    for (const auto& s : search::generate_sketches(task, options))
      for (const auto& stage : s.stages())
        if (stage.name == "B.local") pack_sketches.push_back(s);
    REQUIRE(!pack_sketches.empty());
    std::mt19937_64 rng(21);
    const sched::State packed_program =
        search::sample_program(pack_sketches[0], task, options, rng);
    CHECK(cpu_jit::LocalMeasurer::packed_inputs(packed_program, {"B"}) ==
          std::vector<std::string>{"B"});

    // A program whose reader of B walks a fused-then-split loop: the rewrite does not apply.
    sched::State plain_program(task.dag);
    plain_program.fuse("C", {0, 1});
    plain_program.split("C", 0, {16});
    CHECK(cpu_jit::LocalMeasurer::packed_inputs(plain_program, {"B"}).empty());
    // Names that are not inputs of the task are ignored.
    CHECK(cpu_jit::LocalMeasurer::packed_inputs(packed_program, {"W", "B"}) ==
          std::vector<std::string>{"B"});

    cpu_jit::LocalMeasurerOptions local;
    local.constant_inputs = {"W", "B"};
    search::MeasureOptions o = quick_options();
    o.interpreter_flop_limit = 0;  // the reference from the compiled default schedule
    cpu_jit::LocalMeasurer measurer(o, local);
    const auto results = measurer.measure(task, {packed_program, plain_program});
    check_ok(results[0], 2);
    check_ok(results[1], 2);
    CHECK(measurer.stats().packed_programs == 1);
    CHECK(measurer.stats().reference_seconds > 0);

    // Weights evicted before each timed run: every repeat is one call, on the packed copy
    // (packed program) or the bound input (plain one), and both are still checked.
    o.cold_constants = true;
    o.repeat = 4;
    cpu_jit::LocalMeasurer cold(o, local);
    for (const auto& r : cold.measure(task, {packed_program, plain_program})) {
      check_ok(r, 4);
    }
    CHECK(cold.stats().packed_programs == 1);
    CHECK(no_children_left());
  }
}
