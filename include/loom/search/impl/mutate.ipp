// Bodies of loom/search/mutate.hpp: Ansor's mutation rules and the node-based crossover.
#include "loom/search/mutate.hpp"

#include "loom/detail/random.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace search {

namespace detail {

using ::loom::detail::draw;

// A uniformly random order of 0 .. n-1 (Fisher-Yates on draw(), reproducible everywhere, which
// std::shuffle is not).
inline std::vector<int> permutation(std::mt19937_64& rng, int n) {
  std::vector<int> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (int i = n - 1; i > 0; --i) std::swap(p[i], p[draw(rng, static_cast<size_t>(i) + 1)]);
  return p;
}

// The divisors of n in increasing order (1 and n included).
inline std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      low.push_back(d);
      if (d * d != n) high.push_back(n / d);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

inline bool is_location_step(const sched::Step& s) {
  return std::holds_alternative<sched::ComputeAtStep>(s) ||
         std::holds_alternative<sched::ComputeRootStep>(s) ||
         std::holds_alternative<sched::ComputeInlineStep>(s);
}

// `base` (a state whose history is a prefix of `steps`) with the rest of `steps` applied and
// the parts of its history beginning at `origins` (unknown ones stay unknown), or nothing when
// a step is illegal. Replaying from a prefix state skips re-applying the prefix.
inline std::optional<sched::State> replay_from(sched::State base,
                                               const std::vector<sched::Step>& steps,
                                               const sched::StepOrigins& origins) {
  try {
    for (size_t i = base.steps().size(); i < steps.size(); ++i) base.apply(steps[i]);
  } catch (const user_error&) {
    return std::nullopt;
  }
  base.set_origins(origins);
  return base;
}

inline std::optional<sched::State> replay(const sched::State& like,
                                          const std::vector<sched::Step>& steps,
                                          const sched::StepOrigins& origins) {
  std::optional<sched::State> out;
  try {
    out = sched::replay(like.dag_ptr(), steps);
  } catch (const user_error&) {
    return std::nullopt;
  }
  out->set_origins(origins);
  return out;
}

// `origins` after `delta` steps were inserted (or, negative, removed) after step `at`: a part
// that begins after it begins that much later.
inline sched::StepOrigins shifted(sched::StepOrigins origins, int at, int delta) {
  if (!origins.known()) return origins;
  if (origins.location_begin > at) origins.location_begin += delta;
  if (origins.annotate_begin > at) origins.annotate_begin += delta;
  return origins;
}

// The state after the first `n` steps of `state`'s history.
inline sched::State replay_prefix(const sched::State& state, size_t n) {
  sched::State s(state.dag_ptr());
  for (size_t i = 0; i < n; ++i) s.apply(state.steps()[i]);
  return s;
}

// Where the parts of `state`'s history begin: as it records them, else inferred.
inline sched::StepOrigins origins_of(const SketchContext& ctx, const sched::State& state) {
  return state.origins().known() ? state.origins() : search::inferred_origins(ctx, state);
}

// Whether two steps are the same edit apart from split lengths and pragma values. No
// catch-all: a new step must say which of its fields are values the search may change.
struct structure_equal {
  bool operator()(const sched::SplitStep& a, const sched::SplitStep& b) const {
    return a.stage == b.stage && a.iter == b.iter && a.extent == b.extent &&
           a.lengths.size() == b.lengths.size();
  }
  bool operator()(const sched::PragmaStep& a, const sched::PragmaStep& b) const {
    return a.stage == b.stage && a.iter == b.iter;
  }
  bool operator()(const sched::FollowSplitStep& a, const sched::FollowSplitStep& b) const {
    return a == b;
  }
  bool operator()(const sched::FollowFusedSplitStep& a,
                  const sched::FollowFusedSplitStep& b) const {
    return a == b;
  }
  bool operator()(const sched::FuseStep& a, const sched::FuseStep& b) const { return a == b; }
  bool operator()(const sched::ReorderStep& a, const sched::ReorderStep& b) const { return a == b; }
  bool operator()(const sched::AnnotationStep& a, const sched::AnnotationStep& b) const {
    return a == b;
  }
  bool operator()(const sched::ComputeAtStep& a, const sched::ComputeAtStep& b) const {
    return a == b;
  }
  bool operator()(const sched::ComputeRootStep& a, const sched::ComputeRootStep& b) const {
    return a == b;
  }
  bool operator()(const sched::ComputeInlineStep& a, const sched::ComputeInlineStep& b) const {
    return a == b;
  }
  bool operator()(const sched::CacheReadStep& a, const sched::CacheReadStep& b) const {
    return a == b;
  }
  bool operator()(const sched::CacheWriteStep& a, const sched::CacheWriteStep& b) const {
    return a == b;
  }
  bool operator()(const sched::StorageAlignStep& a, const sched::StorageAlignStep& b) const {
    return a == b;
  }
  bool operator()(const sched::StoragePermuteStep& a, const sched::StoragePermuteStep& b) const {
    return a == b;
  }
  bool operator()(const sched::StorageSwizzleStep& a, const sched::StorageSwizzleStep& b) const {
    return a == b;
  }
  bool operator()(const sched::StorageChunkStep& a, const sched::StorageChunkStep& b) const {
    return a == b;
  }
  bool operator()(const sched::RfactorStep& a, const sched::RfactorStep& b) const { return a == b; }
};

inline bool same_structure(const sched::Step& x, const sched::Step& y) {
  if (x.index() != y.index()) return false;
  return std::visit(
      [&](const auto& a) -> bool {
        return structure_equal{}(a, std::get<std::decay_t<decltype(a)>>(y));
      },
      x);
}

// Leaf positions of `stage` in the steps after its parallel fuse, when that fuse takes
// `new_count` loops instead of `old_count`: position 0 is the parallel loop, position q >= 1 the
// loop that was `q + old_count - 1` before the fuse. Nothing when the loop is now inside the
// fused one.
inline std::optional<int> moved_position(int q, int old_count, int new_count) {
  if (q == 0) return 0;
  const int original = q + old_count - 1;
  if (original < new_count) return std::nullopt;
  return original - new_count + 1;
}

// Renumbers the positions a step holds in `stage`'s loops after the stage's parallel fuse
// changed from `old_count` to `new_count` loops (see moved_position); nothing when it cannot be
// (a reorder of the stage, a step that adds stages, a loop that is now fused, or one that refers
// to the parallel loop other than a pragma). No catch-all: a new step must say which of its
// fields are loop positions.
struct step_renumberer {
  const std::string& stage;
  int old_count, new_count;
  using result = std::optional<sched::Step>;

