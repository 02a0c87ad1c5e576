// Tuning a small network across MPI ranks (loom/mpi.hpp). Every rank runs this program under
// mpirun (tests/mpi/run_mpi_tests.cmake launches it three times); the first argument is the
// phase, the second a directory for the logs:
//   tune    rank 0 searches, ranks 1 and 2 measure; rank 1 crashes on one program. Checked: the
//           budget was measured, the crash is a failed record and the job went on, every record
//           names the workers' CPU and thread count, each task's best is the log's best, and the
//           network compiled from the log computes what the interpreter does.
//   kill    the same tuning into another log; rank 0 kills itself (SIGKILL) after 9 results,
//           which ends the job, as a lost host or a Ctrl-C would.
//   resume  the kill phase's command again: it resumes from the log, and no program of the log
//           was measured twice.
// Failures print "FAILED: ..." on rank 0 and make its exit code 1.
#include <loom/mpi.hpp>
#include <loom/ops.hpp>
#include <loom/runtime/parallel.hpp>
#include <loom/sched/record.hpp>
#include <loom/search/records.hpp>

#include "support/quick_scheduler.hpp"
#include "support/random.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>

using namespace loom;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::cerr << "FAILED: " << what << "\n";
}

std::vector<float> random_values(int64_t n, uint32_t seed) {
  return loom_test::random_vector<float>(static_cast<size_t>(n), seed, -0.5, 0.5);
}

// x [1, 3, 8, 8] -> conv 3x3 (4) + bias + relu -> flatten -> dense (10) -> softmax: three tasks
// (the conv block, flatten + dense, softmax), two of them reading weights.
std::shared_ptr<const net::Network> tiny_cnn() {
  auto x = placeholder<float>("x", {1, 3, 8, 8});
  auto w1 = placeholder<float>("w1", {4, 3, 3, 3});
  auto b1 = placeholder<float>("b1", {4});
  auto wd = placeholder<float>("wd", {10, 256});
  auto c1 = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w1, {.padding = {1, 1}}), b1));
  auto flat =
      compute("flatten", {1, 256}, [&](Var n, Var f) { return c1(n, f / 64, (f / 8) % 8, f % 8); });
  auto y = ops::softmax(ops::dense(flat, wd));
  std::vector<net::Constant> constants;
  uint32_t seed = 1;
  for (const ir::Tensor& t : std::vector<ir::Tensor>{w1, b1, wd})
    constants.push_back(net::constant(t, random_values(t.num_elements(), ++seed)));
  return std::make_shared<const net::Network>(std::vector<ir::Tensor>{x}, constants,
                                              std::vector<ir::Tensor>{y});
}

// Rounds of 4 programs, one thread and one build at a time per worker (three ranks share two
// cores here), no final re-measurements: each program of the log is measured once.
TaskSchedulerOptions options(const std::string& records, int trials) {
  TaskSchedulerOptions o = loom_test::quick_scheduler(records, trials);
  o.tune.measures_per_round = 4;
  o.tune.evolution.population = 64;
  o.tune.rerank_top = 0;
  o.tune.measure.num_threads = 1;
  o.tune.measure.build_parallelism = 1;
  return o;
}

// How often each (workload, steps) appears in `records`.
std::map<std::string, int> times_measured(const std::vector<search::TuningRecord>& records) {
  std::map<std::string, int> times;
  for (const auto& r : records) ++times[r.workload_key + " " + sched::to_record(r.steps)];
  return times;
}

void check_tune(const std::string& dir) {
  const auto n = tiny_cnn();
  const std::string log = dir + "/tune.jsonl";
  const std::string crashed = dir + "/crashed";
  TaskSchedulerOptions o = options(log, 16);
  if (mpi::rank() == 0) {
    std::filesystem::remove(log);
    std::filesystem::remove(crashed);
  }
  // Rank 1's first program to reach its run crashes (SIGSEGV) in its measuring child; the
  // marker file makes it one crash for the whole job.
  if (mpi::rank() == 1)
    o.tune.measure.fault_injection_hook = [crashed](size_t, int phase) {
      if (phase != 1) return;
      const int fd = ::open(crashed.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
      if (fd < 0) return;
      ::close(fd);
      ::raise(SIGSEGV);
    };
  mpi::barrier();  // the log and the marker are gone before anyone measures
  const search::TaskSchedulerReport r = mpi::tune(*n, o);
  if (mpi::rank() != 0) {
    check(r.stop_reason == "worker", "a worker's report says it was a worker");
    return;
  }
  check(r.trials == 16, "16 programs measured, not " + std::to_string(r.trials));
  const auto records = search::read_records(log);
  check(records.size() == 16, "16 records, not " + std::to_string(records.size()));
  int crashes = 0;
  const std::string device = cpu_jit::LocalMeasurer().device();
  // The fields a measurer fills in are those a single process would write: the workers' CPU
  // and threads, and cold weights exactly for the tasks that read a weight.
  std::set<std::string> reads_weights;
  for (const net::NetworkTask& t : n->tasks())
    for (const ir::Tensor& in : t.dag->inputs())
      for (const net::Constant& k : n->constants())
        if (k.tensor.name() == in.name()) reads_weights.insert(t.dag->workload_key());
  check(reads_weights.size() == 2, "two of the three tasks read weights");
  for (const auto& rec : records) {
    if (rec.result.error == search::MeasureError::runtime) ++crashes;
    check(rec.device == device, "record measured on '" + rec.device + "', this host is " + device);
    check(rec.threads == 1, "record with " + std::to_string(rec.threads) + " threads, not 1");
    check(rec.cold_constants == (reads_weights.count(rec.workload_key) == 1),
          "cold_constants of a record of " + rec.workload_key);
  }
  check(crashes == 1, "one crashed program in the log, not " + std::to_string(crashes));
  for (const auto& [key, count] : times_measured(records))
    check(count == 1, "measured " + std::to_string(count) + " times: " + key);
  for (size_t k = 0; k < n->tasks().size(); ++k) {
    const Task task(n->tasks()[k].dag, Target::host());
    const auto best = search::best_record(records, task.workload_key(), task.target.to_string());
    check(best.has_value() && r.tasks[k].best.has_value(), "task " + std::to_string(k) + " tuned");
    if (best && r.tasks[k].best)
      check(sched::to_record(best->steps) == sched::to_record(r.tasks[k].best->steps()),
            "task " + std::to_string(k) + ": the report's best is the log's best");
  }
  // The tuned network against the interpreter.
  const CompiledNetwork c = compile(n, {.records = log});
  check(c.tuned_tasks().size() == n->tasks().size(), "every task built from the log");
  std::vector<float> x = random_values(3 * 8 * 8, 21), y(10, NAN), expected(10);
  c.run({BufferView(x.data(), {1, 3, 8, 8}), BufferView(y.data(), {1, 10})});
  std::vector<void*> ptrs = {x.data()};
  for (const net::Constant& k : n->constants())
    ptrs.push_back(const_cast<unsigned char*>(k.bytes->data()));
  ptrs.push_back(expected.data());
  evaluate(n->dag(), ptrs);
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i)
    worst = std::max(worst, double(std::abs(y[i] - expected[i])));
  check(worst < 1e-5, "the tuned network differs from the interpreter by " + std::to_string(worst));
}

