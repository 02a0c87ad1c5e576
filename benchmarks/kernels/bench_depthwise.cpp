/// \file
/// fp32 depthwise 3x3 convolution, stride 1, pad 1, channel multiplier 1, batch 1 (MobileNet's
/// first depthwise layer: 32 channels of 112x112), at 1 and 2 threads: oneDNN in plain NCHW and in
/// the blocked layout it picks itself, Eigen shifted windows, a naive direct loop, loom's tuned
/// program and (LOOM_BENCH_HALIDE=ON) the kernels of Halide's autoschedulers. Named
/// BM_Depthwise_<Contender>/<N.._C.._H.._W.._K.._R.._S.._P..>/<threads> (K = C); every contender is
/// checked once against a double-precision reference before it is timed.
#include "baselines/common.hpp"
#include "baselines/context.hpp"
#include "baselines/dnnl.hpp"
#include "baselines/eigen.hpp"
#include "baselines/naive.hpp"
#include "baselines/timing.hpp"
#if defined(LOOM_BENCH_HAVE_LOOM)
#include "baselines/loom_tuned.hpp"
#endif
#if defined(LOOM_BENCH_HAVE_HALIDE)
#include "baselines/halide.hpp"
#endif

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using loom_bench::AlignedFloats;
using loom_bench::ConvShape;

/// 2*N*C*OH*OW*R*S: each output reads one channel only (ConvShape::flop() would count all C).
double depthwise_flop(const ConvShape& p) {
  return 2.0 * double(p.n) * double(p.c) * double(p.oh()) * double(p.ow()) * double(p.r) *
         double(p.s);
}

/// Inputs, shared by every contender of a shape, and the reference.
struct DepthwiseData {
  AlignedFloats src, wei, out, ref;
};

DepthwiseData& depthwise_data(const ConvShape& p) {
  static std::map<std::string, std::unique_ptr<DepthwiseData>> cache;
  auto& d = cache[p.name()];
  if (!d) {
    d = std::make_unique<DepthwiseData>();
    d->src = AlignedFloats(std::size_t(p.n * p.c * p.h * p.w));
    d->wei = AlignedFloats(std::size_t(p.c * p.r * p.s));
    d->out = AlignedFloats(std::size_t(p.n * p.c * p.oh() * p.ow()));
    d->ref = AlignedFloats(d->out.size());
    loom_bench::fill_uniform(d->src.data(), d->src.size(), 0x5eed0041u);
    loom_bench::fill_uniform(d->wei.data(), d->wei.size(), 0x5eed0042u);
    loom_bench::depthwise_conv2d_reference(p, d->src.data(), d->wei.data(), d->ref.data());
  }
  return *d;
}

/// What a contender prepared for one (shape, threads): the timed call, and how to get its output
/// as NCHW into the given buffer (untimed, for the check).
struct DepthwiseInstance {
  std::function<void()> call;
  std::function<void(float* nchw)> read_output;
  std::string label;
};

struct DepthwiseContender {
  std::string name;
  std::function<DepthwiseInstance(const ConvShape&, int threads, DepthwiseData&)> prepare;
  std::function<void(int)> set_threads;
  int max_threads = 1;
  /// Shapes this contender is registered for; empty means every shape.
  std::function<bool(const ConvShape&)> accepts;
};

std::vector<DepthwiseContender>& contenders() {
  static std::vector<DepthwiseContender> all;
  return all;
}

/// read_output of the contenders that write d.out in NCHW themselves.
std::function<void(float*)> copy_out(DepthwiseData& d) {
  return [&d](float* nchw) { std::copy(d.out.data(), d.out.data() + d.out.size(), nchw); };
}

