// Bodies of loom/search/sketch.hpp: the derivation engine and the built-in CPU sketch rules.
#include "loom/search/sketch.hpp"

#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <functional>
#include <unordered_map>

LOOM_BEGIN_NAMESPACE
namespace search {

LOOM_DECL SketchContext::SketchContext(const Task& task, const SearchOptions& options,
                                       std::vector<std::string> constant_inputs)
    : task_(&task), options_(&options), constant_inputs_(std::move(constant_inputs)) {
  // The initial state names the ops (deduplicating repeated names); reuse its naming rather
  // than repeating it here.
  sched::State init(task.dag);
  for (int i = 0; i < task.dag->num_ops(); ++i) op_stage_names_.push_back(init.stages()[i].name);
}

LOOM_DECL StageOrigin SketchContext::origin(const sched::State& state, int stage) const {
  StageOrigin o;
  const std::string& name = state.stages().at(stage).name;
  auto op_named = [&](const std::string& n) {
    auto it = std::find(op_stage_names_.begin(), op_stage_names_.end(), n);
    return it == op_stage_names_.end() ? -1 : static_cast<int>(it - op_stage_names_.begin());
  };
  for (const sched::Step& step : state.steps()) {
    auto* cw = std::get_if<sched::CacheWriteStep>(&step);
    if (!cw) continue;
    if (name == cw->stage + "." + sched::scope_name(cw->scope)) {
      o.op = op_named(cw->stage);
      o.cache_write_local = true;
      return o;
    }
    if (name == cw->stage) o.cache_write_copy = true;
  }
  o.op = op_named(name);
  return o;
}

LOOM_DECL bool SketchContext::is_constant_input(const std::string& name) const {
  return std::find(constant_inputs_.begin(), constant_inputs_.end(), name) !=
         constant_inputs_.end();
}

LOOM_DECL bool is_tiled(const sched::Stage& stage) { return !stage.splits.empty(); }

LOOM_DECL bool has_reduce(const sched::Stage& stage) {
  return !stage.is_placeholder && stage.op->body.as<ir::Reduce>() != nullptr;
}

LOOM_DECL bool needs_multi_level_tiling(const SketchContext& ctx, const sched::State& state,
                                        int stage) {
  const sched::Stage& s = state.stages().at(stage);
  if (s.is_placeholder || s.location == sched::ComputeLocation::Inlined) return false;
  StageOrigin o = ctx.origin(state, stage);
  return o.op >= 0 && !o.cache_write_copy && ctx.dag().info(o.op).needs_multi_level_tiling;
}

LOOM_DECL bool is_strictly_inlineable(const SketchContext& ctx, const sched::State& state,
                                      int stage) {
  StageOrigin o = ctx.origin(state, stage);
  return o.op >= 0 && !o.cache_write_local && !o.cache_write_copy &&
         ctx.dag().info(o.op).is_strictly_inlineable;
}

LOOM_DECL bool has_cache_write_stage(const SketchContext& ctx, const sched::State& state,
                                     int stage) {
  return ctx.origin(state, stage).cache_write_local;
}

LOOM_DECL bool is_untouched(const sched::Stage& stage) {
  if (stage.is_placeholder || stage.location != sched::ComputeLocation::Root ||
      !stage.splits.empty() || !stage.fuses.empty() || stage.leaves.size() != stage.iters.size())
    return false;
  for (size_t p = 0; p < stage.leaves.size(); ++p)
    if (stage.leaves[p] != static_cast<int>(p) ||
        stage.iters[p].annotation != sched::Annotation::Serial)
      return false;
  return true;
}

LOOM_DECL bool needs_rfactor(const SketchContext& ctx, const sched::State& state, int stage) {
  const sched::Stage& s = state.stages().at(stage);
  if (!has_reduce(s) || !is_untouched(s)) return false;
  const StageOrigin o = ctx.origin(state, stage);
  if (o.op < 0 || o.cache_write_copy || o.cache_write_local) return false;
  int64_t space = 1, reduce = 1;
  for (const sched::Iterator& it : s.iters)
    (it.kind == sched::IterKind::Reduce ? reduce : space) *= std::max<int64_t>(it.extent, 1);
  const int64_t cores = std::max(1, ctx.task().target.num_cores);
  if (needs_multi_level_tiling(ctx, state, stage))
    // Enough spatial parallelism already: factoring the reduction would only add a pass.
    return !(space > reduce || space > cores * 16);
  return reduce > cores;
}

LOOM_DECL std::vector<std::vector<ir::Expr>> read_indices(const sched::State& state, int reader,
                                                          int target) {
  std::vector<std::vector<ir::Expr>> out;
  // Inlined stages are read through: their body, with their axes replaced by the read's indices,
  // stands where the read was.
  std::function<void(const ir::Expr&, int)> walk = [&](const ir::Expr& body, int depth) {
    ir::post_order_visit(body, [&](const ir::Expr& e) {
      const auto* t = e.as<ir::TensorRead>();
      if (!t) return;
      const int si = state.stage_of(t->tensor.get());
      if (si == target) {
        out.push_back(t->indices);
      } else if (si >= 0 && depth < 32 &&
                 state.stages()[si].location == sched::ComputeLocation::Inlined) {
        const sched::Stage& in = state.stages()[si];
        std::unordered_map<const ir::Variable*, ir::Expr> sub;
        for (size_t d = 0; d < in.op->axes.size() && d < t->indices.size(); ++d)
          sub[in.op->axes[d].variable()] = t->indices[d];
        walk(ir::substitute(in.op->body, sub), depth + 1);
      }
    });
  };
  walk(state.stages().at(reader).op->body, 0);
  return out;
}

LOOM_DECL int single_elementwise_matched_consumer(const SketchContext& ctx,
                                                  const sched::State& state, int stage) {
  // An output stays at the root (compute_at refuses it): nothing to fuse it into.
  if (state.stages()[stage].is_output) return -1;
  const auto cons = state.consumers(stage);
  if (cons.size() != 1) return -1;
  const int c = cons[0];
  const StageOrigin p = ctx.origin(state, stage), q = ctx.origin(state, c);
  if (p.op < 0 || q.op < 0) return -1;
  if (p.cache_write_local) return q.cache_write_copy && q.op == p.op ? c : -1;
  if (q.cache_write_local || q.cache_write_copy || p.cache_write_copy) return -1;
  // The stages between the two were inlined, so the consumer reads the producer through a
  // chain of ops; every link must be element-wise for the tiles to line up (Ansor's
  // ElementWiseMatch follows the same chain).
  int cur = p.op;
  for (int guard = 0; cur != q.op && guard < ctx.dag().num_ops(); ++guard) {
    cur = ctx.dag().single_elementwise_matched_consumer(cur);
    if (cur < 0) return -1;
  }
  return cur == q.op ? c : -1;
}

namespace detail {

inline void check_structure(const std::string& structure) {
  const auto n_s = std::count(structure.begin(), structure.end(), 'S');
  const auto n_r = std::count(structure.begin(), structure.end(), 'R');
  LOOM_USER_CHECK(n_s >= 1 && n_r >= 1 && n_s + n_r == static_cast<long>(structure.size()),
                  "loom.search.E801")
      << "tiling structure '" << structure << "' must consist of the letters S (spatial level) "
      << "and R (reduction level), with at least one of each, e.g. \"SSRSRS\"";
}

// GPU structures also bind their first three spatial levels to blockIdx, vthread and
// threadIdx, and random annotation tells spatial from reduction splits by their part counts.
inline void check_gpu_structure(const std::string& structure) {
  check_structure(structure);
  const auto n_s = std::count(structure.begin(), structure.end(), 'S');
  LOOM_USER_CHECK(structure.rfind("SSS", 0) == 0 && 2 * n_s != static_cast<long>(structure.size()),
                  "loom.search.E801")
      << "GPU tiling structure '" << structure << "' must start with three S levels (blockIdx, "
      << "vthread, threadIdx) and have a different number of S and R levels, e.g. \"SSSRRSRS\"";
}

}  // namespace detail

LOOM_DECL std::vector<int> multi_level_tile(sched::State& state, int stage,
                                            const std::string& structure, int innermost_axis) {
  detail::check_structure(structure);
  const int n_s = static_cast<int>(std::count(structure.begin(), structure.end(), 'S'));
  const int n_r = static_cast<int>(structure.size()) - n_s;
  const std::string name = state.stages().at(stage).name;
  const std::vector<int> roots = state.stages()[stage].leaves;
  std::vector<std::vector<int>> levels;  // per root loop: its tile loops, outer to inner
  std::vector<int> spatial_steps;
  for (int id : roots) {
    const sched::Stage& s = state.stage(name);
    const bool spatial = s.iters[id].kind == sched::IterKind::Spatial;
    const int parts = spatial ? n_s : n_r;
    const int pos = s.leaf_position(id);
    if (parts == 1) {
      levels.push_back({id});
      continue;
    }
    state.apply(sched::SplitStep{name, pos, s.iters[id].extent,
                                 std::vector<std::optional<int64_t>>(parts - 1)});
    if (spatial) spatial_steps.push_back(static_cast<int>(state.steps().size()) - 1);
    const sched::Stage& t = state.stage(name);
    levels.emplace_back(t.leaves.begin() + pos, t.leaves.begin() + pos + parts);
  }
  // Level k of the structure's letter c takes the k-th tile loop of every root loop of kind c.
  std::vector<int> ids;
  int seen_s = 0, seen_r = 0;
  for (char c : structure) {
    const bool spatial = c == 'S';
    const int level = spatial ? seen_s++ : seen_r++;
    const bool last_spatial_level = spatial && level == n_s - 1;
    for (size_t r = 0; r < roots.size(); ++r) {
      const bool is_spatial = state.stage(name).iters[roots[r]].kind == sched::IterKind::Spatial;
      if (last_spatial_level && static_cast<int>(r) == innermost_axis) continue;
      if (is_spatial == spatial) ids.push_back(levels[r][level]);
    }
    if (last_spatial_level && innermost_axis >= 0 &&
        innermost_axis < static_cast<int>(roots.size()))
      ids.push_back(levels[static_cast<size_t>(innermost_axis)][level]);
  }
  const sched::Stage& s = state.stage(name);
  std::vector<int> order;
  for (int id : ids) order.push_back(s.leaf_position(id));
  state.reorder(name, order);
  return spatial_steps;
}

LOOM_DECL int channel_innermost_axis(const SketchContext& ctx, const sched::State& state,
                                     int stage) {
  const sched::Stage& s = state.stages().at(stage);
  const int n_spatial = s.num_spatial_axes;
  if (s.is_placeholder || n_spatial < 2 || !is_untouched(s)) return -1;
  const auto& axes = s.op->axes;
  const int lanes = ctx.task().target.vector_lanes(s.op.dtype().bytes());
  // Which spatial axes each read depends on, split by whether the read is of a constant input.
  std::vector<bool> constant_uses(static_cast<size_t>(n_spatial), false);
  std::vector<bool> other_uses(static_cast<size_t>(n_spatial), false);
  bool constant_uses_last = false;
  for (int t = 0; t < static_cast<int>(state.stages().size()); ++t) {
    if (t == stage || state.stages()[t].location == sched::ComputeLocation::Inlined) continue;
    const bool constant =
        state.stages()[t].is_placeholder && ctx.is_constant_input(state.stages()[t].name);
    for (const auto& idx : read_indices(state, stage, t)) {
      std::vector<bool> uses(static_cast<size_t>(n_spatial), false);
      for (const ir::Expr& e : idx)
        for (const ir::Variable* v : ir::free_vars(e))
          for (int d = 0; d < n_spatial; ++d)
            if (axes[d].variable() == v) uses[static_cast<size_t>(d)] = true;
      for (int d = 0; d < n_spatial; ++d)
        if (uses[static_cast<size_t>(d)])
          (constant ? constant_uses : other_uses)[static_cast<size_t>(d)] = true;
      constant_uses_last = constant_uses_last || (constant && uses.back());
    }
  }
  if (constant_uses_last) return -1;  // the constant is already walked along the rows
  int best = -1;
  for (int d = 0; d + 1 < n_spatial; ++d)
    if (constant_uses[static_cast<size_t>(d)] && !other_uses[static_cast<size_t>(d)] &&
        axes[d].extent >= lanes && (best < 0 || axes[d].extent >= axes[best].extent))
      best = d;
  return best;
}

namespace detail {

// Splits every spatial loop of `consumer` like the producer's tiling down to `level` (1: the
// outermost tiles, 2: the two outermost) and orders the parts level by level (Ansor's
// FollowTiling). Returns the position of the last loop of that level: the fusion point.
inline int follow_tiling(sched::State& state, const std::string& consumer,
                         const std::vector<int>& split_steps, int level) {
  const std::vector<int> roots = state.stage(consumer).leaves;
  std::vector<std::vector<int>> parts;
  size_t k = 0;
  for (int id : roots) {
    const sched::Stage& s = state.stage(consumer);
    if (s.iters[id].kind != sched::IterKind::Spatial || k >= split_steps.size()) continue;
    const int pos = s.leaf_position(id);
    state.follow_split(consumer, pos, split_steps[k++], level);
    const sched::Stage& t = state.stage(consumer);
    parts.emplace_back(t.leaves.begin() + pos, t.leaves.begin() + pos + level + 1);
  }
  std::vector<int> ids;
  for (int l = 0; l <= level; ++l)
    for (auto& p : parts) ids.push_back(p[l]);
  const sched::Stage& s = state.stage(consumer);
  for (int id : s.leaves)  // loops that were not split stay innermost, in their order
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  std::vector<int> order;
  for (int id : ids) order.push_back(s.leaf_position(id));
  state.reorder(consumer, order);
  return level * static_cast<int>(parts.size()) - 1;
}

}  // namespace detail

LOOM_DECL SketchRule rule_always_inline() {
  return {"AlwaysInline",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const sched::Stage& s = st.stages()[i];
            if (s.is_placeholder || s.is_output || s.location == sched::ComputeLocation::Inlined ||
                has_reduce(s))
              return RuleCondition::Skip;
            return is_strictly_inlineable(ctx, st, i) ? RuleCondition::ApplyAndSkipRest
                                                      : RuleCondition::Skip;
          },
          [](const SketchContext&, const sched::State& st, int i) {
            sched::State s = st;
            s.compute_inline(st.stages()[i].name);
            return std::vector<std::pair<sched::State, int>>{{std::move(s), i - 1}};
          }};
}

