/// \file
/// `BufferView`: a non-owning view of a dense row-major tensor (pointer, element type, shape),
/// the checked way to pass data to a kernel (layer runtime/).
#ifndef LOOM_RUNTIME_BUFFER_HPP
#define LOOM_RUNTIME_BUFFER_HPP

#include "loom/error.hpp"
#include "loom/ir/dtype.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

LOOM_BEGIN_NAMESPACE

/// A dense row-major tensor owned elsewhere. A view made from a bare pointer has no shape
/// (`has_shape() == false`): kernels then trust the caller.
struct BufferView {
  void* data = nullptr;
  ir::DType dtype;
  std::vector<int64_t> shape;
  bool shape_known = false;

  BufferView() = default;
  BufferView(void* d, ir::DType t, std::vector<int64_t> s)
      : data(d), dtype(t), shape(std::move(s)), shape_known(true) {}
  template <class T>
  BufferView(T* p, std::vector<int64_t> s)  // NOLINT: a typed pointer and a shape
      : BufferView(const_cast<std::remove_const_t<T>*>(p), ir::dtype_v<std::remove_const_t<T>>,
                   std::move(s)) {}
  bool has_shape() const { return shape_known; }
  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

/// How a user type becomes a BufferView; specialised for Eigen types in loom/eigen.hpp.
template <class T, class Enable = void>
struct buffer_view_traits;

/// Raw typed pointers: type-checked, shape unknown.
template <class T>
struct buffer_view_traits<T*, std::enable_if_t<std::is_arithmetic_v<std::remove_const_t<T>>>> {
  static BufferView view(T* p) {
    BufferView v;
    v.data = const_cast<std::remove_const_t<T>*>(p);
    v.dtype = ir::dtype_v<std::remove_const_t<T>>;
    return v;
  }
};
/// Untyped pointers: unchecked.
template <>
struct buffer_view_traits<void*> {
  static BufferView view(void* p) {
    BufferView v;
    v.data = p;
    v.dtype.lanes = 0;  // marks "type unknown"
    return v;
  }
};
template <>
struct buffer_view_traits<BufferView> {
  static const BufferView& view(const BufferView& b) { return b; }
};

/// The BufferView of anything that has buffer_view_traits.
template <class T>
BufferView as_buffer_view(const T& x) {
  return buffer_view_traits<std::remove_cvref_t<T>>::view(x);
}
template <class T>
BufferView as_buffer_view(T* x) {
  return buffer_view_traits<T*>::view(x);
}

LOOM_END_NAMESPACE

#endif  // LOOM_RUNTIME_BUFFER_HPP
