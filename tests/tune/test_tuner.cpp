// The tuner end to end (search/tuner.hpp, loom/tune.hpp).
//
// Two kinds of test:
//  - search quality on a synthetic cost landscape: a Measurer that "measures" a program by a
//    fixed formula of its features (no timing, so no noise), which lets a unit test ask whether
//    the evolutionary search with the learned model finds, within a small budget, a program as
//    good as the best of a large random sample;
//  - real tuning of small workloads through the CPU measurer (forked children, JIT): records,
//    resume, a corrupt log, a crashing candidate, build_best and tuned_kernel, each kernel
//    checked against the DAG interpreter.
#include <doctest/doctest.h>

#include <loom/compile_threads.hpp>
#include <loom/cost/features.hpp>
#include <loom/runtime/parallel.hpp>
#include <loom/sched/record.hpp>
#include <loom/tune.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <sys/wait.h>
#include <unistd.h>

#include "support/random_schedule.hpp"
#include "support/synthetic_measurer.hpp"
#include "support/temp_log.hpp"

using namespace loom;
using loom_test::synthetic_cost;
using loom_test::SyntheticMeasurer;
using loom_test::TempLog;

namespace {

/// Tells the synthetic results one at a time and kills its own process (SIGKILL, as `kill -9`
/// would) before telling result number `kill_after`.
class KilledMidBatch final : public search::StreamingMeasurer {
 public:
  explicit KilledMidBatch(int kill_after) : kill_after_(kill_after) {}
  std::vector<search::MeasureResult> measure_each(const Task& task,
                                                  const std::vector<sched::State>& states,
                                                  const ResultCallback& on_result) override {
    std::vector<search::MeasureResult> out = synthetic_.measure(task, states);
    for (size_t i = 0; i < out.size(); ++i) {
      if (told_ == kill_after_) std::raise(SIGKILL);
      if (on_result) on_result(i, out[i]);
      ++told_;
    }
    return out;
  }
  std::string name() const override { return "killed-mid-batch"; }

 private:
  SyntheticMeasurer synthetic_;
  int kill_after_;
  int told_ = 0;
};

/// The synthetic cost, except that the first measurement of one program in four (by a hash of
/// its steps) is lucky: half its cost, as a quiet moment of a noisy machine would make it.
class LuckyFirstMeasurer final : public search::Measurer {
 public:
  std::vector<search::MeasureResult> measure(const Task& task,
                                             const std::vector<sched::State>& states) override {
    std::vector<search::MeasureResult> out = synthetic_.measure(task, states);
    for (size_t i = 0; i < states.size(); ++i) {
      const std::string key = sched::to_record(states[i].steps());
      if (times_[key]++ == 0 && lucky(key) && out[i].ok()) out[i].costs[0] *= 0.5;
    }
    return out;
  }
  std::string name() const override { return "lucky-first"; }
  static bool lucky(const std::string& key) { return std::hash<std::string>{}(key) % 4 == 0; }
  std::map<std::string, int> times_;

