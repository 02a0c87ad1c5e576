// Bodies of loom/lower/c_source.hpp.
#include "loom/lower/c_source.hpp"

#include "loom/ir/printer.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

using namespace ir;

inline std::string ident(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "v_" + s;
  return s;
}

inline std::string c_type(DType t) {
  if (t.is_bool()) return "bool";
  if (t.is_16bit_float()) return "uint16_t";  // storage only: the bits, see c_half_helpers
  if (t.is_float()) return t.bits == 32 ? "float" : "double";
  return t.bits == 32 ? "int32_t" : "int64_t";
}

class printer {
 public:
  std::ostringstream os;

  // `lane` is the name of the lane variable when printing one lane of a vector statement.
  std::string expr(const Expr& e, const std::string& lane) {
    const DType t = e.dtype();
    if (is_binary(e.kind())) {
      auto [a, b] = binary_operands(e);
      std::string x = expr(*a, lane), y = expr(*b, lane);
      switch (e.kind()) {
        case NodeKind::Add: return "(" + x + " + " + y + ")";
        case NodeKind::Sub: return "(" + x + " - " + y + ")";
        case NodeKind::Mul: return "(" + x + " * " + y + ")";
        case NodeKind::Div: return "(" + x + " / " + y + ")";
        case NodeKind::Mod:
          return a->dtype().is_float() ? "fmod(" + x + ", " + y + ")" : "(" + x + " % " + y + ")";
        case NodeKind::FloorDiv: return "loom_floordiv(" + x + ", " + y + ")";
        case NodeKind::FloorMod: return "loom_floormod(" + x + ", " + y + ")";
        case NodeKind::Min:
          return (a->dtype().is_float() ? "fmin(" : "loom_min(") + x + ", " + y + ")";
        case NodeKind::Max:
          return (a->dtype().is_float() ? "fmax(" : "loom_max(") + x + ", " + y + ")";
        case NodeKind::EQ: return "(" + x + " == " + y + ")";
        case NodeKind::NE: return "(" + x + " != " + y + ")";
        case NodeKind::LT: return "(" + x + " < " + y + ")";
        case NodeKind::LE: return "(" + x + " <= " + y + ")";
        case NodeKind::GT: return "(" + x + " > " + y + ")";
        case NodeKind::GE: return "(" + x + " >= " + y + ")";
        case NodeKind::And: return "(" + x + " && " + y + ")";
        case NodeKind::Or: return "(" + x + " || " + y + ")";
        case NodeKind::BitXor: return "(" + x + " ^ " + y + ")";
        default: break;
      }
    }
    switch (e.kind()) {
      case NodeKind::IntImm: {
        int64_t v = e.as<IntImm>()->value;
        if (t.is_bool()) return v ? "true" : "false";
        return t.bits == 64 ? "INT64_C(" + std::to_string(v) + ")" : std::to_string(v);
      }
      case NodeKind::FloatImm: {
        double v = e.as<FloatImm>()->value;
        if (t.is_16bit_float()) {
          const float f = static_cast<float>(v);
          return "((uint16_t)" +
                 std::to_string(t.is_bfloat() ? ::loom::detail::float_to_bfloat16_bits(f)
                                              : ::loom::detail::float_to_float16_bits(f)) +
                 "u)";
        }
        if (std::isinf(v)) return v < 0 ? "(-INFINITY)" : "INFINITY";
        char buf[64];
        auto r = std::to_chars(buf, buf + sizeof buf, v);
        std::string s(buf, r.ptr);
        if (s.find_first_of(".e") == std::string::npos) s += ".0";
        return t.bits == 32 ? s + "f" : s;
      }
      case NodeKind::Variable: return ident(e.as<Variable>()->name);
      case NodeKind::Cast: {
        // Conversions to and from 16-bit floats go through float32 (ir/dtype.hpp).
        const Expr& v = e.as<Cast>()->value;
        std::string x = expr(v, lane);
        if (v.dtype().is_16bit_float()) {
          x = (v.dtype().is_bfloat() ? "loom_bf16_to_f32(" : "loom_f16_to_f32(") + x + ")";
          if (t.element_of() == DType::f32()) return x;
        }
        if (t.is_16bit_float())
          return std::string(t.is_bfloat() ? "loom_f32_to_bf16((float)"
                                           : "loom_f32_to_f16((float)") +
                 x + ")";
        return "((" + c_type(t.element_of()) + ")" + x + ")";
      }
      case NodeKind::Not: return "(!" + expr(e.as<Not>()->a, lane) + ")";
      case NodeKind::Select: {
        auto* s = e.as<Select>();
        return "(" + expr(s->condition, lane) + " ? " + expr(s->true_value, lane) + " : " +
               expr(s->false_value, lane) + ")";
      }
      case NodeKind::Call: {
        auto* c = e.as<Call>();
        std::string x = expr(c->args[0], lane);
        const bool f = t.bits == 32 && t.is_float();
        auto fn = [&](const char* name) { return std::string(name) + (f ? "f(" : "(") + x + ")"; };
        switch (c->op) {
          case CallOp::exp: return fn("exp");
          case CallOp::log: return fn("log");
          case CallOp::sqrt: return fn("sqrt");
          case CallOp::rsqrt: return "(1 / " + fn("sqrt") + ")";
          case CallOp::tanh: return fn("tanh");
          case CallOp::sigmoid:
            return "(1 / (1 + " + std::string(f ? "expf(-" : "exp(-") + x + ")))";
          case CallOp::erf: return fn("erf");
          case CallOp::pow:
            return std::string(f ? "powf(" : "pow(") + x + ", " + expr(c->args[1], lane) + ")";
          case CallOp::abs: return t.is_float() ? fn("fabs") : "llabs(" + x + ")";
          case CallOp::floor: return fn("floor");
          case CallOp::ceil: return fn("ceil");
          case CallOp::round: return fn("nearbyint");
          case CallOp::sin: return fn("sin");
          case CallOp::cos: return fn("cos");
        }
        return x;
      }
      case NodeKind::Load: {
        auto* l = e.as<Load>();
        return ident(l->buffer->name) + "[" + expr(l->index, lane) + "]";
      }
      case NodeKind::Ramp: {
        auto* r = e.as<Ramp>();
        return "(" + expr(r->base, lane) + " + " + expr(r->stride, lane) + " * " + lane + ")";
      }
      case NodeKind::Broadcast: return expr(e.as<Broadcast>()->value, lane);
      default: return "/* " + std::string(node_kind_name(e.kind())) + " */";
    }
  }

