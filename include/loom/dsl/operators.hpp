/// \file
/// Operators of the DSL (layer dsl/): arithmetic, comparisons, logic, math intrinsics,
/// `if_then_else` and `cast`. Literals adopt the element type of the other operand; two
/// expressions of different element types are a compile error (convert one with cast<T>()).
#ifndef LOOM_DSL_OPERATORS_HPP
#define LOOM_DSL_OPERATORS_HPP

#include "loom/dsl/expr.hpp"

LOOM_BEGIN_NAMESPACE

template <class T, class Body, class Cond>
struct ReduceExpr;

namespace detail {
template <class T>
struct is_reduce : std::false_type {};
template <class T, class Body, class Cond>
struct is_reduce<ReduceExpr<T, Body, Cond>> : std::true_type {};
/// A reduction must be the whole body of a compute, never an operand.
template <class... Xs>
constexpr bool no_reduce_operand = (!is_reduce<std::remove_cvref_t<Xs>>::value && ...);
}  // namespace detail

/// A binary operation of kind K whose result has element type R.
template <ir::NodeKind K, class A, class B, class R>
struct Binary : expr_base<Binary<K, A, B, R>> {
  LOOM_STATIC_ASSERT((detail::no_reduce_operand<A, B>),
                     LOOM_REDUCTION_MUST_BE_THE_WHOLE_BODY_OF_A_COMPUTE__COMPUTE_IT_SEPARATELY);
  using value_type = R;
  A a;
  B b;
  Binary(A x, B y) : a(std::move(x)), b(std::move(y)) {}
};

template <ir::NodeKind K, class A, class B, class R>
ir::Expr to_ir(const Binary<K, A, B, R>& e, detail::lower_ctx& ctx) {
  return ir::make_binary(K, to_ir(e.a, ctx), to_ir(e.b, ctx));
}

namespace detail {

enum class binary_class { arithmetic, integer_only, comparison, logical };

template <ir::NodeKind K, binary_class C, class A, class B>
auto make_binary(const A& a, const B& b) {
  using T = operand_type_t<A, B>;
  if constexpr (C == binary_class::logical) {
    LOOM_STATIC_ASSERT((std::is_same_v<T, bool>),
                       LOOM_LOGICAL_OPERATORS_NEED_CONDITIONS__COMPARE_VALUES_FIRST);
  } else if constexpr (C != binary_class::comparison) {
    LOOM_STATIC_ASSERT((!std::is_same_v<T, bool>),
                       LOOM_ARITHMETIC_ON_CONDITIONS__USE_IF_THEN_ELSE_OR_CAST);
  }
  LOOM_STATIC_ASSERT(computes_v<T>,
                     LOOM_NO_ARITHMETIC_OR_COMPARISON_ON_16_BIT_FLOATS__CAST_TO_FLOAT_FIRST);
  if constexpr (C == binary_class::integer_only) {
    LOOM_STATIC_ASSERT(std::is_integral_v<T>, LOOM_FLOORDIV_AND_FLOORMOD_NEED_INTEGERS);
  }
  auto x = as_expr<T>(a);
  auto y = as_expr<T>(b);
  using R =
      std::conditional_t<C == binary_class::comparison || C == binary_class::logical, bool, T>;
  return Binary<K, decltype(x), decltype(y), R>(std::move(x), std::move(y));
}

template <class A, class B>
concept binary_operands = dsl_operand<A> && dsl_operand<B> && (dsl_expr<A> || dsl_expr<B>);

}  // namespace detail

#define LOOM_DSL_BINARY_OPERATOR(op, kind, klass)                                      \
  template <class A, class B>                                                          \
    requires detail::binary_operands<A, B>                                             \
  auto op(const A& a, const B& b) {                                                    \
    return detail::make_binary<ir::NodeKind::kind, detail::binary_class::klass>(a, b); \
  }
LOOM_DSL_BINARY_OPERATOR(operator+, Add, arithmetic)
LOOM_DSL_BINARY_OPERATOR(operator-, Sub, arithmetic)
LOOM_DSL_BINARY_OPERATOR(operator*, Mul, arithmetic)
/// Division truncates towards zero on integers (C semantics); see floordiv for index math.
LOOM_DSL_BINARY_OPERATOR(operator/, Div, arithmetic)
LOOM_DSL_BINARY_OPERATOR(operator%, Mod, arithmetic)
LOOM_DSL_BINARY_OPERATOR(floordiv, FloorDiv, integer_only)
LOOM_DSL_BINARY_OPERATOR(floormod, FloorMod, integer_only)
LOOM_DSL_BINARY_OPERATOR(operator<, LT, comparison)
LOOM_DSL_BINARY_OPERATOR(operator<=, LE, comparison)
LOOM_DSL_BINARY_OPERATOR(operator>, GT, comparison)
LOOM_DSL_BINARY_OPERATOR(operator>=, GE, comparison)
LOOM_DSL_BINARY_OPERATOR(operator==, EQ, comparison)
LOOM_DSL_BINARY_OPERATOR(operator!=, NE, comparison)
LOOM_DSL_BINARY_OPERATOR(operator&&, And, logical)
LOOM_DSL_BINARY_OPERATOR(operator||, Or, logical)
#undef LOOM_DSL_BINARY_OPERATOR

