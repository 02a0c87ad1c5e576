// gpu_check: runs programs sampled from the GPU search space on a real NVIDIA GPU and compares
// every output with the DAG interpreter: the device half of the GPU path's correctness check
// (the CPU half, tests/unit/search/test_gpu_search.cpp, runs the same kernels on the CPU
// emulation of lower/gpu.hpp).
//
//   gpu_check [programs per op = 50] [seed = 1]     (GPU_CHECK_ONLY=softmax: those workloads only)
//   GPU_CHECK_SAMPLE_ONLY=1 gpu_check ...           (no GPU: sample, compile and count, run
//   nothing)
//   GPU_CHECK_ARCH=sm_90a gpu_check ...              (programs for that architecture rather than
//   the device's: on sm_90a tensor-core tiles may be warpgroup MMAs, wgmma.mma_async)
//
// The workloads include bf16 and fp16 matmuls (float32 products summed in float32), whose
// programs come from the tensor-core sketch (m16n8k16 mma.sync, lower/mma.hpp) and the SIMT ones,
// and float32 matmuls on a target that allows TF32 (m16n8k8 tf32 mma.sync), whose inputs are
// multiples of 1/256, exact in TF32, so that the comparison checks the fragments, not rounding.
// Prints, per workload, the programs run and what they are made of (reductions across threads,
// tensor cores and of them warpgroup MMAs, ldmatrix, pipelined cp.async copies, zero-filling ones,
// swizzled shared copies), the wrong ones and those that failed (compile, load, launch), and exits
// with 1 when any program is wrong or failed, 77 when there is no GPU. The sample depends on the
// seed and loom's version alone, so GPU_CHECK_SAMPLE_ONLY counts, on a machine without a GPU, what
// a device run of the same version checked.
//
// Run on an H100 on 2026-11-22: seeds 1 and 2 at 50 per op, 750 programs, 0 wrong, 0 failed. On
// an H200 on 2026-11-29: seed 1 at 16 per op, 352 programs (139 on tensor cores, 72 pipelined,
// 77 swizzled, 8 with zero-filling cp.async, 48 reducing across threads), 0 wrong, 0 failed.
#include <loom/cuda.hpp>
#include <loom/ops.hpp>
#include <loom/search/annotate.hpp>

#include "gpu_workloads.hpp"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace loom;

