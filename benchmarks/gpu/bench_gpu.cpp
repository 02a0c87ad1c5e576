// bench_gpu: loom's tuned GPU kernels against cuBLAS and cuDNN, in one run (issues 7 and 36).
// A workload is one DAG at one precision; its name ends in the precision, and its contenders are
// LoomTuned and LoomDefault (fp32 workloads; the TF32 GEMM: the fp32 DAG on a target that allows
// TF32, Target::with_tf32, tuned with TF32 tensor-core and SIMT sketches; and the bf16 and fp16
// GEMMs and batched GEMMs: 16-bit placeholders, float32 products summed in float32, tuned with
// tensor-core and SIMT sketches; the fp16 NHWC convs likewise, their float32 sums rounded to an
// fp16 output as cuDNN's) and the vendor library's call for that precision:
//   - gemm4096_{fp32,tf32,bf16,fp16}: C[4096,4096] = A[4096,4096] B[4096,4096];
//   - gemm4096_nt_{tf32,bf16}: the same with B given as [N, K] (C = A B^T, a linear layer's
//     weight as PyTorch stores it);
//   - bert_ffn{1,2}_m{128,4096}_{fp32,bf16}: BERT-base's feed-forward products, ffn1 [M,768] x
//     [768,3072], ffn2 [M,3072] x [3072,768];
//   - bert_ffn{1,2}_nt_m{128,4096}_bf16: the same with the weight as nn.Linear stores it, [N, K];
//   - bmm_{qk,av}_b{12,384}_{fp32,bf16}: BERT-base's attention products per head, batch 12 (one
//     sequence) or 384 (32 sequences): qk [B,128,64] x [B,64,128], av [B,128,128] x [B,128,64]
//     (av at batch 12 only);
//   - conv2d_nchw_n1_64x56x56_k64_3x3_fp32: NCHW N=1 C=64 H=W=56 K=64 3x3 pad 1;
//   - conv2d_nhwc_n{1,32}_<C>x<H>x<W>_k<K>_<R>x<S>_fp16: ResNet-50's stride-1 layers (3x3 64,
//     128, 256, 512 channels at 56, 28, 14, 7; 1x1 64->256 and 256->64 at 56, 1024->256 at 14),
//     NHWC, fp16 in and out (tensor-core sketches where the batch, rows and columns make M a
//     multiple of 16: all at batch 32, the 56 and 28 layers at batch 1);
//   - softmax and layer norm over the rows of 4096 x 4096 and of BERT-base's 128 x 768: LoomTuned
//     and LoomDefault, measured against the DRAM's peak bandwidth (counter DRAM: bytes of the
//     inputs and the output, each moved once, per second, as a fraction of the peak).
// The vendor contenders (row-major products as the column-major C^T = B^T A^T, alpha 1, beta 0,
// CUBLAS_GEMM_DEFAULT, the handle in CUBLAS_DEFAULT_MATH):
//   - Cublas (fp32): cublasSgemm / cublasSgemmStridedBatched, FP32 FMA, no TF32;
//   - CublasTf32: cublasGemmEx / cublasGemmStridedBatchedEx, fp32 A, B and C, compute type
//     CUBLAS_COMPUTE_32F_FAST_TF32;
//   - CublasBf16, CublasFp16: the same calls with bf16 (fp16) A and B, fp32 C, CUBLAS_COMPUTE_32F;
//   - CudnnFmaMath, CudnnDefaultMath (fp32 NCHW conv): cudnnConvolutionForward in
//     CUDNN_FMA_MATH (fp32 kernels only) and in CUDNN_DEFAULT_MATH (TF32 allowed);
//   - CudnnFp16 (fp16 NHWC conv): fp16 x, y and KRSC filter, fp32 compute type,
//     CUDNN_TENSOR_OP_MATH.
// Every cuDNN contender runs the fastest algorithm cudnnFindConvolutionForwardAlgorithm reports
// (printed with its math type when the plan is made).
//
//   bench_gpu [--trials=N] [--records=FILE] [--workloads=NAME,...] [--double-buffer=P]
//             [--max-stages=S] [--pad-shared=P] [--lane-major=P] [--widest-copy=P]
//             [--vector-stores=0|1] [--swizzle-shared=P] [--deep-k-tiles=0|1]
//             [--min-blocks=N] [--ansor-features] [--model] [--arch=ARCH]
//             [Google Benchmark flags]
//   bench_gpu --list-workloads [--workloads=NAME,...]   (names and GFLOP per call; no GPU needed)
//
// --workloads keeps the workloads whose names start with one of the given prefixes (all by
// default), for tuning and for timing: gemm4096 keeps the six GEMMs, gemm4096_bf16 one.
//
// With --trials=N (N > 0) each workload with loom contenders is first tuned for N more programs
// on this GPU (cuda::tune, resuming from FILE, default gpu_tuned.jsonl); its tuning wall time is
// printed, and its best-so-far curve (TuneReport::curve: trial of this run, best time so far in
// microseconds, seconds since tuning began; a resumed run starts from the log's best) written to
// FILE.<workload>.curve.csv. The LoomTuned contender is the best program of FILE; a line says
// whether it uses tensor cores, ldmatrix and cp.async, in how many pipeline stages, and whether
// its shared copies are stored lane-major.
// --model adds the contender LoomModel: cuda::compile_from_model's kernel, the pretrained GPU
// model's best 8 programs and the default schedule measured on this GPU, the fastest kept, as a
// user gets for a shape nobody tuned (a line says which pick it is and how long it took).
// --double-buffer=P sets how often tuning draws pipelined programs
// (SearchOptions::gpu_double_buffer_probability, 0.5 by default): tuning into two record files
// with 0 and 1 measures what pipelining is worth. --max-stages=S: the most pipeline stages
// tuning draws (SearchOptions::gpu_max_pipeline_stages, 2 to 4, 4 by default); 2 against 4
// measures what the deeper pipelines are worth.
// --pad-shared=P: how often tensor-core operands' shared rows are padded against bank conflicts
// (SearchOptions::gpu_pad_shared_probability, 1 by default); 0 against 1 measures the padding.
// --lane-major=P: how often tensor-core operands' shared copies are stored lane-major
// (SearchOptions::gpu_lane_major_probability, 1 by default); 0 against 1 measures it.
// --widest-copy=P: how often a shared copy takes the widest vector its layout allows rather
// than a drawn one (SearchOptions::gpu_widest_copy_probability, 0.9 by default); 0 against the
// default measures it. --vector-stores=0: a thread's results stored element by element, not as
// vectors (SearchOptions::gpu_vector_stores, on by default). --swizzle-shared=P: how often a
// tensor-core operand's shared rows drawn for padding are swizzled instead where they can be
// (SearchOptions::gpu_swizzle_shared_probability, 0.5 by default); 0 against 1 measures it.
// --deep-k-tiles=0: the tensor-core sketches copy one instruction's k into shared memory per
// step only (SearchOptions::gpu_deep_k_tiles, on by default: also a sketch whose copies hold
// every step of the reduction's middle level).
// --min-blocks=N: every kernel's launch bounds ask ptxas for N blocks an SM
// (Target::min_blocks_per_sm; none by default, ptxas then trades registers for occupancy): 1
// against the default, each into its own records (the target's name differs), measures it.
// --arch=sm_90a compiles every loom contender for that architecture rather than the device's
// (cuda::device_target): on an H100 or H200, sm_90a lets tensor-core tiles run as warpgroup
// MMAs (wgmma.mma_async, lower::WgmmaNest; Target::warpgroup_mma) and the search samples
// warpgroup tiles; records are the target's own.
// --ansor-features tunes with a cost model that learns from Ansor's 164 features only, without
// loom's GPU features (tensor-core multiply-adds, pipelining, shared bytes; cost/features.hpp):
// against a run without it, into another record file, it measures what they are worth.
//
// The inputs are random multiples of 1/64 in [0.5, 1.5], exact in bf16, fp16 and TF32: every
// precision of a shape multiplies the same numbers. Before timing, every contender's output is
// compared with LoomDefault's output for the fp32 DAG (16-bit outputs widened to fp32) as the
// tuner's measurer compares, and a contender whose call fails is left out. Times come from CUDA
// events around 10 back-to-back calls (manual time, per call); --benchmark_min_time=0.1 shortens
// a run (default 0.5 s per contender). cuBLAS and cuDNN are loaded with dlopen
// (libcublas.so.13, libcudnn.so.9: set LD_LIBRARY_PATH when they are elsewhere); a missing one
// only removes its contenders. Exits with 77 when there is no GPU.
#include <loom/cuda.hpp>
#include <loom/ops.hpp>
#include <loom/ops/untyped.hpp>
#include <loom/backend/measure_data.hpp>
#include <loom/cost/features.hpp>

