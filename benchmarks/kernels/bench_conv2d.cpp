/// \file
/// fp32 3x3 convolution, stride 1, pad 1, batch 1, at 1 and 2 threads: oneDNN in plain NCHW and in
/// its blocked layouts (with and without fused bias + ReLU), Eigen im2col + GEMM, a naive direct
/// loop, loom's tuned program and (LOOM_BENCH_HALIDE=ON) the kernels of Halide's autoschedulers
/// (NCHW, + bias + ReLU, for the shapes benchmarks/halide/ generates). Named
/// BM_Conv2d_<Contender>/<N.._C.._H.._W.._K.._R.._S.._P..>/<threads>; every contender is checked
/// once against a double-precision reference before it is timed.
#include "baselines/common.hpp"
#include "baselines/context.hpp"
#include "baselines/dnnl.hpp"
#include "baselines/eigen.hpp"
#include "baselines/naive.hpp"
#include "baselines/timing.hpp"
#if defined(LOOM_BENCH_HAVE_LOOM)
#include "baselines/loom_tuned.hpp"
#include "tune/tune_workloads.hpp"
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

/// Inputs, shared by every contender of a shape, and the two references.
struct ConvData {
  AlignedFloats src, wei, bias, out, ref, ref_bias_relu;
};

ConvData& conv_data(const ConvShape& p) {
  static std::map<std::string, std::unique_ptr<ConvData>> cache;
  auto& d = cache[p.name()];
  if (!d) {
    d = std::make_unique<ConvData>();
    d->src = AlignedFloats(std::size_t(p.n * p.c * p.h * p.w));
    d->wei = AlignedFloats(std::size_t(p.k * p.c * p.r * p.s));
    d->bias = AlignedFloats(std::size_t(p.k));
    d->out = AlignedFloats(std::size_t(p.n * p.k * p.oh() * p.ow()));
    d->ref = AlignedFloats(d->out.size());
    d->ref_bias_relu = AlignedFloats(d->out.size());
    loom_bench::fill_uniform(d->src.data(), d->src.size(), 0x5eed0011u);
    loom_bench::fill_uniform(d->wei.data(), d->wei.size(), 0x5eed0012u);
    loom_bench::fill_uniform(d->bias.data(), d->bias.size(), 0x5eed0013u);
    loom_bench::conv2d_reference(p, d->src.data(), d->wei.data(), nullptr, false, d->ref.data());
    loom_bench::conv2d_reference(p, d->src.data(), d->wei.data(), d->bias.data(), true,
                                 d->ref_bias_relu.data());
  }
  return *d;
}

/// What a contender prepared for one (shape, threads): the timed call, and how to get its output
/// as NCHW into the given buffer (untimed, for the check).
struct ConvInstance {
  std::function<void()> call;
  std::function<void(float* nchw)> read_output;
  std::string label;
};

struct ConvContender {
  std::string name;
  bool bias_relu = false;
  std::function<ConvInstance(const ConvShape&, int threads, ConvData&)> prepare;
  std::function<void(int)> set_threads;
  int max_threads = 1;
  /// Shapes this contender is registered for; empty means every shape.
  std::function<bool(const ConvShape&)> accepts;
};

#if defined(LOOM_BENCH_HAVE_LOOM)
/// A loom kernel of the NHWC workload on copies of the shape's inputs in NHWC / HWIO (made once,
/// untimed); read_output reorders its NHWC output back to NCHW for the check.
ConvInstance channels_last_instance(const ConvShape& p, std::shared_ptr<loom::Kernel> kernel,
                                    ConvData& d, std::string label) {
  struct ChannelsLast {
    AlignedFloats src, wei, out;
  };
  auto cl = std::make_shared<ChannelsLast>();
  cl->src = AlignedFloats(d.src.size());
  cl->wei = AlignedFloats(d.wei.size());
  cl->out = AlignedFloats(d.out.size());
  loom_bench::fill_nan(cl->out.data(), cl->out.size());  // unwritten outputs fail the check
  const int64_t hw = p.h * p.w, ohw = p.oh() * p.ow();
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t ch = 0; ch < p.c; ++ch)
      for (int64_t i = 0; i < hw; ++i)
        cl->src[std::size_t((n * hw + i) * p.c + ch)] = d.src[std::size_t((n * p.c + ch) * hw + i)];
  for (int64_t k = 0; k < p.k; ++k)
    for (int64_t ch = 0; ch < p.c; ++ch)
      for (int64_t rs = 0; rs < p.r * p.s; ++rs)
        cl->wei[std::size_t((rs * p.c + ch) * p.k + k)] =
            d.wei[std::size_t((k * p.c + ch) * p.r * p.s + rs)];
  return ConvInstance{
      [kernel, cl, &d] {
        void* args[] = {cl->src.data(), cl->wei.data(), d.bias.data(), cl->out.data()};
        kernel->run_unchecked(args);
      },
      [cl, p, ohw](float* nchw) {
        for (int64_t n = 0; n < p.n; ++n)
          for (int64_t k = 0; k < p.k; ++k)
            for (int64_t i = 0; i < ohw; ++i)
              nchw[(n * p.k + k) * ohw + i] = cl->out[std::size_t((n * ohw + i) * p.k + k)];
      },
      std::move(label)};
}
#endif