  void stmt(const Stmt& s, int indent) {
    const std::string pad(indent * 2, ' ');
    if (!s.defined()) return;
    switch (s.kind()) {
      case StmtKind::Block:
        for (auto& x : s.as<Block>()->stmts) stmt(x, indent);
        return;
      case StmtKind::For: {
        auto* f = s.as<For>();
        const std::string v = ident(f->variable()->name);
        if (f->for_kind == ForKind::Parallel) os << pad << "#pragma omp parallel for\n";
        if (f->for_kind == ForKind::Vectorized) os << pad << "#pragma omp simd\n";
        if (f->for_kind == ForKind::Unrolled) os << pad << "#pragma GCC unroll 64\n";
        if (f->for_kind >= ForKind::BlockIdxX)
          os << pad << "/* bound to " << for_kind_name(f->for_kind) << " */\n";
        os << pad << "for (int64_t " << v << " = " << expr(f->min, "") << "; " << v << " < "
           << expr(f->min, "") << " + " << expr(f->extent, "") << "; ++" << v << ") {\n";
        stmt(f->body, indent + 1);
        os << pad << "}\n";
        return;
      }
      case StmtKind::Store: {
        auto* st = s.as<Store>();
        const int lanes = st->index.dtype().lanes;
        std::string lhs = ident(st->buffer->name);
        if (lanes == 1) {
          os << pad << lhs << "[" << expr(st->index, "") << "] = " << expr(st->value, "") << ";\n";
          return;
        }
        os << pad << "#pragma omp simd\n"
           << pad << "for (int64_t lane = 0; lane < " << lanes << "; ++lane) " << lhs << "["
           << expr(st->index, "lane") << "] = " << expr(st->value, "lane") << ";\n";
        return;
      }
      case StmtKind::Allocate: {
        auto* a = s.as<Allocate>();
        const std::string n = ident(a->buffer->name);
        const int64_t count = a->buffer->num_elements();
        const std::string t = c_type(a->buffer->dtype);
        if (count * a->buffer->dtype.bytes() <= 64 * 1024) {
          os << pad << t << " " << n << "[" << count << "] __attribute__((aligned(64)));\n";
          stmt(a->body, indent);
        } else {
          // The JIT takes such a buffer from loom_workspace_alloc (runtime/workspace.hpp), which
          // keeps it for the next call; the C stays standalone, so it asks the C library.
          os << pad << t << "* " << n << " = (" << t << "*)aligned_alloc(64, "
             << (count * a->buffer->dtype.bytes() + 63) / 64 * 64 << ");\n";
          stmt(a->body, indent);
          os << pad << "free(" << n << ");\n";
        }
        return;
      }
      case StmtKind::IfThenElse: {
        auto* i = s.as<IfThenElse>();
        os << pad << "if (" << expr(i->condition, "") << ") {\n";
        stmt(i->then_case, indent + 1);
        if (i->else_case.defined()) {
          os << pad << "} else {\n";
          stmt(i->else_case, indent + 1);
        }
        os << pad << "}\n";
        return;
      }
      case StmtKind::Barrier:
        os << pad << "/* barrier: all threads of the GPU block wait here */\n";
        return;

      case StmtKind::CopyAsync:
        os << pad << "/* asynchronous copies into GPU shared memory: */\n";
        stmt(s.as<CopyAsync>()->body, indent);
        return;
      case StmtKind::AllReduce: {
        auto* r = s.as<AllReduce>();
        os << pad << "/* " << r->buffer->name << "[0]: " << reduce_op_name(r->op)
           << " over the threadIdx.x of the GPU block */\n";
        return;
      }
    }
  }
};