#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include "gpu_workloads.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

using namespace loom;
using namespace loom_bench_gpu;

namespace {

// --- 16-bit floats on the host -------------------------------------------------------------------

/// An element type of a device buffer.
enum class Elem { f32, bf16, f16 };

size_t elem_bytes(Elem e) { return e == Elem::f32 ? 4 : 2; }

/// fp32 -> bf16, rounded to nearest even (NaN stays a quiet NaN).
uint16_t to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

float from_bf16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

/// fp32 -> IEEE fp16, rounded to nearest even; past 65504 (by half a step or more) infinity.
uint16_t to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t x = bits & 0x7fffffffu;
  uint32_t h = 0;
  if (x > 0x7f800000u) {
    h = 0x7e00;  // NaN
  } else if (x >= 0x477ff000u) {
    h = 0x7c00;  // 65520 and up: infinity
  } else if (x < 0x38800000u) {
    // Below 2^-14: a subnormal or zero, in units of 2^-24 (1024 is the smallest normal's code).
    h = static_cast<uint32_t>(std::nearbyint(std::bit_cast<float>(x) * 16777216.0f));
  } else {
    const uint32_t y = x - (112u << 23);  // exponent bias 127 -> 15
    h = (y + 0xfffu + ((y >> 13) & 1)) >> 13;
  }
  return static_cast<uint16_t>(sign | h);
}

float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

