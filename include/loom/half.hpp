/// \file
/// loom::float16 and loom::bfloat16: 16-bit floating-point element types (below every layer,
/// dependency-free).
///
/// They are *storage* types: tensors may hold them, kernels load them (exactly, as float32) and
/// store them (rounded to nearest even), and nothing computes in them; arithmetic happens in
/// float32 after a cast<float>() (mixed precision, issue 36). The conversion functions here are
/// the one definition of the rounding: the interpreters and the measurers call them, and the
/// LLVM and CUDA backends generate the same integer sequences, so that every path agrees bit for
/// bit.
///
/// - float -> bfloat16: round to nearest even on the upper 16 bits of the float's encoding;
///   every NaN becomes the quiet NaN 0x7fc0 (CUDA's __float2bfloat16_rn does the same).
/// - float -> float16: IEEE binary16, round to nearest even, overflow to infinity, gradual
///   underflow to subnormals; a NaN stays a NaN (quiet, the top payload bits kept, as F16C's
///   vcvtps2ph and PTX's cvt.rn.f16.f32 do).
/// - 16 bits -> float: exact (every 16-bit value is a float32 value).
#ifndef LOOM_HALF_HPP
#define LOOM_HALF_HPP

#include "loom/config.hpp"

#include <bit>
#include <cstdint>
#include <type_traits>

LOOM_BEGIN_NAMESPACE

namespace detail {

/// float32 -> bfloat16 bits, round to nearest even; NaN -> 0x7fc0.
constexpr uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// bfloat16 bits -> float32, exact.
constexpr float bfloat16_bits_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

/// float32 -> IEEE binary16 bits, round to nearest even (see the file comment).
constexpr uint16_t float_to_float16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  // 65520 = 0x477ff000 is halfway between 65504 (the largest finite, odd mantissa) and 2^16:
  // it and everything above round to infinity.
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // normal: rebias the exponent (127 -> 15), round off 13 bits
    const uint32_t m = a - 0x38000000u;
    return static_cast<uint16_t>(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  // Subnormal or zero: the value in units of 2^-24 is the 24-bit significand shifted right.
  const int shift = 126 - static_cast<int>(a >> 23);
  if (shift > 24) return static_cast<uint16_t>(sign);
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // a carry into 0x400 is the least normal
  return static_cast<uint16_t>(sign | q);
}

/// IEEE binary16 bits -> float32, exact.
constexpr float float16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  int e = (h >> 10) & 0x1f;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);
    e = 1;  // subnormal: normalise the significand
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    m &= 0x3ffu;
  }
  return std::bit_cast<float>(sign | (static_cast<uint32_t>(e + 112) << 23) | (m << 13));
}

}  // namespace detail

/// IEEE 754 binary16 (1 sign, 5 exponent, 10 fraction bits: 11 significant bits), a storage type.
struct float16 {
  uint16_t bits = 0;
  constexpr float16() = default;
  /// Rounds to nearest even (see the file comment).
  constexpr explicit float16(float f) : bits(detail::float_to_float16_bits(f)) {}
  static constexpr float16 from_bits(uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
  /// Exact.
  constexpr explicit operator float() const { return detail::float16_bits_to_float(bits); }
};

/// bfloat16 (1 sign, 8 exponent, 7 fraction bits: 8 significant bits, float32's range), a
/// storage type.
struct bfloat16 {
  uint16_t bits = 0;
  constexpr bfloat16() = default;
  /// Rounds to nearest even; NaN becomes 0x7fc0.
  constexpr explicit bfloat16(float f) : bits(detail::float_to_bfloat16_bits(f)) {}
  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  /// Exact.
  constexpr explicit operator float() const { return detail::bfloat16_bits_to_float(bits); }
};

/// True for loom's 16-bit float storage types.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

namespace detail {
/// What a float value becomes once stored as a 16-bit float (bf when true, fp16 otherwise) and
/// read back: the one rounding of the interpreters. Doubles go through float32 first, as
/// the generated code converts (see dtype.hpp).
inline double round_to_half(bool bf, double v) {
  const float f = static_cast<float>(v);
  return bf ? bfloat16_bits_to_float(float_to_bfloat16_bits(f))
            : float16_bits_to_float(float_to_float16_bits(f));
}
}  // namespace detail

LOOM_END_NAMESPACE

#endif  // LOOM_HALF_HPP