  std::optional<int> move(int q, bool may_be_parallel_loop) const {
    if (q == 0 && !may_be_parallel_loop) return std::nullopt;
    return moved_position(q, old_count, new_count);
  }
  // Steps whose `iter` is a loop of their stage.
  template <class S>
  result moved_iter(S s, bool may_be_parallel_loop) const {
    if (s.stage != stage) return s;
    auto p = move(s.iter, may_be_parallel_loop);
    if (!p) return std::nullopt;
    s.iter = *p;
    return s;
  }

  result operator()(const sched::PragmaStep& s) const { return moved_iter(s, true); }
  result operator()(const sched::AnnotationStep& s) const { return moved_iter(s, false); }
  result operator()(const sched::SplitStep& s) const { return moved_iter(s, false); }
  result operator()(const sched::FollowSplitStep& s) const { return moved_iter(s, false); }
  result operator()(const sched::FollowFusedSplitStep& s) const { return moved_iter(s, false); }
  result operator()(sched::FuseStep s) const {
    if (s.stage != stage) return s;
    for (int& q : s.iters) {
      auto p = move(q, false);
      if (!p) return std::nullopt;
      q = *p;
    }
    return s;
  }
  result operator()(const sched::ReorderStep& s) const {
    if (s.stage != stage) return s;
    return std::nullopt;
  }
  result operator()(sched::ComputeAtStep s) const {
    if (s.target != stage) return s;
    auto p = moved_position(s.target_iter, old_count, new_count);
    if (!p) return std::nullopt;
    s.target_iter = *p;
    return s;
  }
  result operator()(const sched::CacheReadStep&) const { return std::nullopt; }
  result operator()(const sched::CacheWriteStep&) const { return std::nullopt; }
  result operator()(const sched::RfactorStep&) const { return std::nullopt; }
  result operator()(const sched::ComputeRootStep& s) const { return s; }
  result operator()(const sched::ComputeInlineStep& s) const { return s; }
  // `axis` is a tensor axis, not a loop.
  result operator()(const sched::StorageAlignStep& s) const { return s; }
  result operator()(const sched::StoragePermuteStep& s) const { return s; }
  result operator()(const sched::StorageSwizzleStep& s) const { return s; }
  result operator()(const sched::StorageChunkStep& s) const { return s; }
};

inline std::optional<sched::Step> renumbered(const sched::Step& step, const std::string& stage,
                                             int old_count, int new_count) {
  return std::visit(step_renumberer{stage, old_count, new_count}, step);
}

// Shifts the references to earlier steps held by steps at or after index `from` by `delta` (a
// step was inserted or removed at `from`). No catch-all: a new step must say which of its fields
// refer to steps.
struct step_reference_shifter {
  int from, delta;
  void shift(int& src) const {
    if (src >= from) src += delta;
  }
  void operator()(sched::FollowSplitStep& s) const { shift(s.src_step); }
  void operator()(sched::FollowFusedSplitStep& s) const {
    for (int& src : s.src_steps) shift(src);
  }
  void operator()(sched::SplitStep&) const {}
  void operator()(sched::FuseStep&) const {}
  void operator()(sched::ReorderStep&) const {}
  void operator()(sched::AnnotationStep&) const {}
  void operator()(sched::ComputeAtStep&) const {}
  void operator()(sched::ComputeRootStep&) const {}
  void operator()(sched::ComputeInlineStep&) const {}
  void operator()(sched::CacheReadStep&) const {}
  void operator()(sched::CacheWriteStep&) const {}
  void operator()(sched::PragmaStep&) const {}
  void operator()(sched::StorageAlignStep&) const {}
  void operator()(sched::StoragePermuteStep&) const {}
  void operator()(sched::StorageSwizzleStep&) const {}
  void operator()(sched::StorageChunkStep&) const {}
  void operator()(sched::RfactorStep&) const {}
};

inline void shift_step_references(std::vector<sched::Step>& steps, int from, int delta) {
  for (sched::Step& s : steps) std::visit(step_reference_shifter{from, delta}, s);
}

// The iterator ids (outer to inner) of the loops split step `step_id` made in the final stage,
// or nothing when its stage was rebuilt after it (rfactor). A stage's split relations are in
// the order of its split-making steps since the stage was last rebuilt.
inline std::vector<int> split_loops(const sched::State& state, int step_id) {
  const std::vector<sched::Step>& steps = state.steps();
  const std::string& name = sched::step_stage(steps[step_id]);
  auto makes_split = [](const sched::Step& s) {
    return std::holds_alternative<sched::SplitStep>(s) ||
           std::holds_alternative<sched::FollowSplitStep>(s) ||
           std::holds_alternative<sched::FollowFusedSplitStep>(s);
  };
  auto rebuilds = [&](const sched::Step& s) {
    return (std::holds_alternative<sched::RfactorStep>(s) ||
            std::holds_alternative<sched::CacheWriteStep>(s)) &&
           sched::step_stage(s) == name;
  };
  int k = 0;
  for (int i = 0; i < step_id; ++i) {
    if (rebuilds(steps[i])) k = 0;
    if (makes_split(steps[i]) && sched::step_stage(steps[i]) == name) ++k;
  }
  for (size_t i = step_id + 1; i < steps.size(); ++i)
    if (rebuilds(steps[i])) return {};
  const sched::Stage& st = state.stage(name);
  if (k >= static_cast<int>(st.splits.size())) return {};
  return st.splits[k].children;
}

// The split `s` if the tile-size rules may change it: a split of an extent above 1 with every
// length set and an innermost length within max_innermost (as TVM, others are left alone).
inline const sched::SplitStep* mutable_split(const sched::Step& s, int64_t max_innermost) {
  const auto* sp = std::get_if<sched::SplitStep>(&s);
  if (!sp || sp->extent <= 1 || sp->lengths.empty() ||
      !std::all_of(sp->lengths.begin(), sp->lengths.end(), [](auto& l) { return l.has_value(); }))
    return nullptr;
  return *sp->lengths.back() > max_innermost ? nullptr : sp;
}

// The product of the (set) lengths of a split.
inline int64_t split_product(const sched::SplitStep& sp) {
  int64_t product = 1;
  for (const auto& l : sp.lengths) product *= *l;
  return product;
}

// The loop lengths of a perfect split: 0 is the implicit outermost loop, 1..n the lengths (n
// the innermost).
inline std::vector<int64_t> split_levels(const sched::SplitStep& sp) {
  std::vector<int64_t> level(sp.lengths.size() + 1);
  for (size_t j = 0; j < sp.lengths.size(); ++j) level[j + 1] = *sp.lengths[j];
  level[0] = sp.extent / split_product(sp);
  return level;
}

}  // namespace detail

