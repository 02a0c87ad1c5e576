// The transform steps: validation and application (part of loom/sched/state.hpp).
#include "loom/sched/state.hpp"

#include <functional>

LOOM_BEGIN_NAMESPACE
namespace sched {

namespace detail {
inline std::string fmt_iters(const Stage& s) {
  std::ostringstream os;
  for (size_t i = 0; i < s.leaves.size(); ++i)
    os << (i ? ", " : "") << s.leaf(static_cast<int>(i)).name;
  return os.str();
}
}  // namespace detail

/// Applies one step to a state. Every function validates before it edits anything, so a step that
/// throws leaves the state unchanged.
struct step_applier {
  State& st;

  Stage& stage(const std::string& name, const char* step) {
    for (auto& s : st.stages_)
      if (s.name == name) return s;
    LOOM_USER_FAIL("loom.sched.E201")
        << step << ": no stage named '" << name << "' in this schedule";
    return st.stages_[0];
  }
  Stage& compute_stage(const std::string& name, const char* step) {
    Stage& s = stage(name, step);
    LOOM_USER_CHECK(!s.is_placeholder, "loom.sched.E202")
        << step << ": stage '" << name << "' is a placeholder (an input) and has no loops";
    LOOM_USER_CHECK(s.location != ComputeLocation::Inlined, "loom.sched.E203")
        << step << ": stage '" << name << "' was inlined; compute_root it first";
    return s;
  }
  static void check_iter(const Stage& s, int iter, const char* step) {
    LOOM_USER_CHECK(iter >= 0 && iter < static_cast<int>(s.leaves.size()), "loom.sched.E204")
        << step << ": stage '" << s.name << "' has " << s.leaves.size() << " loops ("
        << detail::fmt_iters(s) << "), there is no loop " << iter
        << " (it may have been fused or split away)";
  }

  // Re-attach stages that were computed at `old_iter` of `s` to `new_iter`.
  void move_attachments(const Stage& s, int old_iter, int new_iter) {
    for (auto& o : st.stages_)
      if (o.location == ComputeLocation::At && o.attach_stage == s.name &&
          o.attach_iter == old_iter)
        o.attach_iter = new_iter;
  }

  void split_impl(Stage& s, int iter, const std::vector<std::optional<int64_t>>& lengths,
                  const char* step) {
    check_iter(s, iter, step);
    LOOM_USER_CHECK(!lengths.empty(), "loom.sched.E205") << step << ": no split lengths given";
    const int id = s.leaves[iter];
    const Iterator parent = s.iters[id];
    LOOM_USER_CHECK(parent.annotation == Annotation::Serial, "loom.sched.E206")
        << step << ": loop '" << parent.name << "' of stage '" << s.name << "' is annotated "
        << annotation_name(parent.annotation) << "; split it before annotating";
    int64_t inner = 1;
    bool known = parent.extent > 0;
    for (auto& l : lengths) {
      if (!l) {
        known = false;
        continue;
      }
      LOOM_USER_CHECK(*l > 0, "loom.sched.E207")
          << step << ": split length " << *l << " of loop '" << parent.name << "' must be positive";
      inner *= *l;
    }
    SplitRelation rel{id, {}};
    std::vector<Iterator> children;
    children.push_back({parent.name + ".0", known ? (parent.extent + inner - 1) / inner : -1,
                        parent.kind, Annotation::Serial});
    for (size_t i = 0; i < lengths.size(); ++i)
      children.push_back({parent.name + "." + std::to_string(i + 1), lengths[i] ? *lengths[i] : -1,
                          parent.kind, Annotation::Serial});
    std::vector<int> ids;
    for (auto& c : children) {
      ids.push_back(static_cast<int>(s.iters.size()));
      s.iters.push_back(c);
    }
    rel.children = ids;
    s.splits.push_back(rel);
    s.leaves.erase(s.leaves.begin() + iter);
    s.leaves.insert(s.leaves.begin() + iter, ids.begin(), ids.end());
    // A stage computed at the split loop stays computed per point of it: at the innermost part.
    move_attachments(s, id, ids.back());
  }

  void operator()(const SplitStep& x) {
    Stage& s = compute_stage(x.stage, "split");
    check_iter(s, x.iter, "split");
    const int64_t extent = s.leaf(x.iter).extent;
    LOOM_USER_CHECK(x.extent <= 0 || extent <= 0 || x.extent == extent, "loom.sched.E208")
        << "split: loop '" << s.leaf(x.iter).name << "' of stage '" << s.name << "' has extent "
        << extent << " but the step was recorded for extent " << x.extent
        << " (the history does not match this computation)";
    split_impl(s, x.iter, x.lengths, "split");
  }

  const SplitStep& src_split(int src, const char* step) {
    LOOM_USER_CHECK(src >= 0 && src < static_cast<int>(st.steps_.size()) &&
                        std::holds_alternative<SplitStep>(st.steps_[src]),
                    "loom.sched.E209")
        << step << ": step " << src << " is not a split step of this history";
    return std::get<SplitStep>(st.steps_[src]);
  }

