// Evolutionary operators (loom/search/mutate.hpp): every mutation rule and the crossover, on
// programs sampled from the sketches of operator-library ops. Every result must be a complete
// program whose history rebuilds it and whose lowered loop nest computes what the DAG computes
// (loop-nest interpreter vs DAG interpreter, tests/support/random_schedule.hpp).
#include <doctest/doctest.h>

#include <loom/ops.hpp>
#include <loom/search/mutate.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/random_schedule.hpp"
#include "support/search_target.hpp"

using namespace loom;

namespace {

using loom_test::test_target;

loom_test::workload make(std::string name, std::vector<ir::Tensor> inputs,
                         std::vector<ir::Tensor> outputs, int64_t reduction_length) {
  return loom_test::make_workload(std::move(name), std::move(inputs), std::move(outputs),
                                  reduction_length);
}

loom_test::workload op_matmul_relu() {
  auto a = placeholder<float>("A", {64, 64});
  auto b = placeholder<float>("B", {64, 64});
  return make("matmul+relu 64x64x64", {a, b}, {ops::relu(ops::matmul(a, b))}, 64);
}

loom_test::workload op_conv2d() {
  auto x = placeholder<float>("X", {1, 3, 8, 8});
  auto w = placeholder<float>("W", {4, 3, 3, 3});
  auto bias = placeholder<float>("bias", {4});
  auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), bias, 1));
  return make("conv2d+bias+relu 3->4 8x8 pad 1", {x, w, bias}, {y}, 27);
}

loom_test::workload op_softmax() {
  auto x = placeholder<float>("X", {4, 40});
  return make("softmax 4x40", {x}, {ops::softmax(x)}, 40);
}

loom_test::workload op_batch_matmul() {
  auto a = placeholder<float>("A", {2, 12, 8});
  auto b = placeholder<float>("B", {2, 8, 16});
  return make("batch_matmul 2x12x16x8", {a, b}, {ops::batch_matmul(a, b)}, 8);
}

loom_test::workload op_depthwise() {
  auto x = placeholder<float>("X", {1, 4, 8, 6});
  auto w = placeholder<float>("W", {4, 1, 3, 3});
  return make("depthwise 4x8x6 pad 1", {x, w},
              {ops::depthwise_conv2d_nchw(x, w, {.padding = {1, 1}})}, 9);
}

std::vector<loom_test::workload> workloads() {
  return {op_matmul_relu(), op_conv2d(), op_softmax(), op_batch_matmul(), op_depthwise()};
}

// A task with the options it was made with (SketchContext refers to both).
struct Setup {
  loom_test::workload w;
  search::SearchOptions options;
  Task task;
  search::SketchContext ctx;
  std::vector<sched::State> sketches;
  Setup(loom_test::workload wl, search::SearchOptions o)
      : w(std::move(wl)),
        options(std::move(o)),
        task(w.dag, test_target()),
        ctx(task, options),
        sketches(search::generate_sketches(task, options)) {}
};

bool complete(const sched::State& s) {
  for (const sched::Step& step : s.steps())
    if (auto* sp = std::get_if<sched::SplitStep>(&step))
      for (auto& l : sp->lengths)
        if (!l) return false;
  return true;
}

// The split lengths of each stage's split steps, in history order.
std::map<std::string, std::vector<std::vector<std::optional<int64_t>>>> lengths_by_stage(
    const sched::State& s) {
  std::map<std::string, std::vector<std::vector<std::optional<int64_t>>>> out;
  for (const sched::Step& step : s.steps())
    if (auto* sp = std::get_if<sched::SplitStep>(&step)) out[sp->stage].push_back(sp->lengths);
  return out;
}

// Per-stage names of the loops with each annotation other than parallel.
std::map<std::string, std::set<std::string>> annotated_loops(const sched::State& s) {
  std::map<std::string, std::set<std::string>> out;
  for (const sched::Stage& st : s.stages())
    for (int id : st.leaves) {
      const sched::Iterator& it = st.iters[id];
      if (it.annotation != sched::Annotation::Serial &&
          it.annotation != sched::Annotation::Parallel)
        out[st.name].insert(it.name + ":" + sched::annotation_name(it.annotation));
    }
  return out;
}

// Every follow_split of `s` split its loop like its source step says: the first n_split - 1
// lengths of the source, then the product of the rest.
void check_follow_splits(const sched::State& s) {
  std::map<std::string, int> splits_seen;  // split-making steps per stage so far
  for (const sched::Step& step : s.steps()) {
    const bool makes_split = std::holds_alternative<sched::SplitStep>(step) ||
                             std::holds_alternative<sched::FollowSplitStep>(step) ||
                             std::holds_alternative<sched::FollowFusedSplitStep>(step);
    if (!makes_split) continue;
    const std::string& name = sched::step_stage(step);
    const int k = splits_seen[name]++;
    auto* fs = std::get_if<sched::FollowSplitStep>(&step);
    if (!fs) continue;
    const auto& src = std::get<sched::SplitStep>(s.steps()[fs->src_step]);
    std::vector<int64_t> want(fs->n_split);
    for (int j = 0; j < fs->n_split - 1; ++j) want[j] = *src.lengths[j];
    want.back() = 1;
    for (size_t j = fs->n_split - 1; j < src.lengths.size(); ++j) want.back() *= *src.lengths[j];
    const sched::Stage& st = s.stage(name);
    REQUIRE(k < static_cast<int>(st.splits.size()));
    const auto& children = st.splits[k].children;
    REQUIRE(children.size() == want.size() + 1);
    for (size_t j = 0; j < want.size(); ++j) CHECK(st.iters[children[j + 1]].extent == want[j]);
  }
}

