// Bodies of loom/search/annotate.hpp: Ansor's random annotation (init rules) for CPU targets.
#include "loom/search/annotate.hpp"

#include "loom/detail/random.hpp"
#include "loom/lower/lower.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace search {

namespace detail {

using ::loom::detail::draw;

inline void enumerate_tilings(int64_t rest, int n, int max_innermost, std::vector<int64_t>& cur,
                              std::vector<std::vector<int64_t>>& out) {
  if (static_cast<int>(cur.size()) == n) {
    out.push_back(cur);
    return;
  }
  const bool innermost = static_cast<int>(cur.size()) == n - 1;
  for (int64_t d = 1; d <= rest; ++d) {
    if (rest % d != 0) continue;
    if (innermost && d > max_innermost) break;
    cur.push_back(d);
    enumerate_tilings(rest / d, n, max_innermost, cur, out);
    cur.pop_back();
  }
}

// Free lengths for a non-divisible tiling: drawn inner to outer, each within free_length_cap
// (::loom::detail::draw_free_length). A draw that wastes more than an eighth of the work
// (low_waste_tiling) is redrawn: about a fifth of the draws for 129 in three lengths pass, so
// 128 attempts practically always find one.
inline std::vector<int64_t> free_tiling(int64_t extent, int n, int max_innermost,
                                        std::mt19937_64& rng) {
  std::vector<int64_t> lengths(n);
  for (int attempt = 0; attempt < 128; ++attempt) {
    for (int j = n - 1; j >= 0; --j)
      lengths[j] = ::loom::detail::draw_free_length(
          rng, free_length_cap(extent, lengths, j, max_innermost), j == n - 1);
    if (low_waste_tiling(extent, lengths)) break;
  }
  return lengths;
}

}  // namespace detail

LOOM_DECL const std::vector<std::vector<int64_t>>& perfect_tilings(int64_t extent, int n,
                                                                   int max_innermost) {
  // The same few extents recur in every sample of a task: enumerate each once. std::map never
  // moves its values, so the returned reference stays valid while others are added.
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int, int>, std::vector<std::vector<int64_t>>> memo;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_tuple(extent, n, max_innermost);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> cur;
  detail::enumerate_tilings(std::max<int64_t>(extent, 1), n, std::max(max_innermost, 1), cur, out);
  return memo.emplace(key, std::move(out)).first->second;
}

LOOM_DECL sched::State fill_tile_sizes(const sched::State& sketch, const SearchOptions& options,
                                       std::mt19937_64& rng) {
  std::vector<sched::Step> steps = sketch.steps();
  for (sched::Step& step : steps) {
    auto* sp = std::get_if<sched::SplitStep>(&step);
    if (!sp || std::all_of(sp->lengths.begin(), sp->lengths.end(), [](auto& l) { return l; }))
      continue;
    LOOM_USER_CHECK(sp->extent > 0, "loom.search.E811")
        << "fill_tile_sizes: the split of loop " << sp->iter << " of stage '" << sp->stage
        << "' has unset lengths but no known extent to factorize";
    const int n = static_cast<int>(sp->lengths.size());
    std::vector<int64_t> lengths;
    // Lengths a sketch set (the vector of a weight-vector axis, a tensor-core tile's lanes and
    // fragments, search/sketch.hpp) stay; the others tile what they leave, rounded up where
    // they do not divide the extent (a tensor-core tile padded past its rows).
    int64_t preset = 1;
    int unset = 0;
    for (const auto& l : sp->lengths) l ? preset *= *l : ++unset;
    if (unset < n) {
      const auto& all = perfect_tilings((sp->extent + preset - 1) / preset, unset,
                                        static_cast<int>(std::min<int64_t>(sp->extent, 1 << 30)));
      const std::vector<int64_t>& drawn = all[detail::draw(rng, all.size())];
      for (int j = 0, k = 0; j < n; ++j)
        if (!sp->lengths[j]) sp->lengths[j] = drawn[static_cast<size_t>(k++)];
      continue;
    }
    const bool awkward = options.non_divisible_for_awkward_extents &&
                         awkward_extent(sp->extent, options.max_innermost_split_factor);
    double free_probability = awkward ? options.awkward_free_probability : 0.0;
    if (options.allow_non_divisible_tiles) free_probability = options.non_divisible_probability;
    // No draw when free lengths are out: sampling keeps Ansor's random stream for every other
    // extent (seeded tests depend on it).
    if (::loom::detail::chance(rng, free_probability)) {
      lengths = detail::free_tiling(sp->extent, n, options.max_innermost_split_factor, rng);
    } else {
      const auto& all = perfect_tilings(sp->extent, n, options.max_innermost_split_factor);
      lengths = all[detail::draw(rng, all.size())];
    }
    for (int j = 0; j < n; ++j)
      if (!sp->lengths[j]) sp->lengths[j] = lengths[j];
  }
  // Replaying (rather than patching the sketch's stages) recomputes every extent that depends
  // on the lengths: follow_split copies, outer loops, fused loops.
  return sched::replay(sketch.dag_ptr(), steps);
}