 private:
  SyntheticMeasurer synthetic_;
};

void jit_runner(const ir::LoweredFunc& f, std::vector<void*>& ptrs) {
  auto k = cpu_jit::compile(f);
  k.fn(ptrs.data());
}

/// Small, fast settings for real tuning in a unit test.
TuneOptions small_options(int trials, const std::string& records) {
  TuneOptions o;
  o.trials = trials;
  o.measures_per_round = 8;
  o.records = records;
  o.seed = 7;
  o.quiet = true;
  o.evolution.population = 128;
  o.evolution.generations = 1;
  o.measure.repeat = 1;
  o.measure.min_repeat_ms = 1;
  o.measure.build_parallelism = 2;
  o.rerank_top = 0;  // the tests count records; ranking again has its own test
  return o;
}

/// Quick settings for tuning against the synthetic measurer.
TuneOptions synthetic_options(int trials, int measures_per_round, uint64_t seed,
                              const std::string& records) {
  TuneOptions o;
  o.trials = trials;
  o.measures_per_round = measures_per_round;
  o.seed = seed;
  o.quiet = true;
  o.records = records;
  o.evolution.population = 128;
  o.evolution.generations = 1;
  o.rerank_top = 0;
  return o;
}

/// Checks that the first `n` records of `run` are `n` different correct programs of `earlier`,
/// each no slower there than the n-th fastest of them: the n fastest, ties aside.
void check_first_are_fastest(const std::vector<search::TuningRecord>& run,
                             const std::vector<search::TuningRecord>& earlier, int n) {
  std::map<std::string, double> cost_earlier;
  std::vector<double> costs;
  for (const auto& r : earlier) {
    if (!r.result.ok()) continue;
    cost_earlier[sched::to_record(r.steps)] = r.result.mean_cost();
    costs.push_back(r.result.mean_cost());
  }
  std::sort(costs.begin(), costs.end());
  REQUIRE(costs.size() >= static_cast<size_t>(n));
  REQUIRE(run.size() >= static_cast<size_t>(n));
  std::set<std::string> first;
  for (int i = 0; i < n; ++i) {
    const std::string key = sched::to_record(run[i].steps);
    CHECK(first.insert(key).second);
    REQUIRE(cost_earlier.count(key) == 1);
    CHECK(cost_earlier[key] <= costs[n - 1]);
  }
}

std::set<std::string> logged_programs(const std::string& path, const std::string& workload) {
  std::set<std::string> keys;
  for (const auto& r : search::read_records(path, [](const std::string&) {}))
    if (r.workload_key == workload) keys.insert(sched::to_record(r.steps));
  return keys;
}

}  // namespace

TEST_CASE(
    "the search finds, with 128 measurements, a GEMM program as good as the best of 3,000 "
    "random ones (synthetic cost, fixed seed)") {
  const auto w = loom_test::matmul(64, 64, 64);
  Task task(w.dag);

  // The best known: the cheapest of a large random sample of the same space.
  search::SearchOptions space;
  const auto sketches = search::generate_sketches(task, space);
  std::mt19937_64 rng(11);
  const auto sample = search::sample_programs(sketches, task, space, rng, 3000);
  double best_known = search::kFailedCost;
  for (const auto& s : sample) best_known = std::min(best_known, synthetic_cost(s, task.target));
  REQUIRE(best_known < search::kFailedCost);

  SyntheticMeasurer measurer;
  TuneOptions o;
  o.trials = 128;
  o.measures_per_round = 32;
  o.seed = 3;
  o.quiet = true;
  o.gbdt.warmup_samples = 32;
  o.evolution.population = 512;
  o.evolution.generations = 3;
  const search::TuneReport r = search::tune_with(task, o, measurer);
  // The 8 fastest are measured 4 more times at the end; without noise they stay the 8 fastest.
  CHECK(r.reranked == 8 * 4);
  CHECK(measurer.measured == 128 + r.reranked);
  CHECK(r.trials == 128);
  REQUIRE(r.best.has_value());
  INFO("tuned " << r.best_cost << " s, best of 3,000 random " << best_known << " s");
  CHECK(r.best_cost <= 1.10 * best_known);
  // The curve is the best so far: it never goes down.
  for (size_t i = 1; i < r.curve.size(); ++i)
    CHECK(r.curve[i].best_gflops >= r.curve[i - 1].best_gflops);
}

