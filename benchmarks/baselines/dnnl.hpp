/// \file
/// oneDNN 2.x fp32 baselines, every primitive created once outside the timed loop:
/// DnnlMatmul (GEMM), DnnlBatchMatmul (a batch of GEMMs in one primitive), DnnlConv2d (direct
/// convolution, plain or blocked layouts, optional fused bias + ReLU), DnnlDepthwiseConv2d (one
/// group per channel, plain or blocked) and DnnlSoftmax (row softmax).
///
/// DnnlMatmul layouts:
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

#include "baselines/common.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

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
  /// `b` is read at construction only for Prepacked; RowMajor reads it on every call. With
  /// `batch` > 0, A, B and C get a leading batch dimension (one primitive for the whole batch).
  DnnlMatmul(int64_t m, int64_t n, int64_t k, const float* b, DnnlBLayout layout, int threads,
             int64_t batch = 0)
      : threads_(threads), layout_(layout), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl_set_threads(threads_);
    auto plain = [&](int64_t rows, int64_t cols) {
      return batch > 0 ? dnnl::memory::desc({batch, rows, cols}, dt::f32, tag::abc)
                       : dnnl::memory::desc({rows, cols}, dt::f32, tag::ab);
    };
    const dnnl::memory::desc a_md = plain(m, k);
    const dnnl::memory::desc b_user_md = plain(k, n);
    const dnnl::memory::desc b_md = layout == DnnlBLayout::Prepacked
                                        ? dnnl::memory::desc(b_user_md.dims(), dt::f32, tag::any)
                                        : b_user_md;
    const dnnl::memory::desc c_md = plain(m, n);
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

/// Which layouts DnnlConv2d computes in.
enum class DnnlConvLayout {
  Nchw,     ///< src/dst NCHW, weights OIHW: oneDNN on user data as it comes
  Blocked,  ///< format_tag::any everywhere: oneDNN's preferred blocked layouts (nChw8c/16c, ...)
};

/// oneDNN's tag spelling of a memory descriptor's layout: dims a, b, c, ... outermost first,
/// upper case where blocked, then the inner blocks ("aBcd8b" is nChw8c, "Abcde8a" is Goihw8g).
inline std::string dnnl_format_tag(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) return "non-blocked";
  const auto& blk = d.format_desc.blocking;
  std::vector<int> order(std::size_t(d.ndims));
  for (int i = 0; i < d.ndims; ++i) order[std::size_t(i)] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int x, int y) { return blk.strides[x] > blk.strides[y]; });
  std::string s;
  for (int i : order) {
    bool blocked = false;
    for (int j = 0; j < blk.inner_nblks; ++j) blocked |= blk.inner_idxs[j] == i;
    s += char((blocked ? 'A' : 'a') + i);
  }
  for (int j = 0; j < blk.inner_nblks; ++j)
    s += std::to_string(blk.inner_blks[j]) + char('a' + blk.inner_idxs[j]);
  return s;
}

// What DnnlConv2d and DnnlDepthwiseConv2d share: one forward-inference direct convolution
// (stride 1) computed on owned copies of its inputs. Nchw computes on the plain layouts; Blocked
// lets the primitive pick every layout (format_tag::any) and reorders src and weights once at
// construction, the output staying in the chosen layout until read_output() converts it
// (untimed).
class DnnlConvPrimitive {
 public:
  struct Operands {
    dnnl::memory::dims src_dims, wei_dims, dst_dims;
    dnnl::memory::format_tag wei_tag;  // the caller's weight layout
    int64_t pad = 0;
    const float* src = nullptr;
    const float* wei = nullptr;
    const float* bias = nullptr;  // with bias_relu: bias [K], then ReLU as a post-op
    bool bias_relu = false;
  };

