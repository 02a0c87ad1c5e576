// The task scheduler (search/task_scheduler.hpp): the allocation policy on made-up cost
// histories, the scheduler over the synthetic measurer (no timing), and a real run through the
// CPU measurer whose kernels are checked against the interpreter.
#include <doctest/doctest.h>

#include <loom/runtime/parallel.hpp>
#include <loom/sched/record.hpp>
#include <loom/tune.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "support/random_schedule.hpp"
#include "support/synthetic_measurer.hpp"
#include "support/quick_scheduler.hpp"
#include "support/temp_log.hpp"

using namespace loom;

namespace {

TaskSchedulerOptions greedy_options() {
  TaskSchedulerOptions o;
  o.eps_greedy = 0;  // the gradient alone decides
  return o;
}

}  // namespace

TEST_CASE("allocator: warm-up gives every task a round in order, then the steepest gradient wins") {
  // Task 0 runs 10 times per inference and is still improving; task 1 once, and flat.
  search::TaskAllocator a({10, 1}, {1e9, 1e9}, {"a", "b"}, greedy_options());
  CHECK(a.next() == 0);
  CHECK(a.last_reason() == "warm-up");
  a.finish_round(0, 4e-3, 64, false);
  CHECK(a.next() == 1);
  CHECK(a.last_reason() == "warm-up");
  a.finish_round(1, 1e-3, 64, false);
  CHECK(a.objective() == doctest::Approx(10 * 4e-3 + 1e-3));

  // Task 0 gets the rounds while its weighted gradient is the steeper: each of its rounds cuts
  // its cost by a fifth, so for nine rounds w·(α·backward + (1-α)·forward) stays below
  // task 1's −(1-α)·1e-3. Then it has become cheap enough that task 1's turn comes.
  double cost0 = 4e-3;
  int rounds_of_task0 = 0;
  for (;;) {
    const int t = a.next();
    REQUIRE(t >= 0);
    CHECK(a.last_reason() == "gradient");
    if (t == 1) break;
    ++rounds_of_task0;
    REQUIRE(rounds_of_task0 < 100);
    cost0 *= 0.8;
    a.finish_round(0, cost0, 64, false);
  }
  CHECK(rounds_of_task0 == 9);
  CHECK(a.gradient(1) < a.gradient(0));
  CHECK(a.gradient(1) == doctest::Approx(-(1 - 0.2) * 1e-3));
}

TEST_CASE("allocator: a task far slower than the fastest of its tag group is caught up (β)") {
  // Equal FLOPs. Task 0 (weight 20) is fast, task 1 ten times slower; both flat for rounds.
  auto run = [](const std::string& tag0, const std::string& tag1) {
    search::TaskAllocator a({20, 1}, {1e9, 1e9}, {tag0, tag1}, greedy_options());
    for (int r = 0; r < 4; ++r) {
      a.finish_round(0, 1e-3, 64, false);
      a.finish_round(1, 1e-2, 64, false);
    }
    return a.next();
  };
  // Apart, task 0's weight wins: forward gradients −20·1e-3/4 against −1e-2/4.
  CHECK(run("conv_a", "conv_b") == 0);
  // Together, task 1 may hope for 1/β of task 0's throughput (cost 2e-3): −8e-3 against −5e-3.
  CHECK(run("conv", "conv") == 1);
}

TEST_CASE("allocator: exhausted, early-stopped and hopeless tasks get no more rounds") {
  TaskSchedulerOptions o = greedy_options();
  o.early_stopping_per_task = 128;
  search::TaskAllocator a({1, 1, 1}, {1e9, 1e9, 1e9}, {"x", "y", "z"}, o);
  a.finish_round(0, 1e-3, 64, /*exhausted=*/true);
  CHECK(a.dead(0));
  // Task 1 improves once, then not for 128 of its programs.
  a.finish_round(1, 2e-3, 64, false);
  a.finish_round(1, 2e-3, 64, false);
  CHECK_FALSE(a.dead(1));
  a.finish_round(1, 2e-3, 64, false);
  CHECK(a.dead(1));
  // Task 2 never measures a correct program: given up after three rounds.
  for (int r = 0; r < 2; ++r) {
    CHECK(a.next() == 2);
    a.finish_round(2, search::kFailedCost, 32, false);
  }
  CHECK(a.objective() == search::kFailedCost);
  CHECK(a.next() == 2);
  a.finish_round(2, search::kFailedCost, 32, false);
  CHECK(a.dead(2));
  CHECK(a.next() == -1);
}

TEST_CASE("allocator: round-robin gives the live tasks their rounds in turn") {
  TaskSchedulerOptions o = greedy_options();
  o.round_robin = true;
  search::TaskAllocator a({100, 1, 1}, {1e9, 1e9, 1e9}, {"a", "b", "c"}, o);
  std::vector<int> order;
  for (int r = 0; r < 7; ++r) {
    const int t = a.next();
    order.push_back(t);
    a.finish_round(t, 1e-3 / (r + 1), 16, false);
  }
  CHECK(order == std::vector<int>{0, 1, 2, 0, 1, 2, 0});
  CHECK(a.last_reason() == "round-robin");
}

