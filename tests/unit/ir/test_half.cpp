// The 16-bit storage floats: loom::float16 / loom::bfloat16 conversions (all 65,536 bit patterns
// of each, against a reference rounding done in double arithmetic) and their DTypes.
#include <doctest/doctest.h>
#include <loom/loom.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace loom;
using loom::ir::DType;

namespace {

struct half_format {
  const char* name;
  float (*to_float)(uint16_t);
  uint16_t (*from_float)(float);
  uint16_t inf_bits;  ///< positive infinity
  double beyond_max;  ///< the value infinity stands for when rounding: 2^(emax + 1)
};

const half_format fp16{"float16", detail::float16_bits_to_float, detail::float_to_float16_bits,
                       0x7c00, 65536.0};
const half_format bf16{"bfloat16", detail::bfloat16_bits_to_float, detail::float_to_bfloat16_bits,
                       0x7f80, std::ldexp(1.0, 128)};

/// Round to nearest even computed in double arithmetic: the nearest of the sorted finite
/// non-negative values (and "infinity" at beyond_max), ties to the even bit pattern.
class reference_rounding {
 public:
  explicit reference_rounding(const half_format& f) {
    for (uint32_t b = 0; b < f.inf_bits; ++b) {
      values_.push_back(static_cast<double>(f.to_float(static_cast<uint16_t>(b))));
      bits_.push_back(static_cast<uint16_t>(b));
    }
    values_.push_back(f.beyond_max);
    bits_.push_back(f.inf_bits);
    inf_bits_ = f.inf_bits;
  }

  uint16_t operator()(float x) const {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= values_.back()) return sign | inf_bits_;
    const size_t hi =
        static_cast<size_t>(std::upper_bound(values_.begin(), values_.end(), a) - values_.begin());
    const size_t lo = hi - 1;
    const double dlo = a - values_[lo], dhi = values_[hi] - a;
    if (dlo < dhi) return sign | bits_[lo];
    if (dhi < dlo) return sign | bits_[hi];
    return sign | ((bits_[lo] & 1) ? bits_[hi] : bits_[lo]);
  }

 private:
  std::vector<double> values_;
  std::vector<uint16_t> bits_;
  uint16_t inf_bits_ = 0;
};

bool is_nan_bits(const half_format& f, uint16_t b) {
  return (b & 0x7fff) > f.inf_bits;  // exponent all ones, fraction non-zero
}

void check_format(const half_format& f) {
  CAPTURE(f.name);
  // Every bit pattern: exact to float and back; NaNs stay NaNs.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float x = f.to_float(h);
    if (is_nan_bits(f, h)) {
      REQUIRE(std::isnan(x));
      REQUIRE(is_nan_bits(f, f.from_float(x)));
    } else {
      REQUIRE(f.from_float(x) == h);
    }
  }
  // Rounding: every representable value, its neighbours in float, the midpoint to the next value
  // (a tie) and the floats on either side of the midpoint; then random floats.
  const reference_rounding ref(f);
  int ties = 0;
  auto check = [&](float x) {
    CAPTURE(x);
    REQUIRE(f.from_float(x) == ref(x));
  };
  for (uint32_t b = 0; b < f.inf_bits; ++b) {
    for (float sign : {1.0f, -1.0f}) {
      const double lo = f.to_float(static_cast<uint16_t>(b));
      const double hi =
          b + 1 == f.inf_bits ? f.beyond_max : f.to_float(static_cast<uint16_t>(b + 1));
      const auto mid = static_cast<float>((lo + hi) / 2);  // exact: at most 12 significant bits
      if (static_cast<double>(mid) == (lo + hi) / 2) ++ties;
      const auto flo = static_cast<float>(lo);
      check(sign * flo);
      check(sign * std::nextafter(flo, 0.0f));
      check(sign * std::nextafter(flo, std::numeric_limits<float>::infinity()));
      check(sign * mid);
      check(sign * std::nextafter(mid, 0.0f));
      check(sign * std::nextafter(mid, std::numeric_limits<float>::infinity()));
    }
  }
  CHECK(ties == 2 * static_cast<int>(f.inf_bits));
  std::mt19937 gen(36);
  for (int n = 0; n < 1 << 20; ++n) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(gen()));
    if (!std::isnan(x)) check(x);
  }
  check(std::numeric_limits<float>::infinity());
  check(-std::numeric_limits<float>::infinity());
  check(std::numeric_limits<float>::denorm_min());
  check(std::numeric_limits<float>::max());
  for (float nan :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        std::numeric_limits<float>::signaling_NaN(), std::bit_cast<float>(0x7f800001u)})
    CHECK(is_nan_bits(f, f.from_float(nan)));
}

}  // namespace