TEST_CASE(
    "ranking again: the best is the fastest by the median of five measurements, not a "
    "lucky single one; the extra measurements are logged, and a resumed run keeps them") {
  const auto w = loom_test::matmul(64, 64, 64);
  Task task(w.dag);
  TempLog log("rerank");
  TuneOptions o = synthetic_options(96, 32, 4, log.path);
  o.gbdt.warmup_samples = 32;
  o.rerank_top = TuneOptions{}.rerank_top;  // the defaults: the 8 fastest, 5 measurements each
  o.rerank_measures = TuneOptions{}.rerank_measures;

  // Without ranking again, a lucky first measurement wins: the premise of the test.
  {
    TuneOptions off = o;
    off.records.clear();
    off.rerank_top = 0;
    LuckyFirstMeasurer lucky;
    const search::TuneReport r = search::tune_with(task, off, lucky);
    REQUIRE(r.best.has_value());
    REQUIRE(r.reranked == 0);
    REQUIRE(r.best_cost < synthetic_cost(*r.best, task.target));
  }

  LuckyFirstMeasurer lucky;
  const search::TuneReport r = search::tune_with(task, o, lucky);
  REQUIRE(r.best.has_value());
  CHECK(r.trials == 96);
  CHECK(r.reranked > 0);
  CHECK(r.rerank_seconds > 0);
  // The best is the truly fastest program measured, and its cost is its true cost.
  double fastest = search::kFailedCost;
  for (const auto& rec : r.records)
    fastest = std::min(fastest, synthetic_cost(sched::replay(task.dag, rec.steps), task.target));
  CHECK(r.best_cost == doctest::Approx(synthetic_cost(*r.best, task.target)));
  CHECK(r.best_cost == doctest::Approx(fastest));
  // Every measurement is in the log, and the best record of the log is that program.
  const auto records = search::read_records(log.path);
  CHECK(records.size() == static_cast<size_t>(r.trials + r.reranked));
  CHECK(lucky.times_.size() == static_cast<size_t>(r.trials));
  const auto best = search::best_record(records, task.workload_key(), task.target.to_string());
  REQUIRE(best.has_value());
  CHECK(sched::to_record(best->steps) == sched::to_record(r.best->steps()));
  // A resumed run that measures nothing new starts from the medians and measures nothing again.
  TuneOptions resumed = o;
  resumed.trials = 0;
  LuckyFirstMeasurer none;
  const search::TuneReport again = search::tune_with(task, resumed, none);
  CHECK(again.resumed == static_cast<int>(records.size()));
  CHECK(again.reranked == 0);
  CHECK(none.times_.empty());
  REQUIRE(again.best.has_value());
  CHECK(sched::to_record(again.best->steps()) == sched::to_record(r.best->steps()));
  CHECK(again.best_cost == doctest::Approx(r.best_cost));

  TuneOptions bad = o;
  bad.rerank_top = -1;
  CHECK_THROWS_WITH_AS(search::tune_with(task, bad, none), doctest::Contains("rerank_top -1"),
                       user_error);
}

TEST_CASE(
    "a tuner killed with SIGKILL in the middle of a batch keeps every record measured "
    "before the kill, and resumes from them") {
  const auto w = loom_test::matmul(32, 48, 40);
  Task task(w.dag);
  TempLog log("tune_killed");
  TuneOptions o = synthetic_options(128, 32, 9, log.path);
  const int kill_after = 32 + 5;  // the 6th program of the second batch
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    KilledMidBatch measurer(kill_after);
    try {
      search::tune_with(task, o, measurer);
    } catch (...) {
    }
    ::_exit(3);  // not killed: the test fails below
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  std::vector<std::string> warnings;
  const auto records =
      search::read_records(log.path, [&](const std::string& m) { warnings.push_back(m); });
  CHECK(records.size() == static_cast<size_t>(kill_after));
  CHECK(warnings.empty());

  SyntheticMeasurer measurer;
  o.trials = 16;
  const search::TuneReport r = search::tune_with(task, o, measurer);
  CHECK(r.resumed == kill_after);
  CHECK(r.trials == 16);
  CHECK(search::read_records(log.path).size() == static_cast<size_t>(kill_after + 16));
}

