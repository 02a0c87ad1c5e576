// Bodies of loom/cost/features.hpp: the per-store feature extractor.
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
#include "loom/cost/features.hpp"
#include "loom/ir/simplify.hpp"
#include "loom/runtime/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <string>

LOOM_BEGIN_NAMESPACE
namespace cost {

namespace detail_features {

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
inline int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
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
    switch (op->for_kind) {
      case ir::ForKind::Vectorized: vec_loops_.push_back(depth); break;
      case ir::ForKind::Unrolled: unroll_loops_.push_back(depth); break;
      case ir::ForKind::Parallel: parallel_loops_.push_back(depth); break;
      case ir::ForKind::Serial: break;
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
    const bool outermost_unrolled = op->for_kind == ir::ForKind::Unrolled && unroll_steps_ == 0;
    if (outermost_unrolled) unroll_steps_ = instances(ir::Stmt(op));

    visit(op->body);

    if (outermost_unrolled) unroll_steps_ = 0;
    if (gpu_slot >= 0) gpu_len_[gpu_slot] = saved_gpu;
    switch (op->for_kind) {
      case ir::ForKind::Vectorized: vec_loops_.pop_back(); break;
      case ir::ForKind::Unrolled: unroll_loops_.pop_back(); break;
      case ir::ForKind::Parallel: parallel_loops_.pop_back(); break;
      default: break;
    }
    pop_loop();
  }

  void visit_Allocate(const ir::Allocate* op) override {
    allocations_.push_back({op->buffer.get(), static_cast<int>(loops_.size()), outer_prod_});
    visit(op->body);
    const allocation a = allocations_.back();
    allocations_.pop_back();
    if (row* r = find_row(a.buffer)) {
      const double elements = static_cast<double>(a.buffer->num_elements());
      r->raw[kFeatureAllocSize] = elements * a.buffer->dtype.bytes();
      r->raw[kFeatureAllocProd] = elements * a.outer_prod;
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
      case ir::StmtKind::Barrier:
      case ir::StmtKind::AllReduce: return 0;
    }
    return 0;
  }

  // --- expressions ------------------------------------------------------------------------

  // Bounds of an integer expression with loop depth d ranging over [lo_[d], hi_[d]].
  Interval eval(const ir::Expr& e) const {
    using ir::NodeKind;
    switch (e.kind()) {
      case NodeKind::IntImm: return Interval::point(static_cast<const ir::IntImm*>(e.get())->value);
      case NodeKind::Variable: {
        int d = depth_of(static_cast<const ir::Variable*>(e.get()));
        return d < 0 ? Interval{} : Interval{lo_[d], hi_[d]};
      }
      case NodeKind::Cast: {
        auto* c = static_cast<const ir::Cast*>(e.get());
        return c->value.dtype().is_integral() ? eval(c->value) : Interval{};
      }
      case NodeKind::Add: {
        auto* n = static_cast<const ir::Add*>(e.get());
        return iv_add(eval(n->a), eval(n->b));
      }
      case NodeKind::Sub: {
        auto* n = static_cast<const ir::Sub*>(e.get());
        return iv_add(eval(n->a), iv_scale(eval(n->b), -1));
      }
      case NodeKind::Mul: {
        auto* n = static_cast<const ir::Mul*>(e.get());
        return iv_mul(eval(n->a), eval(n->b));
      }
      case NodeKind::Div:
      case NodeKind::FloorDiv:
      case NodeKind::Mod:
      case NodeKind::FloorMod: {
        auto [a, b] = ir::binary_operands(e);
        Interval y = eval(*b);
        if (!y.is_point() || y.min <= 0) return {};
        const bool floor = e.kind() == NodeKind::FloorDiv || e.kind() == NodeKind::FloorMod;
        if (e.kind() == NodeKind::Div || e.kind() == NodeKind::FloorDiv)
          return iv_div(eval(*a), y.min, floor);
        return iv_mod(eval(*a), y.min, floor);
      }
      case NodeKind::Min:
      case NodeKind::Max: {
        auto [a, b] = ir::binary_operands(e);
        Interval x = eval(*a), y = eval(*b);
        if (!x.bounded() || !y.bounded()) return {};
        if (e.kind() == NodeKind::Min) return {std::min(x.min, y.min), std::min(x.max, y.max)};
        return {std::max(x.min, y.min), std::max(x.max, y.max)};
      }
      case NodeKind::Select: {
        auto* s = static_cast<const ir::Select*>(e.get());
        Interval x = eval(s->true_value), y = eval(s->false_value);
        if (!x.bounded() || !y.bounded()) return {};
        return {std::min(x.min, y.min), std::max(x.max, y.max)};
      }
      case NodeKind::Ramp: {
        auto* r = static_cast<const ir::Ramp*>(e.get());
        Interval lane = lane_depth_ >= 0 ? Interval{lo_[lane_depth_], hi_[lane_depth_]}
                                         : Interval{0, r->lanes - 1};
        return iv_add(eval(r->base), iv_mul(eval(r->stride), lane));
      }
      case NodeKind::Broadcast: return eval(static_cast<const ir::Broadcast*>(e.get())->value);
      default: return e.dtype().is_bool() ? Interval{0, 1} : Interval{};
    }
  }

