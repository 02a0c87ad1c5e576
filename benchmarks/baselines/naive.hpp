/// \file
/// Naive baselines and double-precision references: what a compiler makes of the textbook loops.
///  - gemm_naive_ijk: the truly naive i,j,k order with a scalar accumulator. Strict IEEE keeps
///    the k-reduction sequential, and B is walked down a column (stride N), so it is scalar,
///    latency-bound and cache-hostile. Only sensible for small shapes.
///  - gemm_naive_ikj: the i,k,j order, whose inner loop streams a row of B into a row of C and is
///    auto-vectorized at -O3 -march=native. The "no schedule" baseline a tuner must beat by far.
///  - conv2d_reference / depthwise_conv2d_reference / softmax_reference: double-precision
///    oracles for the other benchmarks; depthwise_conv2d_naive: the direct depthwise loops.
///  - softmax_naive_rows: the three-pass row softmax with std::exp, strict IEEE.
#ifndef LOOM_BENCH_BASELINES_NAIVE_HPP
#define LOOM_BENCH_BASELINES_NAIVE_HPP

#include "baselines/common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace loom_bench {

/// C = A * B, row-major, i,j,k loop order.
// GCC's -O3 loop interchange (-floop-interchange) may turn this nest into i,k,j, which would make
// "naive" silently fast; keep the textbook order by disabling that one pass here.
__attribute__((noinline, optimize("no-loop-interchange"))) inline void gemm_naive_ijk(
    const float* __restrict a, const float* __restrict b, float* __restrict c, int64_t m, int64_t n,
    int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
      c[i * n + j] = acc;
    }
  }
}

/// C = A * B, row-major, i,k,j loop order (inner loop vectorizes over j).
__attribute__((noinline)) inline void gemm_naive_ikj(const float* __restrict a,
                                                     const float* __restrict b, float* __restrict c,
                                                     int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    float* crow = c + i * n;
    for (int64_t j = 0; j < n; ++j) crow[j] = 0.0f;
    for (int64_t p = 0; p < k; ++p) {
      const float aip = a[i * k + p];
      const float* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) crow[j] += aip * brow[j];
    }
  }
}

/// Reference direct convolution accumulated in double; optional bias (per output channel) and
/// ReLU. `src` NCHW, `wei` KCRS, `dst` NCHW (N, K, OH, OW). The oracle of bench_conv2d.
inline void conv2d_reference(const ConvShape& p, const float* src, const float* wei,
                             const float* bias, bool relu, float* dst) {
  const int64_t oh = p.oh(), ow = p.ow();
  std::vector<double> acc(std::size_t(oh * ow));
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t k = 0; k < p.k; ++k) {
      std::fill(acc.begin(), acc.end(), bias ? double(bias[k]) : 0.0);
      for (int64_t c = 0; c < p.c; ++c) {
        const float* in = src + (n * p.c + c) * p.h * p.w;
        for (int64_t r = 0; r < p.r; ++r) {
          for (int64_t s = 0; s < p.s; ++s) {
            const double wv = wei[((k * p.c + c) * p.r + r) * p.s + s];
            for (int64_t y = 0; y < oh; ++y) {
              const int64_t iy = y + r - p.pad;
              if (iy < 0 || iy >= p.h) continue;
              for (int64_t x = 0; x < ow; ++x) {
                const int64_t ix = x + s - p.pad;
                if (ix < 0 || ix >= p.w) continue;
                acc[std::size_t(y * ow + x)] += wv * double(in[iy * p.w + ix]);
              }
            }
          }
        }
      }
      float* out = dst + (n * p.k + k) * oh * ow;
      for (int64_t i = 0; i < oh * ow; ++i) {
        const double v = acc[std::size_t(i)];
        out[i] = float(relu ? std::max(v, 0.0) : v);
      }
    }
  }
}