TEST_CASE(
    "resume: records of another thread count are not this run's measurements; their "
    "fastest programs are measured again first") {
  const auto w = loom_test::matmul(32, 48, 40);
  Task task(w.dag);
  TempLog log("tune_threads");
  TuneOptions o = synthetic_options(24, 8, 5, log.path);
  SyntheticMeasurer on_two;
  on_two.threads_reported = 2;
  const search::TuneReport two = search::tune_with(task, o, on_two);
  REQUIRE(two.trials == 24);
  for (const auto& r : two.records) CHECK(r.threads == 2);

  SyntheticMeasurer on_one;
  on_one.threads_reported = 1;
  o.trials = 8;
  o.remeasure_foreign = 4;
  const search::TuneReport one = search::tune_with(task, o, on_one);
  CHECK(one.resumed == 0);
  CHECK(one.remeasured == 4);
  CHECK(one.trials == 8);
  REQUIRE(one.records.size() == 8);
  check_first_are_fastest(one.records, two.records, 4);
  for (const auto& r : one.records) CHECK(r.threads == 1);
  // The best is one of this run's measurements, whatever the 2-thread costs said.
  double best_of_run = search::kFailedCost;
  for (const auto& r : one.records)
    if (r.result.ok()) best_of_run = std::min(best_of_run, r.result.mean_cost());
  CHECK(one.best_cost == best_of_run);

  // Resumed again on 1 thread: the 8 records of that count are resumed, and the 2-thread
  // programs already measured on 1 thread are not measured a third time.
  const search::TuneReport again = search::tune_with(task, o, on_one);
  CHECK(again.resumed == 8);
  CHECK(again.remeasured == 0);
  // With the option off, the other count's records are simply left alone.
  o.remeasure_foreign = 0;
  on_two.threads_reported = 3;
  const search::TuneReport off = search::tune_with(task, o, on_two);
  CHECK(off.resumed == 0);
  CHECK(off.remeasured == 0);
  CHECK(off.trials == 8);
}

TEST_CASE(
    "resume: records measured with the weights warm are not a cold run's measurements, "
    "and the other way round") {
  const auto w = loom_test::matmul(32, 48, 40);
  Task task(w.dag);
  TempLog log("tune_cold");
  TuneOptions o = synthetic_options(16, 8, 5, log.path);
  SyntheticMeasurer warm;
  warm.threads_reported = 2;
  REQUIRE(search::tune_with(task, o, warm).trials == 16);
  for (const auto& r : search::read_records(log.path)) CHECK(!r.cold_constants);

  SyntheticMeasurer cold = warm;
  cold.cold_reported = true;
  o.trials = 8;
  o.remeasure_foreign = 3;
  const search::TuneReport first_cold = search::tune_with(task, o, cold);
  CHECK(first_cold.resumed == 0);
  CHECK(first_cold.remeasured == 3);
  REQUIRE(first_cold.records.size() == 8);
  for (const auto& r : first_cold.records) CHECK(r.cold_constants);
  std::vector<search::TuningRecord> warm_records;
  for (auto& r : search::read_records(log.path))
    if (!r.cold_constants) warm_records.push_back(std::move(r));
  check_first_are_fastest(first_cold.records, warm_records, 3);
  // Warm again: the 16 warm records are resumed, the cold ones are foreign.
  const search::TuneReport again = search::tune_with(task, o, warm);
  CHECK(again.resumed == 16);
  for (const auto& r : again.records) CHECK(!r.cold_constants);
}

TEST_CASE(
    "resume: records of another device are not this run's measurements either; records "
    "that name no device count as this run's") {
  const auto w = loom_test::matmul(32, 48, 40);
  Task task(w.dag);
  TempLog log("tune_device");
  TuneOptions o = synthetic_options(16, 8, 5, log.path);
  SyntheticMeasurer there;
  there.threads_reported = 2;
  there.device_reported = "cpu-a";
  REQUIRE(search::tune_with(task, o, there).trials == 16);
  for (const auto& r : search::read_records(log.path)) CHECK(r.device == "cpu-a");

  SyntheticMeasurer here;
  here.threads_reported = 2;
  here.device_reported = "cpu-b";
  o.trials = 8;
  o.remeasure_foreign = 3;
  const search::TuneReport moved = search::tune_with(task, o, here);
  CHECK(moved.resumed == 0);
  CHECK(moved.remeasured == 3);
  REQUIRE(moved.records.size() == 8);
  for (const auto& r : moved.records) CHECK(r.device == "cpu-b");
  // The first 3 are cpu-a's fastest correct programs.
  std::vector<search::TuningRecord> on_a;
  std::set<std::string> keys_a;
  for (auto& r : search::read_records(log.path))
    if (r.device == "cpu-a") {
      keys_a.insert(sched::to_record(r.steps));
      on_a.push_back(std::move(r));
    }
  check_first_are_fastest(moved.records, on_a, 3);
  // Back on cpu-a: its 16 records are resumed and cpu-b's are foreign. Of those, only the
  // programs cpu-a has not measured are measured again.
  std::set<std::string> new_on_b;
  for (const auto& r : moved.records) {
    const std::string key = sched::to_record(r.steps);
    if (r.result.ok() && !keys_a.count(key)) new_on_b.insert(key);
  }
  o.remeasure_foreign = 16;
  const search::TuneReport back = search::tune_with(task, o, there);
  CHECK(back.resumed == 16);
  CHECK(back.remeasured == static_cast<int>(std::min<size_t>(new_on_b.size(), 8)));
  // A measurer that names no device resumes every record of its thread count.
  SyntheticMeasurer unnamed;
  unnamed.threads_reported = 2;
  const search::TuneReport any = search::tune_with(task, o, unnamed);
  CHECK(any.resumed == 16 + 8 + 8);
}