namespace detail {

using Successors = std::vector<std::pair<sched::State, int>>;

// Fuses the reduce loops of an untouched stage into one (at position #spatial) and returns it.
inline int fuse_reduce_loops(sched::State& s, const std::string& name) {
  const sched::Stage& g = s.stage(name);
  const int nspatial = g.num_spatial_axes;
  const int n = static_cast<int>(g.leaves.size());
  if (n - nspatial > 1) {
    std::vector<int> iters;
    for (int p = nspatial; p < n; ++p) iters.push_back(p);
    s.fuse(name, iters);
  }
  return nspatial;
}

// Moves leaf `from` of `stage` to the innermost position.
inline void move_innermost(sched::State& s, const std::string& stage, int from) {
  const int n = static_cast<int>(s.stage(stage).leaves.size());
  std::vector<int> order;
  for (int p = 0; p < n; ++p)
    if (p != from) order.push_back(p);
  order.push_back(from);
  s.reorder(stage, order);
}

// The consumer stage whose first `rank` loops walk the rows of `stage`, or -1. That stage R is
// untouched (with `rows_untouched`, its first `rank` loops are: the GPU rule splits the rest),
// and every consumer of `stage` (R, and others computed inside R at its row loop, e.g. a second
// reduction of the same rows) reads it at [axis 0, ..., axis rank-1] of its own axes, directly
// or through inlined stages.
inline int row_consumer(const sched::State& st, int stage, bool rows_untouched = false) {
  if (st.stages()[stage].is_output) return -1;  // an output stays at the root
  const auto cons = st.consumers(stage);
  const int rank = st.stages()[stage].num_spatial_axes;
  int row = -1;
  for (int c : cons)
    if (st.stages()[c].location == sched::ComputeLocation::Root) {
      if (row >= 0) return -1;
      row = c;
    }
  if (row < 0 || rank < 1) return -1;
  const sched::Stage& rs = st.stages()[row];
  if (rs.num_spatial_axes < rank) return -1;
  if (rows_untouched) {
    for (int d = 0; d < rank; ++d)
      if (rs.leaves.size() <= static_cast<size_t>(d) || rs.leaves[d] != d ||
          rs.iters[d].annotation != sched::Annotation::Serial)
        return -1;
  } else if (!is_untouched(rs)) {
    return -1;
  }
  for (int c : cons) {
    const sched::Stage& cs = st.stages()[c];
    if (c != row && (cs.location != sched::ComputeLocation::At || cs.attach_stage != rs.name ||
                     cs.attach_iter != rs.leaves[rank - 1] || cs.num_spatial_axes < rank))
      return -1;
    const auto reads = read_indices(st, c, stage);
    if (reads.empty()) return -1;
    for (const auto& idx : reads) {
      if (static_cast<int>(idx.size()) != rank) return -1;
      for (int d = 0; d < rank; ++d)
        if (idx[d].as<ir::Variable>() != cs.op->axes[d].variable()) return -1;
    }
  }
  return row;
}

// Position of the last loop of the first reduce tile level of a multi-level-tiled stage (where
// Ansor's GPU rule computes shared-memory copies), or -1.
inline int first_reduce_level_end(const sched::Stage& s) {
  int p = 0;
  const int n = static_cast<int>(s.leaves.size());
  while (p < n && s.leaf(p).kind != sched::IterKind::Reduce) ++p;
  if (p == n) return -1;
  while (p + 1 < n && s.leaf(p + 1).kind == sched::IterKind::Reduce) ++p;
  return p;
}

// The multi-level-tiled stage that the input `stage` should be packed for, or -1: `stage` is a
// placeholder with a single consumer, that consumer is multi-level tiled, and it reads `stage`
// along its innermost spatial axis (the loop that runs through the packed tile contiguously)
// while missing another spatial axis of extent > 1 (the tile is reused across that loop).
inline int pack_reader(const SketchContext& ctx, const sched::State& st, int stage) {
  const sched::Stage& p = st.stages()[stage];
  if (!p.is_placeholder) return -1;
  const auto cons = st.consumers(stage);
  if (cons.size() != 1) return -1;
  const int c = cons[0];
  const sched::Stage& cs = st.stages()[c];
  if (!is_tiled(cs) || !needs_multi_level_tiling(ctx, st, c) || first_reduce_level_end(cs) < 0)
    return -1;
  const auto reads = read_indices(st, c, stage);
  if (reads.empty() || cs.num_spatial_axes < 2) return -1;
  const auto& axes = cs.op->axes;
  const ir::Variable* inner = axes[cs.num_spatial_axes - 1].variable();
  for (const auto& idx : reads) {
    std::vector<const ir::Variable*> used;
    for (const ir::Expr& e : idx)
      for (const ir::Variable* v : ir::free_vars(e)) used.push_back(v);
    auto uses = [&](const ir::Variable* v) {
      return std::find(used.begin(), used.end(), v) != used.end();
    };
    if (!uses(inner)) return -1;
    bool reused = false;
    for (int d = 0; d + 1 < cs.num_spatial_axes; ++d)
      reused = reused || (axes[d].extent > 1 && !uses(axes[d].variable()));
    if (!reused) return -1;
  }
  return c;
}

// Where a panel of the input read by `reader` can be packed once for all the row tiles of the
// root stage that holds `reader`: the end of that root's outermost spatial tile level (its first
// num_spatial_axes loops, all spatial). Returns the root's name and the loop position, or an
// empty name when the root has no such level around `reader`.
inline std::pair<std::string, int> panel_pack_location(const sched::State& st, int reader) {
  const sched::Stage* cur = &st.stages()[reader];
  int attach_position = -1;  // where the chain from `reader` enters the root
  for (int guard = 0; cur->location == sched::ComputeLocation::At && guard < 1000; ++guard) {
    const sched::Stage& outer = st.stage(cur->attach_stage);
    attach_position = outer.leaf_position(cur->attach_iter);
    cur = &outer;
  }
  const sched::Stage& root = *cur;
  const int pos = root.num_spatial_axes - 1;
  if (root.location != sched::ComputeLocation::Root || pos < 0 ||
      static_cast<int>(root.leaves.size()) <= pos + 1)
    return {};
  for (int p = 0; p <= pos; ++p)
    if (root.leaf(p).kind != sched::IterKind::Spatial) return {};
  if (cur != &st.stages()[reader] && attach_position < pos) return {};
  return {root.name, pos};
}

// The orders the tiling rules emit for stage `i`: axis order (-1), and the weight-vector axis
// last when there is one.
inline std::vector<int> innermost_axis_choices(const SketchContext& ctx, const sched::State& st,
                                               int i) {
  const int axis = channel_innermost_axis(ctx, st, i);
  return axis < 0 ? std::vector<int>{-1} : std::vector<int>{-1, axis};
}

// Multi-level tiling with `innermost` (≥ 0: a weight-vector axis) last; that axis's innermost
// tile is then one vector long, which random annotation keeps (perfect tilings of a channel
// count rarely draw a multiple of the vector for the last of four lengths) and mutation may
// still change.
inline std::vector<int> tile_for_vectors(const SketchContext& ctx, sched::State& s, int i,
                                         const std::string& structure, int innermost) {
  const std::vector<int> steps = multi_level_tile(s, i, structure, innermost);
  if (innermost < 0 || innermost >= static_cast<int>(steps.size())) return steps;
  const sched::Stage& g = s.stages()[i];
  const int64_t lanes = ctx.task().target.vector_lanes(g.op.dtype().bytes());
  const auto& sp = std::get<sched::SplitStep>(s.steps()[static_cast<size_t>(steps[innermost])]);
  if (lanes > 1 && sp.extent % lanes == 0 && !sp.lengths.empty()) {
    std::vector<std::optional<int64_t>> lengths(sp.lengths.size());
    lengths.back() = lanes;
    s.set_split_lengths(steps[innermost], lengths);
  }
  return steps;
}

}  // namespace detail