  void operator()(const FollowSplitStep& x) {
    const SplitStep& src = src_split(x.src_step, "follow_split");
    LOOM_USER_CHECK(x.n_split >= 1 && x.n_split <= static_cast<int>(src.lengths.size()),
                    "loom.sched.E210")
        << "follow_split: n_split " << x.n_split << " must be in [1, " << src.lengths.size()
        << "] for step " << x.src_step;
    // The first n_split - 1 lengths of the source, then the product of the rest (Ansor).
    std::vector<std::optional<int64_t>> lengths(src.lengths.begin(),
                                                src.lengths.begin() + (x.n_split - 1));
    std::optional<int64_t> last = 1;
    for (size_t j = x.n_split - 1; j < src.lengths.size(); ++j)
      last =
          src.lengths[j] && last ? std::optional<int64_t>(*last * *src.lengths[j]) : std::nullopt;
    lengths.push_back(last);
    split_impl(compute_stage(x.stage, "follow_split"), x.iter, lengths, "follow_split");
  }

  void operator()(const FollowFusedSplitStep& x) {
    std::optional<int64_t> factor = 1;
    for (int src : x.src_steps) {
      const SplitStep& s = src_split(src, "follow_fused_split");
      LOOM_USER_CHECK(x.level >= 0 && x.level < static_cast<int>(s.lengths.size()),
                      "loom.sched.E211")
          << "follow_fused_split: level " << x.level << " out of range for step " << src;
      factor = factor && s.lengths[x.level] ? std::optional<int64_t>(*factor * *s.lengths[x.level])
                                            : std::nullopt;
    }
    Stage& s = compute_stage(x.stage, "follow_fused_split");
    check_iter(s, x.iter, "follow_fused_split");
    std::optional<int64_t> len = factor;
    if (!x.factor_or_nparts && factor) {  // nparts: the outer loop gets `factor` iterations
      int64_t e = s.leaf(x.iter).extent;
      len = (e + *factor - 1) / *factor;
    }
    split_impl(s, x.iter, {len}, "follow_fused_split");
  }

  void operator()(const FuseStep& x) {
    Stage& s = compute_stage(x.stage, "fuse");
    LOOM_USER_CHECK(!x.iters.empty(), "loom.sched.E212") << "fuse: no loops given";
    for (size_t i = 0; i < x.iters.size(); ++i) {
      check_iter(s, x.iters[i], "fuse");
      LOOM_USER_CHECK(i == 0 || x.iters[i] == x.iters[i - 1] + 1, "loom.sched.E213")
          << "fuse: loops " << detail::join(x.iters) << " of stage '" << s.name
          << "' are not consecutive in the loop order (" << detail::fmt_iters(s)
          << "); reorder them first";
      LOOM_USER_CHECK(s.leaf(x.iters[i]).annotation == Annotation::Serial, "loom.sched.E214")
          << "fuse: loop '" << s.leaf(x.iters[i]).name << "' is annotated; fuse before annotating";
    }
    for (int p : x.iters)
      LOOM_USER_CHECK(s.leaf(p).kind == s.leaf(x.iters[0]).kind, "loom.sched.E236")
          << "fuse: loops '" << s.leaf(x.iters[0]).name << "' and '" << s.leaf(p).name
          << "' of stage '" << s.name << "' mix spatial and reduction iterators; fuse each kind "
          << "separately";
    if (x.iters.size() == 1) return;
    Iterator fused{"", 1, s.leaf(x.iters[0]).kind, Annotation::Serial};
    FuseRelation rel;
    for (int p : x.iters) {
      const Iterator& it = s.leaf(p);
      fused.name += (fused.name.empty() ? "" : "@") + it.name;
      fused.extent = fused.extent > 0 && it.extent > 0 ? fused.extent * it.extent : -1;
      rel.fused.push_back(s.leaves[p]);
    }
    rel.result = static_cast<int>(s.iters.size());
    s.iters.push_back(fused);
    s.fuses.push_back(rel);
    s.leaves.erase(s.leaves.begin() + x.iters.front(), s.leaves.begin() + x.iters.back() + 1);
    s.leaves.insert(s.leaves.begin() + x.iters.front(), rel.result);
    for (int id : rel.fused) move_attachments(s, id, rel.result);
  }

  void operator()(const ReorderStep& x) {
    Stage& s = compute_stage(x.stage, "reorder");
    std::vector<int> sorted = x.order;
    std::sort(sorted.begin(), sorted.end());
    bool perm = sorted.size() == s.leaves.size();
    for (size_t i = 0; perm && i < sorted.size(); ++i) perm = sorted[i] == static_cast<int>(i);
    LOOM_USER_CHECK(perm, "loom.sched.E215")
        << "reorder: " << detail::join(x.order) << " is not a permutation of the "
        << s.leaves.size() << " loops of stage '" << s.name << "' (" << detail::fmt_iters(s) << ")";
    std::vector<int> leaves;
    for (int p : x.order) leaves.push_back(s.leaves[p]);
    s.leaves = leaves;
  }

