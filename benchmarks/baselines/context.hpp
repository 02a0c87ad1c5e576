// Library versions and threading runtimes in every benchmark's header, so that a result says
// what it was measured against.
#ifndef LOOM_BENCH_CONTEXT_HPP
#define LOOM_BENCH_CONTEXT_HPP

#include "baselines/dnnl.hpp"
#include "baselines/eigen.hpp"
#include "baselines/openblas.hpp"

#include <benchmark/benchmark.h>

namespace loom_bench {

/// Adds "eigen", "openblas" and "onednn" context lines for the libraries this build has.
inline void add_library_context() {
#if defined(LOOM_BENCH_HAVE_EIGEN)
  benchmark::AddCustomContext("eigen", eigen_info());
#endif
#if defined(LOOM_BENCH_HAVE_OPENBLAS)
  benchmark::AddCustomContext("openblas", openblas_info());
#endif
#if defined(LOOM_BENCH_HAVE_DNNL)
  benchmark::AddCustomContext("onednn", dnnl_info());
#endif
}

}  // namespace loom_bench

#endif