/// `values` stored as `e` in a new device buffer.
cuda::DeviceBuffer upload_as(const std::vector<float>& values, Elem e) {
  cuda::DeviceBuffer b(values.size() * elem_bytes(e));
  if (e == Elem::f32) {
    b.upload(values.data(), b.bytes());
  } else {
    std::vector<uint16_t> h(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      h[i] = e == Elem::bf16 ? to_bf16(values[i]) : to_f16(values[i]);
    b.upload(h.data(), b.bytes());
  }
  return b;
}

/// The first `n` elements of `b`, stored as `e`, widened to fp32.
std::vector<float> download_as_float(const cuda::DeviceBuffer& b, size_t n, Elem e) {
  std::vector<float> out(n);
  if (e == Elem::f32) {
    b.download(out.data(), n * sizeof(float));
  } else {
    std::vector<uint16_t> h(n);
    b.download(h.data(), n * sizeof(uint16_t));
    for (size_t i = 0; i < n; ++i) out[i] = e == Elem::bf16 ? from_bf16(h[i]) : from_f16(h[i]);
  }
  return out;
}

// --- workloads -----------------------------------------------------------------------------------

Elem input_elem(Precision p) {
  return p == Precision::bf16 ? Elem::bf16 : p == Precision::fp16 ? Elem::f16 : Elem::f32;
}

/// LoomDefault's program and output for a DAG (the default schedule: one thread per output
/// element, checked against the interpreter in the tests), made once per workload key:
/// workloads of one shape in several precisions share them, their inputs holding the same
/// numbers.
struct Reference {
  std::shared_ptr<cuda::Program> program;
  std::vector<float> output;
};

struct Workload {
  std::string name;
  Precision precision = Precision::fp32;
  Task task;  ///< the fp32 DAG (Spec::inputs, Spec::output)
  /// The task loom's contenders are built from and tuned for: `task` for fp32 workloads, the
  /// 16-bit DAG of Spec::loom_inputs for bf16 and fp16 GEMMs, none for the others. Its inputs are
  /// `buffers` as they are (DAG layouts, input_elem(precision)).
  std::optional<Task> loom_task;
  /// Inputs in the DAG's layouts, stored as input_elem(precision), then the output.
  std::vector<cuda::DeviceBuffer> buffers;
  Elem output_elem = Elem::f32;
  /// The conv weight in cuDNN's KRSC order (fp16 NHWC workloads; the DAG's is HWIO).
  cuda::DeviceBuffer krsc_weight;
  std::shared_ptr<const Reference> reference;
  GemmShape gemm;
  ConvShape conv;
  bool memory_bound = false;
};

std::vector<cuda::CUdeviceptr> pointers(const Workload& w) {
  std::vector<cuda::CUdeviceptr> p;
  for (const cuda::DeviceBuffer& b : w.buffers) p.push_back(b.ptr());
  return p;
}

/// Random multiples of 1/64 in [0.5, 1.5] for each input (the same for the same shapes): exact
/// in bf16, fp16 and TF32, so every precision of a shape computes with the same numbers.
std::vector<std::vector<float>> input_values(const std::vector<ir::Tensor>& inputs) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(32, 96);
  std::vector<std::vector<float>> v;
  for (const ir::Tensor& t : inputs) {
    v.emplace_back(static_cast<size_t>(t.num_elements()));
    for (float& x : v.back()) x = static_cast<float>(d(rng)) / 64.0f;
  }
  return v;
}

std::shared_ptr<const Reference> reference_for(
    const Task& task, const std::vector<std::vector<float>>& inputs,
    std::map<std::string, std::shared_ptr<const Reference>>& cache) {
  auto& slot = cache[task.workload_key()];
  if (slot) return slot;
  auto ref = std::make_shared<Reference>();
  cuda::CompiledProgram c = cuda::build(task);
  ref->program = std::make_shared<cuda::Program>(c.image, std::move(c.plan));
  std::vector<cuda::DeviceBuffer> fp32;
  std::vector<cuda::CUdeviceptr> args;
  for (const std::vector<float>& v : inputs) {
    fp32.push_back(upload_as(v, Elem::f32));
    args.push_back(fp32.back().ptr());
  }
  const auto out_elements = static_cast<size_t>(task.dag->outputs()[0].num_elements());
  fp32.emplace_back(out_elements * sizeof(float));
  args.push_back(fp32.back().ptr());
  ref->program->launch(args);
  ref->output = download_as_float(fp32.back(), out_elements, Elem::f32);
  slot = ref;
  return slot;
}

/// HWIO [R,S,C,K] -> KRSC [K,R,S,C].
std::vector<float> hwio_to_krsc(const std::vector<float>& w, const ConvShape& s) {
  std::vector<float> out(w.size());
  for (int r = 0; r < s.r; ++r)
    for (int q = 0; q < s.s; ++q)
      for (int c = 0; c < s.c; ++c)
        for (int k = 0; k < s.k; ++k)
          out[((static_cast<size_t>(k) * s.r + r) * s.s + q) * s.c + c] =
              w[((static_cast<size_t>(r) * s.s + q) * s.c + c) * s.k + k];
  return out;
}

Workload make_workload(const Spec& spec, const Target& target,
                       std::map<std::string, std::shared_ptr<const Reference>>& references) {
  Workload w{
      spec.name, spec.precision,
      Task(std::make_shared<const ComputeDAG>(spec.inputs, std::vector<ir::Tensor>{spec.output}),
           target)};
  w.loom_task =
      spec.precision == Precision::fp32 ? std::optional<Task>(w.task) : loom_task(spec, target);
  const std::vector<std::vector<float>> values = input_values(spec.inputs);
  for (const std::vector<float>& v : values)
    w.buffers.push_back(upload_as(v, input_elem(spec.precision)));
  // cuDNN's fp16 convolution writes fp16; cuBLAS writes fp32 at every precision.
  w.output_elem = spec.conv.n > 0 && spec.precision == Precision::fp16 ? Elem::f16 : Elem::f32;
  w.buffers.emplace_back(static_cast<size_t>(spec.output.num_elements()) *
                         elem_bytes(w.output_elem));
  if (spec.conv.n > 0 && spec.precision == Precision::fp16)
    w.krsc_weight = upload_as(hwio_to_krsc(values[1], spec.conv), Elem::f16);
  w.reference = reference_for(w.task, values, references);
  w.gemm = spec.gemm;
  w.conv = spec.conv;
  w.memory_bound = spec.memory_bound;
  return w;
}

// --- cuBLAS and cuDNN, the few calls we need, through dlopen ------------------------------------

void* open_first(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_NOW | RTLD_GLOBAL)) return h;
  return nullptr;
}