  void operator()(const AnnotationStep& x) {
    Stage& s = compute_stage(x.stage, "annotate");
    check_iter(s, x.iter, "annotate");
    Iterator& it = s.iters[s.leaves[x.iter]];
    const char* what = annotation_name(x.annotation);
    LOOM_USER_CHECK(it.annotation == Annotation::Serial || it.annotation == x.annotation ||
                        x.annotation == Annotation::Serial,
                    "loom.sched.E216")
        << "annotate: loop '" << it.name << "' of stage '" << s.name << "' is already "
        << annotation_name(it.annotation) << "; it can't also be " << what;
    if (x.annotation == Annotation::Parallel)
      LOOM_USER_CHECK(it.kind == IterKind::Spatial, "loom.sched.E217")
          << "annotate: loop '" << it.name << "' of stage '" << s.name
          << "' is a reduction loop; running it in parallel would race on the result (use "
          << "rfactor or parallelize a spatial loop)";
    if (x.annotation == Annotation::Vectorized || x.annotation == Annotation::Unrolled)
      LOOM_USER_CHECK(it.extent > 0, "loom.sched.E218")
          << "annotate: loop '" << it.name << "' has an unknown extent; fill its split first";
    it.annotation = x.annotation;
  }

  void operator()(const ComputeAtStep& x) {
    Stage& s = stage(x.stage, "compute_at");
    LOOM_USER_CHECK(!s.is_placeholder, "loom.sched.E202")
        << "compute_at: stage '" << s.name << "' is a placeholder (an input) and is not computed";
    LOOM_USER_CHECK(!s.is_output, "loom.sched.E220")
        << "compute_at: stage '" << s.name << "' is an output; nothing consumes it, so it can't "
        << "be computed inside another stage";
    Stage& t = compute_stage(x.target, "compute_at");
    check_iter(t, x.target_iter, "compute_at");
    const int si = st.stage_index(s.name), ti = st.stage_index(t.name);
    auto cons = st.consumers(si);
    // The target is the consumer, or a stage the consumer is computed inside (packing a tile of
    // an input once per outer tile of the output).
    const bool inside =
        cons.size() == 1 && (cons[0] == ti || st.computed_inside(st.stages_[cons[0]], t.name));
    LOOM_USER_CHECK(std::find(cons.begin(), cons.end(), ti) != cons.end() || inside,
                    "loom.sched.E221")
        << "compute_at: stage '" << t.name << "' does not read stage '" << s.name
        << "' and its reader is not computed inside '" << t.name
        << "'; a stage can only be computed inside a stage that consumes it";
    // Several readers are fine when every one of them is the target or computed inside it (a
    // softmax row: the sum, computed inside the division's row loop, and the division both read
    // exp): the stage is then computed before them, for all of them.
    const bool all_inside = std::all_of(cons.begin(), cons.end(), [&](int c) {
      return c == ti || st.computed_inside(st.stages_[c], t.name);
    });
    LOOM_USER_CHECK(cons.size() == 1 || all_inside, "loom.sched.E222")
        << "compute_at: stage '" << s.name << "' is read by " << cons.size()
        << " stages, and not all of them are '" << t.name << "' or computed inside it; "
        << "computing it inside '" << t.name << "' would leave the others without it (compute "
        << "the other readers inside '" << t.name << "' first, or use cache_read to give each "
        << "reader its own copy)";
    LOOM_USER_CHECK(!st.computed_inside(t, s.name), "loom.sched.E223")
        << "compute_at: stage '" << t.name << "' is itself computed inside '" << s.name << "'";
    s.location = ComputeLocation::At;
    s.attach_stage = t.name;
    s.attach_iter = t.leaves[x.target_iter];
  }

  void operator()(const ComputeRootStep& x) {
    Stage& s = stage(x.stage, "compute_root");
    LOOM_USER_CHECK(!s.is_placeholder, "loom.sched.E202")
        << "compute_root: stage '" << s.name << "' is a placeholder (an input)";
    s.location = ComputeLocation::Root;
    s.attach_stage.clear();
    s.attach_iter = -1;
  }

  void operator()(const ComputeInlineStep& x) {
    Stage& s = stage(x.stage, "compute_inline");
    LOOM_USER_CHECK(!s.is_placeholder, "loom.sched.E202")
        << "compute_inline: stage '" << s.name << "' is a placeholder (an input)";
    LOOM_USER_CHECK(!s.is_output, "loom.sched.E224")
        << "compute_inline: stage '" << s.name << "' is an output and must be stored";
    LOOM_USER_CHECK(!s.op->body.as<ir::Reduce>(), "loom.sched.E225")
        << "compute_inline: stage '" << s.name << "' is a reduction; only element-wise stages "
        << "can be inlined into their consumers";
    for (auto& o : st.stages_)
      LOOM_USER_CHECK(!(o.location == ComputeLocation::At && o.attach_stage == s.name),
                      "loom.sched.E226")
          << "compute_inline: stage '" << o.name << "' is computed inside '" << s.name
          << "'; move it first";
    s.location = ComputeLocation::Inlined;
    s.attach_stage.clear();
    s.attach_iter = -1;
  }

  std::string new_stage_name(const std::string& base, ir::MemoryScope scope, const char* step) {
    std::string name = base + "." + scope_name(scope);
    for (auto& o : st.stages_)
      LOOM_USER_CHECK(o.name != name, "loom.sched.E227")
          << step << ": stage '" << name << "' exists already";
    return name;
  }