void add_contenders() {
  auto& all = contenders();
  {
    DepthwiseContender c;
    c.name = "NaiveDirect";
    c.prepare = [](const ConvShape& p, int, DepthwiseData& d) {
      float* out = d.out.data();
      return DepthwiseInstance{
          [p, &d, out] { loom_bench::depthwise_conv2d_naive(p, d.src.data(), d.wei.data(), out); },
          copy_out(d), "c,r,s,y,x loops, x vectorized"};
    };
    all.push_back(std::move(c));
  }

#if defined(LOOM_BENCH_HAVE_EIGEN)
  {
    DepthwiseContender c;
    c.name = "EigenShifted";
    c.prepare = [](const ConvShape& p, int threads, DepthwiseData& d) {
      auto conv = std::make_shared<loom_bench::EigenDepthwiseConv2d>(p, threads);
      float* out = d.out.data();
      return DepthwiseInstance{[conv, &d, out] { (*conv)(d.src.data(), d.wei.data(), out); },
                               copy_out(d),
                               "padded copy + R*S shifted windows per channel, channels split by "
                               "OpenMP, " +
                                   loom_bench::eigen_simd()};
    };
    c.set_threads = loom_bench::eigen_set_threads;
    c.max_threads = loom_bench::eigen_max_threads();
    all.push_back(std::move(c));
  }
#endif

#if defined(LOOM_BENCH_HAVE_LOOM)
  // loom's tuned depthwise convolution (baselines/loom_tuned.hpp): NCHW in and out.
  {
    DepthwiseContender c;
    c.name = "LoomTuned";
    c.prepare = [](const ConvShape& p, int threads, DepthwiseData& d) {
      using namespace loom;
      // Built exactly as tune_workloads builds it, so that the workload keys match.
      auto x = placeholder<float>("X", {p.n, p.c, p.h, p.w});
      auto wt = placeholder<float>("W", {p.c, 1, p.r, p.s});
      Task task(
          ComputeDAG({x, wt}, {ops::depthwise_conv2d_nchw(x, wt, {.padding = {p.pad, p.pad}})}));
      runtime::set_num_threads(threads);
      auto best = loom_bench::tuned_program(task);
      auto kernel = std::make_shared<Kernel>(build(task, best.first));
      float* out = d.out.data();
      return DepthwiseInstance{[kernel, &d, out] {
                                 void* args[] = {d.src.data(), d.wei.data(), out};
                                 kernel->run_unchecked(args);
                               },
                               copy_out(d), "tuned (" + best.second + ")"};
    };
    c.set_threads = [](int n) { loom::runtime::set_num_threads(n); };
    c.max_threads = 2;
    all.push_back(std::move(c));
  }
#endif

#if defined(LOOM_BENCH_HAVE_DNNL)
  // Blocked: format_tag::any everywhere, src and weights reordered once before timing (a network
  // keeps activations blocked), output left blocked; the label shows the layouts it picked.
  struct Variant {
    const char* name;
    loom_bench::DnnlConvLayout layout;
  };
  for (Variant v : {Variant{"OneDNN_NCHW", loom_bench::DnnlConvLayout::Nchw},
                    Variant{"OneDNN_Blocked", loom_bench::DnnlConvLayout::Blocked}}) {
    DepthwiseContender c;
    c.name = v.name;
    c.prepare = [v](const ConvShape& p, int threads, DepthwiseData& d) {
      auto conv = std::make_shared<loom_bench::DnnlDepthwiseConv2d>(p, d.src.data(), d.wei.data(),
                                                                    v.layout, threads);
      return DepthwiseInstance{[conv] { (*conv)(); },
                               [conv](float* nchw) { conv->read_output(nchw); },
                               conv->impl_name() + " " + conv->formats()};
    };
    c.set_threads = loom_bench::dnnl_set_threads;
    c.max_threads = loom_bench::dnnl_threads_controllable() ? (1 << 20) : 1;
    all.push_back(std::move(c));
  }
#endif

#if defined(LOOM_BENCH_HAVE_HALIDE)
  // Halide 14's autoschedulers, compiled ahead of time per shape (benchmarks/halide/): NCHW.
  for (const std::string& variant : loom_bench::halide_variants()) {
    if (variant == "Hand") continue;  // hand-scheduled for bench_gemm only
    const auto kernel = [variant](const ConvShape& p) -> const loom_bench::HalideKernel* {
      if (p.n != 1 || p.r != 3 || p.s != 3 || p.pad != 1) return nullptr;
      return loom_bench::find_halide_kernel("depthwise", variant, {p.c, p.h, p.w, 0});
    };
    DepthwiseContender c;
    c.name = "Halide" + variant;
    c.accepts = [kernel](const ConvShape& p) { return kernel(p) != nullptr; };
    c.prepare = [kernel](const ConvShape& p, int, DepthwiseData& d) {
      auto call = std::make_shared<loom_bench::HalideCall>(
          *kernel(p),
          std::initializer_list<std::vector<int>>{{int(p.n), int(p.c), int(p.h), int(p.w)},
                                                  {int(p.c), 1, int(p.r), int(p.s)},
                                                  {int(p.n), int(p.c), int(p.oh()), int(p.ow())}});
      call->set(0, d.src.data());
      call->set(1, d.wei.data());
      call->set(2, d.out.data());
      std::string label = call->label();
      return DepthwiseInstance{[call] { (*call)(); }, copy_out(d), std::move(label)};
    };
    c.set_threads = loom_bench::halide_set_threads;
    c.max_threads = 1 << 20;
    all.push_back(std::move(c));
  }
#endif
}

void run_depthwise(benchmark::State& state, std::size_t ci, ConvShape p, int threads) {
  DepthwiseContender& c = contenders()[ci];
  DepthwiseData& d = depthwise_data(p);
  if (c.set_threads) c.set_threads(threads);
  static std::map<std::tuple<std::size_t, std::string, int>,
                  loom_bench::CheckedInstance<DepthwiseInstance>>
      slots;
  const DepthwiseInstance* instance = loom_bench::checked_instance(
      state, slots[{ci, p.name(), threads}], [&] { return c.prepare(p, threads, d); },
      [&](const DepthwiseInstance& i) {
        return loom_bench::check_read_output(i, d.out, d.ref.data(),
                                             loom_bench::gemm_tolerance(p.r * p.s));
      });
  if (!instance) return;
  loom_bench::run_timed(state, instance->call, "GFLOPS", depthwise_flop(p) * 1e-9);
  state.SetLabel(instance->label);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  add_contenders();

  const std::vector<ConvShape> shapes = {
      {.n = 1, .c = 32, .h = 112, .w = 112, .k = 32, .r = 3, .s = 3, .pad = 1},
  };
  for (const ConvShape& p : shapes) {
    for (int t : {1, 2}) {
      for (std::size_t ci = 0; ci < contenders().size(); ++ci) {
        const DepthwiseContender& c = contenders()[ci];
        if (t > c.max_threads || (c.accepts && !c.accepts(p))) continue;
        const std::string name =
            "BM_Depthwise_" + c.name + "/" + p.name() + "/" + std::to_string(t);
        benchmark::RegisterBenchmark(
            name.c_str(), [ci, p, t](benchmark::State& st) { run_depthwise(st, ci, p, t); })
            ->Unit(benchmark::kMicrosecond)
            ->MeasureProcessCPUTime()
            ->UseRealTime();
      }
    }
  }
  loom_bench::add_library_context();
#if defined(LOOM_BENCH_HAVE_HALIDE)
  loom_bench::add_halide_context();
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
