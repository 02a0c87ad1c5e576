// Part of the feature extractor (loom/cost/impl/features.ipp includes it first): the statement
// visitor, its loop stack and the rows it writes, one per stored buffer. It counts what needs
// only the traversal (the allocation, GPU and outer-scope features) itself and calls the other
// parts at each store.
#include "loom/cost/features.hpp"
#include "loom/detail/int_math.hpp"
#include "loom/ir/simplify.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cost {
namespace detail {

using ir::Interval;

enum class access_type : uint8_t { read = 0, write = 1, read_write = 2 };
enum class reuse_type : uint8_t {
  loop_multiple_read = 0,
  serial_multiple_read_write = 1,
  none = 2
};

// --- interval arithmetic on loop ranges -------------------------------------------------------
// ir::bounds_of works on a hash map of variable ranges; the extractor re-bounds the same index
// terms once per loop level with a different set of loops fixed, so it keeps ranges in arrays
// indexed by loop depth instead and evaluates with these saturating helpers.

inline int64_t clamp128(__int128 v) {
  if (v <= static_cast<__int128>(Interval::neg_inf)) return Interval::neg_inf;
  if (v >= static_cast<__int128>(Interval::pos_inf)) return Interval::pos_inf;
  return static_cast<int64_t>(v);
}
inline Interval iv_add(Interval a, Interval b) {
  if (!a.bounded() || !b.bounded()) return {};
  return {clamp128(static_cast<__int128>(a.min) + b.min),
          clamp128(static_cast<__int128>(a.max) + b.max)};
}
inline Interval iv_scale(Interval a, int64_t c) {
  if (!a.bounded()) return c == 0 ? Interval::point(0) : Interval{};
  __int128 x = static_cast<__int128>(a.min) * c, y = static_cast<__int128>(a.max) * c;
  return {clamp128(std::min(x, y)), clamp128(std::max(x, y))};
}
inline Interval iv_mul(Interval a, Interval b) {
  if (a.is_point()) return iv_scale(b, a.min);
  if (b.is_point()) return iv_scale(a, b.min);
  if (!a.bounded() || !b.bounded()) return {};
  __int128 c[4] = {static_cast<__int128>(a.min) * b.min, static_cast<__int128>(a.min) * b.max,
                   static_cast<__int128>(a.max) * b.min, static_cast<__int128>(a.max) * b.max};
  return {clamp128(*std::min_element(c, c + 4)), clamp128(*std::max_element(c, c + 4))};
}
using ::loom::detail::floor_div;
// x / c and x % c for a constant c > 0. Both truncating and floor division are monotonic in x.
inline Interval iv_div(Interval x, int64_t c, bool floor) {
  if (!x.bounded()) return {};
  if (floor) return {floor_div(x.min, c), floor_div(x.max, c)};
  return {x.min / c, x.max / c};
}
inline Interval iv_mod(Interval x, int64_t c, bool floor) {
  if (!x.bounded()) return floor ? Interval{0, c - 1} : Interval{-(c - 1), c - 1};
  if (!floor && x.min < 0) return {-(c - 1), x.max <= 0 ? 0 : c - 1};
  if (floor_div(x.min, c) == floor_div(x.max, c))
    return {x.min - floor_div(x.min, c) * c, x.max - floor_div(x.max, c) * c};
  return {0, c - 1};
}

// The GPU feature of each GPU ForKind, in ForKind order from BlockIdxX.
inline constexpr int kGpuFeature[7] = {kFeatureBlockIdxX, kFeatureBlockIdxY,  kFeatureBlockIdxZ,
                                       kFeatureVThread,   kFeatureThreadIdxX, kFeatureThreadIdxY,
                                       kFeatureThreadIdxZ};

inline uint64_t depth_bit(int depth) { return uint64_t{1} << std::min(depth, 63); }

// Feature values that are one-hot (or is_gpu) stay 0/1; the others are log-scaled.
inline constexpr std::array<bool, kNumFeatures> kLogScaled = [] {
  std::array<bool, kNumFeatures> a{};
  for (int i = 0; i < kNumFeatures; ++i) a[i] = is_log_scaled(i);
  return a;
}();

/// The extractor: a statement visitor that keeps the loop stack and writes one raw (unscaled)
/// feature row per written buffer. All scratch lives in members that keep their capacity, so
/// extracting thousands of programs on one thread allocates almost nothing after the first.
class extractor final : public ir::StmtVisitor {
 public:
  ProgramFeatures run(const ir::LoweredFunc& f, const Target& target) {
    reset(target);
    visit(f.body);
    ProgramFeatures out;
    out.num_features = kNumFeatures;
    out.num_rows = static_cast<int>(rows_.size());
    out.values.resize(rows_.size() * kNumFeatures);
    float* dst = out.values.data();
    for (const row& r : rows_)
      for (int k = 0; k < kNumFeatures; ++k)
        *dst++ = kLogScaled[k] ? log_scale(r.raw[k]) : static_cast<float>(r.raw[k]);
    return out;
  }

