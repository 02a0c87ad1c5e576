// Bodies of loom/ir/simplify.hpp.
#include "loom/ir/simplify.hpp"

#include "loom/ir/equal_hash.hpp"
#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <cmath>

LOOM_BEGIN_NAMESPACE
namespace ir {

namespace detail_ir {

// Interval arithmetic in __int128 so that products of int64 bounds never overflow; results that
// leave the int64 range become unbounded.
inline int64_t clamp128(__int128 v, bool is_min) {
  if (v <= static_cast<__int128>(Interval::neg_inf)) return Interval::neg_inf;
  if (v >= static_cast<__int128>(Interval::pos_inf)) return Interval::pos_inf;
  (void)is_min;
  return static_cast<int64_t>(v);
}

inline int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

inline Interval add(Interval a, Interval b) {
  Interval r;
  if (a.min != Interval::neg_inf && b.min != Interval::neg_inf)
    r.min = clamp128(static_cast<__int128>(a.min) + b.min, true);
  if (a.max != Interval::pos_inf && b.max != Interval::pos_inf)
    r.max = clamp128(static_cast<__int128>(a.max) + b.max, false);
  return r;
}
inline Interval negate(Interval a) {
  Interval r;
  if (a.max != Interval::pos_inf) r.min = -a.max;
  if (a.min != Interval::neg_inf) r.max = a.min == Interval::neg_inf ? Interval::pos_inf : -a.min;
  return r;
}
inline Interval mul(Interval a, Interval b) {
  if (!a.bounded() || !b.bounded()) {
    if (a.is_point() && a.min == 0) return Interval::point(0);
    if (b.is_point() && b.min == 0) return Interval::point(0);
    // Multiplying by a non-negative constant keeps the side that is bounded.
    if (b.is_point() && b.min > 0) {
      Interval r;
      if (a.min != Interval::neg_inf) r.min = clamp128(static_cast<__int128>(a.min) * b.min, true);
      if (a.max != Interval::pos_inf) r.max = clamp128(static_cast<__int128>(a.max) * b.min, false);
      return r;
    }
    if (a.is_point() && a.min > 0) return mul(b, a);
    return {};
  }
  __int128 c[4] = {static_cast<__int128>(a.min) * b.min, static_cast<__int128>(a.min) * b.max,
                   static_cast<__int128>(a.max) * b.min, static_cast<__int128>(a.max) * b.max};
  return {clamp128(*std::min_element(c, c + 4), true), clamp128(*std::max_element(c, c + 4), false)};
}

inline Interval interval_union(Interval a, Interval b) {
  return {std::min(a.min, b.min), std::max(a.max, b.max)};
}

class bounds_analyzer {
 public:
  explicit bounds_analyzer(const RangeMap& r) : ranges_(r) {}