/// Direct convolution in fp32, loops n,k,c,r,s,y,x with the x loop innermost (auto-vectorized,
/// bounds hoisted); optional bias and ReLU. Single-threaded. `src` NCHW, `wei` KCRS, `dst` NCHW.
__attribute__((noinline)) inline void conv2d_naive(const ConvShape& p, const float* src,
                                                   const float* wei, const float* bias, bool relu,
                                                   float* dst) {
  const int64_t oh = p.oh(), ow = p.ow();
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t k = 0; k < p.k; ++k) {
      float* out = dst + (n * p.k + k) * oh * ow;
      std::fill(out, out + oh * ow, bias ? bias[k] : 0.0f);
      for (int64_t c = 0; c < p.c; ++c) {
        const float* in = src + (n * p.c + c) * p.h * p.w;
        for (int64_t r = 0; r < p.r; ++r) {
          for (int64_t s = 0; s < p.s; ++s) {
            const float wv = wei[((k * p.c + c) * p.r + r) * p.s + s];
            const int64_t x0 = std::max<int64_t>(0, p.pad - s);
            const int64_t x1 = std::min<int64_t>(ow, p.w + p.pad - s);
            for (int64_t y = 0; y < oh; ++y) {
              const int64_t iy = y + r - p.pad;
              if (iy < 0 || iy >= p.h) continue;
              const float* irow = in + iy * p.w;
              float* orow = out + y * ow;
              for (int64_t x = x0; x < x1; ++x) orow[x] += wv * irow[x + s - p.pad];
            }
          }
        }
      }
      if (relu) {
        for (int64_t i = 0; i < oh * ow; ++i) out[i] = std::max(out[i], 0.0f);
      }
    }
  }
}

/// Reference depthwise convolution (channel multiplier 1) accumulated in double: output channel c
/// convolves input channel c with filter c. `src` NCHW, `wei` [C, 1, R, S], `dst` NCHW
/// (N, C, OH, OW); `p.k` is ignored (it equals `p.c`). The oracle of bench_depthwise.
inline void depthwise_conv2d_reference(const ConvShape& p, const float* src, const float* wei,
                                       float* dst) {
  const int64_t oh = p.oh(), ow = p.ow();
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t c = 0; c < p.c; ++c) {
      const float* in = src + (n * p.c + c) * p.h * p.w;
      const float* f = wei + c * p.r * p.s;
      float* out = dst + (n * p.c + c) * oh * ow;
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          double acc = 0.0;
          for (int64_t r = 0; r < p.r; ++r) {
            const int64_t iy = y + r - p.pad;
            if (iy < 0 || iy >= p.h) continue;
            for (int64_t s = 0; s < p.s; ++s) {
              const int64_t ix = x + s - p.pad;
              if (ix < 0 || ix >= p.w) continue;
              acc += double(f[r * p.s + s]) * double(in[iy * p.w + ix]);
            }
          }
          out[y * ow + x] = float(acc);
        }
      }
    }
  }
}

/// Depthwise convolution (channel multiplier 1) in fp32, loops n,c,r,s,y,x with the x loop
/// innermost (auto-vectorized, bounds hoisted), as conv2d_naive without the input-channel loop.
/// Single-threaded. `src` NCHW, `wei` [C, 1, R, S], `dst` NCHW.
__attribute__((noinline)) inline void depthwise_conv2d_naive(const ConvShape& p, const float* src,
                                                             const float* wei, float* dst) {
  const int64_t oh = p.oh(), ow = p.ow();
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t c = 0; c < p.c; ++c) {
      const float* in = src + (n * p.c + c) * p.h * p.w;
      float* out = dst + (n * p.c + c) * oh * ow;
      std::fill(out, out + oh * ow, 0.0f);
      for (int64_t r = 0; r < p.r; ++r) {
        for (int64_t s = 0; s < p.s; ++s) {
          const float wv = wei[(c * p.r + r) * p.s + s];
          const int64_t x0 = std::max<int64_t>(0, p.pad - s);
          const int64_t x1 = std::min<int64_t>(ow, p.w + p.pad - s);
          for (int64_t y = 0; y < oh; ++y) {
            const int64_t iy = y + r - p.pad;
            if (iy < 0 || iy >= p.h) continue;
            const float* irow = in + iy * p.w;
            float* orow = out + y * ow;
            for (int64_t x = x0; x < x1; ++x) orow[x] += wv * irow[x + s - p.pad];
          }
        }
      }
    }
  }
}

/// Row-wise softmax, the textbook three passes (max, sum of exp, scale) with std::exp under
/// strict IEEE: the reductions stay sequential and exp is a scalar libm call. `threads` > 1
/// splits the rows with OpenMP when available.
__attribute__((noinline)) inline void softmax_naive_rows(const float* x, float* y, int64_t rows,
                                                         int64_t cols, int threads) {
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) schedule(static)
#else
  (void)threads;
#endif
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    float* yr = y + i * cols;
    float m = xr[0];
    for (int64_t j = 1; j < cols; ++j) m = std::max(m, xr[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      yr[j] = std::exp(xr[j] - m);
      sum += yr[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;
  }
}

/// Reference row-wise softmax in double.
inline void softmax_reference(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    double m = xr[0];
    for (int64_t j = 1; j < cols; ++j) m = std::max(m, double(xr[j]));
    double sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(double(xr[j]) - m);
    for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = float(std::exp(double(xr[j]) - m) / sum);
  }
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_BASELINES_NAIVE_HPP
