/// \file
/// The workloads of benchmarks/gpu/bench_gpu.cpp (its header comment lists them): each one's
/// fp32 DAG, vendor shapes and, for the 16-bit ones, the DAG loom tunes. Shared with the test
/// that replays the shipped GPU records (tests/unit/cuda/test_shipped_gpu_records.cpp): a
/// changed definition changes a workload key and orphans the records tuned for it.
#ifndef LOOM_BENCH_GPU_WORKLOADS_HPP
#define LOOM_BENCH_GPU_WORKLOADS_HPP

#include <loom/ops.hpp>
#include <loom/ops/untyped.hpp>
#include <loom/search/task.hpp>

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace loom_bench_gpu {

using namespace loom;

/// What cuda::device_target gives on an H100 or an H200 (sm_90, 1024 threads, 227 KiB of
/// opt-in shared memory a block): the target to sample, replay or featurize their programs for
/// on a machine without the GPU.
inline Target hopper_target() {
  Target t = Target::cuda("sm_90");
  t.max_threads_per_block = 1024;
  t.max_shared_memory_per_block = 227 * 1024;
  return t;
}

/// The numbers a workload computes with.
enum class Precision {
  fp32,  ///< fp32 in and out, FP32 FMA: loom's contenders, cublasSgemm, cuDNN's fp32 kernels
  tf32,  ///< fp32 in and out, products on TF32 tensor cores
  bf16,  ///< bf16 inputs, fp32 accumulation and output
  fp16,  ///< fp16 inputs, fp32 accumulation; fp32 output from cuBLAS, fp16 from cuDNN
};

/// C[batch][m,n] = A[batch][m,k] B[batch][k,n], row-major; batch 0: one product (no batch axis).
/// With trans_b, B is given as [batch][n,k].
struct GemmShape {
  int batch = 0, m = 0, n = 0, k = 0;
  bool trans_b = false;
};

/// A stride-1 convolution: N images of C x H x W, K filters of C x R x S, `pad` on each side.
struct ConvShape {
  int n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0, pad = 0;
};

/// What bench_gpu's make_workload builds a workload from.
struct Spec {
  std::string name;
  Precision precision = Precision::fp32;
  /// The fp32 DAG: loom's fp32 contenders, and the reference output of every precision.
  std::vector<ir::Tensor> inputs;
  ir::Tensor output;
  GemmShape gemm;  ///< the cuBLAS contender's product (m == 0: none)
  ConvShape conv;  ///< the cuDNN contenders' convolution (n == 0: none): fp32 NCHW, fp16 NHWC
  bool memory_bound = false;  ///< timed against the DRAM's bandwidth
  /// A bf16 / fp16 workload's loom DAG (loom_16bit_gemm): the same product of 16-bit
  /// placeholders, float32 products summed in float32 as the vendor's; none otherwise.
  std::vector<ir::Tensor> loom_inputs;
  ir::Tensor loom_output;
};

/// Sets the loom DAG of a 16-bit GEMM or batched GEMM spec: placeholders of T shaped as the fp32
/// DAG's inputs (their buffers hold T already, input_elem(precision)).
template <class T>
inline void loom_16bit_gemm(Spec& s) {
  const std::vector<int64_t> sa = s.inputs[0].shape(), sb = s.inputs[1].shape();
  if (sa.size() == 2) {
    auto a = placeholder<T>(s.inputs[0].name(), {sa[0], sa[1]});
    auto b = placeholder<T>(s.inputs[1].name(), {sb[0], sb[1]});
    s.loom_inputs = {a, b};
    s.loom_output = ops::matmul(a, b, false, s.gemm.trans_b);
  } else {
    auto a = placeholder<T>(s.inputs[0].name(), {sa[0], sa[1], sa[2]});
    auto b = placeholder<T>(s.inputs[1].name(), {sb[0], sb[1], sb[2]});
    s.loom_inputs = {a, b};
    s.loom_output = ops::batch_matmul(a, b);
  }
}

/// Sets the loom DAG of an fp16 NHWC convolution spec: 16-bit placeholders shaped as the fp32
/// DAG's inputs (HWIO filter), float32 products summed in float32, the sum rounded to fp16 as
/// cuDNN's output (Workload::output_elem).
inline void loom_fp16_conv_nhwc(Spec& s) {
  const std::vector<int64_t> sx = s.inputs[0].shape(), sw = s.inputs[1].shape();
  auto x = placeholder<float16>(s.inputs[0].name(), {sx[0], sx[1], sx[2], sx[3]});
  auto w = placeholder<float16>(s.inputs[1].name(), {sw[0], sw[1], sw[2], sw[3]});
  const ir::Tensor y = ops::conv2d_nhwc(x, w, {.padding = {s.conv.pad, s.conv.pad}});
  s.loom_inputs = {x, w};
  s.loom_output = ops::untyped::cast(y, ir::DType::f16(), "y_fp16");
}

inline const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

// Each spec names the fields it sets (designated initializers); the rest keep their defaults,
// which -Wmissing-field-initializers would flag in the tests' -Wextra builds.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/// The workloads of bench_gpu's header comment, in order, those `keep` accepts (by name) only.
inline std::vector<Spec> workload_specs(const std::function<bool(const std::string&)>& keep) {
  std::vector<Spec> specs;
  auto add = [&](Spec s) {
    if (!keep(s.name)) return;
    if (s.gemm.m > 0 && s.precision == Precision::bf16) loom_16bit_gemm<bfloat16>(s);
    if (s.gemm.m > 0 && s.precision == Precision::fp16) loom_16bit_gemm<float16>(s);
    if (s.conv.n > 0 && s.precision == Precision::fp16) loom_fp16_conv_nhwc(s);
    specs.push_back(std::move(s));
  };
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
    auto a = placeholder<float>("A", {4096, 4096});
    auto b = placeholder<float>("B", {4096, 4096});
    add({.name = std::string("gemm4096_") + precision_name(p),
         .precision = p,
         .inputs = {a, b},
         .output = ops::matmul(a, b),
         .gemm = {0, 4096, 4096, 4096}});
  }
  for (Precision p : {Precision::tf32, Precision::bf16}) {
    auto a = placeholder<float>("A", {4096, 4096});
    auto b = placeholder<float>("B", {4096, 4096});  // [N, K]
    add({.name = std::string("gemm4096_nt_") + precision_name(p),
         .precision = p,
         .inputs = {a, b},
         .output = ops::matmul(a, b, false, true),
         .gemm = {0, 4096, 4096, 4096, true}});
  }
  for (Precision p : {Precision::fp32, Precision::bf16})
    for (int m : {128, 4096})
      for (const auto& [layer, k, n] : {std::tuple{1, 768, 3072}, std::tuple{2, 3072, 768}}) {
        auto x = placeholder<float>("X", {m, k});
        auto wt = placeholder<float>("W", {k, n});
        add({.name = "bert_ffn" + std::to_string(layer) + "_m" + std::to_string(m) + "_" +
                     precision_name(p),
             .precision = p,
             .inputs = {x, wt},
             .output = ops::matmul(x, wt),
             .gemm = {0, m, n, k}});
      }
  // The same products with the weight as nn.Linear stores it, [N, K] (x W^T): B along k, the
  // layout in which wgmma reads TF32 and loom's copies of B move 16 bytes a thread.
  for (int m : {128, 4096})
    for (const auto& [layer, k, n] : {std::tuple{1, 768, 3072}, std::tuple{2, 3072, 768}}) {
      auto x = placeholder<float>("X", {m, k});
      auto wt = placeholder<float>("W", {n, k});
      add({.name = "bert_ffn" + std::to_string(layer) + "_nt_m" + std::to_string(m) + "_bf16",
           .precision = Precision::bf16,
           .inputs = {x, wt},
           .output = ops::matmul(x, wt, false, true),
           .gemm = {0, m, n, k, true}});
    }
  for (Precision p : {Precision::fp32, Precision::bf16})
    for (const auto& [what, batch, m, k, n] :
         {std::tuple{"qk", 12, 128, 64, 128}, std::tuple{"av", 12, 128, 128, 64},
          std::tuple{"qk", 384, 128, 64, 128}}) {
      auto a = placeholder<float>("A", {batch, m, k});
      auto b = placeholder<float>("B", {batch, k, n});
      add({.name =
               std::string("bmm_") + what + "_b" + std::to_string(batch) + "_" + precision_name(p),
           .precision = p,
           .inputs = {a, b},
           .output = ops::batch_matmul(a, b),
           .gemm = {batch, m, n, k}});
    }
  {
    auto x = placeholder<float>("X", {1, 64, 56, 56});
    auto wt = placeholder<float>("W", {64, 64, 3, 3});
    add({.name = "conv2d_nchw_n1_64x56x56_k64_3x3_fp32",
         .inputs = {x, wt},
         .output = ops::conv2d_nchw(x, wt, {.padding = {1, 1}}),
         .conv = {1, 64, 56, 56, 64, 3, 3, 1}});
  }
  // ResNet-50's stride-1 convolutions: c, h (= w), k, r (= s).
  for (int n : {1, 32})
    for (const auto& [c, h, k, r] :
         {std::tuple{64, 56, 64, 3}, std::tuple{128, 28, 128, 3}, std::tuple{256, 14, 256, 3},
          std::tuple{512, 7, 512, 3}, std::tuple{64, 56, 256, 1}, std::tuple{256, 56, 64, 1},
          std::tuple{1024, 14, 256, 1}}) {
      const int pad = r / 2;
      auto x = placeholder<float>("X", {n, h, h, c});
      auto wt = placeholder<float>("W", {r, r, c, k});
      const std::string hw = std::to_string(h);
      add({.name = "conv2d_nhwc_n" + std::to_string(n) + "_" + std::to_string(c) + "x" + hw + "x" +
                   hw + "_k" + std::to_string(k) + "_" + std::to_string(r) + "x" +
                   std::to_string(r) + "_fp16",
           .precision = Precision::fp16,
           .inputs = {x, wt},
           .output = ops::conv2d_nhwc(x, wt, {.padding = {pad, pad}}),
           .conv = {n, c, h, h, k, r, r, pad}});
    }
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {128, 768}}) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    auto x = placeholder<float>("X", {rows, cols});
    auto g = placeholder<float>("gamma", {cols});
    auto b = placeholder<float>("beta", {cols});
    add({.name = "softmax_" + shape,
         .inputs = {x},
         .output = ops::softmax(x),
         .memory_bound = true});
    add({.name = "layer_norm_" + shape,
         .inputs = {x, g, b},
         .output = ops::layer_norm(x, g, b),
         .memory_bound = true});
  }
  return specs;
}

#pragma GCC diagnostic pop

/// The task loom's contenders of `spec` are built from and tuned for: the fp32 DAG for fp32
/// workloads, the same on a target that allows TF32 for tf32 ones (a target of its own: TF32
/// programs and their records never stand in for fp32 ones), the 16-bit DAG (Spec::loom_inputs)
/// for bf16 and fp16 ones; none for a 16-bit workload without one.
inline std::optional<Task> loom_task(const Spec& spec, const Target& target) {
  if (!spec.loom_inputs.empty())
    return Task(std::make_shared<const ComputeDAG>(spec.loom_inputs,
                                                   std::vector<ir::Tensor>{spec.loom_output}),
                target);
  const auto dag =
      std::make_shared<const ComputeDAG>(spec.inputs, std::vector<ir::Tensor>{spec.output});
  if (spec.precision == Precision::fp32) return Task(dag, target);
  if (spec.precision == Precision::tf32) return Task(dag, target.with_tf32());
  return std::nullopt;
}

}  // namespace loom_bench_gpu

#endif  // LOOM_BENCH_GPU_WORKLOADS_HPP
