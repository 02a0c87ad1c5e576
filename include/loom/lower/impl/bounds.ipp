// Bodies of loom/lower/bounds.hpp.
#include "loom/lower/bounds.hpp"

#include "loom/ir/equal_hash.hpp"
#include "loom/ir/visitor.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

using bound_pair = std::optional<std::pair<ir::Expr, ir::Expr>>;

inline bool depends_on_ranging(const ir::Expr& e, const ir::RangeMap& ranging) {
  bool dep = false;
  ir::post_order_visit(e, [&](const ir::Expr& x) {
    if (auto* v = x.as<ir::Variable>()) dep = dep || ranging.count(v);
  });
  return dep;
}

inline bound_pair sym(const ir::Expr& e, const ir::RangeMap& ranging) {
  using namespace ir;
  if (!depends_on_ranging(e, ranging)) return std::make_pair(e, e);
  if (auto* v = e.as<Variable>()) {
    const Interval& r = ranging.at(v);
    if (!r.bounded()) return std::nullopt;
    return std::make_pair(IntImm::make(e.dtype(), r.min), IntImm::make(e.dtype(), r.max));
  }
  if (auto* c = e.as<Cast>()) {
    if (!c->value.dtype().is_integral()) return std::nullopt;
    auto b = sym(c->value, ranging);
    if (!b) return b;
    return std::make_pair(Cast::make(e.dtype(), b->first), Cast::make(e.dtype(), b->second));
  }
  if (auto* n = e.as<Add>()) {
    auto a = sym(n->a, ranging), b = sym(n->b, ranging);
    if (!a || !b) return std::nullopt;
    return std::make_pair(a->first + b->first, a->second + b->second);
  }
  if (auto* n = e.as<Sub>()) {
    auto a = sym(n->a, ranging), b = sym(n->b, ranging);
    if (!a || !b) return std::nullopt;
    return std::make_pair(a->first - b->second, a->second - b->first);
  }
  if (auto* n = e.as<Mul>()) {
    const Expr* varying = &n->a;
    const Expr* other = &n->b;
    if (!depends_on_ranging(n->a, ranging)) std::swap(varying, other);
    if (depends_on_ranging(*other, ranging)) return std::nullopt;
    auto* c = as_const_int(*other);
    if (!c) return std::nullopt;
    auto a = sym(*varying, ranging);
    if (!a) return a;
    if (*c >= 0) return std::make_pair(a->first * *other, a->second * *other);
    return std::make_pair(a->second * *other, a->first * *other);
  }
  if (auto* n = e.as<FloorDiv>()) {
    auto* c = as_const_int(n->b);
    if (!c || *c <= 0) return std::nullopt;
    auto a = sym(n->a, ranging);
    if (!a) return a;
    return std::make_pair(floordiv(a->first, n->b), floordiv(a->second, n->b));
  }
  if (auto* n = e.as<FloorMod>()) {
    auto* c = as_const_int(n->b);
    if (!c || *c <= 0) return std::nullopt;
    auto a = sym(n->a, ranging);
    if (!a) return a;
    // Within one period the modulus is monotonic; otherwise it covers [0, c).
    Expr span = simplify(a->second - a->first);
    auto* w = as_const_int(span);
    if (w && *w < *c) {
      Expr same = simplify(EQ::make(floordiv(a->first, n->b), floordiv(a->second, n->b)));
      if (is_const_int(same, 1))
        return std::make_pair(floormod(a->first, n->b), floormod(a->second, n->b));
    }
    return std::make_pair(IntImm::make(e.dtype(), 0), IntImm::make(e.dtype(), *c - 1));
  }
  if (auto* n = e.as<Min>()) {
    auto a = sym(n->a, ranging), b = sym(n->b, ranging);
    if (!a || !b) return std::nullopt;
    return std::make_pair(min(a->first, b->first), min(a->second, b->second));
  }
  if (auto* n = e.as<Max>()) {
    auto a = sym(n->a, ranging), b = sym(n->b, ranging);
    if (!a || !b) return std::nullopt;
    return std::make_pair(max(a->first, b->first), max(a->second, b->second));
  }
  if (auto* n = e.as<Select>()) {
    auto a = sym(n->true_value, ranging), b = sym(n->false_value, ranging);
    if (!a || !b) return std::nullopt;
    return std::make_pair(min(a->first, b->first), max(a->second, b->second));
  }
  return std::nullopt;
}

}  // namespace detail

LOOM_DECL std::optional<std::pair<ir::Expr, ir::Expr>> symbolic_bounds(
    const ir::Expr& e, const ir::RangeMap& ranging) {
  auto b = detail::sym(e, ranging);
  if (!b) return b;
  return std::make_pair(ir::simplify(b->first), ir::simplify(b->second));
}

}  // namespace lower
LOOM_END_NAMESPACE