TEST_CASE(
    "EvolutionarySearch never picks a program twice; a seed gives the same batches on any number "
    "of compile threads") {
  const auto w = loom_test::matmul_bias_relu(32, 32, 32);
  Task task(w.dag);
  // Also with children moved across sketches (their draws come from the same per-child streams).
  for (const double transfer : {0.0, 0.3}) {
    search::EvolutionOptions evo;
    evo.population = 96;
    evo.generations = 2;
    evo.sketch_transfer_probability = transfer;
    std::vector<std::string> first_run;
    for (int run = 0; run < 2; ++run) {
      set_compile_threads(run == 0 ? 1 : 3);
      search::EvolutionarySearch s(task, {}, evo, 21);
      std::set<std::string> seen;
      std::vector<std::string> order;
      for (int round = 0; round < 3; ++round) {
        cost::RandomCostModel m(5 + round);
        const auto batch = s.next_batch(16, m);
        CHECK(batch.size() == 16);
        for (const auto& st : batch) {
          const std::string key = sched::to_record(st.steps());
          CHECK(seen.insert(key).second);
          order.push_back(key);
        }
        s.add_measured(batch, std::vector<double>(batch.size(), 1.0));
        for (const auto& st : batch) CHECK(s.was_measured(st));
      }
      if (run == 0)
        first_run = order;
      else
        CHECK_MESSAGE(order == first_run, "sketch_transfer_probability " << transfer);
    }
  }
  set_compile_threads(0);
}

namespace {

/// Scores a program by its features (the same program, the same score) and counts the programs
/// it is asked about.
class CountingModel final : public cost::CostModel {
 public:
  void update(const std::vector<cost::ProgramFeatures>&, const std::vector<double>&) override {}
  std::vector<double> predict(const std::vector<cost::ProgramFeatures>& programs) const override {
    asked += programs.size();
    std::vector<double> out;
    for (const cost::ProgramFeatures& p : programs) {
      double s = 0;
      for (size_t i = 0; i < p.values.size(); ++i) s += p.values[i] * double(i % 7 + 1);
      out.push_back(p.num_rows > 0 ? s : -std::numeric_limits<double>::infinity());
    }
    return out;
  }
  void save(std::ostream&) const override {}
  void load(std::istream&) override {}
  std::string name() const override { return "counting"; }
  mutable size_t asked = 0;
};

}  // namespace

TEST_CASE("EvolutionarySearch lowers and scores each program once per round") {
  const auto w = loom_test::matmul_bias_relu(32, 32, 32);
  Task task(w.dag);
  search::EvolutionOptions evo;
  evo.population = 128;
  evo.generations = 3;
  search::EvolutionarySearch s(task, {}, evo, 5);
  CountingModel model;
  std::set<std::string> first_round;
  for (const auto& st : s.next_batch(8, model)) first_round.insert(sched::to_record(st.steps()));
  CHECK(first_round.size() == 8);
  const search::RoundStats one = s.last_round();
  CHECK(model.asked == static_cast<size_t>(one.lowered));
  // Evolution repeats programs (unchanged parents, children equal to one scored before).
  CHECK(one.lowered < one.scored);
  CHECK(one.lowered >= one.sampled);
  model.asked = 0;
  std::set<std::string> second_round;
  for (const auto& st : s.next_batch(8, model)) second_round.insert(sched::to_record(st.steps()));
  CHECK(model.asked == static_cast<size_t>(s.last_round().lowered));
  CHECK(model.asked >= static_cast<size_t>(s.last_round().sampled));
  CHECK(second_round.size() == 8);
}

