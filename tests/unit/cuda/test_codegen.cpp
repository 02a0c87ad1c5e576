// CUDA code generation (loom/backend/cuda/codegen.hpp): for every op of the operator library,
// hundreds of programs sampled from the GPU search space (lowered by lower::lower_gpu, printed
// as CUDA C) compile to PTX for sm_90 with NVRTC. Needs NVRTC, not a GPU.
//
// NVRTC's optimizer takes 0.2-1 s per kernel here (loops of up to 1024 statements under
// `#pragma unroll`); the optimizer is what the tuner pays per candidate, the front end and the
// PTX generation are what a wrong source would fail. So every sampled program is compiled with
// `-G` (no optimization, 5-10 ms a kernel) and a few per op with the full optimizer, as tuning
// builds them.
#include <doctest/doctest.h>

#include <loom/backend/cuda/codegen.hpp>
#include <loom/backend/cuda/nvrtc.hpp>
#include <loom/dag/evaluate.hpp>
#include <loom/lower/gpu.hpp>
#include <loom/ops.hpp>
#include <loom/search/annotate.hpp>

#include "support/mma_schedule.hpp"

#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/random_schedule.hpp"

using namespace loom;

namespace {

// How many times `what` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct gpu_workload {
  std::string name;
  std::shared_ptr<const ComputeDAG> dag;
};

gpu_workload make(std::string name, std::vector<ir::Tensor> in, std::vector<ir::Tensor> out) {
  return {std::move(name), std::make_shared<const ComputeDAG>(std::move(in), std::move(out))};
}

// The operator library at the shapes of the tuning issues (or smaller, for the big convs).
std::vector<gpu_workload> operator_library() {
  std::vector<gpu_workload> w;
  {
    auto a = placeholder<float>("A", {1024, 1024});
    auto b = placeholder<float>("B", {1024, 1024});
    w.push_back(make("matmul 1024^3", {a, b}, {ops::matmul(a, b)}));
  }
  {
    auto a = placeholder<float>("A", {127, 131});
    auto b = placeholder<float>("B", {131, 129});
    w.push_back(make("matmul 127x129x131", {a, b}, {ops::matmul(a, b)}));
  }
  {
    auto x = placeholder<float>("X", {128, 768});
    auto wt = placeholder<float>("W", {3072, 768});
    auto bias = placeholder<float>("bias", {3072});
    w.push_back(make("dense+bias 128x3072x768", {x, wt, bias}, {ops::dense(x, wt, bias)}));
  }
  {
    auto a = placeholder<float>("A", {12, 128, 64});
    auto b = placeholder<float>("B", {12, 64, 128});
    w.push_back(make("batch_matmul 12x128x128x64", {a, b}, {ops::batch_matmul(a, b)}));
  }
  {
    auto x = placeholder<float>("X", {1, 64, 56, 56});
    auto wt = placeholder<float>("W", {64, 64, 3, 3});
    auto bias = placeholder<float>("bias", {64});
    auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(x, wt, {.padding = {1, 1}}), bias, 1));
    w.push_back(make("conv2d+bias+relu 64x56x56", {x, wt, bias}, {y}));
  }
  {
    auto x = placeholder<float>("X", {1, 28, 28, 32});
    auto wt = placeholder<float>("W", {3, 3, 32, 32});
    w.push_back(
        make("conv2d nhwc 32x28x28", {x, wt}, {ops::conv2d_nhwc(x, wt, {.padding = {1, 1}})}));
  }
  {
    auto x = placeholder<float>("X", {1, 16, 100});
    auto wt = placeholder<float>("W", {32, 16, 5});
    w.push_back(make("conv1d 16->32 x100", {x, wt}, {ops::conv1d_ncw(x, wt, {.stride = {2}})}));
  }
  {
    auto x = placeholder<float>("X", {1, 8, 8, 14, 14});
    auto wt = placeholder<float>("W", {16, 8, 3, 3, 3});
    w.push_back(
        make("conv3d 8->16 8x14x14", {x, wt}, {ops::conv3d_ncdhw(x, wt, {.padding = {1, 1, 1}})}));
  }
  {
    auto x = placeholder<float>("X", {1, 32, 112, 112});
    auto wt = placeholder<float>("W", {32, 1, 3, 3});
    w.push_back(make("depthwise 32x112x112", {x, wt},
                     {ops::depthwise_conv2d_nchw(x, wt, {.padding = {1, 1}})}));
  }
  {
    auto x = placeholder<float>("X", {1, 32, 14, 14});
    auto wt = placeholder<float>("W", {32, 16, 4, 4});
    w.push_back(make("conv2d_transpose 32->16 14x14", {x, wt},
                     {ops::conv2d_transpose_nchw(x, wt, {.stride = {2, 2}, .padding = {1, 1}})}));
  }
  {
    auto x = placeholder<float>("X", {1, 64, 56, 56});
    w.push_back(make("max_pool2d 3x3/2", {x}, {ops::max_pool2d(x, {3, 3}, {2, 2}, {1, 1})}));
    w.push_back(make("avg_pool2d 2x2/2", {x}, {ops::avg_pool2d(x, {2, 2}, {2, 2})}));
  }
  {
    auto x = placeholder<float>("X", {1024, 1024});
    w.push_back(make("softmax 1024x1024", {x}, {ops::softmax(x)}));
  }
  {
    auto x = placeholder<float>("X", {128, 768});
    auto g = placeholder<float>("gamma", {768});
    auto b = placeholder<float>("beta", {768});
    w.push_back(make("layer_norm 128x768", {x, g, b}, {ops::layer_norm(x, g, b)}));
  }
  {
    auto x = placeholder<float>("X", {1, 64, 28, 28});
    std::vector<Tensor<float, 1>> p;
    for (const char* n : {"gamma", "beta", "mean", "var"}) p.push_back(placeholder<float>(n, {64}));
    w.push_back(make("batch_norm 64x28x28", {x, p[0], p[1], p[2], p[3]},
                     {ops::batch_norm(x, p[0], p[1], p[2], p[3])}));
  }
  {
    auto a = placeholder<float>("A", {512, 512});
    auto b = placeholder<float>("B", {512, 512});
    auto y = compute("y", {512, 512},
                     [&](Var i, Var j) { return max(a(i, j) + b(i, j), 0.0f) * a(i, j); });
    w.push_back(make("elementwise max(a + b, 0) * a", {a, b}, {y}));
  }
  return w;
}

