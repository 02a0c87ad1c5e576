// Bodies of loom/lower/lower.hpp: from a schedule to a loop nest.
#include "loom/lower/lower.hpp"

#include "loom/ir/printer.hpp"
#include "loom/lower/bounds.hpp"

#include <functional>
#include <map>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail_lower {

using namespace ir;
using sched::ComputeLocation;
using sched::Stage;

struct stage_loops;

/// Lowering facts of one stage: where its values live and which box of the tensor it covers.
struct stage_info {
  Buffer buffer;
  std::vector<Expr> region_min;  ///< per tensor dimension; in enclosing loop variables
  std::vector<int64_t> region_extent;
  std::vector<int64_t> strides;  ///< of `buffer`, in elements (storage_align pads them)
  bool ready = false;
  std::shared_ptr<stage_loops> loops;              ///< its loop variables, once its region is known
  std::unordered_map<const Variable*, Expr> axes;  ///< op axes -> absolute coordinates
};

/// Loop structure of one stage for one region: extents of every iterator (recomputed from the
/// region, as splits of a smaller region have smaller outer loops), leaf loop variables, and each
/// iterator's value relative to the region's start.
struct stage_loops {
  const Stage* stage = nullptr;
  std::vector<int64_t> extent;  // by iterator id
  std::vector<Expr> var;        // by iterator id, leaves only
  std::vector<Expr> rel;        // by iterator id
  std::vector<Expr> guards;     // conditions for non-divisible splits (spatial)
  std::vector<Expr> reduce_guards;

  stage_loops(const Stage& s, const std::vector<int64_t>& root_extent) : stage(&s) {
    const size_t n = s.iters.size();
    extent.assign(n, -1);
    var.assign(n, Expr());
    rel.assign(n, Expr());
    for (size_t r = 0; r < root_extent.size(); ++r) extent[r] = root_extent[r];
    // Iterators are created in order: a split's or fuse's results always have larger ids than
    // their sources, so one pass in id order sees sources first.
    std::vector<int> split_of(n, -1), fuse_of(n, -1);
    for (size_t k = 0; k < s.splits.size(); ++k)
      for (int c : s.splits[k].children) split_of[c] = static_cast<int>(k);
    for (size_t k = 0; k < s.fuses.size(); ++k) fuse_of[s.fuses[k].result] = static_cast<int>(k);
    for (size_t id = root_extent.size(); id < n; ++id) {
      if (split_of[id] >= 0) {
        const auto& rel_ = s.splits[split_of[id]];
        // A part loops over no more tiles than the parent's (region's) extent needs: a
        // stage computed inside a tile of its consumer covers one tile, so its outer tile
        // loops shrink to one iteration instead of running guarded. Shrinking keeps the
        // mixed-radix values: a part only shrinks below its length when every part outside it
        // has a single iteration (value 0), whatever its radix.
        int64_t inner = 1;
        bool seen = false;
        for (int c : rel_.children) {
          if (seen) inner *= s.iters[c].extent;
          seen = seen || c == static_cast<int>(id);
        }
        const int64_t needed = (extent[rel_.parent] + inner - 1) / inner;
        extent[id] = static_cast<int>(id) == rel_.children[0]
                         ? needed
                         : std::min<int64_t>(s.iters[id].extent, needed);
      } else if (fuse_of[id] >= 0) {
        int64_t e = 1;
        for (int f : s.fuses[fuse_of[id]].fused) e *= extent[f];
        extent[id] = e;
      }
    }
    for (int leaf : s.leaves) rel[leaf] = var[leaf] = Variable::make(s.iters[leaf].name);
    // Values flow from the leaves back to the roots: a split parent is the mixed-radix number of
    // its children, a fused iterator's parts are digits of the fused value.
    std::vector<std::pair<int, Expr>> tails;
    for (size_t r = 0; r < root_extent.size(); ++r)
      sched::iterator_value(s, static_cast<int>(r), extent, rel, tails);
    for (auto& [id, g] : tails)
      (s.iters[id].kind == sched::IterKind::Spatial ? guards : reduce_guards).push_back(g);
  }
};

class lowering {
 public:
  lowering(const sched::State& st, const LowerOptions& opt) : st_(st), opt_(opt) {
    info_.resize(st.stages().size());
  }