LOOM_DECL SketchRule rule_add_rfactor() {
  return {"AddRfactor",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            return ctx.options().enable_rfactor && needs_rfactor(ctx, st, i) ? RuleCondition::Apply
                                                                             : RuleCondition::Skip;
          },
          [](const SketchContext&, const sched::State& st, int i) {
            const std::string name = st.stages()[i].name;
            sched::State base = st;
            const int r = detail::fuse_reduce_loops(base, name);
            // rfactor needs the extents of the two parts, so the split takes a stand-in length
            // that is unset again afterwards: random annotation draws it like any tile size.
            base.split(name, r, {1});
            const int split_step = static_cast<int>(base.steps().size()) - 1;
            detail::Successors out;
            for (int part : {0, 1}) {
              sched::State s = base;
              const std::string rf = s.rfactor(name, r + part, r);
              // The inner part as the innermost loop of the partial sums: a vectorizable
              // accumulator (Ansor's second variant).
              if (part == 1) detail::move_innermost(s, rf, r);
              s.set_split_lengths(split_step, {std::nullopt});
              out.emplace_back(std::move(s), i - 1);  // "X.rf" is at i, X at i + 1
            }
            return out;
          }};
}

LOOM_DECL SketchRule rule_memory_bound_reduction() {
  return {"MemoryBoundReduction",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const sched::Stage& s = st.stages()[i];
            if (!ctx.options().enable_memory_bound_reduction || !has_reduce(s) ||
                !is_untouched(s) || needs_multi_level_tiling(ctx, st, i))
              return RuleCondition::Skip;
            const StageOrigin o = ctx.origin(st, i);
            if (o.op < 0 || o.cache_write_copy || o.cache_write_local) return RuleCondition::Skip;
            return detail::row_consumer(st, i) >= 0 ? RuleCondition::Apply : RuleCondition::Skip;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const sched::Stage& g = st.stages()[i];
            const std::string name = g.name;
            const std::string consumer = st.stages()[detail::row_consumer(st, i)].name;
            const int rank = g.num_spatial_axes;
            int64_t reduce = 1;
            for (const sched::Iterator& it : g.iters)
              if (it.kind == sched::IterKind::Reduce) reduce *= std::max<int64_t>(it.extent, 1);
            const int lanes = ctx.task().target.vector_lanes(g.op.dtype().bytes());
            sched::State s = st;
            if (lanes > 1 && reduce >= 2 * lanes) {
              // Partial results in a vector of `lanes` accumulators, folded once per row.
              const int r = detail::fuse_reduce_loops(s, name);
              s.split(name, r, {lanes});
              const std::string rf = s.rfactor(name, r + 1, r);
              detail::move_innermost(s, rf, r);
              s.compute_at(rf, name, rank - 1);
            }
            // One row at a time: the row stays in cache between the reduction and its use.
            s.compute_at(name, consumer, rank - 1);
            return detail::Successors{{std::move(s), i - 1}};
          }};
}

