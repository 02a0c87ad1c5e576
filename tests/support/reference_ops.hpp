// Plain-loop reference implementations of the operator library, for tests.
//
// Written independently of loom (no loom header is included) and deliberately differently where
// that catches more bugs: convolutions test the bounds of every tap instead of padding, the
// transposed convolution scatters instead of gathering, average pooling counts the taps it
// visits. Every result is accumulated in double and rounded to T once, at the end, so the only
// error in a comparison is loom's (see tolerance()). All tensors are dense and row-major.
#ifndef LOOM_TESTS_SUPPORT_REFERENCE_OPS_HPP
#define LOOM_TESTS_SUPPORT_REFERENCE_OPS_HPP

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace loom_test::ref {

using dims2 = std::array<int64_t, 2>;
using dims3 = std::array<int64_t, 3>;

// Tolerances for float32 results that sum `n` products of values in [-1, 1]. loom's
// interpreter rounds to float32 after every operation and sums in order, so each of the n
// additions adds a rounding error of at most 2^-24 times the running sum. With random signs the
// running sum stays near sqrt(n) and the errors partly cancel, giving about n * 2e-8; atol is
// 25x that plus a floor of 1e-5 for single operations and the transcendental calls (exp, rsqrt,
// whose float32 versions are accurate to a few ulps). rtol = 1e-4 covers results far from 1.
struct tolerance {
  double atol, rtol;
};
inline tolerance float_tolerance(int64_t reduction_length) {
  return {1e-5 + 5e-7 * static_cast<double>(reduction_length), 1e-4};
}

// C[M, N] = op(A) op(B), A stored [M, K] (or [K, M] when ta), B stored [K, N] (or [N, K] when tb).
template <class T>
std::vector<T> matmul(const std::vector<T>& a, const std::vector<T>& b, int64_t m, int64_t n,
                      int64_t k, bool ta, bool tb) {
  std::vector<T> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        acc += av * bv;
      }
      c[i * n + j] = static_cast<T>(acc);
    }
  return c;
}

// matmul() for each of `batch` consecutive matrix pairs.
template <class T>
std::vector<T> batch_matmul(const std::vector<T>& a, const std::vector<T>& b, int64_t batch,
                            int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  std::vector<T> c;
  for (int64_t s = 0; s < batch; ++s) {
    std::vector<T> as(a.begin() + s * m * k, a.begin() + (s + 1) * m * k);
    std::vector<T> bs(b.begin() + s * k * n, b.begin() + (s + 1) * k * n);
    auto cs = matmul(as, bs, m, n, k, ta, tb);
    c.insert(c.end(), cs.begin(), cs.end());
  }
  return c;
}

// Y[M, N] = X[M, K] W[N, K]^T (+ bias[N] when bias is not empty), bias added in double.
template <class T>
std::vector<T> dense(const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& bias,
                     int64_t m, int64_t n, int64_t k) {
  std::vector<T> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias.empty() ? 0.0 : static_cast<double>(bias[j]);
      for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(x[i * k + p]) * w[j * k + p];
      y[i * n + j] = static_cast<T>(acc);
    }
  return y;
}

