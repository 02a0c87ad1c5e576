// Bodies of loom/search/sketch.hpp: the GPU sketch rules (Ansor's GPU rule list).
#include "loom/search/sketch.hpp"

#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

LOOM_BEGIN_NAMESPACE
namespace search {

LOOM_DECL bool cross_thread_split(const sched::State& st, const std::string& stage, int& step) {
  const auto& steps = st.steps();
  for (size_t k = 0; k + 1 < steps.size(); ++k) {
    auto* sp = std::get_if<sched::SplitStep>(&steps[k]);
    auto* an = std::get_if<sched::AnnotationStep>(&steps[k + 1]);
    if (sp && an && sp->stage == stage && an->stage == stage && sp->lengths.size() == 1 &&
        an->iter == sp->iter + 1 && an->annotation == sched::Annotation::ThreadIdxX) {
      step = static_cast<int>(k);
      return true;
    }
  }
  return false;
}

namespace detail {

// Whether stage `consumer` reads stage `producer` itself, not through inlined stages.
inline bool reads_directly(const sched::State& st, int consumer, int producer) {
  bool found = false;
  ir::post_order_visit(st.stages()[consumer].op->body, [&](const ir::Expr& e) {
    if (auto* t = e.as<ir::TensorRead>()) found = found || st.stage_of(t->tensor.get()) == producer;
  });
  return found;
}

// The multi-level-tiled stage that reads stage `i` directly and is its only consumer, or -1.
inline int shared_cache_reader(const SketchContext& ctx, const sched::State& st, int i) {
  const sched::Stage& s = st.stages()[i];
  if (s.location == sched::ComputeLocation::Inlined) return -1;
  const auto cons = st.consumers(i);
  if (cons.size() != 1) return -1;
  const int c = cons[0];
  const sched::Stage& cs = st.stages()[c];
  if (!needs_multi_level_tiling(ctx, st, c) || !is_tiled(cs) || first_reduce_level_end(cs) < 0)
    return -1;
  return reads_directly(st, c, i) ? c : -1;
}

// Where the shared copies of a stage's operands may be computed: the end of its outer reduce
// tile level (one step of its middle level at a time, Ansor's place) and, for a tensor-core
// tile with SearchOptions::gpu_deep_k_tiles, also the end of the outermost reduce level, so
// that one copy holds every middle step (several instructions' k per barrier). Where another
// operand's copy is already placed, there only: the operands step through K together.
inline std::vector<int> shared_copy_positions(const SketchContext& ctx, const sched::State& st,
                                              int reader) {
  const sched::Stage& rs = st.stages()[reader];
  for (const sched::Stage& s : st.stages())
    if (s.scope == ir::MemoryScope::Shared && s.location == sched::ComputeLocation::At &&
        s.attach_stage == rs.name)
      return {rs.leaf_position(s.attach_iter)};
  const int end = first_reduce_level_end(rs);
  std::vector<int> out{end};
  const bool tensor_core = std::any_of(rs.leaves.begin(), rs.leaves.end(), [&](int id) {
    return rs.iters[id].annotation == sched::Annotation::Tensorized;
  });
  if (!tensor_core || !ctx.options().gpu_deep_k_tiles) return out;
  // The level ending at `end` is the outermost and the middle loops of each reduce axis
  // ("RR" of tensor_core_tiling_structure): the outermost end halfway.
  int begin = end;
  while (begin > 0 && rs.leaf(begin - 1).kind == sched::IterKind::Reduce) --begin;
  const int length = end - begin + 1;
  if (length % 2 == 0) out.push_back(begin + length / 2 - 1);
  return out;
}

}  // namespace detail

LOOM_DECL SketchRule rule_add_cache_read_shared() {
  return {"AddCacheReadShared",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            return detail::shared_cache_reader(ctx, st, i) >= 0 ? RuleCondition::ApplyAndSkipRest
                                                                : RuleCondition::Skip;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const int reader_index = detail::shared_cache_reader(ctx, st, i);
            const std::string reader = st.stages()[reader_index].name;
            detail::Successors out;
            // One step of the reader's outer reduction tile at a time (Ansor's
            // GetLastReduceIteratorInOutermostReduceTile), or, for tensor cores, every step
            // of its middle level too.
            for (int position : detail::shared_copy_positions(ctx, st, reader_index)) {
              sched::State s = st;
              const std::string copy =
                  s.cache_read(st.stages()[i].name, ir::MemoryScope::Shared, {reader});
              s.compute_at(copy, reader, position);
              // The copy sits at i + 1; the stage itself is visited again (it may be inlined).
              out.emplace_back(std::move(s), i);
            }
            return out;
          }};
}

