// What every loom benchmark generator shares: pinning a dense row-major buffer to one shape, with
// the same numbers as autoscheduler estimates.
#ifndef LOOM_BENCH_HALIDE_GENERATOR_COMMON_H
#define LOOM_BENCH_HALIDE_GENERATOR_COMMON_H

#include <vector>

#include "Halide.h"

namespace loom_halide {

/// Fixes `buf` (an Input or Output buffer) to the dense layout of a row-major array whose extents
/// are `extents`, innermost (Halide dimension 0, the last C index) first: every dimension starts
/// at 0, dimension 0 has stride 1 and each next stride is the product of the extents before it.
/// The same extents become the estimates the autoschedulers plan with. loom compiles its kernels
/// for one shape too, so Halide gets the same knowledge (constant loop bounds and strides).
template <class Buf>
void pin_dense(Buf& buf, const std::vector<int>& extents) {
  int stride = 1;
  for (int d = 0; d < static_cast<int>(extents.size()); ++d) {
    buf.dim(d).set_bounds(0, extents[d]).set_stride(stride).set_estimate(0, extents[d]);
    stride *= extents[d];
  }
}

}  // namespace loom_halide

#endif  // LOOM_BENCH_HALIDE_GENERATOR_COMMON_H