class RVar;

/// Element-wise minimum and maximum (with a reduce axis as second argument they are reductions,
/// see reduce.hpp).
template <class A, class B>
  requires detail::binary_operands<A, B> && (!std::is_same_v<std::remove_cvref_t<B>, RVar>)
auto min(const A& a, const B& b) {
  return detail::make_binary<ir::NodeKind::Min, detail::binary_class::arithmetic>(a, b);
}
template <class A, class B>
  requires detail::binary_operands<A, B> && (!std::is_same_v<std::remove_cvref_t<B>, RVar>)
auto max(const A& a, const B& b) {
  return detail::make_binary<ir::NodeKind::Max, detail::binary_class::arithmetic>(a, b);
}

/// Unary minus and logical not.
template <dsl_expr X>
auto operator-(const X& x) {
  return value_type_t<X>(0) - x;
}

template <class X>
struct NotExpr : expr_base<NotExpr<X>> {
  LOOM_STATIC_ASSERT((std::is_same_v<value_type_t<X>, bool>), LOOM_LOGICAL_NOT_NEEDS_A_CONDITION);
  using value_type = bool;
  X x;
  explicit NotExpr(X v) : x(std::move(v)) {}
};
template <dsl_expr X>
auto operator!(const X& x) {
  return NotExpr<X>(x);
}
template <class X>
ir::Expr to_ir(const NotExpr<X>& e, detail::lower_ctx& ctx) {
  return ir::Not::make(to_ir(e.x, ctx));
}

/// A math intrinsic applied to arguments of one float type (abs also takes integers).
template <ir::CallOp Op, class... Args>
struct CallExpr : expr_base<CallExpr<Op, Args...>> {
  LOOM_STATIC_ASSERT((detail::no_reduce_operand<Args...>),
                     LOOM_REDUCTION_MUST_BE_THE_WHOLE_BODY_OF_A_COMPUTE__COMPUTE_IT_SEPARATELY);
  using value_type = value_type_t<std::tuple_element_t<0, std::tuple<Args...>>>;
  LOOM_STATIC_ASSERT(computes_v<value_type>,
                     LOOM_NO_MATH_FUNCTION_ON_16_BIT_FLOATS__CAST_TO_FLOAT_FIRST);
  LOOM_STATIC_ASSERT(!computes_v<value_type> || std::is_floating_point_v<value_type> ||
                         (Op == ir::CallOp::abs && !std::is_same_v<value_type, bool>),
                     LOOM_MATH_FUNCTION_NEEDS_A_FLOAT_ARGUMENT__CAST_INTEGERS_FIRST);
  std::tuple<Args...> args;
  explicit CallExpr(Args... a) : args(std::move(a)...) {}
};
template <ir::CallOp Op, class... Args>
ir::Expr to_ir(const CallExpr<Op, Args...>& e, detail::lower_ctx& ctx) {
  std::vector<ir::Expr> args;
  std::apply([&](const auto&... a) { (args.push_back(to_ir(a, ctx)), ...); }, e.args);
  return ir::Call::make(Op, std::move(args));
}

#define LOOM_DSL_UNARY_CALL(name)            \
  template <dsl_expr X>                      \
  auto name(const X& x) {                    \
    return CallExpr<ir::CallOp::name, X>(x); \
  }
LOOM_DSL_UNARY_CALL(exp)
LOOM_DSL_UNARY_CALL(log)
LOOM_DSL_UNARY_CALL(sqrt)
LOOM_DSL_UNARY_CALL(rsqrt)
LOOM_DSL_UNARY_CALL(tanh)
LOOM_DSL_UNARY_CALL(sigmoid)
LOOM_DSL_UNARY_CALL(erf)
LOOM_DSL_UNARY_CALL(abs)
LOOM_DSL_UNARY_CALL(floor)
LOOM_DSL_UNARY_CALL(ceil)
LOOM_DSL_UNARY_CALL(round)
LOOM_DSL_UNARY_CALL(sin)
LOOM_DSL_UNARY_CALL(cos)
#undef LOOM_DSL_UNARY_CALL

