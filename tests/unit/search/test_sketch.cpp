// Sketch generation (loom/search/sketch.hpp): the number and shape of the sketches of common
// workloads, derived by hand from Ansor's CPU rules (ansor.md §1.4), each rule's condition on its
// own, user rules, and the errors.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>
#include "support/search_target.hpp"

using namespace loom;
using search::RuleCondition;

namespace {

using loom_test::test_target;

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
  TEST_CASE(
      "matmul has nine sketches: plain tiling or a fused cache-write stage, B packed two ways or "
      "not") {
    // C needs multi-level tiling and has no consumer; 64x64 outputs are more parallelism than
    // the 64-long reduction, so no rfactor. AddCacheWrite applies (Apply: the state also goes on
    // uncached); the uncached state gets MultiLevelTiling (1 sketch). The cached state works on
    // C.local, whose consumer C matches it element-wise, so MultiLevelTilingWithFusion fuses it
    // into C at level 1 and at level 2 (2 sketches) and, being a cache stage, skips the rest:
    // 1 + 2 = 3 states. Then the inputs: B[k, j] runs along C's innermost axis j and is reused
    // across i, so PackReusedInput adds two packed copies (Apply) beside SkipStage: x3. A[i, k]
    // does not follow j: SkipStage only. 3 x 3 = 9.
    Task task = matmul_task();
    auto sketches = search::generate_sketches(task);
    REQUIRE(sketches.size() == 9);
    check_lengths_unset(sketches);
    CHECK(count_with_stage(sketches, "C.local") == 6);
    CHECK(count_with_stage(sketches, "B.local") == 6);
    CHECK(count_with_stage(sketches, "A.local") == 0);
    int tile_packs = 0, panel_packs = 0;
    for (auto& s : sketches) {
      if (has_stage(s, "B.local")) {
        // Either the tile of one reduce step, copied at the first reduce level (k.0) of the
        // tiled stage, or the panel of C's outermost spatial tile (after i0.0 i1.0), copied
        // once for all the row tiles inside it.
        const std::string tiled = has_stage(s, "C.local") ? "C.local" : "C";
        const sched::Stage& packed = s.stage("B.local");
        if (packed.attach_stage == tiled &&
            s.stage(tiled).iters[packed.attach_iter].name == "k.0") {
          ++tile_packs;
        } else {
          CHECK(packed.attach_stage == "C");
          CHECK(s.stage("C").leaf_position(packed.attach_iter) == 1);
          ++panel_packs;
        }
      }
      if (!has_stage(s, "C.local")) {
        // SSRSRS: S0 S1 R0 S2 R1 S3.
        CHECK(leaf_names(s.stage("C")) == "i0.0 i1.0 i0.1 i1.1 k.0 i0.2 i1.2 k.1 i0.3 i1.3");
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
    CHECK(tile_packs == 3);
    CHECK(panel_packs == 3);
  }

  TEST_CASE("matmul + relu fuses the matmul into relu at two levels or tiles it alone") {
    // relu is strictly inlineable but the output, so it stays (SkipStage). The matmul has the
    // element-wise matched consumer relu: no cache write; MultiLevelTilingWithFusion (Apply,
    // no cache stage) gives 2 sketches and MultiLevelTiling still runs after it: 2 + 1 = 3.
    // B packed two ways or not (as for matmul): 3 x 3 = 9.
    auto sketches = search::generate_sketches(matmul_relu_task());
    REQUIRE(sketches.size() == 9);
    CHECK(count_with_stage(sketches, "matmul.local") == 0);
    CHECK(count_with_stage(sketches, "B.local") == 6);
    int fused = 0;
    for (auto& s : sketches) fused += s.stage("matmul").location == sched::ComputeLocation::At;
    CHECK(fused == 6);
  }

  TEST_CASE("conv2d + bias + relu inlines the bias and fuses the conv through it into relu") {
    // relu: output, SkipStage. bias_add: strictly inlineable, AlwaysInline (skip rest). conv:
    // its only consumer is now relu, reached through the inlined bias_add by element-wise links,
    // so fusion (2) + plain tiling (1) = 3, no cache write. W, pad (a branch: not strictly
    // inlineable, no reuse) and the inputs: SkipStage. No packing: the conv reads W without its
    // innermost axis x, and X only through the pad stage, which is not an input. 3 spatial
    // outputs x 64 per channel is more parallelism than the 27-long reduction: no rfactor.
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
    // Same derivation as matmul: 3 tilings x (B[b, k, j] packed two ways or not) = 9; the batch
    // axis is tiled like the others.
    auto a = placeholder<float>("A", {3, 8, 6});
    auto b = placeholder<float>("B", {3, 6, 5});
    auto sketches = search::generate_sketches(make_task({a, b}, {ops::batch_matmul(a, b)}));
    REQUIRE(sketches.size() == 9);
    CHECK(count_with_stage(sketches, "B.local") == 6);
    for (auto& s : sketches)
      if (!has_stage(s, "batch_matmul.local"))
        CHECK(s.stage("batch_matmul").leaves.size() == 3 * 4 + 1 * 2);
  }

  TEST_CASE("softmax: each row reduction is factored, fused into its row consumer or kept") {
    // No stage needs multi-level tiling (each input misses at most one output axis and only
    // the row statistics reduce, without a second input). softmax: output, SkipStage.
    // softmax_sum: a reduction of 10 > 4 cores: AddRfactor (2) + MemoryBoundReduction (its one
    // consumer, softmax, reads sum[i0] at its own row i0: computed at that row; 10 < 2 x 8
    // lanes, so without partial vector sums) + SkipStage = 4. softmax_exp calls exp: not
    // strictly inlineable, SkipStage. softmax_max: read only by softmax_exp at its row: the same
    // 4 ways. 4 x 4 = 16, one of them the initial state.
    auto x = placeholder<float>("X", {4, 10});
    auto sketches = search::generate_sketches(make_task({x}, {ops::softmax(x)}));
    REQUIRE(sketches.size() == 16);
    CHECK(std::count_if(sketches.begin(), sketches.end(),
                        [](auto& s) { return s.steps().empty(); }) == 1);
    CHECK(count_with_stage(sketches, "softmax_sum.rf") == 8);
    CHECK(count_with_stage(sketches, "softmax_max.rf") == 8);
    int fused = 0;
    for (auto& s : sketches)
      if (s.stage("softmax_sum").location == sched::ComputeLocation::At) {
        ++fused;
        CHECK(s.stage("softmax_sum").attach_stage == "softmax");
      }
    CHECK(fused == 4);
  }

  TEST_CASE("an output that another output reads stays at the root in every sketch") {
    // Found by the random programs (tests/jit/test_random_programs.cpp): MemoryBoundReduction
    // (and MultiLevelTilingWithFusion) computed such an output at its consumer's row, and
    // generate_sketches threw compute_at's E220. Both outputs of a softmax-like pair: the row
    // maxima and the rows shifted by them.
    auto x = placeholder<float>("X", {12, 35});
    auto k = reduce_axis(35, "k");
    auto m = compute("m", {12}, [&](Var i) { return max(x(i, k), k); });
    auto y = compute("y", {12, 35}, [&](Var i, Var j) { return x(i, j) - m(i); });
    const Task task = make_task({x}, {m, y});
    const auto sketches = search::generate_sketches(task);
    REQUIRE(!sketches.empty());
    for (const auto& s : sketches) CHECK(s.stage("m").location != sched::ComputeLocation::At);
    std::mt19937_64 rng(3);
    CHECK(!search::sample_programs(sketches, task, {}, rng, 4).empty());
  }

  TEST_CASE("softmax with long rows sums each row in a vector of partial sums") {
    // 64 >= 2 x 8 lanes: MemoryBoundReduction splits the row by 8 (a set length, not drawn),
    // factors the 8 lanes out as the innermost loop of "softmax_sum.rf", computes that inside
    // softmax_sum's row loop and softmax_sum inside softmax's row loop.
    auto x = placeholder<float>("X", {4, 64});
    auto sketches = search::generate_sketches(make_task({x}, {ops::softmax(x)}));
    REQUIRE(sketches.size() == 16);
    int seen = 0;
    for (auto& s : sketches) {
      if (s.stage("softmax_sum").location != sched::ComputeLocation::At) continue;
      ++seen;
      const sched::Stage& rf = s.stage("softmax_sum.rf");
      CHECK(rf.location == sched::ComputeLocation::At);
      CHECK(rf.attach_stage == "softmax_sum");
      CHECK(rf.leaf(static_cast<int>(rf.leaves.size()) - 1).extent == 8);
      CHECK(rf.leaf(static_cast<int>(rf.leaves.size()) - 1).kind == sched::IterKind::Spatial);
    }
    CHECK(seen == 4);
  }

  TEST_CASE("layer_norm's output needs multi-level tiling; its statistics may be factored") {
    // The output reads mean[i] and var[i] (missing the column axis) and gamma[j], beta[j]
    // (missing the row axis): at least two inputs miss an output axis, so Ansor's reuse test
    // says multi-level tiling (spatial levels only: it has no reduction). It has no consumer:
    // cache write (2 fused sketches) + plain tiling (1) = 3. gamma and beta are read without
    // a reduce level to pack at: no packing. var: reductions of 10 > 4 cores: AddRfactor (2) +
    // SkipStage = 3; no MemoryBoundReduction, as its consumer is tiled. mean: read by var (or
    // var.rf) and by the output, two root stages: the same 3. 3 x 3 x 3 = 27.
    auto x = placeholder<float>("X", {4, 10});
    auto g = placeholder<float>("gamma", {10});
    auto b = placeholder<float>("beta", {10});
    auto sketches = search::generate_sketches(make_task({x, g, b}, {ops::layer_norm(x, g, b)}));
    REQUIRE(sketches.size() == 27);
    CHECK(count_with_stage(sketches, "layer_norm.local") == 18);
    CHECK(count_with_stage(sketches, "layer_norm_mean.rf") == 18);
    CHECK(count_with_stage(sketches, "layer_norm_var.rf") == 18);
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

  TEST_CASE("a convolution with constant weights is also tiled with its output channel innermost") {
    // 16 output channels: two vectors at 256 bits. Constant W: each tiling sketch of the conv
    // comes twice, axis order and the output channel last in the innermost spatial level with
    // its innermost tile one vector (8 lanes) long; 3 sketches become 6.
    auto x = placeholder<float>("X", {1, 8, 7, 7});
    auto w = placeholder<float>("W", {16, 8, 3, 3});
    auto bias = placeholder<float>("bias", {16});
    auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), bias, 1));
    Task task = make_task({x, w, bias}, {y});
    REQUIRE(search::generate_sketches(task).size() == 3);
    const auto sketches = search::generate_sketches(task, {}, {}, {"W"});
    REQUIRE(sketches.size() == 6);
    int channel_last = 0;
    for (const sched::State& s : sketches) {
      const sched::Stage& conv = s.stage("conv2d_nchw");
      const auto tile = [&](int axis) { return conv.iters[axis].name + ".3"; };
      const int n = static_cast<int>(conv.leaves.size());
      const std::string last_two = conv.leaf(n - 2).name + " " + conv.leaf(n - 1).name;
      CHECK_MESSAGE((last_two == tile(2) + " " + tile(3) || last_two == tile(3) + " " + tile(1)),
                    leaf_names(conv));
      if (last_two != tile(3) + " " + tile(1)) continue;
      ++channel_last;
      for (const sched::Step& step : s.steps())
        if (auto* sp = std::get_if<sched::SplitStep>(&step); sp && sp->stage == "conv2d_nchw")
          for (size_t j = 0; j < sp->lengths.size(); ++j)
            CHECK(sp->lengths[j] == (sp->extent == 16 && j + 1 == sp->lengths.size()
                                         ? std::optional<int64_t>(8)
                                         : std::nullopt));
    }
    CHECK(channel_last == 3);
    // Random annotation keeps the vector and tiles the rest of the channels perfectly.
    std::mt19937_64 rng(7);
    int checked = 0;
    for (const sched::State& p : search::sample_programs(sketches, task, {}, rng, 40)) {
      const sched::Stage& conv = p.stage("conv2d_nchw");
      const sched::Iterator& inner = conv.leaf(static_cast<int>(conv.leaves.size()) - 1);
      if (inner.name != conv.iters[1].name + ".3") continue;
      CHECK(inner.extent == 8);
      ++checked;
    }
    CHECK(checked > 0);
  }