LOOM_DECL SketchRule rule_always_inline_gpu() {
  return {"AlwaysInlineGpu",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const sched::Stage& s = st.stages()[i];
            if (s.is_placeholder || s.is_output || s.location != sched::ComputeLocation::Root ||
                has_reduce(s) || !is_untouched(s))
              return RuleCondition::Skip;
            const StageOrigin o = ctx.origin(st, i);
            if (o.op < 0 || o.cache_write_local || o.cache_write_copy) return RuleCondition::Skip;
            // Any element-wise op, not only the strictly inlineable ones: on a GPU recomputing
            // an exp is cheaper than a round trip through global memory (Ansor's GPU rule).
            try {
              sched::State probe = st;
              probe.compute_inline(s.name);
            } catch (const user_error&) {
              return RuleCondition::Skip;
            }
            return RuleCondition::ApplyAndSkipRest;
          },
          [](const SketchContext&, const sched::State& st, int i) {
            sched::State s = st;
            s.compute_inline(st.stages()[i].name);
            return detail::Successors{{std::move(s), i - 1}};
          }};
}

namespace detail {

// Whether the stage's loops are its axes or CrossThreadReduction's split of them.
inline bool is_untiled(const sched::Stage& s) {
  return s.location == sched::ComputeLocation::Root && s.fuses.empty() && s.splits.size() <= 1;
}

// Ansor's CrossThreadReduction: a reduction with more terms than threads it could spread its
// outputs over runs each output on a block's threads (the fused reduction loop split, its inner
// part on threadIdx.x), computed inside the consumer that walks the same rows when there is one
// (the consumer's innermost loop then takes the same threads).
inline SketchRule rule_cross_thread_reduction() {
  return {"CrossThreadReduction",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const sched::Stage& s = st.stages()[i];
            if (!has_reduce(s) || !is_untouched(s)) return RuleCondition::Skip;
            const StageOrigin o = ctx.origin(st, i);
            if (o.op < 0 || o.cache_write_copy || o.cache_write_local) return RuleCondition::Skip;
            int64_t space = 1, reduce = 1;
            for (const sched::Iterator& it : s.iters)
              (it.kind == sched::IterKind::Reduce ? reduce : space) *=
                  std::max<int64_t>(it.extent, 1);
            const Target& t = ctx.task().target;
            if (needs_multi_level_tiling(ctx, st, i))
              // Enough outputs to fill blocks of threads: tiling them reuses more.
              return space <= t.max_threads_per_block && space < reduce ? RuleCondition::Apply
                                                                        : RuleCondition::Skip;
            return reduce > t.warp_size ? RuleCondition::Apply : RuleCondition::Skip;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            sched::State s = st;
            const std::string name = st.stages()[i].name;
            const int r = fuse_reduce_loops(s, name);
            const int64_t warp = ctx.task().target.warp_size;
            // The thread count is a stand-in: ThreadBind draws it (threads_across_steps).
            const int c = row_consumer(s, i, true);
            if (c >= 0 && !has_reduce(s.stages()[c]) && is_untiled(s.stages()[c])) {
              const std::string consumer = s.stages()[c].name;
              const int rank = s.stages()[i].num_spatial_axes;
              int split = -1;
              if (!cross_thread_split(s, consumer, split)) {
                s.split(consumer, static_cast<int>(s.stage(consumer).leaves.size()) - 1, {warp});
                split = static_cast<int>(s.steps().size()) - 1;
                s.annotate(consumer, static_cast<int>(s.stage(consumer).leaves.size()) - 1,
                           sched::Annotation::ThreadIdxX);
              }
              s.follow_split(name, r, split, 1);
              s.annotate(name, r + 1, sched::Annotation::ThreadIdxX);
              s.compute_at(name, consumer, rank - 1);
            } else {
              s.split(name, r, {warp});
              s.annotate(name, r + 1, sched::Annotation::ThreadIdxX);
            }
            return Successors{{std::move(s), i - 1}};
          }};
}

