// Body of loom/lower/build_loop_nests.hpp.
#include "loom/lower/build_loop_nests.hpp"

#include "loom/lower/auto_unroll.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

using namespace ir;
using sched::ComputeLocation;
using sched::Stage;

// Reads of stages turned into loads from their buffers.
class read_loader : public ExprMutator {
 public:
  read_loader(const sched::State& st, const BufferPlan& buffers) : st_(st), buffers_(buffers) {}

 protected:
  Expr visit_TensorRead(const TensorRead* op, const Expr& self) override {
    Expr e = ExprMutator::visit_TensorRead(op, self);
    auto* r = e.as<TensorRead>();
    const int si = st_.stage_of(r->tensor.get());
    LOOM_INTERNAL_CHECK(si >= 0) << "read of tensor '" << r->tensor->name << "' with no stage";
    const StageBuffer& b = buffers_.stages[si];
    LOOM_INTERNAL_CHECK(b.buffer) << "stage '" << st_.stages()[si].name
                                  << "' is read but has no buffer";
    return Load::make(b.buffer, b.flat_index(r->indices));
  }

 private:
  const sched::State& st_;
  const BufferPlan& buffers_;
};

inline Stmt guarded(const std::vector<Expr>& guards, Stmt s) {
  if (guards.empty()) return s;
  Expr c = guards[0];
  for (size_t i = 1; i < guards.size(); ++i) c = c && guards[i];
  return IfThenElse::make(c, s);
}

// The position of the loop of a reduction that runs across GPU threads, when the stage can be
// lowered in the cross-thread form (one thread-bound reduction loop, nothing but reduction loops
// from the first on, no stage computed inside them); -1 otherwise, when the reduction is
// lowered as it reads (lower/gpu.hpp reduces across threads once per iteration then).
inline int cross_thread_leaf(const Stage& s, int first_reduce,
                             const std::vector<std::vector<Stmt>>& attached) {
  int found = -1;
  for (int p = first_reduce; p < static_cast<int>(s.leaves.size()); ++p) {
    const sched::Iterator& it = s.leaf(p);
    if (it.kind != sched::IterKind::Reduce || !attached[p].empty()) return -1;
    const ForKind k = it.annotation;
    if (k == ForKind::ThreadIdxX || k == ForKind::ThreadIdxY || k == ForKind::ThreadIdxZ) {
      if (found >= 0) return -1;
      found = p;
    }
  }
  return found;
}

class nest_builder {
 public:
  nest_builder(const sched::State& st, const std::vector<Expr>& bodies,
               const std::vector<StageRegion>& regions, const BufferPlan& buffers)
      : st_(st), bodies_(bodies), regions_(regions), buffers_(buffers), loader_(st, buffers) {}

  Stmt run() {
    std::vector<Stmt> body;
    for (size_t si = 0; si < st_.stages().size(); ++si) {
      const Stage& s = st_.stages()[si];
      if (s.is_placeholder || s.location != ComputeLocation::Root) continue;
      body.push_back(stage_nest(static_cast<int>(si)));
    }
    Stmt s = Block::make(body);
    for (auto it = buffers_.root.rbegin(); it != buffers_.root.rend(); ++it)
      s = Allocate::make(*it, s);
    return s;
  }

 private:
  // The stage's body at its coordinates, its reads loaded.
  Expr lowered(const Expr& e, const std::unordered_map<const Variable*, Expr>& axes) {
    return loader_.mutate(substitute(e, axes));
  }