namespace {

struct workload {
  std::string name;
  std::shared_ptr<const ComputeDAG> dag;
  bool tf32 = false;  ///< tuned for Target::with_tf32()
};

workload make(std::string name, std::vector<ir::Tensor> in, std::vector<ir::Tensor> out,
              bool tf32 = false) {
  return {std::move(name), std::make_shared<const ComputeDAG>(std::move(in), std::move(out)), tf32};
}

// Shapes the DAG interpreter finishes in well under a second.
std::vector<workload> workloads() {
  std::vector<workload> w;
  {
    auto a = placeholder<float>("A", {128, 96});
    auto b = placeholder<float>("B", {96, 160});
    w.push_back(make("matmul 128x160x96", {a, b}, {ops::matmul(a, b)}));
  }
  {
    auto a = placeholder<float>("A", {67, 45});
    auto b = placeholder<float>("B", {45, 71});
    w.push_back(make("matmul 67x71x45", {a, b}, {ops::matmul(a, b)}));
  }
  {
    auto a = placeholder<float>("A", {4, 32, 48});
    auto b = placeholder<float>("B", {4, 48, 64});
    w.push_back(make("batch_matmul 4x32x64x48", {a, b}, {ops::batch_matmul(a, b)}));
  }
  {
    auto x = placeholder<float>("X", {1, 16, 14, 14});
    auto wt = placeholder<float>("W", {32, 16, 3, 3});
    auto bias = placeholder<float>("bias", {32});
    auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(x, wt, {.padding = {1, 1}}), bias, 1));
    w.push_back(make("conv2d+bias+relu 16->32 14x14", {x, wt, bias}, {y}));
  }
  {
    auto x = placeholder<float>("X", {1, 16, 28, 28});
    auto wt = placeholder<float>("W", {16, 1, 3, 3});
    w.push_back(make("depthwise 16x28x28", {x, wt},
                     {ops::depthwise_conv2d_nchw(x, wt, {.padding = {1, 1}})}));
  }
  {
    auto x = placeholder<float>("X", {64, 200});
    w.push_back(make("softmax 64x200", {x}, {ops::softmax(x)}));
  }
  {
    auto x = placeholder<float>("X", {32, 96});
    auto g = placeholder<float>("gamma", {96});
    auto b = placeholder<float>("beta", {96});
    w.push_back(make("layer_norm 32x96", {x, g, b}, {ops::layer_norm(x, g, b)}));
  }
  {
    auto x = placeholder<float>("X", {1, 16, 28, 28});
    w.push_back(make("max_pool2d 3x3/2", {x}, {ops::max_pool2d(x, {3, 3}, {2, 2}, {1, 1})}));
  }
  {
    // Rows longer than any block: the reductions across threads loop over them.
    auto x = placeholder<float>("X", {8, 1500});
    w.push_back(make("softmax 8x1500", {x}, {ops::softmax(x)}));
  }
  {
    auto x = placeholder<float>("X", {2, 4, 300});
    auto g = placeholder<float>("gamma", {300});
    auto b = placeholder<float>("beta", {300});
    w.push_back(make("layer_norm 2x4x300", {x, g, b}, {ops::layer_norm(x, g, b)}));
  }
  {
    // Few outputs, long reductions: CrossThreadReduction on a multi-level-tiled op.
    auto a = placeholder<float>("A", {4, 2000});
    auto b = placeholder<float>("B", {2000, 3});
    w.push_back(make("matmul 4x3x2000", {a, b}, {ops::matmul(a, b)}));
  }
  // 16-bit operands, float32 products summed in float32: tensor-core and SIMT programs.
  {
    auto a = placeholder<bfloat16>("A", {128, 96});
    auto b = placeholder<bfloat16>("B", {96, 160});
    w.push_back(make("bf16 matmul 128x160x96", {a, b}, {ops::matmul(a, b)}));
  }
  {
    auto a = placeholder<float16>("A", {64, 64});
    auto b = placeholder<float16>("B", {64, 96});
    w.push_back(make("fp16 matmul 64x96x64", {a, b}, {ops::matmul(a, b)}));
  }
  {
    auto a = placeholder<bfloat16>("A", {4, 32, 48});
    auto b = placeholder<bfloat16>("B", {4, 48, 64});
    w.push_back(make("bf16 batch_matmul 4x32x64x48", {a, b}, {ops::batch_matmul(a, b)}));
  }
  // M a multiple of 64 and 128: on sm_90a, warpgroup tiles of 4 and 8 warps (warpgroup MMAs,
  // B MN-major and K-major).
  {
    auto a = placeholder<bfloat16>("A", {256, 128});
    auto b = placeholder<bfloat16>("B", {128, 192});
    w.push_back(make("bf16 matmul 256x192x128", {a, b}, {ops::matmul(a, b)}));
  }
  {
    auto a = placeholder<float16>("A", {128, 128});
    auto b = placeholder<float16>("B", {256, 128});
    w.push_back(make("fp16 matmul_nt 128x256x128", {a, b}, {ops::matmul(a, b, false, true)}));
  }
  // B given as [N, K] (a linear layer's weight): ldmatrix loads it as stored.
  {
    auto a = placeholder<bfloat16>("A", {64, 96});
    auto b = placeholder<bfloat16>("B", {128, 96});
    w.push_back(make("bf16 matmul_nt 64x128x96", {a, b}, {ops::matmul(a, b, false, true)}));
  }
  {
    auto x = placeholder<bfloat16>("X", {1, 16, 14, 14});
    auto wt = placeholder<bfloat16>("W", {32, 16, 3, 3});
    w.push_back(make("bf16 conv2d_nchw 16->32 14x14", {x, wt},
                     {ops::conv2d_nchw(x, wt, {.padding = {1, 1}})}));
  }
  {
    auto x = placeholder<float16>("X", {2, 14, 14, 32});
    auto wt = placeholder<float16>("W", {3, 3, 32, 32});
    w.push_back(make("fp16 conv2d_nhwc 32->32 14x14 n2", {x, wt},
                     {ops::conv2d_nhwc(x, wt, {.padding = {1, 1}})}));
  }
  // Rows and columns make M = 64 per image: tensor-core (implicit GEMM) and SIMT programs.
  {
    auto x = placeholder<float16>("X", {2, 8, 8, 32});
    auto wt = placeholder<float16>("W", {3, 3, 32, 64});
    w.push_back(make("fp16 conv2d_nhwc 32->64 8x8 n2", {x, wt},
                     {ops::conv2d_nhwc(x, wt, {.padding = {1, 1}})}));
  }
  // Width 28, as ResNet-50's second stage (no multiple of 16): a fragment's 16 rows are 4
  // columns x 4 rows of the image.
  {
    auto x = placeholder<float16>("X", {1, 28, 28, 32});
    auto wt = placeholder<float16>("W", {3, 3, 32, 64});
    w.push_back(make("fp16 conv2d_nhwc 32->64 28x28", {x, wt},
                     {ops::conv2d_nhwc(x, wt, {.padding = {1, 1}})}));
  }
  // float32 operands on a TF32 target: m16n8k8 tensor-core and SIMT programs.
  {
    auto a = placeholder<float>("A", {128, 96});
    auto b = placeholder<float>("B", {96, 160});
    w.push_back(make("tf32 matmul 128x160x96", {a, b}, {ops::matmul(a, b)}, true));
  }
  {
    auto a = placeholder<float>("A", {4, 32, 48});
    auto b = placeholder<float>("B", {4, 48, 64});
    w.push_back(make("tf32 batch_matmul 4x32x64x48", {a, b}, {ops::batch_matmul(a, b)}, true));
  }
  {
    auto a = placeholder<float>("A", {64, 96});
    auto b = placeholder<float>("B", {128, 96});
    w.push_back(make("tf32 matmul_nt 64x128x96", {a, b}, {ops::matmul(a, b, false, true)}, true));
  }
  return w;
}

