// Schedules carried over to other shapes (ComputeDAG::structure_key, sched::replay_adapted,
// search::transferred_state): programs sampled at one shape, replayed on the same computation
// at other shapes (smaller than their tiles, prime, larger), compute what the DAG computes there.
#include <doctest/doctest.h>

#include <loom/ops.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/records.hpp>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "support/random_schedule.hpp"
#include "support/search_target.hpp"
#include "support/temp_log.hpp"

using namespace loom;

namespace {

using loom_test::test_target;

// A BERT-FFN-like dense layer: relu(X W + b), X M x K.
loom_test::workload dense(int64_t M, int64_t N, int64_t K) {
  auto x = placeholder<float>("X", {M, K});
  auto w = placeholder<float>("W", {K, N});
  auto b = placeholder<float>("b", {N});
  return loom_test::make_workload("dense", {x, w, b},
                                  {ops::relu(ops::bias_add(ops::matmul(x, w), b, 1))}, K);
}

loom_test::workload layer_norm(int64_t M, int64_t N) {
  auto x = placeholder<float>("X", {M, N});
  auto g = placeholder<float>("gamma", {N});
  auto b = placeholder<float>("beta", {N});
  return loom_test::make_workload("layer_norm", {x, g, b}, {ops::layer_norm(x, g, b)}, N);
}

struct family {
  std::string name;
  std::function<loom_test::workload(int64_t)> at;  ///< the workload at a size parameter
  int64_t tuned;                                   ///< the size its programs are sampled at
  std::vector<int64_t> others;                     ///< the sizes they are carried to
};

std::vector<family> families() {
  return {
      {"dense (M varies)", [](int64_t m) { return dense(m, 24, 20); }, 32, {1, 7, 8, 100}},
      {"matmul (all vary)",
       [](int64_t n) { return loom_test::matmul(n, n + 3, n - 2); },
       24,
       {5, 13, 41}},
      {"conv2d (image varies)",
       [](int64_t hw) { return loom_test::conv2d(3, hw, hw, 8, 3, 1, 1); },
       14,
       {5, 9, 28}},
      {"softmax (rows vary)", [](int64_t n) { return loom_test::softmax(6, n); }, 40, {3, 17, 97}},
      {"layer_norm (rows vary)", [](int64_t n) { return layer_norm(5, n); }, 48, {2, 31, 130}},
  };
}

search::MeasureResult ok(double cost) {
  search::MeasureResult m;
  m.costs = {cost};
  return m;
}

}  // namespace