template <class F>
F sym(void* lib, const char* name) {
  return lib ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

// The enumerators we pass, with their values in library_types.h, cublas_api.h and cudnn's
// headers (C enums: int-sized arguments).
constexpr int CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14;
constexpr int CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_DEFAULT_MATH = 0, CUBLAS_GEMM_DEFAULT = -1;
constexpr int CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77;
constexpr int CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1;
constexpr int CUDNN_DATA_FLOAT = 0, CUDNN_DATA_HALF = 2;
constexpr int CUDNN_CROSS_CORRELATION = 1;
constexpr int CUDNN_DEFAULT_MATH = 0, CUDNN_TENSOR_OP_MATH = 1, CUDNN_FMA_MATH = 3;

struct Cublas {
  using Handle = void*;
  int (*create)(Handle*) = nullptr;
  int (*set_math_mode)(Handle, int) = nullptr;
  int (*sgemm)(Handle, int, int, int, int, int, const float*, const float*, int, const float*, int,
               const float*, float*, int) = nullptr;
  int (*sgemm_strided)(Handle, int, int, int, int, int, const float*, const float*, int, long long,
                       const float*, int, long long, const float*, float*, int, long long,
                       int) = nullptr;
  int (*gemm_ex)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*,
                 int, int, const void*, void*, int, int, int, int) = nullptr;
  int (*gemm_strided_ex)(Handle, int, int, int, int, int, const void*, const void*, int, int,
                         long long, const void*, int, int, long long, const void*, void*, int, int,
                         long long, int, int, int) = nullptr;
  Handle handle = nullptr;

  bool load() {
    void* lib = open_first({"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13",
                            "libcublas.so.12", "libcublas.so"});
    create = sym<decltype(create)>(lib, "cublasCreate_v2");
    set_math_mode = sym<decltype(set_math_mode)>(lib, "cublasSetMathMode");
    sgemm = sym<decltype(sgemm)>(lib, "cublasSgemm_v2");
    sgemm_strided = sym<decltype(sgemm_strided)>(lib, "cublasSgemmStridedBatched");
    gemm_ex = sym<decltype(gemm_ex)>(lib, "cublasGemmEx");
    gemm_strided_ex = sym<decltype(gemm_strided_ex)>(lib, "cublasGemmStridedBatchedEx");
    if (!create || !sgemm || create(&handle) != 0) return false;
    // FP32 FMA for cublasSgemm, no TF32; the Ex calls' compute types choose for themselves.
    if (set_math_mode) set_math_mode(handle, CUBLAS_DEFAULT_MATH);
    return true;
  }

  /// The contender's name for a precision, or "" when this library lacks its call.
  std::string contender(Precision p, bool batched) const {
    const bool have = p == Precision::fp32 ? (!batched || sgemm_strided != nullptr)
                      : batched            ? gemm_strided_ex != nullptr
                                           : gemm_ex != nullptr;
    if (!have) return "";
    switch (p) {
      case Precision::fp32: return "Cublas";
      case Precision::tf32: return "CublasTf32";
      case Precision::bf16: return "CublasBf16";
      case Precision::fp16: return "CublasFp16";
    }
    return "";
  }

  /// Row-major C[m,n] = A[m,k] B[k,n] (per batch), as column-major C^T = B^T A^T; with B
  /// given as [n,k], its column-major view is transposed (CUBLAS_OP_T).
  void gemm(Precision p, const GemmShape& s, cuda::CUdeviceptr a, cuda::CUdeviceptr b,
            cuda::CUdeviceptr c) const {
    const float one = 1, zero = 0;
    auto* pa = reinterpret_cast<const void*>(a);
    auto* pb = reinterpret_cast<const void*>(b);
    auto* pc = reinterpret_cast<void*>(c);
    const long long sa = static_cast<long long>(s.m) * s.k, sb = static_cast<long long>(s.k) * s.n,
                    sc = static_cast<long long>(s.m) * s.n;
    const int op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, ldb = s.trans_b ? s.k : s.n;
    int rc = 0;
    const char* what = "";
    if (p == Precision::fp32) {
      auto* fa = static_cast<const float*>(pa);
      auto* fb = static_cast<const float*>(pb);
      auto* fc = static_cast<float*>(pc);
      if (s.batch == 0) {
        what = "cublasSgemm";
        rc =
            sgemm(handle, op_b, CUBLAS_OP_N, s.n, s.m, s.k, &one, fb, ldb, fa, s.k, &zero, fc, s.n);
      } else {
        what = "cublasSgemmStridedBatched";
        rc = sgemm_strided(handle, op_b, CUBLAS_OP_N, s.n, s.m, s.k, &one, fb, ldb, sb, fa, s.k, sa,
                           &zero, fc, s.n, sc, s.batch);
      }
    } else {
      const int ab = p == Precision::bf16   ? CUDA_R_16BF
                     : p == Precision::fp16 ? CUDA_R_16F
                                            : CUDA_R_32F;
      const int compute = p == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      if (s.batch == 0) {
        what = "cublasGemmEx";
        rc = gemm_ex(handle, op_b, CUBLAS_OP_N, s.n, s.m, s.k, &one, pb, ab, ldb, pa, ab, s.k,
                     &zero, pc, CUDA_R_32F, s.n, compute, CUBLAS_GEMM_DEFAULT);
      } else {
        what = "cublasGemmStridedBatchedEx";
        rc = gemm_strided_ex(handle, op_b, CUBLAS_OP_N, s.n, s.m, s.k, &one, pb, ab, ldb, sb, pa,
                             ab, s.k, sa, &zero, pc, CUDA_R_32F, s.n, sc, s.batch, compute,
                             CUBLAS_GEMM_DEFAULT);
      }
    }
    if (rc != 0) throw std::runtime_error(std::string(what) + " failed: " + std::to_string(rc));
  }
};

