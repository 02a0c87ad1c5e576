/// \file
/// A tensor that owns its elements on the host (layer runtime/), and its `.npy` files: what a
/// network's caller reads inputs from and writes outputs to (loomc, the benchmarks, tests).
///
/// `.npy` is numpy's format (version 1.0 to 3.0 headers; little-endian, C order): float32,
/// float64, int32 and int64 arrays. Anything else (Fortran order, big-endian, other types, a
/// truncated file) is refused with loom::user_error `[loom.runtime.E1201]` naming the file and
/// what is wrong.
#ifndef LOOM_RUNTIME_HOST_TENSOR_HPP
#define LOOM_RUNTIME_HOST_TENSOR_HPP

#include "loom/config.hpp"
#include "loom/ir/dtype.hpp"
#include "loom/runtime/buffer.hpp"

#include <cstdint>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE

/// Dense row-major elements of one type and shape, owned, on a cache line.
struct HostTensor {
  std::string name;
  ir::DType dtype = ir::DType::f32();
  std::vector<int64_t> shape;
  aligned_vector<unsigned char> bytes;

  HostTensor() = default;
  /// Zero-filled.
  HostTensor(std::string n, ir::DType t, std::vector<int64_t> s);
  int64_t num_elements() const;
  BufferView view() { return BufferView(bytes.data(), dtype, shape); }
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

/// Reads a `.npy` file (see the top of this file).
HostTensor read_npy(const std::string& path);
/// Writes `t` as a version 1.0 `.npy` file; throws `[loom.runtime.E1201]` when it cannot.
void write_npy(const std::string& path, const HostTensor& t);

LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/runtime/impl/host_tensor.ipp"
#endif

#endif  // LOOM_RUNTIME_HOST_TENSOR_HPP