TEST_CASE("allocator: with ε = 1 every pick after the warm-up is random, over live tasks only") {
  TaskSchedulerOptions o;
  o.eps_greedy = 1;
  search::TaskAllocator a({1, 1, 1}, {1e9, 1e9, 1e9}, {"x", "y", "z"}, o);
  for (int t = 0; t < 3; ++t) a.finish_round(t, 1e-3, 64, t == 1);
  std::set<int> seen;
  for (int r = 0; r < 64; ++r) {
    const int t = a.next();
    CHECK(a.last_reason() == "random");
    seen.insert(t);
    a.finish_round(t, 1e-3, 64, false);
  }
  CHECK(seen == std::set<int>{0, 2});
}

TEST_CASE("tune_tasks_with: rounds over three tasks, no program measured twice, records resume") {
  const auto big = loom_test::matmul(64, 64, 64);
  const auto small = loom_test::matmul(16, 32, 24);
  const auto other = loom_test::matmul(48, 16, 32);
  std::vector<WeightedTask> tasks = {
      {Task(big.dag), 4, ""}, {Task(small.dag), 1, ""}, {Task(other.dag), 2, ""}};
  loom_test::TempLog log("task_scheduler_synthetic");
  loom_test::SyntheticMeasurer measurer;
  TaskSchedulerOptions o;
  o.trials = 10 * 16;
  o.tune.measures_per_round = 16;
  o.tune.records = log.path;
  o.tune.seed = 5;
  o.tune.gbdt.warmup_samples = 16;
  o.tune.evolution.population = 256;
  o.tune.evolution.generations = 2;
  o.tune.rerank_top = 4;
  o.tune.rerank_measures = 3;
  std::ostringstream sink;
  o.log = &sink;
  const search::TaskSchedulerReport r = search::tune_tasks_with(tasks, o, measurer);

  CHECK(r.trials == 160);
  CHECK(r.stop_reason == "trials");
  REQUIRE(r.allocation.size() == 10);
  CHECK(r.allocation[0] == 0);
  CHECK(r.allocation[1] == 1);
  CHECK(r.allocation[2] == 2);
  int rounds = 0, trials = 0, reranked = 0;
  for (const auto& t : r.tasks) {
    CHECK(t.rounds >= 1);
    CHECK(t.best.has_value());
    rounds += t.rounds;
    trials += t.trials;
    reranked += t.reranked;
  }
  CHECK(rounds == 10);
  CHECK(trials == 160);
  // Each task's best 4 were measured until they had 3 measurements: 2 more each.
  CHECK(reranked == 3 * 4 * 2);
  CHECK(measurer.measured == 160 + reranked);

  // The latency curve only falls once every task has a program; at the end it is the weighted
  // sum of the final bests.
  REQUIRE(r.curve.size() == 10);
  for (size_t i = 3; i < r.curve.size(); ++i) CHECK(r.curve[i].latency <= r.curve[i - 1].latency);
  double latency = 0;
  for (size_t k = 0; k < tasks.size(); ++k) latency += tasks[k].weight * r.tasks[k].best_cost;
  CHECK(r.latency == doctest::Approx(latency));
  CHECK(r.latency <= r.curve.back().latency * (1 + 1e-9));

  // Rounds of a task resumed from the log: none of its programs was measured twice, except the
  // final re-measurements.
  const auto records = search::read_records(log.path);
  CHECK(records.size() == static_cast<size_t>(160 + reranked));
  for (size_t k = 0; k < tasks.size(); ++k) {
    std::map<std::string, int> times;
    for (const auto& rec : records)
      if (rec.workload_key == tasks[k].task.workload_key()) ++times[sched::to_record(rec.steps)];
    int programs = 0, again = 0;
    for (const auto& [key, n] : times) {
      ++programs;
      again += n - 1;
    }
    CHECK(programs == r.tasks[k].trials);
    CHECK(again == r.tasks[k].reranked);
    // The best by the log's rule is the scheduler's best.
    const auto best = search::best_record(records, tasks[k].task.workload_key(),
                                          tasks[k].task.target.to_string());
    REQUIRE(best.has_value());
    CHECK(sched::to_record(best->steps) == sched::to_record(r.tasks[k].best->steps()));
  }
  CHECK(sink.str().find("[loom] tasks: done (trials)") != std::string::npos);
}