 protected:
  using ir::StmtVisitor::visit;

  void visit_For(const ir::For* op) override {
    Interval mn = eval(op->min), ext = eval(op->extent);
    // Non-constant bounds (not produced by loom's lowering): the largest extent, as Ansor's
    // const_int_bound; an unknown one counts as 1.
    int64_t extent = ext.max == Interval::pos_inf ? 1 : std::max<int64_t>(ext.max, 0);
    int64_t min = mn.min == Interval::neg_inf ? 0 : mn.min;
    const int depth = push_loop(op->variable(), min, extent, op->for_kind);

    int gpu_slot = -1;
    int64_t saved_gpu = 0;
    // A tensor-core tile, a pipelined loop: the serial loops they stand for, and group 6.
    const bool pipelined = ir::is_pipelined(op->for_kind);
    if (pipelined) {
      pipelined_.push_back({extent, ir::pipeline_stages(op->for_kind)});
    } else {
      switch (op->for_kind) {
        case ir::ForKind::Vectorized: vec_loops_.push_back(depth); break;
        case ir::ForKind::Unrolled: unroll_loops_.push_back(depth); break;
        case ir::ForKind::Parallel: parallel_loops_.push_back(depth); break;
        case ir::ForKind::Serial: break;
        case ir::ForKind::Tensorized: ++tensorized_; break;
        default:
          // A GPU binding: its extent is the thread/block count (the innermost binding of an
          // index wins); virtual threads multiply.
          gpu_slot = static_cast<int>(op->for_kind) - static_cast<int>(ir::ForKind::BlockIdxX);
          saved_gpu = gpu_len_[gpu_slot];
          gpu_len_[gpu_slot] = op->for_kind == ir::ForKind::VThread
                                   ? std::max<int64_t>(saved_gpu, 1) * extent
                                   : extent;
          is_gpu_ = true;
          break;
      }
    }
    const bool outermost_unrolled = op->for_kind == ir::ForKind::Unrolled && unroll_steps_ == 0;
    if (outermost_unrolled) unroll_steps_ = instances(ir::Stmt(op));

    visit(op->body);

    if (outermost_unrolled) unroll_steps_ = 0;
    if (gpu_slot >= 0) gpu_len_[gpu_slot] = saved_gpu;
    switch (op->for_kind) {
      case ir::ForKind::Vectorized: vec_loops_.pop_back(); break;
      case ir::ForKind::Unrolled: unroll_loops_.pop_back(); break;
      case ir::ForKind::Parallel: parallel_loops_.pop_back(); break;
      case ir::ForKind::Tensorized: --tensorized_; break;
      default: break;
    }
    if (pipelined) pipelined_.pop_back();
    pop_loop();
  }