// Random values in [-1, 1] as the bytes of a tensor of `t`'s element type (float32, or a 16-bit
// float rounded from them); with `tf32_exact`, multiples of 1/256.
std::vector<unsigned char> random_input(const ir::Tensor& t, std::mt19937& rng, bool tf32_exact) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const auto n = static_cast<size_t>(t.num_elements());
  std::vector<unsigned char> bytes(n * static_cast<size_t>(t.dtype().bytes()));
  for (size_t i = 0; i < n; ++i) {
    const float x = tf32_exact ? std::round(d(rng) * 256.0f) / 256.0f : d(rng);
    if (t.dtype() == ir::DType::bf16()) {
      const uint16_t h = bfloat16(x).bits;
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else if (t.dtype() == ir::DType::f16()) {
      const uint16_t h = float16(x).bits;
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    }
  }
  return bytes;
}

// Runs compiled program `c` on the device; returns the outputs.
std::vector<std::vector<float>> run_on_device(const cuda::CompiledProgram& c,
                                              const std::vector<std::vector<unsigned char>>& inputs,
                                              const std::vector<int64_t>& output_sizes) {
  cuda::Program program(c.image, c.plan);
  std::vector<cuda::DeviceBuffer> args;
  std::vector<cuda::CUdeviceptr> ptrs;
  for (size_t i = 0; i < c.plan.arg_bytes.size(); ++i) {
    args.emplace_back(c.plan.arg_bytes[i]);
    if (i < inputs.size())
      args.back().upload(inputs[i].data(), c.plan.arg_bytes[i]);
    else
      args.back().fill_bytes(
          0xFF);  // NaN everywhere, so that an element no kernel writes is caught
    ptrs.push_back(args.back().ptr());
  }
  program.launch(ptrs);
  cuda::Context::get().synchronize();
  std::vector<std::vector<float>> out;
  for (size_t o = 0; o < output_sizes.size(); ++o) {
    out.emplace_back(static_cast<size_t>(output_sizes[o]));
    args[inputs.size() + o].download(out.back().data(), out.back().size() * sizeof(float));
  }
  return out;
}

/// What a workload's programs are made of, and how they fared.
struct Counts {
  int programs = 0, wrong = 0, failed = 0;
  int across = 0, mma = 0, wgmma = 0, ldmatrix = 0, pipelined = 0, zero_fill = 0, swizzled = 0;

  void count(const sched::State& program, const std::string& source) {
    const auto has = [&](const char* what) { return source.find(what) != std::string::npos; };
    across += has("across threadIdx.x");
    mma += has("mma.sync") || has("wgmma.mma_async");
    wgmma += has("wgmma.mma_async");
    ldmatrix += has("ldmatrix");
    pipelined += has("cp.async.wait_group");
    zero_fill += has(", %2;");  // cp.async with a source size (codegen's copy_async)
    swizzled += std::any_of(program.steps().begin(), program.steps().end(), [](const auto& st) {
      return std::holds_alternative<sched::StorageSwizzleStep>(st);
    });
  }
  Counts& operator+=(const Counts& o) {
    programs += o.programs, wrong += o.wrong, failed += o.failed, across += o.across;
    mma += o.mma, wgmma += o.wgmma, ldmatrix += o.ldmatrix, pipelined += o.pipelined,
        zero_fill += o.zero_fill;
    swizzled += o.swizzled;
    return *this;
  }
  /// `ran`: false when sampled and compiled only (failures are then build failures).
  void print(const std::string& what, bool ran) const {
    std::cout << what << ": " << programs << " programs (" << across << " reducing across threads, "
              << mma << " on tensor cores (" << wgmma << " warpgroup MMAs), " << ldmatrix
              << " with ldmatrix, " << pipelined << " pipelined, " << zero_fill
              << " with zero-filling cp.async, " << swizzled << " swizzled), ";
    if (ran)
      std::cout << wrong << " wrong, " << failed << " failed\n";
    else
      std::cout << "not run, " << failed << " failed to compile\n";
  }
};

}  // namespace

