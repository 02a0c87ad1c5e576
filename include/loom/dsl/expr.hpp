/// \file
/// The expression-template core of the DSL (layer dsl/): the CRTP base, traits, the leaves (Var,
/// RVar, constants) and the one conversion point into the runtime IR, `to_ir`.
///
/// A DSL expression is only a description: a small value whose type records the element type and
/// the shape of the expression, so that misuse (wrong number of indices, a float used as an index,
/// mixed element types) is a compile error. Children are stored by value (leaves are cheap
/// handles), so `auto e = a + b;` is safe. Each node type has a `to_ir(node, lower_ctx&)` overload;
/// `compute()` calls it once, after which the template object may die. Nothing below dsl/ is
/// templated on a user's expression type.
#ifndef LOOM_DSL_EXPR_HPP
#define LOOM_DSL_EXPR_HPP

#include "loom/ir/expr.hpp"

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

/// Compile-time misuse check with an Eigen-style SHOUTY message naming what went wrong.
#ifndef LOOM_DISABLE_CONCEPT_CHECKS
#define LOOM_STATIC_ASSERT(cond, MESSAGE) static_assert(cond, #MESSAGE)
#else
#define LOOM_STATIC_ASSERT(cond, MESSAGE) static_assert(true, "")
#endif

LOOM_BEGIN_NAMESPACE

namespace detail {

/// What `to_ir` needs while converting one compute body: which reduce axes are bound by an
/// enclosing reduction, and the compute's name for error messages.
struct lower_ctx {
  std::string compute_name;
  std::vector<const ir::Variable*> bound_reduce_vars;
  bool inside_reduce = false;
};

}  // namespace detail

/// CRTP base of every DSL expression. `Derived::value_type` is its C++ element type.
template <class Derived>
struct expr_base {
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
};

namespace detail {
template <class T>
std::true_type is_expr_impl(const expr_base<T>*);
std::false_type is_expr_impl(...);
}  // namespace detail

/// True for DSL expression types.
template <class T>
concept dsl_expr = decltype(detail::is_expr_impl(std::declval<std::remove_cvref_t<T>*>()))::value;

/// C++ arithmetic literals that may appear in an expression (they adopt the other operand's type).
template <class T>
concept dsl_literal =
    std::is_arithmetic_v<std::remove_cvref_t<T>> && !std::is_same_v<std::remove_cvref_t<T>, bool>;

template <class T>
concept dsl_operand = dsl_expr<T> || dsl_literal<T>;

/// Element types a tensor may hold. float16 and bfloat16 are storage-only (ir/dtype.hpp): an
/// expression of these types may be read, stored and converted with cast<T>(), nothing else.
template <class T>
concept element_type = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                       std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> || is_half_v<T>;

/// False for the storage-only 16-bit floats: the element types that arithmetic accepts.
template <class T>
inline constexpr bool computes_v = !is_half_v<T>;

/// Element type of an expression.
template <dsl_expr E>
using value_type_t = typename std::remove_cvref_t<E>::value_type;

/// Integer-valued expressions may index tensors.
template <class E>
concept index_expr =
    (dsl_expr<E> && std::is_integral_v<value_type_t<E>> &&
     !std::is_same_v<value_type_t<E>, bool>) ||
    (std::is_integral_v<std::remove_cvref_t<E>> && !std::is_same_v<std::remove_cvref_t<E>, bool>);

/// A constant of element type T.
template <class T>
struct Const : expr_base<Const<T>> {
  using value_type = T;
  T value;
  explicit Const(T v) : value(v) {}
};

template <class T>
ir::Expr to_ir(const Const<T>& c, detail::lower_ctx&) {
  if constexpr (is_half_v<T>)
    return ir::FloatImm::make(ir::dtype_v<T>, static_cast<double>(static_cast<float>(c.value)));
  else if constexpr (std::is_floating_point_v<T>)
    return ir::FloatImm::make(ir::dtype_v<T>, static_cast<double>(c.value));
  else
    return ir::IntImm::make(ir::dtype_v<T>, static_cast<int64_t>(c.value));
}

/// A spatial index variable: `compute` passes one per output dimension to the lambda.
class Var : public expr_base<Var> {
 public:
  using value_type = int64_t;
  explicit Var(std::string name) : var_(ir::Variable::make(std::move(name))) {}
  const ir::Expr& ir() const { return var_; }
  const std::string& name() const { return var_.as<ir::Variable>()->name; }

 private:
  ir::Expr var_;
};

inline ir::Expr to_ir(const Var& v, detail::lower_ctx&) { return v.ir(); }

/// A reduction axis over [0, extent): create it with reduce_axis() and use it inside
/// sum/min/max/prod.
class RVar : public expr_base<RVar> {
 public:
  using value_type = int64_t;
  RVar(int64_t extent, std::string name)
      : iv_{ir::Variable::make(std::move(name)), extent, ir::IterKind::Reduce} {
    LOOM_USER_CHECK(extent > 0, "loom.dsl.E101") << "reduce_axis '" << iv_.name() << "' has extent "
                                                 << extent << "; the extent must be positive";
  }
  const ir::IterVar& iter_var() const { return iv_; }
  const std::string& name() const { return iv_.name(); }
  int64_t extent() const { return iv_.extent; }

 private:
  ir::IterVar iv_;
};

/// A reduction axis of the given extent.
inline RVar reduce_axis(int64_t extent, std::string name = "k") {
  return RVar(extent, std::move(name));
}

inline ir::Expr to_ir(const RVar& r, detail::lower_ctx& ctx) {
  const ir::Variable* v = r.iter_var().variable();
  bool bound = false;
  for (auto* b : ctx.bound_reduce_vars) bound = bound || b == v;
  LOOM_USER_CHECK(bound, "loom.dsl.E104")
      << "reduce axis '" << r.name() << "' is used outside a reduction in compute '"
      << ctx.compute_name << "'; use it only inside sum/min/max/prod over '" << r.name() << "'";
  return r.iter_var().var;
}

namespace detail {

/// Turns an operand into a DSL expression of element type T: expressions pass through, literals
/// become Const<T>.
template <class T, class X>
auto as_expr(const X& x) {
  if constexpr (dsl_expr<X>)
    return x;
  else
    return Const<T>(static_cast<T>(x));
}

/// The element type two operands agree on: the expression's type when one side is a literal.
template <class A, class B>
struct operand_type;
template <dsl_expr A, dsl_expr B>
struct operand_type<A, B> {
  LOOM_STATIC_ASSERT((std::is_same_v<value_type_t<A>, value_type_t<B>>),
                     LOOM_MIXED_ELEMENT_TYPES_IN_EXPRESSION__USE_CAST_TO_CONVERT_ONE_OPERAND);
  using type = value_type_t<A>;
};
template <dsl_expr A, dsl_literal B>
struct operand_type<A, B> {
  using type = value_type_t<A>;
};
template <dsl_literal A, dsl_expr B>
struct operand_type<A, B> {
  using type = value_type_t<B>;
};
template <class A, class B>
using operand_type_t = typename operand_type<A, B>::type;

}  // namespace detail

LOOM_END_NAMESPACE

#endif  // LOOM_DSL_EXPR_HPP
