// What the ComputeDAG analysis makes of each operator: the predicates that steer Ansor's sketch
// rules (multi-level tiling, inlining), FLOP counts, and the stages an operator creates.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include <string>
#include <vector>

namespace {

using namespace loom;

// The DAG's info for the compute named `name` (REQUIREs that there is exactly one).
const OpInfo& info_of(const ComputeDAG& dag, const std::string& name) {
  int found = -1, count = 0;
  for (int i = 0; i < dag.num_ops(); ++i)
    if (dag.ops()[i].name() == name) {
      found = i;
      ++count;
    }
  REQUIRE_MESSAGE(count == 1, "compute '" << name << "' appears " << count << " times");
  return dag.info(found);
}

std::vector<std::string> compute_names(const ComputeDAG& dag) {
  std::vector<std::string> names;
  for (auto& op : dag.ops())
    if (!op.is_placeholder()) names.push_back(op.name());
  return names;
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("matrix products and convolutions need multi-level tiling") {
    auto a = placeholder<float>("A", {8, 6});
    auto b = placeholder<float>("B", {6, 5});
    auto bt = placeholder<float>("Bt", {5, 6});
    CHECK(ComputeDAG({a, b}, {ops::matmul(a, b)}).info(2).needs_multi_level_tiling);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        auto a2 = placeholder<float>("A", {6, 6});
        auto b2 = placeholder<float>("B", {6, 6});
        auto c = ops::matmul(a2, b2, ta, tb);
        CHECK(ComputeDAG({a2, b2}, {c}).info(c).needs_multi_level_tiling);
      }
    auto d = ops::dense(a, bt);
    CHECK(ComputeDAG({a, bt}, {d}).info(d).needs_multi_level_tiling);

    auto ba = placeholder<float>("BA", {3, 8, 6});
    auto bb = placeholder<float>("BB", {3, 6, 5});
    auto bm = ops::batch_matmul(ba, bb);
    CHECK(ComputeDAG({ba, bb}, {bm}).info(bm).needs_multi_level_tiling);

    auto x = placeholder<float>("X", {1, 4, 9, 9});
    auto w = placeholder<float>("W", {8, 4, 3, 3});
    auto conv = ops::conv2d_nchw(x, w, {.padding = {1, 1}});
    const ComputeDAG conv_dag({x, w}, {conv});
    CHECK(conv_dag.info(conv).needs_multi_level_tiling);
    CHECK(conv_dag.info(conv).has_reduce);

    auto xh = placeholder<float>("X", {1, 9, 9, 4});
    auto wh = placeholder<float>("W", {3, 3, 4, 8});
    auto conv_h = ops::conv2d_nhwc(xh, wh, {.stride = {2, 2}});
    CHECK(ComputeDAG({xh, wh}, {conv_h}).info(conv_h).needs_multi_level_tiling);
  }

  TEST_CASE("relu, bias_add and broadcast arithmetic are strictly inlineable") {
    auto x = placeholder<float>("X", {2, 4, 5, 5});
    auto bias = placeholder<float>("bias", {4});
    auto y = placeholder<float>("Y", {5, 5});
    auto biased = ops::bias_add(x, bias, 1);
    auto sum = ops::add(biased, y);
    auto out = ops::relu(sum);
    ComputeDAG dag({x, bias, y}, {out});
    for (const char* name : {"bias_add", "add", "relu"}) {
      CAPTURE(name);
      const OpInfo& info = info_of(dag, name);
      CHECK(info.is_strictly_inlineable);
      CHECK(info.is_injective);
      CHECK_FALSE(info.needs_multi_level_tiling);
    }
    // relu reads its producer point by point: the two fuse element by element.
    CHECK(info_of(dag, "relu").is_elementwise);
    CHECK(dag.single_elementwise_matched_consumer(dag.op_index(sum)) == dag.op_index(out));
  }

  TEST_CASE("softmax's exponential is not strictly inlineable and its row statistics reduce") {
    auto x = placeholder<float>("X", {4, 10});
    ComputeDAG dag({x}, {ops::softmax(x)});
    CHECK(compute_names(dag) ==
          std::vector<std::string>{"softmax_max", "softmax_exp", "softmax_sum", "softmax"});
    CHECK_FALSE(info_of(dag, "softmax_exp").is_strictly_inlineable);  // exp is expensive
    CHECK(info_of(dag, "softmax_exp").is_injective);
    CHECK(info_of(dag, "softmax_max").has_reduce);
    CHECK(info_of(dag, "softmax_max").reduce_size == 10);
    CHECK(info_of(dag, "softmax_sum").has_reduce);
    CHECK(info_of(dag, "softmax").is_strictly_inlineable);
  }