  void operator()(const CacheReadStep& x) {
    Stage& s = stage(x.stage, "cache_read");
    LOOM_USER_CHECK(s.location != ComputeLocation::Inlined, "loom.sched.E203")
        << "cache_read: stage '" << s.name << "' was inlined";
    LOOM_USER_CHECK(!x.readers.empty(), "loom.sched.E228") << "cache_read: no reader stages given";
    const int si = st.stage_index(s.name);
    // The tensor node the readers actually read (the original one after a cache_write).
    const ir::TensorNode* read_node = nullptr;
    std::vector<int> readers;
    LOOM_USER_CHECK(s.location != ComputeLocation::At, "loom.sched.E238")
        << "cache_read: stage '" << s.name << "' is computed inside '" << s.attach_stage
        << "'; apply cache_read before compute_at";
    for (auto& r : x.readers) {
      int ri = st.stage_index(r);
      LOOM_USER_CHECK(!st.stages_[ri].is_placeholder, "loom.sched.E229")
          << "cache_read: stage '" << r << "' is a placeholder and reads nothing";
      bool reads = false;
      ir::post_order_visit(st.stages_[ri].op->body, [&](const ir::Expr& e) {
        if (auto* t = e.as<ir::TensorRead>(); t && st.stage_of(t->tensor.get()) == si) {
          reads = true;
          read_node = t->tensor.get();
        }
      });
      LOOM_USER_CHECK(reads && !st.stages_[ri].is_placeholder, "loom.sched.E229")
          << "cache_read: stage '" << r << "' does not read '" << s.name << "' directly";
      readers.push_back(ri);
    }
    std::string name = new_stage_name(s.name, x.scope, "cache_read");
    ir::Tensor src(::loom::detail::intrusive_ptr<const ir::TensorNode>(
        const_cast<ir::TensorNode*>(read_node)));
    std::vector<ir::IterVar> axes;
    std::vector<ir::Expr> idx;
    for (size_t d = 0; d < src.shape().size(); ++d) {
      ir::IterVar a{ir::Variable::make("ax" + std::to_string(d)), src.shape()[d],
                    ir::IterKind::Spatial};
      axes.push_back(a);
      idx.push_back(a.var);
    }
    ir::Tensor copy = ir::make_compute(name, axes, ir::TensorRead::make(src, idx), "cache_read");
    for (int ri : readers) {
      Stage& r = st.stages_[ri];
      detail::read_redirector redirect(read_node, copy);
      r.op = detail::rebuild_compute(r.op, redirect.mutate(r.op->body));
    }
    Stage cs = detail::make_stage(copy, name, false);
    cs.scope = x.scope;
    st.stages_.insert(st.stages_.begin() + si + 1, cs);
    st.rebuild_tensor_map();
  }

  void operator()(const CacheWriteStep& x) {
    Stage& s = compute_stage(x.stage, "cache_write");
    bool untouched = s.splits.empty() && s.fuses.empty() && s.location == ComputeLocation::Root;
    for (size_t i = 0; untouched && i < s.leaves.size(); ++i)
      untouched = s.leaves[i] == static_cast<int>(i) && s.iters[i].annotation == Annotation::Serial;
    LOOM_USER_CHECK(untouched, "loom.sched.E232")
        << "cache_write: stage '" << s.name << "' was already transformed; cache_write must come "
        << "before any split, fuse, reorder, annotation or compute location of the stage";
    for (auto& o : st.stages_)
      LOOM_USER_CHECK(!(o.location == ComputeLocation::At && o.attach_stage == s.name),
                      "loom.sched.E237")
          << "cache_write: stage '" << o.name << "' is computed inside '" << s.name
          << "', whose loops cache_write replaces; apply cache_write before compute_at";
    std::string name = new_stage_name(s.name, x.scope, "cache_write");
    ir::Tensor local = detail::fresh_copy(s.op, name);
    std::vector<ir::Expr> idx;
    for (auto& a : s.op->axes) idx.push_back(a.var);
    ir::Tensor copy =
        ir::make_compute(s.op.name(), s.op->axes, ir::TensorRead::make(local, idx), s.op->tag);
    const int si = st.stage_index(s.name);
    Stage ls = detail::make_stage(local, name, false);
    ls.scope = x.scope;
    Stage ns = detail::make_stage(copy, s.name, s.is_output);
    st.stages_[si] = ns;
    st.stages_.insert(st.stages_.begin() + si, ls);
    st.rebuild_tensor_map();
  }

