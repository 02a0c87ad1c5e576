// Fusion groups (loom/net/partition.hpp) of small networks built with the operator library:
// which ops land together, which groups make one task, and that running the groups one after
// the other on their own DAGs computes what the whole network computes (the DAG interpreter
// both times).
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/net/partition.hpp>
#include <loom/ops.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/lower/lower.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

using namespace loom;

namespace {

std::shared_ptr<const ComputeDAG> network(std::vector<ir::Tensor> in, std::vector<ir::Tensor> out) {
  return std::make_shared<const ComputeDAG>(std::move(in), std::move(out));
}

// The names of a group's ops, in order.
std::vector<std::string> names(const ComputeDAG& net, const net::FusedGroup& g) {
  std::vector<std::string> out;
  for (int op : g.ops) out.push_back(net.ops()[op].name());
  return out;
}

// Runs the groups in order, each on its own DAG, and the whole network; returns the largest
// difference between their outputs (every output of the network).
double groups_vs_network(const ComputeDAG& net, const std::vector<net::FusedGroup>& groups) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::unordered_map<const ir::TensorNode*, std::vector<float>> data;
  for (const ir::Tensor& t : net.inputs()) {
    auto& v = data[t.get()];
    v.resize(static_cast<size_t>(t.num_elements()));
    for (float& x : v) x = d(rng);
  }
  for (const net::FusedGroup& g : groups) {
    std::vector<void*> ptrs;
    for (const ir::Tensor& t : g.inputs) ptrs.push_back(data.at(t.get()).data());
    const ir::Tensor& out = net.ops()[g.output()];
    auto& v = data[out.get()];
    v.assign(static_cast<size_t>(out.num_elements()), NAN);
    ptrs.push_back(v.data());
    evaluate(*g.dag, ptrs);
  }
  std::vector<std::vector<float>> whole;
  std::vector<void*> ptrs;
  for (const ir::Tensor& t : net.inputs()) ptrs.push_back(data.at(t.get()).data());
  for (const ir::Tensor& t : net.outputs())
    whole.emplace_back(static_cast<size_t>(t.num_elements()));
  for (auto& v : whole) ptrs.push_back(v.data());
  evaluate(net, ptrs);
  double worst = 0;
  for (size_t o = 0; o < whole.size(); ++o) {
    const auto& got = data.at(net.outputs()[o].get());
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::abs(double(got[i]) - whole[o][i]);
      worst = std::max(worst, std::isnan(e) ? INFINITY : e);
    }
  }
  return worst;
}

// conv (pad 1) + bias + relu.
Tensor<float, 4> conv_block(const Tensor<float, 4>& x, const Tensor<float, 4>& w,
                            const Tensor<float, 1>& b) {
  return ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), b));
}

}  // namespace

