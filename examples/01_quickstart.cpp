/// \file
/// loom's quick start: a small network (a dense layer with bias and ReLU, followed by a row-wise
/// softmax) written with the DSL, turned into a ComputeDAG and evaluated with the reference
/// interpreter. The result is checked against the same network written as plain C++ loops.
///
/// The interpreter is the correctness oracle, not a fast path: it evaluates the DAG exactly as
/// written. Tuned kernels (schedule search + JIT) will be compared here against it once they exist.
#include <loom/loom.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

using namespace loom;

namespace {

constexpr int64_t M = 64;  // rows (batch)
constexpr int64_t K = 96;  // input features
constexpr int64_t N = 80;  // output features

/// The network as plain loops, in the same order of operations as the DAG.
void reference(const std::vector<float>& a, const std::vector<float>& b,
               const std::vector<float>& bias, std::vector<float>& out) {
  std::vector<float> d(N);
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
  auto D = compute("D", {M, N}, [&](Var i, Var j) { return max(C(i, j) + bias(j), 0.0f); },
                   "bias_relu");

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
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
  };
  std::vector<float> a = random(M * K), b = random(K * N), bb = random(N);
  std::vector<float> s(M * N), expected(M * N);

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
  std::printf("interpreter / loops  : %9.1fx slower (the interpreter is the oracle, not a fast "
              "path)\n", interp_ms / loop_ms);

  if (!(max_err <= tolerance)) {
    std::printf("FAILED: the interpreter disagrees with the plain loops\n");
    return 1;
  }
  std::printf("OK: the interpreter matches the plain loops\n");
  return 0;
}