std::vector<ConvContender>& contenders() {
  static std::vector<ConvContender> all;
  return all;
}

void add_contenders() {
  auto& all = contenders();
  {
    ConvContender c;
    c.name = "NaiveDirect";
    c.prepare = [](const ConvShape& p, int, ConvData& d) {
      float* out = d.out.data();
      return ConvInstance{
          [p, &d, out] {
            loom_bench::conv2d_naive(p, d.src.data(), d.wei.data(), nullptr, false, out);
          },
          [&d](float* nchw) { std::copy(d.out.data(), d.out.data() + d.out.size(), nchw); }, ""};
    };
    all.push_back(std::move(c));
  }

#if defined(LOOM_BENCH_HAVE_EIGEN)
  for (bool fused : {false, true}) {
    ConvContender c;
    c.name = fused ? "EigenIm2col_BiasReLU" : "EigenIm2col";
    c.bias_relu = fused;
    c.prepare = [fused](const ConvShape& p, int threads, ConvData& d) {
      auto conv = std::make_shared<loom_bench::EigenConv2dIm2col>(p, fused, threads);
      float* out = d.out.data();
      return ConvInstance{
          [conv, &d, out] { (*conv)(d.src.data(), d.wei.data(), d.bias.data(), out); },
          [&d](float* nchw) { std::copy(d.out.data(), d.out.data() + d.out.size(), nchw); },
          "im2col + GEMM, " + loom_bench::eigen_simd()};
    };
    c.set_threads = loom_bench::eigen_set_threads;
    c.max_threads = loom_bench::eigen_max_threads();
    all.push_back(std::move(c));
  }
#endif

#if defined(LOOM_BENCH_HAVE_LOOM)
  // loom's tuned conv2d + bias + ReLU (baselines/loom_tuned.hpp), the weights read as they are
  // (TuneOptions::constant_inputs was not used for these records), in two layouts:
  // - NCHW in and out, OIHW weights: the layout of the other plain contenders;
  // - NHWC in and out, HWIO weights: the layouts oneDNN's blocked variant is measured in (it
  //   picks NHWC source here), reordered once before timing as that variant's are, so that the
  //   program can vectorize over output channels. Its output is reordered back (untimed) for
  //   the check.
  for (bool nhwc : {false, true}) {
    ConvContender c;
    c.name = nhwc ? "LoomTuned_NHWC_BiasReLU" : "LoomTuned_BiasReLU";
    c.bias_relu = true;
    c.prepare = [nhwc](const ConvShape& p, int threads, ConvData& d) {
      using namespace loom;
      // Built by tune_workloads' own function, so that the workload keys match.
      const Task task =
          loom_bench::conv2d_bias_relu_task(p.n, p.c, p.h, p.w, p.k, p.r, p.s, p.pad, nhwc);
      runtime::set_num_threads(threads);
      auto best = loom_bench::tuned_program(task);
      auto kernel = std::make_shared<Kernel>(build(task, best.first));
      const std::string label = "tuned (" + best.second + ")";
      if (!nhwc) {
        float* out = d.out.data();
        return ConvInstance{
            [kernel, &d, out] {
              void* args[] = {d.src.data(), d.wei.data(), d.bias.data(), out};
              kernel->run_unchecked(args);
            },
            [&d](float* nchw) { std::copy(d.out.data(), d.out.data() + d.out.size(), nchw); },
            label};
      }
      return channels_last_instance(p, std::move(kernel), d, label);
    };
    c.set_threads = [](int n) { loom::runtime::set_num_threads(n); };
    c.max_threads = 2;
    all.push_back(std::move(c));
  }
#endif

#if defined(LOOM_BENCH_HAVE_DNNL)
  struct Variant {
    const char* name;
    loom_bench::DnnlConvLayout layout;
    bool fused;
  };
  for (Variant v :
       {Variant{"OneDNN_NCHW", loom_bench::DnnlConvLayout::Nchw, false},
        Variant{"OneDNN_NCHW_BiasReLU", loom_bench::DnnlConvLayout::Nchw, true},
        Variant{"OneDNN_Blocked", loom_bench::DnnlConvLayout::Blocked, false},
        Variant{"OneDNN_Blocked_BiasReLU", loom_bench::DnnlConvLayout::Blocked, true}}) {
    ConvContender c;
    c.name = v.name;
    c.bias_relu = v.fused;
    c.prepare = [v](const ConvShape& p, int threads, ConvData& d) {
      auto conv = std::make_shared<loom_bench::DnnlConv2d>(
          p, d.src.data(), d.wei.data(), d.bias.data(), v.fused, v.layout, threads);
      return ConvInstance{[conv] { (*conv)(); }, [conv](float* nchw) { conv->read_output(nchw); },
                          conv->impl_name() + " " + conv->formats()};
    };
    c.set_threads = loom_bench::dnnl_set_threads;
    c.max_threads = loom_bench::dnnl_threads_controllable() ? (1 << 20) : 1;
    all.push_back(std::move(c));
  }
#endif

#if defined(LOOM_BENCH_HAVE_HALIDE)
  // Halide 14's autoschedulers, compiled ahead of time per shape (benchmarks/halide/): NCHW in and
  // out, OIHW weights, bias + ReLU in the same pipeline.
  for (const std::string& variant : loom_bench::halide_variants()) {
    if (variant == "Hand") continue;  // hand-scheduled for bench_gemm only
    const auto kernel = [variant](const ConvShape& p) -> const loom_bench::HalideKernel* {
      if (p.n != 1 || p.r != 3 || p.s != 3 || p.pad != 1) return nullptr;
      return loom_bench::find_halide_kernel("conv2d_bias_relu", variant, {p.c, p.h, p.w, p.k});
    };
    ConvContender c;
    c.name = "Halide" + variant + "_BiasReLU";
    c.bias_relu = true;
    c.accepts = [kernel](const ConvShape& p) { return kernel(p) != nullptr; };
    c.prepare = [kernel](const ConvShape& p, int, ConvData& d) {
      auto call = std::make_shared<loom_bench::HalideCall>(
          *kernel(p),
          std::initializer_list<std::vector<int>>{{int(p.n), int(p.c), int(p.h), int(p.w)},
                                                  {int(p.k), int(p.c), int(p.r), int(p.s)},
                                                  {int(p.k)},
                                                  {int(p.n), int(p.k), int(p.oh()), int(p.ow())}});
      call->set(0, d.src.data());
      call->set(1, d.wei.data());
      call->set(2, d.bias.data());
      call->set(3, d.out.data());
      std::string label = call->label();
      return ConvInstance{
          [call] { (*call)(); },
          [&d](float* nchw) { std::copy(d.out.data(), d.out.data() + d.out.size(), nchw); },
          std::move(label)};
    };
    c.set_threads = loom_bench::halide_set_threads;
    c.max_threads = 1 << 20;
    all.push_back(std::move(c));
  }
#endif
}