  void visit_Allocate(const ir::Allocate* op) override {
    allocations_.push_back({op->buffer.get(), static_cast<int>(loops_.size()), outer_prod_});
    const double bytes =
        static_cast<double>(op->buffer->num_elements()) * op->buffer->dtype.bytes();
    const bool shared = op->buffer->scope == ir::MemoryScope::Shared;
    // A shared array inside a pipelined loop is one the loop fetches: it has a slot per stage.
    const double slots = shared && !pipelined_.empty() ? pipelined_.back().stages : 1;
    if (shared) shared_bytes_ += bytes * slots;
    visit(op->body);
    if (shared) shared_bytes_ -= bytes * slots;
    const allocation a = allocations_.back();
    allocations_.pop_back();
    if (row* r = find_row(a.buffer)) {
      r->raw[kFeatureAllocSize] = bytes;
      r->raw[kFeatureAllocProd] = static_cast<double>(a.buffer->num_elements()) * a.outer_prod;
      r->raw[kFeatureAllocOuterProd] = a.outer_prod;
      r->raw[kFeatureAllocInnerProd] =
          a.outer_prod > 0 ? r->raw[kFeatureOuterProd] / a.outer_prod : 0.0;
    }
  }

  void visit_IfThenElse(const ir::IfThenElse* op) override {
    conditions_.push_back({&op->condition, outer_prod_, false});
    // Lowering guards tails and over-sized tiles with conditions that can hold in a small part
    // of the iterations; a store under them runs only that part.
    const double saved = guard_, taken = fraction(op->condition);
    guard_ = saved * taken;
    visit(op->then_case);
    guard_ = saved * (1 - taken);
    if (op->else_case.defined()) visit(op->else_case);
    guard_ = saved;
    conditions_.pop_back();
  }

  void visit_Store(const ir::Store* op) override {
    const int lanes = op->index.dtype().lanes;
    // Instances of the store, a vector counted once, guarded iterations left out.
    const double scalar_prod = outer_prod_ * guard_;
    // A vector store is the body of a vectorized loop of `lanes` iterations: model it as one, so
    // that the row matches the one of the same nest lowered without vectorization.
    if (lanes > 1) lane_depth_ = push_loop(nullptr, 0, lanes, ir::ForKind::Vectorized);
    if (lanes > 1) vec_loops_.push_back(lane_depth_);

    row& r = row_of(op->buffer.get());
    std::fill(r.raw.begin() + kFeatureVecNum, r.raw.end(), 0.0);

    // Group 1: operation counts. The stored value's nodes run once per (vector) instance; each
    // enclosing condition not yet charged to an earlier store runs once per instance of its If.
    double ops[16] = {};
    loads_.clear();
    count(op->value, ops, true);
    const double float_ops = ops[kFeatureFloatAddSub] + ops[kFeatureFloatMul] +
                             ops[kFeatureFloatDivMod] + ops[kFeatureFloatCmp] +
                             ops[kFeatureFloatMathFunc] + ops[kFeatureFloatOtherFunc];
    for (int k = 0; k < 16; ++k) r.raw[k] += ops[k] * scalar_prod;
    for (condition& c : conditions_) {
      if (c.counted) continue;
      double cops[16] = {};
      count(*c.expr, cops, false);
      for (int k = 0; k < 16; ++k) r.raw[k] += cops[k] * c.prod;
      c.counted = true;
    }

    build_groups(op);
    region_features(float_ops);
    annotation_features(r, op->buffer.get());
    for (int k = 0; k < 7; ++k) r.raw[kGpuFeature[k]] = static_cast<double>(gpu_len_[k]);
    r.raw[kFeatureIsGpu] = is_gpu_ ? 1.0 : 0.0;
    buffer_features(r);
    intensity_curve(r, float_ops);

    // Group 5: outer scope.
    r.raw[kFeatureOuterProd] = outer_prod_;
    r.raw[kFeatureNumLoops] = static_cast<double>(loops_.size());
    r.raw[kFeatureAutoUnrollMaxStep] = unroll_steps_;

    // Group 6: GPU kernels.
    r.raw[kFeatureTensorCoreMacs] = tensorized_ > 0 ? scalar_prod : 0.0;
    r.raw[kFeaturePipelinedLen] =
        pipelined_.empty() ? 0.0 : static_cast<double>(pipelined_.back().extent);
    r.raw[kFeatureSharedBytes] = shared_bytes_;

    if (lanes > 1) {
      vec_loops_.pop_back();
      pop_loop();
      lane_depth_ = -1;
    }
  }