  Interval of(const Expr& e) {
    if (!e.dtype().is_integral() || e.dtype().lanes != 1) return {};
    switch (e.kind()) {
      case NodeKind::IntImm: return Interval::point(e.as<IntImm>()->value);
      case NodeKind::Variable: {
        auto it = ranges_.find(e.as<Variable>());
        return it == ranges_.end() ? Interval{} : it->second;
      }
      case NodeKind::Cast: {
        auto* c = e.as<Cast>();
        if (c->value.dtype().is_integral()) return of(c->value);
        return {};
      }
      case NodeKind::Add: {
        auto* n = e.as<Add>();
        return add(of(n->a), of(n->b));
      }
      case NodeKind::Sub: {
        auto* n = e.as<Sub>();
        return add(of(n->a), negate(of(n->b)));
      }
      case NodeKind::Mul: {
        auto* n = e.as<Mul>();
        return mul(of(n->a), of(n->b));
      }
      case NodeKind::FloorDiv:
      case NodeKind::Div: {
        auto [a, b] = binary_operands(e);
        Interval x = of(*a), y = of(*b);
        if (!y.is_point() || y.min <= 0) return {};
        if (e.kind() == NodeKind::Div && x.min < 0) return {};
        Interval r;
        if (x.min != Interval::neg_inf) r.min = floor_div(x.min, y.min);
        if (x.max != Interval::pos_inf) r.max = floor_div(x.max, y.min);
        return r;
      }
      case NodeKind::FloorMod:
      case NodeKind::Mod: {
        auto [a, b] = binary_operands(e);
        Interval x = of(*a), y = of(*b);
        if (!y.is_point() || y.min <= 0) return {};
        if (e.kind() == NodeKind::Mod && x.min < 0) return {};
        if (x.bounded() && floor_div(x.min, y.min) == floor_div(x.max, y.min))
          return {floor_mod(x.min, y.min), floor_mod(x.max, y.min)};
        return {0, y.min - 1};
      }
      case NodeKind::Min: {
        auto* n = e.as<Min>();
        Interval x = of(n->a), y = of(n->b);
        return {std::min(x.min, y.min), std::min(x.max, y.max)};
      }
      case NodeKind::Max: {
        auto* n = e.as<Max>();
        Interval x = of(n->a), y = of(n->b);
        return {std::max(x.min, y.min), std::max(x.max, y.max)};
      }
      case NodeKind::Select: {
        auto* s = e.as<Select>();
        return interval_union(of(s->true_value), of(s->false_value));
      }
      default:
        if (e.dtype().is_bool()) return {0, 1};
        return {};
    }
  }

 private:
  const RangeMap& ranges_;
};

// A linear integer expression: sum of coef*atom plus a constant.
struct linear_form {
  std::vector<std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;

  void add_term(const Expr& atom, int64_t coef) {
    if (coef == 0) return;
    for (auto& t : terms)
      if (structural_equal(t.first, atom)) {
        t.second += coef;
        return;
      }
    terms.emplace_back(atom, coef);
  }
  void add(const linear_form& o, int64_t scale) {
    for (auto& t : o.terms) add_term(t.first, t.second * scale);
    constant += o.constant * scale;
  }
  void drop_zeros() {
    terms.erase(std::remove_if(terms.begin(), terms.end(), [](auto& t) { return t.second == 0; }),
                terms.end());
  }
};

class simplifier : public ExprMutator {
 public:
  explicit simplifier(const RangeMap& r) : ranges_(r), bounds_(ranges_) {}

  Expr mutate(const Expr& e) override {
    Expr r = ExprMutator::mutate(e);
    if (r.defined() && is_linear_int(r)) return canonical(r);
    return r;
  }

 protected:
  // Integer constant folding where both operands are constants.
  static bool both_int(const Expr& a, const Expr& b, int64_t& x, int64_t& y) {
    auto *p = as_const_int(a), *q = as_const_int(b);
    if (!p || !q) return false;
    x = *p;
    y = *q;
    return true;
  }
  static bool both_float(const Expr& a, const Expr& b, double& x, double& y) {
    auto *p = a.as<FloatImm>(), *q = b.as<FloatImm>();
    if (!p || !q) return false;
    x = p->value;
    y = q->value;
    return true;
  }

  bool is_linear_int(const Expr& e) const {
    if (!e.dtype().is_int() || e.dtype().lanes != 1) return false;
    auto k = e.kind();
    return k == NodeKind::Add || k == NodeKind::Sub || k == NodeKind::Mul;
  }

  linear_form to_linear(const Expr& e) {
    linear_form f;
    if (auto* c = as_const_int(e)) {
      f.constant = *c;
      return f;
    }
    if (auto* n = e.as<Add>()) {
      f = to_linear(n->a);
      f.add(to_linear(n->b), 1);
      return f;
    }
    if (auto* n = e.as<Sub>()) {
      f = to_linear(n->a);
      f.add(to_linear(n->b), -1);
      return f;
    }
    if (auto* n = e.as<Mul>()) {
      if (auto* c = as_const_int(n->b)) {
        f.add(to_linear(n->a), *c);
        return f;
      }
      if (auto* c = as_const_int(n->a)) {
        f.add(to_linear(n->b), *c);
        return f;
      }
    }
    f.add_term(e, 1);
    return f;
  }

