// Part of the feature extractor (loom/cost/impl/features.ipp includes it after
// features_access.ipp): the annotation features (group 4). The vectorized, unrolled and parallel
// loops around a store, and where the innermost of each sits in the stored buffer's
// dimensions or its reduction.
#include <algorithm>
#include <bit>

LOOM_BEGIN_NAMESPACE
namespace cost {
namespace detail {

inline int extractor::alloc_depth(const ir::BufferNode* b) const {
  for (auto it = allocations_.rbegin(); it != allocations_.rend(); ++it)
    if (it->buffer == b) return it->depth;
  return 0;
}

// Dimensions of the stored buffer (bits) that loop `depth` moves; a term that spans more than
// its dimension (a fused loop) moves the next dimension out too.
inline uint32_t extractor::write_dims(int depth) const {
  const group& w = groups_[0];
  uint32_t dims = 0;
  for (int i = w.index_begin; i < w.index_end; ++i)
    for (int t = indices_[i].term_begin; t < indices_[i].term_end; ++t) {
      const term& x = terms_[t];
      if (!(x.mask & depth_bit(depth))) continue;
      dims |= uint32_t{1} << std::min(x.dim, 31);
      if (x.dim > 0 && x.span >= shape_of(w, x.dim)) dims |= uint32_t{1} << std::min(x.dim - 1, 31);
    }
  return dims;
}

inline LoopPosition extractor::position_of(int depth, const ir::BufferNode* stored) const {
  const group& w = groups_[0];
  if (uint32_t dims = write_dims(depth)) {
    if (std::popcount(dims) > 1) return LoopPosition::Mixed;
    const int d = std::countr_zero(dims);
    if (d == w.ndim - 1) return LoopPosition::InnerSpatial;
    return d == 0 ? LoopPosition::OuterSpatial : LoopPosition::MiddleSpatial;
  }
  // A reduction loop: the store updates its buffer, the loop lies inside the buffer's
  // allocation (outside it, each iteration has a fresh buffer) and moves some read.
  uint64_t reads = 0;
  for (size_t g = 1; g < groups_.size(); ++g) reads |= groups_[g].mask;
  const int from = alloc_depth(stored);
  auto is_reduce = [&](int j) {
    return w.type == access_type::read_write && j >= from && !(w.mask & depth_bit(j)) &&
           (reads & depth_bit(j));
  };
  if (!is_reduce(depth)) return LoopPosition::OuterSpatial;
  int outer = depth, inner = depth;
  for (int j = 0; j < static_cast<int>(loops_.size()); ++j)
    if (is_reduce(j)) {
      outer = std::min(outer, j);
      inner = std::max(inner, j);
    }
  if (depth == inner) return LoopPosition::InnerReduce;
  return depth == outer ? LoopPosition::OuterReduce : LoopPosition::MiddleReduce;
}

inline void extractor::annotation_features(row& r, const ir::BufferNode* stored) {
  auto fill = [&](const std::vector<int>& stack, int base) {
    LoopPosition pos = LoopPosition::None;
    if (!stack.empty()) {
      double prod = 1;
      for (int d : stack) prod *= static_cast<double>(loops_[d].extent);
      r.raw[base] = static_cast<double>(stack.size());
      r.raw[base + 1] = prod;
      r.raw[base + 2] = static_cast<double>(loops_[stack.back()].extent);
      pos = position_of(stack.back(), stored);
    }
    r.raw[base + 3 + static_cast<int>(pos)] = 1;
  };
  fill(vec_loops_, kFeatureVecNum);
  fill(unroll_loops_, kFeatureUnrollNum);
  fill(parallel_loops_, kFeatureParallelNum);
}

}  // namespace detail
}  // namespace cost
LOOM_END_NAMESPACE