LOOM_DECL SketchRule rule_pack_reused_input() {
  return {"PackReusedInput",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            return ctx.options().enable_packing && detail::pack_reader(ctx, st, i) >= 0
                       ? RuleCondition::Apply
                       : RuleCondition::Skip;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const int reader_index = detail::pack_reader(ctx, st, i);
            const std::string reader = st.stages()[reader_index].name;
            const std::string input = st.stages()[i].name;
            detail::Successors out;
            // The tile of one reduce step, packed per tile where the reader's loops reach it.
            sched::State s = st;
            const std::string packed = s.cache_read(input, ir::MemoryScope::Local, {reader});
            s.compute_at(packed, reader, detail::first_reduce_level_end(s.stage(reader)));
            out.emplace_back(std::move(s), i - 1);  // the copy is at i + 1
            // The whole panel (every reduce step) of an outer spatial tile, packed once and
            // reused by all the row tiles inside it: BLAS's packed B panel. On GEMM 1024^3 this
            // placement made one program 4.7x faster than either packing per reduce step or
            // none (B's rows are 4 KiB apart: without the panel every k step misses).
            const auto [root, position] = detail::panel_pack_location(st, reader_index);
            if (!root.empty()) {
              sched::State panel = st;
              const std::string p = panel.cache_read(input, ir::MemoryScope::Local, {reader});
              panel.compute_at(p, root, position);
              out.emplace_back(std::move(panel), i - 1);
            }
            return out;
          }};
}

