// Bodies of loom/ir/printer.hpp (and of DType's printing).
#include "loom/ir/printer.hpp"

#include <charconv>
#include <cmath>
#include <ostream>
#include <sstream>

LOOM_BEGIN_NAMESPACE
namespace ir {

namespace detail {

inline int precedence(NodeKind k) {
  switch (k) {
    case NodeKind::Or: return 1;
    case NodeKind::And: return 2;
    case NodeKind::EQ:
    case NodeKind::NE:
    case NodeKind::LT:
    case NodeKind::LE:
    case NodeKind::GT:
    case NodeKind::GE: return 3;
    case NodeKind::Add:
    case NodeKind::Sub: return 4;
    case NodeKind::Mul:
    case NodeKind::Div:
    case NodeKind::Mod: return 5;
    case NodeKind::Not: return 6;
    case NodeKind::IntImm:
    case NodeKind::FloatImm:
    case NodeKind::Variable:
    case NodeKind::Cast:
    case NodeKind::FloorDiv:
    case NodeKind::FloorMod:
    case NodeKind::BitXor:
    case NodeKind::Min:
    case NodeKind::Max:
    case NodeKind::Select:
    case NodeKind::Call:
    case NodeKind::TensorRead:
    case NodeKind::Reduce:
    case NodeKind::Load:
    case NodeKind::Ramp:
    case NodeKind::Broadcast: return 7;  // printed as atoms or calls
  }
  return 7;
}

inline const char* infix_symbol(NodeKind k) {
  switch (k) {
    case NodeKind::Add: return " + ";
    case NodeKind::Sub: return " - ";
    case NodeKind::Mul: return "*";
    case NodeKind::Div: return "/";
    case NodeKind::Mod: return " % ";
    case NodeKind::EQ: return " == ";
    case NodeKind::NE: return " != ";
    case NodeKind::LT: return " < ";
    case NodeKind::LE: return " <= ";
    case NodeKind::GT: return " > ";
    case NodeKind::GE: return " >= ";
    case NodeKind::And: return " && ";
    case NodeKind::Or: return " || ";
    case NodeKind::IntImm:
    case NodeKind::FloatImm:
    case NodeKind::Variable:
    case NodeKind::Cast:
    case NodeKind::FloorDiv:
    case NodeKind::FloorMod:
    case NodeKind::BitXor:
    case NodeKind::Min:
    case NodeKind::Max:
    case NodeKind::Not:
    case NodeKind::Select:
    case NodeKind::Call:
    case NodeKind::TensorRead:
    case NodeKind::Reduce:
    case NodeKind::Load:
    case NodeKind::Ramp:
    case NodeKind::Broadcast: return nullptr;  // not infix
  }
  return nullptr;
}

inline void print_float(std::ostream& os, double v, int bits) {
  if (std::isinf(v)) {
    os << (v < 0 ? "-inf" : "inf") << (bits == 32 ? "f" : "");
    return;
  }
  if (std::isnan(v)) {
    os << "nan" << (bits == 32 ? "f" : "");
    return;
  }
  char buf[64];
  auto r = bits == 32 ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                      : std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  // Keep a float literal visibly a float: "2" -> "2.0".
  if (s.find_first_of(".e") == std::string::npos && s.find("inf") == std::string::npos) s += ".0";
  os << s << (bits == 32 ? "f" : "");
}

inline void print_axes(std::ostream& os, const std::vector<IterVar>& axes) {
  os << '[';
  for (size_t i = 0; i < axes.size(); ++i)
    os << (i ? ", " : "") << axes[i].name() << ':' << axes[i].extent;
  os << ']';
}

class printer {
 public:
  explicit printer(std::ostream& os) : os_(os) {}

  void print(const Expr& e, int parent_prec = 0) {
    if (!e.defined()) {
      os_ << "<undefined>";
      return;
    }
    const int prec = precedence(e.kind());
    const bool parens = prec < parent_prec;
    if (parens) os_ << '(';
    print_node(e, prec);
    if (parens) os_ << ')';
  }

 private:
  void print_list(const std::vector<Expr>& xs) {
    for (size_t i = 0; i < xs.size(); ++i) {
      if (i) os_ << ", ";
      print(xs[i]);
    }
  }