  // Estimated fraction of the iterations of the enclosing loops in which `c` holds: a comparison
  // of integers counts the values of (a - b) over its range that satisfy it, as if spread
  // evenly (exact for the mixed-radix indices of tail guards); conditions combine as independent
  // events. Anything else (floats, loads, unbounded) counts as always true.
  double fraction(const ir::Expr& c) const {
    using ir::NodeKind;
    switch (c.kind()) {
      case NodeKind::IntImm: return static_cast<const ir::IntImm*>(c.get())->value != 0 ? 1 : 0;
      case NodeKind::And: {
        auto* n = static_cast<const ir::And*>(c.get());
        return fraction(n->a) * fraction(n->b);
      }
      case NodeKind::Or: {
        auto* n = static_cast<const ir::Or*>(c.get());
        const double a = fraction(n->a), b = fraction(n->b);
        return a + b - a * b;
      }
      case NodeKind::Not: return 1 - fraction(static_cast<const ir::Not*>(c.get())->a);
      case NodeKind::LT:
      case NodeKind::LE:
      case NodeKind::GT:
      case NodeKind::GE:
      case NodeKind::EQ:
      case NodeKind::NE: {
        auto [a, b] = ir::binary_operands(c);
        if (!a->dtype().is_integral()) return 1;
        const Interval d = iv_add(eval(*a), iv_scale(eval(*b), -1));
        if (!d.bounded()) return 1;
        const double n = static_cast<double>(d.max) - static_cast<double>(d.min) + 1;
        // Values of d in [lo, hi] that satisfy d < t: t - lo of them, clamped to [0, n].
        auto below = [&](double t) {
          return std::clamp(t - static_cast<double>(d.min), 0.0, n) / n;
        };
        switch (c.kind()) {
          case NodeKind::LT: return below(0);
          case NodeKind::LE: return below(1);
          case NodeKind::GT: return 1 - below(1);
          case NodeKind::GE: return 1 - below(0);
          case NodeKind::EQ: return d.min <= 0 && d.max >= 0 ? 1 / n : 0;
          default: return d.min <= 0 && d.max >= 0 ? 1 - 1 / n : 1;
        }
      }
      default: return 1;
    }
  }

  // Loops (as depth bits) an expression uses.
  uint64_t depth_mask(const ir::Expr& e) const {
    uint64_t m = 0;
    ir::post_order_visit(e, [&](const ir::Expr& x) {
      if (auto* v = x.as<ir::Variable>()) {
        int d = depth_of(v);
        if (d >= 0) m |= depth_bit(d);
      } else if (x.kind() == ir::NodeKind::Ramp && lane_depth_ >= 0) {
        m |= depth_bit(lane_depth_);
      }
    });
    return m;
  }

