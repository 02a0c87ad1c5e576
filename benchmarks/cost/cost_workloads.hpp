/// \file
/// The workloads of the cost-model data set (issue 5): six operators of loom's operator library
/// at realistic but small shapes, so that one run of a decent single-threaded program takes a
/// few milliseconds at most. The generator (make_cost_dataset.cpp) measures random programs of
/// each; the evaluation (bench_cost_model.cpp) replays the stored records on the same DAGs, so
/// both must see exactly these definitions: a workload's name is the key of its records in
/// tests/data/cost/measurements.tsv.gz. Changing a shape or an operator invalidates the data
/// set; add a workload under a new name instead.
#ifndef LOOM_BENCH_COST_WORKLOADS_HPP
#define LOOM_BENCH_COST_WORKLOADS_HPP

#include <loom/ops.hpp>
#include <loom/search/task.hpp>

#include <string>
#include <vector>

namespace loom_bench {

/// One workload: its name in the data set and the task (DAG and target) to sample, build,
/// replay and featurize it with.
struct CostWorkload {
  std::string name;
  loom::Task task;
};

/// The target every program of the data set is sampled and featurized for: the host CPU with
/// one core, since every program is measured on one thread.
inline loom::Target cost_target() {
  loom::Target t = loom::Target::host();
  t.num_cores = 1;
  return t;
}

/// The six workloads, in data-set order. FLOPs of one run in the comments.
inline std::vector<CostWorkload> cost_workloads() {
  using namespace loom;
  const Target target = cost_target();
  std::vector<CostWorkload> out;
  auto add = [&](std::string name, std::vector<ir::Tensor> inputs,
                 std::vector<ir::Tensor> outputs) {
    out.push_back(
        {std::move(name), Task(ComputeDAG(std::move(inputs), std::move(outputs)), target)});
  };
  {  // GEMM 256^3: 33.6 MFLOP
    auto a = placeholder<float>("A", {256, 256});
    auto b = placeholder<float>("B", {256, 256});
    add("gemm_256x256x256", {a, b}, {ops::matmul(a, b)});
  }
  {  // conv2d NCHW 1x32x28x28 -> 32 channels, 3x3, pad 1: 14.5 MFLOP
    auto x = placeholder<float>("X", {1, 32, 28, 28});
    auto w = placeholder<float>("W", {32, 32, 3, 3});
    add("conv2d_1x32x28x28_k32_3x3", {x, w}, {ops::conv2d_nchw(x, w, {.padding = {1, 1}})});
  }
  {  // depthwise conv2d 1x64x56x56, 3x3, pad 1: 3.6 MFLOP, memory bound
    auto x = placeholder<float>("X", {1, 64, 56, 56});
    auto w = placeholder<float>("W", {64, 1, 3, 3});
    add("depthwise_1x64x56x56_3x3", {x, w},
        {ops::depthwise_conv2d_nchw(x, w, {.padding = {1, 1}})});
  }
  {  // batch_matmul 8 x (128x64 @ 64x128): 16.8 MFLOP
    auto a = placeholder<float>("A", {8, 128, 64});
    auto b = placeholder<float>("B", {8, 64, 128});
    add("batch_matmul_8x128x128x64", {a, b}, {ops::batch_matmul(a, b)});
  }
  {  // softmax over rows of 1024, 256 rows: memory bound (1 MiB in, 1 MiB out)
    auto x = placeholder<float>("X", {256, 1024});
    add("softmax_256x1024", {x}, {ops::softmax(x)});
  }
  {  // conv2d + bias + relu, 1x64x14x14 -> 64 channels, 3x3, pad 1: 14.5 MFLOP
    auto x = placeholder<float>("X", {1, 64, 14, 14});
    auto w = placeholder<float>("W", {64, 64, 3, 3});
    auto bias = placeholder<float>("bias", {64});
    add("conv2d_bias_relu_1x64x14x14_k64_3x3", {x, w, bias},
        {ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), bias, 1))});
  }
  return out;
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_COST_WORKLOADS_HPP