LOOM_DECL sched::StepOrigins inferred_origins(const SketchContext& ctx, const sched::State& state) {
  const std::vector<sched::Step>& steps = state.steps();
  const int n = static_cast<int>(steps.size());
  sched::StepOrigins parts{n, n};
  for (int i = 0; i < n; ++i) {
    const auto* an = std::get_if<sched::AnnotationStep>(&steps[i]);
    if (!an && !std::holds_alternative<sched::PragmaStep>(steps[i])) continue;
    parts.annotate_begin = i;
    if (an && i > 0) {
      const auto* fu = std::get_if<sched::FuseStep>(&steps[i - 1]);
      if (fu && fu->stage == an->stage) parts.annotate_begin = i - 1;
    }
    break;
  }
  // ChangeComputeLocation visits the stages from the last to the first and writes at most one
  // step for each stage it may move: one that the sketch did not place, not tiled and not
  // multi-level tiled. Its steps are therefore the longest run of such location steps, in
  // decreasing stage order, that ends where annotation begins. A stage is taken as placed by
  // its sketch when an earlier step placed it, placed another stage inside it, or made it by
  // cache_read (the built-in rules place what they put inside a stage, and every cache_read
  // copy, together with that stage).
  int later_stage = -1;  // stage of the step after i in the run (walking backwards)
  int i = parts.annotate_begin - 1;
  for (; i >= 0; --i) {
    if (!std::holds_alternative<sched::ComputeAtStep>(steps[i]) &&
        !std::holds_alternative<sched::ComputeRootStep>(steps[i]))
      break;
    const std::string& name = sched::step_stage(steps[i]);
    const int si = state.stage_index(name);
    if (si <= later_stage) break;
    const sched::Stage& s = state.stages()[si];
    if (s.is_placeholder || s.is_output || is_tiled(s) || needs_multi_level_tiling(ctx, state, si))
      break;
    bool placed_by_sketch = false;
    for (int j = 0; j < i && !placed_by_sketch; ++j) {
      const auto* ca = std::get_if<sched::ComputeAtStep>(&steps[j]);
      const auto* cr = std::get_if<sched::CacheReadStep>(&steps[j]);
      placed_by_sketch =
          (detail::is_location_step(steps[j]) && sched::step_stage(steps[j]) == name) ||
          (ca && ca->target == name) ||
          (cr && cr->stage + "." + sched::scope_name(cr->scope) == name);
    }
    if (placed_by_sketch) break;
    later_stage = si;
  }
  parts.location_begin = i + 1;
  return parts;
}