// An element-wise stage that multi-level tiling would take (it reuses some reads, as a layer
// norm's result reuses gamma and beta across rows) but that walks the rows of a reduction
// CrossThreadReduction can take: also left untiled, so that the reduction can be computed
// inside its rows.
inline SketchRule rule_untiled_row_consumer_gpu() {
  return {
      "UntiledRowConsumerGpu",
      [](const SketchContext& ctx, const sched::State& st, int i) {
        const sched::Stage& s = st.stages()[i];
        if (has_reduce(s) || !is_untouched(s) || !needs_multi_level_tiling(ctx, st, i) ||
            ctx.origin(st, i).cache_write_local)
          return RuleCondition::Skip;
        for (int p : st.producers(i)) {
          const RuleCondition c = rule_cross_thread_reduction().condition(ctx, st, p);
          if (c != RuleCondition::Skip && !needs_multi_level_tiling(ctx, st, p) &&
              row_consumer(st, p, true) == i)
            return RuleCondition::Apply;
        }
        return RuleCondition::Skip;
      },
      [](const SketchContext&, const sched::State& st, int i) { return Successors{{st, i - 1}}; }};
}

inline SketchRule rule_add_cache_write_gpu() {
  SketchRule r = rule_add_cache_write();
  r.name = "AddCacheWriteGpu";
  auto cpu_condition = r.condition;
  // On a GPU the accumulator always goes to registers: no sketch without it.
  r.condition = [cpu_condition](const SketchContext& ctx, const sched::State& st, int i) {
    return cpu_condition(ctx, st, i) == RuleCondition::Skip ? RuleCondition::Skip
                                                            : RuleCondition::ApplyAndSkipRest;
  };
  return r;
}

// The axes TensorCoreTilingGpu gives an m16n8k16 tile (sketch.hpp): spatial axes m and n, the
// innermost reduction axis k read by both operands; and the instruction's reduction length (16;
// 8 for float32 operands, m16n8k8 in TF32, on a target that allows it).
struct tensor_core_axes {
  int m = -1, n = -1, k = -1;
  int64_t k_length = 16;
  /// The first axis of the run of axes that make M (N): m (n) itself unless its extent is no
  /// multiple of 16 (8) but that of the run ending at it is — a convolution's output rows and
  /// columns (and batch), read only by the data, as the M of an implicit GEMM.
  int m_first = -1, n_first = -1;
  /// Per spatial axis, its lane and fragment lengths: over M's run they multiply to 8 and 2,
  /// over N's to 4 and 2, 1 elsewhere. Each axis of a run takes the powers of two its extent
  /// allows, innermost axis first and lanes before fragments, so that a thread's rows are a box
  /// of the run's axes (2 rows × 8 columns of a 56-wide image) rather than a stretch of their
  /// fused range, whose bounding box would span whole rows.
  std::vector<int64_t> lanes, fragments;
  /// No run of M's axes has a multiple of 16 rows: M is the whole run of axes only the data
  /// reads, and the lanes and fragments left over after the powers of two go to axes whose
  /// extents they do not divide. The tiles pass the run's end; the accumulators of rows past it
  /// read zero padding (lower/infer_regions.hpp) and are never stored.
  bool padded_m = false;
  /// The operand N's axis reads has k as its innermost index (B given as [N, K]).
  bool n_operand_along_k = false;
};