TEST_SUITE("ir") {
  TEST_CASE("float16: exact widening, round-to-nearest-even narrowing, all 65,536 patterns") {
    check_format(fp16);
    // Overflow, subnormals and the NaN quieting that F16C and PTX's cvt.rn.f16.f32 do.
    CHECK(float16(65504.0f).bits == 0x7bff);
    CHECK(float16(65519.99f).bits == 0x7bff);
    CHECK(float16(65520.0f).bits == 0x7c00);
    CHECK(float16(-1e9f).bits == 0xfc00);
    CHECK(float16(std::ldexp(1.0f, -24)).bits == 0x0001);
    CHECK(float16(std::ldexp(1.0f, -25)).bits == 0x0000);  // a tie: to even, zero
    CHECK(float16(std::ldexp(1.5f, -25)).bits == 0x0001);
    CHECK(float16(std::ldexp(3.0f, -25)).bits == 0x0002);  // 1.5 units: a tie, to even 2
    CHECK(float16(std::ldexp(1.0f, -14)).bits == 0x0400);
    CHECK(float16(std::ldexp(1023.5f, -24)).bits == 0x0400);  // carries into the least normal
    CHECK(float16(std::bit_cast<float>(0x7f800001u)).bits == 0x7e00);
    CHECK(static_cast<float>(float16::from_bits(0x3c00)) == 1.0f);
    static_assert(float16(1.0f).bits == 0x3c00, "constexpr conversion");
  }

  TEST_CASE("bfloat16: exact widening, round-to-nearest-even narrowing, all 65,536 patterns") {
    check_format(bf16);
    CHECK(bfloat16(1.0f).bits == 0x3f80);
    CHECK(bfloat16(std::bit_cast<float>(0x3f808000u)).bits == 0x3f80);  // a tie: to even
    CHECK(bfloat16(std::bit_cast<float>(0x3f818000u)).bits == 0x3f82);  // a tie: to even
    CHECK(bfloat16(std::bit_cast<float>(0x3f808001u)).bits == 0x3f81);
    CHECK(bfloat16(std::bit_cast<float>(0x7f7fffffu)).bits == 0x7f80);  // overflows to inf
    CHECK(bfloat16(std::numeric_limits<float>::quiet_NaN()).bits == 0x7fc0);
    CHECK(bfloat16(-std::numeric_limits<float>::quiet_NaN()).bits == 0x7fc0);
    CHECK(static_cast<float>(bfloat16::from_bits(0xc040)) == -3.0f);
    static_assert(static_cast<float>(bfloat16(2.0f)) == 2.0f, "constexpr conversion");
  }

  TEST_CASE("float16 and bfloat16 DTypes") {
    CHECK(ir::dtype_v<float16> == DType::f16());
    CHECK(ir::dtype_v<bfloat16> == DType::bf16());
    CHECK(ir::to_string(DType::f16()) == "float16");
    CHECK(ir::to_string(DType::bf16()) == "bfloat16");
    CHECK(ir::to_string(DType::bf16().with_lanes(8)) == "bfloat16x8");
    for (DType t :
         {DType::f16(), DType::bf16(), DType::bf16().with_lanes(8), DType::f16().with_lanes(16)})
      CHECK(ir::parse_dtype(ir::to_string(t)) == t);
    CHECK(DType::f16().is_float());
    CHECK(DType::bf16().is_float());
    CHECK(DType::bf16().is_bfloat());
    CHECK(!DType::f16().is_bfloat());
    CHECK(DType::f16().is_16bit_float());
    CHECK(DType::bf16().is_16bit_float());
    CHECK(!DType::f32().is_16bit_float());
    CHECK(!DType::bf16().is_integral());
    CHECK(DType::bf16().bytes() == 2);
    CHECK(DType::f16().bytes() == 2);
    CHECK(sizeof(float16) == 2);
    CHECK(sizeof(bfloat16) == 2);
    // Constants round to the type.
    const ir::Expr rounded = ir::FloatImm::make(DType::bf16(), 1.0 + 1.0 / 256);
    CHECK(rounded.as<ir::FloatImm>()->value == 1.0);
    const ir::Expr overflowed = ir::FloatImm::make(DType::f16(), 70000.0);
    CHECK(std::isinf(overflowed.as<ir::FloatImm>()->value));
  }
}
