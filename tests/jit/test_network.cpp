// Networks on the CPU (loom/network.hpp, loom/net/network.hpp): a small CNN compiled and run
// against the whole network's interpreter, the memory plan's reuse, the errors of building and
// running one, and tuning its tasks together then compiling from the records.
#include <doctest/doctest.h>

#include <loom/network.hpp>
#include <loom/backend/llvm/measurer.hpp>
#include <loom/ops.hpp>
#include <loom/runtime/parallel.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/records.hpp>
#include <loom/search/sketch.hpp>

#include "support/quick_scheduler.hpp"
#include "support/temp_log.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

using namespace loom;

namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// x [1, 3, 12, 12] -> conv 3x3 (8) + bias + relu -> max pool 2 -> conv 3x3 (8) + bias + relu
// -> flatten -> dense (10) -> softmax, with random weights bound as constants.
std::shared_ptr<const net::Network> small_cnn() {
  auto x = placeholder<float>("x", {1, 3, 12, 12});
  auto w1 = placeholder<float>("w1", {8, 3, 3, 3});
  auto b1 = placeholder<float>("b1", {8});
  auto w2 = placeholder<float>("w2", {8, 8, 3, 3});
  auto b2 = placeholder<float>("b2", {8});
  auto wd = placeholder<float>("wd", {10, 288});
  auto c1 = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w1, {.padding = {1, 1}}), b1));
  auto p = ops::max_pool2d(c1, {2, 2}, {2, 2});
  auto c2 = ops::relu(ops::bias_add(ops::conv2d_nchw(p, w2, {.padding = {1, 1}}), b2));
  auto flat =
      compute("flatten", {1, 288}, [&](Var n, Var f) { return c2(n, f / 36, (f / 6) % 6, f % 6); });
  auto y = ops::softmax(ops::dense(flat, wd));
  std::vector<net::Constant> constants;
  uint32_t seed = 1;
  for (const ir::Tensor& t : std::vector<ir::Tensor>{w1, b1, w2, b2, wd})
    constants.push_back(net::constant(t, random_values(t.num_elements(), ++seed)));
  return std::make_shared<const net::Network>(std::vector<ir::Tensor>{x}, constants,
                                              std::vector<ir::Tensor>{y});
}

// The network's output by the DAG interpreter over the whole network.
std::vector<float> interpreted(const net::Network& n, std::vector<float>& x) {
  std::vector<void*> ptrs = {x.data()};
  for (const net::Constant& c : n.constants())
    ptrs.push_back(const_cast<unsigned char*>(c.bytes->data()));
  std::vector<float> y(static_cast<size_t>(n.outputs()[0].num_elements()));
  ptrs.push_back(y.data());
  evaluate(n.dag(), ptrs);
  return y;
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - b[i]);
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
  }
  return worst;
}

// Writes to `path` a record of the first sampled program of `task` that the CPU measurer would
// time with input `weight` packed; false when none of 64 samples is one.
bool record_packable_program(const Task& task, const std::string& weight, const std::string& path) {
  std::mt19937_64 rng(9);
  for (const sched::State& p :
       search::sample_programs(search::generate_sketches(task), task, {}, rng, 64)) {
    if (cpu_jit::LocalMeasurer::packed_inputs(p, {weight}).empty()) continue;
    search::MeasureResult measured;
    measured.costs = {1e-4};
    search::TuningRecord record = search::make_tuning_record(task, p, measured);
    record.threads = runtime::num_threads();
    search::append_records(path, {record});
    return true;
  }
  return false;
}

}  // namespace