inline std::optional<tensor_core_axes> tensor_core_tile_axes(const SketchContext& ctx,
                                                             const sched::State& st, int i) {
  const Target& target = ctx.task().target;
  if (!target.is_cuda() || !ctx.options().gpu_tensor_cores || target.compute_capability() < 80)
    return std::nullopt;
  const sched::Stage& s = st.stages()[i];
  if (s.is_placeholder || !is_untouched(s) || s.op.dtype() != ir::DType::f32()) return std::nullopt;
  auto* red = s.op->body.as<ir::Reduce>();
  if (!red || red->op != ir::ReduceOp::Sum || red->condition.defined()) return std::nullopt;
  auto operand = [](const ir::Expr& e) -> const ir::TensorRead* {
    auto* c = e.as<ir::Cast>();
    auto* r = c && c->dtype == ir::DType::f32() ? c->value.as<ir::TensorRead>() : nullptr;
    return r && r->dtype.is_16bit_float() ? r : nullptr;
  };
  auto tf32_operand = [&](const ir::Expr& e) -> const ir::TensorRead* {
    auto* r = e.as<ir::TensorRead>();
    return target.tf32 && r && r->dtype == ir::DType::f32() ? r : nullptr;
  };
  auto* mul = red->source.as<ir::Mul>();
  const ir::TensorRead* p = mul ? operand(mul->a) : nullptr;
  const ir::TensorRead* q = mul ? operand(mul->b) : nullptr;
  tensor_core_axes a;
  if (mul && !p && !q) {
    p = tf32_operand(mul->a);
    q = tf32_operand(mul->b);
    a.k_length = 8;
  }
  if (!p || !q || p->dtype != q->dtype) return std::nullopt;
  auto reads = [](const ir::TensorRead* r, const ir::IterVar& axis) {
    for (const ir::Expr& e : r->indices)
      if (ir::uses_var(e, axis.variable())) return true;
    return false;
  };
  const auto& axes = s.op->axes;
  // n: the last axis only one operand reads; m: the last before it only the other reads.
  for (int d = static_cast<int>(axes.size()) - 1; d >= 0 && a.m < 0; --d) {
    const bool by_p = reads(p, axes[d]), by_q = reads(q, axes[d]);
    if (by_p == by_q) continue;
    if (a.n < 0)
      a.n = d;
    else if (by_p != reads(p, axes[a.n]))
      a.m = d;
  }
  // k: the last reduction axis both read whose extent the instruction's divides (a NCHW
  // convolution's channels, not its filter columns); the other reduction axes' innermost tiles
  // are 1.
  for (int d = static_cast<int>(red->axes.size()) - 1; d >= 0 && a.k < 0; --d)
    if (reads(p, red->axes[d]) && reads(q, red->axes[d]) && red->axes[d].extent % a.k_length == 0)
      a.k = d;
  if (a.m < 0 || a.n < 0 || a.k < 0) return std::nullopt;
  const ir::TensorRead* n_operand = reads(p, axes[a.n]) ? p : q;
  a.n_operand_along_k = ir::uses_var(n_operand->indices.back(), red->axes[a.k].variable());
  // The shortest run of axes ending at `last` (none before `floor`), each read by the same one
  // operand, whose extents multiply to a multiple of `multiple`; -1 when there is none.
  auto run_start = [&](int last, int floor, int64_t multiple) {
    const bool by_p = reads(p, axes[last]);
    int64_t extent = 1;
    for (int d = last; d > floor; --d) {
      if (reads(p, axes[d]) != by_p || reads(q, axes[d]) == by_p) return -1;
      extent *= axes[d].extent;
      if (extent % multiple == 0) return d;
    }
    return -1;
  };
  a.m_first = run_start(a.m, -1, 16);
  a.n_first = run_start(a.n, a.m, 8);
  // No run of M's axes has 16 rows to give (a 14 x 14 or 7 x 7 image, one of them): the whole
  // run, its tiles padded past its end.
  a.padded_m = a.m_first < 0;
  if (a.padded_m) {
    const bool by_p = reads(p, axes[a.m]);
    a.m_first = a.m;
    while (a.m_first > 0 && reads(p, axes[a.m_first - 1]) == by_p &&
           reads(q, axes[a.m_first - 1]) != by_p)
      --a.m_first;
  }
  if (a.n_first < 0) return std::nullopt;
  a.lanes.assign(axes.size(), 1);
  a.fragments.assign(axes.size(), 1);
  auto assign_run = [&](int first, int last, int64_t lanes, int64_t fragments) {
    for (int d = last; d >= first; --d) {
      int64_t room = axes[d].extent & -axes[d].extent;  // its largest power-of-two divisor
      const int64_t l = std::min(room, lanes);
      room /= l;
      lanes /= l;
      const int64_t f = std::min(room, fragments);
      fragments /= f;
      a.lanes[d] = l;
      a.fragments[d] = f;
    }
  };
  assign_run(a.m_first, a.m, 8, 2);
  assign_run(a.n_first, a.n, 4, 2);
  if (a.padded_m) {
    int64_t lanes = 8, fragments = 2;
    for (int d = a.m_first; d <= a.m; ++d) {
      lanes /= a.lanes[d];
      fragments /= a.fragments[d];
    }
    // Each factor of 2 still to give goes to the innermost axis whose lanes and fragments stay
    // within its extent (a longer inner split would shrink to the extent, and the lanes with
    // it): 7 x 7 takes 4 columns and 2 x 2 rows, tiles of 8 x 8 covering 49 points.
    auto give = [&](std::vector<int64_t>& level, int64_t left) {
      for (; left > 1; left /= 2) {
        int d = a.m;
        while (d >= a.m_first && a.lanes[d] * a.fragments[d] * 2 > axes[d].extent) --d;
        if (d < a.m_first) return false;
        level[d] *= 2;
      }
      return true;
    };
    if (!give(a.lanes, lanes) || !give(a.fragments, fragments)) return std::nullopt;
  }
  return a;
}

