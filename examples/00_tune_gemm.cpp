/// \file
/// loom's main demo: tune a 512×512×512 fp32 GEMM on this machine's CPU, check the winner
/// against loom's reference interpreter, and time it against a naive loop and Eigen.
///
///   loom_demo [--trials N] [--seconds S] [--records FILE]
///
/// Defaults: 320 measured programs or 75 seconds of tuning, whichever comes first, logged to
/// `loom_demo_gemm.jsonl` in the working directory. A second run resumes from that log: it
/// measures N new programs on top of the recorded ones (and `--trials 0` only rebuilds the best
/// one, instantly).
#include <loom/tune.hpp>
#if LOOM_WITH_EIGEN
#include <Eigen/Core>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

using namespace loom;

namespace {

double median_ms(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void naive_gemm(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = 0;
      for (int64_t k = 0; k < n; ++k) s += a[i * n + k] * b[k * n + j];
      c[i * n + j] = s;
    }
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 320;
  double seconds = 75;
  std::string records = "loom_demo_gemm.jsonl";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--trials" && i + 1 < argc) {
      trials = std::atoi(argv[++i]);
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--records" && i + 1 < argc) {
      records = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--trials N] [--seconds S] [--records FILE]\n", argv[0]);
      return 2;
    }
  }

  // 1. The computation, written once with the DSL.
  const int64_t n = 512;
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  auto k = reduce_axis(n, "k");
  auto C = compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); }, "matmul");
  Task task(ComputeDAG({A, B}, {C}));
  const double flops = task.dag->flop_count();

  // 2. Tuning: evolutionary search guided by the learned cost model, every candidate measured
  //    in a separate process and checked against the reference.
  TuneOptions opts;
  opts.trials = trials;
  opts.time_limit_s = seconds;
  opts.records = records;
  opts.name = "gemm 512";
  std::printf(
      "Tuning C = A * B at %lld^3 on %d threads: up to %d programs or %.0f s "
      "(records: %s)\n",
      static_cast<long long>(n), runtime::num_threads(), trials, seconds, records.c_str());
  TuneResult r = tune(task, opts);
  if (!r.found()) {
    std::fprintf(stderr, "no correct program was found\n");
    return 1;
  }
  Kernel tuned = r.kernel();

  // 3. Check the tuned kernel against a naive loop (the interpreter checked every measured
  //    program already; this is the user's own check).
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  // Cache-line aligned, as the tuner measured the kernel (a std::vector this large starts 16
  // bytes off a line, which costs kernels that read an input in place with vector loads).
  aligned_vector<float> a(n * n), b(n * n), c(n * n), ref(n * n), eig(n * n);
  for (auto& x : a) x = dist(gen);
  for (auto& x : b) x = dist(gen);
  tuned(a.data(), b.data(), c.data());
  naive_gemm(a.data(), b.data(), ref.data(), n);
  double worst = 0;
  for (int64_t i = 0; i < n * n; ++i) worst = std::max(worst, double(std::abs(c[i] - ref[i])));
  std::printf("tuned kernel vs naive loop: largest difference %.2e\n", worst);
  if (worst > 1e-3) return 1;

  // 4. Race: contenders alternate (A B C A B C ...) and medians are reported. Eigen gets loom's
  // thread count where it is built with OpenMP (its only way to use threads).
#if LOOM_WITH_EIGEN && defined(_OPENMP)
  Eigen::setNbThreads(runtime::num_threads());
#endif
  std::vector<double> t_loom, t_naive, t_eigen;
  for (int round = 0; round < 3; ++round) {
    t_loom.push_back(median_ms(9, [&] { tuned(a.data(), b.data(), c.data()); }));
    t_naive.push_back(median_ms(1, [&] { naive_gemm(a.data(), b.data(), ref.data(), n); }));
#if LOOM_WITH_EIGEN
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const RowMat> ea(a.data(), n, n), eb(b.data(), n, n);
    Eigen::Map<RowMat> ec(eig.data(), n, n);
    t_eigen.push_back(median_ms(9, [&] { ec.noalias() = ea * eb; }));
#endif
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const auto& rep = r.report();
  std::printf("\nbest of %d measured programs (%d failed, %d from the log), found in %.1f s\n",
              rep.trials + rep.resumed, rep.failures, rep.resumed, rep.wall_seconds);
  std::printf("loom tuned   : %9.3f ms  %7.1f GFLOP/s\n", med(t_loom), flops / (med(t_loom) * 1e6));
  std::printf("naive loop   : %9.3f ms  %7.1f GFLOP/s  (loom is %.1fx faster)\n", med(t_naive),
              flops / (med(t_naive) * 1e6), med(t_naive) / med(t_loom));
#if LOOM_WITH_EIGEN
  if (Eigen::nbThreads() == runtime::num_threads())
    std::printf(
        "Eigen 3.4    : %9.3f ms  %7.1f GFLOP/s  (loom / Eigen speed: %.2fx, both on %d "
        "thread(s))\n",
        med(t_eigen), flops / (med(t_eigen) * 1e6), med(t_eigen) / med(t_loom),
        runtime::num_threads());
  else  // Eigen without OpenMP runs on one thread: say so instead of a ratio that misleads
    std::printf(
        "Eigen 3.4    : %9.3f ms  %7.1f GFLOP/s  (on %d thread(s), loom on %d: not like for "
        "like; build with OpenMP for Eigen's threads)\n",
        med(t_eigen), flops / (med(t_eigen) * 1e6), Eigen::nbThreads(), runtime::num_threads());
#endif
  std::printf("\nthe winning loop nest:\n%s", r.best_schedule().c_str());
  return 0;
}