TEST_CASE("tune: a small GEMM end to end, with records, resume, a corrupt log and build_best") {
  const auto w = loom_test::matmul(48, 40, 56);
  Task task(w.dag);
  TempLog log("tune_gemm");

  TuneResult r = tune(task, small_options(16, log.path));
  CHECK(r.report().trials == 16);
  REQUIRE(r.found());
  CHECK(r.best_gflops() > 0);
  CHECK(r.report().curve.size() == 16);
  CHECK(logged_programs(log.path, task.workload_key()).size() == 16);
  CHECK(r.best_schedule().find("for") != std::string::npos);

  // The best program is correct (its kernel, built again, against the interpreter).
  const auto ref = loom_test::make_reference(w, 3);
  const auto check = loom_test::run_and_compare(w, ref, r.best_state(), jit_runner);
  CHECK_MESSAGE(check.ok, check.message);

  // Resume: the 16 programs are read back and none is measured again.
  const std::set<std::string> before = logged_programs(log.path, task.workload_key());
  TuneResult again = tune(task, small_options(8, log.path));
  CHECK(again.report().resumed == 16);
  CHECK(again.report().trials == 8);
  for (const auto& rec : again.report().records)
    CHECK(before.count(sched::to_record(rec.steps)) == 0);
  CHECK(logged_programs(log.path, task.workload_key()).size() == 24);
  CHECK(again.best_seconds() <= r.best_seconds());

  // A corrupt line and a torn last line (a writer killed mid-record) are skipped with warnings.
  {
    std::ofstream out(log.path, std::ios::app);
    out << "this is not json\n{\"v\": \"loom-records/1\", \"w\": ";
  }
  std::vector<std::string> warnings;
  const auto records =
      search::read_records(log.path, [&](const std::string& m) { warnings.push_back(m); });
  CHECK(records.size() == 24);
  CHECK(warnings.size() == 2);
  // Each record says how many threads its program ran with: the runtime's count here.
  for (const auto& rec : records) CHECK(rec.threads == runtime::num_threads());
  TuneOptions o = small_options(8, log.path);
  std::ostringstream sink;
  o.log = &sink;
  TuneResult third = tune(task, o);
  CHECK(third.report().resumed == 24);
  CHECK(third.report().trials == 8);
  // The records appended after the torn line are whole lines of their own.
  CHECK(logged_programs(log.path, task.workload_key()).size() == 32);

  // build_best builds the best record of the log; it is correct.
  const std::optional<sched::State> best = best_recorded_schedule(task, log.path);
  REQUIRE(best.has_value());
  const auto best_check = loom_test::run_and_compare(w, ref, *best, jit_runner);
  CHECK_MESSAGE(best_check.ok, best_check.message);
  Kernel k = build_best(task, log.path);
  CHECK(static_cast<bool>(k));

  // Records name this CPU; those of another are used only when no record of this one exists,
  // with a warning that says so.
  for (const auto& rec : search::read_records(log.path))
    CHECK(rec.device == cpu_jit::Engine::global().cpu_name());
  TempLog moved("tune_gemm_moved");
  std::vector<search::TuningRecord> elsewhere = search::read_records(log.path);
  for (auto& rec : elsewhere) rec.device = "some-other-cpu";
  search::append_records(moved.path, elsewhere);
  std::ostringstream err;
  std::streambuf* old_err = std::cerr.rdbuf(err.rdbuf());
  const std::optional<sched::State> foreign = best_recorded_schedule(task, moved.path);
  std::cerr.rdbuf(old_err);
  REQUIRE(foreign.has_value());
  CHECK(sched::to_record(foreign->steps()) == sched::to_record(best->steps()));
  CHECK(err.str().find("measured on some-other-cpu") != std::string::npos);
  // One correct record of this CPU, however slow, wins over every record of the other.
  const auto here =
      std::find_if(records.begin(), records.end(), [](const auto& rec) { return rec.result.ok(); });
  REQUIRE(here != records.end());
  search::append_records(moved.path, {*here});
  err.str("");
  old_err = std::cerr.rdbuf(err.rdbuf());
  const std::optional<sched::State> local = best_recorded_schedule(task, moved.path);
  std::cerr.rdbuf(old_err);
  REQUIRE(local.has_value());
  CHECK(sched::to_record(local->steps()) == sched::to_record(here->steps));
  CHECK(err.str().empty());
}