LOOM_DECL SketchRule rule_add_cache_write() {
  return {"AddCacheWrite",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            if (!ctx.options().enable_cache_write || !needs_multi_level_tiling(ctx, st, i) ||
                has_cache_write_stage(ctx, st, i) ||
                single_elementwise_matched_consumer(ctx, st, i) >= 0)
              return RuleCondition::Skip;
            return RuleCondition::Apply;
          },
          [](const SketchContext&, const sched::State& st, int i) {
            sched::State s = st;
            s.cache_write(st.stages()[i].name, ir::MemoryScope::Local);
            // "X.local" now sits at index i and X at i + 1: stay at i so that the tiling rules
            // see the new stage, whose consumer X matches it element-wise.
            return std::vector<std::pair<sched::State, int>>{{std::move(s), i}};
          }};
}

LOOM_DECL SketchRule rule_multi_level_tiling_with_fusion() {
  return {"MultiLevelTilingWithFusion",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            if (!needs_multi_level_tiling(ctx, st, i) ||
                single_elementwise_matched_consumer(ctx, st, i) < 0)
              return RuleCondition::Skip;
            // A cache stage exists only to be fused into its copy; without one the plain
            // tiling (next rule) is a sketch of its own.
            return has_cache_write_stage(ctx, st, i) ? RuleCondition::ApplyAndSkipRest
                                                     : RuleCondition::Apply;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const std::string& structure = ctx.options().cpu_tiling_structure;
            std::vector<std::pair<sched::State, int>> out;
            for (int innermost : detail::innermost_axis_choices(ctx, st, i)) {
              sched::State base = st;
              const std::vector<int> steps =
                  detail::tile_for_vectors(ctx, base, i, structure, innermost);
              const int c = single_elementwise_matched_consumer(ctx, base, i);
              if (c < 0) return std::vector<std::pair<sched::State, int>>{};
              const std::string producer = st.stages()[i].name, consumer = base.stages()[c].name;
              for (int level : {1, 2}) {
                if (structure.size() < static_cast<size_t>(level) || structure[level - 1] != 'S' ||
                    steps.empty())
                  continue;
                sched::State s = base;
                const int at = detail::follow_tiling(s, consumer, steps, level);
                s.compute_at(producer, consumer, at);
                out.emplace_back(std::move(s), i - 1);
              }
            }
            return out;
          }};
}

