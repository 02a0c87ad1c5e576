/// \file
/// Reductions of the DSL (layer dsl/): `sum`, `prod`, `min`, `max` over one or several reduce
/// axes, optionally counting only points where a condition holds.
#ifndef LOOM_DSL_REDUCE_HPP
#define LOOM_DSL_REDUCE_HPP

#include "loom/dsl/operators.hpp"

#include <initializer_list>

LOOM_BEGIN_NAMESPACE

/// The axes of a reduction: one RVar, `{rc, ry, rx}`, or a vector.
struct reduce_axes {
  std::vector<ir::IterVar> axes;
  reduce_axes(const RVar& r) : axes{r.iter_var()} {}  // NOLINT: `sum(x, k)`
  reduce_axes(std::initializer_list<RVar> rs) {       // NOLINT: `sum(x, {rc, ry, rx})`
    for (auto& r : rs) axes.push_back(r.iter_var());
  }
  reduce_axes(const std::vector<RVar>& rs) {  // NOLINT
    for (auto& r : rs) axes.push_back(r.iter_var());
  }
};

/// No condition: every point of the reduction domain counts.
struct no_condition {};

/// A reduction; it may only be the whole body of a compute.
template <class T, class Body, class Cond>
struct ReduceExpr : expr_base<ReduceExpr<T, Body, Cond>> {
  LOOM_STATIC_ASSERT((!std::is_same_v<T, bool>),
                     LOOM_REDUCTION_OVER_CONDITIONS__CAST_TO_INT32_FIRST);
  LOOM_STATIC_ASSERT(computes_v<T>, LOOM_NO_REDUCTION_OVER_16_BIT_FLOATS__CAST_TO_FLOAT_FIRST);
  using value_type = T;
  ir::ReduceOp op;
  Body body;
  std::vector<ir::IterVar> axes;
  Cond condition;
  ReduceExpr(ir::ReduceOp o, Body b, std::vector<ir::IterVar> a, Cond c)
      : op(o), body(std::move(b)), axes(std::move(a)), condition(std::move(c)) {}
};

template <class T, class Body, class Cond>
ir::Expr to_ir(const ReduceExpr<T, Body, Cond>& e, detail::lower_ctx& ctx) {
  LOOM_USER_CHECK(!ctx.inside_reduce, "loom.dsl.E105")
      << "a reduction inside a reduction in compute '" << ctx.compute_name
      << "'; compute the inner reduction in its own tensor";
  const size_t before = ctx.bound_reduce_vars.size();
  for (auto& a : e.axes) ctx.bound_reduce_vars.push_back(a.variable());
  ctx.inside_reduce = true;
  ir::Expr body = to_ir(e.body, ctx);
  ir::Expr cond;
  if constexpr (!std::is_same_v<Cond, no_condition>) cond = to_ir(e.condition, ctx);
  ctx.inside_reduce = false;
  ctx.bound_reduce_vars.resize(before);
  return ir::Reduce::make(e.op, body, e.axes, cond);
}

namespace detail {
template <class E, class C>
auto make_reduce(ir::ReduceOp op, const E& body, reduce_axes axes, const C& where) {
  if constexpr (!std::is_same_v<C, no_condition>) {
    LOOM_STATIC_ASSERT((std::is_same_v<value_type_t<C>, bool>),
                       LOOM_REDUCTION_CONDITION_MUST_BE_A_COMPARISON_OR_LOGICAL_EXPRESSION);
  }
  return ReduceExpr<value_type_t<E>, E, C>(op, body, std::move(axes.axes), where);
}
}  // namespace detail

#define LOOM_DSL_REDUCTION(name, op)                                       \
  template <dsl_expr E>                                                    \
  auto name(const E& body, reduce_axes axes) {                             \
    return detail::make_reduce(op, body, std::move(axes), no_condition{}); \
  }                                                                        \
  template <dsl_expr E, dsl_expr C>                                        \
  auto name(const E& body, reduce_axes axes, const C& where) {             \
    return detail::make_reduce(op, body, std::move(axes), where);          \
  }
/// `sum(A(i, k) * B(k, j), k)`, `sum(x, {rc, ry, rx})`, `sum(x, k, k < i)` (with a condition).
LOOM_DSL_REDUCTION(sum, ir::ReduceOp::Sum)
LOOM_DSL_REDUCTION(prod, ir::ReduceOp::Prod)
LOOM_DSL_REDUCTION(min, ir::ReduceOp::Min)
LOOM_DSL_REDUCTION(max, ir::ReduceOp::Max)
#undef LOOM_DSL_REDUCTION

LOOM_END_NAMESPACE

#endif  // LOOM_DSL_REDUCE_HPP