  // The nest of stage si and of the stages computed inside it.
  Stmt stage_nest(int si) {
    const Stage& s = st_.stages()[si];
    const StageBuffer& in = buffers_.stages[si];
    const ir::Tensor& op = s.op;
    const Reduce* red = bodies_[si].as<Reduce>();
    const StageLoops& loops = *regions_[si].loops;
    const auto& axes = regions_[si].axes;

    // Stages computed inside this one, by leaf position.
    const int n = static_cast<int>(s.leaves.size());
    std::vector<std::vector<Stmt>> attached(n);
    std::vector<std::vector<Buffer>> attached_buffers(n);
    for (int p = 0; p < n; ++p)
      for (int a : st_.attached_at(s.name, s.leaves[p])) {
        attached[p].push_back(stage_nest(a));
        attached_buffers[p].push_back(buffers_.stages[a].buffer);
      }

    std::vector<Expr> out_idx;
    for (auto& a : op->axes) out_idx.push_back(axes.at(a.variable()));
    Expr offset = in.flat_index(out_idx);

    // Position of the first reduction loop: loops before it are shared by init and update.
    int first_reduce = n;
    for (int p = 0; p < n; ++p)
      if (s.iters[s.leaves[p]].kind != sched::IterKind::Spatial) {
        first_reduce = p;
        break;
      }

    auto wrap_loop = [&](int p, Stmt body, bool with_attached) {
      int id = s.leaves[p];
      if (with_attached && !attached[p].empty()) {
        std::vector<Stmt> seq = attached[p];
        seq.push_back(body);
        body = Block::make(seq);
        for (auto it = attached_buffers[p].rbegin(); it != attached_buffers[p].rend(); ++it)
          body = Allocate::make(*it, body);
      }
      return For::make(loops.var[id], Expr(int64_t{0}), Expr(loops.extent[id]),
                       s.iters[id].annotation, body);
    };

    Stmt nest;
    if (!red) {
      Expr value = lowered(bodies_[si], axes);
      std::vector<Expr> guards = loops.guards;
      // A copy of a kernel input past the input's end (infer_regions.hpp) skips those points.
      if (regions_[si].skip_past_end)
        for (size_t d = 0; d < out_idx.size(); ++d)
          if (regions_[si].extent[d] > op.shape()[d] || !is_const_int(regions_[si].min[d], 0))
            guards.push_back(out_idx[d] < Expr(op.shape()[d]));
      nest = guarded(guards, Store::make(in.buffer, offset, value));
      for (int p = n; p-- > 0;) nest = wrap_loop(p, nest, true);
    } else {
      Expr src = lowered(red->source, axes);
      Expr cur = Load::make(in.buffer, offset);
      std::vector<Expr> g = loops.guards;
      g.insert(g.end(), loops.reduce_guards.begin(), loops.reduce_guards.end());
      // The reduction's condition may read memory (a padded input, a stage) at the indices the
      // bounds guards keep in range, and the operands of && have no evaluation order (IR
      // contract): it gets an IfThenElse of its own, inside the guards.
      const Expr cond = red->condition.defined() ? lowered(red->condition, axes) : Expr();
      const auto guarded_update = [&](Stmt store) {
        return guarded(g, cond.defined() ? IfThenElse::make(cond, std::move(store)) : store);
      };
      Stmt init = guarded(loops.guards,
                          Store::make(in.buffer, offset, reduce_identity(red->op, op.dtype())));
      for (int p = n; p-- > first_reduce;) {
        int id = s.leaves[p];
        if (s.iters[id].kind != sched::IterKind::Spatial) continue;
        // The init nest keeps the spatial loops' annotations except vectorize of loops the
        // vectorizer can handle anyway; it never holds attached stages.
        init = For::make(loops.var[id], Expr(int64_t{0}), Expr(loops.extent[id]),
                         s.iters[id].annotation, init);
      }
      const int across = cross_thread_leaf(s, first_reduce, attached);
      if (across < 0) {
        Stmt update =
            guarded_update(Store::make(in.buffer, offset, reduce_combine(red->op, cur, src)));
        for (int p = n; p-- > first_reduce;) update = wrap_loop(p, update, true);
        nest = Block::make({init, update});
      } else {
        // A reduction across threads (lower/gpu.hpp): the thread loop goes outside the other
        // reduction loops, each of its iterations sums into an accumulator of its own, and the
        // accumulators meet in one combine into the output, which the GPU lowering turns into
        // one AllReduce per output element instead of one per iteration of the outer loops.
        const int id = s.leaves[across];
        Buffer acc = make_buffer(s.name + ".acc", op.dtype(), {1}, MemoryScope::Local);
        Expr acc0 = Load::make(acc, Expr(int64_t{0}));
        Stmt partial =
            guarded_update(Store::make(acc, Expr(int64_t{0}), reduce_combine(red->op, acc0, src)));
        for (int p = n; p-- > first_reduce;)
          if (p != across) partial = wrap_loop(p, partial, false);
        Stmt update = Allocate::make(
            acc,
            Block::make(
                {Store::make(acc, Expr(int64_t{0}), reduce_identity(red->op, op.dtype())), partial,
                 guarded(loops.guards,
                         Store::make(in.buffer, offset, reduce_combine(red->op, cur, acc0)))}));
        update = For::make(loops.var[id], Expr(int64_t{0}), Expr(loops.extent[id]),
                           s.iters[id].annotation, update);
        // The output of a kernel's root stage lives in global memory: one thread starts it
        // (a thread loop of one iteration), as one thread will finish it.
        if (s.location == ComputeLocation::Root || s.scope == MemoryScope::Shared)
          init = For::make(Variable::make(s.iters[id].name + ".init"), Expr(int64_t{0}),
                           Expr(int64_t{1}), s.iters[id].annotation, init);
        nest = Block::make({init, update});
      }
      for (int p = first_reduce; p-- > 0;) nest = wrap_loop(p, nest, true);
    }
    if (s.auto_unroll_max_step > 0) nest = auto_unroll(nest, s.auto_unroll_max_step);
    return nest;
  }

  const sched::State& st_;
  const std::vector<Expr>& bodies_;
  const std::vector<StageRegion>& regions_;
  const BufferPlan& buffers_;
  read_loader loader_;
};

}  // namespace detail

LOOM_DECL ir::Stmt build_loop_nests(const sched::State& state, const std::vector<ir::Expr>& bodies,
                                    const std::vector<StageRegion>& regions,
                                    const BufferPlan& buffers) {
  return detail::nest_builder(state, bodies, regions, buffers).run();
}

}  // namespace lower
LOOM_END_NAMESPACE