LOOM_DECL SketchRule rule_multi_level_tiling() {
  return {"MultiLevelTiling",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            return needs_multi_level_tiling(ctx, st, i) ? RuleCondition::ApplyAndSkipRest
                                                        : RuleCondition::Skip;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            std::vector<std::pair<sched::State, int>> out;
            for (int innermost : detail::innermost_axis_choices(ctx, st, i)) {
              sched::State s = st;
              detail::tile_for_vectors(ctx, s, i, ctx.options().cpu_tiling_structure, innermost);
              out.emplace_back(std::move(s), i - 1);
            }
            return out;
          }};
}

LOOM_DECL SketchRule rule_skip_stage() {
  return {"SkipStage",
          [](const SketchContext&, const sched::State&, int) { return RuleCondition::Apply; },
          [](const SketchContext&, const sched::State& st, int i) {
            return std::vector<std::pair<sched::State, int>>{{st, i - 1}};
          }};
}

LOOM_DECL const std::vector<SketchRule>& cpu_sketch_rules() {
  // SimplifyComputeWithConstTensor (winograd) is not planned: loom has no const-tensor ops.
  static const std::vector<SketchRule> rules = {
      rule_always_inline(),      rule_add_rfactor(),     rule_memory_bound_reduction(),
      rule_pack_reused_input(),  rule_add_cache_write(), rule_multi_level_tiling_with_fusion(),
      rule_multi_level_tiling(), rule_skip_stage()};
  return rules;
}