  void print_node(const Expr& e, int prec) {
    if (auto* s = infix_symbol(e.kind())) {
      auto [a, b] = binary_operands(e);
      print(*a, prec);
      os_ << s;
      print(*b, prec + 1);  // right operand: a - (b - c) keeps its parentheses
      return;
    }
    switch (e.kind()) {
      case NodeKind::IntImm: {
        auto* n = e.as<IntImm>();
        if (n->dtype == DType::index())
          os_ << n->value;
        else if (n->dtype.is_bool())
          os_ << (n->value ? "true" : "false");
        else
          os_ << to_string(n->dtype) << '(' << n->value << ')';
        return;
      }
      case NodeKind::FloatImm: return print_float(os_, e.as<FloatImm>()->value, e.dtype().bits);
      case NodeKind::Variable: os_ << e.as<Variable>()->name; return;
      case NodeKind::Cast:
        os_ << to_string(e.dtype()) << '(';
        print(e.as<Cast>()->value);
        os_ << ')';
        return;
      case NodeKind::FloorDiv:
      case NodeKind::FloorMod:
      case NodeKind::BitXor:
      case NodeKind::Min:
      case NodeKind::Max: {
        static const char* names[] = {"floordiv", "floormod", "bitxor", "min", "max"};
        int idx = e.kind() == NodeKind::FloorDiv   ? 0
                  : e.kind() == NodeKind::FloorMod ? 1
                  : e.kind() == NodeKind::BitXor   ? 2
                  : e.kind() == NodeKind::Min      ? 3
                                                   : 4;
        auto [a, b] = binary_operands(e);
        os_ << names[idx] << '(';
        print(*a);
        os_ << ", ";
        print(*b);
        os_ << ')';
        return;
      }
      case NodeKind::Not:
        os_ << '!';
        print(e.as<Not>()->a, prec + 1);
        return;
      case NodeKind::Select: {
        auto* s = e.as<Select>();
        os_ << "if_then_else(";
        print_list({s->condition, s->true_value, s->false_value});
        os_ << ')';
        return;
      }
      case NodeKind::Call: {
        auto* c = e.as<Call>();
        os_ << call_op_name(c->op) << '(';
        print_list(c->args);
        os_ << ')';
        return;
      }
      case NodeKind::TensorRead: {
        auto* r = e.as<TensorRead>();
        os_ << r->tensor->name << '[';
        print_list(r->indices);
        os_ << ']';
        return;
      }
      case NodeKind::Reduce: {
        auto* r = e.as<Reduce>();
        os_ << reduce_op_name(r->op) << '(';
        print(r->source);
        os_ << ", axis=";
        print_axes(os_, r->axes);
        if (r->condition.defined()) {
          os_ << ", where=";
          print(r->condition);
        }
        os_ << ')';
        return;
      }
      case NodeKind::Load: {
        auto* l = e.as<Load>();
        os_ << l->buffer->name << '[';
        print(l->index);
        os_ << ']';
        return;
      }
      case NodeKind::Ramp: {
        auto* r = e.as<Ramp>();
        os_ << "ramp(";
        print_list({r->base, r->stride});
        os_ << ", " << r->lanes << ')';
        return;
      }
      case NodeKind::Broadcast: {
        auto* b = e.as<Broadcast>();
        os_ << "x" << b->lanes << '(';
        print(b->value);
        os_ << ')';
        return;
      }
      case NodeKind::Add:
      case NodeKind::Sub:
      case NodeKind::Mul:
      case NodeKind::Div:
      case NodeKind::Mod:
      case NodeKind::EQ:
      case NodeKind::NE:
      case NodeKind::LT:
      case NodeKind::LE:
      case NodeKind::GT:
      case NodeKind::GE:
      case NodeKind::And:
      case NodeKind::Or: break;  // infix, printed above
    }
  }

  std::ostream& os_;
};

}  // namespace detail

LOOM_DECL std::ostream& operator<<(std::ostream& os, const Expr& e) {
  detail::printer(os).print(e);
  return os;
}

LOOM_DECL std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "<undefined tensor>";
  os << t.name();
  if (t.is_placeholder()) {
    os << ": " << to_string(t.dtype()) << '[';
    for (size_t d = 0; d < t.shape().size(); ++d) os << (d ? ", " : "") << t.shape()[d];
    return os << ']';
  }
  os << '[';
  for (size_t d = 0; d < t->axes.size(); ++d) os << (d ? ", " : "") << t->axes[d].name();
  os << "] = " << t->body;
  return os;
}

LOOM_DECL std::string to_string(const Expr& e) {
  std::ostringstream os;
  os << e;
  return os.str();
}

LOOM_DECL std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace ir
LOOM_END_NAMESPACE