  Expr from_linear(linear_form f, DType t) {
    f.drop_zeros();
    Expr r;
    for (auto& [atom, coef] : f.terms) {
      Expr term = coef == 1 || coef == -1 ? atom : Mul::make(atom, IntImm::make(t, coef));
      if (!r.defined())
        r = coef == -1 ? Sub::make(IntImm::make(t, 0), term) : term;
      else
        r = coef == -1 ? Sub::make(r, term) : Add::make(r, term);
    }
    if (!r.defined()) return IntImm::make(t, f.constant);
    if (f.constant > 0) r = Add::make(r, IntImm::make(t, f.constant));
    if (f.constant < 0) r = Sub::make(r, IntImm::make(t, -f.constant));
    return r;
  }

  Expr canonical(const Expr& e) {
    // Only rebuild when it changes the text: keeps identity for already-canonical expressions.
    Expr c = from_linear(to_linear(e), e.dtype());
    return structural_equal(c, e) ? e : c;
  }

  Expr visit_Add(const Add* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    double fx, fy;
    if (both_int(a, b, x, y)) return IntImm::make(op->dtype, x + y);
    if (both_float(a, b, fx, fy)) return FloatImm::make(op->dtype, fx + fy);
    return a.same_as(op->a) && b.same_as(op->b) ? self : Add::make(a, b);
  }
  Expr visit_Sub(const Sub* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    double fx, fy;
    if (both_int(a, b, x, y)) return IntImm::make(op->dtype, x - y);
    if (both_float(a, b, fx, fy)) return FloatImm::make(op->dtype, fx - fy);
    return a.same_as(op->a) && b.same_as(op->b) ? self : Sub::make(a, b);
  }
  Expr visit_Mul(const Mul* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    double fx, fy;
    if (both_int(a, b, x, y)) return IntImm::make(op->dtype, x * y);
    if (both_float(a, b, fx, fy)) return FloatImm::make(op->dtype, fx * fy);
    return a.same_as(op->a) && b.same_as(op->b) ? self : Mul::make(a, b);
  }

  // floordiv/floormod of a linear form by a positive constant c: terms whose coefficient c
  // divides leave the division exactly; what remains is resolved by its bounds.
  Expr div_mod(bool is_mod, const Expr& a, int64_t c, DType t) {
    linear_form f = to_linear(a);
    linear_form quotient, rest;
    for (auto& [atom, coef] : f.terms) {
      if (coef % c == 0)
        quotient.add_term(atom, coef / c);
      else
        rest.add_term(atom, coef);
    }
    quotient.constant = floor_div(f.constant, c);
    rest.constant = floor_mod(f.constant, c);
    Expr r = from_linear(rest, t);
    Interval rb = bounds_.of(r);
    if (rb.bounded() && floor_div(rb.min, c) == floor_div(rb.max, c)) {
      int64_t q = floor_div(rb.min, c);
      if (is_mod) return mutate(Sub::make(r, IntImm::make(t, q * c)));
      quotient.constant += q;
      return from_linear(quotient, t);
    }
    if (is_mod) return rest.terms.empty() ? IntImm::make(t, rest.constant)
                                          : FloorMod::make(r, IntImm::make(t, c));
    quotient.add_term(FloorDiv::make(r, IntImm::make(t, c)), 1);
    return from_linear(quotient, t);
  }