  TEST_CASE("the weight-vector axis is an axis only a constant input is read with") {
    search::SearchOptions options;
    auto axis_of = [&](const Task& task, const std::string& stage,
                       std::vector<std::string> constants) {
      const search::SketchContext ctx(task, options, std::move(constants));
      sched::State s(task.dag);
      return search::channel_innermost_axis(ctx, s, s.stage_index(stage));
    };
    auto x = placeholder<float>("X", {1, 8, 7, 7});
    auto w = placeholder<float>("W", {16, 8, 3, 3});
    Task conv = make_task({x, w}, {ops::conv2d_nchw(x, w, {.stride = {2, 2}})});
    CHECK(axis_of(conv, "conv2d_nchw", {"W"}) == 1);
    CHECK(axis_of(conv, "conv2d_nchw", {}) == -1);  // weights read per call
    // Fewer output channels than a vector has lanes.
    auto w4 = placeholder<float>("W", {4, 8, 3, 3});
    CHECK(axis_of(make_task({x, w4}, {ops::conv2d_nchw(x, w4)}), "conv2d_nchw", {"W"}) == -1);
    // A GEMM's constant B is already walked along the innermost axis.
    CHECK(axis_of(matmul_task(), "C", {"B"}) == -1);
    // A constant A instead: its rows innermost, C computed as the transpose of B^T A^T.
    CHECK(axis_of(matmul_task(), "C", {"A"}) == 0);
    // A depthwise convolution reads its data with the channel too.
    auto xd = placeholder<float>("X", {1, 16, 7, 7});
    auto wd = placeholder<float>("W", {16, 1, 3, 3});
    auto yd = ops::depthwise_conv2d_nchw(xd, wd, {.padding = {1, 1}});
    CHECK(axis_of(make_task({xd, wd}, {yd}), yd.name(), {"W"}) == -1);
  }