struct Cudnn {
  using Handle = void*;
  struct AlgoPerf {
    int algo;
    int status;
    float time;
    size_t memory;
    int determinism;
    int math_type;
    int reserved[3];
  };
  int (*create)(Handle*) = nullptr;
  int (*create_tensor)(void**) = nullptr;
  int (*set_tensor4d)(void*, int, int, int, int, int, int) = nullptr;
  int (*create_filter)(void**) = nullptr;
  int (*set_filter4d)(void*, int, int, int, int, int, int) = nullptr;
  int (*create_conv)(void**) = nullptr;
  int (*set_conv2d)(void*, int, int, int, int, int, int, int, int) = nullptr;
  int (*set_math_type)(void*, int) = nullptr;
  int (*find_algo)(Handle, void*, void*, void*, void*, int, int*, AlgoPerf*) = nullptr;
  int (*workspace_size)(Handle, void*, void*, void*, void*, int, size_t*) = nullptr;
  int (*forward)(Handle, const void*, void*, const void*, void*, const void*, void*, int, void*,
                 size_t, const void*, void*, void*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  Handle handle = nullptr;

  bool load() {
    void* lib =
        open_first({"libcudnn.so.9", "/usr/lib/x86_64-linux-gnu/libcudnn.so.9", "libcudnn.so"});
    create = sym<decltype(create)>(lib, "cudnnCreate");
    create_tensor = sym<decltype(create_tensor)>(lib, "cudnnCreateTensorDescriptor");
    set_tensor4d = sym<decltype(set_tensor4d)>(lib, "cudnnSetTensor4dDescriptor");
    create_filter = sym<decltype(create_filter)>(lib, "cudnnCreateFilterDescriptor");
    set_filter4d = sym<decltype(set_filter4d)>(lib, "cudnnSetFilter4dDescriptor");
    create_conv = sym<decltype(create_conv)>(lib, "cudnnCreateConvolutionDescriptor");
    set_conv2d = sym<decltype(set_conv2d)>(lib, "cudnnSetConvolution2dDescriptor");
    set_math_type = sym<decltype(set_math_type)>(lib, "cudnnSetConvolutionMathType");
    find_algo = sym<decltype(find_algo)>(lib, "cudnnFindConvolutionForwardAlgorithm");
    workspace_size = sym<decltype(workspace_size)>(lib, "cudnnGetConvolutionForwardWorkspaceSize");
    forward = sym<decltype(forward)>(lib, "cudnnConvolutionForward");
    error_string = sym<decltype(error_string)>(lib, "cudnnGetErrorString");
    return create && create_tensor && set_tensor4d && create_filter && set_filter4d &&
           create_conv && set_conv2d && set_math_type && find_algo && workspace_size && forward &&
           create(&handle) == 0;
  }
  void check(int rc, const char* what) const {
    if (rc != 0)
      throw std::runtime_error(
          std::string(what) + " failed: " + (error_string ? error_string(rc) : std::to_string(rc)));
  }
};

/// One convolution planned with cuDNN (descriptors, fastest algorithm, workspace): fp32 NCHW
/// with a KCRS filter, or fp16 NHWC with a KRSC filter and fp32 compute type.
struct CudnnConv {
  Cudnn* dnn = nullptr;
  void *x = nullptr, *w = nullptr, *y = nullptr, *conv = nullptr;
  int algo = 0;
  std::string algo_name;
  cuda::DeviceBuffer workspace;