  // Adds the operations of `e` to `c` (indexed like features 0-15), each weighted by its
  // lanes as in Ansor's MathOpCounter; with `collect`, records every Load for the access
  // analysis.
  void count(const ir::Expr& e, double* c, bool collect) {
    using ir::NodeKind;
    const ir::ExprNode* n = e.get();
    switch (e.kind()) {
      case NodeKind::IntImm:
      case NodeKind::FloatImm:
      case NodeKind::Variable: return;
      case NodeKind::Cast: return count(static_cast<const ir::Cast*>(n)->value, c, collect);
      case NodeKind::Add:
      case NodeKind::Sub: {
        auto [a, b] = ir::binary_operands(e);
        const bool f = a->dtype().is_float();
        const double lanes = a->dtype().lanes;
        c[f ? kFeatureFloatAddSub : kFeatureIntAddSub] += lanes;
        if (a->kind() == NodeKind::Mul || b->kind() == NodeKind::Mul)
          c[f ? kFeatureFloatMad : kFeatureIntMad] += lanes;
        count(*a, c, collect);
        return count(*b, c, collect);
      }
      case NodeKind::Mul:
      case NodeKind::Div:
      case NodeKind::Mod:
      case NodeKind::FloorDiv:
      case NodeKind::FloorMod:
      case NodeKind::Min:
      case NodeKind::Max:
      case NodeKind::EQ:
      case NodeKind::NE:
      case NodeKind::LT:
      case NodeKind::LE:
      case NodeKind::GT:
      case NodeKind::GE:
      case NodeKind::And:
      case NodeKind::Or: {
        auto [a, b] = ir::binary_operands(e);
        const bool f = a->dtype().is_float();
        const double lanes = a->dtype().lanes;
        int k;
        if (e.kind() == NodeKind::Mul)
          k = f ? kFeatureFloatMul : kFeatureIntMul;
        else if (e.kind() == NodeKind::And || e.kind() == NodeKind::Or)
          k = kFeatureBoolOp;
        else if (e.kind() == NodeKind::Div || e.kind() == NodeKind::Mod ||
                 e.kind() == NodeKind::FloorDiv || e.kind() == NodeKind::FloorMod)
          k = f ? kFeatureFloatDivMod : kFeatureIntDivMod;
        else
          k = f ? kFeatureFloatCmp : kFeatureIntCmp;
        c[k] += lanes;
        count(*a, c, collect);
        return count(*b, c, collect);
      }
      case NodeKind::Not: {
        auto* x = static_cast<const ir::Not*>(n);
        c[kFeatureBoolOp] += x->a.dtype().lanes;
        return count(x->a, c, collect);
      }
      case NodeKind::Select: {
        auto* s = static_cast<const ir::Select*>(n);
        c[kFeatureSelectOp] += n->dtype.lanes;
        count(s->condition, c, collect);
        count(s->true_value, c, collect);
        return count(s->false_value, c, collect);
      }
      case NodeKind::Call: {
        auto* call = static_cast<const ir::Call*>(n);
        c[n->dtype.is_float() ? kFeatureFloatMathFunc : kFeatureIntMathFunc] += n->dtype.lanes;
        for (auto& a : call->args) count(a, c, collect);
        return;
      }
      case NodeKind::Load: {
        auto* l = static_cast<const ir::Load*>(n);
        if (collect) loads_.push_back({l->buffer.get(), &l->index});
        return count(l->index, c, collect);
      }
      case NodeKind::Ramp: {
        auto* r = static_cast<const ir::Ramp*>(n);
        count(r->base, c, collect);
        return count(r->stride, c, collect);
      }
      case NodeKind::Broadcast:
        return count(static_cast<const ir::Broadcast*>(n)->value, c, collect);
      case NodeKind::TensorRead:
      case NodeKind::Reduce: return;  // not in lowered code
    }
  }

