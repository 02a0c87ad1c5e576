// Bodies of loom/ir/simplify.hpp.
#include "loom/ir/simplify.hpp"

#include "loom/detail/int_math.hpp"
#include "loom/ir/equal_hash.hpp"
#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <numeric>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

LOOM_BEGIN_NAMESPACE
namespace ir {

namespace detail {

// Interval arithmetic in __int128 so that products of int64 bounds never overflow; results that
// leave the int64 range become unbounded.
inline int64_t clamp128(__int128 v, bool is_min) {
  if (v <= static_cast<__int128>(Interval::neg_inf)) return Interval::neg_inf;
  if (v >= static_cast<__int128>(Interval::pos_inf)) return Interval::pos_inf;
  (void)is_min;
  return static_cast<int64_t>(v);
}

using ::loom::detail::floor_div;
using ::loom::detail::floor_mod;

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
  return {clamp128(*std::min_element(c, c + 4), true),
          clamp128(*std::max_element(c, c + 4), false)};
}

inline Interval interval_union(Interval a, Interval b) {
  return {std::min(a.min, b.min), std::max(a.max, b.max)};
}

// The values of integer type `t` narrower than 64 bits; unbounded for 64-bit types (whose
// range is Interval's).
inline Interval type_range(DType t) {
  if (t.bits >= 64 || t.is_bool()) return {};
  if (t.is_uint()) return {0, (int64_t{1} << t.bits) - 1};
  return {-(int64_t{1} << (t.bits - 1)), (int64_t{1} << (t.bits - 1)) - 1};
}

// Whether every value of `v` is a value of type `t`: a computation whose exact result lies in
// `v` does not wrap at t's width.
inline bool fits(Interval v, DType t) {
  const Interval r = type_range(t);
  return v.bounded() && v.min >= r.min && v.max <= r.max;
}

// Whether `e` is index arithmetic: constants and (loop) variables combined by +, -, *, /, %,
// floordiv, floormod, min, max and integer casts, nothing read from a buffer. The simplifier
// takes such int64 expressions as exact, even where their variables' ranges are unknown (an
// outer loop's variable when regions are inferred): indices stay far below 2^63. Any other
// value, a loaded one above all, may be anything of its type and wraps (node_kinds.hpp).
inline bool is_index_arithmetic(const Expr& e) {
  if (!e.dtype().is_integral() || e.dtype().is_bool()) return false;
  switch (e.kind()) {
    case NodeKind::IntImm:
    case NodeKind::Variable: return true;
    case NodeKind::Cast: return is_index_arithmetic(e.as<Cast>()->value);
    case NodeKind::Add:
    case NodeKind::Sub:
    case NodeKind::Mul:
    case NodeKind::Div:
    case NodeKind::Mod:
    case NodeKind::FloorDiv:
    case NodeKind::FloorMod:
    case NodeKind::BitXor:
    case NodeKind::Min:
    case NodeKind::Max: {
      auto [a, b] = binary_operands(e);
      return is_index_arithmetic(*a) && is_index_arithmetic(*b);
    }
    default: return false;
  }
}

// Whether the simplifier may take `e`, of type `t`, for the exact sum it denotes (no wrapping):
// int64 index arithmetic (above).
inline bool assumed_exact(const Expr& e, DType t) {
  return t == DType::i64() && is_index_arithmetic(e);
}

class bounds_analyzer {
 public:
  explicit bounds_analyzer(const RangeMap& r) : ranges_(&r) {}
  /// Looks variables up in `r` from now on.
  void set_ranges(const RangeMap& r) { ranges_ = &r; }

  /// Bounds of the value `e` takes, wrapping included: integer arithmetic wraps at the width of
  /// its type (node_kinds.hpp), so where the exact result of a narrower type could leave the
  /// type's range the bounds are the whole range. (64-bit results that could leave int64 are
  /// already unbounded, clamp128.)
  Interval of(const Expr& e) {
    Interval v = exact(e);
    if (e.dtype().is_integral() && e.dtype().lanes == 1 && !e.dtype().is_bool() &&
        e.dtype().bits < 64 && !fits(v, e.dtype()))
      return type_range(e.dtype());
    return v;
  }