// Forwards to the MPI measurer and ends the job, SIGKILL on the search rank, after `after`
// results have reached the tuner (and so the log).
class KillingMeasurer : public search::StreamingMeasurer {
 public:
  KillingMeasurer(search::Measurer& inner, int after) : inner_(inner), left_(after) {}
  std::vector<search::MeasureResult> measure_each(const Task& task,
                                                  const std::vector<sched::State>& states,
                                                  const ResultCallback& on_result) override {
    return inner_.measure_each(task, states, [&](size_t i, const search::MeasureResult& r) {
      if (on_result) on_result(i, r);
      if (--left_ == 0) ::raise(SIGKILL);
    });
  }
  std::string name() const override { return "killing"; }
  int threads() const override { return inner_.threads(); }
  std::string device() const override { return inner_.device(); }
  bool cold_constants(const Task& task) const override { return inner_.cold_constants(task); }

 private:
  search::Measurer& inner_;
  int left_;
};

void kill_midway(const std::string& dir) {
  const auto n = tiny_cnn();
  const loom::detail::NetworkTuning t =
      loom::detail::network_tuning(*n, options(dir + "/resume.jsonl", 16));
  const std::vector<WeightedTask>& tasks = t.tasks;
  const TaskSchedulerOptions& o = t.options;
  if (mpi::rank() == 0) std::filesystem::remove(o.tune.records);
  mpi::barrier();
  cpu_jit::LocalMeasurerOptions local;
  local.constant_inputs = o.tune.constant_inputs;
  if (mpi::rank() != 0) {
    std::vector<Task> own;
    for (const WeightedTask& t : tasks) own.push_back(t.task);
    mpi::serve_measurements(own, o.tune.measure, local);
    return;
  }
  mpi::MpiMeasurer measurer(o.tune.measure, local);
  KillingMeasurer killing(measurer, 9);
  search::tune_tasks_with(tasks, loom::detail::prepared_for_cpu(tasks, o), killing);
  check(false, "the search rank was still alive after its 9th result");
}

void check_resume(const std::string& dir) {
  const auto n = tiny_cnn();
  const TaskSchedulerOptions o = options(dir + "/resume.jsonl", 16);
  size_t before = 0;
  if (mpi::rank() == 0) {
    before = search::read_records(o.tune.records).size();
    check(before == 9, "the killed job left 9 records, not " + std::to_string(before));
  }
  const search::TaskSchedulerReport r = mpi::tune(*n, o);
  if (mpi::rank() != 0) return;
  const auto records = search::read_records(o.tune.records);
  check(records.size() == before + static_cast<size_t>(r.trials),
        "the log holds what was there and what the rerun measured");
  for (const auto& [key, count] : times_measured(records))
    check(count == 1, "measured " + std::to_string(count) + " times after resuming: " + key);
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment environment(argc, argv);
  const std::string phase = argc > 1 ? argv[1] : "";
  const std::string dir = argc > 2 ? argv[2] : std::filesystem::temp_directory_path().string();
  if (mpi::size() != 3) {
    std::cerr << "test_mpi_tune: run under mpirun -np 3 (" << mpi::size() << " ranks)\n";
    return 1;
  }
  runtime::set_num_threads(1);
  if (phase == "tune")
    check_tune(dir);
  else if (phase == "kill")
    kill_midway(dir);
  else if (phase == "resume")
    check_resume(dir);
  else {
    std::cerr << "test_mpi_tune: phase tune, kill or resume, not '" << phase << "'\n";
    return 1;
  }
  if (mpi::rank() == 0 && failures == 0) std::cout << "test_mpi_tune " << phase << ": passed\n";
  return failures == 0 ? 0 : 1;
}