// Output extent of a sliding window.
inline int64_t window_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                          int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// 3-D grouped convolution: x [N, C, D, H, W], w [O, C / groups, KD, KH, KW] -> [N, O, OD, OH,
// OW]. Taps outside the input contribute zero. 1-D and 2-D convolutions are this one with
// leading spatial extents (and kernel extents) of 1.
template <class T>
std::vector<T> conv3d_ncdhw(const std::vector<T>& x, const std::vector<T>& w, int64_t n, int64_t c,
                            dims3 in, int64_t o, dims3 kernel, dims3 stride, dims3 pad, dims3 dil,
                            int64_t groups) {
  dims3 out;
  for (int d = 0; d < 3; ++d) out[d] = window_out(in[d], kernel[d], stride[d], pad[d], dil[d]);
  const int64_t cg = c / groups, og = o / groups;
  std::vector<T> y(n * o * out[0] * out[1] * out[2]);
  int64_t idx = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t z = 0; z < out[0]; ++z)
        for (int64_t yy = 0; yy < out[1]; ++yy)
          for (int64_t xx = 0; xx < out[2]; ++xx) {
            double acc = 0;
            const int64_t g = oc / og;
            for (int64_t ic = 0; ic < cg; ++ic)
              for (int64_t kz = 0; kz < kernel[0]; ++kz)
                for (int64_t ky = 0; ky < kernel[1]; ++ky)
                  for (int64_t kx = 0; kx < kernel[2]; ++kx) {
                    const int64_t iz = z * stride[0] - pad[0] + kz * dil[0];
                    const int64_t iy = yy * stride[1] - pad[1] + ky * dil[1];
                    const int64_t ix = xx * stride[2] - pad[2] + kx * dil[2];
                    if (iz < 0 || iz >= in[0] || iy < 0 || iy >= in[1] || ix < 0 || ix >= in[2])
                      continue;
                    const int64_t xi =
                        (((b * c + g * cg + ic) * in[0] + iz) * in[1] + iy) * in[2] + ix;
                    const int64_t wi =
                        (((oc * cg + ic) * kernel[0] + kz) * kernel[1] + ky) * kernel[2] + kx;
                    acc += static_cast<double>(x[xi]) * w[wi];
                  }
            y[idx++] = static_cast<T>(acc);
          }
  return y;
}

// 2-D grouped convolution, x [N, C, H, W], w [O, C / groups, KH, KW].
template <class T>
std::vector<T> conv2d_nchw(const std::vector<T>& x, const std::vector<T>& w, int64_t n, int64_t c,
                           dims2 in, int64_t o, dims2 kernel, dims2 stride, dims2 pad, dims2 dil,
                           int64_t groups) {
  return conv3d_ncdhw(x, w, n, c, {1, in[0], in[1]}, o, {1, kernel[0], kernel[1]},
                      {1, stride[0], stride[1]}, {0, pad[0], pad[1]}, {1, dil[0], dil[1]}, groups);
}

// 1-D grouped convolution, x [N, C, W], w [O, C / groups, KW].
template <class T>
std::vector<T> conv1d_ncw(const std::vector<T>& x, const std::vector<T>& w, int64_t n, int64_t c,
                          int64_t in, int64_t o, int64_t kernel, int64_t stride, int64_t pad,
                          int64_t dil, int64_t groups) {
  return conv3d_ncdhw(x, w, n, c, {1, 1, in}, o, {1, 1, kernel}, {1, 1, stride}, {0, 0, pad},
                      {1, 1, dil}, groups);
}

// 2-D grouped convolution in NHWC: x [N, H, W, C], w [KH, KW, C / groups, O] -> [N, OH, OW, O].
template <class T>
std::vector<T> conv2d_nhwc(const std::vector<T>& x, const std::vector<T>& w, int64_t n, dims2 in,
                           int64_t c, dims2 kernel, int64_t o, dims2 stride, dims2 pad, dims2 dil,
                           int64_t groups) {
  const int64_t oh = window_out(in[0], kernel[0], stride[0], pad[0], dil[0]);
  const int64_t ow = window_out(in[1], kernel[1], stride[1], pad[1], dil[1]);
  const int64_t cg = c / groups, og = o / groups;
  std::vector<T> y(n * oh * ow * o);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t yy = 0; yy < oh; ++yy)
      for (int64_t xx = 0; xx < ow; ++xx)
        for (int64_t oc = 0; oc < o; ++oc) {
          double acc = 0;
          for (int64_t ky = 0; ky < kernel[0]; ++ky)
            for (int64_t kx = 0; kx < kernel[1]; ++kx) {
              const int64_t iy = yy * stride[0] - pad[0] + ky * dil[0];
              const int64_t ix = xx * stride[1] - pad[1] + kx * dil[1];
              if (iy < 0 || iy >= in[0] || ix < 0 || ix >= in[1]) continue;
              for (int64_t ic = 0; ic < cg; ++ic) {
                const int64_t ch = (oc / og) * cg + ic;
                acc += static_cast<double>(x[((b * in[0] + iy) * in[1] + ix) * c + ch]) *
                       w[((ky * kernel[1] + kx) * cg + ic) * o + oc];
              }
            }
          y[((b * oh + yy) * ow + xx) * o + oc] = static_cast<T>(acc);
        }
  return y;
}

