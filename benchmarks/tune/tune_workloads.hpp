/// \file
/// The workloads of the tuner issue (#6): what benchmarks/tune/tune_workloads.cpp tunes, and what
/// bench_cost_model replays when it evaluates the cost model on those tuning logs
/// (`workloads=tune`). A workload's name keys its records file; changing a definition
/// invalidates the logs tuned for it.
#ifndef LOOM_BENCH_TUNE_WORKLOADS_HPP
#define LOOM_BENCH_TUNE_WORKLOADS_HPP

#include <loom/ops.hpp>
#include <loom/search/task.hpp>

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace loom_bench {

/// The non-empty items of `s` between `sep`s (what --only a,b,... names).
inline std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

/// One workload: its name (the records file <dir>/<name>.jsonl), its task, and the inputs that
/// are constant weights (--constant-weights packs them once).
struct TuneWorkload {
  std::string name;
  std::function<loom::Task()> make;
  std::vector<std::string> weights;  // constant inputs
};

inline loom::Task gemm_task(int64_t m, int64_t k, int64_t n) {
  using namespace loom;
  auto a = placeholder<float>("A", {m, k});
  auto b = placeholder<float>("B", {k, n});
  return Task(ComputeDAG({a, b}, {ops::matmul(a, b)}));
}

/// A 2-D convolution (`stride`, `pad` on every side, r x s kernel) with bias and ReLU fused,
/// batch n, c -> k channels: NCHW data and OIHW weights, or with `channels_last` NHWC data and
/// HWIO weights (the bias then runs along the last axis).
inline loom::Task conv2d_bias_relu_task(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                                        int64_t r, int64_t s, int64_t pad, bool channels_last,
                                        int64_t stride = 1) {
  using namespace loom;
  auto x =
      channels_last ? placeholder<float>("X", {n, h, w, c}) : placeholder<float>("X", {n, c, h, w});
  auto wt =
      channels_last ? placeholder<float>("W", {r, s, c, k}) : placeholder<float>("W", {k, c, r, s});
  auto bias = placeholder<float>("bias", {k});
  const ops::ConvParams<2> params{.stride = {stride, stride}, .padding = {pad, pad}};
  auto conv = channels_last ? ops::conv2d_nhwc(x, wt, params) : ops::conv2d_nchw(x, wt, params);
  return Task(
      ComputeDAG({x, wt, bias}, {ops::relu(ops::bias_add(conv, bias, channels_last ? -1 : 1))}));
}

/// The workloads, in table order.
inline std::vector<TuneWorkload> tune_workloads() {
  using namespace loom;
  std::vector<TuneWorkload> w;
  w.push_back({"gemm_1024", [] { return gemm_task(1024, 1024, 1024); }, {"B"}});
  w.push_back({"gemm_512", [] { return gemm_task(512, 512, 512); }, {"B"}});
  w.push_back({"gemm_128", [] { return gemm_task(128, 128, 128); }, {"B"}});
  w.push_back({"gemm_127x131x129", [] { return gemm_task(127, 131, 129); }, {"B"}});
  w.push_back({"bert_ffn_128x768x3072", [] { return gemm_task(128, 768, 3072); }, {"B"}});
  w.push_back({"batch_matmul_12x128x128x64",
               [] {
                 auto a = placeholder<float>("A", {12, 128, 64});
                 auto b = placeholder<float>("B", {12, 64, 128});
                 return Task(ComputeDAG({a, b}, {ops::batch_matmul(a, b)}));
               },
               {}});
  w.push_back({"conv2d_bias_relu_1x64x56x56_k64_3x3",
               [] { return conv2d_bias_relu_task(1, 64, 56, 56, 64, 3, 3, 1, false); },
               {"W"}});
  // The same layer on channels-last data and HWIO weights: the layouts a network keeps when its
  // convolutions vectorize over output channels (oneDNN's blocked conv picks NHWC source here).
  w.push_back({"conv2d_nhwc_bias_relu_1x56x56x64_k64_3x3",
               [] { return conv2d_bias_relu_task(1, 64, 56, 56, 64, 3, 3, 1, true); },
               {"W"}});
  // ResNet's late and strided layers: a 7x7 image leaves no vector along the rows, and a
  // stride-2 window reads every other column.
  w.push_back({"conv2d_bias_relu_1x512x7x7_k512_3x3",
               [] { return conv2d_bias_relu_task(1, 512, 7, 7, 512, 3, 3, 1, false); },
               {"W"}});
  w.push_back({"conv2d_nhwc_bias_relu_1x7x7x512_k512_3x3",
               [] { return conv2d_bias_relu_task(1, 512, 7, 7, 512, 3, 3, 1, true); },
               {"W"}});
  w.push_back({"conv2d_s2_bias_relu_1x128x28x28_k256_3x3",
               [] { return conv2d_bias_relu_task(1, 128, 28, 28, 256, 3, 3, 1, false, 2); },
               {"W"}});
  w.push_back({"depthwise_1x32x112x112_3x3",
               [] {
                 auto x = placeholder<float>("X", {1, 32, 112, 112});
                 auto wt = placeholder<float>("W", {32, 1, 3, 3});
                 return Task(
                     ComputeDAG({x, wt}, {ops::depthwise_conv2d_nchw(x, wt, {.padding = {1, 1}})}));
               },
               {}});
  w.push_back({"softmax_1024x1024",
               [] {
                 auto x = placeholder<float>("X", {1024, 1024});
                 return Task(ComputeDAG({x}, {ops::softmax(x)}));
               },
               {}});
  return w;
}

/// The shapes of the transfer experiment (bench_transfer): BERT-FFN-like dense layers
/// (M x 768 times 768 x 3072) over M, and ResNet's 64-channel 3x3 convolution over the image
/// size. `transfer_source` names the one shape of each family whose records the others borrow.
inline std::vector<TuneWorkload> transfer_workloads() {
  std::vector<TuneWorkload> w;
  for (int64_t m : {1, 8, 32, 100, 128, 200, 384})
    w.push_back({"ffn_m" + std::to_string(m) + "_768x3072",
                 [m] { return gemm_task(m, 768, 3072); },
                 {"B"}});
  for (int64_t hw : {28, 56, 112})
    w.push_back({"conv_64x" + std::to_string(hw) + "x" + std::to_string(hw) + "_k64_3x3",
                 [hw] { return conv2d_bias_relu_task(1, 64, hw, hw, 64, 3, 3, 1, false); },
                 {"W"}});
  return w;
}

/// The workload of `transfer_workloads()` whose records the others of its family borrow.
inline std::string transfer_source(const std::string& name) {
  return name.rfind("ffn_", 0) == 0 ? "ffn_m128_768x3072" : "conv_64x56x56_k64_3x3";
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_TUNE_WORKLOADS_HPP
