// Batch-norm folding (net::fold_batch_norm, run by net::Network): which batch norms fold, that
// the folded network computes what the unfolded one does (the DAG interpreter both times, up to
// float32 rounding), and what the pass leaves alone.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/net/network.hpp>
#include <loom/ops.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

using namespace loom;

namespace {

std::vector<float> random_values(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

net::Constant random_constant(const ir::Tensor& t, uint32_t seed, float lo = -1, float hi = 1) {
  return net::constant(t, random_values(t.num_elements(), seed, lo, hi));
}

// Evaluates the computation of `inputs`, `constants` and `outputs` on input data `x` (one input).
std::vector<std::vector<float>> run(const std::vector<ir::Tensor>& inputs,
                                    const std::vector<net::Constant>& constants,
                                    const std::vector<ir::Tensor>& outputs, std::vector<float> x) {
  std::vector<ir::Tensor> args = inputs;
  for (const net::Constant& c : constants) args.push_back(c.tensor);
  const ComputeDAG dag(args, outputs);
  std::vector<void*> ptrs{x.data()};
  for (const net::Constant& c : constants)
    ptrs.push_back(const_cast<unsigned char*>(c.bytes->data()));
  std::vector<std::vector<float>> out;
  for (const ir::Tensor& t : outputs) out.emplace_back(static_cast<size_t>(t.num_elements()));
  for (auto& v : out) ptrs.push_back(v.data());
  evaluate(dag, ptrs);
  return out;
}

// The largest difference relative to the largest magnitude of `want`.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return worst / scale;
}

bool has_tag(const std::vector<ir::Tensor>& inputs, const std::vector<net::Constant>& constants,
             const std::vector<ir::Tensor>& outputs, const std::string& tag) {
  std::vector<ir::Tensor> args = inputs;
  for (const net::Constant& c : constants) args.push_back(c.tensor);
  const ComputeDAG dag(args, outputs);
  return std::any_of(dag.ops().begin(), dag.ops().end(),
                     [&](const ir::Tensor& t) { return !t.is_placeholder() && t->tag == tag; });
}

struct BatchNorm {
  Tensor<float, 1> gamma, beta, mean, var;
  std::vector<net::Constant> constants;
};

BatchNorm batch_norm_params(const std::string& name, int64_t c, uint32_t seed) {
  BatchNorm bn{placeholder<float>(name + "_gamma", {c}),
               placeholder<float>(name + "_beta", {c}),
               placeholder<float>(name + "_mean", {c}),
               placeholder<float>(name + "_var", {c}),
               {}};
  bn.constants = {random_constant(bn.gamma, seed, 0.5f, 2), random_constant(bn.beta, seed + 1),
                  random_constant(bn.mean, seed + 2), random_constant(bn.var, seed + 3, 0.1f, 3)};
  return bn;
}

}  // namespace