// TensorCoreTilingGpu's state; with `warpgroup_warps` > 0 the warpgroup variant (sketch.hpp):
// that many warps along M, each one instruction's 16 rows (register level 1), none along N,
// so that each four consecutive warps' instructions of a k-step are one warpgroup MMA
// (lower::WgmmaNest) once the copies are lane-major and swizzled (ThreadBind does so on a
// warpgroup_mma target). None when the stage has no consumer to tile.
inline std::optional<sched::State> tensor_core_tiling(const SketchContext& ctx,
                                                      const sched::State& st, int i,
                                                      const tensor_core_axes& axes,
                                                      int64_t warpgroup_warps) {
  const sched::Stage& stage = st.stages()[i];
  const std::string producer = stage.name;
  const int n_reduce = static_cast<int>(stage.leaves.size()) - stage.num_spatial_axes;
  const int n_spatial = stage.num_spatial_axes;
  sched::State s = st;
  const int c0 = single_elementwise_matched_consumer(ctx, s, i);
  if (c0 < 0) return std::nullopt;
  const std::string consumer = s.stages()[c0].name;
  const size_t first = s.steps().size();
  multi_level_tile(s, i, tensor_core_tiling_structure);
  // The lengths the tile fixes; the split of root loop r is the r-th step made above.
  std::vector<sched::Step> steps = s.steps();
  for (size_t k = first, r = 0; k < steps.size(); ++k) {
    auto* sp = std::get_if<sched::SplitStep>(&steps[k]);
    if (!sp || sp->stage != producer) continue;
    const int axis = static_cast<int>(r++);
    if (axis < n_spatial) {  // vthread, warp, lane, register, fragment
      sp->lengths[0] = 1;
      sp->lengths[tensor_core_lane_length] = axes.lanes[static_cast<size_t>(axis)];
      sp->lengths[4] = axes.fragments[static_cast<size_t>(axis)];
      if (warpgroup_warps > 0 && axis == axes.m) {
        sp->lengths[tensor_core_warp_length] = warpgroup_warps;
        sp->lengths[3] = 1;
      } else if (warpgroup_warps > 0 && axis == axes.n) {
        sp->lengths[tensor_core_warp_length] = 1;
      }
    } else {  // middle, innermost
      sp->lengths[1] = axis - n_spatial == axes.k ? axes.k_length : 1;
    }
  }
  s = sched::replay(s.dag_ptr(), steps);
  std::vector<int> spatial_steps;
  for (size_t k = first; k < s.steps().size() && spatial_steps.size() < size_t(n_spatial); ++k)
    if (auto* sp = std::get_if<sched::SplitStep>(&s.steps()[k]); sp && sp->stage == producer)
      spatial_steps.push_back(static_cast<int>(k));
  const int at = follow_tiling(s, consumer, spatial_steps, 4);
  s.compute_at(producer, consumer, at);
  // Block, vthread, then warp and lane levels together as the threads.
  if (n_spatial > 1) {
    std::vector<int> group(static_cast<size_t>(n_spatial));
    for (int level = 0; level < 2; ++level) {
      std::iota(group.begin(), group.end(), level);
      s.fuse(consumer, group);
    }
  }
  std::vector<int> threads(static_cast<size_t>(2 * n_spatial));
  std::iota(threads.begin(), threads.end(), 2);
  s.fuse(consumer, threads);
  s.annotate(consumer, 0, sched::Annotation::BlockIdxX);
  s.annotate(consumer, 1, sched::Annotation::VThread);
  s.annotate(consumer, 2, sched::Annotation::ThreadIdxX);
  // The innermost reduction level of K: its loop sits after the spatial levels before it
  // and the reduction's outer two levels (structure "SSSSRRSRS").
  s.annotate(producer, 5 * n_spatial + 2 * n_reduce + axes.k, sched::Annotation::Tensorized);
  return s;
}