  // Appends the terms of `e * scale` to terms_ and its constant part to `constant`.
  void linearize(const ir::Expr& e, int64_t scale, int64_t& constant) {
    using ir::NodeKind;
    switch (e.kind()) {
      case NodeKind::IntImm: {
        int64_t v;
        if (!__builtin_mul_overflow(static_cast<const ir::IntImm*>(e.get())->value, scale, &v)) {
          constant += v;
          return;
        }
        break;
      }
      case NodeKind::Variable: {
        int d = depth_of(static_cast<const ir::Variable*>(e.get()));
        if (d < 0) break;
        terms_.push_back({scale, &e, d, depth_bit(d), 0, 0});
        return;
      }
      case NodeKind::Cast: {
        auto* c = static_cast<const ir::Cast*>(e.get());
        if (!c->value.dtype().is_integral()) break;
        return linearize(c->value, scale, constant);
      }
      case NodeKind::Add: {
        auto* n = static_cast<const ir::Add*>(e.get());
        linearize(n->a, scale, constant);
        return linearize(n->b, scale, constant);
      }
      case NodeKind::Sub: {
        auto* n = static_cast<const ir::Sub*>(e.get());
        linearize(n->a, scale, constant);
        return linearize(n->b, -scale, constant);
      }
      case NodeKind::Mul: {
        auto* n = static_cast<const ir::Mul*>(e.get());
        int64_t s;
        if (auto* k = ir::as_const_int(n->b); k && !__builtin_mul_overflow(scale, *k, &s))
          return linearize(n->a, s, constant);
        if (auto* k = ir::as_const_int(n->a); k && !__builtin_mul_overflow(scale, *k, &s))
          return linearize(n->b, s, constant);
        break;
      }
      case NodeKind::Ramp: {
        auto* r = static_cast<const ir::Ramp*>(e.get());
        auto* k = ir::as_const_int(r->stride);
        int64_t s;
        if (!k || lane_depth_ < 0 || __builtin_mul_overflow(scale, *k, &s)) break;
        linearize(r->base, scale, constant);
        if (s != 0) terms_.push_back({s, &e, lane_depth_, depth_bit(lane_depth_), 0, 0});
        return;
      }
      case NodeKind::Broadcast:
        return linearize(static_cast<const ir::Broadcast*>(e.get())->value, scale, constant);
      default: break;
    }
    if (scale != 0) terms_.push_back({scale, &e, -1, depth_mask(e), 0, 0});
  }

  // --- the accesses of one store ----------------------------------------------------------

  group* find_group(const ir::BufferNode* b) {
    for (group& g : groups_)
      if (g.buffer == b) return &g;
    return nullptr;
  }