  LoweredFunc run(const std::string& name) {
    check_complete();
    LoweredFunc f;
    f.name = name;
    // Kernel arguments, in the DAG's order.
    auto args = st_.dag().arguments();
    for (size_t a = 0; a < args.size(); ++a) {
      int si = st_.stage_of(args[a].get());
      LOOM_INTERNAL_CHECK(si >= 0) << "argument " << args[a].name() << " has no stage";
      Buffer b = make_buffer(args[a].name(), args[a].dtype(), args[a].shape(), MemoryScope::Global,
                             static_cast<int>(a));
      f.args.push_back(b);
      set_full(si, b);
    }
    std::vector<Stmt> body;
    std::vector<Buffer> root_allocs;
    for (size_t si = 0; si < st_.stages().size(); ++si) {
      const Stage& s = st_.stages()[si];
      if (s.is_placeholder || s.location != ComputeLocation::Root) continue;
      if (!info_[si].ready) {
        Buffer b = make_buffer(s.name, s.op.dtype(), s.op.shape(), MemoryScope::Global);
        set_full(static_cast<int>(si), b);
        if (!s.storage_aligns.empty()) {
          // Padded rows: the buffer holds the padded size, indexed through the padded strides.
          stage_info& in = info_[si];
          in.strides = dense_strides(in.region_extent, s.storage_aligns);
          in.buffer = make_buffer(s.name, s.op.dtype(), {in.strides[0] * in.region_extent[0]},
                                  MemoryScope::Global);
        }
        root_allocs.push_back(info_[si].buffer);
      }
      body.push_back(emit_root(static_cast<int>(si)));
    }
    Stmt s = Block::make(body);
    for (auto it = root_allocs.rbegin(); it != root_allocs.rend(); ++it) s = Allocate::make(*it, s);
    if (opt_.simplify) s = simplify_loops(s);
    if (opt_.unroll) s = unroll_loops(s, opt_.max_unroll_extent);
    if (opt_.partition) s = partition_loops(s);
    if (opt_.simplify && opt_.partition) s = simplify_loops(s);
    if (opt_.vectorize) s = vectorize_loops(s);
    // The last pass cleans up after unrolling, partitioning and vectorizing; with all three off
    // it would only repeat the first (simplify_loops is idempotent on lowering's nests), which
    // feature extraction, lowering thousands of candidates, cannot afford.
    if (opt_.simplify && (opt_.unroll || opt_.partition || opt_.vectorize)) s = simplify_loops(s);
    f.body = s;
    return f;
  }

 private:
  void check_complete() {
    for (auto& s : st_.stages())
      for (int leaf : s.leaves)
        LOOM_USER_CHECK(s.iters[leaf].extent > 0, "loom.lower.E410")
            << "stage '" << s.name << "' has loop '" << s.iters[leaf].name
            << "' with an unknown extent: the schedule is a sketch; fill its split lengths first";
  }

