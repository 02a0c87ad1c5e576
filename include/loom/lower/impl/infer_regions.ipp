// Body of loom/lower/infer_regions.hpp.
#include "loom/lower/infer_regions.hpp"

#include "loom/ir/simplify.hpp"
#include "loom/ir/visitor.hpp"
#include "loom/lower/bounds.hpp"
#include "loom/lower/inline_stages.hpp"

#include <algorithm>
#include <functional>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

using namespace ir;
using sched::ComputeLocation;
using sched::Stage;

class region_inferrer {
 public:
  explicit region_inferrer(const sched::State& st) : st_(st), regions_(st.stages().size()) {}

  std::vector<StageRegion> run() {
    for (size_t si = 0; si < st_.stages().size(); ++si) {
      const Stage& s = st_.stages()[si];
      if (s.location == ComputeLocation::At) continue;
      StageRegion& r = regions_[si];
      r.min.assign(s.op.shape().size(), Expr(int64_t{0}));
      r.extent = s.op.shape();
    }
    // A root stage, then everything computed inside it, consumers first: the stage list is
    // topological, so in decreasing index order.
    for (size_t si = 0; si < st_.stages().size(); ++si) {
      const Stage& s = st_.stages()[si];
      if (s.is_placeholder || s.location != ComputeLocation::Root) continue;
      prepare(static_cast<int>(si));
      std::vector<int> desc = descendants(static_cast<int>(si));
      std::sort(desc.rbegin(), desc.rend());
      for (int d : desc) {
        infer_region(d);
        prepare(d);
      }
    }
    return std::move(regions_);
  }

 private:
  // Reads of stage `p` in stage `t`'s body, with inlined stages expanded one read at a time
  // (inline_stages.hpp says why), as index lists.
  std::vector<std::vector<Expr>> reads_of(int t, int p) {
    std::vector<std::vector<Expr>> out;
    std::function<void(const Expr&)> walk = [&](const Expr& body) {
      post_order_visit(body, [&](const Expr& e) {
        auto* r = e.as<TensorRead>();
        if (!r) return;
        int si = st_.stage_of(r->tensor.get());
        if (si == p)
          out.push_back(r->indices);
        else if (si >= 0 && st_.stages()[si].location == ComputeLocation::Inlined)
          walk(inline_read(st_, *r));
      });
    };
    walk(st_.stages()[t].op->body);
    return out;
  }

  // Loop variables and axis coordinates of stage si, whose region is known.
  void prepare(int si) {
    const Stage& s = st_.stages()[si];
    StageRegion& in = regions_[si];
    const Reduce* red = s.op->body.as<Reduce>();
    std::vector<int64_t> root_extent = in.extent;
    if (red)
      for (auto& a : red->axes) root_extent.push_back(a.extent);
    const StageLoops& loops = in.loops.emplace(stage_loops(s, root_extent));
    in.axes.clear();
    for (size_t d = 0; d < s.op->axes.size(); ++d) {
      Expr v = loops.rel[d];
      if (!is_const_int(in.min[d], 0)) v = in.min[d] + v;
      in.axes[s.op->axes[d].variable()] = v;
    }
    if (red)
      for (size_t r = 0; r < red->axes.size(); ++r)
        in.axes[red->axes[r].variable()] = loops.rel[s.op->axes.size() + r];
    for (int leaf : s.leaves)
      ranges_[loops.var[leaf].as<Variable>()] = Interval::range(loops.extent[leaf]);
  }

  // Stages computed (transitively) inside stage si.
  std::vector<int> descendants(int si) {
    std::vector<int> out;
    for (size_t j = 0; j < st_.stages().size(); ++j)
      if (st_.computed_inside(st_.stages()[j], st_.stages()[si].name))
        out.push_back(static_cast<int>(j));
    return out;
  }