  void add_index(group& g, const ir::Expr& index) {
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
  void build_groups(const ir::Store* op) {
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

  static int64_t shape_of(const group& g, int d) {
    return static_cast<size_t>(d) < g.buffer->shape.size()
               ? std::max<int64_t>(g.buffer->shape[d], 1)
               : 1;
  }

  // Elements of the box that `g`'s indices touch with the current lo_/hi_; with `keep`, its
  // per-dimension extents go to region0_ at g.region0_begin.
  double touched(group& g, bool keep) {
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
  void region_features(double float_ops) {
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
  int64_t stride_of(const group& g, int j) {
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
  void reuse_of(const group& g, reuse_type& type, double& dist_iter, double& dist_bytes,
                double& count) {
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
  void buffer_features(row& r) {
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
        for (int d = g.ndim - 2; d >= 0 && reg[d + 1] == static_cast<double>(shape_of(g, d + 1));
             --d)
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
  void intensity_curve(row& r, double float_ops) {
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

  // --- annotations ------------------------------------------------------------------------

  int alloc_depth(const ir::BufferNode* b) const {
    for (auto it = allocations_.rbegin(); it != allocations_.rend(); ++it)
      if (it->buffer == b) return it->depth;
    return 0;
  }

  // Dimensions of the stored buffer (bits) that loop `depth` moves; a term that spans more than
  // its dimension (a fused loop) moves the next dimension out too.
  uint32_t write_dims(int depth) const {
    const group& w = groups_[0];
    uint32_t dims = 0;
    for (int i = w.index_begin; i < w.index_end; ++i)
      for (int t = indices_[i].term_begin; t < indices_[i].term_end; ++t) {
        const term& x = terms_[t];
        if (!(x.mask & depth_bit(depth))) continue;
        dims |= uint32_t{1} << std::min(x.dim, 31);
        if (x.dim > 0 && x.span >= shape_of(w, x.dim))
          dims |= uint32_t{1} << std::min(x.dim - 1, 31);
      }
    return dims;
  }

  LoopPosition position_of(int depth, const ir::BufferNode* stored) const {
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

  void annotation_features(row& r, const ir::BufferNode* stored) {
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

}  // namespace detail_features

LOOM_DECL const std::array<std::string_view, kNumFeatures>& feature_names() {
  // The strings are built once; the views point into this function's static storage.
  static const std::array<std::string, kNumFeatures> storage = [] {
    std::array<std::string, kNumFeatures> n;
    // Appending (not operator+ on literals) also keeps g++ 12's -Wrestrict false positive away.
    auto cat = [](std::initializer_list<std::string_view> parts) {
      std::string s;
      for (std::string_view x : parts) s.append(x);
      return s;
    };
    const char* ops[16] = {"float_mad",     "float_addsub",    "float_mul",        "float_divmod",
                           "float_cmp",     "float_math_func", "float_other_func", "int_mad",
                           "int_addsub",    "int_mul",         "int_divmod",       "int_cmp",
                           "int_math_func", "int_other_func",  "bool_op",          "select_op"};
    for (int i = 0; i < 16; ++i) n[i] = ops[i];
    const char* pos[kNumLoopPositions] = {"none",          "inner_spatial", "middle_spatial",
                                          "outer_spatial", "inner_reduce",  "middle_reduce",
                                          "outer_reduce",  "mixed"};
    const std::pair<int, const char*> annotations[3] = {
        {kFeatureVecNum, "vec"}, {kFeatureUnrollNum, "unroll"}, {kFeatureParallelNum, "parallel"}};
    for (auto [base, name] : annotations) {
      n[base] = cat({name, "_num"});
      n[base + 1] = cat({name, "_prod"});
      n[base + 2] = cat({name, "_len"});
      for (int k = 0; k < kNumLoopPositions; ++k) n[base + 3 + k] = cat({name, "_type.", pos[k]});
    }
    const char* gpu[8] = {"is_gpu",          "blockIdx.x_len",  "blockIdx.y_len",  "blockIdx.z_len",
                          "threadIdx.x_len", "threadIdx.y_len", "threadIdx.z_len", "vthread_len"};
    for (int i = 0; i < 8; ++i) n[kFeatureIsGpu + i] = gpu[i];
    const char* buf[kFeaturesPerBuffer] = {"acc_type.read",
                                           "acc_type.write",
                                           "acc_type.read_write",
                                           "bytes",
                                           "unique_bytes",
                                           "lines",
                                           "unique_lines",
                                           "reuse_type.loop_multiple_read",
                                           "reuse_type.serial_multiple_read_write",
                                           "reuse_type.no_reuse",
                                           "reuse_dist_iter",
                                           "reuse_dist_bytes",
                                           "reuse_count",
                                           "bytes_per_reuse",
                                           "unique_bytes_per_reuse",
                                           "lines_per_reuse",
                                           "unique_lines_per_reuse",
                                           "stride"};
    for (int b = 0; b < kMaxFeatureBuffers; ++b)
      for (int k = 0; k < kFeaturesPerBuffer; ++k)
        n[buffer_feature(b, k)] = cat({"B", std::to_string(b), ".", buf[k]});
    for (int k = 0; k < kIntensityCurvePoints; ++k)
      n[kFeatureIntensityCurve + k] = cat({"arith_intensity_curve.", std::to_string(k)});
    n[kFeatureAllocSize] = "alloc_size";
    n[kFeatureAllocProd] = "alloc_prod";
    n[kFeatureAllocOuterProd] = "alloc_outer_prod";
    n[kFeatureAllocInnerProd] = "alloc_inner_prod";
    n[kFeatureOuterProd] = "outer_prod";
    n[kFeatureNumLoops] = "num_loops";
    n[kFeatureAutoUnrollMaxStep] = "auto_unroll_max_step";
    return n;
  }();
  static const std::array<std::string_view, kNumFeatures> views = [] {
    std::array<std::string_view, kNumFeatures> v;
    for (int i = 0; i < kNumFeatures; ++i) v[i] = storage[i];
    return v;
  }();
  return views;
}

LOOM_DECL float log_scale(double x) {
  if (x == 0) return 0.0f;  // most features of a row: log2(1) without the call
  return static_cast<float>(x < 0 ? -std::log2(1.0 - x) : std::log2(1.0 + x));
}

LOOM_DECL double unscale(float v) {
  return v < 0 ? -(std::exp2(-static_cast<double>(v)) - 1.0)
               : std::exp2(static_cast<double>(v)) - 1.0;
}

LOOM_DECL double row_float_ops(const float* row) {
  double s = 0;
  for (int k : kFloatOpFeatures) s += unscale(row[k]);
  return s;
}

LOOM_DECL double row_bytes(const float* row) {
  double s = 0;
  for (int b = 0; b < kMaxFeatureBuffers; ++b) s += unscale(row[buffer_feature(b, kBufferBytes)]);
  return s;
}

LOOM_DECL lower::LowerOptions feature_lower_options() {
  lower::LowerOptions o;
  o.unroll = false;
  o.vectorize = false;
  o.partition = false;
  return o;
}

LOOM_DECL ProgramFeatures extract_features(const ir::LoweredFunc& f, const Target& target) {
  LOOM_USER_CHECK(f.body.defined(), "loom.cost.E900")
      << "extract_features(): kernel '" << f.name << "' has no body";
  // One extractor per thread, reused: its scratch keeps its capacity between programs.
  thread_local detail_features::extractor ex;
  return ex.run(f, target);
}

LOOM_DECL ProgramFeatures extract_features(const sched::State& state, const Target& target) {
  return extract_features(lower::lower(state, "features", feature_lower_options()), target);
}

LOOM_DECL std::vector<ProgramFeatures> extract_features(
    const std::vector<const sched::State*>& states, const Target& target, bool parallel) {
  std::vector<ProgramFeatures> out(states.size());
  auto one = [&](size_t i) {
    try {
      out[i] = extract_features(*states[i], target);
    } catch (const loom::error&) {
      // A candidate that cannot be lowered gets no rows; the search scores it as invalid.
      out[i] = ProgramFeatures{};
      out[i].num_features = kNumFeatures;
    }
  };
  const auto n = static_cast<int64_t>(states.size());
  const int64_t threads = parallel ? std::min<int64_t>(runtime::num_threads(), n) : 1;
  if (threads <= 1) {
    for (size_t i = 0; i < states.size(); ++i) one(i);
    return out;
  }
  // Programs differ in cost several times over (a tiled convolution against an elementwise
  // nest), so fixed halves would leave a core idle: each thread takes the next program from a
  // shared counter. A thread that joins late (or never, on a busy machine) finds fewer left.
  std::atomic<int64_t> next{0};
  runtime::parallel_for(threads, [&](int64_t, int64_t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;)
      one(static_cast<size_t>(i));
  });
  return out;
}

LOOM_DECL std::vector<ProgramFeatures> extract_features(const std::vector<sched::State>& states,
                                                        const Target& target, bool parallel) {
  std::vector<const sched::State*> pointers(states.size());
  for (size_t i = 0; i < states.size(); ++i) pointers[i] = &states[i];
  return extract_features(pointers, target, parallel);
}

}  // namespace cost
LOOM_END_NAMESPACE