  TEST_CASE("a reduction with little spatial parallelism gets two rfactor sketches") {
    // R(i) = sum_k X(i, k) with 2 rows and 4096 columns: one input that misses no output axis,
    // so no multi-level tiling. AddRfactor: 4096 > 4 cores, two sketches (the outer or the
    // inner part of k factored out); it is the output, so no row consumer for
    // MemoryBoundReduction; SkipStage. 2 + 1 = 3.
    auto x = placeholder<float>("X", {2, 4096});
    auto k = reduce_axis(4096, "k");
    auto r = compute("R", {2}, [&](Var i) { return sum(x(i, k), k); });
    Task task = make_task({x}, {r});
    CHECK(task.dag->has_more_reduction_parallel(task.dag->op_index(r), task.target.num_cores));
    auto sketches = search::generate_sketches(task);
    REQUIRE(sketches.size() == 3);
    CHECK(count_with_stage(sketches, "R.rf") == 2);
    check_lengths_unset(sketches);
    for (auto& s : sketches) {
      if (!has_stage(s, "R.rf")) {
        CHECK(s.steps().empty());
        continue;
      }
      // R.rf[i, f] sums the other part of k; R sums R.rf over f. The inner variant puts f
      // innermost (after the remaining reduce loop), for vectorized partial sums.
      const sched::Stage& rf = s.stage("R.rf");
      CHECK(rf.op->axes.size() == 2);
      const bool inner = rf.leaf(2).kind == sched::IterKind::Spatial;
      CHECK(leaf_names(rf) == "i0 k.0 k.1");
      CHECK(rf.leaf(inner ? 1 : 2).kind == sched::IterKind::Reduce);
    }
  }