  Expr visit_FloorDiv(const FloorDiv* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    if (both_int(a, b, x, y) && y != 0) return IntImm::make(op->dtype, floor_div(x, y));
    if (auto* c = as_const_int(b); c && *c > 0 && op->dtype.lanes == 1) {
      if (*c == 1) return a;
      // floordiv(floordiv(x, p), q) == floordiv(x, p*q) for positive p, q.
      if (auto* inner = a.as<FloorDiv>())
        if (auto* p = as_const_int(inner->b); p && *p > 0)
          return div_mod(false, inner->a, *p * *c, op->dtype);
      return div_mod(false, a, *c, op->dtype);
    }
    return a.same_as(op->a) && b.same_as(op->b) ? self : FloorDiv::make(a, b);
  }
  Expr visit_FloorMod(const FloorMod* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    if (both_int(a, b, x, y) && y != 0) return IntImm::make(op->dtype, floor_mod(x, y));
    if (auto* c = as_const_int(b); c && *c > 0 && op->dtype.lanes == 1) {
      if (*c == 1) return IntImm::make(op->dtype, 0);
      return div_mod(true, a, *c, op->dtype);
    }
    return a.same_as(op->a) && b.same_as(op->b) ? self : FloorMod::make(a, b);
  }
  // Truncating division equals floor division when the dividend is non-negative and the
  // divisor a positive constant: rewrite so the rules above apply.
  Expr visit_Div(const Div* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    double fx, fy;
    if (both_int(a, b, x, y) && y != 0) return IntImm::make(op->dtype, x / y);
    if (both_float(a, b, fx, fy)) return FloatImm::make(op->dtype, fx / fy);
    if (auto* c = as_const_int(b); c && *c > 0 && op->dtype.is_int() && bounds_.of(a).min >= 0)
      return mutate(FloorDiv::make(a, b));
    return a.same_as(op->a) && b.same_as(op->b) ? self : Div::make(a, b);
  }
  Expr visit_Mod(const Mod* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    if (both_int(a, b, x, y) && y != 0) return IntImm::make(op->dtype, x % y);
    if (auto* c = as_const_int(b); c && *c > 0 && op->dtype.is_int() && bounds_.of(a).min >= 0)
      return mutate(FloorMod::make(a, b));
    return a.same_as(op->a) && b.same_as(op->b) ? self : Mod::make(a, b);
  }
  Expr visit_Min(const Min* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    if (op->dtype.is_integral()) {
      Interval x = bounds_.of(a), y = bounds_.of(b);
      if (x.max != Interval::pos_inf && x.max <= y.min) return a;
      if (y.max != Interval::pos_inf && y.max <= x.min) return b;
    }
    double fx, fy;
    if (both_float(a, b, fx, fy)) return FloatImm::make(op->dtype, std::min(fx, fy));
    if (structural_equal(a, b)) return a;
    return a.same_as(op->a) && b.same_as(op->b) ? self : Min::make(a, b);
  }
  Expr visit_Max(const Max* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    if (op->dtype.is_integral()) {
      Interval x = bounds_.of(a), y = bounds_.of(b);
      if (x.min != Interval::neg_inf && x.min >= y.max) return a;
      if (y.min != Interval::neg_inf && y.min >= x.max) return b;
    }
    double fx, fy;
    if (both_float(a, b, fx, fy)) return FloatImm::make(op->dtype, std::max(fx, fy));
    if (structural_equal(a, b)) return a;
    return a.same_as(op->a) && b.same_as(op->b) ? self : Max::make(a, b);
  }

