/// \file
/// Typed tensors of the DSL (layer dsl/): `Tensor<T, Rank>`, `placeholder`, and element access
/// `A(i, k)`, whose index count and index types are checked at compile time.
#ifndef LOOM_DSL_TENSOR_HPP
#define LOOM_DSL_TENSOR_HPP

#include "loom/dsl/expr.hpp"

#include <array>
#include <tuple>
#include <utility>

LOOM_BEGIN_NAMESPACE

template <class T, std::size_t Rank, class... Idx>
struct Access;

/// A tensor of element type T and rank Rank: an input (placeholder) or the result of compute().
/// Converts to the untyped `ir::Tensor`, which is what the DAG and everything below use.
template <class T, std::size_t Rank>
class Tensor {
  LOOM_STATIC_ASSERT(element_type<T>, LOOM_TENSOR_ELEMENT_TYPE_MUST_BE_FLOAT_DOUBLE_INT32_OR_INT64);

 public:
  using value_type = T;
  static constexpr std::size_t rank = Rank;

  Tensor() = default;
  /// Wraps an untyped tensor; throws loom::user_error if its type or rank differ.
  explicit Tensor(ir::Tensor t) : t_(std::move(t)) {
    LOOM_USER_CHECK(t_.dtype() == ir::dtype_v<T> && t_.rank() == static_cast<int>(Rank),
                    "loom.dsl.E106")
        << "tensor '" << t_.name() << "' is " << ir::to_string(t_.dtype()) << " of rank "
        << t_.rank() << ", not " << ir::to_string(ir::dtype_v<T>) << " of rank " << Rank;
  }
  operator const ir::Tensor&() const { return t_; }  // NOLINT: typed -> untyped is always safe
  const ir::Tensor& ir() const { return t_; }
  const std::string& name() const { return t_.name(); }
  int64_t shape(std::size_t d) const { return t_.shape().at(d); }
  std::array<int64_t, Rank> shape() const {
    std::array<int64_t, Rank> s{};
    for (std::size_t d = 0; d < Rank; ++d) s[d] = t_.shape()[d];
    return s;
  }

  /// Element access `A(i, k)`: one integer index expression (or integer literal) per dimension.
  template <class... Idx>
  Access<T, Rank, Idx...> operator()(const Idx&... idx) const {
    LOOM_STATIC_ASSERT(sizeof...(Idx) == Rank,
                       LOOM_TENSOR_ACCESS_RANK_MISMATCH__PASS_ONE_INDEX_PER_DIMENSION);
    LOOM_STATIC_ASSERT((index_expr<Idx> && ...),
                       LOOM_TENSOR_INDEX_MUST_BE_AN_INTEGER_EXPRESSION__NOT_A_FLOAT);
    return Access<T, Rank, Idx...>(t_, idx...);
  }

 private:
  ir::Tensor t_;
};

/// `A(i, k)`: reads one element of a tensor.
template <class T, std::size_t Rank, class... Idx>
struct Access : expr_base<Access<T, Rank, Idx...>> {
  using value_type = T;
  ir::Tensor tensor;
  std::tuple<Idx...> indices;
  Access(ir::Tensor t, const Idx&... i) : tensor(std::move(t)), indices(i...) {}
};

template <class T, std::size_t Rank, class... Idx>
ir::Expr to_ir(const Access<T, Rank, Idx...>& a, detail::lower_ctx& ctx) {
  std::vector<ir::Expr> idx;
  std::apply(
      [&](const auto&... i) { (idx.push_back(to_ir(detail::as_expr<int64_t>(i), ctx)), ...); },
      a.indices);
  return ir::TensorRead::make(a.tensor, std::move(idx));
}

/// A new input tensor, e.g. `placeholder<float>("A", {M, K})`.
template <class T, std::size_t Rank>
Tensor<T, Rank> placeholder(std::string name, const int64_t (&shape)[Rank]) {
  return Tensor<T, Rank>(ir::make_placeholder(std::move(name), ir::dtype_v<T>,
                                              std::vector<int64_t>(shape, shape + Rank)));
}

template <class T, std::size_t Rank>
Tensor<T, Rank> placeholder(std::string name, const std::array<int64_t, Rank>& shape) {
  return Tensor<T, Rank>(ir::make_placeholder(std::move(name), ir::dtype_v<T>,
                                              std::vector<int64_t>(shape.begin(), shape.end())));
}

LOOM_END_NAMESPACE

#endif  // LOOM_DSL_TENSOR_HPP