  TEST_CASE("a matrix-vector product gets rfactor sketches, a large matmul does not") {
    // 1x1 outputs over a 4096-long reduction: too little reuse for multi-level tiling, more
    // reduction than spatial parallelism: AddRfactor (2) + SkipStage = 3.
    auto a = placeholder<float>("A", {1, 4096});
    auto b = placeholder<float>("B", {4096, 1});
    auto sketches = search::generate_sketches(make_task({a, b}, {ops::matmul(a, b)}));
    CHECK(sketches.size() == 3);
    CHECK(count_with_stage(sketches, "matmul.rf") == 2);
    // Multi-level tiled with 4 outputs (< 16 x 4 cores and < 1024 reduce): rfactor applies
    // beside the tilings; with 64 x 64 outputs it does not.
    Task small = matmul_task(2, 2, 1024);
    const search::SearchOptions options;
    const search::SketchContext ctx(small, options);
    sched::State s(small.dag);
    CHECK(search::needs_multi_level_tiling(ctx, s, s.stage_index("C")));
    CHECK(search::needs_rfactor(ctx, s, s.stage_index("C")));
    Task big = matmul_task();
    const search::SketchContext bctx(big, options);
    sched::State bs(big.dag);
    CHECK_FALSE(search::needs_rfactor(bctx, bs, bs.stage_index("C")));
  }

