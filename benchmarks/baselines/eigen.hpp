/// \file
/// Eigen 3.4 fp32 baselines:
///  - gemm_eigen: row-major Maps over the caller's buffers and a noalias product (Eigen's GEBP
///    kernel with its own packing, SIMD width fixed at compile time by -march);
///  - EigenConv2dIm2col: im2col into a scratch matrix, then one GEMM (+ optional bias and ReLU as
///    a second pass), NCHW in and out;
///  - EigenDepthwiseConv2d: per channel, R*S shifted windows of a zero-bordered copy, NCHW;
///  - softmax_eigen_rows: per-row max / exp / sum / scale with Eigen's vectorized exp.
///
/// Threading: Eigen parallelizes GEMM with OpenMP (`#pragma omp parallel num_threads(n)`) only
/// when the translation unit is compiled with OpenMP; `Eigen::setNbThreads(n)` sets n. Without
/// OpenMP Eigen is single-threaded and eigen_max_threads() says so.
#ifndef LOOM_BENCH_BASELINES_EIGEN_HPP
#define LOOM_BENCH_BASELINES_EIGEN_HPP

#if defined(LOOM_BENCH_HAVE_EIGEN)

#include "baselines/common.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace loom_bench {

/// C = A * B with Eigen, all row-major.
inline void gemm_eigen(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMajor> ma(a, m, k);
  Eigen::Map<const RowMajor> mb(b, k, n);
  Eigen::Map<RowMajor> mc(c, m, n);
  mc.noalias() = ma * mb;
}

/// NCHW convolution as im2col + GEMM: col[(c,r,s), (y,x)] = src[c, y+r-pad, x+s-pad] (0 outside),
/// dst[k, (y,x)] = W[k, (c,r,s)] * col. The im2col copy is part of every call (it is the cost of
/// this method); the scratch matrix is allocated once.
class EigenConv2dIm2col {
 public:
  EigenConv2dIm2col(const ConvShape& p, bool bias_relu, int threads)
      : p_(p),
        bias_relu_(bias_relu),
        threads_(threads),
        col_(std::size_t(p.c * p.r * p.s * p.oh() * p.ow())) {}

  /// dst (N,K,OH,OW) = conv(src (N,C,H,W), wei (K,C,R,S)) [+ bias, ReLU].
  void operator()(const float* src, const float* wei, const float* bias, float* dst) {
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const int64_t oh = p_.oh(), ow = p_.ow(), crs = p_.c * p_.r * p_.s;
    for (int64_t n = 0; n < p_.n; ++n) {
      im2col(src + n * p_.c * p_.h * p_.w);
      Eigen::Map<const RowMajor> w(wei, p_.k, crs);
      Eigen::Map<const RowMajor> col(col_.data(), crs, oh * ow);
      Eigen::Map<RowMajor> out(dst + n * p_.k * oh * ow, p_.k, oh * ow);
      out.noalias() = w * col;
      if (bias_relu_) {
        Eigen::Map<const Eigen::VectorXf> b(bias, p_.k);
        out = (out.colwise() + b).cwiseMax(0.0f);
      }
    }
  }

 private:
  void im2col(const float* in) {
    const int64_t oh = p_.oh(), ow = p_.ow();
    const int64_t rows = p_.c * p_.r * p_.s;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads_) schedule(static)
#endif
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t c = row / (p_.r * p_.s), r = (row / p_.s) % p_.r, s = row % p_.s;
      const float* plane = in + c * p_.h * p_.w;
      float* out = col_.data() + row * oh * ow;
      for (int64_t y = 0; y < oh; ++y) {
        const int64_t iy = y + r - p_.pad;
        float* orow = out + y * ow;
        if (iy < 0 || iy >= p_.h) {
          std::fill(orow, orow + ow, 0.0f);
          continue;
        }
        for (int64_t x = 0; x < ow; ++x) {
          const int64_t ix = x + s - p_.pad;
          orow[x] = (ix >= 0 && ix < p_.w) ? plane[iy * p_.w + ix] : 0.0f;
        }
      }
    }
  }

  ConvShape p_;
  bool bias_relu_;
  int threads_;
  AlignedFloats col_;
};

