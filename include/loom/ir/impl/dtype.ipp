// Bodies of loom/ir/dtype.hpp.
#include "loom/ir/dtype.hpp"

#include "loom/error.hpp"

#include <ostream>
#include <string>

LOOM_BEGIN_NAMESPACE
namespace ir {

LOOM_DECL std::string to_string(DType t) {
  std::string s;
  switch (t.code) {
    case DType::Code::Int: s = "int" + std::to_string(t.bits); break;
    case DType::Code::UInt: s = "uint" + std::to_string(t.bits); break;
    case DType::Code::Float: s = "float" + std::to_string(t.bits); break;
    case DType::Code::Bool: s = "bool"; break;
    case DType::Code::BFloat: s = "bfloat" + std::to_string(t.bits); break;
  }
  if (t.lanes > 1) s += "x" + std::to_string(t.lanes);
  return s;
}

LOOM_DECL std::ostream& operator<<(std::ostream& os, DType t) { return os << to_string(t); }

LOOM_DECL DType parse_dtype(const std::string& s) {
  DType t;
  std::string base = s;
  auto x = s.find('x');
  if (x != std::string::npos) {
    base = s.substr(0, x);
    t.lanes = static_cast<uint16_t>(std::stoi(s.substr(x + 1)));
  }
  auto with = [&](DType::Code c, int bits) {
    t.code = c;
    t.bits = static_cast<uint8_t>(bits);
    return t;
  };
  if (base == "float32") return with(DType::Code::Float, 32);
  if (base == "float64") return with(DType::Code::Float, 64);
  if (base == "float16") return with(DType::Code::Float, 16);
  if (base == "bfloat16") return with(DType::Code::BFloat, 16);
  if (base == "int32") return with(DType::Code::Int, 32);
  if (base == "int64") return with(DType::Code::Int, 64);
  if (base == "bool") return with(DType::Code::Bool, 1);
  LOOM_USER_FAIL("loom.ir.E040")
      << "unknown element type '" << s
      << "'; expected float32, float64, float16, bfloat16, int32, int64 or bool";
  return t;
}

}  // namespace ir
LOOM_END_NAMESPACE