  TEST_CASE("a custom tiling structure changes the tile levels and the fusion levels") {
    // "SRS": 2 spatial levels, 1 reduce level. Fusion at level 2 needs structure[1] == 'S', so
    // only level 1 remains: 1 cache-write sketch + 1 plain = 2, each with B packed two ways or
    // not: 6.
    search::SearchOptions options;
    options.cpu_tiling_structure = "SRS";
    auto sketches = search::generate_sketches(matmul_task(), options);
    REQUIRE(sketches.size() == 6);
    for (auto& s : sketches) {
      const std::string tiled = has_stage(s, "C.local") ? "C.local" : "C";
      CHECK(leaf_names(s.stage(tiled)) == "i0.0 i1.0 k i0.1 i1.1");
    }
    options.enable_cache_write = false;
    CHECK(search::generate_sketches(matmul_task(), options).size() == 3);
    options.enable_packing = false;
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

  TEST_CASE(
      "MultiLevelTilingWithFusion needs an element-wise consumer and skips the rest "
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

  TEST_CASE("AddRfactor applies to untouched reductions with more reduction parallelism") {
    auto x = placeholder<float>("X", {2, 4096});
    auto k = reduce_axis(4096, "k");
    auto r = compute("R", {2}, [&](Var i) { return sum(x(i, k), k); });
    Task task = make_task({x}, {r});
    search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    sched::State s(task.dag);
    auto rule = search::rule_add_rfactor();
    const int ri = s.stage_index("R");
    REQUIRE(rule.condition(ctx, s, ri) == RuleCondition::Apply);
    CHECK(rule.condition(ctx, s, s.stage_index("X")) == RuleCondition::Skip);
    auto next = rule.apply(ctx, s, ri);
    REQUIRE(next.size() == 2);
    for (auto& [st, i] : next) {
      CHECK(i == ri - 1);
      CHECK(st.stages()[ri].name == "R.rf");
      CHECK(st.stages()[ri + 1].name == "R");
      // The split's length is left for annotation, though rfactor needed a stand-in.
      REQUIRE(std::holds_alternative<sched::SplitStep>(st.steps()[0]));
      CHECK_FALSE(std::get<sched::SplitStep>(st.steps()[0]).lengths[0].has_value());
    }
    // Once split, the stage is no longer untouched: the rule does not apply twice.
    sched::State split = s;
    split.split("R", 1, {8});
    CHECK(rule.condition(ctx, split, ri) == RuleCondition::Skip);
    // Few rows of a short reduction: 4 <= 4 cores.
    auto y = placeholder<float>("Y", {2, 4});
    auto k2 = reduce_axis(4, "k");
    auto r2 = compute("R2", {2}, [&](Var i) { return sum(y(i, k2), k2); });
    Task short_task = make_task({y}, {r2});
    const search::SketchContext sctx(short_task, options);
    sched::State ss(short_task.dag);
    CHECK(rule.condition(sctx, ss, ss.stage_index("R2")) == RuleCondition::Skip);
    options.enable_rfactor = false;
    CHECK(rule.condition(ctx, s, ri) == RuleCondition::Skip);
  }

  TEST_CASE("MemoryBoundReduction needs a consumer that reads the reduction row by row") {
    auto x = placeholder<float>("X", {4, 64});
    Task task = make_task({x}, {ops::softmax(x)});
    search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    sched::State s(task.dag);
    auto rule = search::rule_memory_bound_reduction();
    CHECK(rule.condition(ctx, s, s.stage_index("softmax_sum")) == RuleCondition::Apply);
    // softmax_max is read by softmax_exp, which reads it at its row: applies too.
    CHECK(rule.condition(ctx, s, s.stage_index("softmax_max")) == RuleCondition::Apply);
    CHECK(rule.condition(ctx, s, s.stage_index("softmax_exp")) == RuleCondition::Skip);
    CHECK(rule.condition(ctx, s, s.stage_index("softmax")) == RuleCondition::Skip);
    // A reduction read across rows (a transposed use) is not row-consumed.
    auto kk = reduce_axis(64, "k");
    auto rs = compute("RS", {4}, [&](Var i) { return sum(x(i, kk), kk); });
    auto t = compute("T", {4, 4}, [&](Var i, Var j) { return rs(j) + x(i, j); });
    Task cross = make_task({x}, {t});
    const search::SketchContext cctx(cross, options);
    sched::State cs(cross.dag);
    CHECK(rule.condition(cctx, cs, cs.stage_index("RS")) == RuleCondition::Skip);
    options.enable_memory_bound_reduction = false;
    CHECK(rule.condition(ctx, s, s.stage_index("softmax_sum")) == RuleCondition::Skip);
  }

  TEST_CASE("PackReusedInput packs inputs read along the innermost axis of a tiled stage") {
    Task task = matmul_task();
    search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    sched::State s(task.dag);
    auto rule = search::rule_pack_reused_input();
    // Not before the reader is tiled.
    CHECK(rule.condition(ctx, s, s.stage_index("B")) == RuleCondition::Skip);
    search::multi_level_tile(s, s.stage_index("C"), "SSRSRS");
    CHECK(rule.condition(ctx, s, s.stage_index("B")) == RuleCondition::Apply);
    CHECK(rule.condition(ctx, s, s.stage_index("A")) == RuleCondition::Skip);
    CHECK(rule.condition(ctx, s, s.stage_index("C")) == RuleCondition::Skip);
    auto next = rule.apply(ctx, s, s.stage_index("B"));
    REQUIRE(next.size() == 2);
    CHECK(next[0].second == s.stage_index("B") - 1);
    CHECK(next[1].second == s.stage_index("B") - 1);
    const sched::Stage& packed = next[0].first.stage("B.local");
    CHECK(packed.attach_stage == "C");
    CHECK(next[0].first.stage("C").leaf_position(packed.attach_iter) == 4);  // k.0
    // The panel: all of k for one (i0.0, i1.0) tile, in front of the row tiles that reuse it.
    const sched::Stage& panel = next[1].first.stage("B.local");
    CHECK(panel.attach_stage == "C");
    CHECK(next[1].first.stage("C").leaf_position(panel.attach_iter) == 1);  // i1.0
    CHECK(next[1].first.stage("C").iters[panel.attach_iter].name == "i1.0");
    options.enable_packing = false;
    CHECK(rule.condition(ctx, s, s.stage_index("B")) == RuleCondition::Skip);
  }

  TEST_CASE("the built-in CPU rules come in Ansor's order") {
    std::vector<std::string> names;
    for (auto& r : search::cpu_sketch_rules()) names.push_back(r.name);
    // Ansor's CPU order, with loom's two rules after AddRfactor (they too must see the stage
    // before the tiling rules change it).
    CHECK(names == std::vector<std::string>{"AlwaysInline", "AddRfactor", "MemoryBoundReduction",
                                            "PackReusedInput", "AddCacheWrite",
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
    // untiled) + 2 (C.local fused) + 1 (C tiled) = 5; the last three have a tiled reader of B,
    // so each also comes with B packed per tile and per panel: 5 + 3 x 2 = 11.
    CHECK(search::generate_sketches(matmul_task(), {}, {no_tiling}).size() == 11);
  }

  TEST_CASE("sketch generation rejects bad structures and rules that never finish") {
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
    search::SearchOptions gpu_options;
    gpu_options.gpu_tiling_structure = "SSRSRS";  // no thread level
    CHECK_THROWS_WITH_AS(search::generate_sketches(gpu, gpu_options),
                         doctest::Contains("[loom.search.E801]"), user_error);
    gpu_options.gpu_tiling_structure = "SSSRRR";  // as many R levels as S levels
    CHECK_THROWS_WITH_AS(search::generate_sketches(gpu, gpu_options),
                         doctest::Contains("[loom.search.E801]"), user_error);

    search::SketchRule stuck{"Stuck",
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