// The parts of `s`'s history are what the search's rules make: a location part of compute_at and
// compute_root steps only, an annotation part with no location step (its splits cut long loops
// for vectors, annotate_vectorize).
void check_parts(const sched::State& s) {
  const sched::StepOrigins& o = s.origins();
  REQUIRE(o.known());
  REQUIRE(o.annotate_begin <= static_cast<int>(s.steps().size()));
  for (int i = 0; i < static_cast<int>(s.steps().size()); ++i) {
    const sched::Step& step = s.steps()[i];
    const bool location = std::holds_alternative<sched::ComputeAtStep>(step) ||
                          std::holds_alternative<sched::ComputeRootStep>(step);
    if (o.part_of(i) == sched::StepPart::Location) CHECK_MESSAGE(location, i);
    if (o.part_of(i) == sched::StepPart::Annotation) CHECK_MESSAGE(!location, i);
  }
}

struct rule_stats {
  int calls = 0, applied = 0, changed = 0, checked = 0;
};

// Applies `rule` `calls` times (to the programs, and to its own results) and checks the results:
// complete, rebuilt by their history, and (the first `max_runs` distinct ones) computing what
// the DAG computes. `extra` checks each (parent, child) pair.
// `must_apply(parent)` says when the rule may not return nothing.
template <class Extra, class MustApply>
rule_stats exercise(const Setup& su, const loom_test::reference& ref,
                    const std::vector<sched::State>& programs, const search::MutationRule& rule,
                    uint64_t seed, int calls, int max_runs, Extra&& extra, MustApply&& must_apply) {
  rule_stats st;
  std::mt19937_64 rng(seed);
  std::vector<sched::State> pool = programs;
  std::set<std::string> run;
  for (int c = 0; c < calls; ++c) {
    const sched::State parent = pool[c % pool.size()];
    ++st.calls;
    auto child = rule.apply(su.ctx, parent, rng);
    if (!child) {
      CHECK_MESSAGE(!must_apply(parent), rule.name << "\n" << parent.to_string());
      continue;
    }
    ++st.applied;
    const std::string text = child->to_string();
    st.changed += text != parent.to_string();
    REQUIRE(complete(*child));
    CHECK(sched::replay(su.w.dag, child->steps()).to_string() == text);
    check_follow_splits(*child);
    // Mutations edit values or the annotation part: where each part begins stays.
    CHECK(child->origins() == parent.origins());
    check_parts(*child);
    extra(parent, *child);
    if (static_cast<int>(run.size()) < max_runs && run.insert(text).second) {
      ++st.checked;
      auto r = loom_test::run_and_compare(su.w, ref, *child);
      CHECK_MESSAGE(r.ok, su.w.name << ", " << rule.name << ": " << r.message << "\n" << text);
    }
    if (c % 3 == 0) pool[c % pool.size()] = *child;  // mutate mutants too
  }
  MESSAGE(su.w.name << ": " << rule.name << " applied " << st.applied << "/" << st.calls
                    << ", changed " << st.changed << ", " << st.checked << " run");
  return st;
}

const search::MutationRule& rule_named(const std::string& name) {
  for (const auto& r : search::cpu_mutation_rules())
    if (r.name == name) return r;
  FAIL("no rule " << name);
  return search::cpu_mutation_rules()[0];
}

void no_extra(const sched::State&, const sched::State&) {}
bool may_not_apply(const sched::State&) { return false; }

// MutateTileSize applies to every program with a split of extent > 1 (the innermost lengths
// are at most max_innermost_split_factor in sampled programs).
bool has_split(const sched::State& s) {
  for (const sched::Step& step : s.steps())
    if (auto* sp = std::get_if<sched::SplitStep>(&step); sp && sp->extent > 1) return true;
  return false;
}

// MutateAutoUnroll applies to every program with a pragma step (there are other candidates).
bool has_pragma(const sched::State& s) {
  for (const sched::Step& step : s.steps())
    if (std::holds_alternative<sched::PragmaStep>(step)) return true;
  return false;
}