inline SketchRule rule_tensor_core_tiling_gpu() {
  return {"TensorCoreTilingGpu",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            return needs_multi_level_tiling(ctx, st, i) &&
                           single_elementwise_matched_consumer(ctx, st, i) >= 0 &&
                           tensor_core_tile_axes(ctx, st, i)
                       ? RuleCondition::Apply
                       : RuleCondition::Skip;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            const tensor_core_axes axes = *tensor_core_tile_axes(ctx, st, i);
            Successors out;
            if (auto s = tensor_core_tiling(ctx, st, i, axes, 0))
              out.push_back({std::move(*s), i - 1});
            // Warpgroup tiles (Target::warpgroup_mma): one M axis and one N axis; TF32 only
            // with B stored along k (wgmma reads TF32 operands K-major only).
            if (ctx.task().target.warpgroup_mma() &&
                (axes.k_length == 16 || axes.n_operand_along_k) && axes.m_first == axes.m &&
                axes.n_first == axes.n && !axes.padded_m)
              for (const int64_t warps : {4, 8})
                if (st.stages()[i].op->axes[static_cast<size_t>(axes.m)].extent % (16 * warps) == 0)
                  if (auto s = tensor_core_tiling(ctx, st, i, axes, warps))
                    out.push_back({std::move(*s), i - 1});
            return out;
          }};
}