  void operator()(const RfactorStep& x) {
    Stage& s = compute_stage(x.stage, "rfactor");
    const ir::Reduce* red = s.op->body.as<ir::Reduce>();
    LOOM_USER_CHECK(red, "loom.sched.E240")
        << "rfactor: stage '" << s.name << "' is not a reduction";
    check_iter(s, x.iter, "rfactor");
    LOOM_USER_CHECK(s.leaf(x.iter).kind == IterKind::Reduce, "loom.sched.E241")
        << "rfactor: loop '" << s.leaf(x.iter).name << "' of stage '" << s.name
        << "' is not a reduction loop";
    bool spatial_untouched = s.location == ComputeLocation::Root;
    for (int p = 0; p < static_cast<int>(s.leaves.size()); ++p) {
      const Iterator& it = s.leaf(p);
      if (it.kind == IterKind::Spatial)
        spatial_untouched = spatial_untouched && s.leaves[p] < s.num_spatial_axes;
      spatial_untouched = spatial_untouched && it.annotation == Annotation::Serial;
    }
    for (int p = 0; p < s.num_spatial_axes; ++p)
      spatial_untouched = spatial_untouched && s.leaves[p] == p;
    LOOM_USER_CHECK(spatial_untouched, "loom.sched.E242")
        << "rfactor: stage '" << s.name << "' had its spatial loops transformed, annotated or was "
        << "moved; rfactor must come right after splitting or fusing its reduction loops";
    const int nspatial = s.num_spatial_axes;
    LOOM_USER_CHECK(x.factor_axis >= 0 && x.factor_axis <= nspatial, "loom.sched.E243")
        << "rfactor: factor_axis " << x.factor_axis << " must be in [0, " << nspatial << "]";
    for (auto& o : st.stages_)
      LOOM_USER_CHECK(!(o.location == ComputeLocation::At && o.attach_stage == s.name),
                      "loom.sched.E244")
          << "rfactor: stage '" << o.name << "' is computed inside '" << s.name << "'";
    std::string name = s.name + ".rf";
    for (auto& o : st.stages_)
      LOOM_USER_CHECK(o.name != name, "loom.sched.E227")
          << "rfactor: stage '" << name << "' exists already";

    // C.rf[spatial..., f] = reduce over the other reduce leaves, with the reduce roots rebuilt
    // from the leaves (and a condition where a split does not divide).
    const int factored = s.leaves[x.iter];
    std::vector<ir::IterVar> rf_axes, rf_reduce;
    std::unordered_map<const ir::Variable*, ir::Expr> sub;
    for (int d = 0; d < nspatial; ++d) {
      ir::IterVar a{ir::Variable::make(s.op->axes[d].name()), s.op->axes[d].extent,
                    ir::IterKind::Spatial};
      sub[s.op->axes[d].variable()] = a.var;
      rf_axes.push_back(a);
    }
    ir::IterVar fa{ir::Variable::make(s.iters[factored].name), s.iters[factored].extent,
                   ir::IterKind::Spatial};
    rf_axes.insert(rf_axes.begin() + x.factor_axis, fa);
    std::vector<ir::Expr> values(s.iters.size());
    values[factored] = fa.var;
    for (int leaf : s.leaves)
      if (leaf != factored && s.iters[leaf].kind == IterKind::Reduce) {
        ir::IterVar r{ir::Variable::make(s.iters[leaf].name), s.iters[leaf].extent,
                      ir::IterKind::Reduce};
        values[leaf] = r.var;
        rf_reduce.push_back(r);
      }
    std::vector<int64_t> extents;
    for (auto& it : s.iters) extents.push_back(it.extent);
    std::vector<std::pair<int, ir::Expr>> tails;
    for (size_t r = 0; r < red->axes.size(); ++r)
      sub[red->axes[r].variable()] =
          iterator_value(s, nspatial + static_cast<int>(r), extents, values, tails);
    ir::Expr cond;
    for (auto& t : tails) cond = cond.defined() ? (cond && t.second) : t.second;
    if (red->condition.defined()) {
      // The reduction's own condition may read memory at the rebuilt indices, which leave their
      // range in the tails, and the operands of && have no evaluation order (IR contract): it is
      // evaluated only where the tail conditions hold, through a (lazy) select.
      ir::Expr own = ir::substitute(red->condition, sub);
      cond = cond.defined() ? ir::Select::make(cond, own, ir::IntImm::make(ir::DType::boolean(), 0))
                            : own;
    }
    ir::Expr rf_body;
    ir::Expr src = ir::substitute(red->source, sub);
    if (rf_reduce.empty()) {
      // Nothing left to reduce: each element is one term (or the identity where out of range).
      rf_body = cond.defined()
                    ? ir::Select::make(cond, src, ir::reduce_identity(red->op, src.dtype()))
                    : src;
    } else {
      rf_body = ir::Reduce::make(red->op, src, rf_reduce, cond);
    }
    ir::Tensor rf = ir::make_compute(name, rf_axes, rf_body, s.op->tag);
    // C[spatial...] = reduce over f of C.rf[spatial..., f].
    ir::IterVar kf{ir::Variable::make(s.iters[factored].name), s.iters[factored].extent,
                   ir::IterKind::Reduce};
    std::vector<ir::Expr> idx;
    for (int d = 0; d < nspatial; ++d) idx.push_back(s.op->axes[d].var);
    idx.insert(idx.begin() + x.factor_axis, kf.var);
    ir::Tensor c2 =
        ir::make_compute(s.op.name(), s.op->axes,
                         ir::Reduce::make(red->op, ir::TensorRead::make(rf, idx), {kf}), s.op->tag);
    const int si = st.stage_index(s.name);
    Stage rs = detail::make_stage(rf, name, false);
    Stage ns = detail::make_stage(c2, s.name, s.is_output);
    st.stages_[si] = ns;
    st.stages_.insert(st.stages_.begin() + si, rs);
    st.rebuild_tensor_map();
  }