// Depthwise convolution: x [N, C, H, W], w [C, M, KH, KW] -> [N, C * M, OH, OW]; output channel
// ic * M + m is input channel ic filtered by w[ic, m].
template <class T>
std::vector<T> depthwise_conv2d_nchw(const std::vector<T>& x, const std::vector<T>& w, int64_t n,
                                     int64_t c, dims2 in, int64_t mult, dims2 kernel, dims2 stride,
                                     dims2 pad, dims2 dil) {
  const int64_t oh = window_out(in[0], kernel[0], stride[0], pad[0], dil[0]);
  const int64_t ow = window_out(in[1], kernel[1], stride[1], pad[1], dil[1]);
  std::vector<T> y(n * c * mult * oh * ow);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t m = 0; m < mult; ++m)
        for (int64_t yy = 0; yy < oh; ++yy)
          for (int64_t xx = 0; xx < ow; ++xx) {
            double acc = 0;
            for (int64_t ky = 0; ky < kernel[0]; ++ky)
              for (int64_t kx = 0; kx < kernel[1]; ++kx) {
                const int64_t iy = yy * stride[0] - pad[0] + ky * dil[0];
                const int64_t ix = xx * stride[1] - pad[1] + kx * dil[1];
                if (iy < 0 || iy >= in[0] || ix < 0 || ix >= in[1]) continue;
                acc += static_cast<double>(x[((b * c + ic) * in[0] + iy) * in[1] + ix]) *
                       w[((ic * mult + m) * kernel[0] + ky) * kernel[1] + kx];
              }
            y[(((b * c + ic) * mult + m) * oh + yy) * ow + xx] = static_cast<T>(acc);
          }
  return y;
}

// Transposed convolution by its definition as a scatter: input element (b, ic, iy, ix) adds
// x * w[ic, oc, ky, kx] to output (b, oc, iy * stride - pad + ky, ix * stride - pad + kx), for
// x [N, C, H, W] and w [C, O, KH, KW]; output extent (in - 1) stride - 2 pad + kernel + out_pad.
template <class T>
std::vector<T> conv2d_transpose_nchw(const std::vector<T>& x, const std::vector<T>& w, int64_t n,
                                     int64_t c, dims2 in, int64_t o, dims2 kernel, dims2 stride,
                                     dims2 pad, dims2 out_pad) {
  const int64_t oh = (in[0] - 1) * stride[0] - 2 * pad[0] + kernel[0] + out_pad[0];
  const int64_t ow = (in[1] - 1) * stride[1] - 2 * pad[1] + kernel[1] + out_pad[1];
  std::vector<double> acc(n * o * oh * ow, 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t iy = 0; iy < in[0]; ++iy)
        for (int64_t ix = 0; ix < in[1]; ++ix)
          for (int64_t oc = 0; oc < o; ++oc)
            for (int64_t ky = 0; ky < kernel[0]; ++ky)
              for (int64_t kx = 0; kx < kernel[1]; ++kx) {
                const int64_t yy = iy * stride[0] - pad[0] + ky;
                const int64_t xx = ix * stride[1] - pad[1] + kx;
                if (yy < 0 || yy >= oh || xx < 0 || xx >= ow) continue;
                acc[((b * o + oc) * oh + yy) * ow + xx] +=
                    static_cast<double>(x[((b * c + ic) * in[0] + iy) * in[1] + ix]) *
                    w[((ic * o + oc) * kernel[0] + ky) * kernel[1] + kx];
              }
  return std::vector<T>(acc.begin(), acc.end());
}

