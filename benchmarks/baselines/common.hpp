/// \file
/// Shared pieces of loom's benchmarks: the GEMM and convolution shape types, 64-byte aligned
/// buffers, fixed-seed inputs, a double-precision reference GEMM, the tolerance check, the process
/// CPU clock and wait_until_quiet(). No vendor library and no Google Benchmark is included here.
#ifndef LOOM_BENCH_BASELINES_COMMON_HPP
#define LOOM_BENCH_BASELINES_COMMON_HPP

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>

namespace loom_bench {

/// fp32 GEMM problem C[M,N] = A[M,K] * B[K,N], all three row-major and densely packed
/// (lda = K, ldb = N, ldc = N).
struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;

  /// 2*M*N*K: one multiply and one add per inner-product term.
  double flop() const { return 2.0 * double(m) * double(n) * double(k); }
  /// "M/N/K", the order used in benchmark names.
  std::string name() const {
    return std::to_string(m) + "/" + std::to_string(n) + "/" + std::to_string(k);
  }
  friend bool operator==(const GemmShape&, const GemmShape&) = default;
  friend auto operator<=>(const GemmShape&, const GemmShape&) = default;
};

/// fp32 2-D convolution problem, NCHW activations and OIHW (K,C,R,S) weights, stride 1,
/// symmetric zero padding.
struct ConvShape {
  int64_t n = 1, c = 0, h = 0, w = 0;  ///< input
  int64_t k = 0, r = 3, s = 3;         ///< output channels and kernel window
  int64_t pad = 1;

  int64_t oh() const { return h + 2 * pad - r + 1; }
  int64_t ow() const { return w + 2 * pad - s + 1; }
  /// 2*N*K*OH*OW*C*R*S (bias and ReLU not counted).
  double flop() const {
    return 2.0 * double(n) * double(k) * double(oh()) * double(ow()) * double(c) * double(r) *
           double(s);
  }
  /// "N1_C64_H56_W56_K64_R3_S3_P1", the form used in benchmark names.
  std::string name() const {
    return "N" + std::to_string(n) + "_C" + std::to_string(c) + "_H" + std::to_string(h) + "_W" +
           std::to_string(w) + "_K" + std::to_string(k) + "_R" + std::to_string(r) + "_S" +
           std::to_string(s) + "_P" + std::to_string(pad);
  }
};

/// Owning, 64-byte aligned float array (one cache line, one zmm register): every contender gets
/// the same alignment, so no one wins or loses on a split first vector.
class AlignedFloats {
 public:
  AlignedFloats() = default;
  explicit AlignedFloats(std::size_t n) : size_(n) {
    std::size_t bytes = std::max<std::size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
    data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!data_) throw std::bad_alloc();
  }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  float& operator[](std::size_t i) { return data_[i]; }
  float operator[](std::size_t i) const { return data_[i]; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t size_ = 0;
};

/// Fills `n` floats with uniform values in [-1, 1) from a fixed seed (mt19937, so the values are
/// the same on every platform and every run).
inline void fill_uniform(float* p, std::size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) p[i] = dist(gen);
}

/// Fills `n` floats with quiet NaN, so that a kernel that forgets to write part of C fails the
/// check instead of passing on the previous contender's result.
inline void fill_nan(float* p, std::size_t n) {
  std::fill(p, p + n, std::numeric_limits<float>::quiet_NaN());
}

/// Reference GEMM accumulated in double (i,k,j order): the oracle for every contender.
inline void gemm_reference(const float* a, const float* b, float* c, int64_t m, int64_t n,
                           int64_t k) {
  std::unique_ptr<double[]> row(new double[std::size_t(n)]);
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.get(), row.get() + n, 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double aip = a[i * k + p];
      const float* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) row[j] += aip * double(brow[j]);
    }
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = float(row[j]);
  }
}

/// Result of comparing a contender's C against the reference.
struct CheckResult {
  bool ok = true;
  double max_abs_err = 0;
  double tolerance = 0;
  int64_t first_bad = -1;  ///< flat index of the first element over the tolerance (or NaN)
};

/// Absolute tolerance for a length-K fp32 dot product of inputs in [-1, 1): 1e-5 * K. Blocked,
/// vectorized and reassociated summation (what every fast kernel does) stays within ~1e-6 * K;
/// a wrong layout, a skipped tile or a missing k-block is off by O(1).
inline double gemm_tolerance(int64_t k) { return 1e-5 * double(k) + 1e-6; }

/// Compares `got` against `want` element by element, NaN counting as a failure.
inline CheckResult check_close(const float* got, const float* want, std::size_t n, double tol) {
  CheckResult r;
  r.tolerance = tol;
  for (std::size_t i = 0; i < n; ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    if (!(err <= tol)) {  // also true for NaN
      if (r.ok) r.first_bad = int64_t(i);
      r.ok = false;
    }
    if (err > r.max_abs_err || std::isnan(err)) r.max_abs_err = err;
  }
  return r;
}

/// CPU time of the whole process (every thread) in seconds: with the wall time around the timed
/// loop it gives the number of busy cores, which shows both missing parallelism and other
/// libraries' threads still spinning.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Sleeps until no thread of this process burns CPU (at most `max_seconds`). Libraries' worker
/// threads busy-wait after a parallel call (OpenBLAS ~0.1 s, libgomp ~ms); without this, a
/// contender would be timed while the previous one's spinning threads hold a core.
inline void wait_until_quiet(double max_seconds = 1.0) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(max_seconds);
  constexpr auto window = std::chrono::milliseconds(2);
  while (clock::now() < deadline) {
    const double cpu0 = process_cpu_seconds();
    std::this_thread::sleep_for(window);
    if (process_cpu_seconds() - cpu0 < 0.1 * 1e-3 * double(window.count())) return;
  }
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_BASELINES_COMMON_HPP
