// Bodies of loom/search/annotate.hpp: the GPU init rules (ThreadBind, GPU unroll, verification).
#include "loom/search/annotate.hpp"

#include "loom/detail/random.hpp"
#include "loom/lower/gpu.hpp"
#include "loom/lower/infer_regions.hpp"

#include <algorithm>
#include <numeric>

LOOM_BEGIN_NAMESPACE
namespace search {

namespace detail {

inline bool name_ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// k when the stage's leaves start with k spatial loops "<axis>.0", then k "<axis>.1", then k
// "<axis>.2": the block, vthread and thread levels of a multi-level tiling (followed by a
// consumer, or the tiled stage itself); 0 otherwise.
inline int gpu_tile_group_size(const sched::Stage& s) {
  const int n = static_cast<int>(s.leaves.size());
  int k = 0;
  while (k < n && s.leaf(k).kind == sched::IterKind::Spatial &&
         name_ends_with(s.leaf(k).name, ".0"))
    ++k;
  if (k == 0 || 3 * k > n) return 0;
  for (int p = k; p < 3 * k; ++p)
    if (s.leaf(p).kind != sched::IterKind::Spatial ||
        !name_ends_with(s.leaf(p).name, p < 2 * k ? ".1" : ".2"))
      return 0;
  return k;
}

// The split steps of stage `stage` that tiled its spatial loops with the GPU structure (those
// with one length per spatial level below the outermost).
inline std::vector<int> gpu_spatial_split_steps(const sched::State& st, const std::string& stage,
                                                int spatial_levels) {
  std::vector<int> out;
  for (size_t k = 0; k < st.steps().size(); ++k)
    if (auto* sp = std::get_if<sched::SplitStep>(&st.steps()[k]);
        sp && sp->stage == stage && static_cast<int>(sp->lengths.size()) == spatial_levels - 1)
      out.push_back(static_cast<int>(k));
  return out;
}

// Draws the thread count of every split that CrossThreadReduction made (the sketch holds a
// warp as a stand-in): one of gpu_thread_candidates up to the loop's extent.
inline void draw_threads_across(const SketchContext& ctx, sched::State& state,
                                std::mt19937_64& rng) {
  const Target& target = ctx.task().target;
  std::vector<sched::Step> steps = state.steps();
  bool drawn = false;
  for (size_t k = 0; k + 1 < steps.size(); ++k) {
    int split = -1;
    auto* sp = std::get_if<sched::SplitStep>(&steps[k]);
    if (!sp || sp->extent <= 0 || !cross_thread_split(state, sp->stage, split) ||
        split != static_cast<int>(k))
      continue;
    std::vector<int64_t> cands;
    for (int c : ctx.options().gpu_thread_candidates)
      if (c <= target.max_threads_per_block && (cands.empty() || c <= sp->extent))
        cands.push_back(c);
    if (cands.empty()) continue;
    sp->lengths[0] = cands[::loom::detail::draw(rng, cands.size())];
    drawn = true;
  }
  if (drawn) state = sched::replay(state.dag_ptr(), steps);
}

// Length `level` of split step `steps[v]` of `state` (0 where it has none).
inline int64_t split_length(const sched::State& state, const std::vector<int>& steps, size_t v,
                            int level) {
  const auto& l = std::get<sched::SplitStep>(state.steps()[static_cast<size_t>(steps[v])]).lengths;
  return level < static_cast<int>(l.size()) && l[static_cast<size_t>(level)] ? *l[level] : 0;
}

// How the tile of stage `at` (the accumulator stage, spatial split steps `steps`) reads
// tensor-core operand `copy`: per tensor axis, the lanes of the spatial axes its index uses
// (their product is 8 on A's side, M's lanes, and 4 on B's); and the (tensor axis, spatial
// axis) pairs read by the spatial axis's own variable, or by it plus reduction variables only (a
// convolution's window at stride 1, h + rh: a shift of whole rows, which keeps rows that lie side
// by side so). Empty lanes when `at` reads `copy` in no product.
struct operand_lanes {
  std::vector<int64_t> lanes;
  std::vector<std::pair<int, size_t>> own;
  int64_t total = 1;
};

inline operand_lanes tensor_core_operand_lanes(const sched::State& state, const sched::Stage& copy,
                                               const sched::Stage& at,
                                               const std::vector<int>& steps) {
  operand_lanes out;
  auto* red = at.op->body.as<ir::Reduce>();
  auto* mul = red ? red->source.as<ir::Mul>() : nullptr;
  if (!mul) return out;
  auto read_of = [&](const ir::Expr& e) -> const ir::TensorRead* {
    const ir::Expr& x = e.as<ir::Cast>() ? e.as<ir::Cast>()->value : e;
    auto* r = x.as<ir::TensorRead>();
    return r && r->tensor.get() == copy.op.get() ? r : nullptr;
  };
  const ir::TensorRead* read = read_of(mul->a) ? read_of(mul->a) : read_of(mul->b);
  const auto& axes = at.op->axes;
  if (!read || steps.size() != axes.size()) return out;
  auto own_axis = [&](const ir::Expr& index, const ir::Variable* v) {
    if (index.as<ir::Variable>() == v) return true;
    auto* add = index.as<ir::Add>();
    if (!add) return false;
    const ir::Expr& rest = add->a.as<ir::Variable>() == v   ? add->b
                           : add->b.as<ir::Variable>() == v ? add->a
                                                            : ir::Expr();
    return rest.defined() && std::none_of(axes.begin(), axes.end(), [&](const ir::IterVar& a) {
             return ir::uses_var(rest, a.variable());
           });
  };
  out.lanes.assign(read->indices.size(), 1);
  for (size_t d = 0; d < read->indices.size(); ++d)
    for (size_t v = 0; v < axes.size(); ++v)
      if (ir::uses_var(read->indices[d], axes[v].variable())) {
        out.lanes[d] *=
            std::max<int64_t>(split_length(state, steps, v, tensor_core_lane_length), 1);
        if (own_axis(read->indices[d], axes[v].variable()))
          out.own.push_back({static_cast<int>(d), v});
      }
  for (int64_t l : out.lanes) out.total *= l;
  return out;
}

// The lane-major layouts (sched::StoragePermute) of a tensor-core operand's axes, read as `o`
// says by the tile whose spatial split steps are `steps` (lengths: vthread, warp, lane,
// register, fragment). A lane's rows (columns) of the operand are a
// contiguous run of register x fragment, so the rows one ldmatrix phase reads are that far
// apart and share bank groups; stored lane-major they lie side by side. A's phase (8 lanes of
// M, lane bits 2-4) reads one fragment row of each lane: units of one row, a lane's run of
// register x fragment rows. B's (4 lanes of N, bits 0-1) reads both fragment columns of each:
// units of the fragment's columns, a lane's run of register units. Only an axis the product
// reads by its own variable (tensor_core_operand_lanes) is permuted, and only where a lane
// holds more than one unit.
inline std::vector<sched::StoragePermute> tensor_core_lane_major(const sched::State& state,
                                                                 const operand_lanes& o,
                                                                 const std::vector<int>& steps) {
  std::vector<sched::StoragePermute> out;
  const bool rows = o.total == 8;  // A's side: M takes 8 lanes, N 4
  for (const auto& [d, v] : o.own) {
    const int64_t l = split_length(state, steps, v, tensor_core_lane_length),
                  reg = split_length(state, steps, v, tensor_core_lane_length + 1),
                  frag = split_length(state, steps, v, tensor_core_lane_length + 2);
    if (l <= 1 || reg <= 0 || frag <= 0) continue;
    const int64_t per_lane = rows ? reg * frag : reg, unit = rows ? 1 : frag;
    if (per_lane > 1) out.push_back({d, l, per_lane, unit});
  }
  return out;
}

// The strides that keep an A phase's 8 rows in 8 bank groups where its lanes spread over
// several axes of the operand (a convolution's image rows and columns, and images). Padded to
// an odd number u of 16-byte units and stored lane-major, the rows along the innermost of them
// (the columns) lie u units apart, c of them (their lanes); the rows along the next axis out
// then lie S apart, and with S = c (mod 8 units) the phase's rows r S + j u (j < c, r < 8 / c)
// are 8 different units mod 8, whatever u: j u mod c is a permutation of j (u odd, c a power
// of two). Each axis further out has the lanes inside it as its residue. None on B's side or
// where the lanes lie along one axis (a GEMM). `units`: the operand's elements per 16 bytes.
inline std::vector<sched::StorageAlign> tensor_core_phase_aligns(const operand_lanes& o,
                                                                 int64_t units) {
  std::vector<sched::StorageAlign> out;
  const int rank = static_cast<int>(o.lanes.size());
  if (o.total != 8 || rank < 3) return out;
  int64_t inside = o.lanes[static_cast<size_t>(rank - 2)];
  for (int d = rank - 3; d >= 0 && inside < 8; --d) {
    const int64_t l = o.lanes[static_cast<size_t>(d)];
    if (l <= 1) continue;
    out.push_back({d, 8 * units, inside % 8 * units});
    inside *= l;
  }
  return out;
}

inline bool has_thread_loop(const sched::Stage& s) {
  for (int id : s.leaves)
    if (s.iters[id].annotation == sched::Annotation::ThreadIdxX) return true;
  return false;
}

// The bytes of one row of a tensor-core operand copy whose box is `extent` elements along its
// innermost axis, rounded up to whole blocks where `permutes` make that axis lane-major (as
// plan_buffers rounds it).
inline int64_t copy_row_bytes(int64_t extent, const sched::Stage& copy,
                              const std::vector<sched::StoragePermute>& permutes) {
  const int innermost = copy.op.rank() - 1;
  for (const sched::StoragePermute& p : permutes)
    if (p.axis == innermost) extent = (extent + p.block() - 1) / p.block() * p.block();
  return extent * copy.op.dtype().bytes();
}

// The storage_swizzle such a row takes, or 0 where it is not 32, 64 or 128 bytes. A row longer
// than `chunk` bytes (storage_chunk; 0: none) is chunks of that many.
inline int64_t swizzle_row_bytes(int64_t extent, const sched::Stage& copy,
                                 const std::vector<sched::StoragePermute>& permutes,
                                 int64_t chunk) {
  int64_t bytes = copy_row_bytes(extent, copy, permutes);
  if (chunk > 0 && bytes > chunk) bytes = chunk;
  return bytes == 32 || bytes == 64 || bytes == 128 ? bytes : 0;
}

// The padding of a tensor-core operand copy's rows to an odd number of 16-byte units.
inline sched::StorageAlignStep odd_row_padding(const sched::Stage& copy) {
  const int64_t units = 16 / copy.op.dtype().bytes();  // elements per 16 bytes
  return {copy.name, copy.op.rank() - 2, 2 * units, units};
}

// A root stage bound to threads that stores a thread's run of results (a tile's consumer: its
// innermost loop is the thread's register tile along the output's last axis, contiguous)
// stores them as vectors: that loop, or its inner part, vectorized over the widest of 2, 4 or
// 8 lanes of at most 16 bytes that divides it. Stages that reduce, and loops other stages are
// computed at, stay as they are.
inline void vectorize_thread_stores(sched::State& state, const std::string& name) {
  const sched::Stage& s = state.stage(name);
  if (s.is_placeholder || s.location != sched::ComputeLocation::Root || !has_thread_loop(s)) return;
  for (const sched::Iterator& it : s.iters)
    if (it.kind == sched::IterKind::Reduce) return;
  const int last = static_cast<int>(s.leaves.size()) - 1;
  const sched::Iterator& inner = s.leaf(last);
  const int64_t bytes = s.op.dtype().bytes();
  if (inner.kind != sched::IterKind::Spatial || inner.annotation != sched::Annotation::Serial ||
      !state.attached_at(name, s.leaves[static_cast<size_t>(last)]).empty() ||
      (bytes != 2 && bytes != 4))
    return;
  const int64_t extent = inner.extent;  // `s` and `inner` go stale once the state changes
  int64_t vector = 1;
  for (int64_t v : {2, 4, 8})
    if (v * bytes <= 16 && extent % v == 0) vector = v;
  if (vector == 1) return;
  if (extent > vector) state.split(name, last, {vector});
  state.annotate(name, last + (extent > vector ? 1 : 0), sched::Annotation::Vectorized);
}

}  // namespace detail

LOOM_DECL void gpu_thread_bind(const SketchContext& ctx, sched::State& state,
                               std::mt19937_64& rng) {
  const Target& target = ctx.task().target;
  const SearchOptions& o = ctx.options();
  const int64_t warp = target.warp_size;
  detail::draw_threads_across(ctx, state, rng);
  const int spatial_levels = static_cast<int>(
      std::count(o.gpu_tiling_structure.begin(), o.gpu_tiling_structure.end(), 'S'));
  for (int si = static_cast<int>(state.stages().size()) - 1; si >= 0; --si) {
    const sched::Stage& s = state.stages()[si];
    if (s.is_placeholder || s.location == sched::ComputeLocation::Inlined || s.leaves.empty())
      continue;
    const std::string name = s.name;
    if (s.location == sched::ComputeLocation::Root) {
      if (const int k = detail::gpu_tile_group_size(s); k > 0) {
        int64_t work = 1;
        for (int64_t e : s.op.shape()) work *= e;
        if (k > 1) {
          std::vector<int> group(k);
          for (int level = 0; level < 3; ++level) {
            std::iota(group.begin(), group.end(), level);
            state.fuse(name, group);
          }
        }
        const sched::Stage& t = state.stage(name);
        const int64_t vthreads = t.leaf(1).extent, threads = t.leaf(2).extent;
        LOOM_USER_CHECK(vthreads <= o.max_vthread_extent, "loom.search.E813")
            << "ThreadBind: stage '" << name << "' would have " << vthreads << " vthreads; at most "
            << o.max_vthread_extent;
        LOOM_USER_CHECK(threads >= warp || work <= 2 * warp, "loom.search.E813")
            << "ThreadBind: stage '" << name << "' would run " << threads
            << " threads per block, fewer than a warp (" << warp << ")";
        state.annotate(name, 0, sched::Annotation::BlockIdxX);
        state.annotate(name, 1, sched::Annotation::VThread);
        state.annotate(name, 2, sched::Annotation::ThreadIdxX);
        continue;
      }
      // Not multi-level tiled: the outer spatial loops over blocks and threads.
      int count = 0;
      int64_t extent = 1;
      for (int p = 0; p < static_cast<int>(s.leaves.size()); ++p) {
        const sched::Iterator& it = s.leaf(p);
        if (it.kind != sched::IterKind::Spatial || it.annotation != sched::Annotation::Serial)
          break;
        ++count;
        extent *= std::max<int64_t>(it.extent, 1);
        if (!state.attached_at(name, s.leaves[p]).empty()) break;
      }
      if (count == 0) continue;
      const bool threads_inside = detail::has_thread_loop(s);
      if (count > 1) {
        std::vector<int> all(count);
        std::iota(all.begin(), all.end(), 0);
        state.fuse(name, all);
      }
      if (threads_inside) {
        // A reduction across threads, or the stage that computes such reductions per row:
        // a block per output (row).
        state.annotate(name, 0, sched::Annotation::BlockIdxX);
        continue;
      }
      if (extent <= warp) {
        state.annotate(name, 0, sched::Annotation::ThreadIdxX);
        continue;
      }
      std::vector<int> cands;
      for (int c : o.gpu_thread_candidates)
        if (c <= target.max_threads_per_block &&
            (c == o.gpu_thread_candidates.front() || c < extent))
          cands.push_back(c);
      if (cands.empty()) cands.push_back(static_cast<int>(warp));
      const int threads = cands[::loom::detail::draw(rng, cands.size())];
      state.split(name, 0, {threads});
      state.annotate(name, 0, sched::Annotation::BlockIdxX);
      state.annotate(name, 1, sched::Annotation::ThreadIdxX);
    } else if (s.location == sched::ComputeLocation::At && s.scope == ir::MemoryScope::Shared) {
      // Cooperative fetching: the copy's elements spread over the threads of the block.
      std::vector<int> steps =
          detail::gpu_spatial_split_steps(state, s.attach_stage, spatial_levels);
      // A tensor-core tiling (sketch.hpp): the threads are its warp and lane levels together.
      const bool tensor_core = steps.empty();
      if (tensor_core)
        steps = detail::gpu_spatial_split_steps(state, s.attach_stage, tensor_core_spatial_levels);
      if (steps.empty()) continue;
      // A tensor-core operand's rows padded to an odd number of 16-byte units (applied last:
      // `s` is read until the state changes).
      const int rows_axis = static_cast<int>(s.op.shape().size()) - 2;
      const int64_t units = 16 / s.op.dtype().bytes();  // elements per 16 bytes
      // On a warpgroup_mma target the layouts a warpgroup MMA reads, always: lane-major and
      // swizzled where the rows allow (lower::WgmmaOperand's canonical layouts).
      const bool hopper = tensor_core && target.warpgroup_mma();
      const bool pad = tensor_core && rows_axis >= 0 && s.storage_aligns.empty() &&
                       (hopper || ::loom::detail::unit_draw(rng) < o.gpu_pad_shared_probability);
      // The operand's lane axes stored lane-major, with probability gpu_lane_major_probability.
      // A copy vector must stay within a unit of a permuted innermost axis; one whose units are
      // under 4 bytes (no cp.async) stays as it is.
      const int innermost = static_cast<int>(s.op.shape().size()) - 1;
      std::vector<sched::StoragePermute> permutes;
      const bool lane_major =
          tensor_core && s.storage_permutes.empty() &&
          (hopper || ::loom::detail::unit_draw(rng) < o.gpu_lane_major_probability);
      std::vector<sched::StorageAlign> phase_aligns;
      if (lane_major) {
        const detail::operand_lanes read =
            detail::tensor_core_operand_lanes(state, s, state.stage(s.attach_stage), steps);
        if (pad) phase_aligns = detail::tensor_core_phase_aligns(read, units);
        for (const sched::StoragePermute& p : detail::tensor_core_lane_major(state, read, steps))
          if (p.axis != innermost || p.unit * s.op.dtype().bytes() >= 4) permutes.push_back(p);
      }
      int64_t vector_unit = 0;  // the elements a copy vector must divide: the innermost unit
      for (const sched::StoragePermute& p : permutes)
        if (p.axis == innermost) vector_unit = p.unit;
      // Each thread copies a vector of consecutive elements (Ansor splits one out too): 1, 2,
      // 4 or 8 lanes of at most 16 bytes that divide the copy's innermost extent; the widest
      // with probability gpu_widest_copy_probability, else drawn.
      const int64_t inner = s.leaf(static_cast<int>(s.leaves.size()) - 1).extent;
      std::vector<int64_t> lanes{1};
      for (int64_t v : {2, 4, 8})
        if (v * s.op.dtype().bytes() <= 16 && inner > 0 && inner % v == 0 &&
            (vector_unit == 0 || vector_unit % v == 0))
          lanes.push_back(v);
      int64_t vector = lanes.back();
      if (lanes.size() > 1 && ::loom::detail::unit_draw(rng) >= o.gpu_widest_copy_probability)
        vector = lanes[::loom::detail::draw(rng, lanes.size())];
      // Rows of 32, 64 or 128 bytes whose phases read consecutive rows (no phase aligns) may
      // be swizzled instead of padded, with probability gpu_swizzle_shared_probability. A row
      // is the copy's box along the innermost axis (the state's extents are the tensor's),
      // rounded up to whole blocks where that axis is permuted.
      const bool swizzle =
          pad && phase_aligns.empty() &&
          (hopper || ::loom::detail::unit_draw(rng) < o.gpu_swizzle_shared_probability);
      // On a warpgroup_mma target rows past 128 bytes are stored in chunks of 128
      // (storage_chunk), each row of a chunk swizzled: the tiles a descriptor steps through.
      int64_t chunk_bytes = 0, swizzle_bytes = 0;
      if (swizzle) {
        const int64_t extent = lower::infer_regions(state)[static_cast<size_t>(si)].extent.back();
        if (hopper && detail::copy_row_bytes(extent, s, permutes) > 128) chunk_bytes = 128;
        swizzle_bytes = detail::swizzle_row_bytes(extent, s, permutes, chunk_bytes);
        if (swizzle_bytes == 0) chunk_bytes = 0;
      }
      const sched::StorageAlignStep padding = detail::odd_row_padding(s);
      if (s.leaves.size() > 1) {
        std::vector<int> all(s.leaves.size());
        std::iota(all.begin(), all.end(), 0);
        state.fuse(name, all);
      }
      if (vector > 1) state.split(name, 0, {vector});
      if (tensor_core) {
        state.follow_fused_split(name, 0, steps, tensor_core_lane_length, true);
        state.follow_fused_split(name, 0, steps, tensor_core_warp_length, true);
        state.fuse(name, {1, 2});
      } else {
        // Level 1 of the lengths (the outermost part has none) is the thread level.
        state.follow_fused_split(name, 0, steps, 1, true);
      }
      state.annotate(name, 1, sched::Annotation::ThreadIdxX);
      if (vector > 1) state.annotate(name, 2, sched::Annotation::Vectorized);
      if (swizzle_bytes) {
        if (chunk_bytes) state.storage_chunk(name, chunk_bytes);
        state.storage_swizzle(name, swizzle_bytes);
      } else if (pad) {
        state.storage_align(name, padding.axis, padding.factor, padding.offset);
        // Rows side by side along the columns are what the phase strides assume.
        if (lane_major)
          for (const sched::StorageAlign& a : phase_aligns)
            state.storage_align(name, a.axis, a.factor, a.offset);
      }
      for (const sched::StoragePermute& p : permutes)
        state.storage_permute(name, p.axis, p.lanes, p.per_lane, p.unit);
    }
  }
  if (o.gpu_vector_stores)
    for (size_t si = 0; si < state.stages().size(); ++si)
      detail::vectorize_thread_stores(state, state.stages()[si].name);
}

LOOM_DECL void follow_operand_layouts(sched::State& state, bool warpgroup_target) {
  const auto& history = state.steps();
  if (std::none_of(history.begin(), history.end(), [](const sched::Step& st) {
        return std::holds_alternative<sched::StoragePermuteStep>(st) ||
               std::holds_alternative<sched::StorageSwizzleStep>(st);
      }))
    return;
  std::vector<sched::Step> steps = history;
  bool changed = false;
  for (sched::Step& step : steps) {
    auto* p = std::get_if<sched::StoragePermuteStep>(&step);
    if (!p) continue;
    const sched::Stage& copy = state.stage(p->stage);
    if (copy.location != sched::ComputeLocation::At) continue;
    // A lane holding a single unit leaves the axis as it is (per_lane 1).
    sched::StoragePermute now{p->axis, p->lanes, 1, p->unit};
    const std::vector<int> steps_at =
        detail::gpu_spatial_split_steps(state, copy.attach_stage, tensor_core_spatial_levels);
    const detail::operand_lanes read =
        detail::tensor_core_operand_lanes(state, copy, state.stage(copy.attach_stage), steps_at);
    for (const sched::StoragePermute& q : detail::tensor_core_lane_major(state, read, steps_at))
      if (q.axis == p->axis) now = q;
    if (now.lanes != p->lanes || now.per_lane != p->per_lane || now.unit != p->unit) {
      p->lanes = now.lanes;
      p->per_lane = now.per_lane;
      p->unit = now.unit;
      changed = true;
    }
  }
  // A swizzle takes the copy's rows as they are now (permuted as above); rows it cannot take
  // are padded instead, as ThreadBind pads them.
  std::vector<lower::StageRegion> regions;
  std::vector<sched::Step> chunks;  // appended: a layout step's place in the history is free
  for (sched::Step& step : steps) {
    auto* w = std::get_if<sched::StorageSwizzleStep>(&step);
    if (!w) continue;
    const int si = state.stage_index(w->stage);
    const sched::Stage& copy = state.stages()[static_cast<size_t>(si)];
    if (copy.location != sched::ComputeLocation::At || copy.op.rank() < 2) continue;
    if (regions.empty()) regions = lower::infer_regions(state);
    std::vector<sched::StoragePermute> permutes;  // as edited above
    for (const sched::Step& st : steps)
      if (auto* p = std::get_if<sched::StoragePermuteStep>(&st); p && p->stage == w->stage)
        permutes.push_back({p->axis, p->lanes, p->per_lane, p->unit});
    const int64_t extent = regions[static_cast<size_t>(si)].extent.back();
    int64_t bytes = detail::swizzle_row_bytes(extent, copy, permutes, copy.storage_chunk);
    bool chunked = false;
    if (bytes == 0 && warpgroup_target && copy.storage_chunk == 0 &&
        detail::copy_row_bytes(extent, copy, permutes) > 128) {
      chunks.push_back(sched::StorageChunkStep{w->stage, 128});
      bytes = 128;
      chunked = true;
    }
    if (bytes == w->bytes && !chunked) continue;
    changed = true;
    if (bytes)
      w->bytes = bytes;
    else
      step = detail::odd_row_padding(copy);
  }
  steps.insert(steps.end(), chunks.begin(), chunks.end());
  changed |= !chunks.empty();
  if (!changed) return;
  try {
    sched::State out = sched::replay(state.dag_ptr(), steps);
    out.set_origins(state.origins());
    state = std::move(out);
  } catch (const user_error&) {
  }
}

LOOM_DECL std::vector<std::pair<std::string, int>> double_buffer_candidates(
    const sched::State& state) {
  std::vector<std::pair<std::string, int>> out;
  for (const sched::Stage& s : state.stages()) {
    if (s.location != sched::ComputeLocation::At || s.scope != ir::MemoryScope::Shared) continue;
    const sched::Stage& at = state.stage(s.attach_stage);
    const int p = at.leaf_position(s.attach_iter);
    if (p < 0) continue;
    const sched::Iterator& it = at.leaf(p);
    const std::pair<std::string, int> loop{at.name, p};
    if (it.kind == sched::IterKind::Reduce && it.annotation == sched::Annotation::Serial &&
        it.extent >= 2 && std::find(out.begin(), out.end(), loop) == out.end())
      out.push_back(loop);
  }
  return out;
}

LOOM_DECL int max_pipeline_stages(const SearchOptions& options) {
  return std::clamp(options.gpu_max_pipeline_stages, 2, ir::kMaxPipelineStages);
}

LOOM_DECL sched::Annotation draw_pipeline_kind(const SearchOptions& options, std::mt19937_64& rng) {
  const auto choices = static_cast<size_t>(max_pipeline_stages(options) - 1);
  return ir::pipelined_kind(2 + static_cast<int>(::loom::detail::draw(rng, choices)));
}

LOOM_DECL void gpu_double_buffer(const SketchContext& ctx, sched::State& state,
                                 std::mt19937_64& rng) {
  const double p = ctx.options().gpu_double_buffer_probability;
  if (ctx.task().target.compute_capability() < 80 || p <= 0) return;
  for (const auto& [stage, leaf] : double_buffer_candidates(state))
    if (::loom::detail::chance(rng, p))
      state.annotate(stage, leaf, draw_pipeline_kind(ctx.options(), rng));
}

LOOM_DECL const std::vector<InitRule>& gpu_init_rules() {
  static const std::vector<InitRule> rules = {
      {"FillTileSize", [](const SketchContext& ctx, sched::State& s,
                          std::mt19937_64& rng) { s = fill_tile_sizes(s, ctx.options(), rng); }},
      {"ThreadBind", gpu_thread_bind, sched::StepPart::Annotation},
      {"DoubleBuffer", gpu_double_buffer, sched::StepPart::Annotation},
      {"Unroll", annotate_unroll, sched::StepPart::Annotation},
      {"VerifyGpuProgram",
       [](const SketchContext& ctx, sched::State& s, std::mt19937_64&) {
         (void)lower::lower_gpu(s, ctx.task().target);
       },
       sched::StepPart::Annotation}};
  return rules;
}

LOOM_DECL const std::vector<InitRule>& init_rules(const Target& target) {
  return target.is_cuda() ? gpu_init_rules() : cpu_init_rules();
}

}  // namespace search
LOOM_END_NAMESPACE
