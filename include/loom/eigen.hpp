/// \file
/// Eigen interop: pass Eigen matrices, maps and tensors to loom kernels directly. Link the CMake
/// target `loom::eigen`.
///
/// loom tensors are dense and row-major. Row-major Eigen matrices (`Eigen::Matrix<T, R, C,
/// Eigen::RowMajor>`), maps of them and row-major `Eigen::Tensor`s are viewed with their shape;
/// vectors are rank-1. A column-major matrix with more than one row and column is refused with a
/// message saying what to use, since its element order is not what the kernel expects.
#ifndef LOOM_EIGEN_HPP
#define LOOM_EIGEN_HPP

#include "loom/runtime/buffer.hpp"

#if !LOOM_WITH_EIGEN
#error "loom/eigen.hpp needs Eigen: link the CMake target loom::eigen (apt install libeigen3-dev)"
#endif

#include <Eigen/Core>
#if __has_include(<unsupported/Eigen/CXX11/Tensor>)
#include <unsupported/Eigen/CXX11/Tensor>
#define LOOM_EIGEN_HAS_TENSOR 1
#endif

LOOM_BEGIN_NAMESPACE

namespace detail {
template <class Derived>
BufferView eigen_dense_view(const Eigen::PlainObjectBase<Derived>& m) {
  using T = typename Derived::Scalar;
  const bool vector = m.rows() == 1 || m.cols() == 1;
  LOOM_USER_CHECK(Derived::IsRowMajor || vector, "loom.eigen.E701")
      << "an Eigen matrix of " << m.rows() << "x" << m.cols()
      << " is column-major, but loom tensors are row-major: use Eigen::Matrix<T, Eigen::Dynamic, "
      << "Eigen::Dynamic, Eigen::RowMajor> (or pass the transpose's row-major copy)";
  std::vector<int64_t> shape = vector ? std::vector<int64_t>{static_cast<int64_t>(m.size())}
                                      : std::vector<int64_t>{m.rows(), m.cols()};
  return BufferView(const_cast<T*>(m.data()), ir::dtype_v<T>, shape);
}
}  // namespace detail

/// Eigen::Matrix / Array (row-major, or vectors).
template <class T>
struct buffer_view_traits<T, std::enable_if_t<std::is_base_of_v<Eigen::PlainObjectBase<T>, T>>> {
  static BufferView view(const T& m) { return detail::eigen_dense_view(m); }
};

/// Eigen::Map of a row-major matrix or a vector, with no stride of its own.
template <class P, int Options, class Stride>
struct buffer_view_traits<Eigen::Map<P, Options, Stride>> {
  static BufferView view(const Eigen::Map<P, Options, Stride>& m) {
    using T = std::remove_const_t<typename P::Scalar>;
    const bool vector = m.rows() == 1 || m.cols() == 1;
    LOOM_USER_CHECK(P::IsRowMajor || vector, "loom.eigen.E701")
        << "an Eigen map of " << m.rows() << "x" << m.cols()
        << " is column-major, but loom tensors are row-major: map a row-major matrix type";
    LOOM_USER_CHECK(vector || m.outerStride() == m.cols(), "loom.eigen.E702")
        << "an Eigen map with outer stride " << m.outerStride() << " for " << m.cols()
        << " columns is not dense; loom kernels need dense rows";
    std::vector<int64_t> shape = vector ? std::vector<int64_t>{static_cast<int64_t>(m.size())}
                                        : std::vector<int64_t>{m.rows(), m.cols()};
    return BufferView(const_cast<T*>(m.data()), ir::dtype_v<T>, shape);
  }
};

#ifdef LOOM_EIGEN_HAS_TENSOR
/// Row-major Eigen::Tensor and TensorMap.
template <class T, int R, int Options, class Index>
struct buffer_view_traits<Eigen::Tensor<T, R, Options, Index>> {
  static BufferView view(const Eigen::Tensor<T, R, Options, Index>& t) {
    LOOM_USER_CHECK((Options & Eigen::RowMajor) || R <= 1, "loom.eigen.E701")
        << "a column-major Eigen::Tensor of rank " << R
        << "; loom tensors are row-major: use Eigen::Tensor<T, R, Eigen::RowMajor>";
    std::vector<int64_t> shape(t.dimensions().begin(), t.dimensions().end());
    return BufferView(const_cast<T*>(t.data()), ir::dtype_v<T>, shape);
  }
};
template <class P, int Options, template <class> class MakePointer>
struct buffer_view_traits<Eigen::TensorMap<P, Options, MakePointer>> {
  static BufferView view(const Eigen::TensorMap<P, Options, MakePointer>& t) {
    using T = std::remove_const_t<typename P::Scalar>;
    LOOM_USER_CHECK((P::Layout == Eigen::RowMajor) || P::NumIndices <= 1, "loom.eigen.E701")
        << "a column-major Eigen::TensorMap; loom tensors are row-major";
    std::vector<int64_t> shape(t.dimensions().begin(), t.dimensions().end());
    return BufferView(const_cast<T*>(t.data()), ir::dtype_v<T>, shape);
  }
};
#endif

LOOM_END_NAMESPACE

#endif  // LOOM_EIGEN_HPP