  // Region of stage p, computed inside stage e at the loop p is attached to. Each consumer x is e
  // or a stage inside e; every loop between that attach point and x's reads covers its range,
  // and the region is the union over the consumers.
  void infer_region(int p) {
    const Stage& ps = st_.stages()[p];
    const int e = st_.stage_index(ps.attach_stage);
    const Stage& es = st_.stages()[e];
    const int pos = es.leaf_position(ps.attach_iter);
    LOOM_USER_CHECK(pos >= 0, "loom.lower.E413")
        << "stage '" << ps.name << "' is computed at a loop of '" << es.name
        << "' that no longer exists";
    const auto cons = st_.consumers(p);
    LOOM_USER_CHECK(!cons.empty(), "loom.lower.E411")
        << "stage '" << ps.name << "' is computed inside '" << es.name << "' but nothing reads it";
    RangeMap ranging;
    auto add_leaves = [&](int si, int from) {
      const StageLoops& l = *regions_[si].loops;
      const Stage& ss = st_.stages()[si];
      for (size_t q = from; q < ss.leaves.size(); ++q)
        ranging[l.var[ss.leaves[q]].as<Variable>()] = Interval::range(l.extent[ss.leaves[q]]);
    };
    add_leaves(e, pos + 1);
    if (ps.scope == MemoryScope::Shared) {
      // Shared memory belongs to the GPU block, not to one thread: the region covers what every
      // thread of the block reads, so the thread-bound loops around the attach point range too
      // (TVM's bound inference relaxes them the same way). The stage's own loops are then
      // spread over the threads (cooperative fetching).
      auto add_thread_loops = [&](int si, int upto) {
        const StageLoops& l = *regions_[si].loops;
        const Stage& ss = st_.stages()[si];
        for (int q = 0; q <= upto && q < static_cast<int>(ss.leaves.size()); ++q) {
          const sched::Annotation a = ss.iters[ss.leaves[q]].annotation;
          if (a == sched::Annotation::ThreadIdxX || a == sched::Annotation::ThreadIdxY ||
              a == sched::Annotation::ThreadIdxZ)
            ranging[l.var[ss.leaves[q]].as<Variable>()] = Interval::range(l.extent[ss.leaves[q]]);
        }
      };
      add_thread_loops(e, pos);
      for (const Stage* cur = &es; cur->location == ComputeLocation::At;) {
        const int outer = st_.stage_index(cur->attach_stage);
        add_thread_loops(outer, st_.stages()[outer].leaf_position(cur->attach_iter));
        cur = &st_.stages()[outer];
      }
    }
    for (int x : cons) {
      for (int cur = x; cur != e;) {
        const Stage& cs = st_.stages()[cur];
        LOOM_USER_CHECK(cs.location == ComputeLocation::At && regions_[cur].loops,
                        "loom.lower.E411")
            << "stage '" << ps.name << "' is computed inside '" << es.name
            << "', but its consumer '" << st_.stages()[x].name << "' is not computed inside '"
            << es.name << "'";
        add_leaves(cur, 0);
        if (cs.attach_stage == es.name) {
          LOOM_USER_CHECK(es.leaf_position(cs.attach_iter) >= pos, "loom.lower.E412")
              << "stage '" << ps.name << "' is computed inside loop '"
              << es.iters[ps.attach_iter].name << "' of '" << es.name << "', but its consumer '"
              << cs.name << "' is computed outside that loop (at '" << es.iters[cs.attach_iter].name
              << "'); compute it at the consumer's loop or outside";
        }
        cur = st_.stage_index(cs.attach_stage);
      }
    }
    const auto& shape = ps.op.shape();
    std::vector<Expr> mins(shape.size()), maxs(shape.size());
    std::vector<bool> full(shape.size(), false);
    for (int x : cons) {
      for (auto& idx : reads_of(x, p)) {
        for (size_t d = 0; d < idx.size(); ++d) {
          if (full[d]) continue;
          Expr ex = simplify(substitute(idx[d], regions_[x].axes), ranges_);
          // Region starts of the stages in between are in their parents' variables: substitute
          // until only loops outside the attach point (or ranging ones) remain.
          auto b = symbolic_bounds(ex, ranging);
          if (!b) {
            full[d] = true;
            continue;
          }
          mins[d] = mins[d].defined() ? min(mins[d], b->first) : b->first;
          maxs[d] = maxs[d].defined() ? max(maxs[d], b->second) : b->second;
        }
      }
    }
    StageRegion& in = regions_[p];
    in.min.assign(shape.size(), Expr(int64_t{0}));
    in.extent = shape;
    // Each axis's box (start, constant extent), and whether its start may leave the tensor.
    std::vector<Expr> start(shape.size());
    std::vector<int64_t> extent(shape.size(), 0), past_end(shape.size(), 0);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (full[d] || !mins[d].defined()) continue;
      Expr mn = simplify(mins[d], ranges_);
      Expr ext = simplify(maxs[d] - mn + 1, ranges_);
      int64_t ev;
      if (auto* c = as_const_int(ext)) {
        ev = *c;
      } else {
        // The box must have a constant size: take the largest extent over all loop values.
        Interval iv = bounds_of(ext, ranges_);
        if (iv.max == Interval::pos_inf) continue;
        ev = iv.max;
      }
      start[d] = mn;
      extent[d] = std::max<int64_t>(ev, 1);
      const Interval first = bounds_of(mn, ranges_);
      if (first.min >= 0 && first.max != Interval::pos_inf && first.max + ev > shape[d])
        past_end[d] = first.max + ev;
    }
    // Keep the constant-size box inside the tensor: computing a few extra valid points is
    // harmless, reading outside the producer's inputs is not. Where the producer's reads cannot
    // leave its inputs past the tensor's end, the box starts at the consumer's tile instead:
    // a weight packed into whole, zero-padded tiles (shifted back, a tile straddles two packed
    // tiles and its reads are no longer contiguous: the odd GEMM with B packed, 12 GFLOP/s, 94
    // as is), or a tensor-core accumulator of a padded tile, whose rows past the end read zero
    // padding (shifted back, a thread's registers would move with its tile, which forces them
    // into local memory). The axes that may pass the end join one by one, each checked with
    // those that joined before it (the reads of a box past two ends at once must stay inside).
    std::vector<int64_t> passing(shape.size(), 0);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (past_end[d] == 0) continue;
      std::vector<int64_t> with = passing;
      with[d] = past_end[d];
      if (reads_stay_inside(ps, with)) passing = std::move(with);
    }
    // The stages computed inside others that this box reads past their ends must pass them
    // too (their regions come later, consumers first): recorded for their turn.
    if (std::any_of(passing.begin(), passing.end(), [](int64_t e) { return e > 0; }))
      reads_stay_inside(ps, passing, 0, &must_pass_);
    if (auto it = must_pass_.find(p); it != must_pass_.end())
      for (size_t d = 0; d < shape.size(); ++d)
        LOOM_USER_CHECK(it->second[d] == 0 || passing[d] > 0, "loom.lower.E414")
            << "stage '" << ps.name << "' would have to be computed past the end of its axis " << d
            << " (up to " << it->second[d] << ", extent " << shape[d]
            << ") for a consumer tiled past its own end, but its reads there leave its inputs; "
            << "tile the consumer so that it divides the extent, or compute this stage inline";
    for (size_t d = 0; d < shape.size(); ++d) {
      if (extent[d] == 0) continue;
      const Interval first = bounds_of(start[d], ranges_);
      const bool unshifted = past_end[d] == 0 ? first.min >= 0 && first.max != Interval::pos_inf &&
                                                    reads_are_inputs(ps, d, first.max + extent[d])
                                              : passing[d] > 0;
      // A box as large as the tensor that may not pass its end is the tensor.
      if (extent[d] >= shape[d] && !(past_end[d] > 0 && unshifted)) continue;
      if (past_end[d] > 0 && unshifted && is_input_copy(ps)) in.skip_past_end = true;
      in.min[d] =
          unshifted
              ? start[d]
              : simplify(min(max(start[d], Expr(int64_t{0})), Expr(shape[d] - extent[d])), ranges_);
      in.extent[d] = extent[d];
    }
  }

  // Whether stage ps is a shared-memory copy of a kernel input (a cache_read stage), which may
  // skip the points past the input's end (StageRegion::skip_past_end).
  bool is_input_copy(const Stage& ps) const {
    if (ps.scope != MemoryScope::Shared || ps.location != ComputeLocation::At) return false;
    auto* r = ps.op->body.as<TensorRead>();
    if (!r || r->tensor->op != OpKind::Placeholder || r->indices.size() != ps.op->axes.size())
      return false;
    for (size_t k = 0; k < r->indices.size(); ++k)
      if (r->indices[k].as<Variable>() != ps.op->axes[k].variable()) return false;
    return true;
  }

  // The ranges of stage ps's axes, each up to ends[k] (exclusive; 0: its extent), and of its
  // reduction axes.
  RangeMap axis_ranges(const Stage& ps, const std::vector<int64_t>& ends) const {
    RangeMap all;
    for (size_t k = 0; k < ps.op->axes.size(); ++k)
      all[ps.op->axes[k].variable()] =
          Interval::range(k < ends.size() && ends[k] > 0 ? ends[k] : ps.op->axes[k].extent);
    if (auto* red = ps.op->body.as<Reduce>())
      for (auto& a : red->axes) all[a.variable()] = Interval::range(a.extent);
    return all;
  }

  // Whether every read of stage ps along axis d, computed up to `end` (exclusive), is of a
  // kernel input and stays inside it, whatever the other axes are.
  bool reads_are_inputs(const Stage& ps, size_t d, int64_t end) const {
    if (!ps.op.defined() || ps.op.is_placeholder()) return false;
    const Variable* along = ps.op->axes[d].variable();
    std::vector<int64_t> ends(ps.op->axes.size(), 0);
    ends[d] = end;
    const RangeMap all = axis_ranges(ps, ends);
    bool inside = true;
    post_order_visit(ps.op->body, [&](const Expr& e) {
      auto* r = e.as<TensorRead>();
      if (!inside || !r) return;
      bool along_d = false;
      for (auto& idx : r->indices) along_d = along_d || uses_var(idx, along);
      if (!along_d) return;
      if (r->tensor->op != OpKind::Placeholder) {
        inside = false;
        return;
      }
      for (size_t k = 0; k < r->indices.size(); ++k) {
        const Interval iv = bounds_of(r->indices[k], all);
        inside = inside && iv.min >= 0 && iv.max < r->tensor->shape[k];
      }
    });
    return inside;
  }

  // Whether stage ps may compute each axis k up to ends[k] (exclusive; 0: its extent), past
  // its tensor's end: every read those points make stays inside a kernel input, or inside a
  // stage that may in turn compute past its own end (one computed inside another stage, or
  // inlined; a root stage's buffer ends with its tensor). A select's condition narrows the
  // ranges its taken branch sees: a pad stage's bounds test keeps its input read inside
  // however far its axes go.
  // With `must_pass`, records how far past their ends the stages computed inside others are
  // read (by stage index, the farthest per axis).
  bool reads_stay_inside(const Stage& ps, const std::vector<int64_t>& ends, int depth = 0,
                         std::unordered_map<int, std::vector<int64_t>>* must_pass = nullptr) const {
    if (!ps.op.defined() || ps.op.is_placeholder() || depth > 16) return false;
    if (is_input_copy(ps)) return true;
    struct checker : ExprVisitor {
      const region_inferrer* self;
      int depth;
      std::unordered_map<int, std::vector<int64_t>>* must_pass;
      RangeMap ranges;
      bool inside = true;
      using ExprVisitor::visit;
      void visit_Select(const Select* op) override {
        visit(op->condition);
        const RangeMap outer = ranges;
        narrow(op->condition);
        visit(op->true_value);
        ranges = outer;
        visit(op->false_value);
      }
      // `v >= c`, `v < c` (and the like) conjuncts of a condition bound v in its true branch.
      void narrow(const Expr& c) {
        if (auto* a = c.as<And>()) {
          narrow(a->a);
          narrow(a->b);
          return;
        }
        auto bound = [&](const Expr& var, const Expr& value, int64_t low, int64_t high) {
          auto* v = var.as<Variable>();
          const int64_t* k = as_const_int(value);
          if (!v || !k || !ranges.count(v)) return;
          Interval& r = ranges[v];
          if (low != Interval::neg_inf) r.min = std::max(r.min, *k + low);
          if (high != Interval::pos_inf) r.max = std::min(r.max, *k + high);
        };
        constexpr int64_t none_below = Interval::neg_inf, none_above = Interval::pos_inf;
        if (auto* x = c.as<GE>()) bound(x->a, x->b, 0, none_above);
        if (auto* x = c.as<GT>()) bound(x->a, x->b, 1, none_above);
        if (auto* x = c.as<LT>()) bound(x->a, x->b, none_below, -1);
        if (auto* x = c.as<LE>()) bound(x->a, x->b, none_below, 0);
      }
      void visit_TensorRead(const TensorRead* op) override {
        ExprVisitor::visit_TensorRead(op);
        if (!inside) return;
        std::vector<int64_t> need(op->indices.size(), 0);
        bool past = false;
        for (size_t k = 0; k < op->indices.size(); ++k) {
          const Interval iv = bounds_of(op->indices[k], ranges);
          if (iv.min < 0 || iv.max == Interval::pos_inf) {
            inside = false;
            return;
          }
          if (iv.max >= op->tensor->shape[k]) {
            need[k] = iv.max + 1;
            past = true;
          }
        }
        if (!past) return;
        const int si = self->st_.stage_of(op->tensor.get());
        if (si < 0 || op->tensor->op == OpKind::Placeholder) {
          inside = false;
          return;
        }
        const Stage& ts = self->st_.stages()[si];
        inside = ts.location != ComputeLocation::Root &&
                 self->reads_stay_inside(ts, need, depth + 1, must_pass);
        if (inside && must_pass && ts.location == ComputeLocation::At) {
          std::vector<int64_t>& m = (*must_pass)[si];
          m.resize(need.size(), 0);
          for (size_t k = 0; k < need.size(); ++k) m[k] = std::max(m[k], need[k]);
        }
      }
    } c;
    c.self = this;
    c.depth = depth;
    c.must_pass = must_pass;
    c.ranges = axis_ranges(ps, ends);
    c.visit(ps.op->body);
    return c.inside;
  }

  const sched::State& st_;
  std::vector<StageRegion> regions_;
  // Per stage, how far past its end (per axis) a consumer's box already reads it.
  std::unordered_map<int, std::vector<int64_t>> must_pass_;
  RangeMap ranges_;  // every prepared loop variable's range
};

}  // namespace detail

LOOM_DECL std::vector<StageRegion> infer_regions(const sched::State& state) {
  return detail::region_inferrer(state).run();
}

}  // namespace lower
LOOM_END_NAMESPACE
