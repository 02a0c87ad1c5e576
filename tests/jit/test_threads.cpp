// Many threads at once through the calls an application makes from its own threads: tuned_kernel
// (its per-process cache, the log read, the fallbacks) and the kernels it returns (the parallel
// runtime's pool, taken by one caller at a time, the others running their loops inline), and a
// compiled network's run (its shared arena). Every output is checked against the DAG
// interpreter. Runs in the normal test leg and in the ThreadSanitizer leg of scripts/test.sh,
// which is what it is for: its checks catch a wrong kernel or a cache that hands out two, TSan
// the races that happen to compute the right thing.
#include <loom/network.hpp>
#include <loom/ops.hpp>
#include <loom/tune.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/random_schedule.hpp"
#include "support/temp_log.hpp"

using namespace loom;

namespace {

/// One computation the threads ask for, and how tuned_kernel should find its schedule.
struct Case {
  loom_test::workload w;
  ScheduleSource expected;
};

/// A record of `program` for `w`, as the tuner would have written it (the cost is made up).
search::TuningRecord record_of(const loom_test::workload& w, const sched::State& program) {
  search::MeasureResult m;
  m.costs = {1e-5};
  return search::make_tuning_record(Task(w.dag), program, m);
}

/// Runs `k` on the reference's inputs and fresh outputs; empty when they match the reference,
/// else what differs.
std::string run_and_compare(const Kernel& k, const loom_test::workload& w,
                            const loom_test::reference& ref) {
  std::vector<loom_test::tensor_data> ins = ref.inputs, outs = ref.outputs;
  for (auto& o : outs) std::fill(o.bytes.begin(), o.bytes.end(), 0xff);  // NaN until written
  std::vector<BufferView> views;
  for (auto& t : ins) views.push_back(as_buffer_view(static_cast<float*>(t.data())));
  for (auto& t : outs) views.push_back(as_buffer_view(static_cast<float*>(t.data())));
  k.run(views);
  std::string msg;
  if (!loom_test::compare_values<float>(outs[0], ref.outputs[0],
                                        static_cast<double>(w.reduction_length), msg))
    return w.name + ": " + msg;
  return {};
}

}  // namespace