LOOM_DECL std::vector<std::pair<int, int>> compute_location_candidates(const SketchContext&,
                                                                       const sched::State& state,
                                                                       int stage) {
  std::vector<std::pair<int, int>> out;
  const auto cons = state.consumers(stage);
  if (cons.empty()) return out;
  // Several consumers are allowed when one is a root stage and the others are computed inside
  // it, directly or through other stages (e.g. a softmax row: the sum, or its rfactor partial
  // sums, and the division all read exp): then the stage may go into that root's loops, no
  // deeper than where the others are computed, which need it first.
  int t = cons[0];
  int deepest = std::numeric_limits<int>::max();
  if (cons.size() > 1) {
    t = -1;
    for (int c : cons)
      if (state.stages()[c].location == sched::ComputeLocation::Root) {
        if (t >= 0) return out;
        t = c;
      }
    if (t < 0) return out;
    const std::string& root = state.stages()[t].name;
    for (int c : cons) {
      if (c == t) continue;
      const sched::Stage* o = &state.stages()[c];
      for (int guard = 0;
           o->location == sched::ComputeLocation::At && o->attach_stage != root && guard < 1000;
           ++guard)
        o = &state.stage(o->attach_stage);
      if (o->location != sched::ComputeLocation::At) return out;  // under another root
      deepest = std::min(deepest, state.stages()[t].leaf_position(o->attach_iter));
    }
  }
  const sched::Stage& target = state.stages()[t];
  const bool target_attached = target.location == sched::ComputeLocation::At;
  const bool target_tiled = is_tiled(target);
  bool visited_reduce = false;
  for (int p = 0; p < static_cast<int>(target.leaves.size()) && p <= deepest; ++p) {
    const sched::Iterator& it = target.leaf(p);
    if (it.kind == sched::IterKind::Reduce) {
      visited_reduce = true;
      if (!target_tiled) break;  // an untiled reduction: inside it means once per term
    } else if (visited_reduce) {
      break;  // a spatial loop inside a reduce tile: the inner tile
    }
    if (it.annotation == sched::Annotation::Unrolled) break;
    if (it.extent == 1) continue;
    // Inside another stage the first tile level has one iteration; skip it.
    if (target_attached && it.kind == sched::IterKind::Spatial && it.name.size() >= 2 &&
        it.name.compare(it.name.size() - 2, 2, ".0") == 0)
      continue;
    out.emplace_back(t, p);
    // Deeper than a loop where another stage is computed would reorder the two.
    if (!state.attached_at(target.name, target.leaves[p]).empty()) break;
  }
  if (target_attached && cons.size() == 1) {
    // The loops of the stage the consumer is computed in, outside the consumer's own position.
    const int tt = state.stage_index(target.attach_stage);
    const sched::Stage& outer = state.stages()[tt];
    for (int p = 0; p < static_cast<int>(outer.leaves.size()); ++p) {
      const sched::Iterator& it = outer.leaf(p);
      if (it.kind == sched::IterKind::Reduce ||
          !state.attached_at(outer.name, outer.leaves[p]).empty())
        break;
      if (it.annotation == sched::Annotation::Unrolled) break;
      if (it.extent == 1) continue;
      out.emplace_back(tt, p);
    }
  }
  return out;
}

