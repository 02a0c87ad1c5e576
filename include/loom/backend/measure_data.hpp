/// \file
/// What the measurers of every backend share (layer backend/): the random inputs programs are
/// measured on, the poison their outputs start as, and the comparison of an output with its
/// reference. One definition, so that a program is checked the same way on the CPU and the GPU.
#ifndef LOOM_BACKEND_MEASURE_DATA_HPP
#define LOOM_BACKEND_MEASURE_DATA_HPP

#include "loom/config.hpp"
#include "loom/detail/random.hpp"
#include "loom/ir/dtype.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace backend::measure_data {

/// An output as the comparison names it.
struct OutputSpec {
  std::string name;
  ir::DType dtype;
  std::vector<int64_t> shape;
  int64_t elements = 1;
};

/// Fills `n` elements of type `t` at `p`: floats uniform in [0.5, 1.5), integers in [1, 8],
/// bools 0 or 1. float16 and bfloat16 get the same draws rounded to nearest even: random values
/// the type represents.
inline void fill_random(void* p, ir::DType t, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto unit = [&] { return ::loom::detail::unit_draw(rng); };
  auto small_int = [&] { return static_cast<int64_t>(1 + (rng() >> 61)); };  // 1..8
  if (t.is_float() && t.bits == 32) {
    auto* x = static_cast<float*>(p);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(0.5 + unit());
  } else if (t.is_float() && t.bits == 64) {
    auto* x = static_cast<double*>(p);
    for (int64_t i = 0; i < n; ++i) x[i] = 0.5 + unit();
  } else if (t.is_16bit_float()) {
    auto* x = static_cast<uint16_t*>(p);
    for (int64_t i = 0; i < n; ++i) {
      const auto f = static_cast<float>(0.5 + unit());
      x[i] = t.is_bfloat() ? ::loom::detail::float_to_bfloat16_bits(f)
                           : ::loom::detail::float_to_float16_bits(f);
    }
  } else if (t.is_bool()) {
    auto* x = static_cast<unsigned char*>(p);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<unsigned char>(rng() >> 63);
  } else if (t.is_integral()) {
    auto* x = static_cast<unsigned char*>(p);
    const int bytes = t.bytes();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = small_int();
      std::memcpy(x + i * bytes, &v, static_cast<size_t>(bytes));  // little-endian low bytes
    }
  } else {
    // Nothing else is a tensor type: zeros rather than random bits, which could make NaNs.
    std::memset(p, 0, static_cast<size_t>(n * t.bytes()));
  }
}

/// Output buffers start as poison, so that an element a program never writes is caught.
inline void poison(void* p, ir::DType t, int64_t n) {
  if (t.is_float() && t.bits == 32) {
    std::fill_n(static_cast<float*>(p), n, std::numeric_limits<float>::quiet_NaN());
  } else if (t.is_float() && t.bits == 64) {
    std::fill_n(static_cast<double*>(p), n, std::numeric_limits<double>::quiet_NaN());
  } else if (t.is_16bit_float()) {
    const uint16_t nan = t.is_bfloat() ? 0x7fc0 : 0x7e00;
    std::fill_n(static_cast<uint16_t*>(p), n, nan);
  } else {
    std::memset(p, 0x5A, static_cast<size_t>(n * t.bytes()));
  }
}

inline std::string coordinates(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < c.size(); ++d) s += (d ? ", " : "") + std::to_string(c[d]);
  return s + "]";
}

inline int64_t integer_at(const unsigned char* p, ir::DType t, int64_t i) {
  const int bytes = t.bytes();
  int64_t v = 0;
  std::memcpy(&v, p + i * bytes, static_cast<size_t>(bytes));
  if (t.is_int() && bytes < 8) {
    const int shift = 64 - 8 * bytes;
    v = static_cast<int64_t>(static_cast<uint64_t>(v) << shift) >> shift;
  }
  return v;
}

/// Element `i` of a buffer of type `t` as a double: floats exactly, integers exactly up to 2^53.
inline double value_at(const void* p, ir::DType t, int64_t i) {
  if (t.is_float() && t.bits == 32) return static_cast<const float*>(p)[i];
  if (t.is_float() && t.bits == 64) return static_cast<const double*>(p)[i];
  if (t.is_16bit_float()) {
    const uint16_t h = static_cast<const uint16_t*>(p)[i];
    return t.is_bfloat() ? ::loom::detail::bfloat16_bits_to_float(h)
                         : ::loom::detail::float16_bits_to_float(h);
  }
  return static_cast<double>(integer_at(static_cast<const unsigned char*>(p), t, i));
}