  // Comparisons of integers are decided from the bounds of (a - b) when possible.
  template <class Node>
  Expr compare(const Node* op, const Expr& self, bool (*holds)(Interval), bool (*fails)(Interval)) {
    Expr a = mutate(op->a), b = mutate(op->b);
    if (a.dtype().is_integral() && a.dtype().lanes == 1 && !a.dtype().is_bool()) {
      Interval d = bounds_.of(mutate(Sub::make(a, b)));
      if (holds(d)) return IntImm::make(DType::boolean(), 1);
      if (fails(d)) return IntImm::make(DType::boolean(), 0);
    }
    return a.same_as(op->a) && b.same_as(op->b) ? self : Node::make(a, b);
  }
  Expr visit_LT(const LT* op, const Expr& self) override {
    return compare(op, self, [](Interval d) { return d.max != Interval::pos_inf && d.max < 0; },
                   [](Interval d) { return d.min != Interval::neg_inf && d.min >= 0; });
  }
  Expr visit_LE(const LE* op, const Expr& self) override {
    return compare(op, self, [](Interval d) { return d.max != Interval::pos_inf && d.max <= 0; },
                   [](Interval d) { return d.min != Interval::neg_inf && d.min > 0; });
  }
  Expr visit_GT(const GT* op, const Expr& self) override {
    return compare(op, self, [](Interval d) { return d.min != Interval::neg_inf && d.min > 0; },
                   [](Interval d) { return d.max != Interval::pos_inf && d.max <= 0; });
  }
  Expr visit_GE(const GE* op, const Expr& self) override {
    return compare(op, self, [](Interval d) { return d.min != Interval::neg_inf && d.min >= 0; },
                   [](Interval d) { return d.max != Interval::pos_inf && d.max < 0; });
  }
  Expr visit_EQ(const EQ* op, const Expr& self) override {
    return compare(op, self, [](Interval d) { return d.is_point() && d.min == 0; },
                   [](Interval d) {
                     return (d.min != Interval::neg_inf && d.min > 0) ||
                            (d.max != Interval::pos_inf && d.max < 0);
                   });
  }
  Expr visit_NE(const NE* op, const Expr& self) override {
    return compare(op, self,
                   [](Interval d) {
                     return (d.min != Interval::neg_inf && d.min > 0) ||
                            (d.max != Interval::pos_inf && d.max < 0);
                   },
                   [](Interval d) { return d.is_point() && d.min == 0; });
  }
  Expr visit_And(const And* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    if (is_const_int(a, 0) || is_const_int(b, 0)) return IntImm::make(op->dtype, 0);
    if (is_const_int(a, 1)) return b;
    if (is_const_int(b, 1)) return a;
    return a.same_as(op->a) && b.same_as(op->b) ? self : And::make(a, b);
  }
  Expr visit_Or(const Or* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    if (is_const_int(a, 1) || is_const_int(b, 1)) return IntImm::make(op->dtype, 1);
    if (is_const_int(a, 0)) return b;
    if (is_const_int(b, 0)) return a;
    return a.same_as(op->a) && b.same_as(op->b) ? self : Or::make(a, b);
  }
  Expr visit_Not(const Not* op, const Expr& self) override {
    Expr a = mutate(op->a);
    if (auto* c = as_const_int(a)) return IntImm::make(op->dtype, !*c);
    return a.same_as(op->a) ? self : Not::make(a);
  }
  Expr visit_Select(const Select* op, const Expr& self) override {
    Expr c = mutate(op->condition);
    if (is_const_int(c, 1)) return mutate(op->true_value);
    if (is_const_int(c, 0)) return mutate(op->false_value);
    Expr t = mutate(op->true_value), f = mutate(op->false_value);
    if (c.same_as(op->condition) && t.same_as(op->true_value) && f.same_as(op->false_value))
      return self;
    return Select::make(c, t, f);
  }
  Expr visit_Cast(const Cast* op, const Expr& self) override {
    Expr v = mutate(op->value);
    if (op->dtype.lanes == 1) {
      if (auto* c = as_const_int(v)) return make_const(op->dtype, static_cast<double>(*c));
      if (auto* f = v.as<FloatImm>(); f && op->dtype.is_float())
        return FloatImm::make(op->dtype, f->value);
    }
    return v.same_as(op->value) ? self : Cast::make(op->dtype, v);
  }
  Expr visit_Reduce(const Reduce* op, const Expr& self) override {
    // Reduce axes have known ranges inside the reduction.
    for (auto& a : op->axes) ranges_[a.variable()] = Interval::range(a.extent);
    Expr r = ExprMutator::visit_Reduce(op, self);
    for (auto& a : op->axes) ranges_.erase(a.variable());
    return r;
  }

 private:
  RangeMap ranges_;
  bounds_analyzer bounds_;
};

}  // namespace detail_ir

LOOM_DECL Interval bounds_of(const Expr& e, const RangeMap& ranges) {
  return detail_ir::bounds_analyzer(ranges).of(e);
}

LOOM_DECL Expr simplify(const Expr& e, const RangeMap& ranges) {
  detail_ir::simplifier s(ranges);
  return s.mutate(e);
}

LOOM_DECL bool can_prove(const Expr& condition, const RangeMap& ranges) {
  return is_const_int(simplify(condition, ranges), 1);
}

}  // namespace ir
LOOM_END_NAMESPACE