// MutateTileSize edits one split step and keeps the product of its levels (the extent).
void tile_size_extra(const search::SearchOptions& options, const sched::State& parent,
                     const sched::State& child) {
  REQUIRE(parent.steps().size() == child.steps().size());
  int edited = 0;
  for (size_t i = 0; i < child.steps().size(); ++i) {
    auto* a = std::get_if<sched::SplitStep>(&parent.steps()[i]);
    auto* b = std::get_if<sched::SplitStep>(&child.steps()[i]);
    if (!a) continue;
    REQUIRE(b != nullptr);
    if (a->lengths == b->lengths) continue;
    ++edited;
    int64_t pa = 1, pb = 1;
    for (auto& l : a->lengths) pa *= *l;
    for (auto& l : b->lengths) pb *= *l;
    if (a->extent % pa == 0) {  // a perfect tiling stays one, with the same product
      CHECK(b->extent % pb == 0);
      CHECK(a->extent / pa * pa == b->extent / pb * pb);
    }
    CHECK(*b->lengths.back() <= options.max_innermost_split_factor);
  }
  CHECK(edited == 1);
}

// MutateRegisterTile edits two perfect split steps of one stage: each keeps its product, and the
// product of their innermost lengths (the register tile's size) stays the same.
void register_tile_extra(const search::SearchOptions& options, const sched::State& parent,
                         const sched::State& child) {
  REQUIRE(parent.steps().size() == child.steps().size());
  std::vector<int> edited;
  for (size_t i = 0; i < child.steps().size(); ++i) {
    auto* a = std::get_if<sched::SplitStep>(&parent.steps()[i]);
    auto* b = std::get_if<sched::SplitStep>(&child.steps()[i]);
    if (!a) continue;
    REQUIRE(b != nullptr);
    if (a->lengths != b->lengths) edited.push_back(static_cast<int>(i));
  }
  REQUIRE(edited.size() == 2);
  int64_t inner_a = 1, inner_b = 1;
  for (int i : edited) {
    const auto& a = std::get<sched::SplitStep>(parent.steps()[i]);
    const auto& b = std::get<sched::SplitStep>(child.steps()[i]);
    CHECK(a.stage == b.stage);
    int64_t pa = 1, pb = 1;
    for (auto& l : a.lengths) pa *= *l;
    for (auto& l : b.lengths) pb *= *l;
    CHECK(a.extent % pa == 0);
    CHECK(b.extent % pb == 0);
    CHECK(*b.lengths.back() <= options.max_innermost_split_factor);
    inner_a *= *a.lengths.back();
    inner_b *= *b.lengths.back();
  }
  CHECK(sched::step_stage(parent.steps()[edited[0]]) ==
        sched::step_stage(parent.steps()[edited[1]]));
  CHECK(inner_a == inner_b);
}

}  // namespace