inline SketchRule rule_multi_level_tiling_with_fusion_gpu() {
  return {"MultiLevelTilingWithFusionGpu",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            return needs_multi_level_tiling(ctx, st, i) &&
                           single_elementwise_matched_consumer(ctx, st, i) >= 0
                       ? RuleCondition::ApplyAndSkipRest
                       : RuleCondition::Skip;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            sched::State s = st;
            const std::vector<int> steps =
                multi_level_tile(s, i, ctx.options().gpu_tiling_structure);
            const int c = single_elementwise_matched_consumer(ctx, s, i);
            if (c < 0 || steps.empty()) return Successors{};
            const std::string producer = st.stages()[i].name, consumer = s.stages()[c].name;
            // The consumer takes the block, vthread and thread levels; the producer is computed
            // per thread inside them.
            const int at = follow_tiling(s, consumer, steps, 3);
            s.compute_at(producer, consumer, at);
            return Successors{{std::move(s), i - 1}};
          }};
}

inline SketchRule rule_multi_level_tiling_gpu() {
  return {"MultiLevelTilingGpu",
          [](const SketchContext& ctx, const sched::State& st, int i) {
            return needs_multi_level_tiling(ctx, st, i) ? RuleCondition::ApplyAndSkipRest
                                                        : RuleCondition::Skip;
          },
          [](const SketchContext& ctx, const sched::State& st, int i) {
            sched::State s = st;
            multi_level_tile(s, i, ctx.options().gpu_tiling_structure);
            return Successors{{std::move(s), i - 1}};
          }};
}

}  // namespace detail

LOOM_DECL std::vector<bool> fixed_split_lengths(const sched::State& state,
                                                const sched::SplitStep& split,
                                                bool warpgroup_target) {
  std::vector<bool> fixed(split.lengths.size(), false);
  const sched::Stage& s = state.stage(split.stage);
  const bool tensor_core = std::any_of(s.leaves.begin(), s.leaves.end(), [&](int id) {
    return s.iters[id].annotation == sched::Annotation::Tensorized;
  });
  if (!tensor_core) return fixed;
  if (split.lengths.size() == 5) {  // vthread, warp, lane, register, fragment
    fixed[0] = fixed[tensor_core_lane_length] = fixed[4] = true;
    if (!warpgroup_target) return fixed;
    // M's lanes are 8 (N's 4) where one axis makes each (a GEMM).
    auto length = [](const sched::SplitStep& sp, int level) {
      return sp.lengths[static_cast<size_t>(level)].value_or(0);
    };
    bool m_ok = false, n_ok = false;
    for (const sched::Step& step : state.steps()) {
      auto* sp = std::get_if<sched::SplitStep>(&step);
      if (!sp || sp->stage != split.stage || sp->lengths.size() != 5) continue;
      if (length(*sp, tensor_core_lane_length) == 8)
        m_ok = length(*sp, tensor_core_warp_length) % 4 == 0 &&
               length(*sp, tensor_core_warp_length) > 0 && length(*sp, 3) == 1;
      if (length(*sp, tensor_core_lane_length) == 4)
        n_ok = length(*sp, tensor_core_warp_length) == 1;
    }
    if (m_ok && n_ok) {
      fixed[tensor_core_warp_length] = true;
      if (length(split, tensor_core_lane_length) == 8) fixed[3] = true;
    }
  } else if (split.lengths.size() == 2) {  // middle, innermost
    fixed[1] = true;
  }
  return fixed;
}

LOOM_DECL const std::vector<SketchRule>& gpu_sketch_rules() {
  static const std::vector<SketchRule> rules = {rule_add_cache_read_shared(),
                                                rule_always_inline_gpu(),
                                                detail::rule_cross_thread_reduction(),
                                                detail::rule_untiled_row_consumer_gpu(),
                                                detail::rule_add_cache_write_gpu(),
                                                detail::rule_tensor_core_tiling_gpu(),
                                                detail::rule_multi_level_tiling_with_fusion_gpu(),
                                                detail::rule_multi_level_tiling_gpu(),
                                                rule_skip_stage()};
  return rules;
}

}  // namespace search
LOOM_END_NAMESPACE