  void operator()(const PragmaStep& x) {
    Stage& s = compute_stage(x.stage, "pragma");
    check_iter(s, x.iter, "pragma");
    LOOM_USER_CHECK(x.max_step >= 0, "loom.sched.E233")
        << "pragma: auto_unroll_max_step must be >= 0, got " << x.max_step;
    s.auto_unroll_max_step = x.max_step;
  }

  void operator()(const StorageAlignStep& x) {
    Stage& s = compute_stage(x.stage, "storage_align");
    const int rank = s.op.rank();
    LOOM_USER_CHECK(x.axis >= 0 && x.axis < rank - 1, "loom.sched.E234")
        << "storage_align: axis " << x.axis << " of stage '" << s.name << "' (rank " << rank
        << ") has no stride to align; use an axis in [0, " << rank - 1 << ")";
    LOOM_USER_CHECK(x.factor > 0 && x.offset >= 0 && x.offset < x.factor, "loom.sched.E235")
        << "storage_align: needs factor > 0 and 0 <= offset < factor, got factor " << x.factor
        << " offset " << x.offset;
    LOOM_USER_CHECK(s.storage_chunk == 0, "loom.sched.E268")
        << "storage_align: stage '" << s.name
        << "' is stored in chunks (storage_chunk), whose rows are dense; pad it or chunk it";
    s.storage_aligns.push_back({x.axis, x.factor, x.offset});
  }

  void operator()(const StoragePermuteStep& x) {
    Stage& s = compute_stage(x.stage, "storage_permute");
    const int rank = s.op.rank();
    LOOM_USER_CHECK(x.axis >= 0 && x.axis < rank, "loom.sched.E246")
        << "storage_permute: stage '" << s.name << "' has " << rank << " axes, there is no axis "
        << x.axis;
    LOOM_USER_CHECK(x.lanes > 0 && x.per_lane > 0 && x.unit > 0, "loom.sched.E247")
        << "storage_permute: needs lanes, per_lane and unit > 0, got " << x.lanes << ", "
        << x.per_lane << " and " << x.unit;
    for (const StoragePermute& p : s.storage_permutes)
      LOOM_USER_CHECK(p.axis != x.axis, "loom.sched.E248")
          << "storage_permute: axis " << x.axis << " of stage '" << s.name
          << "' is permuted already; permute an axis once";
    s.storage_permutes.push_back({x.axis, x.lanes, x.per_lane, x.unit});
  }

  void operator()(const StorageSwizzleStep& x) {
    Stage& s = compute_stage(x.stage, "storage_swizzle");
    LOOM_USER_CHECK(x.bytes == 32 || x.bytes == 64 || x.bytes == 128, "loom.sched.E265")
        << "storage_swizzle: rows of " << x.bytes
        << " bytes; the swizzles are of rows of 32, 64 or 128 bytes";
    LOOM_USER_CHECK(s.storage_swizzle == 0, "loom.sched.E266")
        << "storage_swizzle: stage '" << s.name << "' is swizzled already (rows of "
        << s.storage_swizzle << " bytes); swizzle a buffer once";
    s.storage_swizzle = x.bytes;
  }