  CudnnConv(Cudnn& d, const ConvShape& s, bool nhwc_fp16, int math) : dnn(&d) {
    const int format = nhwc_fp16 ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const int data = nhwc_fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    // cudnnSetTensor4dDescriptor(desc, format, type, n, c, h, w) and
    // cudnnSetFilter4dDescriptor(desc, type, format, k, c, r, s): dimensions in NCHW order
    // whatever the format.
    d.check(d.create_tensor(&x), "cudnnCreateTensorDescriptor");
    d.check(d.set_tensor4d(x, format, data, s.n, s.c, s.h, s.w), "cudnnSetTensor4dDescriptor");
    d.check(d.create_filter(&w), "cudnnCreateFilterDescriptor");
    d.check(d.set_filter4d(w, data, format, s.k, s.c, s.r, s.s), "cudnnSetFilter4dDescriptor");
    d.check(d.create_conv(&conv), "cudnnCreateConvolutionDescriptor");
    d.check(d.set_conv2d(conv, s.pad, s.pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            "cudnnSetConvolution2dDescriptor");
    d.check(d.set_math_type(conv, math), "cudnnSetConvolutionMathType");
    d.check(d.create_tensor(&y), "cudnnCreateTensorDescriptor");
    d.check(d.set_tensor4d(y, format, data, s.n, s.k, s.h + 2 * s.pad - s.r + 1,
                           s.w + 2 * s.pad - s.s + 1),
            "cudnnSetTensor4dDescriptor");
    Cudnn::AlgoPerf perf[16];
    int found = 0;
    d.check(d.find_algo(d.handle, x, w, conv, y, 16, &found, perf),
            "cudnnFindConvolutionForwardAlgorithm");
    int best = -1;
    for (int i = 0; i < found; ++i)
      if (perf[i].status == 0 && (best < 0 || perf[i].time < perf[best].time)) best = i;
    if (best < 0) throw std::runtime_error("cuDNN found no convolution algorithm");
    algo = perf[best].algo;
    static const char* names[] = {
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    algo_name = algo >= 0 && algo < 8 ? names[algo] : "algo " + std::to_string(algo);
    std::printf("  cuDNN (math type %d requested): %s, math type %d, %.1f us by cudnnFind\n", math,
                algo_name.c_str(), perf[best].math_type, perf[best].time * 1e3);
    size_t bytes = 0;
    d.check(d.workspace_size(d.handle, x, w, conv, y, algo, &bytes),
            "cudnnGetConvolutionForwardWorkspaceSize");
    if (bytes) workspace = cuda::DeviceBuffer(bytes);
  }
  void run(cuda::CUdeviceptr in, cuda::CUdeviceptr wt, cuda::CUdeviceptr out) {
    // Float scaling factors for fp32 and fp16 data alike (cuDNN's rule).
    const float one = 1, zero = 0;
    dnn->check(dnn->forward(dnn->handle, &one, x, reinterpret_cast<void*>(in), w,
                            reinterpret_cast<void*>(wt), conv, algo,
                            reinterpret_cast<void*>(workspace.ptr()), workspace.bytes(), &zero, y,
                            reinterpret_cast<void*>(out)),
               "cudnnConvolutionForward");
  }
};

// --- contenders ----------------------------------------------------------------------------------

/// Empty when the output matches LoomDefault's as the tuner's measurer checks programs
/// (backend/measure_data.hpp, MeasureOptions' tolerances), else what differs. A plain relative
/// error flags sound programs: a row of 4,096 terms summed in another order moves a layer norm's
/// outputs near zero by more than 1e-3 of themselves.
std::string compare_with_default(const Workload& w) {
  const std::vector<float> got =
      download_as_float(w.buffers.back(), w.reference->output.size(), w.output_elem);
  const ir::Tensor& out = w.task.dag->outputs()[0];
  const backend::measure_data::OutputSpec spec{out.name(), out.dtype(), out.shape(),
                                               out.num_elements()};
  const search::MeasureOptions tolerances;
  return backend::measure_data::compare_output(spec, got.data(), w.reference->output.data(),
                                               tolerances.rtol, tolerances.atol);
}

void add_contender(Workload& w, const std::string& name, std::function<void()> call,
                   double dram_bytes_per_second) {
  const std::string full = w.name + "/" + name;
  // Check first: the output is compared with the default schedule's for the fp32 DAG.
  std::string diff;
  try {
    w.buffers.back().zero();
    call();
    cuda::Context::get().synchronize();
    diff = compare_with_default(w);
  } catch (const std::exception& e) {
    std::printf("%-52s FAILED, left out: %s\n", full.c_str(), e.what());
    return;
  }
  std::printf("%-52s %s\n", full.c_str(),
              diff.empty() ? "matches LoomDefault" : ("WRONG: " + diff).c_str());
  const double flops = w.task.dag->flop_count();
  double bytes = 0;
  if (w.memory_bound)
    for (const cuda::DeviceBuffer& b : w.buffers) bytes += static_cast<double>(b.bytes());
  // No MinTime: --benchmark_min_time applies (0.5 s by default).
  benchmark::RegisterBenchmark(full.c_str(),
                               [call, flops, bytes, dram_bytes_per_second](benchmark::State& st) {
                                 double total = 0;
                                 for (auto _ : st) {
                                   // Ten calls back to back between two events, per call: the GPU's
                                   // time, as a network runs its layers, rather than each call's
                                   // host-side launch latency.
                                   const double s = cuda::time_launches(call, 10);
                                   st.SetIterationTime(s);
                                   total += s;
                                 }
                                 const double per_call =
                                     total / static_cast<double>(st.iterations());
                                 st.counters["GFLOPS"] = flops / per_call * 1e-9;
                                 if (bytes > 0) {
                                   st.counters["GBps"] = bytes / per_call * 1e-9;
                                   st.counters["DRAM"] = bytes / per_call / dram_bytes_per_second;
                                 }
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

/// What follows `prefix` ("--trials=") in `arg`, or nullptr when `arg` does not start with it.
const char* flag_value(const char* arg, std::string_view prefix) {
  return std::strncmp(arg, prefix.data(), prefix.size()) == 0 ? arg + prefix.size() : nullptr;
}

/// The best-so-far curve of a tuning run as CSV: trial, best time so far in microseconds (empty
/// before the first success), seconds since tuning began.
void write_curve(const std::string& path, const search::TuneReport& rep) {
  std::ofstream csv(path);
  csv << "trial,best_us,elapsed_s\n";
  for (const search::CurvePoint& p : rep.curve) {
    csv << p.trial << ",";
    if (p.best_gflops > 0) csv << rep.flops / p.best_gflops * 1e-3;
    csv << "," << p.elapsed_seconds << "\n";
  }
  if (!csv) std::printf("could not write %s\n", path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line: a run cut short by a time limit still shows how far it got.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int trials = 0;
  double double_buffer = search::SearchOptions{}.gpu_double_buffer_probability;
  int max_stages = search::SearchOptions{}.gpu_max_pipeline_stages;
  bool ansor_features = false;
  double pad_shared = search::SearchOptions{}.gpu_pad_shared_probability;
  double lane_major = search::SearchOptions{}.gpu_lane_major_probability;
  double widest_copy = search::SearchOptions{}.gpu_widest_copy_probability;
  bool vector_stores = search::SearchOptions{}.gpu_vector_stores;
  double swizzle_shared = search::SearchOptions{}.gpu_swizzle_shared_probability;
  bool deep_k_tiles = search::SearchOptions{}.gpu_deep_k_tiles;
  int min_blocks = 0;
  std::string arch;
  bool from_model = false;
  std::string records = "gpu_tuned.jsonl";
  std::vector<std::string> only;
  bool list_only = false;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (const char* v = flag_value(argv[i], "--trials=")) {
      trials = std::atoi(v);
    } else if (const char* v = flag_value(argv[i], "--records=")) {
      records = v;
    } else if (const char* v = flag_value(argv[i], "--double-buffer=")) {
      double_buffer = std::atof(v);
    } else if (const char* v = flag_value(argv[i], "--max-stages=")) {
      max_stages = std::atoi(v);
    } else if (const char* v = flag_value(argv[i], "--pad-shared=")) {
      pad_shared = std::atof(v);
    } else if (const char* v = flag_value(argv[i], "--lane-major=")) {
      lane_major = std::atof(v);
    } else if (const char* v = flag_value(argv[i], "--widest-copy=")) {
      widest_copy = std::atof(v);
    } else if (const char* v = flag_value(argv[i], "--vector-stores=")) {
      vector_stores = std::atoi(v) != 0;
    } else if (const char* v = flag_value(argv[i], "--swizzle-shared=")) {
      swizzle_shared = std::atof(v);
    } else if (const char* v = flag_value(argv[i], "--min-blocks=")) {
      min_blocks = std::atoi(v);
    } else if (const char* v = flag_value(argv[i], "--arch=")) {
      arch = v;
    } else if (const char* v = flag_value(argv[i], "--deep-k-tiles=")) {
      deep_k_tiles = std::atoi(v) != 0;
    } else if (std::strcmp(argv[i], "--ansor-features") == 0) {
      ansor_features = true;
    } else if (std::strcmp(argv[i], "--model") == 0) {
      from_model = true;
    } else if (std::strcmp(argv[i], "--list-workloads") == 0) {
      list_only = true;
    } else if (const char* v = flag_value(argv[i], "--workloads=")) {
      std::string list = v;
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) only.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  const auto selected = [&](const std::string& name) {
    return only.empty() || std::any_of(only.begin(), only.end(),
                                       [&](const std::string& p) { return name.rfind(p, 0) == 0; });
  };
  if (list_only) {  // no GPU needed
    for (const Spec& s : workload_specs(selected))
      std::printf("%-44s %9.3f GFLOP\n", s.name.c_str(),
                  ComputeDAG(s.inputs, {s.output}).flop_count() * 1e-9);
    return 0;
  }

  std::string why;
  if (!cuda::device_available(&why)) {
    std::cerr << "bench_gpu: no CUDA device: " << why << '\n';
    return 77;
  }
  const cuda::DeviceInfo info = cuda::device_info(0);
  Target target = cuda::device_target(0).with_min_blocks_per_sm(min_blocks);
  if (!arch.empty()) target.arch = arch;
  const double dram = info.dram_bytes_per_second();
  std::printf("bench_gpu on %s (%s, %d SMs, DRAM %.0f GB/s peak), records %s\n", info.name.c_str(),
              info.arch().c_str(), info.sm_count, dram * 1e-9, records.c_str());

  // Workloads (buffers and the reference outputs; no tuning).
  std::map<std::string, std::shared_ptr<const Reference>> references;
  std::vector<std::unique_ptr<Workload>> workloads;
  for (const Spec& s : workload_specs(selected))
    workloads.push_back(std::make_unique<Workload>(make_workload(s, target, references)));

  if (trials > 0) {
    std::vector<std::pair<std::string, double>> tuning_seconds;
    for (auto& w : workloads) {
      if (!w->loom_task) continue;
      search::TuneOptions o;
      o.trials = trials;
      o.records = records;
      o.name = w->name;
      o.space.gpu_double_buffer_probability = double_buffer;
      o.space.gpu_max_pipeline_stages = max_stages;
      o.space.gpu_pad_shared_probability = pad_shared;
      o.space.gpu_lane_major_probability = lane_major;
      o.space.gpu_widest_copy_probability = widest_copy;
      o.space.gpu_vector_stores = vector_stores;
      o.space.gpu_swizzle_shared_probability = swizzle_shared;
      o.space.gpu_deep_k_tiles = deep_k_tiles;
      if (ansor_features) o.gbdt.num_features = cost::kNumAnsorFeatures;
      // The best programs run in milliseconds; one that needs seconds is not worth its run.
      o.measure.run_timeout_s = 2;
      const cuda::TuneResult r = cuda::tune(*w->loom_task, o);
      const auto& rep = r.report();
      std::printf(
          "%s: tuned %d programs (%d failed) in %.1f s (search %.1f, model %.1f, build %.1f, run "
          "%.1f): best %.1f GFLOP/s\n",
          w->name.c_str(), rep.trials, rep.failures, rep.wall_seconds, rep.search_seconds,
          rep.train_seconds, rep.compile_seconds, rep.run_seconds, r.best_gflops());
      write_curve(records + "." + w->name + ".curve.csv", rep);
      tuning_seconds.emplace_back(w->name, rep.wall_seconds);
    }
    std::printf(
        "tuning wall time per workload (%d trials each; curves in %s.<workload>.curve.csv):\n",
        trials, records.c_str());
    for (const auto& [name, s] : tuning_seconds) std::printf("  %-44s %8.1f s\n", name.c_str(), s);
  }

  Cublas blas;
  const bool have_cublas = blas.load();
  Cudnn dnn;
  const bool have_cudnn = dnn.load();
  if (!have_cublas) std::printf("cuBLAS not found: its contenders are skipped\n");
  if (!have_cudnn) std::printf("cuDNN not found: its contenders are skipped\n");

  std::vector<std::shared_ptr<cuda::Program>> keep;
  for (auto& wp : workloads) {
    Workload& w = *wp;
    const std::vector<cuda::CUdeviceptr> args = pointers(w);
    if (w.loom_task) {
      // LoomDefault's program is the reference's when the loom task is the fp32 DAG.
      std::shared_ptr<cuda::Program> naive = w.reference->program;
      if (w.precision != Precision::fp32) {
        cuda::CompiledProgram c = cuda::build(*w.loom_task);
        naive = std::make_shared<cuda::Program>(c.image, std::move(c.plan));
        keep.push_back(naive);
      }
      add_contender(w, "LoomDefault", [naive, args] { naive->launch(args); }, dram);
      if (from_model) {
        try {
          cuda::ModelCompiled m = cuda::compile_from_model(*w.loom_task);
          auto picked = std::make_shared<cuda::Program>(m.program.image, std::move(m.program.plan));
          keep.push_back(picked);
          add_contender(w, "LoomModel", [picked, args] { picked->launch(args); }, dram);
          std::printf(
              "%s: LoomModel is the model's pick %d (-1: the default schedule), %.1f us when "
              "measured; search %.1f s, measuring %.1f s\n",
              w.name.c_str(), m.rank, m.seconds * 1e6, m.search_seconds, m.measure_seconds);
        } catch (const loom::error& e) {
          std::printf("%s: no LoomModel: %s\n", w.name.c_str(), e.what());
        }
      }
      if (auto best = cuda::best_recorded_schedule(*w.loom_task, records)) {
        cuda::CompiledProgram c = cuda::build(*w.loom_task, *best);
        auto tuned = std::make_shared<cuda::Program>(c.image, std::move(c.plan));
        keep.push_back(tuned);
        add_contender(w, "LoomTuned", [tuned, args] { tuned->launch(args); }, dram);
        // What the best program is made of, for reading the numbers.
        auto has = [&](const char* what) {
          return c.source.find(what) != std::string::npos ? "yes" : "no";
        };
        // A loop of s pipeline stages waits for all but s - 2 copy groups.
        const size_t wait = c.source.find("cp.async.wait_group ");
        const int stages = wait == std::string::npos ? 0 : 2 + std::atoi(&c.source[wait + 20]);
        auto has_step = [&](auto step) {
          return std::any_of(best->steps().begin(), best->steps().end(), [](const sched::Step& st) {
            return std::holds_alternative<decltype(step)>(st);
          });
        };
        const bool lane_major = has_step(sched::StoragePermuteStep{});
        const bool swizzled = has_step(sched::StorageSwizzleStep{});
        // The reduction terms one shared copy holds (16 per instruction step; more where the
        // copies sit outside the middle reduce level, gpu_deep_k_tiles).
        int64_t terms_per_copy = 0;
        for (const sched::Stage& st : best->stages()) {
          if (st.scope != ir::MemoryScope::Shared || st.location != sched::ComputeLocation::At)
            continue;
          const sched::Stage& at = best->stage(st.attach_stage);
          int64_t terms = 1;
          for (int q = at.leaf_position(st.attach_iter) + 1; q < static_cast<int>(at.leaves.size());
               ++q)
            if (at.leaf(q).kind == sched::IterKind::Reduce) terms *= at.leaf(q).extent;
          terms_per_copy = std::max(terms_per_copy, terms);
        }
        // The sizes of its asynchronous copies, as the copy statements print them.
        std::string async_bytes;
        for (const char* bytes : {"16", "8", "4"})
          if (c.source.find(std::string("[%1], ") + bytes + ";") != std::string::npos)
            async_bytes += (async_bytes.empty() ? "" : "/") + std::string(bytes);
        // What the device made of it: the most registers and local memory (spills) a thread of
        // any of its kernels has.
        int registers = 0, local_bytes = 0;
        for (const cuda::Function& f : tuned->functions()) {
          registers = std::max(registers, f.num_registers());
          local_bytes = std::max(local_bytes, f.local_memory());
        }
        std::printf(
            "%s: LoomTuned uses tensor cores %s, wgmma %s, ldmatrix %s, cp.async %s (%d stages, "
            "%s bytes), lane-major shared copies %s, swizzled %s, %lld reduction terms per shared "
            "copy; %d registers and %d bytes of local memory a thread\n",
            w.name.c_str(), has("mma.sync"), has("wgmma.mma_async"), has("ldmatrix"),
            has("cp.async"), stages, async_bytes.empty() ? "no" : async_bytes.c_str(),
            lane_major ? "yes" : "no", swizzled ? "yes" : "no",
            static_cast<long long>(terms_per_copy), registers, local_bytes);
        if (std::getenv("BENCH_GPU_PRINT_SOURCE")) std::printf("%s\n", c.source.c_str());
      } else {
        std::printf("%s: no record in %s, LoomTuned skipped (run with --trials=N)\n",
                    w.name.c_str(), records.c_str());
      }
    }
    if (w.gemm.m > 0 && have_cublas) {
      const std::string name = blas.contender(w.precision, w.gemm.batch > 0);
      if (name.empty())
        std::printf("%s: this cuBLAS lacks the call, skipped\n", w.name.c_str());
      else
        add_contender(
            w, name,
            [&blas, p = w.precision, s = w.gemm, args] {
              blas.gemm(p, s, args[0], args[1], args[2]);
            },
            dram);
    }
    if (w.conv.n > 0 && have_cudnn) {
      const bool fp16 = w.precision == Precision::fp16;
      std::vector<std::pair<std::string, int>> maths;
      if (fp16)
        maths = {{"CudnnFp16", CUDNN_TENSOR_OP_MATH}};
      else
        maths = {{"CudnnFmaMath", CUDNN_FMA_MATH}, {"CudnnDefaultMath", CUDNN_DEFAULT_MATH}};
      const cuda::CUdeviceptr weight = fp16 ? w.krsc_weight.ptr() : args[1];
      for (const auto& [name, math] : maths) {
        std::shared_ptr<CudnnConv> conv;
        try {
          std::printf("%s/%s:\n", w.name.c_str(), name.c_str());
          conv = std::make_shared<CudnnConv>(dnn, w.conv, fp16, math);
        } catch (const std::exception& e) {
          std::printf("%-52s FAILED, left out: %s\n", (w.name + "/" + name).c_str(), e.what());
          continue;
        }
        add_contender(w, name, [conv, args, weight] { conv->run(args[0], weight, args[2]); }, dram);
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
