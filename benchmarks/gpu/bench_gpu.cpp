// bench_gpu: loom's tuned GPU kernels against cuBLAS and cuDNN, in one run (issue 7):
//   - fp32 GEMM 4096 x 4096 x 4096: LoomTuned, LoomDefault (one thread per output), cuBLAS
//     (cublasSgemm, default math: FP32 FMA, no TF32);
//   - conv2d N=1 C=64 H=W=56 K=64 3x3 pad 1: LoomTuned, LoomDefault, cuDNN with FMA math (fp32
//     kernels only) and cuDNN with its default math (which may use TF32 tensor cores), each with
//     the fastest algorithm cudnnFindConvolutionForwardAlgorithm reports;
//   - softmax and layer norm over the rows of 4096 x 4096 and of BERT-base's 128 x 768: LoomTuned
//     and LoomDefault, measured against the DRAM's peak bandwidth (counter DRAM: bytes of the
//     inputs and the output, each moved once, per second, as a fraction of the peak).
//
//   bench_gpu [--trials=N] [--records=FILE] [--workloads=NAME,...] [Google Benchmark flags]
//
// --workloads keeps the workloads whose names start with one of the given prefixes (all by
// default), for tuning and for timing.
//
// With --trials=N (N > 0) each workload is first tuned for N more programs on this GPU
// (cuda::tune, resuming from FILE, default gpu_tuned.jsonl); the LoomTuned contender is the best
// program of FILE. Every contender's output is compared with LoomDefault's before timing.
// Times come from CUDA events around 10 back-to-back calls (manual time, per call). cuBLAS and
// cuDNN are loaded with dlopen (libcublas.so.13, libcudnn.so.9: set LD_LIBRARY_PATH when they are
// elsewhere); a missing one only removes its contenders. Exits with 77 when there is no GPU.
#include <loom/cuda.hpp>
#include <loom/ops.hpp>
#include <loom/backend/measure_data.hpp>

#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace loom;

namespace {

// --- cuBLAS and cuDNN, the few calls we need, through dlopen ----------------------------------

void* open_first(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_NOW | RTLD_GLOBAL)) return h;
  return nullptr;
}