  DnnlConvPrimitive(const Operands& o, DnnlConvLayout layout, int threads)
      : threads_(threads), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl_set_threads(threads_);
    const dnnl::memory::desc src_user(o.src_dims, dt::f32, tag::nchw);
    const dnnl::memory::desc wei_user(o.wei_dims, dt::f32, o.wei_tag);
    const dnnl::memory::desc bias_md({o.dst_dims[1]}, dt::f32, tag::x);
    dst_user_md_ = dnnl::memory::desc(o.dst_dims, dt::f32, tag::nchw);
    const bool plain = layout == DnnlConvLayout::Nchw;
    const dnnl::memory::desc src_md =
        plain ? src_user : dnnl::memory::desc(o.src_dims, dt::f32, tag::any);
    const dnnl::memory::desc wei_md =
        plain ? wei_user : dnnl::memory::desc(o.wei_dims, dt::f32, tag::any);
    const dnnl::memory::desc dst_md =
        plain ? dst_user_md_ : dnnl::memory::desc(o.dst_dims, dt::f32, tag::any);
    const dnnl::memory::dims strides{1, 1}, padding{o.pad, o.pad};
    const auto prop = dnnl::prop_kind::forward_inference;
    const auto algo = dnnl::algorithm::convolution_direct;
    dnnl::primitive_attr attr;
    if (o.bias_relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    const auto desc = o.bias_relu
                          ? dnnl::convolution_forward::desc(prop, algo, src_md, wei_md, bias_md,
                                                            dst_md, strides, padding, padding)
                          : dnnl::convolution_forward::desc(prop, algo, src_md, wei_md, dst_md,
                                                            strides, padding, padding);
    pd_ = dnnl::convolution_forward::primitive_desc(desc, attr, engine_);
    prim_ = dnnl::convolution_forward(pd_);

    // Owned copies in the primitive's layouts (a plain copy for Nchw: inputs never change).
    src_ = dnnl::memory(pd_.src_desc(), engine_);
    wei_ = dnnl::memory(pd_.weights_desc(), engine_);
    dst_ = dnnl::memory(pd_.dst_desc(), engine_);
    dnnl::memory src_in(src_user, engine_, const_cast<float*>(o.src));
    dnnl::memory wei_in(wei_user, engine_, const_cast<float*>(o.wei));
    dnnl::reorder(src_in, src_).execute(stream_, src_in, src_);
    dnnl::reorder(wei_in, wei_).execute(stream_, wei_in, wei_);
    args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}};
    if (o.bias_relu) {
      bias_ = dnnl::memory(pd_.bias_desc(), engine_);
      dnnl::memory bias_in(bias_md, engine_, const_cast<float*>(o.bias));
      dnnl::reorder(bias_in, bias_).execute(stream_, bias_in, bias_);
      args_.insert({DNNL_ARG_BIAS, bias_});
    }
    stream_.wait();
  }

  /// One convolution on the owned input copies.
  void operator()() {
    dnnl_set_threads(threads_);
    prim_.execute(stream_, args_);
    stream_.wait();
  }

  /// Writes the last output to `dst` in NCHW (untimed; for the correctness check).
  void read_output(float* dst) {
    dnnl::memory out(dst_user_md_, engine_, dst);
    dnnl::reorder(dst_, out).execute(stream_, dst_, out);
    stream_.wait();
  }

  /// The implementation oneDNN chose, e.g. "jit:avx2" or "gemm:jit".
  std::string impl_name() const { return pd_.impl_info_str(); }

 protected:
  const dnnl::convolution_forward::primitive_desc& pd() const { return pd_; }

 private:
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::convolution_forward::primitive_desc pd_;
  dnnl::convolution_forward prim_;
  dnnl::memory::desc dst_user_md_;
  dnnl::memory src_, wei_, bias_, dst_;
  std::unordered_map<int, dnnl::memory> args_;
};

/// One fp32 forward-inference convolution bound to a shape and thread count. Construction creates
/// the primitive and, for Blocked, reorders src and weights once into the chosen layouts: in a
/// network the previous layer already produces the blocked activation, and weights are constant.
/// The output stays in the primitive's layout; read_output() converts it to NCHW (untimed).
class DnnlConv2d : public DnnlConvPrimitive {
 public:
  DnnlConv2d(const ConvShape& p, const float* src, const float* wei, const float* bias,
             bool bias_relu, DnnlConvLayout layout, int threads)
      : DnnlConvPrimitive({.src_dims = {p.n, p.c, p.h, p.w},
                           .wei_dims = {p.k, p.c, p.r, p.s},
                           .dst_dims = {p.n, p.k, p.oh(), p.ow()},
                           .wei_tag = dnnl::memory::format_tag::oihw,
                           .pad = p.pad,
                           .src = src,
                           .wei = wei,
                           .bias = bias,
                           .bias_relu = bias_relu},
                          layout, threads) {}

