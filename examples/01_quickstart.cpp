/// \file
/// loom's quick start: a small network (a dense layer with bias and ReLU, followed by a row-wise
/// softmax) written with the DSL, turned into a ComputeDAG and evaluated with the reference
/// interpreter. The result is checked against the same network written as plain C++ loops.
///
/// The interpreter is the correctness oracle, not a fast path: it evaluates the DAG exactly as
/// written. With the LLVM backend (loom::llvm), part 5 JIT-compiles a 512^3 matmul scheduled by
/// hand through loom's transform steps and times it against a naive loop and Eigen. (The schedule
/// search that will find such schedules by itself is the next milestone.)
#include <loom/loom.hpp>
#if LOOM_WITH_LLVM
#include <loom/cpu.hpp>
#endif
#if LOOM_WITH_EIGEN
#include <Eigen/Core>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

using namespace loom;

namespace {

/// `n` floats uniform in [-1, 1), on a cache line (kernels are tuned on aligned buffers).
aligned_vector<float> random_floats(std::mt19937& gen, int64_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  aligned_vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

#if LOOM_WITH_LLVM
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

// 5. A JIT-compiled kernel: C = A * B at 512^3, scheduled by hand with loom's steps, against a
// naive loop and Eigen, measured in turn (A B C A B C ...) and reported as medians.
bool jit_part() {
  const int64_t n = 512;
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  auto k = reduce_axis(n, "k");
  auto C = compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); }, "matmul");
  Task task(ComputeDAG({A, B}, {C}));
  const int nr = 2 * task.target.vector_lanes(4);
  sched::State s(task.dag);
  auto cl = s.cache_write("C", ir::MemoryScope::Local);  // register tile accumulator
  s.split("C", 0, {6});                                  // i -> i.0, i.1 (6 rows)
  s.split("C", 2, {nr});                                 // j -> j.0, j.1 (two vectors)
  s.reorder("C", {2, 0, 1, 3});                          // j.0 i.0 i.1 j.1
  s.compute_at(cl, "C", 1);                              // one tile per (j.0, i.0)
  s.reorder(cl, {2, 0, 1});                              // k outside the tile
  s.annotate(cl, 1, sched::Annotation::Unrolled);
  s.annotate(cl, 2, sched::Annotation::Vectorized);
  auto bl = s.cache_read("B", ir::MemoryScope::Local, {cl});  // pack B's column panel
  s.compute_at(bl, "C", 0);
  s.annotate(bl, 1, sched::Annotation::Vectorized);
  s.annotate("C", 0, sched::Annotation::Parallel);
  s.annotate("C", 2, sched::Annotation::Unrolled);
  s.annotate("C", 3, sched::Annotation::Vectorized);
  std::printf("\n== JIT: matmul %lld^3 on %s (%d threads), schedule ==\n%s",
              static_cast<long long>(n), task.target.to_string().c_str(), runtime::num_threads(),
              s.to_string().c_str());
  auto t0 = std::chrono::steady_clock::now();
  Kernel kernel = build(task, s);
  double compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::mt19937 gen(7);
  auto fill = [&](int64_t count) { return random_floats(gen, count); };
  aligned_vector<float> a = fill(n * n), b = fill(n * n), c(n * n), naive(n * n), eig(n * n);
  auto naive_loop = [&] {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0;
        for (int64_t p = 0; p < n; ++p) acc += a[i * n + p] * b[p * n + j];
        naive[i * n + j] = acc;
      }
  };
  kernel(a.data(), b.data(), c.data());
  naive_loop();
  double err = 0;
  for (int64_t x = 0; x < n * n; ++x)
    err = std::max(err, static_cast<double>(std::fabs(c[x] - naive[x])));
  const double flops = task.dag->flop_count();
  std::vector<double> t_loom, t_naive, t_eigen;
  for (int round = 0; round < 3; ++round) {
    t_loom.push_back(median_ms(5, [&] { kernel(a.data(), b.data(), c.data()); }));
    t_naive.push_back(median_ms(1, naive_loop));
#if LOOM_WITH_EIGEN
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const RowMat> ea(a.data(), n, n), eb(b.data(), n, n);
    Eigen::Map<RowMat> ec(eig.data(), n, n);
    t_eigen.push_back(median_ms(5, [&] { ec.noalias() = ea * eb; }));
#endif
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("lower + LLVM O3 + link : %9.1f ms\n", compile_ms);
  std::printf("max |loom - naive|     : %.3g\n", err);
  std::printf("loom (JIT)             : %9.3f ms  %7.1f GFLOP/s\n", med(t_loom),
              flops / (med(t_loom) * 1e6));
  std::printf("naive loop (g++ -O3)   : %9.3f ms  %7.1f GFLOP/s  (loom is %.1fx faster)\n",
              med(t_naive), flops / (med(t_naive) * 1e6), med(t_naive) / med(t_loom));
#if LOOM_WITH_EIGEN
  std::printf("Eigen 3.4              : %9.3f ms  %7.1f GFLOP/s  (loom / Eigen speed: %.2fx)\n",
              med(t_eigen), flops / (med(t_eigen) * 1e6), med(t_eigen) / med(t_loom));
#endif
  const bool ok = err <= 1e-5 * n;
  std::printf("%s\n",
              ok ? "OK: the JIT kernel matches the naive loop" : "FAILED: JIT kernel is wrong");
  return ok;
}
#endif