TEST_SUITE("search") {
  TEST_CASE("adapted split lengths keep the inner lengths that fit and cut the rest") {
    using L = std::vector<std::optional<int64_t>>;
    CHECK(sched::adapted_split_lengths(64, L{4, 8}) == L{4, 8});
    CHECK(sched::adapted_split_lengths(1000, L{4, 8}) == L{4, 8});
    CHECK(sched::adapted_split_lengths(20, L{4, 8}) == L{2, 8});
    CHECK(sched::adapted_split_lengths(5, L{4, 8}) == L{1, 5});
    CHECK(sched::adapted_split_lengths(1, L{2, 4, 8}) == L{1, 1, 1});
    CHECK(sched::adapted_split_lengths(13, L{3, 4}) == L{3, 4});  // tails, as recorded
    // A perfect tiling of 128 carried to 100 and to 200 stays perfect, near the recorded lengths.
    CHECK(sched::adapted_split_lengths(100, L{4, 8}, 128) == L{5, 10});
    CHECK(sched::adapted_split_lengths(200, L{4, 8}, 128) == L{5, 8});
    CHECK(sched::adapted_split_lengths(97, L{4, 8}, 128) == L{4, 8});   // a prime: a tail
    CHECK(sched::adapted_split_lengths(256, L{4, 8}, 128) == L{4, 8});  // still divides
    CHECK(sched::adapted_split_lengths(100, L{3, 8}, 130) == L{3, 8});  // a tail was recorded
  }

  TEST_CASE("a computation has one structure key at every shape, and other computations others") {
    for (const family& f : families()) {
      const auto a = f.at(f.tuned);
      for (int64_t n : f.others) {
        const auto b = f.at(n);
        CHECK_MESSAGE(a.dag->structure_key() == b.dag->structure_key(), f.name << " at " << n);
        CHECK(a.dag->workload_key() != b.dag->workload_key());
        CHECK(a.dag->extents().size() == b.dag->extents().size());
      }
    }
    CHECK(loom_test::matmul(8, 8, 8).dag->structure_key() !=
          loom_test::matmul_bias_relu(8, 8, 8).dag->structure_key());
    CHECK(loom_test::softmax(4, 8).dag->structure_key() !=
          loom_test::matmul(4, 8, 8).dag->structure_key());
    CHECK(loom_test::matmul(8, 8, 8).dag->structure_key().rfind("st-", 0) == 0);
  }

  TEST_CASE("programs sampled at one shape, replayed adapted at others, compute the DAG there") {
    const search::SearchOptions options;
    int carried = 0, wrong = 0;
    uint64_t seed = 70;
    for (const family& f : families()) {
      const auto from = f.at(f.tuned);
      const Task task(from.dag, test_target());
      std::mt19937_64 rng(seed++);
      const auto programs =
          search::sample_programs(search::generate_sketches(task, options), task, options, rng, 10);
      REQUIRE(programs.size() >= 5);
      for (int64_t n : f.others) {
        const auto to = f.at(n);
        const auto ref = loom_test::make_reference(to, static_cast<uint32_t>(n));
        for (const sched::State& p : programs) {
          const sched::State q = sched::replay_adapted(to.dag, p.steps());
          CHECK(q.steps().size() == p.steps().size());
          ++carried;
          const auto r = loom_test::run_and_compare(to, ref, q);
          wrong += !r.ok;
          CHECK_MESSAGE(r.ok, f.name << " from " << f.tuned << " to " << n << ": " << r.message
                                     << "\n"
                                     << q.to_string());
        }
      }
    }
    MESSAGE(carried << " programs carried to other shapes, " << wrong << " wrong");
    CHECK(carried > 100);
  }

  TEST_CASE("transferred_state takes the best program of the nearest shape of the structure") {
    loom_test::TempLog temp("transfer_dense");
    const std::string& log = temp.path;
    const search::SearchOptions options;
    std::mt19937_64 rng(5);
    // Records at M = 16 and M = 128; the fastest program of each logged as such.
    std::vector<std::pair<int64_t, sched::State>> bests;
    for (int64_t m : {16, 128}) {
      const auto w = dense(m, 24, 20);
      const Task task(w.dag, test_target());
      const auto programs =
          search::sample_programs(search::generate_sketches(task, options), task, options, rng, 4);
      REQUIRE(programs.size() == 4);
      std::vector<search::TuningRecord> records;
      for (size_t i = 0; i < programs.size(); ++i)
        records.push_back(search::make_tuning_record(task, programs[i], ok(1e-3 * (4 - i))));
      CHECK(records[0].structure_key == w.dag->structure_key());
      CHECK(records[0].extents == w.dag->extents());
      search::append_records(log, records);
      bests.emplace_back(m, programs.back());
    }
    // The fields read back.
    const auto read = search::read_records(log);
    REQUIRE(read.size() == 8);
    CHECK(read[0].structure_key == dense(16, 24, 20).dag->structure_key());
    CHECK(read[0].extents == dense(16, 24, 20).dag->extents());

    for (const auto& [m, nearest] : {std::pair<int64_t, int64_t>{8, 16}, {20, 16}, {100, 128}}) {
      const auto w = dense(m, 24, 20);
      const Task task(w.dag, test_target());
      const auto t = search::transferred_state(task, log);
      REQUIRE_MESSAGE(t.has_value(), "M = " << m);
      CHECK(t->workload_key == dense(nearest, 24, 20).dag->workload_key());
      const sched::State& best = nearest == 16 ? bests[0].second : bests[1].second;
      CHECK(t->state.to_string() == sched::replay_adapted(w.dag, best.steps()).to_string());
      CHECK(t->state.origins() == best.origins());
      const auto ref = loom_test::make_reference(w, 3);
      const auto r = loom_test::run_and_compare(w, ref, t->state);
      CHECK_MESSAGE(r.ok, r.message);
    }
    // Another computation, or another target: nothing to carry.
    const auto other = loom_test::matmul(16, 24, 20);
    CHECK(!search::transferred_state(Task(other.dag, test_target()), log));
    CHECK(!search::transferred_state(Task(dense(8, 24, 20).dag, Target::cuda()), log));
  }

  TEST_CASE("a record's extents field is checked when read") {
    const auto w = dense(4, 8, 8);
    const Task task(w.dag, test_target());
    std::mt19937_64 rng(1);
    const auto p = search::sample_program(search::generate_sketches(task)[0], task, {}, rng);
    std::string line = search::to_json_line(search::make_tuning_record(task, p, ok(1e-3)));
    const size_t at = line.find("\"extents\":[");
    REQUIRE(at != std::string::npos);
    line.replace(at, std::string("\"extents\":[").size(), "\"extents\":[0,");
    CHECK_THROWS_WITH_AS(search::record_from_json_line(line),
                         doctest::Contains("[loom.search.E824] field 'extents'"), user_error);
  }
}