TEST_SUITE("network") {
  TEST_CASE("a small CNN compiled with default schedules computes what the interpreter does") {
    const auto n = small_cnn();
    CHECK(n->groups().size() == 5);  // conv block 1, pool, conv block 2, flatten + dense, softmax
    const CompiledNetwork c = compile(n);
    CHECK(c.untuned_tasks().size() == n->tasks().size());
    std::vector<float> x = random_values(3 * 12 * 12, 11), y(10, NAN);
    c.run({BufferView(x.data(), {1, 3, 12, 12}), BufferView(y.data(), {1, 10})});
    CHECK(max_difference(y, interpreted(*n, x)) < 1e-5);
    // A second run on other data reuses the arena.
    std::vector<float> x2 = random_values(3 * 12 * 12, 12);
    c.run({BufferView(x2.data(), {1, 3, 12, 12}), BufferView(y.data(), {1, 10})});
    CHECK(max_difference(y, interpreted(*n, x2)) < 1e-5);
  }

  TEST_CASE("the memory plan reuses what is dead, and no two live intermediates overlap") {
    const auto n = small_cnn();
    const net::MemoryPlan& m = n->memory();
    const auto& groups = n->groups();
    CHECK(m.peak_bytes < m.total_bytes);
    // Live from the group that writes it to the last group that reads it.
    std::vector<int> last(groups.size(), -1);
    for (size_t g = 0; g < groups.size(); ++g)
      for (const ir::Tensor& in : groups[g].inputs)
        for (size_t w = 0; w < g; ++w)
          if (in.same_as(n->dag().ops()[groups[w].output()])) last[w] = static_cast<int>(g);
    auto bytes = [&](size_t g) {
      const ir::Tensor& t = n->dag().ops()[groups[g].output()];
      return t.num_elements() * t.dtype().bytes();
    };
    for (size_t a = 0; a < groups.size(); ++a)
      for (size_t b = a + 1; b < groups.size(); ++b) {
        if (m.offset[a] < 0 || m.offset[b] < 0 || last[a] < static_cast<int>(b)) continue;
        const bool apart =
            m.offset[a] + bytes(a) <= m.offset[b] || m.offset[b] + bytes(b) <= m.offset[a];
        CHECK_MESSAGE(apart, "groups " << a << " and " << b << " overlap while both live");
      }
  }

  TEST_CASE("bad networks and bad buffers are refused with what is wrong") {
    auto x = placeholder<float>("x", {2, 3});
    auto w = placeholder<float>("w", {4, 3});
    auto y = ops::dense(x, w);
    CHECK_THROWS_WITH_AS(net::constant(w, std::vector<float>(5)),
                         doctest::Contains("loom.net.E1002"), user_error);
    CHECK_THROWS_WITH_AS(net::Network({x}, {}, {}), doctest::Contains("loom.net.E1003"),
                         user_error);
    const net::Constant cw = net::constant(w, std::vector<float>(12, 0.5f));
    CHECK_THROWS_WITH_AS(net::Network({x, w}, {cw}, {y}), doctest::Contains("loom.net.E1004"),
                         user_error);
    // w neither an input nor a constant.
    CHECK_THROWS_AS(net::Network({x}, {}, {y}), user_error);
    const auto n = std::make_shared<const net::Network>(
        std::vector<ir::Tensor>{x}, std::vector<net::Constant>{cw}, std::vector<ir::Tensor>{y});
    const CompiledNetwork c = compile(n);
    std::vector<float> xs(6, 1.0f), ys(8);
    CHECK_THROWS_WITH_AS(c.run({BufferView(xs.data(), {2, 3})}),
                         doctest::Contains("loom.net.E1005"), user_error);
    CHECK_THROWS_WITH_AS(c.run({BufferView(xs.data(), {3, 2}), BufferView(ys.data(), {2, 4})}),
                         doctest::Contains("loom.net.E1006"), user_error);
    c.run({BufferView(xs.data(), {2, 3}), BufferView(ys.data(), {2, 4})});
    CHECK(std::all_of(ys.begin(), ys.end(), [](float v) { return std::abs(v - 1.5f) < 1e-6f; }));
  }

  TEST_CASE("a tuned program that reads its weight packed gets the weight packed at compile time") {
    // A dense layer whose record is a multi-level-tiled program that the CPU measurer would
    // time with the weight packed: compile packs the constant once, and the output stays right.
    auto x = placeholder<float>("x", {8, 64});
    auto w = placeholder<float>("w", {32, 64});
    auto y = ops::dense(x, w);
    const auto n = std::make_shared<const net::Network>(
        std::vector<ir::Tensor>{x},
        std::vector<net::Constant>{net::constant(w, random_values(32 * 64, 3))},
        std::vector<ir::Tensor>{y});
    REQUIRE(n->tasks().size() == 1);
    loom_test::TempLog log("network_packed");
    REQUIRE(record_packable_program(Task(n->tasks()[0].dag, Target::host()), "w", log.path));
    const CompiledNetwork c = compile(n, {.records = log.path});
    REQUIRE(c.packed_tasks().size() == 1);
    std::vector<float> xs = random_values(8 * 64, 4), ys(8 * 32, NAN);
    c.run({BufferView(xs.data(), {8, 64}), BufferView(ys.data(), {8, 32})});
    CHECK(max_difference(ys, interpreted(*n, xs)) < 1e-5);
  }

  TEST_CASE(
      "a workload that reads a weight in one group and an activation in another is not packed") {
    // dense(x, w) with w a weight, and dense(x, relu(v)) with the same shapes: one task.
    auto x = placeholder<float>("x", {8, 64});
    auto v = placeholder<float>("v", {32, 64});
    auto w = placeholder<float>("w", {32, 64});
    auto y1 = ops::dense(x, w, "dense_w");
    auto y2 = ops::dense(x, ops::relu(v), "dense_v");
    const auto n = std::make_shared<const net::Network>(
        std::vector<ir::Tensor>{x, v},
        std::vector<net::Constant>{net::constant(w, random_values(32 * 64, 5))},
        std::vector<ir::Tensor>{y1, y2});
    const net::NetworkTask* both = nullptr;
    for (const net::NetworkTask& t : n->tasks())
      if (t.weight() == 2) both = &t;
    REQUIRE(both != nullptr);
    loom_test::TempLog log("network_mixed");
    REQUIRE(record_packable_program(Task(both->dag, Target::host()), both->dag->inputs()[1].name(),
                                    log.path));
    const CompiledNetwork c = compile(n, {.records = log.path});
    CHECK(c.packed_tasks().empty());
    std::vector<float> xs = random_values(8 * 64, 6), vs = random_values(32 * 64, 7);
    std::vector<float> a(8 * 32, NAN), b(8 * 32, NAN), ea(8 * 32), eb(8 * 32);
    c.run({BufferView(xs.data(), {8, 64}), BufferView(vs.data(), {32, 64}),
           BufferView(a.data(), {8, 32}), BufferView(b.data(), {8, 32})});
    std::vector<void*> ptrs = {xs.data(), vs.data(),
                               const_cast<unsigned char*>(n->constants()[0].bytes->data()),
                               ea.data(), eb.data()};
    evaluate(n->dag(), ptrs);
    CHECK(max_difference(a, ea) < 1e-5);
    CHECK(max_difference(b, eb) < 1e-5);
  }

  TEST_CASE("tuning a network's tasks together, then compiling from the records") {
    const auto n = small_cnn();
    loom_test::TempLog log("network_tune");
    const TaskSchedulerOptions o =
        loom_test::quick_scheduler(log.path, 8 * static_cast<int>(n->tasks().size()));
    const search::TaskSchedulerReport r = tune(*n, o);
    // Every task gets a warm-up round; how the rest is shared depends on measured times.
    CHECK(r.trials >= static_cast<int>(n->tasks().size()));
    CHECK(r.trials <= o.trials);
    const CompiledNetwork c = compile(n, {.records = log.path});
    CHECK(c.tuned_tasks().size() == n->tasks().size());
    // Which tuned programs read a packed weight depends on what won; each is checked below.
    MESSAGE(c.packed_tasks().size()
            << " of " << n->tasks().size() << " tasks read a weight packed at compile time");
    std::vector<float> x = random_values(3 * 12 * 12, 21), y(10, NAN);
    c.run({BufferView(x.data(), {1, 3, 12, 12}), BufferView(y.data(), {1, 10})});
    CHECK(max_difference(y, interpreted(*n, x)) < 1e-5);
  }
}