 private:
  struct loop {
    const ir::Variable* var;  // nullptr: the lanes of a vector store
    int64_t min, extent;
    ir::ForKind kind;
    double outer_prod;  // the product outside this loop (restored on pop; extents may be 0)
  };
  struct touch {  // one buffer's region under a loop, recorded by one store (Ansor's touch map)
    const ir::BufferNode* buffer;
    double elements;
    int bytes;
  };
  struct condition {
    const ir::Expr* expr;
    double prod;
    bool counted;
  };
  struct allocation {
    const ir::BufferNode* buffer;
    int depth;
    double outer_prod;
  };
  // One term `coef * atom` of an index, in units of dimension `dim`. `depth >= 0`: the atom is
  // the loop variable (or vector lane) at that depth; `depth == -1`: any other expression,
  // bounded by evaluation, that uses the loops in `mask`. `span`: max - min of the term over
  // the whole nest (set by the outermost level of region_features).
  struct term {
    int64_t coef;
    const ir::Expr* atom;
    int depth;
    uint64_t mask;
    int dim;
    int64_t span;
  };
  struct index_rec {
    int term_begin, term_end, const_begin;
  };
  // The accesses of one store to one buffer.
  struct group {
    const ir::BufferNode* buffer;
    access_type type;
    int ndim, dim_begin, index_begin, index_end;
    uint64_t mask;      // loops its indices use
    double elements0;   // region of the whole nest
    int region0_begin;  // per-dimension extents of that region
    double feature[kFeaturesPerBuffer];
  };
  struct row {
    const ir::BufferNode* buffer;
    std::array<double, kNumFeatures> raw;
  };

  void reset(const Target& target) {
    loops_.clear();
    conditions_.clear();
    allocations_.clear();
    rows_.clear();
    vec_loops_.clear();
    unroll_loops_.clear();
    parallel_loops_.clear();
    outer_prod_ = 1.0;
    guard_ = 1.0;
    lane_depth_ = -1;
    is_gpu_ = target.is_cuda();
    gpu_len_.fill(0);
    unroll_steps_ = 0;
    tensorized_ = 0;
    pipelined_.clear();
    shared_bytes_ = 0;
  }

  int push_loop(const ir::Variable* var, int64_t min, int64_t extent, ir::ForKind kind) {
    const int d = static_cast<int>(loops_.size());
    loops_.push_back({var, min, extent, kind, outer_prod_});
    if (lo_.size() <= static_cast<size_t>(d)) {
      lo_.resize(d + 1);
      hi_.resize(d + 1);
      touches_.resize(d + 1);
    }
    lo_[d] = min;
    hi_[d] = min + std::max<int64_t>(extent, 1) - 1;
    touches_[d].clear();
    outer_prod_ *= static_cast<double>(extent);
    return d;
  }
  void pop_loop() {
    outer_prod_ = loops_.back().outer_prod;
    loops_.pop_back();
  }
  // Full ranges of every loop, as the traversal needs them (region analysis narrows them).
  void restore_ranges() {
    for (size_t d = 0; d < loops_.size(); ++d) {
      lo_[d] = loops_[d].min;
      hi_[d] = loops_[d].min + std::max<int64_t>(loops_[d].extent, 1) - 1;
    }
  }
  int depth_of(const ir::Variable* v) const {
    for (int d = static_cast<int>(loops_.size()) - 1; d >= 0; --d)
      if (loops_[d].var == v) return d;
    return -1;
  }

  row* find_row(const ir::BufferNode* b) {
    for (row& r : rows_)
      if (r.buffer == b) return &r;
    return nullptr;
  }
  row& row_of(const ir::BufferNode* b) {
    if (row* r = find_row(b)) return *r;
    rows_.push_back({b, {}});
    return rows_.back();
  }