// The sums (or maxima) of the 4 rows of X[4, 1000], a block per row, the row split over
// `threads` threads of it.
lower::GpuProgram row_reduction(bool maximum, int64_t threads, const std::string& name) {
  auto x = placeholder<float>("X", {4, 1000});
  const RVar k = reduce_axis(1000, "k");
  auto r = compute("R", {4}, [&](Var i) { return maximum ? max(x(i, k), k) : sum(x(i, k), k); });
  sched::State s(
      std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{x}, std::vector<ir::Tensor>{r}));
  s.split("R", 1, {threads});
  s.annotate("R", 0, sched::Annotation::BlockIdxX);
  s.annotate("R", 2, sched::Annotation::ThreadIdxX);
  return lower::lower_gpu(s, Target::cuda(), name);
}

// An fp16 NHWC convolution of an 8 x 8 image with `channels` channels, 3 x 3 window, padding
// 1, 32 outputs, for sm_90.
Task padded_nhwc_conv(int64_t channels) {
  auto x = placeholder<float16>("X", {1, 8, 8, channels});
  auto w = placeholder<float16>("W", {3, 3, channels, 32});
  return Task(std::make_shared<const ComputeDAG>(
                  std::vector<ir::Tensor>{x, w},
                  std::vector<ir::Tensor>{ops::conv2d_nhwc(x, w, {.padding = {1, 1}})}),
              Target::cuda("sm_90"));
}

