// Sketch generation (loom/search/sketch.hpp): the number and shape of the sketches of common
// workloads, derived by hand from Ansor's CPU rules (ansor.md §1.4), each rule's condition on its
// own, user rules, and the errors.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>
#include <loom/search/sketch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

using namespace loom;
using search::RuleCondition;

namespace {

// A fixed target, so that nothing depends on the machine the tests run on.
Target test_target() {
  Target t = Target::host();
  t.num_cores = 4;
  t.vector_bits = 256;
  return t;
}

Task make_task(std::vector<ir::Tensor> inputs, std::vector<ir::Tensor> outputs) {
  return Task(std::make_shared<const ComputeDAG>(std::move(inputs), std::move(outputs)),
              test_target());
}

Task matmul_task(int64_t m = 64, int64_t n = 64, int64_t k = 64) {
  auto a = placeholder<float>("A", {m, k});
  auto b = placeholder<float>("B", {k, n});
  return make_task({a, b}, {ops::matmul(a, b, false, false, "C")});
}

Task matmul_relu_task() {
  auto a = placeholder<float>("A", {32, 16});
  auto b = placeholder<float>("B", {16, 24});
  return make_task({a, b}, {ops::relu(ops::matmul(a, b))});
}

Task conv_bias_relu_task() {
  auto x = placeholder<float>("X", {1, 3, 8, 8});
  auto w = placeholder<float>("W", {4, 3, 3, 3});
  auto bias = placeholder<float>("bias", {4});
  auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), bias, 1));
  return make_task({x, w, bias}, {y});
}

// The loop order of a stage as "i0.0 i1.0 ...".
std::string leaf_names(const sched::Stage& s) {
  std::string out;
  for (size_t p = 0; p < s.leaves.size(); ++p)
    out += (p ? " " : "") + s.leaf(static_cast<int>(p)).name;
  return out;
}

bool has_stage(const sched::State& s, const std::string& name) {
  return std::any_of(s.stages().begin(), s.stages().end(),
                     [&](const sched::Stage& st) { return st.name == name; });
}

int count_with_stage(const std::vector<sched::State>& sketches, const std::string& name) {
  return static_cast<int>(std::count_if(sketches.begin(), sketches.end(),
                                        [&](const sched::State& s) { return has_stage(s, name); }));
}

// Every split of every sketch leaves its lengths unset: filling them is annotation's job.
void check_lengths_unset(const std::vector<sched::State>& sketches) {
  for (auto& s : sketches)
    for (auto& step : s.steps())
      if (auto* sp = std::get_if<sched::SplitStep>(&step))
        for (auto& l : sp->lengths) CHECK_FALSE(l.has_value());
}

}  // namespace