// Max or average pooling over x [N, C, H, W] (padding never wins a max; an average divides by
// the full window or, without count_include_pad, by the taps inside the input).
template <class T>
std::vector<T> pool2d_nchw(const std::vector<T>& x, int64_t n, int64_t c, dims2 in, dims2 kernel,
                           dims2 stride, dims2 pad, bool is_max, bool count_include_pad) {
  const int64_t oh = window_out(in[0], kernel[0], stride[0], pad[0], 1);
  const int64_t ow = window_out(in[1], kernel[1], stride[1], pad[1], 1);
  std::vector<T> y(n * c * oh * ow);
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t yy = 0; yy < oh; ++yy)
      for (int64_t xx = 0; xx < ow; ++xx) {
        double best = -std::numeric_limits<double>::infinity(), total = 0;
        int64_t taps = 0;
        for (int64_t ky = 0; ky < kernel[0]; ++ky)
          for (int64_t kx = 0; kx < kernel[1]; ++kx) {
            const int64_t iy = yy * stride[0] - pad[0] + ky;
            const int64_t ix = xx * stride[1] - pad[1] + kx;
            if (iy < 0 || iy >= in[0] || ix < 0 || ix >= in[1]) continue;
            const double v = x[(p * in[0] + iy) * in[1] + ix];
            best = std::max(best, v);
            total += v;
            ++taps;
          }
        const double count = count_include_pad ? static_cast<double>(kernel[0] * kernel[1])
                                               : static_cast<double>(taps);
        y[(p * oh + yy) * ow + xx] = static_cast<T>(is_max ? best : total / count);
      }
  return y;
}

// Row-major strides of a shape.
inline std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// The multi-index of flat position `flat` in `shape`.
inline std::vector<int64_t> unflatten(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// f(a[...], b[...]) over a's shape, with b (lower or equal rank) indexed by a's trailing indices.
template <class T, class F>
std::vector<T> broadcast_binary(const std::vector<T>& a, const std::vector<int64_t>& a_shape,
                                const std::vector<T>& b, const std::vector<int64_t>& b_shape, F f) {
  std::vector<T> y(a.size());
  const auto bs = strides_of(b_shape);
  const size_t skip = a_shape.size() - b_shape.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const auto idx = unflatten(static_cast<int64_t>(i), a_shape);
    int64_t off = 0;
    for (size_t d = 0; d < b_shape.size(); ++d) off += idx[skip + d] * bs[d];
    y[i] = static_cast<T>(f(static_cast<double>(a[i]), static_cast<double>(b[off])));
  }
  return y;
}

// x with bias[idx[axis]] added to each element.
template <class T>
std::vector<T> bias_add(const std::vector<T>& x, const std::vector<int64_t>& shape,
                        const std::vector<T>& bias, size_t axis) {
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = static_cast<T>(static_cast<double>(x[i]) +
                          bias[unflatten(static_cast<int64_t>(i), shape)[axis]]);
  return y;
}

template <class T>
std::vector<T> relu(const std::vector<T>& x) {
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
  return y;
}

// y[idx] = x[idx permuted]: dimension d of y is dimension perm[d] of x.
template <class T>
std::vector<T> transpose(const std::vector<T>& x, const std::vector<int64_t>& shape,
                         const std::vector<int>& perm) {
  std::vector<int64_t> out_shape(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) out_shape[d] = shape[perm[d]];
  const auto xs = strides_of(shape);
  std::vector<T> y(x.size());
  for (size_t i = 0; i < y.size(); ++i) {
    const auto idx = unflatten(static_cast<int64_t>(i), out_shape);
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * xs[perm[d]];
    y[i] = x[off];
  }
  return y;
}