TEST_SUITE("threads") {
  TEST_CASE("8 threads call tuned_kernel and run its kernels at once; every output is right") {
    loom_test::TempLog log("threads_tuned_kernel");
    // Recorded: a matmul and a matmul + bias + relu, each with a parallel, vectorized schedule.
    const loom_test::workload mm = loom_test::matmul(32, 48, 16);
    sched::State mm_program(mm.dag);
    mm_program.split("C", 0, {8});             // i.0 i.1 j k
    mm_program.split("C", 2, {8});             // i.0 i.1 j.0 j.1 k
    mm_program.reorder("C", {0, 1, 2, 4, 3});  // i.0 i.1 j.0 k j.1
    mm_program.annotate("C", 0, sched::Annotation::Parallel);
    mm_program.annotate("C", 4, sched::Annotation::Vectorized);
    const loom_test::workload mbr = loom_test::matmul_bias_relu(24, 16, 8);
    sched::State mbr_program(mbr.dag);
    mbr_program.split("D", 0, {4});
    mbr_program.annotate("D", 0, sched::Annotation::Parallel);
    search::append_records(log.path, {record_of(mm, mm_program), record_of(mbr, mbr_program)});

    const std::vector<Case> cases = {
        {mm, ScheduleSource::Recorded},
        {mbr, ScheduleSource::Recorded},
        // The recorded matmul's structure at other extents: its schedule, adapted.
        {loom_test::matmul(20, 36, 12), ScheduleSource::Transferred},
        // A computation the log has never seen: the pretrained model's pick (compile_from_model,
        // the slow path: it searches and builds on the compile threads).
        {loom_test::softmax(8, 40), ScheduleSource::Predicted},
    };
    for (const Case& c : cases)
      REQUIRE(kernel_from_records(Task(c.w.dag), log.path).second == c.expected);

    constexpr int kThreads = 8, kRounds = 6, kRuns = 20;
    // Each thread has inputs of its own (seeded by the thread) and the interpreter's outputs.
    std::vector<std::vector<loom_test::reference>> refs(kThreads);
    for (int t = 0; t < kThreads; ++t)
      for (size_t c = 0; c < cases.size(); ++c)
        refs[t].push_back(loom_test::make_reference(cases[c].w, 100 * t + static_cast<int>(c)));

    std::mutex mutex;
    std::vector<std::string> failures;
    std::vector<std::vector<std::string>> sources(cases.size());  // per case, per call
    std::atomic<int> runs{0};
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();  // every thread's first call races for the empty cache
        for (int r = 0; r < kRounds; ++r) {
          // Every thread starts with a different case, and each case comes back to each thread.
          const size_t c = static_cast<size_t>(t + r) % cases.size();
          const Task task(cases[c].w.dag);  // a Task of its own, the DAG shared
          std::string failure;
          try {
            const Kernel k = tuned_kernel(task, log.path);
            {
              std::lock_guard<std::mutex> lock(mutex);
              sources[c].push_back(k.source());
            }
            for (int i = 0; i < kRuns && failure.empty(); ++i, ++runs)
              failure = run_and_compare(k, cases[c].w, refs[t][c]);
          } catch (const std::exception& e) {
            failure = cases[c].w.name + ": " + e.what();
          }
          if (!failure.empty()) {
            std::lock_guard<std::mutex> lock(mutex);
            failures.push_back("thread " + std::to_string(t) + ", round " + std::to_string(r) +
                               ": " + failure);
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();

    for (const std::string& f : failures) FAIL_CHECK(f);
    CHECK(runs.load() == kThreads * kRounds * kRuns);
    // One kernel per computation and process: every call of a case got the same program.
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO(cases[c].w.name);
      REQUIRE(!sources[c].empty());
      for (const std::string& s : sources[c]) CHECK(s == sources[c].front());
    }
  }

  TEST_CASE("4 threads run one compiled network at once; every output is right") {
    // conv 3x3 + bias + relu -> max pool -> dense -> softmax, weights bound as constants.
    auto x = placeholder<float>("x", {1, 3, 8, 8});
    auto w = placeholder<float>("w", {4, 3, 3, 3});
    auto b = placeholder<float>("b", {4});
    auto wd = placeholder<float>("wd", {6, 64});
    auto c = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), b));
    auto p = ops::max_pool2d(c, {2, 2}, {2, 2});
    auto flat =
        compute("flatten", {1, 64}, [&](Var n, Var f) { return p(n, f / 16, (f / 4) % 4, f % 4); });
    auto y = ops::softmax(ops::dense(flat, wd));
    std::vector<net::Constant> constants;
    uint32_t seed = 1;
    for (const ir::Tensor& t : std::vector<ir::Tensor>{w, b, wd})
      constants.push_back(
          net::constant(t, loom_test::random_vector<float>(t.num_elements(), ++seed)));
    const auto network = std::make_shared<const net::Network>(std::vector<ir::Tensor>{x}, constants,
                                                              std::vector<ir::Tensor>{y});
    const CompiledNetwork compiled = compile(network);

    constexpr int kThreads = 4, kRuns = 25;
    // Each thread's input and the whole network's interpreter output for it.
    std::vector<std::vector<float>> inputs, expected;
    for (int t = 0; t < kThreads; ++t) {
      inputs.push_back(loom_test::random_vector<float>(3 * 8 * 8, 50 + t));
      std::vector<void*> ptrs = {inputs.back().data()};
      for (const net::Constant& k : network->constants())
        ptrs.push_back(const_cast<unsigned char*>(k.bytes->data()));
      expected.emplace_back(6);
      ptrs.push_back(expected.back().data());
      evaluate(network->dag(), ptrs);
    }

    std::atomic<int> wrong{0};
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<float> in = inputs[t], out(6);
        start.arrive_and_wait();
        for (int r = 0; r < kRuns; ++r) {
          std::fill(out.begin(), out.end(), NAN);
          compiled.run({BufferView(in.data(), {1, 3, 8, 8}), BufferView(out.data(), {1, 6})});
          for (size_t i = 0; i < out.size(); ++i)
            if (!(std::abs(out[i] - expected[t][i]) <= 1e-5f)) {
              ++wrong;
              break;
            }
        }
      });
    }
    for (std::thread& th : threads) th.join();
    CHECK(wrong.load() == 0);
  }
}