LOOM_DECL std::vector<sched::State> generate_sketches(
    const Task& task, const SearchOptions& options, const std::vector<SketchRule>& custom_rules,
    const std::vector<std::string>& constant_inputs) {
  const bool gpu = task.target.is_cuda();
  if (gpu)
    detail::check_gpu_structure(options.gpu_tiling_structure);
  else
    detail::check_structure(options.cpu_tiling_structure);
  const std::vector<SketchRule>& builtin = gpu ? gpu_sketch_rules() : cpu_sketch_rules();
  std::vector<SketchRule> rules = custom_rules;
  rules.insert(rules.end(), builtin.begin(), builtin.end());
  const SketchContext ctx(task, options, constant_inputs);
  constexpr size_t max_sketches = 10000;

  sched::State init(task.dag);
  std::vector<std::pair<sched::State, int>> work{
      {init, static_cast<int>(init.stages().size()) - 1}};
  std::vector<std::pair<sched::State, int>> next;
  std::vector<sched::State> out;
  // Every built-in rule either moves to an earlier stage or inserts a stage and stays; more
  // rounds than that allows means a rule never advances.
  const size_t max_rounds = 4 * init.stages().size() + 16;
  for (size_t round = 0; !work.empty(); ++round) {
    LOOM_USER_CHECK(round <= max_rounds, "loom.search.E803")
        << "generate_sketches: the rules did not finish after " << max_rounds
        << " rounds; a rule probably returns its input without moving to an earlier stage";
    next.clear();
    for (auto& [state, stage] : work) {
      if (stage < 0) {
        out.push_back(std::move(state));
        continue;
      }
      for (const SketchRule& rule : rules) {
        const RuleCondition c = rule.condition(ctx, state, stage);
        if (c == RuleCondition::Skip) continue;
        for (auto& succ : rule.apply(ctx, state, stage)) next.push_back(std::move(succ));
        if (c == RuleCondition::ApplyAndSkipRest) break;
      }
    }
    LOOM_USER_CHECK(out.size() + next.size() <= max_sketches, "loom.search.E803")
        << "generate_sketches: the rules produced more than " << max_sketches
        << " states; a rule probably returns its input without moving to an earlier stage";
    std::swap(work, next);
  }
  return out;
}

}  // namespace search
LOOM_END_NAMESPACE

// The GPU rules share this file's helpers (compiled through it, see cmake/LoomCompiled.cmake).
#include "loom/search/impl/gpu_sketch.ipp"