LOOM_DECL std::optional<sched::State> mutate_tile_size(const SketchContext& ctx,
                                                       const sched::State& state,
                                                       std::mt19937_64& rng) {
  using detail::draw;
  const int max_innermost = std::max(1, ctx.options().max_innermost_split_factor);
  const std::vector<sched::Step>& steps = state.steps();
  std::vector<int> candidates;
  for (int i = 0; i < static_cast<int>(steps.size()); ++i)
    if (detail::mutable_split(steps[i], max_innermost)) candidates.push_back(i);
  if (candidates.empty()) return std::nullopt;
  const int step_id = candidates[draw(rng, candidates.size())];
  const auto& sp = std::get<sched::SplitStep>(steps[step_id]);
  const int n = static_cast<int>(sp.lengths.size());
  const int64_t product = detail::split_product(sp);
  std::vector<std::optional<int64_t>> lengths = sp.lengths;

  // A perfect split of an awkward extent (a prime: its only perfect tilings put the whole
  // extent in one length) may also leave the perfect tilings, half of the time, as the free
  // lengths FillTileSize draws for it would; otherwise evolution could never reach them from a
  // perfect parent.
  const bool may_go_free = ctx.options().non_divisible_for_awkward_extents &&
                           awkward_extent(sp.extent, ctx.options().max_innermost_split_factor) &&
                           rng() % 2 == 0;
  if (sp.extent % product == 0 && !may_go_free) {
    // TVM's MutateTileSize: levels 1..n are the lengths, level 0 the implicit outermost loop.
    // One change: a move between two levels whose loops are fused into one loop (the parallel
    // loop of outer tiles) is skipped, as it leaves the loop nest as it was.
    const std::vector<int> split_loops = detail::split_loops(state, step_id);
    auto fused_together = [&](int x, int y) {
      if (split_loops.empty()) return false;
      const sched::Stage& st = state.stage(sp.stage);
      for (const sched::FuseRelation& f : st.fuses) {
        const auto has = [&](int id) {
          return std::find(f.fused.begin(), f.fused.end(), id) != f.fused.end();
        };
        if (has(split_loops[x]) && has(split_loops[y])) return true;
      }
      return false;
    };
    std::vector<int64_t> level = detail::split_levels(sp);  // 0: the outermost loop
    const std::vector<bool> fixed =
        fixed_split_lengths(state, sp, ctx.task().target.warpgroup_mma());
    auto is_fixed = [&](int lvl) { return lvl > 0 && fixed[static_cast<size_t>(lvl - 1)]; };
    const std::vector<int> perm = detail::permutation(rng, n + 1);
    bool moved = false;
    for (int i = 0; i <= n && !moved; ++i) {
      const int src = perm[i];
      if (level[src] <= 1 || is_fixed(src)) continue;
      const std::vector<int64_t> factors = detail::divisors(level[src]);
      // TVM tries only the next level in the order; the ones after it are tried too.
      for (int d = 1; d <= n && !moved; ++d) {
        const int dst = perm[(i + d) % (n + 1)];
        if (fused_together(src, dst) || is_fixed(dst)) continue;
        size_t max_index = factors.size() - 1;  // factors[1 .. max_index] may move
        if (dst == n) {
          while (max_index >= 1 && factors[max_index] * level[dst] > max_innermost) --max_index;
          if (max_index == 0) continue;
        }
        const int64_t factor = factors[1 + draw(rng, max_index)];
        level[src] /= factor;
        level[dst] *= factor;
        moved = true;
      }
    }
    if (!moved) return std::nullopt;
    for (int j = 0; j < n; ++j) lengths[j] = level[j + 1];
  } else {
    // A non-divisible split (drawn with allow_non_divisible_tiles or for an awkward extent), or
    // a perfect one of an awkward extent that goes free: redraw one length as FillTileSize
    // draws free lengths (within free_length_cap), a value other than its own.
    bool redrawn = false;
    std::vector<int64_t> drawn(n);
    for (int k = 0; k < n; ++k) drawn[k] = *sp.lengths[k];
    const std::vector<bool> fixed =
        fixed_split_lengths(state, sp, ctx.task().target.warpgroup_mma());
    for (int j : detail::permutation(rng, n)) {
      if (fixed[static_cast<size_t>(j)]) continue;
      const int64_t cap = free_length_cap(sp.extent, drawn, j, max_innermost);
      const int64_t current = drawn[j];
      const bool inside = current >= 1 && current <= cap;
      if (cap - (inside ? 1 : 0) < 1) continue;
      // As FillTileSize: redrawn while it wastes more than an eighth of the work.
      for (int attempt = 0; attempt < 16; ++attempt) {
        drawn[j] = ::loom::detail::draw_free_length(rng, cap, j == n - 1, inside ? current : 0);
        if (low_waste_tiling(sp.extent, drawn)) break;
      }
      lengths[j] = drawn[j];
      redrawn = true;
      break;
    }
    if (!redrawn) return std::nullopt;
  }
  std::vector<sched::Step> edited = steps;
  std::get<sched::SplitStep>(edited[step_id]).lengths = std::move(lengths);
  // Follow splits read the source step's lengths when they are applied, so they follow; the
  // lane-major layouts drawn for the old lengths follow here.
  std::optional<sched::State> out = detail::replay(state, edited, state.origins());
  if (out) follow_operand_layouts(*out, ctx.task().target.warpgroup_mma());
  return out;
}