TEST_CASE("tune survives candidates that crash: they are recorded as failures") {
  const auto w = loom_test::matmul(32, 32, 32);
  Task task(w.dag);
  TempLog log("tune_crash");
  TuneOptions o = small_options(16, log.path);
  // The third program of every batch dies of SIGSEGV when it starts running.
  o.measure.fault_injection_hook = [](size_t index, int phase) {
    if (index == 2 && phase == 1) std::raise(SIGSEGV);
  };
  TuneResult r = tune(task, o);
  CHECK(r.report().trials == 16);
  CHECK(r.report().failures_by_error[static_cast<int>(search::MeasureError::runtime)] == 2);
  CHECK(r.found());
  int failed_records = 0;
  for (const auto& rec : search::read_records(log.path))
    if (rec.result.error == search::MeasureError::runtime) ++failed_records;
  CHECK(failed_records == 2);
}

TEST_CASE(
    "tuned_kernel: the logged best, built once per process; another shape's, adapted; or the "
    "pretrained model's pick") {
  const auto w = loom_test::matmul(24, 20, 16);
  Task task(w.dag);
  TempLog log("tuned_kernel");
  const auto ref = loom_test::make_reference(w, 9);
  auto run_kernel = [&](const Kernel& k) {
    std::vector<loom_test::tensor_data> ins = ref.inputs, outs = ref.outputs;
    for (auto& o : outs) std::fill(o.bytes.begin(), o.bytes.end(), 0xff);  // NaN until written
    std::vector<void*> ptrs;
    for (auto& i : ins) ptrs.push_back(i.data());
    for (auto& o : outs) ptrs.push_back(o.data());
    std::vector<BufferView> views;
    for (size_t i = 0; i < ptrs.size(); ++i)
      views.push_back(as_buffer_view(static_cast<float*>(ptrs[i])));
    k.run(views);
    return outs[0];
  };
  auto close = [&](const loom_test::tensor_data& got) {
    std::string msg;
    const bool ok = loom_test::compare_values<float>(got, ref.outputs[0], 16, msg);
    CHECK_MESSAGE(ok, msg);
  };

  // No record yet: the pretrained model's pick (test_model_compile has the fallbacks), correct.
  const Kernel fallback = tuned_kernel(task, log.path);
  close(run_kernel(fallback));
  // The cache answers the same key with the same kernel.
  CHECK(tuned_kernel(task, log.path).source() == fallback.source());

  tune(task, small_options(8, log.path));
  CHECK_THROWS_WITH_AS(build_best(Task(loom_test::matmul(8, 8, 8).dag), log.path),
                       doctest::Contains("loom.search.E851"), loom::user_error);
  const Kernel best = build_best(task, log.path);
  close(run_kernel(best));

  // A shape the log has no record of, of the same computation: the tuned schedule carried over
  // (its splits adapted to M = 37, a prime, and N = 44), correct there.
  const auto w2 = loom_test::matmul(37, 44, 16);
  const Task task2(w2.dag);
  const Kernel moved = tuned_kernel(task2, log.path);
  const auto t = search::transferred_state(task2, log.path, runtime::num_threads());
  REQUIRE(t.has_value());
  CHECK(t->workload_key == task.workload_key());
  CHECK(moved.source() == build(task2, t->state).source());
  CHECK(moved.source() != build(task2).source());
  const auto ref2 = loom_test::make_reference(w2, 4);
  std::vector<loom_test::tensor_data> ins = ref2.inputs, outs = ref2.outputs;
  for (auto& o : outs) std::fill(o.bytes.begin(), o.bytes.end(), 0xff);
  std::vector<BufferView> views;
  for (auto& i : ins) views.push_back(as_buffer_view(static_cast<float*>(i.data())));
  for (auto& o : outs) views.push_back(as_buffer_view(static_cast<float*>(o.data())));
  moved.run(views);
  std::string msg;
  CHECK_MESSAGE(loom_test::compare_values<float>(outs[0], ref2.outputs[0], 16, msg), msg);
}

