// Random annotation (loom/search/annotate.hpp): each init rule on its own, determinism, and the
// property that every program sampled from the sketches of the operator library's ops computes
// what the DAG computes (lowered, run by the loop-nest interpreter, compared with the DAG
// interpreter through tests/support/random_schedule.hpp).
#include <doctest/doctest.h>

#include <loom/ops.hpp>
#include <loom/search/annotate.hpp>

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/op_workloads.hpp"
#include "support/random_schedule.hpp"
#include "support/search_target.hpp"

using namespace loom;
using namespace loom_test::op_workloads;

namespace {

using loom_test::test_target;

struct sample_stats {
  int sketches = 0, programs = 0, wrong = 0;
};

// Samples `count` distinct programs from the sketches of `w` and checks every one end to end.
sample_stats check_samples(const loom_test::workload& w, const search::SearchOptions& options,
                           uint64_t seed, int count) {
  sample_stats st;
  Task task(w.dag, test_target());
  auto sketches = search::generate_sketches(task, options);
  st.sketches = static_cast<int>(sketches.size());
  const auto ref = loom_test::make_reference(w, static_cast<uint32_t>(seed));
  std::mt19937_64 rng(seed);
  auto programs = search::sample_programs(sketches, task, options, rng, count);
  for (auto& p : programs) {
    ++st.programs;
    // A program is its history: replaying it must rebuild the same loop nest.
    CHECK(sched::replay(w.dag, p.steps()).to_string() == p.to_string());
    // No sampled program may take a shape that lowering is known to get wrong.
    CHECK_MESSAGE(loom_test::known_bug(p).empty(), loom_test::known_bug(p) << "\n"
                                                                           << p.to_string());
    auto r = loom_test::run_and_compare(w, ref, p);
    if (!r.ok) ++st.wrong;
    CHECK_MESSAGE(r.ok, w.name << ": " << r.message << "\n" << p.to_string());
  }
  MESSAGE(w.name << ": " << st.sketches << " sketches, " << st.programs << " programs checked, "
                 << st.wrong << " wrong"
                 << std::string(options.allow_non_divisible_tiles ? " (non-divisible tiles)" : ""));
  return st;
}

std::vector<loom_test::workload> property_workloads() {
  return {op_matmul(),       op_matmul_relu(),  op_conv2d(),       op_depthwise(),  op_softmax(),
          op_softmax_long(), op_softmax_wide(), op_batch_matmul(), op_layer_norm(), op_matvec()};
}

search::SearchOptions options_with_free_tiles() {
  search::SearchOptions o;
  o.allow_non_divisible_tiles = true;
  o.non_divisible_probability = 0.5;
  return o;
}

const sched::SplitStep* first_split(const sched::State& s) {
  for (auto& step : s.steps())
    if (auto* sp = std::get_if<sched::SplitStep>(&step)) return sp;
  return nullptr;
}

}  // namespace