/// `pow(x, y)`: both float of one type (a literal adopts the other's type).
template <class A, class B>
  requires detail::binary_operands<A, B>
auto pow(const A& a, const B& b) {
  using T = detail::operand_type_t<A, B>;
  auto x = detail::as_expr<T>(a);
  auto y = detail::as_expr<T>(b);
  return CallExpr<ir::CallOp::pow, decltype(x), decltype(y)>(x, y);
}

/// `if_then_else(cond, a, b)`: only the branch that is taken is evaluated, so the other may read
/// out of bounds (padding).
template <class C, class A, class B>
struct SelectExpr : expr_base<SelectExpr<C, A, B>> {
  LOOM_STATIC_ASSERT((std::is_same_v<value_type_t<C>, bool>),
                     LOOM_IF_THEN_ELSE_CONDITION_MUST_BE_A_COMPARISON_OR_LOGICAL_EXPRESSION);
  LOOM_STATIC_ASSERT((detail::no_reduce_operand<C, A, B>),
                     LOOM_REDUCTION_MUST_BE_THE_WHOLE_BODY_OF_A_COMPUTE__COMPUTE_IT_SEPARATELY);
  using value_type = value_type_t<A>;
  LOOM_STATIC_ASSERT(computes_v<value_type>,
                     LOOM_NO_IF_THEN_ELSE_ON_16_BIT_FLOATS__SELECT_FLOATS_THEN_CAST_THE_RESULT);
  C c;
  A a;
  B b;
  SelectExpr(C x, A y, B z) : c(std::move(x)), a(std::move(y)), b(std::move(z)) {}
};
template <dsl_expr C, class A, class B>
  requires detail::binary_operands<A, B>
auto if_then_else(const C& c, const A& a, const B& b) {
  using T = detail::operand_type_t<A, B>;
  auto x = detail::as_expr<T>(a);
  auto y = detail::as_expr<T>(b);
  return SelectExpr<C, decltype(x), decltype(y)>(c, x, y);
}
/// Both branches plain numbers of one type: `if_then_else(x > 0, 1.0f, 0.0f)`.
template <dsl_expr C, dsl_literal A, dsl_literal B>
  requires std::is_same_v<A, B>
auto if_then_else(const C& c, const A& a, const B& b) {
  return SelectExpr<C, Const<A>, Const<A>>(c, Const<A>(a), Const<A>(b));
}
template <class C, class A, class B>
ir::Expr to_ir(const SelectExpr<C, A, B>& e, detail::lower_ctx& ctx) {
  return ir::Select::make(to_ir(e.c, ctx), to_ir(e.a, ctx), to_ir(e.b, ctx));
}

/// `cast<T>(x)`: converts to another element type (float -> int truncates towards zero; to
/// float16/bfloat16 rounds to nearest even, through float32).
template <class T, class X>
struct CastExpr : expr_base<CastExpr<T, X>> {
  LOOM_STATIC_ASSERT(element_type<T>, LOOM_CAST_TARGET_MUST_BE_FLOAT_DOUBLE_INT32_OR_INT64);
  LOOM_STATIC_ASSERT((detail::no_reduce_operand<X>),
                     LOOM_REDUCTION_MUST_BE_THE_WHOLE_BODY_OF_A_COMPUTE__COMPUTE_IT_SEPARATELY);
  using value_type = T;
  X x;
  explicit CastExpr(X v) : x(std::move(v)) {}
};
template <class T, dsl_expr X>
auto cast(const X& x) {
  return CastExpr<T, X>(x);
}
/// `cast<bfloat16>(1.0f)`: a constant of type T (16-bit floats round through float32).
template <class T, dsl_literal X>
auto cast(const X& x) {
  LOOM_STATIC_ASSERT(element_type<T>, LOOM_CAST_TARGET_MUST_BE_FLOAT_DOUBLE_INT32_OR_INT64);
  if constexpr (is_half_v<T>)
    return Const<T>(T(static_cast<float>(x)));
  else
    return Const<T>(static_cast<T>(x));
}
template <class T, class X>
ir::Expr to_ir(const CastExpr<T, X>& e, detail::lower_ctx& ctx) {
  return ir::Cast::make(ir::dtype_v<T>, to_ir(e.x, ctx));
}

LOOM_END_NAMESPACE

#endif  // LOOM_DSL_OPERATORS_HPP