TEST_SUITE("net") {
  TEST_CASE("op patterns: element-wise, broadcast, injective, reduction, anchor") {
    auto x = placeholder<float>("x", {1, 4, 6, 6});
    auto w = placeholder<float>("w", {4, 4, 3, 3});
    auto b = placeholder<float>("b", {4});
    auto y = conv_block(x, w, b);
    auto p = ops::max_pool2d(y, {2, 2}, {2, 2});
    const auto dag = network({x, w, b}, {p});
    std::unordered_map<std::string, net::OpPattern> want = {
        {"conv2d_nchw_pad", net::OpPattern::Injective},
        {"conv2d_nchw", net::OpPattern::Anchor},
        {"bias_add", net::OpPattern::Broadcast},
        {"relu", net::OpPattern::ElementWise},
        {"max_pool2d", net::OpPattern::Reduction}};
    int seen = 0;
    for (int i = 0; i < dag->num_ops(); ++i) {
      if (dag->info(i).is_placeholder) continue;
      const std::string& name = dag->ops()[i].name();
      CAPTURE(name);
      REQUIRE(want.count(name));
      CHECK(net::op_pattern(*dag, i) == want.at(name));
      ++seen;
    }
    CHECK(seen == 5);
    CHECK_THROWS_WITH_AS(net::op_pattern(*dag, 0), doctest::Contains("loom.net.E1001"), user_error);
  }

  TEST_CASE("a convolution takes its padding, bias and relu; the pool after it is its own") {
    auto x = placeholder<float>("x", {1, 4, 8, 8});
    auto w = placeholder<float>("w", {8, 4, 3, 3});
    auto b = placeholder<float>("b", {8});
    auto p = ops::max_pool2d(conv_block(x, w, b), {2, 2}, {2, 2});
    const auto dag = network({x, w, b}, {p});
    const auto groups = net::partition(*dag);
    REQUIRE(groups.size() == 2);
    CHECK(names(*dag, groups[0]) ==
          std::vector<std::string>{"conv2d_nchw_pad", "conv2d_nchw", "bias_add", "relu"});
    CHECK(groups[0].pattern == net::OpPattern::Anchor);
    CHECK(groups[0].inputs.size() == 3);  // x, w, b
    CHECK(names(*dag, groups[1]) == std::vector<std::string>{"max_pool2d"});
    CHECK(groups[1].pattern == net::OpPattern::Reduction);
    REQUIRE(groups[1].inputs.size() == 1);
    CHECK(groups[1].inputs[0].same_as(dag->ops()[groups[0].output()]));
    CHECK(groups_vs_network(*dag, groups) == 0);
  }

  TEST_CASE("a pool before a convolution leaves the padding to the convolution") {
    auto x = placeholder<float>("x", {1, 4, 8, 8});
    auto w = placeholder<float>("w", {4, 4, 3, 3});
    auto b = placeholder<float>("b", {4});
    auto y = conv_block(ops::max_pool2d(x, {2, 2}, {2, 2}), w, b);
    const auto dag = network({x, w, b}, {y});
    const auto groups = net::partition(*dag);
    REQUIRE(groups.size() == 2);
    CHECK(names(*dag, groups[0]) == std::vector<std::string>{"max_pool2d"});
    CHECK(names(*dag, groups[1]).front() == "conv2d_nchw_pad");
    CHECK(groups_vs_network(*dag, groups) == 0);
  }

  TEST_CASE("identical blocks are one task, weighted by how often they run") {
    auto x = placeholder<float>("x", {1, 4, 8, 8});
    auto w1 = placeholder<float>("w1", {8, 4, 3, 3});
    auto b1 = placeholder<float>("b1", {8});
    auto w2 = placeholder<float>("w2", {8, 8, 3, 3});
    auto b2 = placeholder<float>("b2", {8});
    auto w3 = placeholder<float>("w3", {8, 8, 3, 3});
    auto b3 = placeholder<float>("b3", {8});
    auto y = conv_block(conv_block(conv_block(x, w1, b1), w2, b2), w3, b3);
    const auto dag = network({x, w1, b1, w2, b2, w3, b3}, {y});
    const auto groups = net::partition(*dag);
    REQUIRE(groups.size() == 3);
    const auto tasks = net::extract_tasks(groups);
    REQUIRE(tasks.size() == 2);
    CHECK(tasks[0].weight() == 1);
    CHECK(tasks[1].weight() == 2);
    CHECK(tasks[1].groups == std::vector<int>{1, 2});
    // Every group's names are its own: the repeated "relu" read by the next block is renamed.
    for (const net::FusedGroup& g : groups) {
      std::vector<std::string> all;
      for (const ir::Tensor& t : g.dag->ops()) all.push_back(t.name());
      std::sort(all.begin(), all.end());
      CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
    }
    CHECK(groups_vs_network(*dag, groups) < 1e-5);
  }

  TEST_CASE("every task of a network has sketches, and a sampled program computes its group") {
    auto x = placeholder<float>("x", {1, 4, 8, 8});
    auto w = placeholder<float>("w", {8, 4, 3, 3});
    auto b = placeholder<float>("b", {8});
    auto wd = placeholder<float>("wd", {10, 128});
    auto pooled = ops::max_pool2d(conv_block(x, w, b), {2, 2}, {2, 2});  // [1, 8, 4, 4]
    auto flat = compute("flatten", {1, 128},
                        [&](Var n, Var f) { return pooled(n, f / 16, (f / 4) % 4, f % 4); });
    auto y = ops::softmax(ops::dense(flat, wd));
    const auto dag = network({x, w, b, wd}, {y});
    const auto groups = net::partition(*dag);
    CHECK(groups.size() == 4);  // conv block, pool, flatten + dense, softmax
    for (const net::NetworkTask& t : net::extract_tasks(groups)) {
      const Task task(t.dag, Target::host());
      const auto sketches = search::generate_sketches(task);
      CHECK(!sketches.empty());
      std::mt19937_64 rng(1);
      const sched::State p = search::sample_program(sketches[0], task, {}, rng);
      std::vector<std::vector<float>> buffers;
      for (const ir::Tensor& in : t.dag->inputs())
        buffers.emplace_back(static_cast<size_t>(in.num_elements()), 0.5f);
      const ir::Tensor& out = t.dag->outputs()[0];
      std::vector<float> want(static_cast<size_t>(out.num_elements()));
      std::vector<float> got(want.size(), NAN);
      std::vector<void*> ptrs;
      for (auto& v : buffers) ptrs.push_back(v.data());
      ptrs.push_back(want.data());
      evaluate(*t.dag, ptrs);
      ptrs.back() = got.data();
      lower::interpret(lower::lower(p, "task"), ptrs);
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, double(std::abs(got[i] - want[i])));
      CHECK(worst < 1e-4);
    }
    CHECK(groups_vs_network(*dag, groups) < 1e-5);
  }

  TEST_CASE("a residual add and the relu after it join the convolution") {
    auto x = placeholder<float>("x", {1, 8, 6, 6});
    auto w = placeholder<float>("w", {8, 8, 3, 3});
    auto b = placeholder<float>("b", {8});
    auto c = ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), b);
    auto sum = compute("residual", c.shape(),
                       [&](Var n, Var k, Var i, Var j) { return c(n, k, i, j) + x(n, k, i, j); });
    auto y = ops::relu(sum);
    const auto dag = network({x, w, b}, {y});
    const auto groups = net::partition(*dag);
    REQUIRE(groups.size() == 1);
    CHECK(names(*dag, groups[0]) == std::vector<std::string>{"conv2d_nchw_pad", "conv2d_nchw",
                                                             "bias_add", "residual", "relu"});
    CHECK(groups[0].inputs.size() == 3);  // x once, though two ops read it
    CHECK(groups_vs_network(*dag, groups) < 1e-5);
  }

  TEST_CASE("softmax and layer norm stay whole after a dense layer") {
    auto x = placeholder<float>("x", {4, 16});
    auto w = placeholder<float>("w", {32, 16});
    auto b = placeholder<float>("b", {32});
    auto gamma = placeholder<float>("gamma", {32});
    auto beta = placeholder<float>("beta", {32});
    auto h = ops::dense(x, w, b);
    auto s = ops::softmax(h);
    auto n = ops::layer_norm(s, gamma, beta);
    const auto dag = network({x, w, b, gamma, beta}, {n});
    const auto groups = net::partition(*dag);
    REQUIRE(groups.size() == 3);
    CHECK(groups[0].pattern == net::OpPattern::Anchor);
    CHECK(names(*dag, groups[1]) ==
          std::vector<std::string>{"softmax_max", "softmax_exp", "softmax_sum", "softmax"});
    CHECK(groups[1].pattern == net::OpPattern::Reduction);
    CHECK(names(*dag, groups[2]) ==
          std::vector<std::string>{"layer_norm_mean", "layer_norm_var", "layer_norm"});
    CHECK(groups_vs_network(*dag, groups) < 1e-5);
  }

  TEST_CASE("an op that is a network output ends its group, and its readers start another") {
    auto x = placeholder<float>("x", {1, 4, 6, 6});
    auto w = placeholder<float>("w", {4, 4, 3, 3});
    auto b = placeholder<float>("b", {4});
    auto c = ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), b);
    auto y = ops::relu(c);
    const auto dag = network({x, w, b}, {c, y});
    const auto groups = net::partition(*dag);
    REQUIRE(groups.size() == 2);
    CHECK(names(*dag, groups[0]).back() == "bias_add");
    CHECK(names(*dag, groups[1]) == std::vector<std::string>{"relu"});
    CHECK(groups_vs_network(*dag, groups) < 1e-6);
  }
}