/// Depthwise convolution (channel multiplier 1) with Eigen arrays: per channel, the plane is
/// copied into a zero-bordered scratch plane, then the output is the sum of the R*S shifted
/// windows (`block(r, s, OH, OW)`) of that plane, each scaled by its filter tap, i.e. R*S
/// vectorized passes over an output plane that stays in cache. The copy is part of every call
/// (the cost of the method); the scratch is allocated, and its border zeroed, once. Channels are
/// split with OpenMP when available. `src` NCHW, `wei` [C, 1, R, S], `dst` NCHW; `p.k` = `p.c`.
class EigenDepthwiseConv2d {
 public:
  EigenDepthwiseConv2d(const ConvShape& p, int threads)
      : p_(p),
        threads_(threads),
        ph_(p.h + 2 * p.pad),
        pw_(p.w + 2 * p.pad),
        padded_(std::size_t(p.c * ph_ * pw_)) {
    std::fill(padded_.data(), padded_.data() + padded_.size(), 0.0f);
  }

  void operator()(const float* src, const float* wei, float* dst) {
    using Plane = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const int64_t oh = p_.oh(), ow = p_.ow();
    for (int64_t n = 0; n < p_.n; ++n) {
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads_) schedule(static)
#endif
      for (int64_t c = 0; c < p_.c; ++c) {
        Eigen::Map<Plane> pad(padded_.data() + c * ph_ * pw_, ph_, pw_);
        Eigen::Map<const Plane> in(src + (n * p_.c + c) * p_.h * p_.w, p_.h, p_.w);
        pad.block(p_.pad, p_.pad, p_.h, p_.w) = in;
        Eigen::Map<Plane> out(dst + (n * p_.c + c) * oh * ow, oh, ow);
        const float* f = wei + c * p_.r * p_.s;
        out = f[0] * pad.block(0, 0, oh, ow);
        for (int64_t r = 0; r < p_.r; ++r)
          for (int64_t s = r == 0 ? 1 : 0; s < p_.s; ++s)
            out += f[r * p_.s + s] * pad.block(r, s, oh, ow);
      }
    }
  }

 private:
  ConvShape p_;
  int threads_;
  int64_t ph_, pw_;
  AlignedFloats padded_;
};

/// Row-wise softmax with Eigen array expressions (vectorized exp and reductions); `threads` > 1
/// splits the rows with OpenMP when available.
inline void softmax_eigen_rows(const float* x, float* y, int64_t rows, int64_t cols, int threads) {
  using RowMajor = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMajor> in(x, rows, cols);
  Eigen::Map<RowMajor> out(y, rows, cols);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) schedule(static)
#else
  (void)threads;
#endif
  for (int64_t i = 0; i < rows; ++i) {
    const float m = in.row(i).maxCoeff();
    out.row(i) = (in.row(i) - m).exp();
    out.row(i) *= 1.0f / out.row(i).sum();
  }
}

/// Threads Eigen can use in this build: 1 without OpenMP.
inline int eigen_max_threads() {
#if defined(_OPENMP)
  return 1 << 20;
#else
  return 1;
#endif
}

/// Sets Eigen's GEMM thread count. OpenMP's own count is set too, because Eigen falls back to
/// omp_get_max_threads() where setNbThreads was never called and other code reads it.
inline void eigen_set_threads(int n) {
#if defined(_OPENMP)
  omp_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

/// The widest SIMD Eigen was compiled for, e.g. "AVX2+FMA": a short label for result rows.
inline std::string eigen_simd() {
#if defined(EIGEN_VECTORIZE_AVX512)
  std::string s = "AVX-512";
#elif defined(EIGEN_VECTORIZE_AVX2)
  std::string s = "AVX2";
#elif defined(EIGEN_VECTORIZE_AVX)
  std::string s = "AVX";
#elif defined(EIGEN_VECTORIZE_SSE2)
  std::string s = "SSE2";
#else
  std::string s = "scalar";
#endif
#if defined(EIGEN_VECTORIZE_FMA)
  s += "+FMA";
#endif
  return s;
}

/// "Eigen 3.4.0, SIMD AVX2+FMA (...), threads: OpenMP (201511)": version, SIMD and threading.
inline std::string eigen_info() {
  std::string s = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                  std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
                  ", SIMD " + eigen_simd() + " (" + Eigen::SimdInstructionSetsInUse() + ")";
#if defined(_OPENMP)
  s += ", threads: OpenMP (" + std::to_string(_OPENMP) + ")";
#else
  s += ", threads: none (built without OpenMP)";
#endif
  return s;
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_HAVE_EIGEN
#endif  // LOOM_BENCH_BASELINES_EIGEN_HPP