/// The relative tolerance for outputs of type `t`, given the one for float32/float64 outputs.
/// A 16-bit output is a float32 result rounded once: when the kernel and the reference sum in
/// different orders, their float32 values differ by about `rtol` and may round to neighbouring
/// 16-bit values, one unit in the last place apart. An ulp is at most 2^-7 of the value for
/// bfloat16 (8 significant bits) and 2^-10 for float16 (11 significant bits), so those are
/// added. float32 outputs (of 16-bit inputs too) keep `rtol`.
inline double rtol_for(ir::DType t, double rtol) {
  if (t.is_bfloat()) return rtol + 0x1p-7;
  if (t.is_16bit_float()) return rtol + 0x1p-10;
  return rtol;
}

/// Whether `got` is `want` as the comparison of outputs judges an element of type `t`: integers
/// exactly, floats within atol + rtol_for(t, rtol) × |want| (equal infinities agree, a NaN
/// never does).
inline bool agrees(double got, double want, ir::DType t, double rtol, double atol) {
  if (got == want) return true;
  return t.is_float() && std::abs(got - want) <= atol + rtol_for(t, rtol) * std::abs(want);
}

/// Compares one output with its reference; empty when they agree, else what differs (how many
/// elements, and the worst one with its coordinates).
inline std::string compare_output(const OutputSpec& a, const void* got_p, const void* want_p,
                                  double rtol, double atol) {
  int64_t bad = 0, worst = -1;
  double worst_score = -1;
  std::string got_s, want_s;
  auto note = [&](int64_t i, double score) {
    ++bad;
    if (score > worst_score) {
      worst_score = score;
      worst = i;
    }
  };
  const ir::DType t = a.dtype;
  if (t.is_float()) {
    auto at = [&](const void* p, int64_t i) { return value_at(p, t, i); };
    for (int64_t i = 0; i < a.elements; ++i) {
      const double g = at(got_p, i), w = at(want_p, i);
      if (agrees(g, w, t, rtol, atol)) continue;
      const double d = std::abs(g - w);
      note(i, std::isnan(d) ? std::numeric_limits<double>::infinity()
                            : d / (atol + rtol_for(t, rtol) * std::abs(w)));
    }
    if (worst >= 0) {
      std::ostringstream g, w;
      g.precision(9);
      w.precision(9);
      g << at(got_p, worst);
      w << at(want_p, worst);
      got_s = g.str();
      want_s = w.str();
    }
  } else if (t.is_integral()) {
    auto* g = static_cast<const unsigned char*>(got_p);
    auto* w = static_cast<const unsigned char*>(want_p);
    for (int64_t i = 0; i < a.elements; ++i) {
      const int64_t gv = integer_at(g, t, i), wv = integer_at(w, t, i);
      if (gv != wv) note(i, std::abs(static_cast<double>(gv) - static_cast<double>(wv)));
    }
    if (worst >= 0) {
      got_s = std::to_string(integer_at(g, t, worst));
      want_s = std::to_string(integer_at(w, t, worst));
    }
  } else {
    const int bytes = t.bytes();
    for (int64_t i = 0; i < a.elements; ++i)
      if (std::memcmp(static_cast<const unsigned char*>(got_p) + i * bytes,
                      static_cast<const unsigned char*>(want_p) + i * bytes,
                      static_cast<size_t>(bytes)) != 0)
        note(i, 1);
    if (worst >= 0) got_s = want_s = "(bytes differ)";
  }
  if (bad == 0) return {};
  std::ostringstream os;
  os << "output '" << a.name << "' differs from the reference in " << bad << " of " << a.elements
     << " elements (rtol " << rtol_for(t, rtol) << ", atol " << atol << "); worst: element "
     << worst << " " << coordinates(worst, a.shape) << ": got " << got_s << ", expected " << want_s;
  return os.str();
}

}  // namespace backend::measure_data
LOOM_END_NAMESPACE

#endif  // LOOM_BACKEND_MEASURE_DATA_HPP