LOOM_DECL std::optional<sched::State> mutate_register_tile(const SketchContext& ctx,
                                                           const sched::State& state,
                                                           std::mt19937_64& rng) {
  using detail::draw;
  const int64_t max_innermost = std::max(1, ctx.options().max_innermost_split_factor);
  const std::vector<sched::Step>& steps = state.steps();
  // Perfect spatial splits with all lengths set, by stage (std::map: a reproducible order).
  std::map<std::string, std::vector<int>> by_stage;
  for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
    const sched::SplitStep* sp = detail::mutable_split(steps[i], max_innermost);
    if (!sp || sp->extent % detail::split_product(*sp) != 0) continue;
    // A tensor-core tile's innermost (fragment) level is fixed.
    const std::vector<bool> fixed =
        fixed_split_lengths(state, *sp, ctx.task().target.warpgroup_mma());
    if (std::find(fixed.begin(), fixed.end(), true) != fixed.end()) continue;
    const std::vector<int> loops = detail::split_loops(state, i);
    if (loops.empty() ||
        state.stage(sp->stage).iters[loops.back()].kind != sched::IterKind::Spatial)
      continue;
    by_stage[sp->stage].push_back(i);
  }
  std::vector<const std::vector<int>*> stages;
  for (const auto& [name, ids] : by_stage)
    if (ids.size() >= 2) stages.push_back(&ids);
  if (stages.empty()) return std::nullopt;
  const std::vector<int>& ids = *stages[draw(rng, stages.size())];

  auto levels = [&](int step_id) {
    return detail::split_levels(std::get<sched::SplitStep>(steps[step_id]));
  };
  const int k = static_cast<int>(ids.size());
  for (int pair : detail::permutation(rng, k * (k - 1))) {
    const int from = ids[pair / (k - 1)];
    int to_index = pair % (k - 1);
    if (to_index >= pair / (k - 1)) ++to_index;
    const int to = ids[to_index];
    std::vector<int64_t> a = levels(from), b = levels(to);
    const int na = static_cast<int>(a.size()) - 1, nb = static_cast<int>(b.size()) - 1;
    const std::vector<int64_t> factors = detail::divisors(a[na]);
    for (int f : detail::permutation(rng, static_cast<int>(factors.size()))) {
      const int64_t factor = factors[f];
      if (factor == 1 || b[nb] * factor > max_innermost) continue;
      std::vector<int> b_sources;
      for (int j = 0; j < nb; ++j)
        if (b[j] % factor == 0) b_sources.push_back(j);
      if (b_sources.empty()) continue;
      const int a_dest = static_cast<int>(draw(rng, static_cast<size_t>(na)));
      const int b_source = b_sources[draw(rng, b_sources.size())];
      a[na] /= factor;
      a[a_dest] *= factor;
      b[b_source] /= factor;
      b[nb] *= factor;
      std::vector<sched::Step> edited = steps;
      for (auto [step_id, level] : {std::pair{from, &a}, std::pair{to, &b}}) {
        auto& lengths = std::get<sched::SplitStep>(edited[step_id]).lengths;
        for (size_t j = 0; j < lengths.size(); ++j) lengths[j] = (*level)[j + 1];
      }
      return detail::replay(state, edited, state.origins());
    }
  }
  return std::nullopt;
}

LOOM_DECL std::optional<sched::State> mutate_auto_unroll(const SketchContext& ctx,
                                                         const sched::State& state,
                                                         std::mt19937_64& rng) {
  using detail::draw;
  const std::vector<sched::Step>& steps = state.steps();
  std::vector<int> pragmas;
  for (int i = 0; i < static_cast<int>(steps.size()); ++i)
    if (std::holds_alternative<sched::PragmaStep>(steps[i])) pragmas.push_back(i);
  if (pragmas.empty()) return std::nullopt;
  const int step_id = pragmas[draw(rng, pragmas.size())];
  const int current = std::get<sched::PragmaStep>(steps[step_id]).max_step;
  std::vector<int> values;
  for (int v : ctx.options().auto_unroll_candidates)
    if (v != current && std::find(values.begin(), values.end(), v) == values.end())
      values.push_back(v);
  if (values.empty()) return std::nullopt;
  std::vector<sched::Step> edited = steps;
  std::get<sched::PragmaStep>(edited[step_id]).max_step = values[draw(rng, values.size())];
  return detail::replay(state, edited, state.origins());
}