TEST_CASE("representative_sizes: the ends and geometric steps between them") {
  CHECK(representative_sizes(1, 512, 4) == std::vector<int64_t>{1, 8, 64, 512});
  CHECK(representative_sizes(5, 5, 3) == std::vector<int64_t>{5});
  CHECK(representative_sizes(1, 2, 5) == std::vector<int64_t>{1, 2});
  CHECK(representative_sizes(16, 128, 1) == std::vector<int64_t>{128});
  CHECK_THROWS_WITH_AS(representative_sizes(0, 8, 2), doctest::Contains("loom.search.E860"),
                       loom::user_error);
  CHECK_THROWS_WITH_AS(representative_sizes(9, 8, 2), doctest::Contains("loom.search.E860"),
                       loom::user_error);
}

TEST_CASE("DynamicKernel: tuned sizes from their records, others carried over, once each") {
  TempLog log("dynamic");
  // relu(X W + b) with a varying number of rows M.
  const DynamicKernel ffn(
      [](int64_t m) { return Task(loom_test::matmul_bias_relu(m, 20, 16).dag); }, log.path);
  CHECK(ffn.source(8) == ScheduleSource::Predicted);  // nothing tuned yet

  TaskSchedulerOptions o;
  o.trials = 2 * 8;
  o.tune = small_options(0, "");
  std::ostringstream sink;
  o.log = &sink;
  CHECK_THROWS_WITH_AS(tune_dynamic(ffn, {}, o), doctest::Contains("loom.search.E861"),
                       loom::user_error);
  tune_dynamic(ffn, {4, 32}, o);
  int records = 0;
  for (const auto& r : search::read_records(log.path)) {
    ++records;
    CHECK(r.structure_key == ffn.task(4).dag->structure_key());
  }
  CHECK(records == 16);

  const DynamicKernel again(
      [](int64_t m) { return Task(loom_test::matmul_bias_relu(m, 20, 16).dag); }, log.path);
  CHECK(again.source(32) == ScheduleSource::Recorded);
  // Many threads asking for sizes nobody tuned at once: one compilation per size, each correct.
  std::vector<std::thread> threads;
  std::vector<std::string> sources(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] { sources[t] = again.kernel(t % 2 ? 13 : 1).source(); });
  for (auto& th : threads) th.join();
  for (int t = 2; t < 8; ++t) CHECK(sources[t] == sources[t % 2]);
  CHECK(again.source(13) == ScheduleSource::Transferred);
  CHECK(again.source(1) == ScheduleSource::Transferred);
  CHECK(again.compiled_sizes() == std::vector<int64_t>{1, 13, 32});
  for (int64_t m : {1, 13, 32}) {
    const auto w = loom_test::matmul_bias_relu(m, 20, 16);
    const auto ref = loom_test::make_reference(w, static_cast<uint32_t>(m));
    std::vector<loom_test::tensor_data> ins = ref.inputs, outs = ref.outputs;
    for (auto& out : outs) std::fill(out.bytes.begin(), out.bytes.end(), 0xff);
    std::vector<BufferView> views;
    for (auto& i : ins) views.push_back(as_buffer_view(static_cast<float*>(i.data())));
    for (auto& out : outs) views.push_back(as_buffer_view(static_cast<float*>(out.data())));
    again.kernel(m).run(views);
    std::string msg;
    CHECK_MESSAGE(loom_test::compare_values<float>(outs[0], ref.outputs[0], 16, msg),
                  "M = " << m << ": " << msg);
  }
}