// The task's sketches with a tensor-core tile.
std::vector<sched::State> tensor_core_sketches(const Task& task) {
  std::vector<sched::State> tc;
  for (const sched::State& s : search::generate_sketches(task))
    for (const sched::Stage& st : s.stages())
      for (int leaf : st.leaves)
        if (st.iters[leaf].annotation == sched::Annotation::Tensorized) tc.push_back(s);
  return tc;
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("sampled GPU programs of every op of the operator library compile to PTX for sm_90") {
    constexpr int per_op = 200, optimized_per_op = 2, batch = 50;
    int total = 0, kernels = 0, across = 0;
    for (const gpu_workload& w : operator_library()) {
      INFO(w.name);
      const Task task(w.dag, Target::cuda("sm_90"));
      const auto sketches = search::generate_sketches(task);
      std::mt19937_64 rng(17);
      const auto programs = search::sample_programs(sketches, task, {}, rng, per_op);
      // Ops without multi-level tiling (pooling, element-wise) have few programs: a thread
      // count per block from 5 candidates, times the unroll choices of their reductions.
      CHECK(programs.size() >= 5);
      std::string source;
      int in_batch = 0;
      auto compile = [&](const std::vector<std::string>& options) {
        const std::string ptx = cuda::compile_to_ptx(source, "sm_90", options, "loom_sampled.cu");
        CHECK(ptx.find(".target sm_90") != std::string::npos);
        source.clear();
        in_batch = 0;
      };
      for (size_t i = 0; i < programs.size(); ++i) {
        const lower::GpuProgram g =
            lower::lower_gpu(programs[i], task.target, "p" + std::to_string(i));
        kernels += static_cast<int>(g.kernels.size());
        const std::string one = cuda::to_cuda_source(g);
        CHECK(one.find("__global__") != std::string::npos);
        across += one.find("across threadIdx.x") != std::string::npos;
        if (static_cast<int>(i) < optimized_per_op) {
          source = one;
          compile({});
        }
        source += one;
        if (++in_batch == batch) compile({"-G"});
      }
      if (in_batch > 0) compile({"-G"});
      total += static_cast<int>(programs.size());
      MESSAGE(w.name << ": " << programs.size() << " sampled programs compiled to PTX");
    }
    MESSAGE(total << " programs (" << kernels << " kernels, " << across
                  << " of them reducing across threads) of 17 workloads compiled for sm_90");
    CHECK(across > 0);
  }

  TEST_CASE("a target's min_blocks_per_sm is every kernel's launch bounds and part of its name") {
    auto a = placeholder<float>("A", {64, 64});
    auto b = placeholder<float>("B", {64, 64});
    const auto dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                        std::vector<ir::Tensor>{ops::matmul(a, b)});
    const Target plain = Target::cuda("sm_90"), bounded = plain.with_min_blocks_per_sm(1);
    CHECK(plain.to_string() == "cuda -arch=sm_90");
    CHECK(bounded.to_string() == "cuda -arch=sm_90 -min-blocks=1");
    // Programs tuned under one are another task's records.
    CHECK(Task(dag, plain).target.to_string() != Task(dag, bounded).target.to_string());
    const Task task(dag, bounded);
    std::mt19937_64 rng(5);
    const auto programs =
        search::sample_programs(search::generate_sketches(task), task, {}, rng, 3);
    REQUIRE(!programs.empty());
    for (const sched::State& p : programs) {
      const lower::GpuProgram g = lower::lower_gpu(p, bounded, "bounded");
      const std::string threads = std::to_string(g.kernels[0].threads_per_block());
      const std::string src = cuda::to_cuda_source(g);
      CHECK(src.find("__launch_bounds__(" + threads + ", 1)") != std::string::npos);
      CHECK(cuda::to_cuda_source(lower::lower_gpu(p, plain, "plain"))
                .find("__launch_bounds__(" + threads + ")") != std::string::npos);
      CHECK(cuda::compile_to_ptx(src, "sm_90", {}).find(".entry") != std::string::npos);
    }
  }

  TEST_CASE("a reduction across threads prints warp shuffles, and shared memory past a warp") {
    // Row sums of 1000 columns, a block per row, k split over each thread count.
    struct expectation {
      int64_t threads;
      int shuffles;         // xor steps within a warp (or within a row shorter than one)
      bool shared_scratch;  // the warps' (or every thread's) values through shared memory
    };
    for (const expectation& e :
         {expectation{8, 3, false}, expectation{32, 5, false}, expectation{256, 5, true},
          expectation{96, 5, true}, expectation{48, 0, true}}) {
      CAPTURE(e.threads);
      const lower::GpuProgram g = row_reduction(false, e.threads, "row_sum");
      const std::string src = cuda::to_cuda_source(g);
      INFO(src);
      CHECK(occurrences(src, "__shfl_xor_sync") == static_cast<size_t>(e.shuffles));
      CHECK((src.find("loom_red_buf") != std::string::npos) == e.shared_scratch);
      CHECK(g.kernels[0].shared_bytes() ==
            4 * lower::all_reduce_scratch_elements(g.kernels[0].block));
      // Only thread 0 writes the row's sum.
      CHECK(src.find("if ((((int)threadIdx.x) == 0))") != std::string::npos);
      CHECK(cuda::compile_to_ptx(src).find(".entry row_sum_kernel0(") != std::string::npos);
    }
  }

  TEST_CASE(
      "every lane shuffles: a max across threads shuffles once per step, outside its select") {
    // Found on an H100: `v = shfl(v, o) > v ? shfl(v, o) : v` ran the second shuffle in only
    // the lanes whose condition held, and softmax's row maxima came out wrong or hung.
    const std::string src = cuda::to_cuda_source(row_reduction(true, 32, "row_max"));
    INFO(src);
    int shuffles = 0;
    std::istringstream lines(src);
    for (std::string line; std::getline(lines, line);)
      if (line.find("__shfl_xor_sync") != std::string::npos) {
        ++shuffles;
        CHECK(line.find("{ const float loom_o = __shfl_xor_sync(") != std::string::npos);
        CHECK(line.find('?') > line.find("__shfl_xor_sync"));  // the select after it
      }
    CHECK(shuffles == 5);
    CHECK(cuda::compile_to_ptx(src).find(".entry row_max_kernel0(") != std::string::npos);
  }

  TEST_CASE("16-bit matmuls print as unsigned short with conversion helpers and compile to PTX") {
    // bfloat16 and float16 operands, float32 sums, and a bfloat16 output stored through the
    // integer round-to-nearest-even helper; programs sampled from the GPU space (shared-memory
    // caches of A and B included) compile for sm_90, some with the full optimizer.
    for (bool bf : {true, false}) {
      const loom_test::workload w = bf ? loom_test::matmul_half<bfloat16>(64, 64, 64, true)
                                       : loom_test::matmul_half<float16>(64, 64, 64, true);
      INFO(w.name);
      const Task task(w.dag, Target::cuda("sm_90"));
      std::mt19937_64 rng(bf ? 36 : 37);
      const auto programs =
          search::sample_programs(search::generate_sketches(task), task, {}, rng, 12);
      REQUIRE(programs.size() >= 4);
      int shared = 0;
      for (size_t i = 0; i < programs.size(); ++i) {
        const std::string src = cuda::to_cuda_source(
            lower::lower_gpu(programs[i], task.target, "h" + std::to_string(i)));
        INFO(src);
        CHECK(src.find("const unsigned short* __restrict__ A") != std::string::npos);
        CHECK(src.find("unsigned short* __restrict__ D") != std::string::npos);
        CHECK(src.find(bf ? "loom_bf16_to_f32(" : "loom_f16_to_f32(") != std::string::npos);
        CHECK(src.find("loom_f32_to_bf16(") != std::string::npos);
        shared += src.find("__shared__ __align__(16) unsigned short") != std::string::npos;
        const std::string ptx = cuda::compile_to_ptx(
            src, "sm_90", i < 2 ? std::vector<std::string>{} : std::vector<std::string>{"-G"});
        CHECK(ptx.find(".target sm_90") != std::string::npos);
        // SIMT programs convert fp16 operands; tensor-core ones (the product fused into the
        // rounding consumer) feed them to mma.sync as they are.
        if (!bf && src.find("mma.sync") == std::string::npos)
          CHECK(ptx.find("cvt.f32.f16") != std::string::npos);
      }
      CHECK(shared > 0);
    }
  }

  TEST_CASE("16-bit convolutions: the pad stage rounds back to 16 bits, programs compile to PTX") {
    auto x = placeholder<bfloat16>("X", {1, 16, 14, 14});
    auto w = placeholder<bfloat16>("W", {32, 16, 3, 3});
    const auto dag = std::make_shared<const ComputeDAG>(
        std::vector<ir::Tensor>{x, w},
        std::vector<ir::Tensor>{ops::conv2d_nchw(x, w, {.padding = {1, 1}})});
    const Task task(dag, Target::cuda("sm_90"));
    std::mt19937_64 rng(38);
    const auto programs =
        search::sample_programs(search::generate_sketches(task), task, {}, rng, 6);
    REQUIRE(programs.size() >= 3);
    for (size_t i = 0; i < programs.size(); ++i) {
      const std::string src =
          cuda::to_cuda_source(lower::lower_gpu(programs[i], task.target, "c" + std::to_string(i)));
      INFO(src);
      CHECK(src.find("const unsigned short* __restrict__ X") != std::string::npos);
      CHECK(src.find("float* __restrict__ conv2d_nchw") != std::string::npos);
      CHECK(src.find("loom_bf16_to_f32(") != std::string::npos);
      const std::string ptx = cuda::compile_to_ptx(src, "sm_90", {"-G"});
      CHECK(ptx.find(".target sm_90") != std::string::npos);
    }
  }

  TEST_CASE("an fp16 NHWC convolution's tensor-core programs compile to mma.sync for sm_90") {
    const Task task = padded_nhwc_conv(16);
    const std::vector<sched::State> tc = tensor_core_sketches(task);
    REQUIRE(tc.size() == 2);
    std::mt19937_64 rng(39);
    std::string batch;
    int n = 0;
    for (const sched::State& p : search::sample_programs(tc, task, {}, rng, 6))
      batch += cuda::to_cuda_source(lower::lower_gpu(p, task.target, "tc" + std::to_string(n++)));
    REQUIRE(n >= 3);
    const std::string ptx = cuda::compile_to_ptx(batch, "sm_90", {"-G"});
    CHECK(ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") != std::string::npos);
  }

  TEST_CASE("a padded NHWC input's copy is 16-byte vectors, zero-filled where the window is out") {
    // The pad stage inlined into the input's shared copy: channels innermost, the bounds test
    // depends on the pixel alone, so 8 channels are all in or all out. Pipelined (where the
    // copy sits in a loop of two or more steps), one cp.async of 16 bytes whose source size is
    // 0 out of bounds (it fills zeros); otherwise a select between a 16-byte load and zeros.
    // Before, 8 guarded element copies through float32.
    const Task task = padded_nhwc_conv(64);
    const std::vector<sched::State> tc = tensor_core_sketches(task);
    REQUIRE(tc.size() == 2);
    for (const double pipelined : {1.0, 0.0}) {
      CAPTURE(pipelined);
      search::SearchOptions o;
      o.gpu_double_buffer_probability = pipelined;
      o.gpu_widest_copy_probability = 1;
      std::mt19937_64 rng(40);
      std::string batch;
      int n = 0, zero_filled = 0, selected = 0;
      for (const sched::State& p : search::sample_programs(tc, task, o, rng, 16)) {
        const std::string one =
            cuda::to_cuda_source(lower::lower_gpu(p, task.target, "pad" + std::to_string(n++)));
        zero_filled += one.find(".shared.global [%0], [%1], 16, %2;") != std::string::npos;
        selected += one.find(" ? *reinterpret_cast<const uint4*>(&X[") != std::string::npos &&
                    one.find(" : make_uint4(0u, 0u, 0u, 0u);") != std::string::npos;
        batch += one;
      }
      MESSAGE("pipelined " << pipelined << ": " << n << " programs, " << zero_filled
                           << " zero-filling cp.async, " << selected << " selecting vectors");
      REQUIRE(n >= 8);
      CHECK(zero_filled + selected == n);
      if (pipelined == 1.0)
        CHECK(zero_filled > 0);
      else
        CHECK(zero_filled == 0);
      CHECK(cuda::compile_to_ptx(batch, "sm_90", {"-G"}).find(".target sm_90") !=
            std::string::npos);
    }
  }

  TEST_CASE("a generated kernel names its buffers, launch bounds, shared memory and barriers") {
    auto a = placeholder<float>("A", {256, 256});
    auto b = placeholder<float>("B", {256, 256});
    const Task task(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                       std::vector<ir::Tensor>{ops::matmul(a, b)}),
                    Target::cuda());
    std::mt19937_64 rng(3);
    const sched::State p =
        search::sample_program(search::generate_sketches(task)[0], task, {}, rng);
    const lower::GpuProgram g = lower::lower_gpu(p, task.target, "gemm");
    const std::string src = cuda::to_cuda_source(g);
    INFO(src);
    CHECK(src.find("extern \"C\" __global__ void __launch_bounds__(" +
                   std::to_string(g.kernels[0].threads_per_block()) + ") gemm_kernel0(") !=
          std::string::npos);
    CHECK(src.find("const float* __restrict__ A") != std::string::npos);  // read only
    CHECK(src.find("float* __restrict__ matmul") != std::string::npos);
    CHECK(src.find("__shared__ __align__(16) float A_shared[") != std::string::npos);
    CHECK(src.find("__syncthreads();") != std::string::npos);
    CHECK(src.find("32-bit indices") != std::string::npos);
    CHECK(cuda::compile_to_ptx(src).find(".entry gemm_kernel0(") != std::string::npos);
  }

  TEST_CASE("a tensor-core tile prints one mma.sync per tile and compiles for sm_90") {
    for (const bool bf16 : {true, false}) {
      const auto dag = bf16 ? loom_test::half_matmul<bfloat16>(64, 64, 64)
                            : loom_test::half_matmul<float16>(64, 64, 64);
      const lower::GpuProgram g = lower::lower_gpu(
          loom_test::tensor_core_matmul(dag, {1, 2, 2, 2, true, true}), Target::cuda(), "mma");
      const std::string src = cuda::to_cuda_source(g);
      INFO(src);
      const std::string instruction = std::string("mma.sync.aligned.m16n8k16.row.col.f32.") +
                                      (bf16 ? "bf16.bf16" : "f16.f16") + ".f32";
      // Unrolled over the 2 x 2 tiles of a warp, inside the loop over k.
      CHECK(src.find("asm volatile(\"" + instruction) != std::string::npos);
      // A's rows lie along k in shared memory: ldmatrix. B's columns interleave two tiles
      // (4t + 2nt + q): two 16-bit loads a register.
      CHECK(src.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16") != std::string::npos);
      CHECK(src.find("(unsigned)B_shared[") != std::string::npos);
      const std::string ptx = cuda::compile_to_ptx(src, "sm_90");
      CHECK(occurrences(ptx, instruction) == 4);
    }
  }

  TEST_CASE("operands whose rows fit load with ldmatrix: x4 for A, x2.trans for B") {
    const auto dag = loom_test::half_matmul<bfloat16>(64, 64, 64);
    const lower::GpuProgram g = lower::lower_gpu(
        loom_test::tensor_core_matmul(dag, {1, 2, 2, 1, true, true}), Target::cuda(), "ldm");
    const std::string src = cuda::to_cuda_source(g);
    INFO(src);
    const std::string a = "ldmatrix.sync.aligned.m8n8.x4.shared.b16";
    const std::string b = "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16";
    CHECK(src.find(a) != std::string::npos);
    CHECK(src.find(b) != std::string::npos);
    const std::string ptx = cuda::compile_to_ptx(src, "sm_90");
    // Once per fragment and k-step: A for each of the warp's 2 tiles along M, B once for both.
    CHECK(occurrences(ptx, a) == 2);
    CHECK(occurrences(ptx, b) == 1);
  }

  TEST_CASE("B given as [N, K] loads with ldmatrix as stored, 16-bit and TF32") {
    // Two fragments along N a load (.x4), or one (.x2) where the warp has one.
    const std::string b = "ldmatrix.sync.aligned.m8n8.x4.shared.b16";
    {
      const lower::GpuProgram g = lower::lower_gpu(
          loom_test::tensor_core_matmul(loom_test::matmul_b_transposed<bfloat16>(64, 64, 64),
                                        {1, 2, 2, 1, true, true}),
          Target::cuda(), "ldm_nt1");
      const std::string ptx = cuda::compile_to_ptx(cuda::to_cuda_source(g), "sm_90");
      CHECK(ptx.find("ldmatrix.sync.aligned.m8n8.x2.shared.b16") != std::string::npos);
    }
    {
      const lower::GpuProgram g = lower::lower_gpu(
          loom_test::tensor_core_matmul(loom_test::matmul_b_transposed<bfloat16>(64, 64, 64),
                                        {1, 2, 2, 2, true, true}),
          Target::cuda(), "ldm_nt");
      const std::string src = cuda::to_cuda_source(g);
      INFO(src);
      CHECK(src.find("(unsigned)B_shared[") == std::string::npos);
      const std::string ptx = cuda::compile_to_ptx(src, "sm_90");
      CHECK(occurrences(ptx, b) ==
            2 + 1);  // A's 2 fragments; B's 2 in one load, once for both tiles along M
    }
    const lower::GpuProgram g = lower::lower_gpu(
        loom_test::tensor_core_matmul(loom_test::matmul_b_transposed<float>(64, 64, 32),
                                      {1, 2, 2, 2, true, true, 8}),
        Target::cuda().with_tf32(), "ldm_nt_tf32");
    const std::string src = cuda::to_cuda_source(g);
    INFO(src);
    CHECK(src.find(b) != std::string::npos);
    CHECK(src.find("__uint_as_float(loom_fb[") != std::string::npos);  // rounded after the load
    CHECK(cuda::compile_to_ptx(src, "sm_90").find(b) != std::string::npos);
  }

  TEST_CASE("a warp's 4 x 4 tiles load 4 A and 4 B fragments a k-step, not 16 of each") {
    const lower::GpuProgram g = lower::lower_gpu(
        loom_test::tensor_core_matmul(loom_test::matmul_b_transposed<bfloat16>(64, 32, 64),
                                      {1, 1, 4, 4, true, true}),
        Target::cuda(), "frag");
    const std::string src = cuda::to_cuda_source(g);
    INFO(src);
    CHECK(src.find("unsigned loom_fa[1][4], loom_fb[4][2];") != std::string::npos);
    const std::string ptx = cuda::compile_to_ptx(src, "sm_90");
    // B's 4 fragments two at a time: ldmatrix.x4, lanes 16-31 giving the second's rows.
    CHECK(occurrences(ptx, "mma.sync.aligned.m16n8k16") == 16);
    CHECK(occurrences(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 4 + 2);
    CHECK(occurrences(ptx, "ldmatrix.sync.aligned.m8n8.x2.shared.b16") == 0);
    CHECK(ptx.find("ld.local") == std::string::npos);  // the fragments stay in registers
  }

  TEST_CASE("a warp's 1 x 32 tiles load B two fragments at every other tile along N") {
    const lower::GpuProgram g = lower::lower_gpu(
        loom_test::tensor_core_matmul(loom_test::matmul_b_transposed<bfloat16>(16, 256, 16),
                                      {1, 1, 1, 32, true, true}),
        Target::cuda(), "frag_wide");
    const std::string src = cuda::to_cuda_source(g);
    INFO(src);
    CHECK(src.find("unsigned loom_fa[1][4], loom_fb[2][2];") != std::string::npos);
    const std::string ptx = cuda::compile_to_ptx(src, "sm_90");
    // One k-step: 32 instructions, A once, B's 32 fragments in 16 loads.
    CHECK(occurrences(ptx, "mma.sync.aligned.m16n8k16") == 32);
    CHECK(occurrences(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 1 + 16);
    CHECK(occurrences(ptx, "ldmatrix.sync.aligned.m8n8.x2.shared.b16") == 0);
    CHECK(ptx.find("ld.local") == std::string::npos);
  }

  TEST_CASE("a TF32 tile rounds its float32 operands and compiles to m16n8k8 for sm_90") {
    const lower::GpuProgram g =
        lower::lower_gpu(loom_test::tensor_core_matmul(loom_test::float_matmul(64, 64, 32),
                                                       {1, 2, 2, 2, true, true, 8}),
                         Target::cuda().with_tf32(), "mma_tf32");
    const std::string src = cuda::to_cuda_source(g);
    INFO(src);
    const std::string instruction = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
    CHECK(src.find("asm volatile(\"" + instruction) != std::string::npos);
    CHECK(src.find("cvt.rna.tf32.f32") != std::string::npos);
    // A's rows of 4 floats load with ldmatrix.x4 and are rounded after it.
    CHECK(src.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16") != std::string::npos);
    CHECK(src.find("__uint_as_float(loom_fa[") != std::string::npos);
    const std::string ptx = cuda::compile_to_ptx(src, "sm_90");
    const size_t found = occurrences(ptx, instruction),
                 rounded = occurrences(ptx, "cvt.rna.tf32.f32");
    // The warp's 2 x 2 tiles, unrolled in the loop over k; their 2 x 4 A registers and 2 x 2 B
    // registers rounded once each, after their one load a k-step.
    CHECK(found == 4);
    CHECK(rounded == 2 * 4 + 2 * 2);
  }

  TEST_CASE("a vectorized copy of aligned consecutive elements is one vector access, else a loop") {
    // C[16, 32] = A[16, k] B[k, 32]; A's rows of a block go to shared memory, each of the 32
    // threads copying 4 consecutive floats. With k = 8 a thread's 4 stay in one row at a multiple
    // of 4; with k = 6 they would cross a row (and the last thread's run past it): a loop.
    for (const int64_t k : {8, 6}) {
      auto a = placeholder<float>("A", {16, k});
      auto b = placeholder<float>("B", {k, 32});
      auto c = ops::matmul(a, b);
      const auto dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                          std::vector<ir::Tensor>{c});
      sched::State s(dag);
      s.split(c.name(), 1, {32});  // i j.0 j.1 k
      s.annotate(c.name(), 0, sched::Annotation::BlockIdxX);
      s.annotate(c.name(), 2, sched::Annotation::ThreadIdxX);
      const std::string as = s.cache_read("A", ir::MemoryScope::Shared, {c.name()});
      s.compute_at(as, c.name(), 0);  // one row of A per block
      s.split(as, 1, {4});
      s.annotate(as, 0, sched::Annotation::ThreadIdxX);
      s.annotate(as, 2, sched::Annotation::Vectorized);
      const std::string src = cuda::to_cuda_source(lower::lower_gpu(s, Target::cuda(), "copy"));
      INFO(src);
      if (k == 8)
        CHECK(src.find("*reinterpret_cast<uint4*>(&A_shared[") != std::string::npos);
      else
        CHECK(src.find("reinterpret_cast<uint") == std::string::npos);
      CHECK(cuda::compile_to_ptx(src).find(".entry copy_kernel0(") != std::string::npos);
    }
  }

  TEST_CASE("a vectorized store packs the values computed lane by lane into one vector") {
    // Y[4, w] = X[4, w] * 2, each thread computing 4 (float) or 8 (fp16) consecutive outputs.
    // With w = 32 a thread's run starts at a multiple of its length: one uint4 store of the
    // four floats' bits (of eight halves, two a word, the first low); with w = 30 the runs
    // cross rows and the last passes the end: a loop of element stores.
    for (const bool half : {false, true}) {
      for (const int64_t w : {32, 30}) {
        CAPTURE(half);
        CAPTURE(w);
        auto x = placeholder<float>("X", {4, w});
        ir::Tensor y;
        if (half)
          y = compute("Y", {4, w}, [&](Var i, Var j) { return cast<float16>(x(i, j) * 2.0f); });
        else
          y = compute("Y", {4, w}, [&](Var i, Var j) { return x(i, j) * 2.0f; });
        const auto dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{x},
                                                            std::vector<ir::Tensor>{y});
        const int64_t lanes = half ? 8 : 4;
        sched::State s(dag);
        s.split("Y", 1, {lanes});  // i j.0 j.1
        s.annotate("Y", 0, sched::Annotation::BlockIdxX);
        s.annotate("Y", 1, sched::Annotation::ThreadIdxX);
        s.annotate("Y", 2, sched::Annotation::Vectorized);
        const std::string src = cuda::to_cuda_source(lower::lower_gpu(s, Target::cuda(), "st"));
        INFO(src);
        const std::string kernel = src.substr(src.find("__global__"));  // past the prelude
        if (w == 32) {
          CHECK(occurrences(kernel, "*reinterpret_cast<uint4*>(&Y[") == 1);
          CHECK(occurrences(kernel, "make_uint4(") == 1);
          if (half) {
            CHECK(occurrences(kernel, " << 16))") == 4);  // lanes 1, 3, 5, 7 in the high halves
          } else {
            CHECK(occurrences(kernel, "__float_as_uint(") == 4);
            // Lane v reads X at the run's base + v.
            for (const char* lane : {" + 1)]", " + 2)]", " + 3)]"})
              CHECK(kernel.find(lane) != std::string::npos);
          }
        } else {
          CHECK(kernel.find("reinterpret_cast<uint") == std::string::npos);
        }
        CHECK(cuda::compile_to_ptx(src).find(".entry st_kernel0(") != std::string::npos);
      }
    }
  }

  TEST_CASE("a pipelined loop copies with cp.async and waits for all but its last groups") {
    // C[16, 32] = A[16, 32] B[32, 32], the reduction split into 4 steps of 8; each step's 8
    // elements of A's row go to shared memory as two 16-byte copies, in 2, 3 or 4 slots.
    auto a = placeholder<float>("A", {16, 32});
    auto b = placeholder<float>("B", {32, 32});
    auto c = ops::matmul(a, b);
    const auto dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                        std::vector<ir::Tensor>{c});
    std::vector<float> x(16 * 32), y(32 * 32), want(16 * 32);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3;
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i % 5) - 2;
    evaluate(*dag, {x.data(), y.data(), want.data()});
    for (const int stages : {2, 3, 4}) {
      CAPTURE(stages);
      sched::State s(dag);
      s.split(c.name(), 1, {32});  // i j.0 j.1 k
      s.split(c.name(), 3, {8});   // i j.0 j.1 k.0 k.1
      s.annotate(c.name(), 0, sched::Annotation::BlockIdxX);
      s.annotate(c.name(), 2, sched::Annotation::ThreadIdxX);
      const std::string as = s.cache_read("A", ir::MemoryScope::Shared, {c.name()});
      s.compute_at(as, c.name(), 3);  // 8 elements of A's row per step of k
      s.split(as, 1, {4});
      s.annotate(as, 1, sched::Annotation::ThreadIdxX);
      s.annotate(as, 2, sched::Annotation::Vectorized);
      s.annotate(c.name(), 3, ir::pipelined_kind(stages));
      const lower::GpuProgram g = lower::lower_gpu(s, Target::cuda("sm_80"), "piped");
      const std::string src = cuda::to_cuda_source(g);
      INFO(src);
      CHECK(src.find("cp.async.cg.shared.global [%0], [%1], 16;") != std::string::npos);
      // The prologue's stages - 1 groups and the step's.
      CHECK(occurrences(src, "cp.async.commit_group;") == static_cast<size_t>(stages));
      // The wait comes right before the barrier at the top of each step.
      const std::string wait = "cp.async.wait_group " + std::to_string(stages - 2) +
                               ";\\n\" ::: \"memory\");\n    __syncthreads();";
      CHECK(src.find(wait) != std::string::npos);
      for (const char* arch : {"sm_80", "sm_90"}) {
        const std::string ptx = cuda::compile_to_ptx(src, arch);
        CHECK(ptx.find("cp.async.cg.shared.global") != std::string::npos);
        CHECK(ptx.find("cp.async.wait_group " + std::to_string(stages - 2)) != std::string::npos);
      }
      std::vector<float> got(16 * 32, NAN);
      lower::emulate(g, {x.data(), y.data(), got.data()});
      CHECK(got == want);
    }
  }

  TEST_CASE("a warpgroup tile prints as wgmma.mma_async on sm_90a, and ptxas takes it") {
    struct config {
      loom_test::warpgroup_tiling t;
      bool b_transposed;
    };
    // B [K, N] (MN-major, trans-b 1) and [N, K] (K-major); 2 warpgroups in 3 pipeline stages
    // take 72 KiB of shared memory (144 KiB at N = 256), past the static limit: dynamic, its
    // base rounded to 1024.
    // Two warpgroups of m64n256 (128 accumulators a thread), B's rows in chunks of 128 bytes.
    for (const config& c :
         {config{{1, 8, 64, true, 0}, false}, config{{1, 16, 32, true, 0}, true},
          config{{2, 8, 64, true, 3}, false}, config{{2, 32, 64, true, 3}, false}}) {
      CAPTURE(c.t.groups);
      CAPTURE(c.b_transposed);
      const int64_t M = 128 * c.t.groups, N = 16 * c.t.nt, K = 256;
      const auto dag = c.b_transposed ? loom_test::matmul_b_transposed<bfloat16>(M, N, K)
                                      : loom_test::half_matmul<bfloat16>(M, N, K);
      Target hopper = Target::cuda("sm_90a");
      hopper.max_shared_memory_per_block = 227 * 1024;
      const lower::GpuProgram g =
          lower::lower_gpu(loom_test::warpgroup_matmul(dag, c.t, c.b_transposed), hopper, "wg");
      const std::string src = cuda::to_cuda_source(g);
      INFO(src);
      const std::string instruction =
          "wgmma.mma_async.sync.aligned.m64n" + std::to_string(8 * c.t.nt) + "k16.f32.bf16.bf16";
      // Printed once, inside the unrolled loop over the copy's k-steps, then one wait.
      CHECK(occurrences(src, instruction + " {%0, ") == 1);
      CHECK(src.find(std::string("p, 1, 1, 0, ") + (c.b_transposed ? "0" : "1") + ";") !=
            std::string::npos);
      CHECK(occurrences(src, "wgmma.wait_group.sync.aligned 0;") == 1);
      CHECK(
          src.find("fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n    __syncthreads();") !=
          std::string::npos);
      const bool dynamic = cuda::dynamic_shared_bytes(g.kernels[0]) > 0;
      CHECK(dynamic == (c.t.pipeline_stages > 0));
      if (dynamic)
        CHECK(src.find("loom_shared_base") != std::string::npos);
      else
        CHECK(occurrences(src, "__shared__ __align__(1024)") == 2);
      // ptxas (inside NVRTC) assembles the instruction for sm_90a and refuses it for sm_90.
      CHECK_FALSE(cuda::compile_to_cubin(src, "sm_90a").empty());
      CHECK_THROWS(cuda::compile_to_cubin(src, "sm_90"));
    }
  }

  TEST_CASE("a TF32 warpgroup tile prints as wgmma m64nNk8 without transposes, and assembles") {
    Target hopper = Target::cuda("sm_90a").with_tf32();
    hopper.max_shared_memory_per_block = 227 * 1024;
    const auto dag = loom_test::matmul_b_transposed<float>(256, 128, 256);
    const lower::GpuProgram g = lower::lower_gpu(
        loom_test::warpgroup_matmul(dag, {2, 16, 32, true, 3, 8}, true), hopper, "wg");
    const std::string src = cuda::to_cuda_source(g);
    INFO(src);
    CHECK(occurrences(src, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0, ") == 1);
    CHECK(src.find("p, 1, 1;") != std::string::npos);
    CHECK_FALSE(cuda::compile_to_cubin(src, "sm_90a").empty());
  }

  TEST_CASE("sampled warpgroup-MMA programs of bf16 and fp16 GEMMs assemble for sm_90a") {
    // ptxas (in NVRTC) takes every operand count, N and layout the search draws: a CUBIN for
    // each sampled program that has a wgmma, its registers within the block's share.
    Target hopper = Target::cuda("sm_90a");
    hopper.max_shared_memory_per_block = 227 * 1024;
    struct shape {
      int64_t m, n, k;
      bool b_transposed, bf16;
    };
    int wgmma = 0;
    for (const shape sh : {shape{512, 256, 256, false, true}, shape{256, 512, 128, true, false}}) {
      const auto dag = sh.b_transposed
                           ? (sh.bf16 ? loom_test::matmul_b_transposed<bfloat16>(sh.m, sh.n, sh.k)
                                      : loom_test::matmul_b_transposed<float16>(sh.m, sh.n, sh.k))
                           : (sh.bf16 ? loom_test::half_matmul<bfloat16>(sh.m, sh.n, sh.k)
                                      : loom_test::half_matmul<float16>(sh.m, sh.n, sh.k));
      const Task task(dag, hopper);
      std::mt19937_64 rng(23);
      for (const sched::State& p :
           search::sample_programs(search::generate_sketches(task), task, {}, rng, 24)) {
        const lower::GpuProgram g = lower::lower_gpu(p, hopper, "wg");
        if (g.kernels[0].wgmma_operands.empty()) continue;
        ++wgmma;
        const std::string src = cuda::to_cuda_source(g);
        CHECK_MESSAGE(!cuda::compile_to_cubin(src, "sm_90a").empty(), p.to_string());
      }
    }
    MESSAGE(wgmma << " sampled warpgroup-MMA programs assembled for sm_90a");
    CHECK(wgmma >= 8);
  }

  TEST_CASE("sampled programs copy 16-bit and 32-bit operands into shared memory as vectors") {
    int vector_copies = 0;
    for (const bool bf16 : {true, false}) {
      auto make = [&]() -> std::shared_ptr<const ComputeDAG> {
        if (bf16) return loom_test::half_matmul<bfloat16>(128, 128, 64);
        auto a = placeholder<float>("A", {128, 64});
        auto b = placeholder<float>("B", {64, 128});
        return std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                  std::vector<ir::Tensor>{ops::matmul(a, b)});
      };
      const Task task(make(), Target::cuda());
      std::mt19937_64 rng(23);
      std::string batch;
      int n = 0;
      for (const sched::State& p :
           search::sample_programs(search::generate_sketches(task), task, {}, rng, 16)) {
        const std::string one =
            cuda::to_cuda_source(lower::lower_gpu(p, task.target, "v" + std::to_string(n++)));
        // A plain vector copy, or an asynchronous one of 8 or 16 bytes (a pipelined loop).
        vector_copies += one.find("*reinterpret_cast<const uint") != std::string::npos ||
                         one.find("], 16;") != std::string::npos ||
                         one.find("], 8;") != std::string::npos;
        batch += one;
      }
      CHECK(cuda::compile_to_ptx(batch, "sm_90", {"-G"}).find(".target sm_90") !=
            std::string::npos);
    }
    CHECK(vector_copies >= 8);
  }
}