  static std::vector<int64_t> dense_strides(const std::vector<int64_t>& shape,
                                            const std::vector<sched::StorageAlign>& aligns) {
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) {
      int64_t s = strides[d] * shape[d];
      for (auto& a : aligns)
        if (a.axis == static_cast<int>(d) - 1) {
          // Pad so that stride % factor == offset (TVM storage_align).
          int64_t r = ((s - a.offset) % a.factor + a.factor) % a.factor;
          if (r != 0) s += a.factor - r;
        }
      strides[d - 1] = s;
    }
    return strides;
  }

  void set_full(int si, Buffer b) {
    stage_info& in = info_[si];
    in.buffer = std::move(b);
    const auto& shape = in.buffer->shape;
    in.region_min.assign(shape.size(), Expr(int64_t{0}));
    in.region_extent = shape;
    in.strides = dense_strides(shape, {});
    in.ready = true;
  }

  // Flat element offset of `idx` (absolute tensor coordinates) in stage si's buffer.
  Expr flat_index(int si, const std::vector<Expr>& idx) {
    const stage_info& in = info_[si];
    Expr off;
    for (size_t d = 0; d < idx.size(); ++d) {
      Expr term = idx[d];
      if (!is_const_int(in.region_min[d], 0)) term = term - in.region_min[d];
      if (in.strides[d] != 1) term = term * Expr(in.strides[d]);
      off = off.defined() ? off + term : term;
    }
    return off.defined() ? off : Expr(int64_t{0});
  }

  // A stage's body with inlined stages substituted and reads turned into loads.
  class body_lowerer : public ExprMutator {
   public:
    explicit body_lowerer(lowering& l) : l_(l) {}

   protected:
    Expr visit_TensorRead(const TensorRead* op, const Expr& self) override {
      Expr e = ExprMutator::visit_TensorRead(op, self);
      auto* r = e.as<TensorRead>();
      int si = l_.st_.stage_of(r->tensor.get());
      LOOM_INTERNAL_CHECK(si >= 0) << "read of tensor '" << r->tensor->name << "' with no stage";
      const Stage& s = l_.st_.stages()[si];
      if (s.location == ComputeLocation::Inlined) {
        std::unordered_map<const Variable*, Expr> sub;
        for (size_t d = 0; d < s.op->axes.size(); ++d)
          sub[s.op->axes[d].variable()] = r->indices[d];
        return mutate(substitute(s.op->body, sub));
      }
      LOOM_INTERNAL_CHECK(l_.info_[si].ready)
          << "stage '" << s.name << "' is read before it has a buffer";
      return Load::make(l_.info_[si].buffer, l_.flat_index(si, r->indices));
    }

   private:
    lowering& l_;
  };

  // Reads of stage `p` in stage `t`'s body, with inlined stages expanded (as index lists).
  std::vector<std::vector<Expr>> reads_of(int t, int p) {
    std::vector<std::vector<Expr>> out;
    std::function<void(const Expr&)> walk = [&](const Expr& body) {
      post_order_visit(body, [&](const Expr& e) {
        auto* r = e.as<TensorRead>();
        if (!r) return;
        int si = st_.stage_of(r->tensor.get());
        if (si == p) {
          out.push_back(r->indices);
        } else if (si >= 0 && st_.stages()[si].location == ComputeLocation::Inlined) {
          const Stage& s = st_.stages()[si];
          std::unordered_map<const Variable*, Expr> sub;
          for (size_t d = 0; d < s.op->axes.size(); ++d)
            sub[s.op->axes[d].variable()] = r->indices[d];
          walk(substitute(s.op->body, sub));
        }
      });
    };
    walk(st_.stages()[t].op->body);
    return out;
  }

  // Loop variables and axis coordinates of stage si, whose region is known.
  void prepare(int si) {
    const Stage& s = st_.stages()[si];
    stage_info& in = info_[si];
    const Reduce* red = s.op->body.as<Reduce>();
    std::vector<int64_t> root_extent = in.region_extent;
    if (red)
      for (auto& a : red->axes) root_extent.push_back(a.extent);
    in.loops = std::make_shared<stage_loops>(s, root_extent);
    const stage_loops& loops = *in.loops;
    in.axes.clear();
    for (size_t d = 0; d < s.op->axes.size(); ++d) {
      Expr v = loops.rel[d];
      if (!is_const_int(in.region_min[d], 0)) v = in.region_min[d] + v;
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
      const stage_loops& l = *info_[si].loops;
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
        const stage_loops& l = *info_[si].loops;
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
        LOOM_USER_CHECK(cs.location == ComputeLocation::At && info_[cur].loops, "loom.lower.E411")
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
          Expr ex = simplify(substitute(idx[d], info_[x].axes), ranges_);
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
    stage_info& in = info_[p];
    in.region_min.assign(shape.size(), Expr(int64_t{0}));
    in.region_extent = shape;
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
      if (ev >= shape[d]) continue;
      // Keep the constant-size box inside the tensor: computing a few extra valid points is
      // harmless, reading outside the producer's inputs is not. Where the producer's reads
      // along d cannot leave its inputs (a weight packed into whole, zero-padded tiles), the
      // box starts at the tile instead: shifted back, a tile straddles two packed tiles and its
      // reads are no longer contiguous (the odd GEMM with B packed: 12 GFLOP/s, 94 as is).
      const Interval start = bounds_of(mn, ranges_);
      if (start.min >= 0 && start.max != Interval::pos_inf &&
          reads_stay_inside(ps, d, start.max + ev)) {
        in.region_min[d] = mn;
      } else {
        in.region_min[d] = simplify(min(max(mn, Expr(int64_t{0})), Expr(shape[d] - ev)), ranges_);
      }
      in.region_extent[d] = std::max<int64_t>(ev, 1);
    }
    in.strides = dense_strides(in.region_extent, ps.storage_aligns);
    int64_t size = in.strides.empty() ? 1 : in.strides[0] * in.region_extent[0];
    const int vector_axis = vectorized_axis(ps);
    if (vector_axis >= 0 && ps.storage_aligns.empty() && ps.scope != MemoryScope::Shared &&
        vector_axis + 1 < static_cast<int>(in.region_extent.size()) &&
        in.region_extent[static_cast<size_t>(vector_axis)] > 1) {
      // The vectorized axis is the buffer's innermost dimension, whatever its place among the
      // tensor's axes: the stage's vector loads and stores stay contiguous (an NCHW convolution
      // vectorized along its output channels accumulates into a tile whose channel stride
      // would otherwise be the tile's rows times columns), and SROA can keep the tile in
      // registers. The buffer is private to this loop nest, so its layout is ours to choose.
      int64_t stride = in.region_extent[static_cast<size_t>(vector_axis)];
      in.strides[static_cast<size_t>(vector_axis)] = 1;
      for (size_t d = in.region_extent.size(); d-- > 0;)
        if (static_cast<int>(d) != vector_axis) {
          in.strides[d] = stride;
          stride *= in.region_extent[d];
        }
      size = stride;
    }
    std::vector<int64_t> alloc_shape = in.region_extent;
    if (!ps.storage_aligns.empty()) alloc_shape = {size};
    in.buffer = make_buffer(ps.name, ps.op.dtype(), alloc_shape, ps.scope);
    in.ready = true;
  }

  // The axis of stage ps whose innermost tile is its innermost loop, vectorized; -1 when the
  // innermost loop is not vectorized, fused, or an outer tile.
  static int vectorized_axis(const Stage& ps) {
    if (ps.leaves.empty()) return -1;
    int id = ps.leaves.back();
    if (ps.iters[id].annotation != sched::Annotation::Vectorized ||
        ps.iters[id].kind != sched::IterKind::Spatial)
      return -1;
    for (bool climbed = true; climbed;) {
      climbed = false;
      for (const sched::SplitRelation& sp : ps.splits)
        if (!sp.children.empty() && sp.children.back() == id) {
          id = sp.parent;
          climbed = true;
          break;
        }
    }
    for (const sched::FuseRelation& f : ps.fuses)
      if (f.result == id) return -1;
    return id < ps.num_spatial_axes ? id : -1;
  }

  // Whether stage ps may compute axis d up to `end` (exclusive), past its tensor's end: every
  // read along d is of a kernel input and stays inside it, whatever the other axes are.
  bool reads_stay_inside(const Stage& ps, size_t d, int64_t end) const {
    if (!ps.op.defined() || ps.op.is_placeholder()) return false;
    const Variable* along = ps.op->axes[d].variable();
    RangeMap all;
    for (size_t k = 0; k < ps.op->axes.size(); ++k)
      all[ps.op->axes[k].variable()] = Interval::range(k == d ? end : ps.op->axes[k].extent);
    if (auto* red = ps.op->body.as<Reduce>())
      for (auto& a : red->axes) all[a.variable()] = Interval::range(a.extent);
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

  // A root stage and everything computed inside it. Regions are inferred consumers first (the
  // stage list is topological, so in decreasing index order).
  Stmt emit_root(int si) {
    prepare(si);
    auto desc = descendants(si);
    std::sort(desc.rbegin(), desc.rend());
    for (int d : desc) {
      infer_region(d);
      prepare(d);
    }
    return emit_stage(si);
  }

  static Stmt guarded(const std::vector<Expr>& guards, Stmt s) {
    if (guards.empty()) return s;
    Expr c = guards[0];
    for (size_t i = 1; i < guards.size(); ++i) c = c && guards[i];
    return IfThenElse::make(c, s);
  }

  // The position of the loop of a reduction that runs across GPU threads, when the stage can
  // be lowered in the cross-thread form (one thread-bound reduction loop, nothing but reduction
  // loops from the first on, no stage computed inside them); -1 otherwise, when the reduction
  // is lowered as it reads (lower/gpu.hpp reduces across threads once per iteration then).
  static int cross_thread_leaf(const Stage& s, int first_reduce,
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

  Stmt emit_stage(int si) {
    const Stage& s = st_.stages()[si];
    stage_info& in = info_[si];
    const ir::Tensor& op = s.op;
    const Reduce* red = op->body.as<Reduce>();
    const stage_loops& loops = *in.loops;
    const auto& axes = in.axes;

    // Stages computed inside this one, by leaf position (their regions are known already).
    const int n = static_cast<int>(s.leaves.size());
    std::vector<std::vector<Stmt>> attached(n);
    std::vector<std::vector<Buffer>> attached_buffers(n);
    for (int p = 0; p < n; ++p)
      for (int a : st_.attached_at(s.name, s.leaves[p])) {
        attached[p].push_back(emit_stage(a));
        attached_buffers[p].push_back(info_[a].buffer);
      }

    body_lowerer bl(*this);
    std::vector<Expr> out_idx;
    for (auto& a : op->axes) out_idx.push_back(axes.at(a.variable()));
    Expr offset = flat_index(si, out_idx);

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
      Expr value = bl.mutate(substitute(op->body, axes));
      nest = guarded(loops.guards, Store::make(in.buffer, offset, value));
      for (int p = n; p-- > 0;) nest = wrap_loop(p, nest, true);
    } else {
      Expr src = bl.mutate(substitute(red->source, axes));
      Expr cur = Load::make(in.buffer, offset);
      std::vector<Expr> g = loops.guards;
      g.insert(g.end(), loops.reduce_guards.begin(), loops.reduce_guards.end());
      if (red->condition.defined()) g.push_back(bl.mutate(substitute(red->condition, axes)));
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
        Stmt update = guarded(g, Store::make(in.buffer, offset, reduce_combine(red->op, cur, src)));
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
            guarded(g, Store::make(acc, Expr(int64_t{0}), reduce_combine(red->op, acc0, src)));
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

  // Marks the innermost serial loops Unrolled while the number of statement instances under
  // them stays within max_step (TVM's auto_unroll_max_step).
  static Stmt auto_unroll(const Stmt& s, int max_step) {
    int64_t steps = 0;
    return auto_unroll_rec(s, max_step, steps);
  }
  static Stmt auto_unroll_rec(const Stmt& s, int max_step, int64_t& steps) {
    if (auto* f = s.as<For>()) {
      int64_t inner = 0;
      Stmt body = auto_unroll_rec(f->body, max_step, inner);
      auto* e = as_const_int(f->extent);
      steps = e ? *e * inner : INT64_MAX / 4;
      ForKind k = f->for_kind;
      if (k == ForKind::Serial && e && steps <= max_step) k = ForKind::Unrolled;
      if (k == f->for_kind && body.same_as(f->body)) return s;
      return For::make(f->var, f->min, f->extent, k, body);
    }
    if (auto* b = s.as<Block>()) {
      std::vector<Stmt> out;
      steps = 0;
      for (auto& x : b->stmts) {
        int64_t k = 0;
        out.push_back(auto_unroll_rec(x, max_step, k));
        steps += k;
      }
      return Block::make(out);
    }
    if (auto* a = s.as<Allocate>()) {
      Stmt body = auto_unroll_rec(a->body, max_step, steps);
      return Allocate::make(a->buffer, body);
    }
    if (auto* i = s.as<IfThenElse>()) {
      int64_t k1 = 0, k2 = 0;
      Stmt t = auto_unroll_rec(i->then_case, max_step, k1);
      Stmt e = i->else_case.defined() ? auto_unroll_rec(i->else_case, max_step, k2) : Stmt();
      steps = k1 + k2;
      return IfThenElse::make(i->condition, t, e);
    }
    steps = 1;
    return s;
  }

  const sched::State& st_;
  const LowerOptions& opt_;
  std::vector<stage_info> info_;
  RangeMap ranges_;
};

}  // namespace detail_lower

LOOM_DECL ir::LoweredFunc lower(const sched::State& state, const std::string& name,
                                const LowerOptions& options) {
  return detail_lower::lowering(state, options).run(name);
}

}  // namespace lower
LOOM_END_NAMESPACE