  /// The layouts oneDNN chose for src and weights, e.g. "src aBcd8b wei ABcd8b8a".
  std::string formats() const {
    return "src " + dnnl_format_tag(pd().src_desc()) + " wei " +
           dnnl_format_tag(pd().weights_desc());
  }
};

/// A batch of fp32 matmuls C[b] = A[b] * B[b] as one matmul primitive with a leading batch
/// dimension: A [batch, M, K], B [batch, K, N], C [batch, M, N], all plain and densely packed
/// (format_tag::abc), B read in the caller's layout on every call.
class DnnlBatchMatmul : public DnnlMatmul {
 public:
  DnnlBatchMatmul(int64_t batch, int64_t m, int64_t n, int64_t k, int threads)
      : DnnlMatmul(m, n, k, nullptr, DnnlBLayout::RowMajor, threads, batch) {}
};

/// One fp32 depthwise convolution (channel multiplier 1, stride 1) as a grouped convolution with
/// one group per channel: `p.k` must equal `p.c`, weights are [C, 1, R, S] (oneDNN's goihw with
/// G = C, O = I = 1). As DnnlConv2d: Nchw computes on plain layouts; Blocked lets the primitive
/// pick every layout (format_tag::any) and reorders src and weights once at construction, the
/// output staying in the chosen layout until read_output() converts it (untimed).
class DnnlDepthwiseConv2d : public DnnlConvPrimitive {
 public:
  // [C, 1, R, S] row-major has the bytes of goihw [C, 1, 1, R, S].
  DnnlDepthwiseConv2d(const ConvShape& p, const float* src, const float* wei, DnnlConvLayout layout,
                      int threads)
      : DnnlConvPrimitive({.src_dims = {p.n, p.c, p.h, p.w},
                           .wei_dims = {p.c, 1, 1, p.r, p.s},
                           .dst_dims = {p.n, p.c, p.oh(), p.ow()},
                           .wei_tag = dnnl::memory::format_tag::goihw,
                           .pad = p.pad,
                           .src = src,
                           .wei = wei},
                          layout, threads) {}

  /// The layouts oneDNN chose, e.g. "src aBcd8b wei Abcde8a dst aBcd8b" (nChw8c, Goihw8g).
  std::string formats() const {
    return "src " + dnnl_format_tag(pd().src_desc()) + " wei " +
           dnnl_format_tag(pd().weights_desc()) + " dst " + dnnl_format_tag(pd().dst_desc());
  }
};

/// Row-wise softmax (axis 1 of a plain rows x cols matrix) with oneDNN's softmax primitive.
class DnnlSoftmax {
 public:
  DnnlSoftmax(int64_t rows, int64_t cols, int threads)
      : threads_(threads), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl_set_threads(threads_);
    const dnnl::memory::desc md({rows, cols}, dt::f32, tag::ab);
    pd_ = dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 1), engine_);
    prim_ = dnnl::softmax_forward(pd_);
    src_ = dnnl::memory(md, engine_, DNNL_MEMORY_NONE);
    dst_ = dnnl::memory(md, engine_, DNNL_MEMORY_NONE);
    args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};
  }

  /// y = softmax(x) per row.
  void operator()(const float* x, float* y) {
    dnnl_set_threads(threads_);
    src_.set_data_handle(const_cast<float*>(x));
    dst_.set_data_handle(y);
    prim_.execute(stream_, args_);
    stream_.wait();
  }

  std::string impl_name() const { return pd_.impl_info_str(); }

 private:
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::softmax_forward::primitive_desc pd_;
  dnnl::softmax_forward prim_;
  dnnl::memory src_, dst_;
  std::unordered_map<int, dnnl::memory> args_;
};

}  // namespace loom_bench

#endif  // LOOM_BENCH_HAVE_DNNL
#endif  // LOOM_BENCH_BASELINES_DNNL_HPP
