// Part of the feature extractor (loom/cost/impl/features.ipp includes it after
// features_expr.ipp): the accesses of one store. Its reads and write grouped by buffer, the
// region each touches at every loop level, strides and reuse (group 2), and the arithmetic
// intensity curve (group 3).
//
// Differences from Ansor's feature.cc beyond those the header lists, each a correction:
//  - ComputeStride's reduce ratio multiplies the extents of the loops it skips (Ansor multiplies
//    the innermost loop's extent once per skipped loop);
//  - unique lines use the region of the buffer itself (Ansor reuses the region of whichever buffer
//    its map visited last) and count whole contiguous runs;
//  - unique bytes come from the current store's region at the outermost loop (Ansor takes the
//    first region any store recorded there);
//  - the touched region is clamped to the buffer's shape, and a flat index is split back into
//    dimensions before bounding (bounding the flat index would count the gaps between rows).
#include <algorithm>
#include <cmath>

LOOM_BEGIN_NAMESPACE
namespace cost {
namespace detail {

inline extractor::group* extractor::find_group(const ir::BufferNode* b) {
  for (group& g : groups_)
    if (g.buffer == b) return &g;
  return nullptr;
}

inline void extractor::add_index(group& g, const ir::Expr& index) {
  index_rec rec;
  rec.term_begin = static_cast<int>(terms_.size());
  int64_t constant = 0;
  linearize(index, 1, constant);
  rec.term_end = static_cast<int>(terms_.size());
  rec.const_begin = static_cast<int>(consts_.size());
  const int64_t* stride = dim_stride_.data() + g.dim_begin;
  // A term goes to the outermost dimension whose stride divides its coefficient: lowering
  // writes a flat index as sum(index_d * stride_d), and tiling keeps the pieces of index_d
  // multiples of stride_d.
  for (int t = rec.term_begin; t < rec.term_end; ++t) {
    term& x = terms_[t];
    int d = 0;
    while (d + 1 < g.ndim && x.coef % stride[d] != 0) ++d;
    x.dim = d;
    x.coef /= stride[d];
    g.mask |= x.mask;
  }
  for (int d = 0; d < g.ndim; ++d) {
    int64_t q = constant / stride[d];  // truncating: a small negative offset stays in its dim
    consts_.push_back(q);
    constant -= q * stride[d];
  }
  indices_.push_back(rec);
}

// Groups the store's accesses by buffer (the stored buffer first), as Ansor's
// BufferAccessExtractor: reads of the stored buffer make it read-write and add no index.
inline void extractor::build_groups(const ir::Store* op) {
  groups_.clear();
  indices_.clear();
  terms_.clear();
  consts_.clear();
  dim_stride_.clear();
  region0_.clear();
  auto new_group = [&](const ir::BufferNode* b, access_type t) {
    group g{};
    g.buffer = b;
    g.type = t;
    g.ndim = std::max<int>(1, static_cast<int>(b->shape.size()));
    g.dim_begin = static_cast<int>(dim_stride_.size());
    dim_stride_.resize(dim_stride_.size() + g.ndim);
    int64_t s = 1;
    for (int d = g.ndim - 1; d >= 0; --d) {
      dim_stride_[g.dim_begin + d] = s;
      if (static_cast<size_t>(d) < b->shape.size()) s *= std::max<int64_t>(b->shape[d], 1);
    }
    groups_.push_back(g);
  };
  new_group(op->buffer.get(), access_type::write);
  for (auto& [b, idx] : loads_) {
    group* g = find_group(b);
    if (!g)
      new_group(b, access_type::read);
    else if (g->type == access_type::write)
      g->type = access_type::read_write;
  }
  for (group& g : groups_) {
    g.index_begin = static_cast<int>(indices_.size());
    if (g.buffer == op->buffer.get()) {
      add_index(g, op->index);
    } else {
      for (auto& [b, idx] : loads_)
        if (b == g.buffer) add_index(g, *idx);
    }
    g.index_end = static_cast<int>(indices_.size());
  }
}

inline int64_t extractor::shape_of(const group& g, int d) {
  return static_cast<size_t>(d) < g.buffer->shape.size() ? std::max<int64_t>(g.buffer->shape[d], 1)
                                                         : 1;
}

// Elements of the box that `g`'s indices touch with the current lo_/hi_; with `keep`, its
// per-dimension extents go to region0_ at g.region0_begin.
inline double extractor::touched(group& g, bool keep) {
  // Runs for every buffer at every loop level of every store: raw arrays, sized once.
  const auto nd = static_cast<size_t>(g.ndim);
  if (dim_lo_.size() < nd) {
    for (auto* v : {&dim_lo_, &dim_hi_, &lo_acc_, &hi_acc_}) v->resize(nd);
    unbounded_.resize(nd);
  }
  int64_t *dim_lo = dim_lo_.data(), *dim_hi = dim_hi_.data();
  int64_t *lo_acc = lo_acc_.data(), *hi_acc = hi_acc_.data();
  char* unbounded = unbounded_.data();
  for (size_t d = 0; d < nd; ++d) {
    dim_lo[d] = Interval::pos_inf;
    dim_hi[d] = Interval::neg_inf;
    unbounded[d] = 0;
  }
  for (int i = g.index_begin; i < g.index_end; ++i) {
    const index_rec& rec = indices_[i];
    const int64_t* consts = consts_.data() + rec.const_begin;
    for (size_t d = 0; d < nd; ++d) lo_acc[d] = hi_acc[d] = consts[d];
    for (int t = rec.term_begin; t < rec.term_end; ++t) {
      term& x = terms_[t];
      Interval r = x.depth >= 0 ? Interval{lo_[x.depth], hi_[x.depth]} : eval(*x.atom);
      r = iv_scale(r, x.coef);
      if (keep)
        x.span = r.bounded() ? clamp128(static_cast<__int128>(r.max) - r.min) : Interval::pos_inf;
      if (!r.bounded()) {
        unbounded[x.dim] = 1;
        continue;
      }
      lo_acc[x.dim] = clamp128(static_cast<__int128>(lo_acc[x.dim]) + r.min);
      hi_acc[x.dim] = clamp128(static_cast<__int128>(hi_acc[x.dim]) + r.max);
    }
    for (size_t d = 0; d < nd; ++d) {
      dim_lo[d] = std::min(dim_lo[d], lo_acc[d]);
      dim_hi[d] = std::max(dim_hi[d], hi_acc[d]);
    }
  }
  if (keep) {
    g.region0_begin = static_cast<int>(region0_.size());
    region0_.resize(region0_.size() + g.ndim);
  }
  // Innermost dimension first: a span longer than its dimension (a fused loop walking the
  // flat index) carries whole rows into the next dimension out.
  double elements = 1;
  __int128 carry = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t shape = shape_of(g, d);
    int64_t ext = shape;
    if (unbounded_[d] || g.index_end == g.index_begin) {
      carry = 0;
    } else {
      __int128 span = static_cast<__int128>(dim_hi_[d]) - dim_lo_[d] + carry;
      if (span < 0) span = 0;
      if (span + 1 < shape)
        carry = 0;
      else if (span <= Interval::pos_inf)  // 64-bit division where it fits: no __divti3
        carry = static_cast<int64_t>(span) / shape;
      else
        carry = span / shape;
      ext = static_cast<int64_t>(std::min<__int128>(span + 1, shape));
    }
    elements *= static_cast<double>(ext);
    if (keep) region0_[g.region0_begin + d] = static_cast<double>(ext);
  }
  return elements;
}

// Groups 2-3 inputs: the region of every buffer at every loop level, innermost first (loops
// outside the level at their first iteration, the others free), recorded in touches_ for the
// reuse analysis and summed into mem_bytes_; the flops at each level into compute_ops_.
inline void extractor::region_features(double float_ops) {
  const int n = static_cast<int>(loops_.size());
  for (int d = 0; d < n; ++d) hi_[d] = lo_[d] = loops_[d].min;
  compute_ops_.clear();
  mem_bytes_.clear();
  double flops = float_ops;
  for (int i = n - 1; i >= 0; --i) {
    hi_[i] = loops_[i].min + std::max<int64_t>(loops_[i].extent, 1) - 1;
    double bytes = 0;
    for (group& g : groups_) {
      double el = touched(g, i == 0);
      if (i == 0) g.elements0 = el;
      const int eb = g.buffer->dtype.bytes();
      touches_[i].push_back({g.buffer, el, eb});
      bytes += el * eb;
    }
    mem_bytes_.push_back(bytes);
    // The lanes of a vector store are already in the per-instance count.
    if (i != lane_depth_) flops *= static_cast<double>(loops_[i].extent);
    compute_ops_.push_back(flops);
  }
  if (n == 0)
    for (group& g : groups_) g.elements0 = 1;
}

// Smallest non-zero change of `g`'s flat indices when loop `j` steps once, every loop at its
// first iteration (lo_ == hi_ == min on entry); 0 when no index moves with loop j.
inline int64_t extractor::stride_of(const group& g, int j) {
  const uint64_t bit = depth_bit(j);
  if (!(g.mask & bit)) return 0;
  const int64_t first = loops_[j].min, ext = std::max<int64_t>(loops_[j].extent, 1);
  int64_t best = 0;
  for (int i = g.index_begin; i < g.index_end; ++i) {
    const index_rec& rec = indices_[i];
    const int64_t* stride = dim_stride_.data() + g.dim_begin;
    __int128 step = 0, span = 0;
    bool appears = false, unknown = false, nonlinear = false;
    for (int t = rec.term_begin; t < rec.term_end; ++t) {
      const term& x = terms_[t];
      if (!(x.mask & bit)) continue;
      appears = true;
      const __int128 c = static_cast<__int128>(x.coef) * stride[x.dim];
      if (x.depth == j) {
        step += c;
        span += c * (ext - 1);
        continue;
      }
      if (x.depth >= 0) continue;  // another loop sharing the saturated mask bit
      nonlinear = true;
      Interval a0 = eval(*x.atom);
      lo_[j] = hi_[j] = first + 1;
      Interval a1 = eval(*x.atom);
      lo_[j] = hi_[j] = first + ext - 1;
      Interval an = eval(*x.atom);
      lo_[j] = hi_[j] = first;
      if (!a0.is_point() || !a1.is_point() || !an.is_point()) {
        unknown = true;
        continue;
      }
      step += c * (a1.min - a0.min);
      span += c * (an.min - a0.min);
    }
    if (!appears) continue;
    int64_t s;
    if (unknown) {
      s = 2;  // Ansor's fallback when the coefficient cannot be found
    } else {
      __int128 a = step < 0 ? -step : step;
      // A step of 0 from a floordiv-like use: the average step over the loop instead.
      if (a == 0 && nonlinear && ext > 1) a = (span < 0 ? -span : span) / (ext - 1);
      s = clamp128(a);
    }
    if (s != 0) best = best == 0 ? s : std::min(best, s);
  }
  return best;
}

// Ansor's ComputeReuse over the touch records of the enclosing loops.
inline void extractor::reuse_of(const group& g, reuse_type& type, double& dist_iter,
                                double& dist_bytes, double& count) {
  dist_iter = 1;
  dist_bytes = -1;
  for (int i = static_cast<int>(loops_.size()) - 1; i >= 0; --i) {
    const double ext = static_cast<double>(loops_[i].extent);
    const auto& here = touches_[i];
    if (g.mask & depth_bit(i)) {
      dist_iter *= ext;
      dist_bytes = 0;
      for (const touch& t : here) dist_bytes += t.elements * t.bytes;
    } else {
      if (dist_bytes < 0) {
        // Reuse at the innermost loop: one element of each access apart.
        dist_bytes = 0;
        for (const touch& t : here) dist_bytes += t.bytes;
      }
      type = reuse_type::loop_multiple_read;
      count = ext;
      return;
    }
    int same = 0;
    double min_el = 0;
    for (const touch& t : here)
      if (t.buffer == g.buffer) {
        min_el = same == 0 ? t.elements : std::min(min_el, t.elements);
        ++same;
      }
    if (same > 1) {
      dist_bytes = 0;
      for (const touch& t : here) dist_bytes += t.elements * t.bytes;
      type = reuse_type::serial_multiple_read_write;
      dist_iter = ext > 0 ? min_el / ext : 0;
      dist_bytes = ext > 0 ? dist_bytes / ext : 0;
      count = same - 1;
      return;
    }
  }
  type = reuse_type::none;
  dist_iter = dist_bytes = count = 0;
}

// Group 2: per-buffer access features, the top kMaxFeatureBuffers by (lines, bytes).
inline void extractor::buffer_features(row& r) {
  const int n = static_cast<int>(loops_.size());
  for (int d = 0; d < n; ++d) hi_[d] = lo_[d] = loops_[d].min;
  for (group& g : groups_) {
    double* f = g.feature;
    std::fill(f, f + kFeaturesPerBuffer, 0.0);
    const int eb = g.buffer->dtype.bytes();
    f[kBufferAccRead + static_cast<int>(g.type)] = 1;
    const double bytes = outer_prod_ * guard_ * eb;
    double unique_bytes = eb, lines = 1, unique_lines = 1;
    int64_t stride = 0;
    if (n > 0) {
      unique_bytes = g.elements0 * eb;
      double reduce_ratio = 1;
      int i = n - 1;
      for (; i >= 0; --i) {
        stride = stride_of(g, i);
        if (stride != 0) break;
        reduce_ratio *= static_cast<double>(std::max<int64_t>(loops_[i].extent, 1));
      }
      lines = outer_prod_ * guard_ / reduce_ratio *
              std::min(1.0, static_cast<double>(stride) * eb / kCacheLineBytes);
      lines = std::max(lines, 1.0);
      if (i != n - 1) stride = 0;  // the feature is the innermost loop's stride
      // Contiguous runs of the region: its innermost extent, times the next dimension's while
      // the inner one is whole.
      const double* reg = region0_.data() + g.region0_begin;
      double run = reg[g.ndim - 1];
      for (int d = g.ndim - 2; d >= 0 && reg[d + 1] == static_cast<double>(shape_of(g, d + 1)); --d)
        run *= reg[d];
      const double runs = g.elements0 / run;
      unique_lines = std::max(1.0, runs * std::ceil(run * eb / kCacheLineBytes));
    }
    reuse_type rt;
    double dist_iter, dist_bytes, reuse_count;
    reuse_of(g, rt, dist_iter, dist_bytes, reuse_count);
    f[kBufferBytes] = bytes;
    f[kBufferUniqueBytes] = unique_bytes;
    f[kBufferLines] = lines;
    f[kBufferUniqueLines] = unique_lines;
    f[kBufferReuseLoopMultipleRead + static_cast<int>(rt)] = 1;
    f[kBufferReuseDistIter] = dist_iter;
    f[kBufferReuseDistBytes] = dist_bytes;
    f[kBufferReuseCount] = reuse_count;
    // Without reuse, Ansor doubles instead of dividing (its "magic" 2).
    const double div = reuse_count > 0.5 ? 1.0 / reuse_count : 2.0;
    f[kBufferBytesPerReuse] = bytes * div;
    f[kBufferUniqueBytesPerReuse] = unique_bytes * div;
    f[kBufferLinesPerReuse] = lines * div;
    f[kBufferUniqueLinesPerReuse] = unique_lines * div;
    f[kBufferStride] = static_cast<double>(stride);
  }
  order_.resize(groups_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int>(i);
  std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) {
    const double* x = groups_[a].feature;
    const double* y = groups_[b].feature;
    if (x[kBufferLines] != y[kBufferLines]) return x[kBufferLines] > y[kBufferLines];
    return x[kBufferBytes] > y[kBufferBytes];
  });
  const int nb = std::min<int>(kMaxFeatureBuffers, static_cast<int>(order_.size()));
  for (int b = 0; b < nb; ++b)
    std::copy(groups_[order_[b]].feature, groups_[order_[b]].feature + kFeaturesPerBuffer,
              r.raw.begin() + buffer_feature(b, 0));
  restore_ranges();
}

// Group 3: flops/bytes from the innermost loop outwards, linearly interpolated at 10 evenly
// spaced fractions of the store's total flops.
inline void extractor::intensity_curve(row& r, double float_ops) {
  double* out = r.raw.data() + kFeatureIntensityCurve;
  if (float_ops <= 0 || compute_ops_.empty() || compute_ops_.back() <= 0) return;
  const size_t last = compute_ops_.size() - 1;
  size_t pt = 0;
  for (int k = 0; k < kIntensityCurvePoints; ++k) {
    const double target = compute_ops_.back() * (k + 1) / kIntensityCurvePoints;
    while (pt < last && compute_ops_[pt] < target * (1 - 1e-9)) ++pt;
    const double cur = compute_ops_[pt] / mem_bytes_[pt];
    if (pt == 0 || compute_ops_[pt] == compute_ops_[pt - 1]) {
      out[k] = cur;
    } else {
      const double prev = compute_ops_[pt - 1] / mem_bytes_[pt - 1];
      const double slope = (cur - prev) / (compute_ops_[pt] - compute_ops_[pt - 1]);
      out[k] = prev + slope * (target - compute_ops_[pt - 1]);
    }
  }
}

}  // namespace detail
}  // namespace cost
LOOM_END_NAMESPACE
