/// \file
/// DType: the element type of an IR expression or buffer, as runtime data (layer ir/).
#ifndef LOOM_IR_DTYPE_HPP
#define LOOM_IR_DTYPE_HPP

#include "loom/config.hpp"
#include "loom/half.hpp"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <type_traits>

LOOM_BEGIN_NAMESPACE
namespace ir {

/// Scalar kind, bit width and vector lane count. loom's tensors hold float32, float64, int32 or
/// int64, or the 16-bit storage floats float16 and bfloat16; bool is the type of conditions;
/// lanes > 1 appears only after vectorization.
///
/// float16 ({Float, 16}) and bfloat16 ({BFloat, 16}) are storage-only: they may be loaded,
/// stored and converted with a Cast, and nothing else (no arithmetic, comparison, math call,
/// select or reduction; ComputeDAG refuses them with loom.dag.E218). A conversion to a 16-bit
/// float converts to float32 first and then rounds to nearest even; a conversion from one is
/// exact to float32 and goes on from there (half.hpp holds the rounding).
struct DType {
  enum class Code : uint8_t { Int, UInt, Float, Bool, BFloat };
  Code code = Code::Float;
  uint8_t bits = 32;
  uint16_t lanes = 1;

  /// Float of any width, bfloat16 included.
  constexpr bool is_float() const { return code == Code::Float || code == Code::BFloat; }
  constexpr bool is_bfloat() const { return code == Code::BFloat; }
  /// float16 or bfloat16: the storage-only floats.
  constexpr bool is_16bit_float() const { return is_float() && bits == 16; }
  constexpr bool is_int() const { return code == Code::Int; }
  constexpr bool is_uint() const { return code == Code::UInt; }
  constexpr bool is_bool() const { return code == Code::Bool; }
  /// Int, UInt or Bool: values that can take part in index arithmetic.
  constexpr bool is_integral() const { return !is_float(); }
  constexpr int bytes() const { return code == Code::Bool ? 1 : bits / 8; }
  constexpr DType element_of() const { return {code, bits, 1}; }
  constexpr DType with_lanes(int n) const { return {code, bits, static_cast<uint16_t>(n)}; }
  friend constexpr bool operator==(DType a, DType b) {
    return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
  }

  static constexpr DType f32() { return {Code::Float, 32, 1}; }
  static constexpr DType f64() { return {Code::Float, 64, 1}; }
  static constexpr DType f16() { return {Code::Float, 16, 1}; }
  static constexpr DType bf16() { return {Code::BFloat, 16, 1}; }
  static constexpr DType i32() { return {Code::Int, 32, 1}; }
  static constexpr DType i64() { return {Code::Int, 64, 1}; }
  static constexpr DType boolean() { return {Code::Bool, 1, 1}; }
  /// The type of loop variables and index arithmetic.
  static constexpr DType index() { return i64(); }
};

/// "float32", "int64", "bool", "float32x8", "float16", "bfloat16".
std::string to_string(DType t);
std::ostream& operator<<(std::ostream& os, DType t);
/// Parses what to_string prints; throws loom::user_error on anything else.
DType parse_dtype(const std::string& s);

/// The DType of a C++ element type. Only the element types loom supports are defined.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32();
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64();
};
template <>
struct dtype_of<float16> {
  static constexpr DType value = DType::f16();
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::bf16();
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32();
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64();
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::boolean();
};
template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace ir
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ir/impl/dtype.ipp"
#endif

#endif  // LOOM_IR_DTYPE_HPP
