/// \file
/// The workloads of the model's own picks (collect_model_picks, train_cost_model --picks): the
/// operator families of the library at shapes that neither the benchmark workloads
/// (tune/tune_workloads.hpp, both sets), bench_model_compile's new shapes nor the cost-model data
/// set (cost_workloads.hpp) use, so that a model trained on them is still tested on shapes it
/// never saw. A workload's name keys its log
/// (<dir>/<name>.jsonl); changing a definition invalidates the logs collected for it.
#ifndef LOOM_BENCH_PICK_WORKLOADS_HPP
#define LOOM_BENCH_PICK_WORKLOADS_HPP

#include "../tune/tune_workloads.hpp"

#include <loom/ops.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace loom_bench {

inline std::vector<TuneWorkload> pick_workloads() {
  using namespace loom;
  std::vector<TuneWorkload> w;
  auto x = [](int64_t v) { return std::to_string(v); };

  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{64, 256, 512},
                                                                   {256, 64, 1000},
                                                                   {96, 384, 96},
                                                                   {512, 1024, 256},
                                                                   {33, 200, 77},
                                                                   {1000, 128, 64},
                                                                   {2048, 256, 256},
                                                                   {16, 1024, 1024},
                                                                   {300, 300, 300},
                                                                   {768, 768, 768},
                                                                   {256, 2048, 128},
                                                                   {4, 512, 2048},
                                                                   // extents no tile divides
                                                                   {97, 113, 101},
                                                                   {61, 250, 131},
                                                                   {257, 129, 67},
                                                                   {131, 67, 263}})
    w.push_back(
        {"gemm_" + x(m) + "x" + x(k) + "x" + x(n), [=] { return gemm_task(m, k, n); }, {"B"}});

  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{
           {128, 768, 768}, {64, 3072, 768}, {256, 512, 512}, {50, 1024, 4096}, {384, 256, 1024}})
    w.push_back({"dense_relu_" + x(m) + "x" + x(k) + "x" + x(n),
                 [=] {
                   auto a = placeholder<float>("X", {m, k});
                   auto b = placeholder<float>("W", {k, n});
                   auto bias = placeholder<float>("b", {n});
                   return Task(ComputeDAG({a, b, bias},
                                          {ops::relu(ops::bias_add(ops::matmul(a, b), bias, -1))}));
                 },
                 {"W"}});

  for (const auto& [b, m, k, n] : std::vector<std::array<int64_t, 4>>{{4, 256, 64, 256},
                                                                      {16, 64, 64, 64},
                                                                      {12, 128, 64, 128},
                                                                      {8, 384, 64, 384},
                                                                      {32, 32, 128, 32}})
    w.push_back({"batch_matmul_" + x(b) + "x" + x(m) + "x" + x(k) + "x" + x(n),
                 [=] {
                   auto a = placeholder<float>("A", {b, m, k});
                   auto bb = placeholder<float>("B", {b, k, n});
                   return Task(ComputeDAG({a, bb}, {ops::batch_matmul(a, bb)}));
                 },
                 {}});

  // {channels in, image size, channels out, kernel, stride}
  for (bool nhwc : {false, true})
    for (const auto& [c, hw, k, r, stride] :
         std::vector<std::array<int64_t, 5>>{{32, 28, 64, 3, 1},
                                             {128, 14, 128, 3, 1},
                                             {64, 56, 128, 1, 1},
                                             {256, 14, 256, 1, 1},
                                             {3, 112, 32, 3, 2},
                                             {96, 20, 96, 3, 2},
                                             {3, 64, 16, 7, 2},
                                             {160, 7, 320, 3, 1}})
      w.push_back(
          {std::string(nhwc ? "conv2d_nhwc_" : "conv2d_") + x(c) + "x" + x(hw) + "x" + x(hw) +
               "_k" + x(k) + "_" + x(r) + "x" + x(r) + "s" + x(stride),
           [=] { return conv2d_bias_relu_task(1, c, hw, hw, k, r, r, r / 2, nhwc, stride); },
           {"W"}});

  for (const auto& [c, hw, stride] : std::vector<std::array<int64_t, 3>>{
           {128, 28, 2}, {256, 14, 1}, {144, 56, 2}, {48, 56, 1}, {192, 14, 1}, {32, 56, 2}})
    w.push_back({"depthwise_" + x(c) + "x" + x(hw) + "x" + x(hw) + "_3x3s" + x(stride),
                 [=] {
                   auto in = placeholder<float>("X", {1, c, hw, hw});
                   auto wt = placeholder<float>("W", {c, 1, 3, 3});
                   return Task(ComputeDAG(
                       {in, wt}, {ops::depthwise_conv2d_nchw(
                                     in, wt, {.stride = {stride, stride}, .padding = {1, 1}})}));
                 },
                 {"W"}});

  for (const auto& [rows, cols] : std::vector<std::array<int64_t, 2>>{
           {128, 512}, {2048, 128}, {64, 3000}, {512, 512}, {1000, 999}})
    w.push_back({"softmax_" + x(rows) + "x" + x(cols),
                 [=] {
                   auto in = placeholder<float>("X", {rows, cols});
                   return Task(ComputeDAG({in}, {ops::softmax(in)}));
                 },
                 {}});
  for (const auto& [rows, cols] :
       std::vector<std::array<int64_t, 2>>{{128, 768}, {512, 256}, {33, 2000}})
    w.push_back({"layer_norm_" + x(rows) + "x" + x(cols),
                 [=] {
                   auto in = placeholder<float>("X", {rows, cols});
                   auto g = placeholder<float>("gamma", {cols});
                   auto b = placeholder<float>("beta", {cols});
                   return Task(ComputeDAG({in, g, b}, {ops::layer_norm(in, g, b)}));
                 },
                 {}});
  for (const auto& [c, hw] : std::vector<std::array<int64_t, 2>>{{128, 28}, {32, 112}})
    w.push_back({"max_pool_" + x(c) + "x" + x(hw) + "x" + x(hw) + "_3x3s2",
                 [=] {
                   auto in = placeholder<float>("X", {1, c, hw, hw});
                   return Task(ComputeDAG({in}, {ops::max_pool2d(in, {3, 3}, {2, 2}, {1, 1})}));
                 },
                 {}});
  w.push_back({"avg_pool_256x14x14_2x2s2",
               [] {
                 auto in = placeholder<float>("X", {1, 256, 14, 14});
                 return Task(ComputeDAG({in}, {ops::avg_pool2d(in, {2, 2}, {2, 2})}));
               },
               {}});
  return w;
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_PICK_WORKLOADS_HPP