/// The conversions of 16-bit floats, printed only into sources that use them: bfloat16 in
/// integer arithmetic as loom/half.hpp rounds, float16 through the compiler's _Float16.
inline const char* c_half_helpers() {
  return "static inline float loom_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; "
         "float f; memcpy(&f, &u, 4); return f; }\n"
         "static inline uint16_t loom_f32_to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); "
         "if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; "
         "return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }\n"
         "static inline float loom_f16_to_f32(uint16_t h) { _Float16 x; memcpy(&x, &h, 2); "
         "return (float)x; }\n"
         "static inline uint16_t loom_f32_to_f16(float f) { _Float16 x = (_Float16)f; uint16_t h; "
         "memcpy(&h, &x, 2); return h; }\n\n";
}

}  // namespace detail

LOOM_DECL std::string to_c_source(const ir::LoweredFunc& f) {
  detail::printer p;
  p.os << "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <stdlib.h>\n\n"
       << "static inline int64_t loom_floordiv(int64_t a, int64_t b) { int64_t q = a / b; "
          "return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }\n"
       << "static inline int64_t loom_floormod(int64_t a, int64_t b) { int64_t r = a % b; "
          "return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }\n"
       << "static inline int64_t loom_min(int64_t a, int64_t b) { return a < b ? a : b; }\n"
       << "static inline int64_t loom_max(int64_t a, int64_t b) { return a > b ? a : b; }\n\n";
  p.os << "void " << detail::ident(f.name) << "(";
  for (size_t i = 0; i < f.args.size(); ++i) {
    const auto& b = f.args[i];
    p.os << (i ? ", " : "") << detail::c_type(b->dtype) << "* restrict " << detail::ident(b->name);
  }
  p.os << ") {\n";
  p.stmt(f.body, 1);
  p.os << "}\n";
  std::string source = p.os.str();
  if (source.find("_to_f32(") != std::string::npos ||
      source.find("loom_f32_to_") != std::string::npos) {
    const std::string marker = "\nvoid " + detail::ident(f.name) + "(";
    source.insert(source.find(marker) + 1,
                  std::string("#include <string.h>\n") + detail::c_half_helpers());
  }
  return source;
}

}  // namespace lower
LOOM_END_NAMESPACE