 private:
  // The bounds of e's operation on its operands' values (of()), before wrapping.
  Interval exact(const Expr& e) {
    if (!e.dtype().is_integral() || e.dtype().lanes != 1) return {};
    switch (e.kind()) {
      case NodeKind::IntImm: return Interval::point(e.as<IntImm>()->value);
      case NodeKind::Variable: {
        auto it = ranges_->find(e.as<Variable>());
        return it == ranges_->end() ? Interval{} : it->second;
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
      case NodeKind::BitXor: {
        // Non-negative operands below 2^n give a result below 2^n.
        auto* n = e.as<BitXor>();
        const Interval x = of(n->a), y = of(n->b);
        if (x.min < 0 || y.min < 0 || !x.bounded() || !y.bounded() ||
            std::max(x.max, y.max) >= (int64_t{1} << 62))  // the power of two would overflow
          return {};
        int64_t below = 1;
        while (below <= std::max(x.max, y.max)) below *= 2;
        return {0, below - 1};
      }
      default:
        if (e.dtype().is_bool()) return {0, 1};
        return {};
    }
  }

  const RangeMap* ranges_;
};

// A linear integer expression: sum of coef*atom plus a constant.
struct linear_form {
  std::vector<std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;

  // structural_equal, answered without it for the common atoms: the same node, and two
  // distinct variables (equal only when they are the same variable).
  static bool same_atom(const Expr& a, const Expr& b) {
    if (a.same_as(b)) return true;
    if (a.kind() != b.kind()) return false;
    if (a.kind() == NodeKind::Variable) return false;
    return structural_equal(a, b);
  }
  void add_term(const Expr& atom, int64_t coef) {
    if (coef == 0) return;
    for (auto& t : terms)
      if (same_atom(t.first, atom)) {
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

using VarMap = std::unordered_map<const Variable*, Expr>;

class simplifier : public ExprMutator {
 public:
  // The caller's ranges are read in place: simplify() runs for every expression of a loop nest,
  // and copying the map each time cost more than the simplification of small expressions.
  explicit simplifier(const RangeMap& r, const VarMap* substitutions = nullptr)
      : bounds_(r), outer_(&r), substitutions_(substitutions) {}

  /// Makes mutate(`from`) return `to` without work: `to` must be what it would return.
  void set_known(const Expr* from, const Expr* to) {
    known_from_ = from;
    known_to_ = to;
  }

  Expr mutate(const Expr& e) override {
    // Outside reductions (which add ranges) a node simplifies to the same result every time.
    if (known_from_ && e.same_as(*known_from_) && !own_) return *known_to_;
    // A substituted variable is simplified as its value, where substitute() would have put it.
    if (const Expr* value = substitute(e)) return mutate(*value);
    if (is_linear_i64(e)) {
      linear_form f;
      result_form(e, f);
      return is_from_linear(e, f, e.dtype()) ? e : from_linear(std::move(f), e.dtype());
    }
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

  // The value that replaces `e`, if it is a substituted variable.
  const Expr* substitute(const Expr& e) const {
    if (!substitutions_ || !e.defined() || e.kind() != NodeKind::Variable) return nullptr;
    auto it = substitutions_->find(static_cast<const Variable*>(e.get()));
    return it == substitutions_->end() ? nullptr : &it->second;
  }

  // Sums and products of scalar int64 values: mutate() evaluates a tree of them through linear
  // forms (result_form) and builds only its root's result.
  static bool is_linear_i64(const Expr& e) {
    if (!e.defined() || e.dtype() != DType::i64()) return false;
    auto k = e.kind();
    return k == NodeKind::Add || k == NodeKind::Sub || k == NodeKind::Mul;
  }

  // The linear form of what mutate(e) returns for an int64 Add/Sub/Mul `e`, zero terms dropped,
  // computed without building the canonical expressions of e's sub-trees. It follows the
  // steps of the general path exactly: each node's operands are simplified (this function for
  // Add/Sub/Mul operands, mutate() for the others), folded or combined by visit_Add/Sub/Mul,
  // and the result is put in canonical form, i.e. from_linear(to_linear(result)). Two facts make
  // it exact: for a form f without zero terms and an int64 type, to_linear(from_linear(f)) == f
  // (atoms are the nodes to_linear does not split, and int64 constants are not wrapped), so an
  // operand's form is known without its expression; and the result of a simplification is
  // determined by its structure, which from_linear fixes. Constant folding needs no separate
  // case: two constant operands give a form without terms, which from_linear turns into the
  // same IntImm the folding would have made.
  void result_form(const Expr& e, linear_form& f) {
    auto [a, b] = binary_operands(e);
    Expr ra, rb;  // mutate() of non-linear operands
    operand_form(*a, f, ra);
    if (e.kind() != NodeKind::Mul) {
      const int64_t sign = e.kind() == NodeKind::Add ? 1 : -1;
      if (!add_leaf(*b, f, sign)) {
        linear_form fb;
        operand_form(*b, fb, rb);
        f.add(fb, sign);
      }
      f.drop_zeros();
      return;
    }
    // Mul: to_linear scales by a constant right operand first, then by a constant left one
    // (scaling in place is what adding the terms to an empty form does: the atoms are distinct).
    linear_form fb;
    operand_form(*b, fb, rb);
    if (fb.terms.empty()) {
      scale(f, fb.constant);
    } else if (f.terms.empty()) {
      const int64_t c = f.constant;
      f = std::move(fb);
      scale(f, c);
    } else {
      // A product of two non-constants is one atom: the product of the simplified operands
      // (the original node when both are unchanged, as visit_Mul keeps it).
      Expr x = ra.defined() ? ra : expression_of(*a, f);
      Expr y = rb.defined() ? rb : expression_of(*b, fb);
      Expr atom = x.same_as(*a) && y.same_as(*b) ? e : Mul::make(x, y);
      f.terms.clear();
      f.constant = 0;
      f.add_term(atom, 1);
    }
    f.drop_zeros();
  }
  static void scale(linear_form& f, int64_t c) {
    for (auto& t : f.terms) t.second *= c;
    f.constant *= c;
  }
  // f.add(form of x's result, sign) for a variable or constant `x` (after substitution), which
  // simplify to themselves: one term, without a form of their own. False for other operands.
  bool add_leaf(const Expr& x, linear_form& f, int64_t sign) {
    const Expr* v = substitute(x);
    if (!v) v = &x;
    if (auto* c = v->as<IntImm>()) {
      f.constant += c->value * sign;
      return true;
    }
    if (v->kind() != NodeKind::Variable) return false;
    f.add_term(*v, sign);
    return true;
  }
  // The form of mutate(x)'s result; `r` receives that result when it had to be built.
  void operand_form(const Expr& x, linear_form& f, Expr& r) {
    if (const Expr* value = substitute(x)) return operand_form(*value, f, r);
    if (is_linear_i64(x)) return result_form(x, f);
    r = mutate(x);
    f = to_linear(r);
  }
  // mutate(x)'s result for an int64 Add/Sub/Mul `x` whose result form is `f`.
  Expr expression_of(const Expr& x, const linear_form& f) {
    return is_from_linear(x, f, x.dtype()) ? x : from_linear(f, x.dtype());
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
    linear_form f = to_linear(e);
    f.drop_zeros();
    // Most expressions met bottom-up are canonical already; recognizing that without building
    // the canonical copy saves its allocations (the result is the same either way).
    if (is_from_linear(e, f, e.dtype())) return e;
    Expr c = from_linear(std::move(f), e.dtype());
    return structural_equal(c, e) ? e : c;
  }

  static bool is_imm(const Expr& e, DType t, int64_t v) {
    auto* c = e.as<IntImm>();
    return c && c->dtype == t && c->value == v;
  }
  // Whether `e` is structurally equal to the term from_linear builds for `coef * atom`.
  static bool is_term(const Expr& e, const Expr& atom, int64_t coef, DType t) {
    if (coef == 1 || coef == -1) return structural_equal(e, atom);
    auto* m = e.as<Mul>();
    return m && m->dtype == t && is_imm(m->b, t, coef) && structural_equal(m->a, atom);
  }
  // True only if from_linear(f, t) (f without zero terms) would be structurally equal to `e`;
  // false when it would not or when the answer needs more than this check (types other than
  // int64, whose constants IntImm::make wraps; atoms of another type).
  static bool is_from_linear(const Expr& e, const linear_form& f, DType t) {
    if (t != DType::i64()) return false;
    if (f.terms.empty()) return is_imm(e, t, f.constant);
    const Expr* r = &e;
    if (f.constant > 0) {
      auto* n = r->as<Add>();
      if (!n || n->dtype != t || !is_imm(n->b, t, f.constant)) return false;
      r = &n->a;
    } else if (f.constant < 0) {
      auto* n = r->as<Sub>();
      if (f.constant == std::numeric_limits<int64_t>::min() || !n || n->dtype != t ||
          !is_imm(n->b, t, -f.constant))
        return false;
      r = &n->a;
    }
    for (size_t i = f.terms.size(); i-- > 1;) {
      const auto& [atom, coef] = f.terms[i];
      if (atom.dtype() != t) return false;
      const Expr* rest;
      const Expr* term;
      if (coef == -1) {
        auto* n = r->as<Sub>();
        if (!n || n->dtype != t) return false;
        rest = &n->a;
        term = &n->b;
      } else {
        auto* n = r->as<Add>();
        if (!n || n->dtype != t) return false;
        rest = &n->a;
        term = &n->b;
      }
      if (!is_term(*term, atom, coef, t)) return false;
      r = rest;
    }
    const auto& [atom, coef] = f.terms[0];
    if (atom.dtype() != t) return false;
    if (coef != -1) return is_term(*r, atom, coef, t);
    auto* n = r->as<Sub>();
    return n && n->dtype == t && is_imm(n->a, t, 0) && is_term(n->b, atom, coef, t);
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

  // Bounds of the exact value of `f`, its atoms' values as of() bounds them (wrapped).
  Interval exact_bounds(const linear_form& f) {
    Interval v = Interval::point(f.constant);
    for (const auto& [atom, coef] : f.terms)
      v = add(v, mul(bounds_.of(atom), Interval::point(coef)));
    return v;
  }

  // floordiv/floormod of a linear form by a positive constant c: terms whose coefficient c
  // divides leave the division exactly; what remains is resolved by its bounds. That identity,
  // floordiv(c q + r, c) == q + floordiv(r, c), holds for exact sums, but the dividend and the
  // rest are computed wrapping at t's width: it is used only where neither can wrap (int32
  // floordiv(x - 2, 3) is not floordiv(x + 1, 3) - 1 at x = INT32_MAX), and the result is
  // undefined where it is not.
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
    // A modulus by a power of two no larger than 2^bits divides the type's wrapping period:
    // floormod(wrapped x, c) == floormod(x, c), whatever wraps.
    const bool wrap_free =
        is_mod && (c & (c - 1)) == 0 && c <= (int64_t{1} << std::min<int>(t.bits, 62));
    if (!wrap_free && !assumed_exact(a, t) &&
        (!fits(exact_bounds(f), t) || !fits(exact_bounds(rest), t)))
      return Expr();
    Expr r = from_linear(rest, t);
    Interval rb = bounds_.of(r);
    if (rb.bounded() && floor_div(rb.min, c) == floor_div(rb.max, c)) {
      int64_t q = floor_div(rb.min, c);
      if (is_mod) return mutate(Sub::make(r, IntImm::make(t, q * c)));
      quotient.constant += q;
      return from_linear(quotient, t);
    }
    if (is_mod)
      return rest.terms.empty() ? IntImm::make(t, rest.constant)
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
      // floordiv(floordiv(x, p), q) == floordiv(x, p*q) for positive p, q (while p*q fits:
      // nested divisions by 9, 24 deep, once folded into a wrapped, negative divisor).
      int64_t pq = 0;
      if (auto* inner = a.as<FloorDiv>())
        if (auto* p = as_const_int(inner->b); p && *p > 0 && !__builtin_mul_overflow(*p, *c, &pq)) {
          if (Expr r = div_mod(false, inner->a, pq, op->dtype); r.defined()) return r;
          return FloorDiv::make(inner->a, IntImm::make(op->dtype, pq));
        }
      if (Expr r = div_mod(false, a, *c, op->dtype); r.defined()) return r;
    }
    return a.same_as(op->a) && b.same_as(op->b) ? self : FloorDiv::make(a, b);
  }
  Expr visit_FloorMod(const FloorMod* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    if (both_int(a, b, x, y) && y != 0) return IntImm::make(op->dtype, floor_mod(x, y));
    if (auto* c = as_const_int(b); c && *c > 0 && op->dtype.lanes == 1) {
      if (*c == 1) return IntImm::make(op->dtype, 0);
      if (Expr r = div_mod(true, a, *c, op->dtype); r.defined()) return r;
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
  Expr visit_BitXor(const BitXor* op, const Expr& self) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    int64_t x, y;
    if (both_int(a, b, x, y)) return IntImm::make(op->dtype, x ^ y);
    if (is_const_int(b, 0)) return a;
    if (is_const_int(a, 0)) return b;
    if (Expr r = xor_low_bits(a, b); r.defined()) return r;
    if (Expr r = xor_low_bits(b, a); r.defined()) return r;
    return a.same_as(op->a) && b.same_as(op->b) ? self : BitXor::make(a, b);
  }
  // (high + low) ^ mask = high + (low ^ mask) where the terms of `high` are multiples of a power
  // of two p that low and mask, both in [0, p), stay below: the sum's terms outside the xor
  // stay affine (a swizzled address keeps its loop offsets as immediates). Undefined if the
  // sum `a` has no such split.
  Expr xor_low_bits(const Expr& a, const Expr& mask) {
    if (!a.as<Add>() || a.dtype().lanes != 1) return Expr();
    std::vector<Expr> terms;
    std::vector<const Expr*> stack{&a};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (auto* n = e->as<Add>()) {
        stack.push_back(&n->b);
        stack.push_back(&n->a);
      } else {
        terms.push_back(*e);
      }
    }
    const Interval m = bounds_.of(mask);
    if (m.min < 0 || !m.bounded()) return Expr();
    for (int64_t p = 2; p > 0 && p <= (int64_t{1} << 30); p *= 2) {
      if (m.max >= p) continue;
      Expr high, low;
      for (const Expr& t : terms) {
        Expr& side = known_divisor(t) % p == 0 ? high : low;
        side = side.defined() ? side + t : t;
      }
      if (!high.defined()) return Expr();
      if (!low.defined()) low = IntImm::make(a.dtype(), 0);
      const Interval l = bounds_.of(low);
      if (l.min < 0 || !l.bounded() || l.max >= p) continue;
      return high + mutate(BitXor::make(low, mask));
    }
    return Expr();
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

  // Comparisons of integers are decided from the bounds of a - b when possible: of the
  // simplified Sub, whose terms may cancel (i + 1 < i + 2), and, where that Sub may wrap at the
  // width of the type, of the exact difference of a's and b's values. A wrapped difference
  // still tells equality (it is 0 exactly when a == b) but not order: x + 1 - x is 1, yet
  // x + 1 < x for an int32 x = INT32_MAX.
  template <class Node>
  Expr compare(const Node* op, const Expr& self, bool (*holds)(Interval), bool (*fails)(Interval)) {
    Expr a = mutate(op->a), b = mutate(op->b);
    const DType t = a.dtype();
    if (t.is_integral() && t.lanes == 1 && !t.is_bool()) {
      constexpr bool equality = std::is_same_v<Node, EQ> || std::is_same_v<Node, NE>;
      const Interval wrapped = bounds_.of(mutate(Sub::make(a, b)));
      const bool exact_sub = assumed_exact(a, t) && assumed_exact(b, t);
      if (equality || exact_sub) {
        if (holds(wrapped)) return IntImm::make(DType::boolean(), 1);
        if (fails(wrapped)) return IntImm::make(DType::boolean(), 0);
      }
      if (!exact_sub) {
        // (Equal expressions have equal values: no side effects, nothing nondeterministic.)
        const Interval exact =
            structural_equal(a, b) ? Interval::point(0) : add(bounds_.of(a), negate(bounds_.of(b)));
        // The Sub's value is the exact difference where that cannot wrap.
        const Interval d = !equality && fits(exact, t) ? wrapped : exact;
        if (holds(d)) return IntImm::make(DType::boolean(), 1);
        if (fails(d)) return IntImm::make(DType::boolean(), 0);
      }
    }
    return a.same_as(op->a) && b.same_as(op->b) ? self : Node::make(a, b);
  }
  Expr visit_LT(const LT* op, const Expr& self) override {
    return compare(
        op, self, [](Interval d) { return d.max != Interval::pos_inf && d.max < 0; },
        [](Interval d) { return d.min != Interval::neg_inf && d.min >= 0; });
  }
  Expr visit_LE(const LE* op, const Expr& self) override {
    return compare(
        op, self, [](Interval d) { return d.max != Interval::pos_inf && d.max <= 0; },
        [](Interval d) { return d.min != Interval::neg_inf && d.min > 0; });
  }
  Expr visit_GT(const GT* op, const Expr& self) override {
    return compare(
        op, self, [](Interval d) { return d.min != Interval::neg_inf && d.min > 0; },
        [](Interval d) { return d.max != Interval::pos_inf && d.max <= 0; });
  }
  Expr visit_GE(const GE* op, const Expr& self) override {
    return compare(
        op, self, [](Interval d) { return d.min != Interval::neg_inf && d.min >= 0; },
        [](Interval d) { return d.max != Interval::pos_inf && d.max < 0; });
  }
  Expr visit_EQ(const EQ* op, const Expr& self) override {
    return compare(
        op, self, [](Interval d) { return d.is_point() && d.min == 0; },
        [](Interval d) {
          return (d.min != Interval::neg_inf && d.min > 0) ||
                 (d.max != Interval::pos_inf && d.max < 0);
        });
  }
  Expr visit_NE(const NE* op, const Expr& self) override {
    return compare(
        op, self,
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
    // Reduce axes have known ranges inside the reduction: they go into a copy of the caller's
    // ranges, made at the first reduction (the copy then stays in use, as if it had been made
    // at the start).
    if (!own_) {
      own_ = std::make_unique<RangeMap>(*outer_);
      bounds_.set_ranges(*own_);
    }
    for (auto& a : op->axes) (*own_)[a.variable()] = Interval::range(a.extent);
    Expr r = ExprMutator::visit_Reduce(op, self);
    for (auto& a : op->axes) own_->erase(a.variable());
    return r;
  }

 private:
  bounds_analyzer bounds_;
  const RangeMap* outer_;
  std::unique_ptr<RangeMap> own_;  // outer_ plus reduce axes, once a Reduce is met
  // Variables replaced where the input uses them. The values must not use these variables:
  // the simplifier re-simplifies expressions it builds, and would replace them there too.
  const VarMap* substitutions_;
  const Expr* known_from_ = nullptr;  // see set_known
  const Expr* known_to_ = nullptr;
};

}  // namespace detail

LOOM_DECL int64_t known_divisor(const Expr& e) {
  if (!e.defined()) return 1;
  auto gcd = [](int64_t a, int64_t b) { return std::gcd(a < 0 ? -a : a, b < 0 ? -b : b); };
  if (const int64_t* c = as_const_int(e)) return *c < 0 ? -*c : *c;
  switch (e.kind()) {
    case NodeKind::Add: return gcd(known_divisor(e.as<Add>()->a), known_divisor(e.as<Add>()->b));
    case NodeKind::Sub: return gcd(known_divisor(e.as<Sub>()->a), known_divisor(e.as<Sub>()->b));
    case NodeKind::Mul: return known_divisor(e.as<Mul>()->a) * known_divisor(e.as<Mul>()->b);
    case NodeKind::Min: return gcd(known_divisor(e.as<Min>()->a), known_divisor(e.as<Min>()->b));
    case NodeKind::Max: return gcd(known_divisor(e.as<Max>()->a), known_divisor(e.as<Max>()->b));
    case NodeKind::FloorMod: {
      // a = q m + r with m | ... : r = a - q m keeps every common divisor of a and m.
      auto* m = e.as<FloorMod>();
      const int64_t* c = as_const_int(m->b);
      return c && *c != 0 ? gcd(known_divisor(m->a), *c) : 1;
    }
    case NodeKind::FloorDiv: {
      auto* d = e.as<FloorDiv>();
      const int64_t* c = as_const_int(d->b);
      const int64_t a = known_divisor(d->a);
      return c && *c > 0 && a % *c == 0 ? a / *c : 1;
    }
    case NodeKind::Select:
      return gcd(known_divisor(e.as<Select>()->true_value),
                 known_divisor(e.as<Select>()->false_value));
    case NodeKind::BitXor: {
      // Bits below the lowest set bit of both divisors are zero in both operands.
      const int64_t d = gcd(known_divisor(e.as<BitXor>()->a), known_divisor(e.as<BitXor>()->b));
      return d == 0 ? 0 : d & -d;
    }
    case NodeKind::Cast: return e.dtype().is_integral() ? known_divisor(e.as<Cast>()->value) : 1;
    default: return 1;
  }
}

LOOM_DECL Interval bounds_of(const Expr& e, const RangeMap& ranges) {
  return detail::bounds_analyzer(ranges).of(e);
}

LOOM_DECL Expr simplify(const Expr& e, const RangeMap& ranges) {
  detail::simplifier s(ranges);
  return s.mutate(e);
}

LOOM_DECL Expr simplify_substituted(const Expr& e, const SubstitutionMap& substitutions,
                                    const RangeMap& ranges, const Expr* known,
                                    const Expr* known_result) {
  detail::simplifier s(ranges, substitutions.empty() ? nullptr : &substitutions);
  if (known) s.set_known(known, known_result);
  return s.mutate(e);
}

LOOM_DECL bool can_prove(const Expr& condition, const RangeMap& ranges) {
  return is_const_int(simplify(condition, ranges), 1);
}

}  // namespace ir
LOOM_END_NAMESPACE