LOOM_DECL void change_compute_location(const SketchContext& ctx, sched::State& state,
                                       std::mt19937_64& rng) {
  if (ctx.options().disable_change_compute_location) return;
  // A stage whose location the sketch (a rule, or the user's hand-written part) chose keeps it,
  // and so does a stage the sketch computed another one inside (the rules place what they put
  // a stage into; mutate.ipp's inferred_origins relies on it to tell the sketch's steps from
  // ours in programs that do not record where they came from).
  std::unordered_set<std::string> placed;
  for (const sched::Step& step : state.steps()) {
    if (std::holds_alternative<sched::ComputeAtStep>(step) ||
        std::holds_alternative<sched::ComputeRootStep>(step) ||
        std::holds_alternative<sched::ComputeInlineStep>(step))
      placed.insert(sched::step_stage(step));
    if (const auto* ca = std::get_if<sched::ComputeAtStep>(&step)) placed.insert(ca->target);
  }
  for (int si = static_cast<int>(state.stages().size()) - 1; si >= 0; --si) {
    const sched::Stage& s = state.stages()[si];
    if (s.is_placeholder || s.is_output || s.location == sched::ComputeLocation::Inlined ||
        is_tiled(s) || needs_multi_level_tiling(ctx, state, si) || placed.count(s.name))
      continue;
    const std::string name = s.name;
    const auto cands = compute_location_candidates(ctx, state, si);
    const size_t choice = detail::draw(rng, cands.size() + 2);
    try {
      if (choice == 0) {
        // As in Ansor, "inline" only takes a stage out of another stage's loops; a root stage
        // stays where it is (the sketch rules already inlined what is always worth inlining).
        if (!has_reduce(s) && s.location == sched::ComputeLocation::At) state.compute_inline(name);
      } else if (choice == 1) {
        if (s.location != sched::ComputeLocation::Root) state.compute_root(name);
      } else {
        const auto& [t, p] = cands[choice - 2];
        state.compute_at(name, state.stages()[t].name, p);
      }
    } catch (const user_error&) {
      // An illegal move leaves the state unchanged: the stage keeps its location.
    }
  }
}

LOOM_DECL void annotate_parallel(const SketchContext& ctx, sched::State& state) {
  const int64_t limit =
      int64_t{ctx.options().parallel_granularity} * std::max(1, ctx.task().target.num_cores);
  for (size_t si = 0; si < state.stages().size(); ++si) {
    const sched::Stage& s = state.stages()[si];
    if (s.is_placeholder || s.location != sched::ComputeLocation::Root || s.leaves.empty())
      continue;
    int64_t degree = 1;
    int count = 0;
    for (int p = 0; p < static_cast<int>(s.leaves.size()); ++p) {
      const sched::Iterator& it = s.leaf(p);
      if (it.kind == sched::IterKind::Reduce || it.annotation != sched::Annotation::Serial) break;
      ++count;
      degree *= std::max<int64_t>(it.extent, 1);
      if (degree > limit || !state.attached_at(s.name, s.leaves[p]).empty()) break;
    }
    // TODO(#4): Ansor recurses into the stages computed at a loop of extent 1 here; without
    // nested-parallel pruning that could nest parallel loops, so it is left out.
    if (count == 0 || degree == 1) continue;
    const std::string name = s.name;
    try {
      if (count > 1) {
        std::vector<int> iters(count);
        std::iota(iters.begin(), iters.end(), 0);
        state.fuse(name, iters);
      }
      state.annotate(name, 0, sched::Annotation::Parallel);
    } catch (const user_error&) {
    }
  }
}

LOOM_DECL void annotate_unroll(const SketchContext& ctx, sched::State& state,
                               std::mt19937_64& rng) {
  const auto& cands = ctx.task().target.is_cuda() ? ctx.options().gpu_auto_unroll_candidates
                                                  : ctx.options().auto_unroll_candidates;
  if (cands.empty()) return;
  for (int si = static_cast<int>(state.stages().size()) - 1; si >= 0; --si) {
    const sched::Stage& s = state.stages()[si];
    if (s.is_placeholder || s.location == sched::ComputeLocation::Inlined || s.leaves.empty() ||
        !has_reduce(s))
      continue;
    state.pragma_unroll(s.name, 0, cands[detail::draw(rng, cands.size())]);
  }
}

