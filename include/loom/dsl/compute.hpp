/// \file
/// `compute` (layer dsl/): the one place where a DSL expression becomes runtime IR.
#ifndef LOOM_DSL_COMPUTE_HPP
#define LOOM_DSL_COMPUTE_HPP

#include "loom/dsl/reduce.hpp"
#include "loom/dsl/tensor.hpp"

#include <array>
#include <utility>

LOOM_BEGIN_NAMESPACE

namespace detail {

template <std::size_t, class T>
using repeat_t = T;

template <class F, std::size_t... I>
constexpr bool invocable_with_vars(std::index_sequence<I...>) {
  return std::is_invocable_v<F, repeat_t<I, Var>...>;
}

// Built by append: "i" + std::to_string(i) trips GCC 12's -Wrestrict false positive (PR 105329)
// in every test that inlines it.
inline std::string axis_name(std::size_t i) {
  std::string name = "i";
  name += std::to_string(i);
  return name;
}

template <std::size_t Rank, class F>
auto compute_impl(std::string name, const int64_t* shape, F&& f, std::string tag) {
  LOOM_STATIC_ASSERT((invocable_with_vars<F>(std::make_index_sequence<Rank>{})),
                     LOOM_COMPUTE_LAMBDA_MUST_TAKE_ONE_VAR_PER_DIMENSION_OF_THE_SHAPE);
  // Axis variables are named i0, i1, ... : lambda parameter names are not visible to C++.
  std::vector<ir::IterVar> axes;
  std::array<Var, Rank> vars = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<Var, Rank>{Var(axis_name(I))...};
  }(std::make_index_sequence<Rank>{});
  for (std::size_t d = 0; d < Rank; ++d)
    axes.push_back(ir::IterVar{vars[d].ir(), shape[d], ir::IterKind::Spatial});
  auto body = std::apply(f, vars);
  using E = decltype(body);
  LOOM_STATIC_ASSERT(dsl_operand<E>, LOOM_COMPUTE_LAMBDA_MUST_RETURN_A_LOOM_EXPRESSION);
  using T = std::conditional_t<dsl_expr<E>,
                               value_type_t<std::conditional_t<dsl_expr<E>, E, Const<float>>>,
                               std::remove_cvref_t<E>>;
  LOOM_STATIC_ASSERT((!std::is_same_v<T, bool>),
                     LOOM_COMPUTE_BODY_IS_A_CONDITION__CAST_IT_TO_A_NUMBER_WITH_CAST);
  LOOM_STATIC_ASSERT(element_type<T>, LOOM_TENSOR_ELEMENT_TYPE_MUST_BE_FLOAT_DOUBLE_INT32_OR_INT64);
  lower_ctx ctx{name, {}, false};
  ir::Expr ir_body = to_ir(as_expr<T>(body), ctx);
  return Tensor<T, Rank>(
      ir::make_compute(std::move(name), std::move(axes), ir_body, std::move(tag)));
}

}  // namespace detail

/// A new tensor of the given shape whose element at (i0, i1, ...) is `f(i0, i1, ...)`:
/// `compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); })`.
/// `tag` names the operator for printing and analysis ("matmul", "conv2d", ...).
template <std::size_t Rank, class F>
auto compute(std::string name, const int64_t (&shape)[Rank], F&& f, std::string tag = "") {
  return detail::compute_impl<Rank>(std::move(name), shape, std::forward<F>(f), std::move(tag));
}

template <std::size_t Rank, class F>
auto compute(std::string name, const std::array<int64_t, Rank>& shape, F&& f,
             std::string tag = "") {
  return detail::compute_impl<Rank>(std::move(name), shape.data(), std::forward<F>(f),
                                    std::move(tag));
}

LOOM_END_NAMESPACE

#endif  // LOOM_DSL_COMPUTE_HPP