TEST_SUITE("net") {
  TEST_CASE("a batch norm after a convolution folds into its weight and a shift") {
    // Two conv + BN + relu layers, the second strided and grouped, and a residual-free head:
    // both batch norms fold, the weights are replaced, the statistics are no longer read.
    auto x = placeholder<float>("x", {1, 4, 9, 9});
    auto w1 = placeholder<float>("w1", {8, 4, 3, 3});
    auto w2 = placeholder<float>("w2", {8, 4, 3, 3});
    BatchNorm bn1 = batch_norm_params("bn1", 8, 10), bn2 = batch_norm_params("bn2", 8, 20);
    auto c1 = ops::conv2d_nchw(x, w1, {.padding = {1, 1}});
    auto y1 = ops::relu(ops::batch_norm(c1, bn1.gamma, bn1.beta, bn1.mean, bn1.var, 1e-3));
    auto c2 = ops::conv2d_nchw(y1, w2, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2});
    auto y2 = ops::relu(ops::batch_norm(c2, bn2.gamma, bn2.beta, bn2.mean, bn2.var));
    std::vector<net::Constant> constants{random_constant(w1, 1), random_constant(w2, 2)};
    for (auto* bn : {&bn1, &bn2})
      constants.insert(constants.end(), bn->constants.begin(), bn->constants.end());

    const net::FoldedBatchNorms f = net::fold_batch_norm({x}, constants, {y2});
    CHECK(f.folded == 2);
    REQUIRE(f.outputs.size() == 1);
    CHECK(f.outputs[0].name() == y2.name());
    CHECK_FALSE(has_tag({x}, f.constants, f.outputs, "batch_norm"));
    // Two scaled weights and two shifts; nothing reads the originals or the statistics.
    CHECK(f.constants.size() == 4);
    for (const net::Constant& c : f.constants)
      CHECK((c.tensor.name().ends_with("_bn") || c.tensor.name().ends_with("_shift")));

    const auto input = random_values(x.ir().num_elements(), 3, -1, 1);
    const auto want = run({x}, constants, {y2}, input);
    const auto got = run({x}, f.constants, f.outputs, input);
    CHECK(relative_error(got[0], want[0]) < 1e-5);

    // The network folds when it is built, unless told not to.
    const net::Network folded({x}, constants, {y2});
    CHECK(folded.folded_batch_norms() == 2);
    const net::Network kept({x}, constants, {y2}, {.fold_batch_norm = false});
    CHECK(kept.folded_batch_norms() == 0);
    CHECK(kept.constants().size() == constants.size());
    CHECK(folded.tasks().size() <= kept.tasks().size());
  }

  TEST_CASE("batch norms that cannot fold are left as they are") {
    auto x = placeholder<float>("x", {1, 4, 6, 6});
    auto w = placeholder<float>("w", {4, 4, 3, 3});
    BatchNorm bn = batch_norm_params("bn", 4, 30);
    std::vector<net::Constant> params = bn.constants;
    auto with = [&](std::vector<net::Constant> extra) {
      extra.insert(extra.end(), params.begin(), params.end());
      return extra;
    };
    auto norm = [&](const Tensor<float, 4>& t) {
      return ops::batch_norm(t, bn.gamma, bn.beta, bn.mean, bn.var);
    };
    // On the network's input: no convolution to fold into.
    {
      auto y = norm(x);
      CHECK(net::fold_batch_norm({x}, with({}), {y}).folded == 0);
    }
    // The convolution's output is read by something else too (an output here).
    {
      auto c = ops::conv2d_nchw(x, w, {.padding = {1, 1}});
      auto y = norm(c);
      CHECK(net::fold_batch_norm({x}, with({random_constant(w, 4)}), {y, c}).folded == 0);
    }
    // The weight is shared with another convolution.
    {
      auto c = ops::conv2d_nchw(x, w, {.padding = {1, 1}});
      auto other = ops::conv2d_nchw(x, w, {.padding = {1, 1}}, "other");
      auto y = ops::add(norm(c), other);
      CHECK(net::fold_batch_norm({x}, with({random_constant(w, 4)}), {y}).folded == 0);
    }
    // The weight is an input given at run time.
    {
      auto c = ops::conv2d_nchw(x, w, {.padding = {1, 1}});
      auto y = norm(c);
      CHECK(net::fold_batch_norm({x, w}, with({}), {y}).folded == 0);
    }
    // The statistics are computed, not constants.
    {
      auto c = ops::conv2d_nchw(x, w, {.padding = {1, 1}});
      auto var = ops::relu(bn.var);
      auto y = ops::batch_norm(c, bn.gamma, bn.beta, bn.mean, var);
      const auto f = net::fold_batch_norm({x}, with({random_constant(w, 4)}), {y});
      CHECK(f.folded == 0);
      CHECK(f.outputs[0].same_as(y));
    }
  }

  TEST_CASE("batch_norm_affine is the per-channel scale and shift") {
    const net::ChannelAffine a = net::batch_norm_affine({2, 1}, {1, 0}, {3, -1}, {3, 0}, 1);
    REQUIRE(a.scale.size() == 2);
    CHECK(a.scale[0] == doctest::Approx(1.0));   // 2 / sqrt(4)
    CHECK(a.shift[0] == doctest::Approx(-2.0));  // 1 - 3 * 1
    CHECK(a.scale[1] == doctest::Approx(1.0));
    CHECK(a.shift[1] == doctest::Approx(1.0));
  }
}
