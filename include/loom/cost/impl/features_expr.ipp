// Part of the feature extractor (loom/cost/impl/features.ipp includes it after
// features_extractor.ipp): the expressions of a store. Bounds of integer expressions over the
// loop ranges, the fraction of iterations a guard lets through, the operation counts (group 1),
// and the index terms the access analysis works on.
#include <algorithm>

LOOM_BEGIN_NAMESPACE
namespace cost {
namespace detail {

// Bounds of an integer expression with loop depth d ranging over [lo_[d], hi_[d]].
inline Interval extractor::eval(const ir::Expr& e) const {
  using ir::NodeKind;
  switch (e.kind()) {
    case NodeKind::IntImm: return Interval::point(static_cast<const ir::IntImm*>(e.get())->value);
    case NodeKind::Variable: {
      int d = depth_of(static_cast<const ir::Variable*>(e.get()));
      return d < 0 ? Interval{} : Interval{lo_[d], hi_[d]};
    }
    case NodeKind::Cast: {
      auto* c = static_cast<const ir::Cast*>(e.get());
      return c->value.dtype().is_integral() ? eval(c->value) : Interval{};
    }
    case NodeKind::Add: {
      auto* n = static_cast<const ir::Add*>(e.get());
      return iv_add(eval(n->a), eval(n->b));
    }
    case NodeKind::Sub: {
      auto* n = static_cast<const ir::Sub*>(e.get());
      return iv_add(eval(n->a), iv_scale(eval(n->b), -1));
    }
    case NodeKind::Mul: {
      auto* n = static_cast<const ir::Mul*>(e.get());
      return iv_mul(eval(n->a), eval(n->b));
    }
    case NodeKind::Div:
    case NodeKind::FloorDiv:
    case NodeKind::Mod:
    case NodeKind::FloorMod: {
      auto [a, b] = ir::binary_operands(e);
      Interval y = eval(*b);
      if (!y.is_point() || y.min <= 0) return {};
      const bool floor = e.kind() == NodeKind::FloorDiv || e.kind() == NodeKind::FloorMod;
      if (e.kind() == NodeKind::Div || e.kind() == NodeKind::FloorDiv)
        return iv_div(eval(*a), y.min, floor);
      return iv_mod(eval(*a), y.min, floor);
    }
    case NodeKind::Min:
    case NodeKind::Max: {
      auto [a, b] = ir::binary_operands(e);
      Interval x = eval(*a), y = eval(*b);
      if (!x.bounded() || !y.bounded()) return {};
      if (e.kind() == NodeKind::Min) return {std::min(x.min, y.min), std::min(x.max, y.max)};
      return {std::max(x.min, y.min), std::max(x.max, y.max)};
    }
    case NodeKind::Select: {
      auto* s = static_cast<const ir::Select*>(e.get());
      Interval x = eval(s->true_value), y = eval(s->false_value);
      if (!x.bounded() || !y.bounded()) return {};
      return {std::min(x.min, y.min), std::max(x.max, y.max)};
    }
    case NodeKind::Ramp: {
      auto* r = static_cast<const ir::Ramp*>(e.get());
      Interval lane = lane_depth_ >= 0 ? Interval{lo_[lane_depth_], hi_[lane_depth_]}
                                       : Interval{0, r->lanes - 1};
      return iv_add(eval(r->base), iv_mul(eval(r->stride), lane));
    }
    case NodeKind::Broadcast: return eval(static_cast<const ir::Broadcast*>(e.get())->value);
    default: return e.dtype().is_bool() ? Interval{0, 1} : Interval{};
  }
}

// Estimated fraction of the iterations of the enclosing loops in which `c` holds: a comparison
// of integers counts the values of (a - b) over its range that satisfy it, as if spread
// evenly (exact for the mixed-radix indices of tail guards); conditions combine as independent
// events. Anything else (floats, loads, unbounded) counts as always true.
inline double extractor::fraction(const ir::Expr& c) const {
  using ir::NodeKind;
  switch (c.kind()) {
    case NodeKind::IntImm: return static_cast<const ir::IntImm*>(c.get())->value != 0 ? 1 : 0;
    case NodeKind::And: {
      auto* n = static_cast<const ir::And*>(c.get());
      return fraction(n->a) * fraction(n->b);
    }
    case NodeKind::Or: {
      auto* n = static_cast<const ir::Or*>(c.get());
      const double a = fraction(n->a), b = fraction(n->b);
      return a + b - a * b;
    }
    case NodeKind::Not: return 1 - fraction(static_cast<const ir::Not*>(c.get())->a);
    case NodeKind::LT:
    case NodeKind::LE:
    case NodeKind::GT:
    case NodeKind::GE:
    case NodeKind::EQ:
    case NodeKind::NE: {
      auto [a, b] = ir::binary_operands(c);
      if (!a->dtype().is_integral()) return 1;
      const Interval d = iv_add(eval(*a), iv_scale(eval(*b), -1));
      if (!d.bounded()) return 1;
      const double n = static_cast<double>(d.max) - static_cast<double>(d.min) + 1;
      // Values of d in [lo, hi] that satisfy d < t: t - lo of them, clamped to [0, n].
      auto below = [&](double t) { return std::clamp(t - static_cast<double>(d.min), 0.0, n) / n; };
      switch (c.kind()) {
        case NodeKind::LT: return below(0);
        case NodeKind::LE: return below(1);
        case NodeKind::GT: return 1 - below(1);
        case NodeKind::GE: return 1 - below(0);
        case NodeKind::EQ: return d.min <= 0 && d.max >= 0 ? 1 / n : 0;
        default: return d.min <= 0 && d.max >= 0 ? 1 - 1 / n : 1;
      }
    }
    default: return 1;
  }
}

// Loops (as depth bits) an expression uses.
inline uint64_t extractor::depth_mask(const ir::Expr& e) const {
  uint64_t m = 0;
  ir::post_order_visit(e, [&](const ir::Expr& x) {
    if (auto* v = x.as<ir::Variable>()) {
      int d = depth_of(v);
      if (d >= 0) m |= depth_bit(d);
    } else if (x.kind() == ir::NodeKind::Ramp && lane_depth_ >= 0) {
      m |= depth_bit(lane_depth_);
    }
  });
  return m;
}

// Adds the operations of `e` to `c` (indexed like features 0-15), each weighted by its
// lanes as in Ansor's MathOpCounter; with `collect`, records every Load for the access
// analysis.
inline void extractor::count(const ir::Expr& e, double* c, bool collect) {
  using ir::NodeKind;
  const ir::ExprNode* n = e.get();
  switch (e.kind()) {
    case NodeKind::IntImm:
    case NodeKind::FloatImm:
    case NodeKind::Variable: return;
    case NodeKind::Cast: return count(static_cast<const ir::Cast*>(n)->value, c, collect);
    case NodeKind::Add:
    case NodeKind::Sub:
    case NodeKind::BitXor: {  // one integer ALU operation, as an add
      auto [a, b] = ir::binary_operands(e);
      const bool f = a->dtype().is_float();
      const double lanes = a->dtype().lanes;
      c[f ? kFeatureFloatAddSub : kFeatureIntAddSub] += lanes;
      if (a->kind() == NodeKind::Mul || b->kind() == NodeKind::Mul)
        c[f ? kFeatureFloatMad : kFeatureIntMad] += lanes;
      count(*a, c, collect);
      return count(*b, c, collect);
    }
    case NodeKind::Mul:
    case NodeKind::Div:
    case NodeKind::Mod:
    case NodeKind::FloorDiv:
    case NodeKind::FloorMod:
    case NodeKind::Min:
    case NodeKind::Max:
    case NodeKind::EQ:
    case NodeKind::NE:
    case NodeKind::LT:
    case NodeKind::LE:
    case NodeKind::GT:
    case NodeKind::GE:
    case NodeKind::And:
    case NodeKind::Or: {
      auto [a, b] = ir::binary_operands(e);
      const bool f = a->dtype().is_float();
      const double lanes = a->dtype().lanes;
      int k;
      if (e.kind() == NodeKind::Mul)
        k = f ? kFeatureFloatMul : kFeatureIntMul;
      else if (e.kind() == NodeKind::And || e.kind() == NodeKind::Or)
        k = kFeatureBoolOp;
      else if (e.kind() == NodeKind::Div || e.kind() == NodeKind::Mod ||
               e.kind() == NodeKind::FloorDiv || e.kind() == NodeKind::FloorMod)
        k = f ? kFeatureFloatDivMod : kFeatureIntDivMod;
      else
        k = f ? kFeatureFloatCmp : kFeatureIntCmp;
      c[k] += lanes;
      count(*a, c, collect);
      return count(*b, c, collect);
    }
    case NodeKind::Not: {
      auto* x = static_cast<const ir::Not*>(n);
      c[kFeatureBoolOp] += x->a.dtype().lanes;
      return count(x->a, c, collect);
    }
    case NodeKind::Select: {
      auto* s = static_cast<const ir::Select*>(n);
      c[kFeatureSelectOp] += n->dtype.lanes;
      count(s->condition, c, collect);
      count(s->true_value, c, collect);
      return count(s->false_value, c, collect);
    }
    case NodeKind::Call: {
      auto* call = static_cast<const ir::Call*>(n);
      c[n->dtype.is_float() ? kFeatureFloatMathFunc : kFeatureIntMathFunc] += n->dtype.lanes;
      for (auto& a : call->args) count(a, c, collect);
      return;
    }
    case NodeKind::Load: {
      auto* l = static_cast<const ir::Load*>(n);
      if (collect) loads_.push_back({l->buffer.get(), &l->index});
      return count(l->index, c, collect);
    }
    case NodeKind::Ramp: {
      auto* r = static_cast<const ir::Ramp*>(n);
      count(r->base, c, collect);
      return count(r->stride, c, collect);
    }
    case NodeKind::Broadcast: return count(static_cast<const ir::Broadcast*>(n)->value, c, collect);
    case NodeKind::TensorRead:
    case NodeKind::Reduce: return;  // not in lowered code
  }
}

// Appends the terms of `e * scale` to terms_ and its constant part to `constant`.
inline void extractor::linearize(const ir::Expr& e, int64_t scale, int64_t& constant) {
  using ir::NodeKind;
  switch (e.kind()) {
    case NodeKind::IntImm: {
      int64_t v;
      if (!__builtin_mul_overflow(static_cast<const ir::IntImm*>(e.get())->value, scale, &v)) {
        constant += v;
        return;
      }
      break;
    }
    case NodeKind::Variable: {
      int d = depth_of(static_cast<const ir::Variable*>(e.get()));
      if (d < 0) break;
      terms_.push_back({scale, &e, d, depth_bit(d), 0, 0});
      return;
    }
    case NodeKind::Cast: {
      auto* c = static_cast<const ir::Cast*>(e.get());
      if (!c->value.dtype().is_integral()) break;
      return linearize(c->value, scale, constant);
    }
    case NodeKind::Add: {
      auto* n = static_cast<const ir::Add*>(e.get());
      linearize(n->a, scale, constant);
      return linearize(n->b, scale, constant);
    }
    case NodeKind::Sub: {
      auto* n = static_cast<const ir::Sub*>(e.get());
      linearize(n->a, scale, constant);
      return linearize(n->b, -scale, constant);
    }
    case NodeKind::Mul: {
      auto* n = static_cast<const ir::Mul*>(e.get());
      int64_t s;
      if (auto* k = ir::as_const_int(n->b); k && !__builtin_mul_overflow(scale, *k, &s))
        return linearize(n->a, s, constant);
      if (auto* k = ir::as_const_int(n->a); k && !__builtin_mul_overflow(scale, *k, &s))
        return linearize(n->b, s, constant);
      break;
    }
    case NodeKind::Ramp: {
      auto* r = static_cast<const ir::Ramp*>(e.get());
      auto* k = ir::as_const_int(r->stride);
      int64_t s;
      if (!k || lane_depth_ < 0 || __builtin_mul_overflow(scale, *k, &s)) break;
      linearize(r->base, scale, constant);
      if (s != 0) terms_.push_back({s, &e, lane_depth_, depth_bit(lane_depth_), 0, 0});
      return;
    }
    case NodeKind::Broadcast:
      return linearize(static_cast<const ir::Broadcast*>(e.get())->value, scale, constant);
    default: break;
  }
  if (scale != 0) terms_.push_back({scale, &e, -1, depth_mask(e), 0, 0});
}

}  // namespace detail
}  // namespace cost
LOOM_END_NAMESPACE