namespace detail {

// The two rules below take over where annotate_vectorize finds the innermost loop of stage `si`
// free (spatial, unannotated, nothing computed at it) but longer than `limit` lanes on its own.

/// SearchOptions::long_loop_vectorize_probability: the innermost loop of an untiled stage split
/// into a vectorized inner loop of limit x {1, 2, 4} lanes that divide its extent. Draws random
/// numbers only for a loop that qualifies.
inline void split_long_loop_for_vectors(const SketchContext& ctx, sched::State& state, int si,
                                        int64_t limit, std::mt19937_64& rng) {
  const sched::Stage& s = state.stages()[si];
  const int inner = static_cast<int>(s.leaves.size()) - 1;
  const sched::Iterator& it = s.leaf(inner);
  std::vector<int64_t> lanes;  // none unless the loop is longer than `limit`
  for (int64_t times : {1, 2, 4})
    if (it.extent % (limit * times) == 0 && it.extent > limit * times)
      lanes.push_back(limit * times);
  if (lanes.empty() || !::loom::detail::chance(rng, ctx.options().long_loop_vectorize_probability))
    return;
  const int64_t length = lanes[draw(rng, lanes.size())];
  const std::string name = s.name;
  try {
    state.split(name, inner, {length});
    state.annotate(name, inner + 1, sched::Annotation::Vectorized);
  } catch (const user_error&) {
  }
}

/// SearchOptions::wide_vectorize_probability: the innermost loop of a tiled stage, at most
/// lower::max_vectorized_extent long, vectorized whole; lowering cuts a length that is not a
/// power of two into power-of-two vectors. Draws a random number only for a loop that qualifies.
inline void vectorize_wide_tile(const SketchContext& ctx, sched::State& state, int si,
                                std::mt19937_64& rng) {
  const sched::Stage& s = state.stages()[si];
  const int inner = static_cast<int>(s.leaves.size()) - 1;
  if (s.leaf(inner).extent > lower::max_vectorized_extent ||
      !::loom::detail::chance(rng, ctx.options().wide_vectorize_probability))
    return;
  const std::string name = s.name;
  try {
    state.annotate(name, inner, sched::Annotation::Vectorized);
  } catch (const user_error&) {
  }
}

}  // namespace detail

LOOM_DECL void annotate_vectorize(const SketchContext& ctx, sched::State& state,
                                  std::mt19937_64& rng) {
  for (int si = static_cast<int>(state.stages().size()) - 1; si >= 0; --si) {
    const sched::Stage& s = state.stages()[si];
    if (s.is_placeholder || s.location == sched::ComputeLocation::Inlined || s.leaves.empty())
      continue;
    const int64_t limit = ctx.options().max_vectorize_size > 0
                              ? ctx.options().max_vectorize_size
                              : ctx.task().target.vector_lanes(s.op.dtype().bytes());
    const int n = static_cast<int>(s.leaves.size());
    int64_t product = 1;
    int count = 0;
    bool too_long = false;  // the scan stopped at a free loop that exceeds `limit`
    while (count < n) {
      const int p = n - 1 - count;
      const sched::Iterator& it = s.leaf(p);
      if (!state.attached_at(s.name, s.leaves[p]).empty() || it.kind == sched::IterKind::Reduce ||
          it.annotation != sched::Annotation::Serial)
        break;
      // In a tiled stage the loop outside the innermost one strides over a tile: fusing it
      // would not give contiguous accesses.
      if (is_tiled(s) && count != 0) break;
      product *= std::max<int64_t>(it.extent, 1);
      if (product > limit) {
        too_long = true;
        break;
      }
      ++count;
    }
    // Ansor fuses a random 1 .. count-1 of the candidates.
    if (count > 1) count = 1 + static_cast<int>(detail::draw(rng, count - 1));
    if (count == 0) {
      // The innermost loop alone is free to vectorize but longer than `limit`.
      if (too_long && is_tiled(s))
        detail::vectorize_wide_tile(ctx, state, si, rng);
      else if (too_long)
        detail::split_long_loop_for_vectors(ctx, state, si, limit, rng);
      continue;
    }
    const std::string name = s.name;
    try {
      if (count > 1) {
        std::vector<int> iters(count);
        std::iota(iters.begin(), iters.end(), n - count);
        state.fuse(name, iters);
      }
      state.annotate(name, n - count, sched::Annotation::Vectorized);
    } catch (const user_error&) {
    }
  }
}

LOOM_DECL const std::vector<InitRule>& cpu_init_rules() {
  static const std::vector<InitRule> rules = {
      {"FillTileSize", [](const SketchContext& ctx, sched::State& s,
                          std::mt19937_64& rng) { s = fill_tile_sizes(s, ctx.options(), rng); }},
      {"ChangeComputeLocation", change_compute_location, sched::StepPart::Location},
      {"Parallel",
       [](const SketchContext& ctx, sched::State& s, std::mt19937_64&) {
         annotate_parallel(ctx, s);
       },
       sched::StepPart::Annotation},
      {"Unroll", annotate_unroll, sched::StepPart::Annotation},
      {"Vectorization", annotate_vectorize, sched::StepPart::Annotation}};
  return rules;
}