TEST_SUITE("search") {
  TEST_CASE("perfect tilings are the ordered factorizations with a bounded innermost factor") {
    // Pairs (a, b) with a * b dividing 12: sum over m | 12 of the divisor count of m = 18.
    const auto& t12 = search::perfect_tilings(12, 2, 64);
    CHECK(t12.size() == 18);
    CHECK(std::set<std::vector<int64_t>>(t12.begin(), t12.end()).size() == t12.size());
    for (auto& t : t12) CHECK(12 % (t[0] * t[1]) == 0);
    // A prime has the trivial tilings and the prime in one place.
    CHECK(search::perfect_tilings(13, 3, 64).size() == 4);
    for (auto& t : search::perfect_tilings(64, 3, 4)) CHECK(t.back() <= 4);
    CHECK(search::perfect_tilings(1, 3, 64) == std::vector<std::vector<int64_t>>{{1, 1, 1}});
  }

  TEST_CASE("FillTileSize fills every split with divisors unless non-divisible tiles are on") {
    Task task(op_matmul().dag, test_target());
    search::SearchOptions options;
    options.non_divisible_for_awkward_extents = false;  // 17 and 19 would be awkward
    auto sketches = search::generate_sketches(task, options);
    std::mt19937_64 rng(7);
    for (int i = 0; i < 20; ++i)
      for (auto& sketch : sketches) {
        sched::State s = search::fill_tile_sizes(sketch, options, rng);
        REQUIRE(s.steps().size() == sketch.steps().size());
        for (auto& step : s.steps())
          if (auto* sp = std::get_if<sched::SplitStep>(&step)) {
            int64_t prod = 1;
            for (auto& l : sp->lengths) {
              REQUIRE(l.has_value());
              prod *= *l;
            }
            CHECK(sp->extent % prod == 0);
            CHECK(*sp->lengths.back() <= options.max_innermost_split_factor);
          }
      }

    const search::SearchOptions free = options_with_free_tiles();
    int non_dividing = 0;
    for (int i = 0; i < 40; ++i) {
      sched::State s = search::fill_tile_sizes(sketches[0], free, rng);
      for (auto& step : s.steps())
        if (auto* sp = std::get_if<sched::SplitStep>(&step)) {
          int64_t prod = 1;
          for (auto& l : sp->lengths) prod *= *l;
          non_dividing += sp->extent % prod != 0;
        }
    }
    CHECK(non_dividing > 0);
  }

  TEST_CASE("awkward extents (no multiple of 8 among their divisors) get free tiles by default") {
    const auto gemm = [](int64_t m, int64_t k, int64_t n) {
      auto a = placeholder<float>("A", {m, k});
      auto b = placeholder<float>("B", {k, n});
      return Task(ComputeDAG({a, b}, {ops::matmul(a, b)}), test_target());
    };
    const search::SearchOptions options;  // allow_non_divisible_tiles is off
    struct counts {
      std::set<int64_t> free_extents;  // extents that got a non-dividing tiling
      int innermost_powers_of_two = 0, free_splits = 0, awkward_splits = 0, wasteful = 0;
    };
    const auto sample = [&](const Task& task) {
      counts c;
      auto sketches = search::generate_sketches(task, options);
      std::mt19937_64 rng(11);
      for (int i = 0; i < 40; ++i)
        for (auto& sketch : sketches) {
          sched::State s = search::fill_tile_sizes(sketch, options, rng);
          for (auto& step : s.steps())
            if (auto* sp = std::get_if<sched::SplitStep>(&step)) {
              int64_t prod = 1;
              std::vector<int64_t> lengths;
              for (auto& l : sp->lengths) prod *= *l, lengths.push_back(*l);
              c.awkward_splits +=
                  search::awkward_extent(sp->extent, options.max_innermost_split_factor);
              if (sp->extent % prod == 0) continue;
              // Tiles covering 129 columns as 2 x 128 did twice the work: free lengths are
              // redrawn until they waste at most an eighth.
              c.wasteful += !search::low_waste_tiling(sp->extent, lengths);
              c.free_extents.insert(sp->extent);
              ++c.free_splits;
              const int64_t inner = *sp->lengths.back();
              c.innermost_powers_of_two += (inner & (inner - 1)) == 0;
              CHECK(inner <= options.max_innermost_split_factor);
            }
        }
      return c;
    };
    // M = 127 and K = 131 are prime, N = 129 = 3 x 43: all three are awkward.
    const counts odd = sample(gemm(127, 131, 129));
    CHECK(odd.free_extents == std::set<int64_t>{127, 129, 131});
    // About half of the free innermost lengths are drawn as powers of two (the rest uniformly).
    CHECK(odd.innermost_powers_of_two * 3 > odd.free_splits);
    CHECK(odd.wasteful == 0);
    // awkward_free_probability (0.75) of the awkward splits go free (a prime's perfect tilings
    // would put it whole in one length); a few free draws divide by chance.
    CHECK(odd.free_splits * 100 > odd.awkward_splits * 60);
    CHECK(odd.free_splits * 100 < odd.awkward_splits * 90);
    // 128, 96 and 24 have 8 among their divisors; 12 is too short to matter.
    CHECK(sample(gemm(128, 96, 24)).free_splits == 0);
    CHECK(sample(gemm(12, 12, 12)).free_splits == 0);
  }

  TEST_CASE("the same seed samples the same program") {
    Task task(op_conv2d().dag, test_target());
    const search::SearchOptions options;
    auto sketches = search::generate_sketches(task, options);
    for (auto& sketch : sketches) {
      std::mt19937_64 a(42), b(42);
      CHECK(search::sample_program(sketch, task, options, a).to_string() ==
            search::sample_program(sketch, task, options, b).to_string());
    }
  }

  TEST_CASE("Parallel fuses the outer spatial loops of root stages up to the granularity") {
    Task task(op_matmul().dag, test_target());
    search::SearchOptions options;
    options.parallel_granularity = 1;  // at most 4 iterations before the fusion stops
    auto sketches = search::generate_sketches(task, options);
    std::mt19937_64 rng(3);
    for (int i = 0; i < 10; ++i)
      for (auto& sketch : sketches) {
        sched::State s = search::fill_tile_sizes(sketch, options, rng);
        const search::SketchContext ctx(task, options);
        search::annotate_parallel(ctx, s);
        const sched::Stage& c = s.stage("matmul");
        const sched::Iterator& outer = c.leaf(0);
        // The product of all fused loops but the last stays within 4; a lone loop of extent 1
        // is left alone.
        if (outer.annotation == sched::Annotation::Parallel) {
          CHECK(outer.kind == sched::IterKind::Spatial);
          CHECK(outer.extent > 1);
        } else {
          CHECK(outer.extent == 1);
        }
        for (auto& st : s.stages())
          if (st.location != sched::ComputeLocation::Root)
            for (int id : st.leaves) CHECK(st.iters[id].annotation != sched::Annotation::Parallel);
      }
  }

  TEST_CASE("Unroll puts a candidate auto_unroll_max_step on every stage with a reduction") {
    Task task(op_softmax().dag, test_target());
    search::SearchOptions options;
    options.auto_unroll_candidates = {16, 64};
    auto sketches = search::generate_sketches(task, options);
    std::mt19937_64 rng(5);
    std::set<int> seen;
    for (int i = 0; i < 20; ++i) {
      sched::State s = search::sample_program(sketches[0], task, options, rng);
      for (auto& st : s.stages()) {
        if (st.is_placeholder) continue;
        if (search::has_reduce(st)) {
          CHECK((st.auto_unroll_max_step == 16 || st.auto_unroll_max_step == 64));
          seen.insert(st.auto_unroll_max_step);
        } else {
          CHECK(st.auto_unroll_max_step == 0);
        }
      }
    }
    CHECK(seen.size() == 2);
  }

  TEST_CASE("Vectorization vectorizes innermost spatial loops within the size limit") {
    Task task(op_batch_matmul().dag, test_target());
    search::SearchOptions options;
    options.max_vectorize_size = 4;
    options.wide_vectorize_probability = 0.0;  // longer tiles: the next test
    auto sketches = search::generate_sketches(task, options);
    std::mt19937_64 rng(11);
    int vectorized = 0;
    for (int i = 0; i < 30; ++i) {
      sched::State s = search::sample_program(sketches[i % sketches.size()], task, options, rng);
      for (auto& st : s.stages())
        for (size_t p = 0; p < st.leaves.size(); ++p) {
          const sched::Iterator& it = st.leaf(static_cast<int>(p));
          if (it.annotation != sched::Annotation::Vectorized) continue;
          ++vectorized;
          CHECK(p + 1 == st.leaves.size());  // innermost
          CHECK(it.kind == sched::IterKind::Spatial);
          CHECK(it.extent <= 4);
        }
    }
    CHECK(vectorized > 0);
  }

  TEST_CASE("Vectorization cuts the long innermost loop of an untiled stage into vectors") {
    // Softmax over rows of 64: an innermost loop longer than max_vectorize_size may be split
    // into a vectorized inner loop of 16 or 32 lanes, never with the probability at 0
    // (Ansor's rule: LLVM vectorizes such loops from scalar code). Annotation's only splits
    // come after the sketch's steps.
    Task task(op_softmax_wide().dag, test_target());
    const auto cut_loops = [&](double probability) {
      search::SearchOptions options;
      options.long_loop_vectorize_probability = probability;
      auto sketches = search::generate_sketches(task, options);
      std::mt19937_64 rng(5);
      int cut = 0;
      for (int i = 0; i < 60; ++i) {
        const sched::State& sketch = sketches[i % sketches.size()];
        const sched::State s = search::sample_program(sketch, task, options, rng);
        for (size_t k = sketch.steps().size(); k < s.steps().size(); ++k) {
          const auto* sp = std::get_if<sched::SplitStep>(&s.steps()[k]);
          if (!sp) continue;
          ++cut;
          REQUIRE(sp->lengths.size() == 1);
          const int64_t lanes = sp->lengths[0].value_or(0);
          // A 64-long row, or a 32-long part of it when a sketch split the row.
          CHECK((lanes == 16 || lanes == 32));
          CHECK(sp->extent % lanes == 0);
          CHECK(sp->extent > lanes);
          for (const sched::Stage& st : s.stages()) {
            if (st.name != sp->stage) continue;
            const sched::Iterator& inner = st.leaf(static_cast<int>(st.leaves.size()) - 1);
            CHECK(inner.annotation == sched::Annotation::Vectorized);
            CHECK(inner.extent == lanes);
          }
        }
      }
      return cut;
    };
    const int cut = cut_loops(0.75);
    MESSAGE(cut << " long loops cut for vectors in 60 programs");
    CHECK(cut >= 15);
    CHECK(cut_loops(0.0) == 0);
  }

  TEST_CASE("Vectorization vectorizes a tiled stage's longer innermost tile whole, or leaves it") {
    // The innermost loop of a tiled stage longer than max_vectorize_size (and at most 64) is
    // vectorized whole with wide_vectorize_probability, never with 0 (Ansor's rule), always
    // with 1; a longer one never.
    Task task(op_batch_matmul().dag, test_target());
    const auto count = [&](double probability) {
      search::SearchOptions options;
      options.max_vectorize_size = 4;
      options.wide_vectorize_probability = probability;
      auto sketches = search::generate_sketches(task, options);
      std::mt19937_64 rng(11);
      int wide = 0, left = 0;
      for (int i = 0; i < 40; ++i) {
        const sched::State s =
            search::sample_program(sketches[i % sketches.size()], task, options, rng);
        for (const sched::Stage& st : s.stages()) {
          if (st.is_placeholder || st.leaves.empty() || !search::is_tiled(st)) continue;
          const sched::Iterator& inner = st.leaf(static_cast<int>(st.leaves.size()) - 1);
          if (inner.kind != sched::IterKind::Spatial || inner.extent <= 4) continue;
          if (!s.attached_at(st.name, st.leaves.back()).empty()) continue;
          const bool vectorized = inner.annotation == sched::Annotation::Vectorized;
          if (inner.extent > 64) CHECK_FALSE(vectorized);
          (vectorized ? wide : left) += 1;
        }
      }
      return std::pair{wide, left};
    };
    const auto [none, all_left] = count(0.0);
    CHECK(none == 0);
    CHECK(all_left > 5);
    const auto [all, kept] = count(1.0);
    MESSAGE(all << " long innermost tiles vectorized whole, " << kept << " left");
    CHECK(all > 5);
    CHECK(kept == 0);
    const auto [some, rest] = count(0.5);
    CHECK(some > 0);
    CHECK(rest > 0);
  }

  TEST_CASE("ChangeComputeLocation moves an untiled producer among root and its consumer's loops") {
    Task task(op_conv2d().dag, test_target());
    const search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    auto sketches = search::generate_sketches(task, options);
    std::mt19937_64 rng(13);
    std::set<std::string> where;
    for (int i = 0; i < 60; ++i) {
      const sched::State& sketch = sketches[i % sketches.size()];
      sched::State s = search::fill_tile_sizes(sketch, options, rng);
      const int pad = s.stage_index("conv2d_nchw_pad");
      auto cands = search::compute_location_candidates(ctx, s, pad);
      for (auto& [t, p] : cands) {
        const sched::Stage& target = s.stages()[t];
        CHECK(target.leaf(p).extent != 1);
        CHECK(target.leaf(p).annotation == sched::Annotation::Serial);
      }
      search::change_compute_location(ctx, s, rng);
      const sched::Stage& ps = s.stage("conv2d_nchw_pad");
      where.insert(ps.location == sched::ComputeLocation::Root ? "root" : ps.attach_stage);
      // Tiled stages keep the location the sketch gave them.
      CHECK(s.stage("conv2d_nchw").location == sketch.stage("conv2d_nchw").location);
    }
    CHECK(where.count("root"));
    CHECK(where.size() >= 2);
  }

  TEST_CASE("ChangeComputeLocation keeps the locations the sketch chose") {
    // The memory-bound-reduction sketch of softmax computes softmax_sum (and its partial sums)
    // inside softmax's row loop; random annotation must not move them.
    Task task(op_softmax_long().dag, test_target());
    const search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    int checked = 0;
    std::mt19937_64 rng(5);
    for (auto& sketch : search::generate_sketches(task, options)) {
      if (sketch.stage("softmax_sum").location != sched::ComputeLocation::At) continue;
      for (int i = 0; i < 10; ++i) {
        sched::State s = search::fill_tile_sizes(sketch, options, rng);
        search::change_compute_location(ctx, s, rng);
        CHECK(s.stage("softmax_sum").attach_stage == "softmax");
        CHECK(s.stage("softmax_sum.rf").attach_stage == "softmax_sum");
        ++checked;
      }
    }
    CHECK(checked == 40);
  }

  TEST_CASE("FillTileSize draws the length of an rfactor split") {
    Task task(op_matvec().dag, test_target());
    search::SearchOptions options;
    options.non_divisible_for_awkward_extents = false;  // 70 would be awkward: divisors only here
    std::mt19937_64 rng(9);
    std::set<int64_t> inner;
    for (auto& sketch : search::generate_sketches(task, options)) {
      if (sketch.stages().size() < 4) continue;  // the sketch without matmul.rf
      for (int i = 0; i < 20; ++i) {
        sched::State s = search::fill_tile_sizes(sketch, options, rng);
        const sched::SplitStep* sp = first_split(s);
        REQUIRE(sp != nullptr);
        REQUIRE(sp->lengths[0].has_value());
        CHECK(70 % *sp->lengths[0] == 0);
        inner.insert(*sp->lengths[0]);
      }
    }
    CHECK(inner.size() >= 3);  // not the stand-in length every time
  }

  TEST_CASE("custom init rules run first and may choose lengths that FillTileSize keeps") {
    Task task(op_matmul().dag, test_target());
    const search::SearchOptions options;
    auto sketches = search::generate_sketches(task, options);
    // Every unset innermost length becomes 1; the other lengths are still drawn.
    std::vector<std::string> order;
    search::InitRule innermost_one{
        "InnermostOne", [&](const search::SketchContext&, sched::State& s, std::mt19937_64&) {
          order.push_back("InnermostOne");
          for (int i = 0; i < static_cast<int>(s.steps().size()); ++i)
            if (auto* sp = std::get_if<sched::SplitStep>(&s.steps()[i])) {
              auto lengths = sp->lengths;
              if (!lengths.back()) lengths.back() = 1;
              s.set_split_lengths(i, lengths);
            }
        }};
    std::mt19937_64 rng(3);
    auto programs = search::sample_programs(sketches, task, options, rng, 20, {innermost_one});
    REQUIRE(programs.size() == 20);
    CHECK(order.size() >= 20);
    for (auto& p : programs)
      for (auto& step : p.steps())
        if (auto* sp = std::get_if<sched::SplitStep>(&step)) CHECK(*sp->lengths.back() == 1);
    std::vector<std::string> names;
    for (auto& r : search::cpu_init_rules()) names.push_back(r.name);
    CHECK(names == std::vector<std::string>{"FillTileSize", "ChangeComputeLocation", "Parallel",
                                            "Unroll", "Vectorization"});
    sched::State s(task.dag);
    CHECK_THROWS_WITH_AS(s.set_split_lengths(0, {1}), doctest::Contains("[loom.sched.E245]"),
                         user_error);
  }

  TEST_CASE("define_split leaves the lengths the user does not fix to the search") {
    Task task(op_matmul().dag, test_target());
    sched::State sketch(task.dag);
    search::define_split(sketch, "matmul", 1, 3, {std::nullopt, 4});  // j -> j.0 j.1 j.2(4)
    search::define_split(sketch, "matmul", 0, 2);                     // i -> i.0 i.1
    CHECK_THROWS_WITH_AS(search::define_split(sketch, "matmul", 0, 1),
                         doctest::Contains("[loom.search.E812]"), user_error);
    CHECK_THROWS_WITH_AS(search::define_split(sketch, "matmul", 0, 3, {2}),
                         doctest::Contains("[loom.search.E812]"), user_error);
    const search::SearchOptions options;
    std::mt19937_64 rng(4);
    const auto ref = loom_test::make_reference(op_matmul(), 4);
    for (int i = 0; i < 10; ++i) {
      sched::State p = search::sample_program(sketch, task, options, rng);
      auto* sp = std::get_if<sched::SplitStep>(&p.steps()[0]);
      REQUIRE(sp != nullptr);
      CHECK(*sp->lengths[1] == 4);
      CHECK(sp->lengths[0].has_value());
      auto r = loom_test::run_and_compare(op_matmul(), ref, p);
      CHECK_MESSAGE(r.ok, r.message);
    }
  }

  TEST_CASE("sampling rejects a sketch whose splits cannot be filled") {
    Task task(op_matmul().dag, test_target());
    sched::State sketch(task.dag);
    // A split recorded without its extent: FillTileSize has nothing to factorize.
    sketch.apply(sched::SplitStep{"matmul", 0, -1, {std::nullopt}});
    search::SearchOptions options;
    options.max_sample_attempts = 3;
    std::mt19937_64 rng(1);
    CHECK_THROWS_WITH_AS(search::fill_tile_sizes(sketch, options, rng),
                         doctest::Contains("[loom.search.E811]"), user_error);
    CHECK_FALSE(search::try_sample_program(sketch, task, options, rng).has_value());
    CHECK_THROWS_WITH_AS(search::sample_program(sketch, task, options, rng),
                         doctest::Contains("[loom.search.E810]"), user_error);
    REQUIRE(first_split(sketch) != nullptr);
  }

  TEST_CASE("every sampled program of the operator library's ops computes the DAG's result") {
    const search::SearchOptions options;
    int total = 0, wrong = 0;
    uint64_t seed = 1000;
    for (auto& w : property_workloads()) {
      auto st = check_samples(w, options, ++seed, 40);
      CHECK(st.programs >= 20);
      total += st.programs;
      wrong += st.wrong;
    }
    MESSAGE("perfect tilings: " << total << " programs, " << wrong << " wrong");
    CHECK(wrong == 0);
  }

  TEST_CASE("sampled programs with non-divisible tiles compute the DAG's result too") {
    const search::SearchOptions options = options_with_free_tiles();
    int total = 0, wrong = 0;
    uint64_t seed = 2000;
    for (auto& w : property_workloads()) {
      auto st = check_samples(w, options, ++seed, 24);
      CHECK(st.programs >= 12);
      total += st.programs;
      wrong += st.wrong;
    }
    MESSAGE("non-divisible tilings: " << total << " programs, " << wrong << " wrong");
    CHECK(wrong == 0);
  }
}