template <class F>
F sym(void* lib, const char* name) {
  return lib ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

struct Cublas {
  using Handle = void*;
  int (*create)(Handle*) = nullptr;
  int (*set_math_mode)(Handle, int) = nullptr;
  int (*sgemm)(Handle, int, int, int, int, int, const float*, const float*, int, const float*, int,
               const float*, float*, int) = nullptr;
  Handle handle = nullptr;

  bool load() {
    void* lib = open_first({"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13",
                            "libcublas.so.12", "libcublas.so"});
    create = sym<decltype(create)>(lib, "cublasCreate_v2");
    set_math_mode = sym<decltype(set_math_mode)>(lib, "cublasSetMathMode");
    sgemm = sym<decltype(sgemm)>(lib, "cublasSgemm_v2");
    if (!create || !sgemm || create(&handle) != 0) return false;
    if (set_math_mode) set_math_mode(handle, 0);  // CUBLAS_DEFAULT_MATH: FP32, no TF32
    return true;
  }
  // Row-major C[m,n] = A[m,k] B[k,n], as column-major C^T = B^T A^T.
  void gemm(int m, int n, int k, cuda::CUdeviceptr a, cuda::CUdeviceptr b, cuda::CUdeviceptr c) {
    const float one = 1, zero = 0;
    const int rc =
        sgemm(handle, 0, 0, n, m, k, &one, reinterpret_cast<const float*>(b), n,
              reinterpret_cast<const float*>(a), k, &zero, reinterpret_cast<float*>(c), n);
    if (rc != 0) throw std::runtime_error("cublasSgemm failed: " + std::to_string(rc));
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

// One NCHW fp32 convolution planned with cuDNN (descriptors, fastest algorithm, workspace).
struct CudnnConv {
  Cudnn* dnn = nullptr;
  void *x = nullptr, *w = nullptr, *y = nullptr, *conv = nullptr;
  int algo = 0;
  std::string algo_name;
  cuda::DeviceBuffer workspace;

  CudnnConv(Cudnn& d, int n, int c, int h, int wd, int k, int r, int s, int pad, int math)
      : dnn(&d) {
    d.check(d.create_tensor(&x), "cudnnCreateTensorDescriptor");
    d.check(d.set_tensor4d(x, 0, 0, n, c, h, wd), "cudnnSetTensor4dDescriptor");
    d.check(d.create_filter(&w), "cudnnCreateFilterDescriptor");
    d.check(d.set_filter4d(w, 0, 0, k, c, r, s), "cudnnSetFilter4dDescriptor");
    d.check(d.create_conv(&conv), "cudnnCreateConvolutionDescriptor");
    d.check(d.set_conv2d(conv, pad, pad, 1, 1, 1, 1, 1 /*cross-correlation*/, 0),
            "cudnnSetConvolution2dDescriptor");
    d.check(d.set_math_type(conv, math), "cudnnSetConvolutionMathType");
    d.check(d.create_tensor(&y), "cudnnCreateTensorDescriptor");
    d.check(d.set_tensor4d(y, 0, 0, n, k, h + 2 * pad - r + 1, wd + 2 * pad - s + 1),
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
    std::printf("cuDNN (math type %d requested): %s, math type %d, %.1f us by cudnnFind\n", math,
                algo_name.c_str(), perf[best].math_type, perf[best].time * 1e3);
    size_t bytes = 0;
    d.check(d.workspace_size(d.handle, x, w, conv, y, algo, &bytes),
            "cudnnGetConvolutionForwardWorkspaceSize");
    if (bytes) workspace = cuda::DeviceBuffer(bytes);
  }
  void run(cuda::CUdeviceptr in, cuda::CUdeviceptr wt, cuda::CUdeviceptr out) {
    const float one = 1, zero = 0;
    dnn->check(dnn->forward(dnn->handle, &one, x, reinterpret_cast<void*>(in), w,
                            reinterpret_cast<void*>(wt), conv, algo,
                            reinterpret_cast<void*>(workspace.ptr()), workspace.bytes(), &zero, y,
                            reinterpret_cast<void*>(out)),
               "cudnnConvolutionForward");
  }
};

// --- workloads and contenders -------------------------------------------------------------------

struct Workload {
  std::string name;
  Task task;
  std::vector<cuda::DeviceBuffer> buffers;  // inputs, then the output
  std::vector<float> reference;             // LoomDefault's output
  bool memory_bound = false;                // timed against the DRAM's bandwidth
};

std::vector<cuda::CUdeviceptr> pointers(const Workload& w) {
  std::vector<cuda::CUdeviceptr> p;
  for (const cuda::DeviceBuffer& b : w.buffers) p.push_back(b.ptr());
  return p;
}

// Empty when the output matches LoomDefault's as the tuner's measurer checks programs
// (backend/measure_data.hpp, MeasureOptions' tolerances), else what differs. A plain relative
// error flags sound programs: a row of 4,096 terms summed in another order moves a layer norm's
// outputs near zero by more than 1e-3 of themselves.
std::string compare_with_default(Workload& w) {
  std::vector<float> got(w.reference.size());
  w.buffers.back().download(got.data(), got.size() * sizeof(float));
  const ir::Tensor& out = w.task.dag->outputs()[0];
  const backend::measure_data::OutputSpec spec{out.name(), out.dtype(), out.shape(),
                                               out.num_elements()};
  const search::MeasureOptions tolerances;
  return backend::measure_data::compare_output(spec, got.data(), w.reference.data(),
                                               tolerances.rtol, tolerances.atol);
}

void add_contender(Workload& w, const std::string& name, std::function<void()> call,
                   double dram_bytes_per_second) {
  // Check first: the output is compared with the default schedule's (itself one thread per
  // output element, checked against the interpreter in the tests).
  w.buffers.back().zero();
  call();
  cuda::Context::get().synchronize();
  const std::string diff = compare_with_default(w);
  std::printf("%-40s %s\n", (w.name + "/" + name).c_str(),
              diff.empty() ? "matches LoomDefault" : ("WRONG: " + diff).c_str());
  const double flops = w.task.dag->flop_count();
  double bytes = 0;
  if (w.memory_bound)
    for (const cuda::DeviceBuffer& b : w.buffers) bytes += static_cast<double>(b.bytes());
  benchmark::RegisterBenchmark((w.name + "/" + name).c_str(),
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
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.5);
}

Workload make_workload(const std::string& name, std::vector<ir::Tensor> in, ir::Tensor out,
                       const Target& target) {
  Workload w{name,
             Task(std::make_shared<const ComputeDAG>(in, std::vector<ir::Tensor>{out}), target),
             {},
             {}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(0.5f, 1.5f);
  for (const ir::Tensor& t : in) {
    std::vector<float> host(static_cast<size_t>(t.num_elements()));
    for (float& x : host) x = d(rng);
    w.buffers.emplace_back(host.size() * sizeof(float));
    w.buffers.back().upload(host.data(), host.size() * sizeof(float));
  }
  w.buffers.emplace_back(static_cast<size_t>(out.num_elements()) * sizeof(float));
  w.reference.resize(static_cast<size_t>(out.num_elements()));
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line: a run cut short by a time limit still shows how far it got.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int trials = 0;
  std::string records = "gpu_tuned.jsonl";
  std::vector<std::string> only;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--trials=", 9) == 0) {
      trials = std::atoi(argv[i] + 9);
    } else if (std::strncmp(argv[i], "--records=", 10) == 0) {
      records = argv[i] + 10;
    } else if (std::strncmp(argv[i], "--workloads=", 12) == 0) {
      std::string list = argv[i] + 12;
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

  std::string why;
  if (!cuda::device_available(&why)) {
    std::cerr << "bench_gpu: no CUDA device: " << why << '\n';
    return 77;
  }
  const cuda::DeviceInfo info = cuda::device_info(0);
  const Target target = cuda::device_target(0);
  const double dram = info.dram_bytes_per_second();
  std::printf("bench_gpu on %s (%s, %d SMs, DRAM %.0f GB/s peak), records %s\n", info.name.c_str(),
              info.arch().c_str(), info.sm_count, dram * 1e-9, records.c_str());

  auto ga = placeholder<float>("A", {4096, 4096});
  auto gb = placeholder<float>("B", {4096, 4096});
  auto cx = placeholder<float>("X", {1, 64, 56, 56});
  auto cw = placeholder<float>("W", {64, 64, 3, 3});
  std::vector<std::unique_ptr<Workload>> workloads;
  workloads.push_back(std::make_unique<Workload>(
      make_workload("gemm_4096", {ga, gb}, ops::matmul(ga, gb), target)));
  workloads.push_back(std::make_unique<Workload>(make_workload(
      "conv2d_64x56x56_k64_3x3", {cx, cw}, ops::conv2d_nchw(cx, cw, {.padding = {1, 1}}), target)));
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {128, 768}}) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    auto x = placeholder<float>("X", {rows, cols});
    auto g = placeholder<float>("gamma", {cols});
    auto b = placeholder<float>("beta", {cols});
    workloads.push_back(std::make_unique<Workload>(
        make_workload("softmax_" + shape, {x}, ops::softmax(x), target)));
    workloads.push_back(std::make_unique<Workload>(
        make_workload("layer_norm_" + shape, {x, g, b}, ops::layer_norm(x, g, b), target)));
  }
  for (auto& w : workloads)
    w->memory_bound = w->name.rfind("softmax", 0) == 0 || w->name.rfind("layer_norm", 0) == 0;
  if (!only.empty())
    std::erase_if(workloads, [&](const std::unique_ptr<Workload>& w) {
      return std::none_of(only.begin(), only.end(),
                          [&](const std::string& p) { return w->name.rfind(p, 0) == 0; });
    });

  if (trials > 0) {
    for (auto& w : workloads) {
      search::TuneOptions o;
      o.trials = trials;
      o.records = records;
      o.name = w->name;
      // The best programs run in milliseconds; one that needs seconds is not worth its run.
      o.measure.run_timeout_s = 2;
      const cuda::TuneResult r = cuda::tune(w->task, o);
      const auto& rep = r.report();
      std::printf(
          "%s: tuned %d programs (%d failed) in %.1f s (search %.1f, model %.1f, build %.1f, run "
          "%.1f): best %.1f GFLOP/s\n",
          w->name.c_str(), rep.trials, rep.failures, rep.wall_seconds, rep.search_seconds,
          rep.train_seconds, rep.compile_seconds, rep.run_seconds, r.best_gflops());
    }
  }

  Cublas blas;
  const bool have_cublas = blas.load();
  Cudnn dnn;
  const bool have_cudnn = dnn.load();
  if (!have_cublas) std::printf("cuBLAS not found: its contender is skipped\n");
  if (!have_cudnn) std::printf("cuDNN not found: its contenders are skipped\n");

  std::vector<std::shared_ptr<cuda::Program>> keep;
  std::vector<std::shared_ptr<CudnnConv>> convs;
  for (auto& wp : workloads) {
    Workload& w = *wp;
    const std::vector<cuda::CUdeviceptr> args = pointers(w);
    auto naive = std::make_shared<cuda::Program>([&] {
      cuda::CompiledProgram c = cuda::build(w.task);
      return cuda::Program(c.image, std::move(c.plan));
    }());
    keep.push_back(naive);
    naive->launch(args);
    cuda::Context::get().synchronize();
    w.buffers.back().download(w.reference.data(), w.reference.size() * sizeof(float));
    add_contender(w, "LoomDefault", [naive, args] { naive->launch(args); }, dram);

    if (auto best = cuda::best_recorded_schedule(w.task, records)) {
      cuda::CompiledProgram c = cuda::build(w.task, *best);
      auto tuned = std::make_shared<cuda::Program>(c.image, std::move(c.plan));
      keep.push_back(tuned);
      add_contender(w, "LoomTuned", [tuned, args] { tuned->launch(args); }, dram);
      if (std::getenv("BENCH_GPU_PRINT_SOURCE")) std::printf("%s\n", c.source.c_str());
    } else {
      std::printf("%s: no record in %s, LoomTuned skipped (run with --trials=N)\n", w.name.c_str(),
                  records.c_str());
    }
    if (w.name.rfind("gemm", 0) == 0 && have_cublas)
      add_contender(
          w, "cuBLAS", [&blas, args] { blas.gemm(4096, 4096, 4096, args[0], args[1], args[2]); },
          dram);
    if (w.name.rfind("conv", 0) == 0 && have_cudnn) {
      for (int math : {3 /*FMA*/, 0 /*default: TF32 allowed*/}) {
        auto conv = std::make_shared<CudnnConv>(dnn, 1, 64, 56, 56, 64, 3, 3, 1, math);
        convs.push_back(conv);
        add_contender(
            w,
            std::string(math == 3 ? "cuDNN_fma_math" : "cuDNN_default_math") + "(" +
                conv->algo_name + ")",
            [conv, args] { conv->run(args[0], args[1], args[2]); }, dram);
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
