/// \file
/// `BufferView`: a non-owning view of a dense row-major tensor (pointer, element type, shape),
/// the checked way to pass data to a kernel (layer runtime/); and `aligned_vector`, storage that
/// kernels read at the speed they were tuned at.
#ifndef LOOM_RUNTIME_BUFFER_HPP
#define LOOM_RUNTIME_BUFFER_HPP

#include "loom/error.hpp"
#include "loom/ir/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE

/// Where a kernel's buffers should start: one cache line, one AVX-512 register. The CPU tuner
/// times programs on page-aligned inputs and outputs on this alignment, and a tuned program may
/// read an input in place with whole-vector loads; from a buffer 16 bytes off a line (what glibc's
/// malloc returns for blocks of 128 KiB or more, so any large std::vector) every such load spans
/// two lines. On a Zen 4 that cost a tuned batch_matmul program 18-32 % and a depthwise conv 4-14 %
/// (GEMM 1024^3, which packs B, nothing); oneDNN and Eigen ask for the same alignment.
inline constexpr std::size_t kernel_buffer_alignment = 64;

/// std::allocator with blocks aligned to kernel_buffer_alignment (aligned operator new).
template <class T>
struct aligned_allocator {
  using value_type = T;
  aligned_allocator() noexcept = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U>&) noexcept {}  // NOLINT: rebinding
  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(
        ::operator new(n * sizeof(T), std::align_val_t{kernel_buffer_alignment}));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete(p, std::align_val_t{kernel_buffer_alignment});
  }
  template <class U>
  bool operator==(const aligned_allocator<U>&) const noexcept {
    return true;
  }
};

/// A std::vector whose data() starts on a cache line: the storage to give kernels.
template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

/// A dense row-major tensor owned elsewhere. A view made from a bare pointer has no shape
/// (`has_shape() == false`): kernels then trust the caller.
struct BufferView {
  void* data = nullptr;
  ir::DType dtype;
  std::vector<int64_t> shape;
  bool shape_known = false;
  /// The elements the storage holds, when known without a shape (std::vector, std::span); -1
  /// when not known (a bare pointer).
  int64_t size = -1;

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

/// Raw typed pointers (numbers, float16, bfloat16): type-checked, shape unknown.
template <class T>
struct buffer_view_traits<T*, std::enable_if_t<std::is_arithmetic_v<std::remove_const_t<T>> ||
                                               is_half_v<std::remove_const_t<T>>>> {
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
/// std::vector (aligned_vector included) and std::span of loom's element types: type- and
/// size-checked (the size must be the argument's element count), shape unknown.
template <class T, class Alloc>
struct buffer_view_traits<
    std::vector<T, Alloc>,
    std::enable_if_t<(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || is_half_v<T>>> {
  static BufferView view(const std::vector<T, Alloc>& x) {
    BufferView v = buffer_view_traits<const T*>::view(x.data());
    v.size = static_cast<int64_t>(x.size());
    return v;
  }
};
template <class T, std::size_t Extent>
struct buffer_view_traits<std::span<T, Extent>,
                          std::enable_if_t<std::is_arithmetic_v<std::remove_const_t<T>> ||
                                           is_half_v<std::remove_const_t<T>>>> {
  static BufferView view(const std::span<T, Extent>& x) {
    BufferView v = buffer_view_traits<T*>::view(x.data());
    v.size = static_cast<int64_t>(x.size());
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

/// The first pair (output, other) of a kernel's arguments whose byte ranges overlap, where
/// argument i spans [begin[i], begin[i] + bytes[i]) and `written[i]` says whether the kernel
/// writes it; {-1, -1} when none does. Generated code assumes that an output shares no byte
/// with any other argument (inputs may share), on the CPU and on the GPU alike. A few
/// comparisons per output: nothing next to a kernel's run.
inline std::pair<int, int> overlapping_output(std::span<const std::uintptr_t> begin,
                                              std::span<const std::size_t> bytes,
                                              std::span<const bool> written) {
  const size_t n = begin.size();
  for (size_t i = 0; i < n; ++i) {
    if (!written[i]) continue;
    for (size_t j = 0; j < n; ++j)
      if (j != i && begin[i] < begin[j] + bytes[j] && begin[j] < begin[i] + bytes[i])
        return {static_cast<int>(i), static_cast<int>(j)};
  }
  return {-1, -1};
}

LOOM_END_NAMESPACE

#endif  // LOOM_RUNTIME_BUFFER_HPP
