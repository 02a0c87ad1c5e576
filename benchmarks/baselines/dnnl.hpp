/// \file
/// oneDNN 2.x fp32 GEMM baseline: the matmul primitive, created once outside the timed loop.
///  - DnnlBLayout::RowMajor: B in the caller's plain row-major layout (format_tag::ab), as a
///    library call on user data sees it.
///  - DnnlBLayout::Prepacked: B declared with format_tag::any so the primitive picks its preferred
///    blocked layout; B is reordered into it once at construction (constant weights), as an
///    inference runtime would do.
///
/// Threading: Debian's libdnnl2 is built with DNNL_CPU_RUNTIME=OMP and links libgomp (see
/// dnnl_info()). Its thread count is OpenMP's: omp_set_num_threads(n) on the calling thread. The
/// count must already be set when the primitive is *created*, because oneDNN sizes its work split
/// (and keys its primitive cache) by the thread count at creation; DnnlMatmul takes `threads` and
/// sets it both at construction and before every call.
#ifndef LOOM_BENCH_BASELINES_DNNL_HPP
#define LOOM_BENCH_BASELINES_DNNL_HPP

#if defined(LOOM_BENCH_HAVE_DNNL)

#include <cstdint>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

namespace loom_bench {

/// Which layout the oneDNN matmul reads B in.
enum class DnnlBLayout { RowMajor, Prepacked };

/// True where this oneDNN's thread count can be set from here (OpenMP or sequential runtime).
inline bool dnnl_threads_controllable() {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP || DNNL_CPU_RUNTIME == DNNL_RUNTIME_SEQ
  return true;
#else
  return false;
#endif
}

/// Sets the thread count oneDNN primitives created and run on this thread will use.
inline void dnnl_set_threads(int n) {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

/// "oneDNN 2.6.3, CPU runtime OpenMP, ISA ...": version and threading runtime of the loaded
/// library (from dnnl_version(), not from the headers).
inline std::string dnnl_info() {
  const dnnl_version_t* v = dnnl_version();
  std::string runtime;
  switch (v->cpu_runtime) {
    case DNNL_RUNTIME_SEQ: runtime = "sequential"; break;
    case DNNL_RUNTIME_OMP: runtime = "OpenMP"; break;
    case DNNL_RUNTIME_TBB: runtime = "TBB"; break;
    case DNNL_RUNTIME_THREADPOOL: runtime = "threadpool"; break;
    default: runtime = "other(" + std::to_string(v->cpu_runtime) + ")"; break;
  }
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + ", CPU runtime " + runtime;
}

/// One fp32 matmul C[M,N] = A[M,K] * B[K,N] (A and C row-major) bound to fixed shapes and a
/// thread count. Construction does everything that must stay out of the timed loop: primitive
/// creation and, for Prepacked, the one-time reorder of B.
class DnnlMatmul {
 public:
  /// `b` is read at construction only for Prepacked; RowMajor reads it on every call.
  DnnlMatmul(int64_t m, int64_t n, int64_t k, const float* b, DnnlBLayout layout, int threads)
      : threads_(threads),
        layout_(layout),
        engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl_set_threads(threads_);
    const dnnl::memory::desc a_md({m, k}, dt::f32, tag::ab);
    const dnnl::memory::desc b_user_md({k, n}, dt::f32, tag::ab);
    const dnnl::memory::desc b_md =
        layout == DnnlBLayout::Prepacked ? dnnl::memory::desc({k, n}, dt::f32, tag::any) : b_user_md;
    const dnnl::memory::desc c_md({m, n}, dt::f32, tag::ab);
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine_);
    prim_ = dnnl::matmul(pd_);
    a_mem_ = dnnl::memory(a_md, engine_, DNNL_MEMORY_NONE);
    c_mem_ = dnnl::memory(c_md, engine_, DNNL_MEMORY_NONE);
    if (layout == DnnlBLayout::Prepacked) {
      dnnl::memory b_user(b_user_md, engine_, const_cast<float*>(b));
      b_mem_ = dnnl::memory(pd_.weights_desc(), engine_);  // oneDNN-owned, blocked
      dnnl::reorder(b_user, b_mem_).execute(stream_, b_user, b_mem_);
      stream_.wait();
    } else {
      b_mem_ = dnnl::memory(b_user_md, engine_, DNNL_MEMORY_NONE);
    }
    // dnnl::memory is a shared handle: the map sees the set_data_handle calls made per call,
    // so it is built once instead of on every call.
    args_ = {{DNNL_ARG_SRC, a_mem_}, {DNNL_ARG_WEIGHTS, b_mem_}, {DNNL_ARG_DST, c_mem_}};
  }

  /// C = A * B. For Prepacked, `b` is ignored: the packed copy made at construction is used.
  void operator()(const float* a, const float* b, float* c) {
    dnnl_set_threads(threads_);
    a_mem_.set_data_handle(const_cast<float*>(a));
    c_mem_.set_data_handle(c);
    if (layout_ == DnnlBLayout::RowMajor) b_mem_.set_data_handle(const_cast<float*>(b));
    prim_.execute(stream_, args_);
    stream_.wait();
  }

  /// The implementation oneDNN chose, e.g. "brg:avx512_core" or "gemm:jit".
  std::string impl_name() const { return pd_.impl_info_str(); }

 private:
  int threads_;
  DnnlBLayout layout_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  dnnl::memory a_mem_, b_mem_, c_mem_;
  std::unordered_map<int, dnnl::memory> args_;
};

}  // namespace loom_bench

#endif  // LOOM_BENCH_HAVE_DNNL
#endif  // LOOM_BENCH_BASELINES_DNNL_HPP