TEST_SUITE("search") {
  TEST_CASE("every mutation rule gives complete programs that compute what the DAG computes") {
    const search::SearchOptions options;
    std::map<std::string, rule_stats> total;
    uint64_t seed = 100;
    for (const auto& w : workloads()) {
      Setup su(w, options);
      const auto ref = loom_test::make_reference(su.w, 7);
      std::mt19937_64 rng(seed++);
      const auto programs = search::sample_programs(su.sketches, su.task, su.options, rng, 12);
      REQUIRE(programs.size() == 12);
      std::vector<search::MutationRule> rules = search::cpu_mutation_rules();
      rules.push_back(search::register_tile_mutation_rule());
      for (const auto& rule : rules) {
        rule_stats st;
        if (rule.name == "MutateTileSize")
          st = exercise(
              su, ref, programs, rule, seed++, 60, 10,
              [&](const sched::State& p, const sched::State& c) {
                tile_size_extra(su.options, p, c);
              },
              has_split);
        else if (rule.name == "MutateParallel")
          st = exercise(
              su, ref, programs, rule, seed++, 30, 6,
              [&](const sched::State& p, const sched::State& c) {
                // Renumbered: the vectorized and unrolled loops are the same loops.
                CHECK(annotated_loops(p) == annotated_loops(c));
              },
              may_not_apply);
        else if (rule.name == "MutateRegisterTile")
          st = exercise(
              su, ref, programs, rule, seed++, 30, 6,
              [&](const sched::State& p, const sched::State& c) {
                register_tile_extra(su.options, p, c);
              },
              may_not_apply);
        else if (rule.name == "MutateAutoUnroll")
          st = exercise(su, ref, programs, rule, seed++, 30, 6, no_extra, has_pragma);
        else
          st = exercise(su, ref, programs, rule, seed++, 30, 6, no_extra, may_not_apply);
        total[rule.name].calls += st.calls;
        total[rule.name].applied += st.applied;
        total[rule.name].changed += st.changed;
        total[rule.name].checked += st.checked;
      }
    }
    for (const auto& [name, st] : total) {
      CHECK_MESSAGE(st.applied > 0, name);
      // Every applied mutation changes the program (a different loop nest).
      CHECK_MESSAGE(st.changed == st.applied, name);
      CHECK_MESSAGE(st.checked > 0, name);
    }
  }

  TEST_CASE("MutateTileSize redraws one free length of a non-divisible split within bounds") {
    search::SearchOptions options;
    options.allow_non_divisible_tiles = true;
    options.non_divisible_probability = 1.0;
    Setup su(op_conv2d(), options);
    const auto ref = loom_test::make_reference(su.w, 3);
    std::mt19937_64 rng(21);
    const auto programs = search::sample_programs(su.sketches, su.task, su.options, rng, 8);
    REQUIRE(!programs.empty());
    int redrawn = 0;
    exercise(
        su, ref, programs, rule_named("MutateTileSize"), 22, 40, 8,
        [&](const sched::State& parent, const sched::State& child) {
          for (size_t i = 0; i < child.steps().size(); ++i) {
            auto* a = std::get_if<sched::SplitStep>(&parent.steps()[i]);
            auto* b = std::get_if<sched::SplitStep>(&child.steps()[i]);
            if (!a || a->lengths == b->lengths) continue;
            int64_t pa = 1;
            for (auto& l : a->lengths) pa *= *l;
            if (a->extent % pa == 0) continue;
            ++redrawn;
            const int n = static_cast<int>(b->lengths.size());
            int differing = 0;
            for (int j = 0; j < n; ++j) {
              if (*a->lengths[j] == *b->lengths[j]) continue;
              ++differing;
              int64_t rest = b->extent;
              for (int k = n - 1; k > j; --k) rest = (rest + *b->lengths[k] - 1) / *b->lengths[k];
              CHECK(*b->lengths[j] >= 1);
              CHECK(*b->lengths[j] <= rest);
              if (j == n - 1) CHECK(*b->lengths[j] <= options.max_innermost_split_factor);
            }
            CHECK(differing == 1);
          }
        },
        has_split);
    CHECK(redrawn > 0);
  }

  TEST_CASE("MutateTileSize takes perfect splits of prime extents off the perfect tilings") {
    // 17 and 19 are prime, so awkward: their perfect tilings put the whole extent in one
    // length. Sampling draws only perfect tilings here (probability 0); evolution must still be
    // able to reach the free lengths FillTileSize would draw for them.
    search::SearchOptions options;
    options.non_divisible_probability = 0.0;
    options.awkward_free_probability = 0.0;
    auto a = placeholder<float>("A", {17, 23});
    auto b = placeholder<float>("B", {23, 19});
    Setup su(make("matmul 17x19x23", {a, b}, {ops::matmul(a, b)}, 23), options);
    const auto ref = loom_test::make_reference(su.w, 5);
    std::mt19937_64 rng(31);
    const auto programs = search::sample_programs(su.sketches, su.task, su.options, rng, 8);
    REQUIRE(!programs.empty());
    for (const auto& p : programs)
      for (const auto& step : p.steps())
        if (auto* sp = std::get_if<sched::SplitStep>(&step)) {
          int64_t prod = 1;
          for (auto& l : sp->lengths) prod *= *l;
          REQUIRE(sp->extent % prod == 0);
        }
    int went_free = 0;
    exercise(
        su, ref, programs, rule_named("MutateTileSize"), 32, 60, 8,
        [&](const sched::State& parent, const sched::State& child) {
          for (size_t i = 0; i < child.steps().size(); ++i) {
            auto* pa = std::get_if<sched::SplitStep>(&parent.steps()[i]);
            auto* ch = std::get_if<sched::SplitStep>(&child.steps()[i]);
            if (!pa || pa->lengths == ch->lengths) continue;
            int64_t prod = 1;
            for (auto& l : ch->lengths) prod *= *l;
            if (ch->extent % prod != 0) {
              ++went_free;
              CHECK(search::awkward_extent(ch->extent, options.max_innermost_split_factor));
            }
          }
        },
        has_split);
    CHECK(went_free > 0);
  }

  TEST_CASE("MutateRegisterTile reshapes a register tile in one step, across two splits") {
    // From an 8x1 tile, 4x2 is two MutateTileSize steps away (through 4x1 or 8x2, both slower
    // on a CPU); the register-tile rule reaches it in one and keeps the tile's size.
    const search::SearchOptions options;
    Setup su(op_matmul_relu(), options);
    std::mt19937_64 rng(41);
    const auto programs = search::sample_programs(su.sketches, su.task, su.options, rng, 16);
    std::optional<sched::State> parent;
    int i_step = -1, j_step = -1;
    for (const auto& p : programs) {
      std::vector<int> tiled;  // the multi-level tiled stage's spatial splits (3 lengths)
      for (int k = 0; k < static_cast<int>(p.steps().size()); ++k) {
        auto* sp = std::get_if<sched::SplitStep>(&p.steps()[k]);
        if (sp && sp->lengths.size() == 3) tiled.push_back(k);
      }
      if (tiled.size() != 2 ||
          sched::step_stage(p.steps()[tiled[0]]) != sched::step_stage(p.steps()[tiled[1]]))
        continue;
      std::vector<sched::Step> steps = p.steps();
      std::get<sched::SplitStep>(steps[tiled[0]]).lengths = {2, 2, 8};
      std::get<sched::SplitStep>(steps[tiled[1]]).lengths = {2, 4, 1};
      parent = sched::replay(su.w.dag, steps);
      i_step = tiled[0];
      j_step = tiled[1];
      break;
    }
    REQUIRE(parent);
    auto inner = [](const sched::State& s, int step) {
      return *std::get<sched::SplitStep>(s.steps()[step]).lengths.back();
    };
    std::set<std::pair<int64_t, int64_t>> by_register_rule, by_tile_rule;
    for (int c = 0; c < 200; ++c) {
      if (auto child = search::mutate_register_tile(su.ctx, *parent, rng)) {
        CHECK(inner(*child, i_step) * inner(*child, j_step) == 8);
        by_register_rule.insert({inner(*child, i_step), inner(*child, j_step)});
      }
      if (auto child = search::mutate_tile_size(su.ctx, *parent, rng))
        by_tile_rule.insert({inner(*child, i_step), inner(*child, j_step)});
    }
    CHECK(by_register_rule.count({4, 2}) == 1);
    CHECK(by_register_rule.count({1, 8}) == 1);
    CHECK(by_register_rule.count({8, 1}) == 0);  // every child changes the tile's shape
    CHECK(by_tile_rule.count({4, 2}) == 0);
  }

  TEST_CASE("MutateComputeLocation moves only what ChangeComputeLocation placed") {
    const search::SearchOptions options;
    {
      // conv2d: the padding stage is placed by random annotation; the tiled stages by the sketch.
      Setup su(op_conv2d(), options);
      std::mt19937_64 rng(5);
      const auto programs = search::sample_programs(su.sketches, su.task, su.options, rng, 16);
      std::set<std::string> where;
      int applied = 0;
      for (int i = 0; i < 64; ++i) {
        const sched::State& p = programs[i % programs.size()];
        auto c = search::mutate_compute_location(su.ctx, p, rng);
        if (!c) continue;
        ++applied;
        for (const sched::Stage& st : c->stages()) {
          if (st.is_placeholder || !search::is_tiled(st)) continue;
          const sched::Stage& before = p.stage(st.name);
          CHECK(st.location == before.location);
          CHECK(st.attach_stage == before.attach_stage);
        }
        const sched::Stage& pad = c->stage("conv2d_nchw_pad");
        where.insert(pad.location == sched::ComputeLocation::Root
                         ? std::string("root")
                         : pad.attach_stage + "@" + std::to_string(pad.attach_iter));
      }
      CHECK(applied > 16);
      CHECK(where.size() >= 3);
      search::SearchOptions off = options;
      off.disable_change_compute_location = true;
      const search::SketchContext ctx_off(su.task, off);
      for (const auto& p : programs) CHECK(!search::mutate_compute_location(ctx_off, p, rng));
    }
    {
      // softmax with rows of 5 vectors: the memory-bound-reduction sketches place the sum and
      // its partial sums inside the row loop; no mutation moves them.
      Setup su(op_softmax(), options);
      std::mt19937_64 rng(6);
      int checked = 0;
      for (const auto& sketch : su.sketches) {
        if (sketch.stage("softmax_sum").location != sched::ComputeLocation::At) continue;
        for (int i = 0; i < 4; ++i) {
          const sched::State p = search::sample_program(sketch, su.task, su.options, rng);
          for (int k = 0; k < 4; ++k)
            if (auto c = search::mutate_compute_location(su.ctx, p, rng)) {
              CHECK(c->stage("softmax_sum").attach_stage == "softmax");
              CHECK(c->stage("softmax_sum.rf").attach_stage == "softmax_sum");
              ++checked;
            }
        }
      }
      CHECK(checked > 0);
    }
  }

  TEST_CASE("MutateParallel changes the number of fused parallel loops") {
    const search::SearchOptions options;
    Setup su(op_batch_matmul(), options);
    std::mt19937_64 rng(8);
    const auto programs = search::sample_programs(su.sketches, su.task, su.options, rng, 16);
    int applied = 0;
    auto fused_count = [](const sched::Stage& st) {
      const sched::Iterator& outer = st.leaf(0);
      return static_cast<int>(std::count(outer.name.begin(), outer.name.end(), '@')) + 1;
    };
    for (int i = 0; i < 48; ++i) {
      const sched::State& p = programs[i % programs.size()];
      auto c = search::mutate_parallel(su.ctx, p, rng);
      if (!c) continue;
      ++applied;
      int differing = 0;
      for (const sched::Stage& st : c->stages()) {
        if (st.is_placeholder || st.leaves.empty() ||
            st.leaf(0).annotation != sched::Annotation::Parallel)
          continue;
        const sched::Stage& before = p.stage(st.name);
        REQUIRE(before.leaf(0).annotation == sched::Annotation::Parallel);
        differing += fused_count(st) != fused_count(before);
      }
      CHECK(differing == 1);
    }
    CHECK(applied > 24);
  }

  TEST_CASE("mutate draws rules in proportion to their weights and retries the others") {
    Setup su(op_batch_matmul(), {});
    std::mt19937_64 rng(1);
    const sched::State p = search::sample_program(su.sketches[0], su.task, su.options, rng);
    std::vector<int> calls(4, 0);
    auto counting = [&](int k, bool applies) {
      return [&calls, k, applies](const search::SketchContext&, const sched::State& s,
                                  std::mt19937_64&) -> std::optional<sched::State> {
        ++calls[k];
        if (!applies) return std::nullopt;
        return s;
      };
    };
    const std::vector<search::MutationRule> rules = {{"a", 1.0, counting(0, true)},
                                                     {"b", 2.0, counting(1, true)},
                                                     {"c", 7.0, counting(2, true)},
                                                     {"never", 0.0, counting(3, true)}};
    const int draws = 20000;
    for (int i = 0; i < draws; ++i) REQUIRE(search::mutate(su.ctx, p, rules, rng));
    const double weights[] = {0.1, 0.2, 0.7};
    for (int k = 0; k < 3; ++k) {
      const double expected = draws * weights[k];
      const double sigma = std::sqrt(draws * weights[k] * (1 - weights[k]));
      CHECK_MESSAGE(std::abs(calls[k] - expected) < 4 * sigma, k << ": " << calls[k]);
    }
    CHECK(calls[3] == 0);

    // A rule that does not apply is retried with other draws, up to `attempts` draws.
    std::fill(calls.begin(), calls.end(), 0);
    const std::vector<search::MutationRule> half = {{"no", 1.0, counting(0, false)},
                                                    {"yes", 1.0, counting(1, true)}};
    for (int i = 0; i < 1000; ++i) search::mutate(su.ctx, p, half, rng, 8);
    CHECK(calls[1] >= 990);  // all but about 1000 / 2^8 calls end with "yes"
    CHECK(calls[0] > 800);
    std::fill(calls.begin(), calls.end(), 0);
    const std::vector<search::MutationRule> none = {{"no", 1.0, counting(0, false)}};
    CHECK(!search::mutate(su.ctx, p, none, rng, 5));
    CHECK(calls[0] == 5);

    // Ansor's table; loom's register-tile rule is opt-in.
    std::vector<std::pair<std::string, double>> table;
    for (const auto& r : search::cpu_mutation_rules()) table.emplace_back(r.name, r.weight);
    CHECK(table == std::vector<std::pair<std::string, double>>{{"MutateTileSize", 0.90},
                                                               {"MutateAutoUnroll", 0.04},
                                                               {"MutateComputeLocation", 0.05},
                                                               {"MutateParallel", 0.01}});
    CHECK(search::register_tile_mutation_rule().name == "MutateRegisterTile");
    CHECK(search::register_tile_mutation_rule().weight == 0.10);
  }

  TEST_CASE("crossover mixes per-stage tile sizes of two programs of one sketch") {
    const search::SearchOptions options;
    int children = 0, mixed = 0, run = 0, from_b = 0;
    uint64_t seed = 300;
    for (const auto& w : workloads()) {
      Setup su(w, options);
      const auto ref = loom_test::make_reference(su.w, 9);
      std::mt19937_64 rng(seed++);
      for (size_t k = 0; k < su.sketches.size(); ++k) {
        const sched::State& sketch = su.sketches[k];
        std::vector<sched::State> ps;
        for (int i = 0; i < 4; ++i)
          ps.push_back(search::sample_program(sketch, su.task, su.options, rng));
        // A parent whose parallel fuse differs: that stage must come from `a`.
        if (auto m = search::mutate_parallel(su.ctx, ps[1], rng)) ps.push_back(*m);
        for (size_t i = 0; i < ps.size(); ++i)
          for (size_t j = 0; j < ps.size(); ++j) {
            if (i == j) continue;
            auto c = search::crossover(su.ctx, ps[i], ps[j], rng);
            REQUIRE_MESSAGE(c.has_value(), su.w.name << " sketch " << k);
            ++children;
            REQUIRE(complete(*c));
            CHECK(sched::replay(su.w.dag, c->steps()).to_string() == c->to_string());
            check_follow_splits(*c);
            CHECK(c->origins() == ps[i].origins());
            const auto la = lengths_by_stage(ps[i]), lb = lengths_by_stage(ps[j]),
                       lc = lengths_by_stage(*c);
            bool took_a = false, took_b = false;
            for (const auto& [stage, lengths] : lc) {
              // b may lack a stage's split: annotation cuts some long loops for vectors only
              // sometimes (SearchOptions::long_loop_vectorize_probability).
              const auto in_b = lb.find(stage);
              const bool eq_a = la.at(stage) == lengths,
                         eq_b = in_b != lb.end() && in_b->second == lengths;
              CHECK_MESSAGE((eq_a || eq_b), stage);
              took_a = took_a || (eq_a && !eq_b);
              took_b = took_b || (eq_b && !eq_a);
            }
            mixed += took_a && took_b;
            from_b += took_b;
            // The loop structure is a's: same steps apart from lengths and pragma values.
            REQUIRE(c->steps().size() == ps[i].steps().size());
            for (size_t s = 0; s < c->steps().size(); ++s)
              CHECK(sched::step_tag(c->steps()[s]) == sched::step_tag(ps[i].steps()[s]));
            CHECK(annotated_loops(*c).size() == annotated_loops(ps[i]).size());
            if (run < 25 && (i + j + k) % 7 == 0) {
              ++run;
              auto r = loom_test::run_and_compare(su.w, ref, *c);
              CHECK_MESSAGE(r.ok, su.w.name << ": " << r.message << "\n" << c->to_string());
            }
          }
      }
      // Programs of different sketches do not cross.
      for (size_t k = 0; k + 1 < su.sketches.size(); ++k) {
        const auto a = search::sample_program(su.sketches[k], su.task, su.options, rng);
        for (size_t l = k + 1; l < su.sketches.size(); ++l) {
          const auto b = search::sample_program(su.sketches[l], su.task, su.options, rng);
          CHECK_MESSAGE(!search::crossover(su.ctx, a, b, rng),
                        su.w.name << " sketches " << k << " and " << l);
          CHECK(!search::crossover(su.ctx, b, a, rng));
        }
      }
    }
    MESSAGE("crossover: " << children << " children, " << from_b << " took a stage from b, "
                          << mixed << " mixed, " << run << " run");
    CHECK(from_b > children / 4);
    CHECK(mixed > 0);
    CHECK(run >= 20);
  }

  TEST_CASE("a parent whose parallel fuse differs gives that stage's structure to the child") {
    const search::SearchOptions options;
    Setup su(op_matmul_relu(), options);
    std::mt19937_64 rng(17);
    int checked = 0;
    for (int t = 0; t < 40 && checked < 10; ++t) {
      const auto& sketch = su.sketches[t % su.sketches.size()];
      const sched::State a = search::sample_program(sketch, su.task, su.options, rng);
      const sched::State b0 = search::sample_program(sketch, su.task, su.options, rng);
      auto b = search::mutate_parallel(su.ctx, b0, rng);
      if (!b) continue;
      auto c = search::crossover(su.ctx, a, *b, rng);
      REQUIRE(c.has_value());
      ++checked;
      for (const sched::Stage& st : c->stages()) {
        if (st.is_placeholder || st.location == sched::ComputeLocation::Inlined) continue;
        // The parallel loop of each stage is a's.
        CHECK(st.leaf(0).name == a.stage(st.name).leaf(0).name);
        CHECK(st.leaf(0).annotation == a.stage(st.name).leaf(0).annotation);
      }
    }
    CHECK(checked >= 5);
  }

  TEST_CASE("sketch transfer moves a program's tiles and annotation onto another sketch") {
    const search::SearchOptions options;
    int pairs = 0, transferred = 0, kept_all_annotation = 0, run = 0;
    uint64_t seed = 500;
    for (const auto& w : workloads()) {
      Setup su(w, options);
      const auto ref = loom_test::make_reference(su.w, 11);
      std::mt19937_64 rng(seed++);
      for (size_t k = 0; k < su.sketches.size(); ++k) {
        const auto program = search::sample_program(su.sketches[k], su.task, su.options, rng);
        CHECK_MESSAGE(!search::transfer_to_sketch(su.ctx, program, su.sketches[k]),
                      su.w.name << " sketch " << k << " onto itself");
        for (size_t l = 0; l < su.sketches.size(); ++l) {
          if (l == k) continue;
          ++pairs;
          auto t = search::transfer_to_sketch(su.ctx, program, su.sketches[l]);
          if (!t) continue;
          ++transferred;
          REQUIRE(complete(*t));
          CHECK(sched::replay(su.w.dag, t->steps()).to_string() == t->to_string());
          check_follow_splits(*t);
          // The target sketch's structure, with the program's lengths.
          const auto& target = su.sketches[l].steps();
          CHECK(t->origins().location_begin == static_cast<int>(target.size()));
          check_parts(*t);
          REQUIRE(t->steps().size() >= target.size());
          const auto from = lengths_by_stage(program);
          for (size_t s = 0; s < target.size(); ++s) {
            CHECK(sched::step_tag(t->steps()[s]) == sched::step_tag(target[s]));
            if (const auto* sp = std::get_if<sched::SplitStep>(&t->steps()[s])) {
              const auto& candidates = from.at(sp->stage);
              CHECK(std::find(candidates.begin(), candidates.end(), sp->lengths) !=
                    candidates.end());
            }
          }
          // Annotation of a stage both sketches have carries over unless a step of it does
          // not apply; count the programs where all of it did.
          const auto before = annotated_loops(program), after = annotated_loops(*t);
          std::set<std::string> stages;
          for (const sched::Stage& st : t->stages()) stages.insert(st.name);
          bool all = true;
          for (const auto& [stage, loops] : before)
            if (stages.count(stage)) all = all && after.count(stage) && after.at(stage) == loops;
          kept_all_annotation += all;
          if (run < 30) {
            ++run;
            auto r = loom_test::run_and_compare(su.w, ref, *t);
            CHECK_MESSAGE(r.ok, su.w.name << ": " << r.message << "\n" << t->to_string());
          }
        }
      }
    }
    MESSAGE("sketch transfer: " << transferred << " of " << pairs << " pairs, "
                                << kept_all_annotation << " kept all annotation, " << run
                                << " run");
    CHECK(transferred > pairs / 2);
    CHECK(kept_all_annotation > transferred / 2);
    CHECK(run >= 20);
  }

  TEST_CASE("sampled programs record where their parts begin; the inference agrees on them") {
    // The inference is what programs of logs written before records carried their origins
    // get; on the built-in CPU rules it must find what sampling recorded.
    const search::SearchOptions options;
    int programs = 0, with_location = 0;
    uint64_t seed = 900;
    for (const auto& w : workloads()) {
      Setup su(w, options);
      std::mt19937_64 rng(seed++);
      for (const sched::State& sketch : su.sketches)
        for (int i = 0; i < 12; ++i) {
          const sched::State p = search::sample_program(sketch, su.task, su.options, rng);
          ++programs;
          check_parts(p);
          CHECK(p.origins().location_begin == static_cast<int>(sketch.steps().size()));
          with_location += p.origins().annotate_begin > p.origins().location_begin;
          CHECK_MESSAGE(search::inferred_origins(su.ctx, p) == p.origins(), su.w.name
                                                                                << "\n"
                                                                                << p.to_string());
          // A replayed history knows nothing of its origins until told.
          sched::State replayed = sched::replay(su.w.dag, p.steps());
          CHECK(!replayed.origins().known());
          replayed.set_origins(p.origins());
          CHECK(replayed.origins() == p.origins());
        }
    }
    MESSAGE(programs << " programs, " << with_location << " with a compute-location part");
    CHECK(with_location > 0);
  }

  TEST_CASE("mutation uses the recorded origins, not the inference") {
    // conv2d's padding stage is placed by ChangeComputeLocation. Told that the location part is
    // empty (all of it the sketch's), MutateComputeLocation has nothing to move; the inference
    // would have found the padding's step.
    const search::SearchOptions options;
    Setup su(op_conv2d(), options);
    std::mt19937_64 rng(31);
    int checked = 0;
    for (int i = 0; i < 24; ++i) {
      sched::State p =
          search::sample_program(su.sketches[i % su.sketches.size()], su.task, su.options, rng);
      const sched::StepOrigins o = p.origins();
      if (o.annotate_begin == o.location_begin) continue;
      ++checked;
      p.set_origins({o.annotate_begin, o.annotate_begin});
      for (int k = 0; k < 4; ++k) CHECK(!search::mutate_compute_location(su.ctx, p, rng));
      p.set_origins({});
      CHECK(search::inferred_origins(su.ctx, p) == o);
    }
    CHECK(checked > 0);
  }

  TEST_CASE("origins out of range and custom rules of a later part are refused") {
    Setup su(op_matmul_relu(), {});
    std::mt19937_64 rng(3);
    sched::State p = search::sample_program(su.sketches[0], su.task, su.options, rng);
    const int n = static_cast<int>(p.steps().size());
    CHECK_THROWS_WITH_AS(p.set_origins({2, 1}), doctest::Contains("[loom.sched.E264]"), user_error);
    CHECK_THROWS_WITH_AS(p.set_origins({0, n + 1}), doctest::Contains("[loom.sched.E264]"),
                         user_error);
    search::InitRule late{"Late",
                          [](const search::SketchContext&, sched::State&, std::mt19937_64&) {},
                          sched::StepPart::Annotation};
    CHECK_THROWS_WITH_AS(
        search::try_sample_program(su.sketches[0], su.task, su.options, rng, {late}),
        doctest::Contains("[loom.search.E814]"), user_error);
  }

  TEST_CASE("the same seed gives the same mutations and children") {
    const search::SearchOptions options;
    Setup su(op_conv2d(), options);
    auto run = [&](uint64_t seed) {
      std::mt19937_64 rng(seed);
      const auto programs = search::sample_programs(su.sketches, su.task, su.options, rng, 8);
      std::vector<std::string> out;
      for (int i = 0; i < 40; ++i) {
        auto m = search::mutate(su.ctx, programs[i % programs.size()], search::cpu_mutation_rules(),
                                rng);
        out.push_back(m ? m->to_string() : "-");
        auto c = search::crossover(su.ctx, programs[i % programs.size()],
                                   programs[(i + 3) % programs.size()], rng);
        out.push_back(c ? c->to_string() : "-");
      }
      return out;
    };
    const auto first = run(77);
    CHECK(first == run(77));
    CHECK(first != run(78));
  }
}