LOOM_DECL std::optional<sched::State> mutate_double_buffer(const SketchContext& ctx,
                                                           const sched::State& state,
                                                           std::mt19937_64& rng) {
  if (ctx.task().target.compute_capability() < 80) return std::nullopt;
  const std::vector<sched::Step>& steps = state.steps();
  std::vector<int> pipelined;  // annotation steps that pipeline a loop still pipelined
  for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
    auto* a = std::get_if<sched::AnnotationStep>(&steps[i]);
    if (!a || !ir::is_pipelined(a->annotation)) continue;
    const sched::Stage& s = state.stage(a->stage);
    if (a->iter < static_cast<int>(s.leaves.size()) && s.leaf(a->iter).annotation == a->annotation)
      pipelined.push_back(i);
  }
  const std::vector<std::pair<std::string, int>> off = double_buffer_candidates(state);
  if (pipelined.empty() && off.empty()) return std::nullopt;
  const size_t choice = detail::draw(rng, pipelined.size() + off.size());
  std::vector<sched::Step> edited = steps;
  if (choice < pipelined.size()) {
    // Annotated back to serial, or to another number of stages, by steps appended to the
    // history: later steps keep their indices (follow splits name earlier steps by index).
    const auto& a = std::get<sched::AnnotationStep>(steps[pipelined[choice]]);
    std::vector<sched::Annotation> others = {sched::Annotation::Serial};
    for (int stages = 2; stages <= max_pipeline_stages(ctx.options()); ++stages)
      if (ir::pipelined_kind(stages) != a.annotation) others.push_back(ir::pipelined_kind(stages));
    const sched::Annotation to = others[detail::draw(rng, others.size())];
    edited.push_back(sched::AnnotationStep{a.stage, a.iter, sched::Annotation::Serial});
    if (to != sched::Annotation::Serial)
      edited.push_back(sched::AnnotationStep{a.stage, a.iter, to});
  } else {
    const auto& [stage, leaf] = off[choice - pipelined.size()];
    edited.push_back(sched::AnnotationStep{stage, leaf, draw_pipeline_kind(ctx.options(), rng)});
  }
  return detail::replay(state, edited, state.origins());
}

LOOM_DECL std::optional<sched::State> mutate_compute_location(const SketchContext& ctx,
                                                              const sched::State& state,
                                                              std::mt19937_64& rng) {
  using detail::draw;
  if (ctx.options().disable_change_compute_location) return std::nullopt;
  const sched::StepOrigins parts = detail::origins_of(ctx, state);
  if (parts.location_begin >= parts.annotate_begin) return std::nullopt;
  const int step_id =
      parts.location_begin +
      static_cast<int>(draw(rng, static_cast<size_t>(parts.annotate_begin - parts.location_begin)));
  const std::vector<sched::Step>& steps = state.steps();
  const std::string name = sched::step_stage(steps[step_id]);
  // The candidates are those of the state the step met, as when ChangeComputeLocation drew it.
  sched::State before = detail::replay_prefix(state, step_id);
  const int si = before.stage_index(name);
  std::vector<sched::Step> choices;
  const auto* current = std::get_if<sched::ComputeAtStep>(&steps[step_id]);
  if (current) choices.push_back(sched::ComputeRootStep{name});
  for (const auto& [t, p] : compute_location_candidates(ctx, before, si)) {
    const std::string& target = before.stages()[t].name;
    if (current && current->target == target && current->target_iter == p) continue;
    choices.push_back(sched::ComputeAtStep{name, target, p});
  }
  // Moving the stage into the parallel loop of a root stage is a no-op when the loop that it
  // is computed at gets fused into that one; such a choice is replaced by another.
  const std::string old_text = state.to_string();
  for (int c : detail::permutation(rng, static_cast<int>(choices.size()))) {
    // A parallel loop inside another stage's loops would nest parallel regions; the stage was
    // parallelized only if it was at the root, and then it stays there.
    if (std::holds_alternative<sched::ComputeAtStep>(choices[c]) &&
        std::any_of(steps.begin() + step_id + 1, steps.end(), [&](const sched::Step& s) {
          const auto* an = std::get_if<sched::AnnotationStep>(&s);
          return an && an->stage == name && an->annotation == sched::Annotation::Parallel;
        }))
      continue;
    std::vector<sched::Step> edited = steps;
    edited[step_id] = choices[c];
    auto out = detail::replay_from(before, edited, state.origins());
    if (out && out->to_string() != old_text) return out;
  }
  return std::nullopt;
}

