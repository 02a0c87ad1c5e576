/// \file
/// A network end to end on the CPU: `06_network [--trials N] [--records FILE]` writes a small
/// CNN with the operator library (two conv + bias + ReLU blocks, a max pool, a dense layer and a
/// softmax; random weights bound as constants), prints its fusion groups and tuning tasks, tunes
/// the tasks together for N trials with the task scheduler (0, the default: no tuning), compiles
/// it (each task's best record in FILE, else its default schedule), runs it, checks the output
/// against the reference interpreter and prints the median time of 20 runs.
#include <loom/network.hpp>
#include <loom/ops.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace loom;

namespace {

std::vector<float> random_values(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 0;
  std::string records = "network.jsonl";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--trials") == 0) {
      trials = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--records") == 0) {
      records = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--trials N] [--records FILE]\n", argv[0]);
      return 2;
    }
  }

  // The network: x [1, 3, 32, 32] -> 16 channels -> pool -> 32 channels -> dense 10 -> softmax.
  auto x = placeholder<float>("x", {1, 3, 32, 32});
  auto w1 = placeholder<float>("w1", {16, 3, 3, 3});
  auto b1 = placeholder<float>("b1", {16});
  auto w2 = placeholder<float>("w2", {32, 16, 3, 3});
  auto b2 = placeholder<float>("b2", {32});
  auto wd = placeholder<float>("wd", {10, 32 * 16 * 16});
  auto c1 = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w1, {.padding = {1, 1}}), b1));
  auto c2 = ops::relu(ops::bias_add(ops::conv2d_nchw(c1, w2, {.padding = {1, 1}}), b2));
  auto pooled = ops::max_pool2d(c2, {2, 2}, {2, 2});  // [1, 32, 16, 16]
  auto flat = compute("flatten", {1, 32 * 16 * 16},
                      [&](Var n, Var f) { return pooled(n, f / 256, (f / 16) % 16, f % 16); });
  auto y = ops::softmax(ops::dense(flat, wd));
  std::vector<net::Constant> weights;
  uint32_t seed = 0;
  for (const ir::Tensor& t : std::vector<ir::Tensor>{w1, b1, w2, b2, wd})
    weights.push_back(net::constant(t, random_values(t.num_elements(), ++seed, 0.2f)));
  const auto network = std::make_shared<const net::Network>(std::vector<ir::Tensor>{x}, weights,
                                                            std::vector<ir::Tensor>{y});
  std::cout << *network;

  if (trials > 0) {
    TaskSchedulerOptions o;
    o.trials = trials;
    o.tune.records = records;
    // Rounds small enough that every task gets its warm-up round and a few more: Ansor's 64
    // programs a round suit budgets of thousands.
    const int tasks = static_cast<int>(network->tasks().size());
    o.tune.measures_per_round = std::clamp(trials / (2 * tasks), 8, 64);
    tune(*network, o);
  }
  const CompiledNetwork compiled = compile(network, {.records = trials > 0 ? records : ""});

  std::vector<float> input = random_values(3 * 32 * 32, 42, 1.0f), output(10);
  compiled.run({BufferView(input.data(), {1, 3, 32, 32}), BufferView(output.data(), {1, 10})});

  // The same network by the reference interpreter, whole.
  std::vector<float> expected(10);
  std::vector<void*> ptrs = {input.data()};
  for (const net::Constant& c : network->constants())
    ptrs.push_back(const_cast<unsigned char*>(c.bytes->data()));
  ptrs.push_back(expected.data());
  evaluate(network->dag(), ptrs);
  double worst = 0;
  for (size_t i = 0; i < output.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(output[i] - expected[i])));
  std::printf("output %s the interpreter's (max difference %.2e)\n",
              worst < 1e-5 ? "matches" : "DIFFERS FROM", worst);

  std::vector<double> ms;
  for (int r = 0; r < 20; ++r) {
    const auto start = std::chrono::steady_clock::now();
    compiled.run({BufferView(input.data(), {1, 3, 32, 32}), BufferView(output.data(), {1, 10})});
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "%zu tasks tuned (%zu reading a packed weight), %zu on default schedules; median run "
      "%.3f ms (%.1f GFLOP/s)\n",
      compiled.tuned_tasks().size(), compiled.packed_tasks().size(),
      compiled.untuned_tasks().size(), ms[ms.size() / 2],
      network->flop_count() / (ms[ms.size() / 2] * 1e-3) * 1e-9);
  return worst < 1e-5 ? 0 : 1;
}