  // Statement instances under `s`: what the auto-unroller compares with its max step.
  static double instances(const ir::Stmt& s) {
    if (!s.defined()) return 0;
    switch (s.kind()) {
      case ir::StmtKind::Store: return 1;
      case ir::StmtKind::For: {
        auto* f = s.as<ir::For>();
        const int64_t* e = ir::as_const_int(f->extent);
        return static_cast<double>(e ? std::max<int64_t>(*e, 0) : 1) * instances(f->body);
      }
      case ir::StmtKind::Block: {
        double n = 0;
        for (auto& x : s.as<ir::Block>()->stmts) n += instances(x);
        return n;
      }
      case ir::StmtKind::IfThenElse: {
        auto* i = s.as<ir::IfThenElse>();
        return instances(i->then_case) + instances(i->else_case);
      }
      case ir::StmtKind::Allocate: return instances(s.as<ir::Allocate>()->body);
      case ir::StmtKind::CopyAsync: return instances(s.as<ir::CopyAsync>()->body);
      case ir::StmtKind::Barrier:
      case ir::StmtKind::AllReduce: return 0;
    }
    return 0;
  }

  // --- expressions (features_expr.ipp) ---------------------------------------------------
  Interval eval(const ir::Expr& e) const;
  double fraction(const ir::Expr& c) const;
  uint64_t depth_mask(const ir::Expr& e) const;
  void count(const ir::Expr& e, double* c, bool collect);
  void linearize(const ir::Expr& e, int64_t scale, int64_t& constant);

  // --- the accesses of one store (features_access.ipp) -----------------------------------
  group* find_group(const ir::BufferNode* b);
  void add_index(group& g, const ir::Expr& index);
  void build_groups(const ir::Store* op);
  static int64_t shape_of(const group& g, int d);
  double touched(group& g, bool keep);
  void region_features(double float_ops);
  int64_t stride_of(const group& g, int j);
  void reuse_of(const group& g, reuse_type& type, double& dist_iter, double& dist_bytes,
                double& count);
  void buffer_features(row& r);
  void intensity_curve(row& r, double float_ops);

  // --- annotations (features_annotation.ipp) ---------------------------------------------
  int alloc_depth(const ir::BufferNode* b) const;
  uint32_t write_dims(int depth) const;
  LoopPosition position_of(int depth, const ir::BufferNode* stored) const;
  void annotation_features(row& r, const ir::BufferNode* stored);

  // Traversal state.
  std::vector<loop> loops_;
  std::vector<int64_t> lo_, hi_;             // ranges by loop depth
  std::vector<std::vector<touch>> touches_;  // by loop depth
  std::vector<condition> conditions_;
  std::vector<allocation> allocations_;
  std::vector<row> rows_;
  std::vector<int> vec_loops_, unroll_loops_, parallel_loops_;  // depths
  double outer_prod_ = 1;
  double guard_ = 1;  // estimated fraction of iterations the enclosing conditions let through
  int lane_depth_ = -1;
  bool is_gpu_ = false;
  std::array<int64_t, 7> gpu_len_{};  // blockIdx.xyz, vthread, threadIdx.xyz (ForKind order)
  double unroll_steps_ = 0;
  int tensorized_ = 0;  // Tensorized loops around the visit
  struct pipelined_loop {
    int64_t extent;
    int stages;
  };
  std::vector<pipelined_loop> pipelined_;  // the pipelined loops around it
  double shared_bytes_ = 0;                // of the shared arrays allocated around it

  // Per-store scratch.
  std::vector<std::pair<const ir::BufferNode*, const ir::Expr*>> loads_;
  std::vector<term> terms_;
  std::vector<index_rec> indices_;
  std::vector<int64_t> consts_, dim_stride_, dim_lo_, dim_hi_, lo_acc_, hi_acc_;
  std::vector<char> unbounded_;
  std::vector<double> region0_, compute_ops_, mem_bytes_;
  std::vector<group> groups_;
  std::vector<int> order_;
};

}  // namespace detail
}  // namespace cost
LOOM_END_NAMESPACE