TEST_SUITE("search") {
  TEST_CASE("matmul has three sketches: plain tiling and a cache-write stage fused at two levels") {
    // C needs multi-level tiling and has no consumer. AddCacheWrite applies (Apply: the state
    // also goes on uncached); the uncached state gets MultiLevelTiling (1 sketch). The cached
    // state works on C.local, whose consumer C matches it element-wise, so
    // MultiLevelTilingWithFusion fuses it into C at level 1 and at level 2 (2 sketches) and,
    // being a cache stage, skips the rest. 1 + 2 = 3.
    Task task = matmul_task();
    auto sketches = search::generate_sketches(task);
    REQUIRE(sketches.size() == 3);
    check_lengths_unset(sketches);
    CHECK(count_with_stage(sketches, "C.local") == 2);
    for (auto& s : sketches) {
      if (!has_stage(s, "C.local")) {
        // SSRSRS: S0 S1 R0 S2 R1 S3.
        CHECK(leaf_names(s.stage("C")) ==
              "i0.0 i1.0 i0.1 i1.1 k.0 i0.2 i1.2 k.1 i0.3 i1.3");
        continue;
      }
      const sched::Stage& local = s.stage("C.local");
      const sched::Stage& out = s.stage("C");
      CHECK(leaf_names(local) == "i0.0 i1.0 i0.1 i1.1 k.0 i0.2 i1.2 k.1 i0.3 i1.3");
      CHECK(local.location == sched::ComputeLocation::At);
      CHECK(local.attach_stage == "C");
      // Level 1: C is split in two per axis and C.local sits under the outer pair; level 2:
      // three per axis, under the middle pair.
      const std::string names = leaf_names(out);
      CHECK((names == "i0.0 i1.0 i0.1 i1.1" || names == "i0.0 i1.0 i0.1 i1.1 i0.2 i1.2"));
      const int expected_at = names.size() < 20 ? 1 : 3;
      CHECK(out.leaf_position(local.attach_iter) == expected_at);
    }
  }

  TEST_CASE("matmul + relu fuses the matmul into relu at two levels or tiles it alone") {
    // relu is strictly inlineable but the output, so it stays (SkipStage). The matmul has the
    // element-wise matched consumer relu: no cache write; MultiLevelTilingWithFusion (Apply,
    // no cache stage) gives 2 sketches and MultiLevelTiling still runs after it: 2 + 1 = 3.
    auto sketches = search::generate_sketches(matmul_relu_task());
    REQUIRE(sketches.size() == 3);
    CHECK(count_with_stage(sketches, "matmul.local") == 0);
    int fused = 0;
    for (auto& s : sketches) fused += s.stage("matmul").location == sched::ComputeLocation::At;
    CHECK(fused == 2);
  }

  TEST_CASE("conv2d + bias + relu inlines the bias and fuses the conv through it into relu") {
    // relu: output, SkipStage. bias_add: strictly inlineable, AlwaysInline (skip rest). conv:
    // its only consumer is now relu, reached through the inlined bias_add by element-wise links,
    // so fusion (2) + plain tiling (1) = 3, no cache write. W, pad (a branch: not strictly
    // inlineable, no reuse) and the inputs: SkipStage.
    Task task = conv_bias_relu_task();
    auto sketches = search::generate_sketches(task);
    REQUIRE(sketches.size() == 3);
    check_lengths_unset(sketches);
    for (auto& s : sketches) {
      CHECK(s.stage("bias_add").location == sched::ComputeLocation::Inlined);
      CHECK(s.stage("conv2d_nchw_pad").location == sched::ComputeLocation::Root);
      CHECK(search::is_tiled(s.stage("conv2d_nchw")));
    }
    int fused = 0;
    for (auto& s : sketches) {
      const sched::Stage& conv = s.stage("conv2d_nchw");
      if (conv.location != sched::ComputeLocation::At) continue;
      ++fused;
      CHECK(conv.attach_stage == "relu");
    }
    CHECK(fused == 2);
  }

  TEST_CASE("batch_matmul tiles all three spatial axes") {
    // Same derivation as matmul: 3 sketches; the batch axis is tiled like the others.
    auto a = placeholder<float>("A", {3, 8, 6});
    auto b = placeholder<float>("B", {3, 6, 5});
    auto sketches = search::generate_sketches(make_task({a, b}, {ops::batch_matmul(a, b)}));
    REQUIRE(sketches.size() == 3);
    for (auto& s : sketches)
      if (!has_stage(s, "batch_matmul.local"))
        CHECK(s.stage("batch_matmul").leaves.size() == 3 * 4 + 1 * 2);
  }

  TEST_CASE("softmax has a single sketch that leaves every stage untouched") {
    // No stage needs multi-level tiling (each input misses at most one output axis and only
    // the row statistics reduce, without a second input). softmax: output. softmax_sum,
    // softmax_max: reductions, never inlined. softmax_exp calls exp: not strictly inlineable.
    // So every stage takes SkipStage: 1 sketch, the initial state. (Ansor would add rfactor
    // sketches for the row reductions; loom has no rfactor step yet.)
    auto x = placeholder<float>("X", {4, 10});
    auto sketches = search::generate_sketches(make_task({x}, {ops::softmax(x)}));
    REQUIRE(sketches.size() == 1);
    CHECK(sketches[0].steps().empty());
  }

  TEST_CASE("layer_norm's output needs multi-level tiling and gets three sketches") {
    // The output reads mean[i] and var[i] (missing the column axis) and gamma[j], beta[j]
    // (missing the row axis): at least two inputs miss an output axis, so Ansor's reuse test
    // says multi-level tiling (spatial levels only: it has no reduction). It has no consumer:
    // cache write (2 fused sketches) + plain tiling (1) = 3. The mean and var reductions are
    // skipped.
    auto x = placeholder<float>("X", {4, 10});
    auto g = placeholder<float>("gamma", {10});
    auto b = placeholder<float>("beta", {10});
    auto sketches = search::generate_sketches(make_task({x, g, b}, {ops::layer_norm(x, g, b)}));
    REQUIRE(sketches.size() == 3);
    CHECK(count_with_stage(sketches, "layer_norm.local") == 2);
    for (auto& s : sketches) {
      CHECK_FALSE(search::is_tiled(s.stage("layer_norm_mean")));
      CHECK_FALSE(search::is_tiled(s.stage("layer_norm_var")));
    }
  }

  TEST_CASE("depthwise conv gets the matmul-like three sketches and keeps its pad stage") {
    // The weights miss the two image axes and the op reduces: multi-level tiling, no
    // consumer: 1 plain + 2 cache-write sketches. The pad stage has a branch: SkipStage.
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    auto w = placeholder<float>("W", {4, 1, 3, 3});
    auto y = ops::depthwise_conv2d_nchw(x, w, {.padding = {1, 1}});
    auto sketches = search::generate_sketches(make_task({x, w}, {y}));
    REQUIRE(sketches.size() == 3);
    CHECK(count_with_stage(sketches, y.name() + ".local") == 2);
    for (auto& s : sketches) CHECK_FALSE(search::is_tiled(s.stage(y.name() + "_pad")));
  }

  TEST_CASE("a reduction with little spatial parallelism has one sketch without rfactor") {
    // R(i) = sum_k X(i, k) with 2 rows and 4096 columns: one input that misses no output axis,
    // so no multi-level tiling; SkipStage. Ansor would also emit its two rfactor sketches here
    // (has_more_reduction_parallel); loom has no rfactor step yet.
    auto x = placeholder<float>("X", {2, 4096});
    auto k = reduce_axis(4096, "k");
    auto r = compute("R", {2}, [&](Var i) { return sum(x(i, k), k); });
    Task task = make_task({x}, {r});
    CHECK(task.dag->has_more_reduction_parallel(task.dag->op_index(r), task.target.num_cores));
    auto sketches = search::generate_sketches(task);
    REQUIRE(sketches.size() == 1);
    CHECK(sketches[0].steps().empty());
  }

  TEST_CASE("a custom tiling structure changes the tile levels and the fusion levels") {
    // "SRS": 2 spatial levels, 1 reduce level. Fusion at level 2 needs structure[1] == 'S', so
    // only level 1 remains: 1 cache-write sketch + 1 plain = 2.
    search::SearchOptions options;
    options.cpu_tiling_structure = "SRS";
    auto sketches = search::generate_sketches(matmul_task(), options);
    REQUIRE(sketches.size() == 2);
    for (auto& s : sketches) {
      const std::string tiled = has_stage(s, "C.local") ? "C.local" : "C";
      CHECK(leaf_names(s.stage(tiled)) == "i0.0 i1.0 k i0.1 i1.1");
    }
    options.enable_cache_write = false;
    CHECK(search::generate_sketches(matmul_task(), options).size() == 1);
  }

  TEST_CASE("AlwaysInline applies to strictly inlineable non-output element-wise stages only") {
    Task task = conv_bias_relu_task();
    const search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    sched::State s(task.dag);
    auto rule = search::rule_always_inline();
    CHECK(rule.name == "AlwaysInline");
    CHECK(rule.condition(ctx, s, s.stage_index("bias_add")) == RuleCondition::ApplyAndSkipRest);
    CHECK(rule.condition(ctx, s, s.stage_index("relu")) == RuleCondition::Skip);  // output
    CHECK(rule.condition(ctx, s, s.stage_index("conv2d_nchw")) == RuleCondition::Skip);
    CHECK(rule.condition(ctx, s, s.stage_index("conv2d_nchw_pad")) == RuleCondition::Skip);
    CHECK(rule.condition(ctx, s, s.stage_index("X")) == RuleCondition::Skip);
    auto next = rule.apply(ctx, s, s.stage_index("bias_add"));
    REQUIRE(next.size() == 1);
    CHECK(next[0].second == s.stage_index("bias_add") - 1);
    CHECK(next[0].first.stage("bias_add").location == sched::ComputeLocation::Inlined);
    // Once inlined it does not apply again.
    CHECK(rule.condition(ctx, next[0].first, s.stage_index("bias_add")) == RuleCondition::Skip);
  }

  TEST_CASE("AddCacheWrite applies to tiled stages without an element-wise consumer, once") {
    Task task = matmul_task();
    search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    sched::State s(task.dag);
    auto rule = search::rule_add_cache_write();
    const int c = s.stage_index("C");
    REQUIRE(rule.condition(ctx, s, c) == RuleCondition::Apply);
    CHECK(rule.condition(ctx, s, s.stage_index("A")) == RuleCondition::Skip);
    auto next = rule.apply(ctx, s, c);
    REQUIRE(next.size() == 1);
    // The new stage takes C's index, which stays the working stage; C moves up by one.
    const sched::State& cached = next[0].first;
    CHECK(next[0].second == c);
    CHECK(cached.stages()[c].name == "C.local");
    CHECK(cached.stages()[c + 1].name == "C");
    CHECK(search::has_cache_write_stage(ctx, cached, c));
    CHECK(search::needs_multi_level_tiling(ctx, cached, c));
    CHECK_FALSE(search::needs_multi_level_tiling(ctx, cached, c + 1));  // the copy
    CHECK(search::single_elementwise_matched_consumer(ctx, cached, c) == c + 1);
    CHECK(rule.condition(ctx, cached, c) == RuleCondition::Skip);

    Task fused = matmul_relu_task();
    const search::SketchContext fctx(fused, options);
    sched::State fs(fused.dag);
    CHECK(rule.condition(fctx, fs, fs.stage_index("matmul")) == RuleCondition::Skip);

    options.enable_cache_write = false;
    CHECK(rule.condition(ctx, s, c) == RuleCondition::Skip);
  }

  TEST_CASE("MultiLevelTilingWithFusion needs an element-wise consumer and skips the rest "
            "after a cache write") {
    Task task = matmul_relu_task();
    const search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    sched::State s(task.dag);
    auto rule = search::rule_multi_level_tiling_with_fusion();
    const int mm = s.stage_index("matmul");
    CHECK(search::single_elementwise_matched_consumer(ctx, s, mm) == s.stage_index("relu"));
    REQUIRE(rule.condition(ctx, s, mm) == RuleCondition::Apply);
    auto next = rule.apply(ctx, s, mm);
    REQUIRE(next.size() == 2);
    for (auto& [st, i] : next) {
      CHECK(i == mm - 1);
      CHECK(st.stage("matmul").attach_stage == "relu");
    }
    CHECK(leaf_names(next[0].first.stage("relu")) == "i0.0 i1.0 i0.1 i1.1");
    CHECK(leaf_names(next[1].first.stage("relu")) == "i0.0 i1.0 i0.1 i1.1 i0.2 i1.2");

    Task plain = matmul_task();
    const search::SketchContext pctx(plain, options);
    sched::State ps(plain.dag);
    const int c = ps.stage_index("C");
    CHECK(rule.condition(pctx, ps, c) == RuleCondition::Skip);
    ps.cache_write("C", ir::MemoryScope::Local);
    CHECK(rule.condition(pctx, ps, c) == RuleCondition::ApplyAndSkipRest);
  }

  TEST_CASE("element-wise matching follows inlined stages to the real consumer") {
    Task task = conv_bias_relu_task();
    const search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    sched::State s(task.dag);
    const int conv = s.stage_index("conv2d_nchw");
    CHECK(search::single_elementwise_matched_consumer(ctx, s, conv) == s.stage_index("bias_add"));
    s.compute_inline("bias_add");
    CHECK(search::single_elementwise_matched_consumer(ctx, s, conv) == s.stage_index("relu"));
    // The pad stage is read by the conv through a window: not element-wise.
    CHECK(search::single_elementwise_matched_consumer(ctx, s, s.stage_index("conv2d_nchw_pad")) ==
          -1);
  }

  TEST_CASE("MultiLevelTiling applies to stages with data reuse and SkipStage to every stage") {
    Task task = matmul_relu_task();
    const search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    sched::State s(task.dag);
    auto mlt = search::rule_multi_level_tiling();
    auto skip = search::rule_skip_stage();
    CHECK(mlt.condition(ctx, s, s.stage_index("matmul")) == RuleCondition::ApplyAndSkipRest);
    CHECK(mlt.condition(ctx, s, s.stage_index("relu")) == RuleCondition::Skip);
    for (int i = 0; i < static_cast<int>(s.stages().size()); ++i) {
      CHECK(skip.condition(ctx, s, i) == RuleCondition::Apply);
      auto next = skip.apply(ctx, s, i);
      REQUIRE(next.size() == 1);
      CHECK(next[0].second == i - 1);
      CHECK(next[0].first.steps().empty());
    }
    auto tiled = mlt.apply(ctx, s, s.stage_index("matmul"));
    REQUIRE(tiled.size() == 1);
    CHECK(leaf_names(tiled[0].first.stage("matmul")) ==
          "i0.0 i1.0 i0.1 i1.1 k.0 i0.2 i1.2 k.1 i0.3 i1.3");
  }

  TEST_CASE("the built-in CPU rules come in Ansor's order") {
    std::vector<std::string> names;
    for (auto& r : search::cpu_sketch_rules()) names.push_back(r.name);
    CHECK(names == std::vector<std::string>{"AlwaysInline", "AddCacheWrite",
                                            "MultiLevelTilingWithFusion", "MultiLevelTiling",
                                            "SkipStage"});
  }

  TEST_CASE("custom rules run before the built-in ones") {
    // A user rule that keeps tiled stages untouched and skips the built-in rules for them.
    search::SketchRule no_tiling{
        "NoTiling",
        [](const search::SketchContext& ctx, const sched::State& s, int i) {
          return search::needs_multi_level_tiling(ctx, s, i) ? RuleCondition::ApplyAndSkipRest
                                                             : RuleCondition::Skip;
        },
        [](const search::SketchContext&, const sched::State& s, int i) {
          return std::vector<std::pair<sched::State, int>>{{s, i - 1}};
        }};
    auto sketches = search::generate_sketches(matmul_task(), {}, {no_tiling});
    REQUIRE(sketches.size() == 1);
    CHECK(sketches[0].steps().empty());

    // An Apply rule adds its sketch beside the built-in ones.
    no_tiling.condition = [](const search::SketchContext& ctx, const sched::State& s, int i) {
      return search::needs_multi_level_tiling(ctx, s, i) ? RuleCondition::Apply
                                                         : RuleCondition::Skip;
    };
    // It runs on C and again on C.local in the cache-write branch: 1 (C untiled) + 1 (C.local
    // untiled) + 2 (C.local fused) + 1 (C tiled) = 5.
    CHECK(search::generate_sketches(matmul_task(), {}, {no_tiling}).size() == 5);
  }

  TEST_CASE("sketch generation rejects bad structures, GPU targets and rules that never finish") {
    search::SearchOptions options;
    options.cpu_tiling_structure = "SSXS";
    CHECK_THROWS_WITH_AS(search::generate_sketches(matmul_task(), options),
                         doctest::Contains("[loom.search.E801]"), user_error);
    options.cpu_tiling_structure = "SSS";  // no reduce level
    CHECK_THROWS_WITH_AS(search::generate_sketches(matmul_task(), options),
                         doctest::Contains("[loom.search.E801]"), user_error);

    auto a = placeholder<float>("A", {8, 8});
    auto b = placeholder<float>("B", {8, 8});
    Task gpu(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                std::vector<ir::Tensor>{ops::matmul(a, b)}),
             Target::cuda());
    CHECK_THROWS_WITH_AS(search::generate_sketches(gpu), doctest::Contains("[loom.search.E802]"),
                         user_error);

    search::SketchRule stuck{
        "Stuck",
        [](const search::SketchContext&, const sched::State&, int) {
          return RuleCondition::ApplyAndSkipRest;
        },
        [](const search::SketchContext&, const sched::State& s, int i) {
          return std::vector<std::pair<sched::State, int>>{{s, i}};
        }};
    CHECK_THROWS_WITH_AS(search::generate_sketches(matmul_task(), {}, {stuck}),
                         doctest::Contains("[loom.search.E803]"), user_error);
  }
}