  void operator()(const StorageChunkStep& x) {
    Stage& s = compute_stage(x.stage, "storage_chunk");
    LOOM_USER_CHECK(x.bytes == 32 || x.bytes == 64 || x.bytes == 128, "loom.sched.E267")
        << "storage_chunk: chunks of " << x.bytes
        << " bytes; the chunks are of 32, 64 or 128 bytes, a swizzled row's";
    LOOM_USER_CHECK(s.storage_chunk == 0 && s.storage_aligns.empty(), "loom.sched.E268")
        << "storage_chunk: stage '" << s.name << "' "
        << (s.storage_chunk ? "is stored in chunks already; chunk a buffer once"
                            : "has padded rows (storage_align); chunk rows that are dense");
    s.storage_chunk = x.bytes;
  }
};

LOOM_DECL ir::Expr iterator_value(const Stage& s, int id, const std::vector<int64_t>& extent,
                                  std::vector<ir::Expr>& value,
                                  std::vector<std::pair<int, ir::Expr>>& tails) {
  if (value[id].defined()) return value[id];
  for (auto& sp : s.splits)
    if (sp.parent == id) {
      ir::Expr v = iterator_value(s, sp.children[0], extent, value, tails);
      int64_t covered = extent[sp.children[0]];
      for (size_t c = 1; c < sp.children.size(); ++c) {
        v = v * ir::Expr(extent[sp.children[c]]) +
            iterator_value(s, sp.children[c], extent, value, tails);
        covered *= extent[sp.children[c]];
      }
      if (covered != extent[id]) tails.emplace_back(id, v < ir::Expr(extent[id]));
      return value[id] = v;
    }
  for (auto& fu : s.fuses) {
    auto it = std::find(fu.fused.begin(), fu.fused.end(), id);
    if (it == fu.fused.end()) continue;
    int64_t inner = 1;
    for (auto jt = it + 1; jt != fu.fused.end(); ++jt) inner *= extent[*jt];
    ir::Expr v = iterator_value(s, fu.result, extent, value, tails);
    if (inner > 1) v = ir::floordiv(v, ir::Expr(inner));
    if (it != fu.fused.begin()) v = ir::floormod(v, ir::Expr(extent[id]));
    return value[id] = v;
  }
  LOOM_INTERNAL_CHECK(false) << "iterator " << s.iters[id].name << " of stage " << s.name
                             << " is neither a leaf nor derived";
  return ir::Expr();
}

LOOM_DECL void State::apply(const Step& step) {
  step_applier a{*this};
  std::visit(a, step);
  steps_.push_back(step);
}

LOOM_DECL void State::set_split_lengths(int step, std::vector<std::optional<int64_t>> lengths) {
  SplitStep* sp = step >= 0 && step < static_cast<int>(steps_.size())
                      ? std::get_if<SplitStep>(&steps_[step])
                      : nullptr;
  LOOM_USER_CHECK(sp, "loom.sched.E245")
      << "set_split_lengths: step " << step << " is not a split step of this state's history ("
      << steps_.size() << " steps)";
  LOOM_USER_CHECK(lengths.size() == sp->lengths.size(), "loom.sched.E245")
      << "set_split_lengths: split step " << step << " has " << sp->lengths.size() << " lengths, "
      << lengths.size() << " given";
  sp->lengths = std::move(lengths);
}

LOOM_DECL void State::set_origins(StepOrigins origins) {
  if (!origins.known() && origins.annotate_begin < 0) {
    origins_ = {};
    return;
  }
  LOOM_USER_CHECK(origins.location_begin >= 0 && origins.location_begin <= origins.annotate_begin &&
                      origins.annotate_begin <= static_cast<int>(steps_.size()),
                  "loom.sched.E264")
      << "set_origins: the compute-location part begins at step " << origins.location_begin
      << " and the annotation part at step " << origins.annotate_begin << ", but a history of "
      << steps_.size() << " steps needs 0 <= the first <= the second <= " << steps_.size();
  origins_ = origins;
}

LOOM_DECL std::vector<int> State::attached_at(const std::string& target, int iter_id) const {
  std::vector<int> out;
  for (size_t j = 0; j < stages_.size(); ++j) {
    const Stage& o = stages_[j];
    if (o.location == ComputeLocation::At && o.attach_stage == target && o.attach_iter == iter_id)
      out.push_back(static_cast<int>(j));
  }
  return out;
}

LOOM_DECL bool State::computed_inside(const Stage& stage, const std::string& target) const {
  // A chain of compute_at stages is acyclic (compute_at refuses cycles, E223); the guard only
  // bounds the walk on a corrupt state.
  const Stage* cur = &stage;
  for (size_t guard = 0; cur->location == ComputeLocation::At && guard <= stages_.size(); ++guard) {
    if (cur->attach_stage == target) return true;
    cur = &stages_[stage_index(cur->attach_stage)];
  }
  return false;
}

LOOM_DECL std::vector<int> State::consumers(int stage) const {
  std::vector<int> out;
  std::function<void(int)> collect = [&](int s) {
    for (size_t j = 0; j < stages_.size(); ++j) {
      if (stages_[j].is_placeholder || static_cast<int>(j) == s) continue;
      bool reads = false;
      ir::post_order_visit(stages_[j].op->body, [&](const ir::Expr& e) {
        if (auto* t = e.as<ir::TensorRead>()) reads = reads || stage_of(t->tensor.get()) == s;
      });
      if (!reads) continue;
      if (stages_[j].location == ComputeLocation::Inlined)
        collect(static_cast<int>(j));
      else if (std::find(out.begin(), out.end(), static_cast<int>(j)) == out.end())
        out.push_back(static_cast<int>(j));
    }
  };
  collect(stage);
  return out;
}

LOOM_DECL std::vector<int> State::producers(int stage) const {
  std::vector<int> out;
  std::function<void(int)> collect = [&](int s) {
    if (stages_[s].is_placeholder) return;
    for (auto& t : ir::input_tensors(stages_[s].op)) {
      int p = stage_of(t.get());
      if (p < 0) continue;
      if (stages_[p].location == ComputeLocation::Inlined)
        collect(p);
      else if (std::find(out.begin(), out.end(), p) == out.end())
        out.push_back(p);
    }
  };
  collect(stage);
  return out;
}

#define LOOM_STATE_WRAPPER(body) apply(Step{body})
LOOM_DECL void State::split(const std::string& stage, int iter, std::vector<int64_t> lengths) {
  std::vector<std::optional<int64_t>> l(lengths.begin(), lengths.end());
  int64_t extent = this->stage(stage).leaves.size() > static_cast<size_t>(iter) && iter >= 0
                       ? this->stage(stage).leaf(iter).extent
                       : -1;
  LOOM_STATE_WRAPPER((SplitStep{stage, iter, extent, l}));
}
LOOM_DECL void State::fuse(const std::string& stage, std::vector<int> iters) {
  LOOM_STATE_WRAPPER((FuseStep{stage, std::move(iters)}));
}
LOOM_DECL void State::reorder(const std::string& stage, std::vector<int> order) {
  LOOM_STATE_WRAPPER((ReorderStep{stage, std::move(order)}));
}
LOOM_DECL void State::annotate(const std::string& stage, int iter, Annotation a) {
  LOOM_STATE_WRAPPER((AnnotationStep{stage, iter, a}));
}
LOOM_DECL void State::compute_at(const std::string& stage, const std::string& target, int iter) {
  LOOM_STATE_WRAPPER((ComputeAtStep{stage, target, iter}));
}
LOOM_DECL void State::compute_root(const std::string& stage) {
  LOOM_STATE_WRAPPER((ComputeRootStep{stage}));
}
LOOM_DECL void State::compute_inline(const std::string& stage) {
  LOOM_STATE_WRAPPER((ComputeInlineStep{stage}));
}
LOOM_DECL std::string State::cache_read(const std::string& stage, ir::MemoryScope scope,
                                        std::vector<std::string> readers) {
  LOOM_STATE_WRAPPER((CacheReadStep{stage, scope, std::move(readers)}));
  return stage + "." + scope_name(scope);
}
LOOM_DECL std::string State::cache_write(const std::string& stage, ir::MemoryScope scope) {
  LOOM_STATE_WRAPPER((CacheWriteStep{stage, scope}));
  return stage + "." + scope_name(scope);
}
LOOM_DECL std::string State::rfactor(const std::string& stage, int iter, int factor_axis) {
  LOOM_STATE_WRAPPER((RfactorStep{stage, iter, factor_axis}));
  return stage + ".rf";
}
LOOM_DECL void State::pragma_unroll(const std::string& stage, int iter, int max_step) {
  LOOM_STATE_WRAPPER((PragmaStep{stage, iter, max_step}));
}
LOOM_DECL void State::storage_align(const std::string& stage, int axis, int64_t factor,
                                    int64_t offset) {
  LOOM_STATE_WRAPPER((StorageAlignStep{stage, axis, factor, offset}));
}
LOOM_DECL void State::storage_permute(const std::string& stage, int axis, int64_t lanes,
                                      int64_t per_lane, int64_t unit) {
  LOOM_STATE_WRAPPER((StoragePermuteStep{stage, axis, lanes, per_lane, unit}));
}
LOOM_DECL void State::storage_swizzle(const std::string& stage, int64_t bytes) {
  LOOM_STATE_WRAPPER((StorageSwizzleStep{stage, bytes}));
}
LOOM_DECL void State::storage_chunk(const std::string& stage, int64_t bytes) {
  LOOM_STATE_WRAPPER((StorageChunkStep{stage, bytes}));
}
LOOM_DECL void State::follow_split(const std::string& stage, int iter, int src_step, int n_split) {
  LOOM_STATE_WRAPPER((FollowSplitStep{stage, iter, src_step, n_split}));
}
LOOM_DECL void State::follow_fused_split(const std::string& stage, int iter,
                                         std::vector<int> src_steps, int level,
                                         bool factor_or_nparts) {
  LOOM_STATE_WRAPPER(
      (FollowFusedSplitStep{stage, iter, std::move(src_steps), level, factor_or_nparts}));
}
#undef LOOM_STATE_WRAPPER

namespace detail {

inline void print_stage(std::ostream& os, const State& st, int si, int indent) {
  const Stage& s = st.stages()[si];
  auto attached_here = [&](int iter_id) { return st.attached_at(s.name, iter_id); };
  int depth = indent;
  for (size_t p = 0; p < s.leaves.size(); ++p) {
    const Iterator& it = s.iters[s.leaves[p]];
    const char* kind = it.annotation == Annotation::Serial ? "for" : annotation_name(it.annotation);
    os << std::string(depth * 2, ' ') << kind << ' ' << it.name << " (0,"
       << (it.extent > 0 ? std::to_string(it.extent) : std::string("?")) << ")";
    if (p == 0 && s.auto_unroll_max_step > 0)
      os << " auto_unroll_max_step=" << s.auto_unroll_max_step;
    os << '\n';
    ++depth;
    for (int a : attached_here(s.leaves[p])) print_stage(os, st, a, depth);
  }
  os << std::string(depth * 2, ' ') << s.name;
  const ir::Expr& body = s.op->body;
  if (auto* r = body.as<ir::Reduce>()) {
    const char* op = r->op == ir::ReduceOp::Sum    ? " += "
                     : r->op == ir::ReduceOp::Prod ? " *= "
                     : r->op == ir::ReduceOp::Min  ? " min= "
                                                   : " max= ";
    os << op << r->source;
    if (r->condition.defined()) os << " where " << r->condition;
  } else {
    os << " = " << body;
  }
  if (s.scope != ir::MemoryScope::Global) os << "  (" << scope_name(s.scope) << ')';
  os << '\n';
}

}  // namespace detail

LOOM_DECL std::string State::to_string() const {
  std::ostringstream os;
  os << "placeholders:";
  for (auto& s : stages_)
    if (s.is_placeholder) os << ' ' << s.name;
  os << '\n';
  for (size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    if (s.is_placeholder) continue;
    if (s.location == ComputeLocation::Inlined) {
      os << "inlined " << s.name << '\n';
      continue;
    }
    if (s.location == ComputeLocation::Root) detail::print_stage(os, *this, static_cast<int>(i), 0);
  }
  return os.str();
}

LOOM_DECL std::ostream& operator<<(std::ostream& os, const State& s) { return os << s.to_string(); }

}  // namespace sched
LOOM_END_NAMESPACE