void run_conv(benchmark::State& state, std::size_t ci, ConvShape p, int threads) {
  ConvContender& c = contenders()[ci];
  ConvData& d = conv_data(p);
  if (c.set_threads) c.set_threads(threads);
  static std::map<std::tuple<std::size_t, std::string, int>,
                  loom_bench::CheckedInstance<ConvInstance>>
      slots;
  const ConvInstance* instance = loom_bench::checked_instance(
      state, slots[{ci, p.name(), threads}], [&] { return c.prepare(p, threads, d); },
      [&](const ConvInstance& i) {
        return loom_bench::check_read_output(i, d.out,
                                             c.bias_relu ? d.ref_bias_relu.data() : d.ref.data(),
                                             loom_bench::gemm_tolerance(p.c * p.r * p.s));
      });
  if (!instance) return;
  loom_bench::run_timed(state, instance->call, "GFLOPS", p.flop() * 1e-9);
  state.SetLabel(instance->label);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  add_contenders();

  const std::vector<ConvShape> shapes = {
      {.n = 1, .c = 64, .h = 56, .w = 56, .k = 64, .r = 3, .s = 3, .pad = 1},
      {.n = 1, .c = 256, .h = 14, .w = 14, .k = 256, .r = 3, .s = 3, .pad = 1},
  };
  for (const ConvShape& p : shapes) {
    for (int t : {1, 2}) {
      for (std::size_t ci = 0; ci < contenders().size(); ++ci) {
        const ConvContender& c = contenders()[ci];
        if (t > c.max_threads || (c.accepts && !c.accepts(p))) continue;
        const std::string name = "BM_Conv2d_" + c.name + "/" + p.name() + "/" + std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [ci, p, t](benchmark::State& st) { run_conv(st, ci, p, t); })
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