TEST_CASE("tune_with: keep_samples returns the model's data, labelled against the task's best") {
  const auto mm = loom_test::matmul(32, 32, 32);
  loom_test::TempLog log("tuner_samples");
  loom_test::SyntheticMeasurer measurer;
  TuneOptions o;
  o.trials = 32;
  o.measures_per_round = 16;
  o.records = log.path;
  o.keep_samples = true;
  o.quiet = true;
  o.rerank_top = 0;
  o.gbdt.warmup_samples = 8;
  o.evolution.population = 128;
  o.evolution.generations = 1;
  const search::TuneReport first = search::tune_with(Task(mm.dag), o, measurer);
  REQUIRE(first.samples);
  CHECK(first.samples->features.size() == 32);
  CHECK(first.samples->labels.size() == 32);
  CHECK(*std::max_element(first.samples->labels.begin(), first.samples->labels.end()) ==
        doctest::Approx(1.0));
  for (double l : first.samples->labels) CHECK((l >= 0 && l <= 1));
  // Another task's run learns from these as well (and is no longer warming up on its own):
  // it runs, and its own samples stay its own.
  const auto other = loom_test::matmul(16, 48, 32);
  TuneOptions o2 = o;
  o2.shared_samples = first.samples;
  const search::TuneReport second = search::tune_with(Task(other.dag), o2, measurer);
  REQUIRE(second.samples);
  CHECK(second.samples->features.size() == 32);
  CHECK(second.best.has_value());
}

TEST_CASE("tune_tasks_with: a shared cost model, and the latency target stops the run") {
  const auto big = loom_test::matmul(64, 64, 64);
  const auto small = loom_test::matmul(16, 32, 24);
  std::vector<WeightedTask> tasks = {{Task(big.dag), 2, ""}, {Task(small.dag), 1, ""}};
  loom_test::SyntheticMeasurer measurer;
  TaskSchedulerOptions o;
  o.trials = 8 * 16;
  o.tune.measures_per_round = 16;
  o.tune.seed = 3;
  o.tune.gbdt.warmup_samples = 24;  // only the other task's samples warm a second-round model
  o.tune.evolution.population = 128;
  o.tune.evolution.generations = 1;
  o.tune.rerank_top = 0;
  std::ostringstream sink;
  o.log = &sink;
  loom_test::TempLog shared_log("task_scheduler_shared");
  o.tune.records = shared_log.path;
  REQUIRE(o.share_cost_model);
  const search::TaskSchedulerReport shared = search::tune_tasks_with(tasks, o, measurer);
  CHECK(shared.trials == 128);
  for (const auto& t : shared.tasks) CHECK(t.best.has_value());

  // A target the warm-up already meets: the run stops after the warm-up rounds.
  loom_test::TempLog target_log("task_scheduler_target");
  o.tune.records = target_log.path;
  o.latency_target_s = 1e9;
  const search::TaskSchedulerReport met = search::tune_tasks_with(tasks, o, measurer);
  CHECK(met.stop_reason == "latency target met");
  CHECK(met.allocation.size() == 2);
  CHECK(sink.str().find("[loom] tasks: done (latency target met)") != std::string::npos);
}

TEST_CASE("tune_tasks_with: bad options are refused with what to do") {
  const auto w = loom_test::matmul(16, 16, 16);
  loom_test::SyntheticMeasurer measurer;
  TaskSchedulerOptions o;
  o.tune.records = "";
  CHECK_THROWS_WITH_AS(search::tune_tasks_with({{Task(w.dag), 1, ""}}, o, measurer),
                       doctest::Contains("loom.search.E841"), loom::user_error);
  o.tune.records = "x.jsonl";
  CHECK_THROWS_WITH_AS(search::tune_tasks_with({}, o, measurer),
                       doctest::Contains("loom.search.E841"), loom::user_error);
  CHECK_THROWS_WITH_AS(search::tune_tasks_with({{Task(w.dag), 0, ""}}, o, measurer),
                       doctest::Contains("weight > 0"), loom::user_error);
  CHECK(measurer.measured == 0);
}

TEST_CASE("tune_tasks: two real tasks on the CPU; each task's logged best is correct") {
  const auto a = loom_test::matmul(24, 20, 16);
  const auto b = loom_test::matmul(16, 24, 32);
  std::vector<WeightedTask> tasks = {{Task(a.dag), 2, ""}, {Task(b.dag), 1, ""}};
  loom_test::TempLog log("task_scheduler_cpu");
  const TaskSchedulerOptions o = loom_test::quick_scheduler(log.path, 32);
  const search::TaskSchedulerReport r = tune_tasks(tasks, o);
  CHECK(r.trials == 32);
  REQUIRE(r.latency < search::kFailedCost);

  for (const auto* w : {&a, &b}) {
    const Task task(w->dag);
    const auto ref = loom_test::make_reference(*w, 3);
    std::vector<loom_test::tensor_data> ins = ref.inputs, outs = ref.outputs;
    for (auto& o : outs) std::fill(o.bytes.begin(), o.bytes.end(), 0);
    std::vector<BufferView> views;
    for (auto& i : ins) views.push_back(as_buffer_view(static_cast<float*>(i.data())));
    for (auto& o : outs) views.push_back(as_buffer_view(static_cast<float*>(o.data())));
    build_best(task, log.path).run(views);
    std::string msg;
    CHECK_MESSAGE(loom_test::compare_values<float>(outs[0], ref.outputs[0], 16, msg), msg);
  }
}