int main(int argc, char** argv) {
  // Line by line: a run cut short by a time limit still shows how far it got.
  std::cout.setf(std::ios::unitbuf);
  const int per_op = argc > 1 ? std::atoi(argv[1]) : 50;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const bool sample_only = std::getenv("GPU_CHECK_SAMPLE_ONLY") != nullptr;
  std::string why;
  // Without a device, an H100's or H200's (the sample depends on the target's limits).
  Target target = loom_bench_gpu::hopper_target();
  if (sample_only) {
    std::cout << "gpu_check: sampling and compiling only (GPU_CHECK_SAMPLE_ONLY), for "
              << target.arch << ", " << per_op << " programs per workload\n";
  } else if (!cuda::device_available(&why)) {
    std::cerr << "gpu_check: no CUDA device: " << why << '\n';
    return 77;
  } else {
    const cuda::DeviceInfo info = cuda::device_info(0);
    target = cuda::device_target(0);
    std::cout << "gpu_check on " << info.name << " (" << info.arch() << ", NVRTC target "
              << target.arch << "), " << per_op << " programs per workload\n";
  }
  // GPU_CHECK_ARCH=sm_90a: the programs of that architecture (warpgroup MMAs on sm_90a).
  if (const char* arch = std::getenv("GPU_CHECK_ARCH"); arch && *arch) {
    target.arch = arch;
    std::cout << "gpu_check: compiling for " << target.arch << " (GPU_CHECK_ARCH)\n";
  }
  const char* only = std::getenv("GPU_CHECK_ONLY");  // a substring of the workloads to run
  Counts total;
  for (const workload& w : workloads()) {
    if (only && w.name.find(only) == std::string::npos) continue;
    std::mt19937 data_rng(static_cast<uint32_t>(seed));
    std::vector<std::vector<unsigned char>> inputs;
    std::vector<std::vector<float>> expected;
    std::vector<void*> ptrs;
    for (const ir::Tensor& t : w.dag->inputs()) inputs.push_back(random_input(t, data_rng, w.tf32));
    for (auto& v : inputs) ptrs.push_back(v.data());
    std::vector<int64_t> output_sizes;
    for (const ir::Tensor& t : w.dag->outputs()) {
      if (t.dtype() != ir::DType::f32())
        throw std::logic_error(w.name + ": gpu_check compares float32 outputs only");
      output_sizes.push_back(t.num_elements());
      expected.emplace_back(static_cast<size_t>(t.num_elements()));
      ptrs.push_back(expected.back().data());
    }
    evaluate(*w.dag, ptrs);
    const Task task(w.dag, w.tf32 ? target.with_tf32() : target);
    std::mt19937_64 rng(seed);
    const auto programs =
        search::sample_programs(search::generate_sketches(task), task, {}, rng, per_op);
    // NVRTC's optimizer takes 0.2-1 s per kernel: compile the workload's programs on every core
    // first, then run them one at a time.
    std::vector<std::optional<cuda::CompiledProgram>> compiled(programs.size());
    std::vector<std::string> build_error(programs.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> builders;
    for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
      builders.emplace_back([&] {
        for (size_t i; (i = next++) < programs.size();) {
          try {
            // PTX, through the driver's JIT: the tuner loads CUBINs, so this checks the other
            // path (and runs against the tests' fake driver, which loads PTX only).
            compiled[i] = cuda::compile_program(
                lower::lower_gpu(programs[i], task.target, "p" + std::to_string(i)), target.arch,
                {}, cuda::ImageKind::ptx);
          } catch (const std::exception& e) {
            build_error[i] = e.what();
          }
        }
      });
    for (std::thread& t : builders) t.join();
    Counts c;
    c.programs = static_cast<int>(programs.size());
    for (size_t i = 0; i < programs.size(); ++i) {
      try {
        if (!build_error[i].empty()) throw std::runtime_error(build_error[i]);
        c.count(programs[i], compiled[i]->source);
        if (sample_only) continue;
        const auto got = run_on_device(*compiled[i], inputs, output_sizes);
        bool ok = true;
        for (size_t o = 0; o < got.size() && ok; ++o)
          for (size_t e = 0; e < got[o].size() && ok; ++e)
            ok = std::abs(got[o][e] - expected[o][e]) <= 1e-3f + 1e-3f * std::abs(expected[o][e]);
        if (!ok) {
          ++c.wrong;
          std::cout << "  WRONG: " << w.name << " program " << i << ":\n"
                    << programs[i].to_string();
        }
      } catch (const std::exception& e) {
        ++c.failed;
        std::cout << "  FAILED: " << w.name << " program " << i << ": " << e.what() << '\n';
        if (!sample_only && cuda::Context::get().needs_reset()) cuda::Context::get().reset();
      }
    }
    c.print(w.name, !sample_only);
    total += c;
  }
  total.print("gpu_check", !sample_only);
  return total.wrong + total.failed > 0 ? 1 : 0;
}
