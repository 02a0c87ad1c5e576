/// \file
/// Restricting the search space with `SearchOptions` and adding a user-defined init rule
/// (random annotation, loom/search/annotate.hpp).
///
/// The workload is a dense layer, Y = X W^T + b. The options keep innermost tiles at most 16
/// long, draw auto-unroll limits from {0, 16, 64}, allow tiles that do not divide the extent
/// (loom lowers the tails) and use a three-level tiling "SRSRS". The custom init rule encodes a
/// user's belief: every innermost tile length the sketch left open is one or two vector widths.
/// Custom init rules run before the built-in ones, on the sketch with its unset lengths, so the
/// lengths it sets are kept and FillTileSize draws only the rest.
#include "example_support.hpp"

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include <cstdio>

using namespace loom;

namespace {

search::InitRule innermost_vector_widths() {
  return {"InnermostVectorWidths",
          [](const search::SketchContext& ctx, sched::State& s, std::mt19937_64& rng) {
            const int64_t lanes = ctx.task().target.vector_lanes(4);
            for (int i = 0; i < static_cast<int>(s.steps().size()); ++i) {
              const auto* split = std::get_if<sched::SplitStep>(&s.steps()[i]);
              if (!split || split->lengths.back() || split->extent < 2 * lanes) continue;
              std::vector<std::optional<int64_t>> lengths(split->lengths.begin(),
                                                          split->lengths.end() - 1);
              lengths.emplace_back(lanes * (1 + static_cast<int64_t>(rng() % 2)));
              s.set_split_lengths(i, std::move(lengths));
            }
          }};
}

}  // namespace

int main() {
  const int64_t batch = 64, in = 512, out = 256;
  auto X = placeholder<float>("X", {batch, in});
  auto W = placeholder<float>("W", {out, in});
  auto b = placeholder<float>("b", {out});
  Task task(ComputeDAG({X, W, b}, {ops::dense(X, W, b)}));

  search::SearchOptions options;
  options.max_innermost_split_factor = 16;
  options.auto_unroll_candidates = {0, 16, 64};
  options.allow_non_divisible_tiles = true;
  options.cpu_tiling_structure = "SRSRS";
  auto sketches = search::generate_sketches(task, options);
  std::printf("%zu sketches with tiling structure %s\n", sketches.size(),
              options.cpu_tiling_structure.c_str());

  const int samples = 16;
  auto plain = loom_examples::random_search(task, sketches, options, samples, 3);
  auto custom = loom_examples::random_search(task, sketches, options, samples, 3,
                                             {innermost_vector_widths()});
  const double gflop = task.dag->flop_count() * 1e-9;
  std::printf("best of %d random programs, built-in init rules: %7.3f ms (%5.1f GFLOP/s)\n",
              plain.measured, plain.best_ms, gflop / (plain.best_ms * 1e-3));
  std::printf("best of %d random programs, + custom init rule: %7.3f ms (%5.1f GFLOP/s)\n",
              custom.measured, custom.best_ms, gflop / (custom.best_ms * 1e-3));
  // Every innermost length the sketches left open is now one or two vector widths. (A program's
  // steps begin with its sketch's; random annotation's own splits come after them.)
  std::mt19937_64 rng(5);
  const int64_t lanes = task.target.vector_lanes(4);
  bool lengths_ok = true;
  for (int i = 0; i < 50; ++i) {
    const sched::State& sketch = sketches[i % sketches.size()];
    const sched::State p =
        search::sample_program(sketch, task, options, rng, {innermost_vector_widths()});
    for (size_t k = 0; k < sketch.steps().size(); ++k)
      if (auto* sp = std::get_if<sched::SplitStep>(&p.steps()[k]); sp && sp->extent >= 2 * lanes)
        lengths_ok =
            lengths_ok && (*sp->lengths.back() == lanes || *sp->lengths.back() == 2 * lanes);
  }
  const bool ok = plain.wrong == 0 && custom.wrong == 0 && custom.best && lengths_ok;
  std::printf("%s\n", ok ? "OK: every program matched the reference interpreter"
                         : "FAILED: a wrong result or an unexpected tile length");
  return ok ? 0 : 1;
}