LOOM_DECL std::optional<sched::State> mutate_parallel(const SketchContext&,
                                                      const sched::State& state,
                                                      std::mt19937_64& rng) {
  using detail::draw;
  const std::vector<sched::Step>& steps = state.steps();
  // Parallel annotations of an outermost loop, with the fuse that made it (if any).
  std::vector<int> parallel;
  for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
    const auto* an = std::get_if<sched::AnnotationStep>(&steps[i]);
    if (an && an->iter == 0 && an->annotation == sched::Annotation::Parallel) parallel.push_back(i);
  }
  if (parallel.empty()) return std::nullopt;
  const int an_id = parallel[draw(rng, parallel.size())];
  const auto an = std::get<sched::AnnotationStep>(steps[an_id]);
  const auto* fu = an_id > 0 ? std::get_if<sched::FuseStep>(&steps[an_id - 1]) : nullptr;
  const bool has_fuse = fu && fu->stage == an.stage && !fu->iters.empty() && fu->iters[0] == 0;
  const int fuse_id = has_fuse ? an_id - 1 : an_id;  // where the new fuse goes
  const int old_count = has_fuse ? static_cast<int>(fu->iters.size()) : 1;

  sched::State before = detail::replay_prefix(state, fuse_id);
  const sched::Stage& s = before.stage(an.stage);
  // As annotate_parallel: outer spatial, unannotated loops, up to and including the first loop
  // where another stage is computed.
  int max_count = 0;
  for (int p = 0; p < static_cast<int>(s.leaves.size()); ++p) {
    const sched::Iterator& it = s.leaf(p);
    if (it.kind == sched::IterKind::Reduce || it.annotation != sched::Annotation::Serial) break;
    ++max_count;
    if (!before.attached_at(s.name, s.leaves[p]).empty()) break;
  }
  std::vector<int> counts;
  for (int c = 1; c <= max_count; ++c)
    if (c != old_count) counts.push_back(c);
  if (counts.empty()) return std::nullopt;
  const int new_count = counts[draw(rng, counts.size())];

  std::vector<sched::Step> edited(steps.begin(), steps.begin() + fuse_id);
  if (new_count > 1) {
    std::vector<int> iters(new_count);
    std::iota(iters.begin(), iters.end(), 0);
    edited.push_back(sched::FuseStep{an.stage, std::move(iters)});
  }
  edited.push_back(an);
  for (size_t i = an_id + 1; i < steps.size(); ++i) {
    auto step = detail::renumbered(steps[i], an.stage, old_count, new_count);
    if (!step) return std::nullopt;
    edited.push_back(std::move(*step));
  }
  const int delta = (new_count > 1) - (has_fuse ? 1 : 0);
  if (delta != 0) detail::shift_step_references(edited, fuse_id + 1, delta);
  return detail::replay_from(std::move(before), edited,
                             detail::shifted(state.origins(), fuse_id, delta));
}

LOOM_DECL const std::vector<MutationRule>& cpu_mutation_rules() {
  static const std::vector<MutationRule> rules = {
      {"MutateTileSize", 0.90, mutate_tile_size},
      {"MutateAutoUnroll", 0.04, mutate_auto_unroll},
      {"MutateComputeLocation", 0.05, mutate_compute_location},
      {"MutateParallel", 0.01, mutate_parallel}};
  return rules;
}

LOOM_DECL const std::vector<MutationRule>& gpu_mutation_rules() {
  static const std::vector<MutationRule> rules = [] {
    std::vector<MutationRule> r = cpu_mutation_rules();
    r.push_back({"MutateDoubleBuffer", 0.02, mutate_double_buffer});
    return r;
  }();
  return rules;
}

LOOM_DECL MutationRule register_tile_mutation_rule() {
  return {"MutateRegisterTile", 0.10, mutate_register_tile};
}

LOOM_DECL std::optional<sched::State> mutate(const SketchContext& ctx, const sched::State& state,
                                             const std::vector<MutationRule>& rules,
                                             std::mt19937_64& rng, int attempts) {
  double total = 0;
  for (const MutationRule& r : rules) total += std::max(0.0, r.weight);
  if (total <= 0) return std::nullopt;
  for (int a = 0; a < attempts; ++a) {
    // 53 random bits as a double in [0, 1): exact and the same on every platform.
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
    double acc = 0;
    const MutationRule* chosen = nullptr;
    for (const MutationRule& r : rules) {
      if (r.weight <= 0) continue;
      chosen = &r;  // the last positive rule absorbs rounding at the top end
      acc += r.weight;
      if (u < acc) break;
    }
    try {
      if (auto s = chosen->apply(ctx, state, rng)) return s;
    } catch (const user_error&) {
      // A custom rule's illegal edit: as if it did not apply.
    }
  }
  return std::nullopt;
}