LOOM_DECL std::optional<sched::State> try_sample_program(
    const sched::State& sketch, const Task& task, const SearchOptions& options,
    std::mt19937_64& rng, const std::vector<InitRule>& custom_rules) {
  for (const InitRule& rule : custom_rules)
    LOOM_USER_CHECK(rule.part == sched::StepPart::Sketch, "loom.search.E814")
        << "custom init rule '" << rule.name << "' declares its steps part of the "
        << (rule.part == sched::StepPart::Location ? "compute-location" : "annotation")
        << " part, but custom rules run first, on the sketch, before FillTileSize: leave its "
        << "part as StepPart::Sketch";
  try {
    const SketchContext ctx(task, options);
    sched::State s = sketch;
    for (const InitRule& rule : custom_rules) rule.apply(ctx, s, rng);
    // Each part begins where the first rule of a later part meets the history.
    sched::StepOrigins origins;
    for (const InitRule& rule : init_rules(task.target)) {
      const int at = static_cast<int>(s.steps().size());
      if (rule.part != sched::StepPart::Sketch && origins.location_begin < 0)
        origins.location_begin = at;
      if (rule.part == sched::StepPart::Annotation && origins.annotate_begin < 0)
        origins.annotate_begin = at;
      rule.apply(ctx, s, rng);
    }
    const int end = static_cast<int>(s.steps().size());
    if (origins.location_begin < 0) origins.location_begin = end;
    if (origins.annotate_begin < 0) origins.annotate_begin = end;
    s.set_origins(origins);
    return s;
  } catch (const user_error&) {
    return std::nullopt;
  }
}

LOOM_DECL sched::State sample_program(const sched::State& sketch, const Task& task,
                                      const SearchOptions& options, std::mt19937_64& rng,
                                      const std::vector<InitRule>& custom_rules) {
  for (int a = 0; a < std::max(1, options.max_sample_attempts); ++a)
    if (auto s = try_sample_program(sketch, task, options, rng, custom_rules)) return *s;
  LOOM_USER_FAIL("loom.search.E810") << "sample_program: all " << options.max_sample_attempts
                                     << " random annotations of the sketch were rejected:\n"
                                     << sketch.to_string();
  return sketch;
}

LOOM_DECL void define_split(sched::State& state, const std::string& stage, int iter, int parts,
                            std::vector<std::optional<int64_t>> fixed) {
  LOOM_USER_CHECK(parts >= 2, "loom.search.E812")
      << "define_split: a split of loop " << iter << " of stage '" << stage << "' into " << parts
      << " parts; it needs at least 2";
  if (fixed.empty()) fixed.resize(parts - 1);
  LOOM_USER_CHECK(static_cast<int>(fixed.size()) == parts - 1, "loom.search.E812")
      << "define_split: " << fixed.size() << " fixed lengths given for a split into " << parts
      << " parts; give " << parts - 1 << " (outer to inner, std::nullopt where the search "
      << "chooses) or none";
  const sched::Stage& s = state.stage(stage);
  LOOM_USER_CHECK(iter >= 0 && iter < static_cast<int>(s.leaves.size()), "loom.search.E812")
      << "define_split: stage '" << stage << "' has " << s.leaves.size() << " loops, no loop "
      << iter;
  state.apply(sched::SplitStep{stage, iter, s.leaf(iter).extent, std::move(fixed)});
}

LOOM_DECL std::vector<sched::State> sample_programs(const std::vector<sched::State>& sketches,
                                                    const Task& task, const SearchOptions& options,
                                                    std::mt19937_64& rng, int count,
                                                    const std::vector<InitRule>& custom_rules) {
  std::vector<sched::State> out;
  if (sketches.empty() || count <= 0) return out;
  std::unordered_set<std::string> seen;
  for (int draws = 0; draws < 20 * count && static_cast<int>(out.size()) < count; ++draws) {
    const sched::State& sketch = sketches[detail::draw(rng, sketches.size())];
    auto s = try_sample_program(sketch, task, options, rng, custom_rules);
    if (s && seen.insert(s->to_string()).second) out.push_back(std::move(*s));
  }
  return out;
}

}  // namespace search
LOOM_END_NAMESPACE

// The GPU init rules share this file's helpers (compiled through it, see cmake/LoomCompiled.cmake).
#include "loom/search/impl/gpu_annotate.ipp"