  TEST_CASE("a pad stage is injective but not strictly inlineable because of its branch") {
    auto x = placeholder<float>("X", {1, 3, 8, 8});
    auto w = placeholder<float>("W", {4, 3, 3, 3});
    ComputeDAG dag({x, w}, {ops::conv2d_nchw(x, w, {.padding = {1, 1}})});
    CHECK(compute_names(dag) == std::vector<std::string>{"conv2d_nchw_pad", "conv2d_nchw"});
    const OpInfo& pad = info_of(dag, "conv2d_nchw_pad");
    CHECK(pad.is_injective);
    CHECK_FALSE(pad.has_reduce);
    CHECK_FALSE(pad.is_strictly_inlineable);
    CHECK(dag.ops()[dag.op_index(dag.outputs()[0])]->tag == "conv2d_nchw");

    auto p = ops::pad(x, {0, 0, 2, 2}, {0, 0, 2, 2});
    CHECK_FALSE(ComputeDAG({x}, {p}).info(p).is_strictly_inlineable);
  }

  TEST_CASE("operators add a pad stage only when some padding is non-zero") {
    auto x = placeholder<float>("X", {1, 3, 8, 8});
    auto w = placeholder<float>("W", {4, 3, 3, 3});
    CHECK(compute_names(ComputeDAG({x, w}, {ops::conv2d_nchw(x, w)})) ==
          std::vector<std::string>{"conv2d_nchw"});
    CHECK(compute_names(ComputeDAG({x, w}, {ops::conv2d_nchw(x, w, {.padding = {0, 1}})})) ==
          std::vector<std::string>{"conv2d_nchw_pad", "conv2d_nchw"});
    CHECK(compute_names(ComputeDAG({x}, {ops::max_pool2d(x, {2, 2}, {2, 2})})) ==
          std::vector<std::string>{"max_pool2d"});
    CHECK(compute_names(ComputeDAG({x}, {ops::avg_pool2d(x, {3, 3}, {1, 1}, {1, 1})})) ==
          std::vector<std::string>{"avg_pool2d_pad", "avg_pool2d_sum", "avg_pool2d"});
  }

  TEST_CASE("transpose is injective but not element-wise") {
    auto x = placeholder<float>("X", {3, 4, 5});
    auto t = ops::transpose(x, {2, 0, 1});
    const ComputeDAG dag({x}, {t});
    const OpInfo& info = dag.info(t);
    CHECK(info.is_injective);
    CHECK_FALSE(info.is_elementwise);
    CHECK_FALSE(info.is_strictly_inlineable);  // the axes are read out of order
  }

  TEST_CASE("matmul and batch_matmul count 2 M N K flops") {
    const int64_t m = 7, n = 5, k = 9;
    auto a = placeholder<float>("A", {m, k});
    auto b = placeholder<float>("B", {n, k});
    CHECK(ComputeDAG({a, b}, {ops::matmul(a, b, false, true)}).flop_count() == 2.0 * m * n * k);
    CHECK(ComputeDAG({a, b}, {ops::dense(a, b)}).flop_count() == 2.0 * m * n * k);
    auto bias = placeholder<float>("bias", {n});
    // The bias adds one addition per output element.
    CHECK(ComputeDAG({a, b, bias}, {ops::dense(a, b, bias)}).flop_count() ==
          2.0 * m * n * k + m * n);
    auto ba = placeholder<float>("BA", {3, m, k});
    auto bb = placeholder<float>("BB", {3, k, n});
    CHECK(ComputeDAG({ba, bb}, {ops::batch_matmul(ba, bb)}).flop_count() == 2.0 * 3 * m * n * k);
  }

  TEST_CASE("conv2d counts 2 multiply-add flops per tap") {
    const int64_t n = 2, c = 4, h = 9, w = 7, o = 6, kh = 3, kw = 3;
    auto x = placeholder<float>("X", {n, c, h, w});
    SUBCASE("unpadded: the convolution is the whole DAG") {
      auto wt = placeholder<float>("W", {o, c, kh, kw});
      ComputeDAG dag({x, wt}, {ops::conv2d_nchw(x, wt)});
      CHECK(dag.flop_count() == 2.0 * n * o * (h - 2) * (w - 2) * c * kh * kw);
    }
    SUBCASE("strided, padded and grouped: index arithmetic is free, the pad stage is not") {
      const int64_t g = 2;
      auto wt = placeholder<float>("W", {o, c / g, kh, kw});
      auto y = ops::conv2d_nchw(x, wt, {.stride = {2, 2}, .padding = {1, 1}, .groups = g});
      ComputeDAG dag({x, wt}, {y});
      const int64_t oh = 5, ow = 4;
      REQUIRE(y.shape() == std::array<int64_t, 4>{n, o, oh, ow});
      CHECK(dag.info(y).flops == 2.0 * n * o * oh * ow * (c / g) * kh * kw);
      CHECK(dag.flop_count() > dag.info(y).flops);  // the pad stage's bounds tests count
    }
  }
}