LOOM_DECL std::optional<sched::State> crossover(const SketchContext& ctx, const sched::State& a,
                                                const sched::State& b, std::mt19937_64& rng) {
  const std::vector<sched::Step>& sa = a.steps();
  const std::vector<sched::Step>& sb = b.steps();
  // The sketch part: everything before random annotation's compute_at steps. Where the
  // parents' ChangeComputeLocation steps seem to begin at different places (the last steps of a
  // sketch may look like ChangeComputeLocation's when a parent does not record them, see
  // inferred_origins), both parents must have the
  // same steps up to the later beginning: for one sketch those are its own steps in both.
  const int sketch_end = std::max(detail::origins_of(ctx, a).location_begin,
                                  detail::origins_of(ctx, b).location_begin);
  if (static_cast<int>(std::min(sa.size(), sb.size())) < sketch_end) return std::nullopt;
  for (int i = 0; i < sketch_end; ++i)
    if (!detail::same_structure(sa[i], sb[i])) return std::nullopt;

  // Annotation steps per stage. A stage whose annotation differs between the parents (other
  // location, parallel or vectorize fuse) takes everything from `a`: its structure was chosen
  // for a's tile sizes.
  std::map<std::string, std::vector<int>> tail_a, tail_b;
  for (int i = sketch_end; i < static_cast<int>(sa.size()); ++i)
    tail_a[sched::step_stage(sa[i])].push_back(i);
  for (int i = sketch_end; i < static_cast<int>(sb.size()); ++i)
    tail_b[sched::step_stage(sb[i])].push_back(i);
  auto same_tail = [&](const std::string& stage) {
    auto ia = tail_a.find(stage), ib = tail_b.find(stage);
    if (ia == tail_a.end() || ib == tail_b.end()) return ia == tail_a.end() && ib == tail_b.end();
    if (ia->second.size() != ib->second.size()) return false;
    for (size_t k = 0; k < ia->second.size(); ++k)
      if (!detail::same_structure(sa[ia->second[k]], sb[ib->second[k]])) return false;
    return true;
  };

  // One draw per stage, in the order the stages first appear in a's history, then b's.
  std::vector<std::string> stages;
  for (const auto* history : {&sa, &sb})
    for (const sched::Step& s : *history)
      if (std::find(stages.begin(), stages.end(), sched::step_stage(s)) == stages.end())
        stages.push_back(sched::step_stage(s));
  std::unordered_map<std::string, bool> from_b;
  for (const std::string& stage : stages)
    from_b[stage] = same_tail(stage) && detail::draw(rng, 2) == 1;

  std::vector<sched::Step> child = sa;
  for (int i = 0; i < sketch_end; ++i) {
    if (!from_b[sched::step_stage(sa[i])]) continue;
    if (auto* sp = std::get_if<sched::SplitStep>(&child[i]))
      sp->lengths = std::get<sched::SplitStep>(sb[i]).lengths;
    else if (auto* pr = std::get_if<sched::PragmaStep>(&child[i]))
      pr->max_step = std::get<sched::PragmaStep>(sb[i]).max_step;
  }
  for (auto& [stage, ids] : tail_a) {
    if (!from_b[stage]) continue;
    const std::vector<int>& ids_b = tail_b[stage];
    for (size_t k = 0; k < ids.size(); ++k) {
      // A split here is annotation's (a long loop cut for vectors, see annotate_vectorize).
      if (auto* sp = std::get_if<sched::SplitStep>(&child[ids[k]]))
        sp->lengths = std::get<sched::SplitStep>(sb[ids_b[k]]).lengths;
      else if (auto* pr = std::get_if<sched::PragmaStep>(&child[ids[k]]))
        pr->max_step = std::get<sched::PragmaStep>(sb[ids_b[k]]).max_step;
    }
  }
  // The child has a's structure, so a's parts; its layouts follow the tiles it took.
  std::optional<sched::State> out = detail::replay(a, child, a.origins());
  if (out) follow_operand_layouts(*out, ctx.task().target.warpgroup_mma());
  return out;
}

LOOM_DECL std::optional<sched::State> transfer_to_sketch(const SketchContext& ctx,
                                                         const sched::State& program,
                                                         const sched::State& sketch) {
  const std::vector<sched::Step>& from = program.steps();
  const sched::StepOrigins program_parts = detail::origins_of(ctx, program);
  const int program_sketch_end = program_parts.location_begin;

  // The k-th split of a (stage, loop, extent, level count) in the sketch takes the lengths of
  // the k-th such split of the program's sketch part.
  std::vector<char> used(from.size(), 0);
  std::vector<sched::Step> steps = sketch.steps();
  bool same_as_program = static_cast<int>(steps.size()) == program_sketch_end;
  for (size_t i = 0; i < steps.size(); ++i) {
    same_as_program = same_as_program && detail::same_structure(steps[i], from[i]);
    auto* sp = std::get_if<sched::SplitStep>(&steps[i]);
    if (!sp) continue;
    bool found = false;
    for (int j = 0; j < program_sketch_end && !found; ++j) {
      if (used[j] || !detail::same_structure(steps[i], from[j])) continue;
      sp->lengths = std::get<sched::SplitStep>(from[j]).lengths;
      used[j] = found = true;
    }
    if (!found) return std::nullopt;
  }
  if (same_as_program) return std::nullopt;

  std::optional<sched::State> out = detail::replay(program, steps, {});
  if (!out) return std::nullopt;
  // The program's location steps that apply here are the new history's location part.
  sched::StepOrigins origins{static_cast<int>(steps.size()), static_cast<int>(steps.size())};
  // The annotation, stage by stage in its order: a stage whose step does not apply here (a
  // stage the sketch lacks, a loop it has elsewhere) keeps what it got before that step.
  std::set<std::string> dropped;
  for (size_t i = static_cast<size_t>(program_sketch_end); i < from.size(); ++i) {
    const std::string& stage = sched::step_stage(from[i]);
    if (dropped.count(stage)) continue;
    try {
      sched::State next = *out;
      next.apply(from[i]);
      out = std::move(next);
      if (static_cast<int>(i) < program_parts.annotate_begin) ++origins.annotate_begin;
    } catch (const user_error&) {
      dropped.insert(stage);
    }
  }
  out->set_origins(origins);
  return out;
}

}  // namespace search
LOOM_END_NAMESPACE