// x padded with `value`: before[d] in front of and after[d] behind dimension d.
template <class T>
std::vector<T> pad(const std::vector<T>& x, const std::vector<int64_t>& shape,
                   const std::vector<int64_t>& before, const std::vector<int64_t>& after, T value) {
  std::vector<int64_t> out_shape(shape.size());
  int64_t total = 1;
  for (size_t d = 0; d < shape.size(); ++d) total *= out_shape[d] = shape[d] + before[d] + after[d];
  const auto xs = strides_of(shape);
  std::vector<T> y(total, value);
  for (int64_t i = 0; i < total; ++i) {
    const auto idx = unflatten(i, out_shape);
    int64_t off = 0;
    bool inside = true;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t s = idx[d] - before[d];
      inside = inside && s >= 0 && s < shape[d];
      off += s * xs[d];
    }
    if (inside) y[i] = x[off];
  }
  return y;
}

// Softmax of each of `rows` consecutive rows of length `len` (exp of the difference to the row
// maximum, in double).
template <class T>
std::vector<T> softmax(const std::vector<T>& x, int64_t rows, int64_t len) {
  std::vector<T> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x.data() + r * len;
    const double mx = *std::max_element(row, row + len);
    double total = 0;
    for (int64_t j = 0; j < len; ++j) total += std::exp(row[j] - mx);
    for (int64_t j = 0; j < len; ++j)
      y[r * len + j] = static_cast<T>(std::exp(row[j] - mx) / total);
  }
  return y;
}

// Layer normalization of each row of length `len`: (x - mean) / sqrt(var + eps) * gamma + beta.
template <class T>
std::vector<T> layer_norm(const std::vector<T>& x, const std::vector<T>& gamma,
                          const std::vector<T>& beta, int64_t rows, int64_t len, double eps) {
  std::vector<T> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x.data() + r * len;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < len; ++j) mean += row[j];
    mean /= static_cast<double>(len);
    for (int64_t j = 0; j < len; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(len);
    for (int64_t j = 0; j < len; ++j)
      y[r * len + j] = static_cast<T>((row[j] - mean) / std::sqrt(var + eps) * gamma[j] + beta[j]);
  }
  return y;
}

// Inference batch normalization of x [N, C, inner...] (inner = product of the trailing extents).
template <class T>
std::vector<T> batch_norm(const std::vector<T>& x, const std::vector<T>& gamma,
                          const std::vector<T>& beta, const std::vector<T>& mean,
                          const std::vector<T>& var, int64_t n, int64_t c, int64_t inner,
                          double eps) {
  std::vector<T> y(x.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (b * c + ch) * inner + i;
        y[at] = static_cast<T>((x[at] - static_cast<double>(mean[ch])) /
                                   std::sqrt(static_cast<double>(var[ch]) + eps) * gamma[ch] +
                               beta[ch]);
      }
  return y;
}

// Ansor's TBG: out[b, h, i, j] = sum_d q[b, i, h, d] * k[b, j, h, d] for q [B, M, H, D] and
// k [B, N, H, D], written directly on the untransposed layouts.
template <class T>
std::vector<T> tbg(const std::vector<T>& q, const std::vector<T>& k, int64_t batch, int64_t m,
                   int64_t n, int64_t heads, int64_t dim) {
  std::vector<T> y(batch * heads * m * n);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < dim; ++d)
            acc += static_cast<double>(q[((b * m + i) * heads + h) * dim + d]) *
                   k[((b * n + j) * heads + h) * dim + d];
          y[((b * heads + h) * m + i) * n + j] = static_cast<T>(acc);
        }
  return y;
}

}  // namespace loom_test::ref

#endif  // LOOM_TESTS_SUPPORT_REFERENCE_OPS_HPP
