/// \file
/// Platform detection, version and the user switches of loom. Every loom header includes this
/// first (directly or through another loom header).
#ifndef LOOM_CONFIG_HPP
#define LOOM_CONFIG_HPP

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0
#define LOOM_VERSION_STRING "0.1.0"

#if __cplusplus < 202002L
#error "loom needs C++20: compile with -std=c++20 or link the CMake target loom::loom"
#endif

/// Set by linking `loom::llvm`: the LLVM ORC CPU backend is available.
#ifndef LOOM_WITH_LLVM
#define LOOM_WITH_LLVM 0
#endif
/// Set by linking `loom::cuda`: the NVRTC backend is available.
#ifndef LOOM_WITH_CUDA
#define LOOM_WITH_CUDA 0
#endif
/// Set by linking `loom::eigen`: `loom/eigen.hpp` interop is available.
#ifndef LOOM_WITH_EIGEN
#define LOOM_WITH_EIGEN 0
#endif
/// Set by linking `loom::onnx`: the ONNX importer `loom/onnx.hpp` is available.
#ifndef LOOM_WITH_ONNX
#define LOOM_WITH_ONNX 0
#endif
/// Set by linking `loom::mpi`: tuning across machines, `loom/mpi.hpp`, is available.
#ifndef LOOM_WITH_MPI
#define LOOM_WITH_MPI 0
#endif

/// With LOOM_SEPARATE_COMPILATION the non-template bodies (`impl/*.ipp`) are compiled once in the
/// `loom::compiled` library instead of being inline in every translation unit.
#ifdef LOOM_SEPARATE_COMPILATION
#define LOOM_DECL
#else
#define LOOM_DECL inline
#endif

/// The LLVM backend's non-template bodies. Linking `loom::llvm` compiles them once in a small
/// static library (LOOM_LLVM_COMPILED=1) so that no user translation unit pays for LLVM's
/// headers; without it they are inline like the rest of loom.
#ifndef LOOM_LLVM_COMPILED
#define LOOM_LLVM_COMPILED 0
#endif
#if defined(LOOM_SEPARATE_COMPILATION) || LOOM_LLVM_COMPILED
#define LOOM_LLVM_DECL
#else
#define LOOM_LLVM_DECL inline
#endif

/// Debug-only checks on hot paths, compiled out unless LOOM_ENABLE_ASSERTS is defined.
#ifndef LOOM_ENABLE_ASSERTS
#define LOOM_ENABLE_ASSERTS 0
#endif

#define LOOM_BEGIN_NAMESPACE \
  namespace loom {           \
  inline namespace v0 {
#define LOOM_END_NAMESPACE \
  }                        \
  }

#endif  // LOOM_CONFIG_HPP