constexpr int64_t M = 64;  // rows (batch)
constexpr int64_t K = 96;  // input features
constexpr int64_t N = 80;  // output features

/// The network as plain loops, in the same order of operations as the DAG.
void reference(const aligned_vector<float>& a, const aligned_vector<float>& b,
               const aligned_vector<float>& bias, aligned_vector<float>& out) {
  aligned_vector<float> d(N);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      float c = 0.0f;
      for (int64_t k = 0; k < K; ++k) c += a[i * K + k] * b[k * N + j];
      d[j] = std::max(c + bias[j], 0.0f);
    }
    float row_max = -INFINITY;
    for (int64_t j = 0; j < N; ++j) row_max = std::max(row_max, d[j]);
    float row_sum = 0.0f;
    for (int64_t j = 0; j < N; ++j) row_sum += std::exp(d[j] - row_max);
    for (int64_t j = 0; j < N; ++j) out[i * N + j] = std::exp(d[j] - row_max) / row_sum;
  }
}

/// Best-of-`reps` wall time of `f`, in milliseconds.
template <class F>
double time_ms(int reps, F&& f) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main() {
  // 1. Describe the computation. Nothing is evaluated here: each compute() records its body as IR.
  auto A = placeholder<float>("A", {M, K});
  auto B = placeholder<float>("B", {K, N});
  auto bias = placeholder<float>("bias", {N});

  auto k = reduce_axis(K, "k");
  auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); }, "matmul");
  auto D =
      compute("D", {M, N}, [&](Var i, Var j) { return max(C(i, j) + bias(j), 0.0f); }, "bias_relu");

  // Row-wise softmax: subtract the row maximum for stability, exponentiate, normalise.
  auto jm = reduce_axis(N, "jm");
  auto js = reduce_axis(N, "js");
  auto row_max = compute("row_max", {M}, [&](Var i) { return max(D(i, jm), jm); });
  auto E = compute("E", {M, N}, [&](Var i, Var j) { return exp(D(i, j) - row_max(i)); });
  auto row_sum = compute("row_sum", {M}, [&](Var i) { return sum(E(i, js), js); });
  auto S = compute("S", {M, N}, [&](Var i, Var j) { return E(i, j) / row_sum(i); }, "softmax");

  // 2. The DAG: kernel arguments are the inputs, then the outputs.
  ComputeDAG dag({A, B, bias}, {S});
  std::cout << "== compute DAG (" << dag.num_ops() << " ops) ==\n" << dag << '\n';
  std::cout << "workload key : " << dag.workload_key() << '\n';
  std::cout << "FLOP count   : " << dag.flop_count() << '\n';
  std::cout << "op analysis  :\n";
  for (int op = 0; op < dag.num_ops(); ++op) {
    const OpInfo& info = dag.info(op);
    if (info.is_placeholder) continue;
    std::printf("  %-8s flops=%-8.0f elementwise=%d inlineable=%d multi_level_tiling=%d\n",
                dag.ops()[op].name().c_str(), info.flops, info.is_elementwise,
                info.is_strictly_inlineable, info.needs_multi_level_tiling);
  }

  // 3. Evaluate with the reference interpreter, and the same network as plain loops.
  std::mt19937 gen(42);
  auto random = [&](int64_t n) { return random_floats(gen, n); };
  aligned_vector<float> a = random(M * K), b = random(K * N), bb = random(N);
  aligned_vector<float> s(M * N), expected(M * N);

  double interp_ms = time_ms(3, [&] { evaluate(dag, {a.data(), b.data(), bb.data(), s.data()}); });
  double loop_ms = time_ms(20, [&] { reference(a, b, bb, expected); });

  double max_err = 0;
  for (int64_t x = 0; x < M * N; ++x)
    max_err = std::max(max_err, static_cast<double>(std::fabs(s[x] - expected[x])));

  // 4. Report.
  const double tolerance = 1e-5;  // exact today; headroom for FMA contraction (-march=native)
  std::printf("\n== evaluation (M=%lld, K=%lld, N=%lld) ==\n", static_cast<long long>(M),
              static_cast<long long>(K), static_cast<long long>(N));
  std::printf("S[0][0..3]           : %.6f %.6f %.6f %.6f\n", s[0], s[1], s[2], s[3]);
  std::printf("max |interp - loops| : %.3g (tolerance %.0g)\n", max_err, tolerance);
  std::printf("interpreter          : %9.3f ms  (%.3f GFLOP/s)\n", interp_ms,
              dag.flop_count() / (interp_ms * 1e6));
  std::printf("plain C++ loops      : %9.3f ms  (%.3f GFLOP/s)\n", loop_ms,
              dag.flop_count() / (loop_ms * 1e6));
  std::printf(
      "interpreter / loops  : %9.1fx slower (the interpreter is the oracle, not a fast "
      "path)\n",
      interp_ms / loop_ms);

  if (!(max_err <= tolerance)) {
    std::printf("FAILED: the interpreter disagrees with the plain loops\n");
    return 1;
  }
  std::printf("OK: the interpreter matches the plain loops\n");
#if LOOM_WITH_LLVM
  return jit_part() ? 0 : 1;
#else
  std::printf("\n(built without the LLVM backend: no JIT part)\n");
  return 0;
#endif
}
