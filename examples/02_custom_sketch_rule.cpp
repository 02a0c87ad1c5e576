/// \file
/// A user-defined sketch rule (Ansor's "custom rules", loom/search/sketch.hpp).
///
/// The workload is an operator no vendor library has: squared Euclidean distances between two
/// point sets, D[i, j] = sum_k (X[i, k] - Y[j, k])^2, the inner loop of k-nearest-neighbours.
/// The rule below writes the loop structure an expert would: a register tile D.local of
/// (rows x vector-width) accumulators, computed inside an (i, j) tiling of D, with the
/// reduction outermost in the tile. It fixes the structure and the column tile (two vectors);
/// the row tile and everything else (parallel loops, unrolling, vectorization) stay random
/// annotation's job. Custom rules run before the built-in ones; returning `Apply` keeps the
/// built-in sketches too, so the search can compare both.
#include "example_support.hpp"

#include <loom/loom.hpp>
#include <loom/search/sketch.hpp>

#include <algorithm>
#include <cstdio>

using namespace loom;

namespace {

search::SketchRule distance_register_tile() {
  return {"DistanceRegisterTile",
          // Condition: a multi-level-tiled output without a cache stage yet (D itself).
          [](const search::SketchContext& ctx, const sched::State& s, int stage) {
            const sched::Stage& st = s.stages()[stage];
            return st.is_output && search::needs_multi_level_tiling(ctx, s, stage) &&
                           !search::has_cache_write_stage(ctx, s, stage)
                       ? search::RuleCondition::Apply
                       : search::RuleCondition::Skip;
          },
          // Apply: one new sketch.
          [](const search::SketchContext& ctx, const sched::State& in, int stage) {
            sched::State s = in;
            const std::string name = in.stages()[stage].name;
            const int lanes = ctx.task().target.vector_lanes(4);
            const std::string local = s.cache_write(name, ir::MemoryScope::Local);
            search::define_split(s, name, 0, 2);               // i -> i.0 i.1 (searched)
            search::define_split(s, name, 2, 2, {2 * lanes});  // j -> j.0 j.1 (two vectors)
            s.reorder(name, {0, 2, 1, 3});                     // i.0 j.0 | i.1 j.1
            s.compute_at(local, name, 1);                      // one tile per (i.0, j.0)
            s.reorder(local, {2, 0, 1});                       // k outside the tile
            s.annotate(local, 2, sched::Annotation::Vectorized);
            // D.local now sits at `stage` and D after it: go on with the stage before both.
            return std::vector<std::pair<sched::State, int>>{{std::move(s), stage - 1}};
          }};
}

}  // namespace

int main() {
  const int64_t n = 256, m = 256, dims = 64;
  auto X = placeholder<float>("X", {n, dims});
  auto Y = placeholder<float>("Y", {m, dims});
  auto k = reduce_axis(dims, "k");
  auto D = compute(
      "D", {n, m},
      [&](Var i, Var j) {
        auto d = X(i, k) - Y(j, k);
        return sum(d * d, k);
      },
      "sq_dist");
  Task task(ComputeDAG({X, Y}, {D}));
  const search::SearchOptions options;

  auto builtin = search::generate_sketches(task, options);
  auto with_rule = search::generate_sketches(task, options, {distance_register_tile()});
  std::printf("sketches: %zu from the built-in rules, %zu with the custom rule\n", builtin.size(),
              with_rule.size());
  // The custom sketch is the one whose register tile has the reduction outermost.
  std::vector<sched::State> custom_only;
  for (auto& s : with_rule) {
    auto local = std::find_if(s.stages().begin(), s.stages().end(),
                              [](const sched::Stage& st) { return st.name == "D.local"; });
    if (local != s.stages().end() && local->leaf(0).kind == sched::IterKind::Reduce)
      custom_only.push_back(s);
  }
  std::printf("the custom sketch:\n%s\n", custom_only.at(0).to_string().c_str());

  const int samples = 16;
  auto r_builtin = loom_examples::random_search(task, builtin, options, samples, 1);
  auto r_custom = loom_examples::random_search(task, custom_only, options, samples, 1);
  const double gflop = task.dag->flop_count() * 1e-9;
  std::printf("best of %d random programs, built-in sketches: %7.3f ms (%5.1f GFLOP/s)\n",
              r_builtin.measured, r_builtin.best_ms, gflop / (r_builtin.best_ms * 1e-3));
  std::printf("best of %d random programs, custom sketch:     %7.3f ms (%5.1f GFLOP/s)\n",
              r_custom.measured, r_custom.best_ms, gflop / (r_custom.best_ms * 1e-3));
  std::printf("best program of the custom sketch:\n%s\n", r_custom.best->to_string().c_str());
  const bool ok = r_builtin.wrong == 0 && r_custom.wrong == 0 && r_custom.best.has_value();
  std::printf("%s\n", ok ? "OK: every program matched the reference interpreter"
                         : "FAILED: a program computed a wrong result");
  return ok ? 0 : 1;
}
