/// \file
/// Fixing part of a schedule by hand and letting the search fill in the rest, the way an
/// AutoTVM template author works: the template is a sketch written with loom's schedule steps,
/// where `search::define_split` leaves the tile sizes to the search, and random annotation
/// (search::sample_program) draws them and adds what the template does not say (parallel
/// loops, unrolling, vectorization of the other stages). Locations the template chose are kept.
#include "example_support.hpp"

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include <cstdio>

using namespace loom;

int main() {
  const int64_t n = 256;
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  Task task(ComputeDAG({A, B}, {ops::relu(ops::matmul(A, B, false, false, "C"))}));
  const int lanes = task.target.vector_lanes(4);

  // The template: C computed in register tiles inside relu's tiles, k outermost in the tile,
  // the column tile two vectors wide; row tile and k blocking left open.
  sched::State t(task.dag);
  const std::string out = t.stages().back().name;
  search::define_split(t, out, 0, 2);               // i -> i.0 i.1 (searched)
  search::define_split(t, out, 2, 2, {2 * lanes});  // j -> j.0 j.1 (fixed)
  t.reorder(out, {0, 2, 1, 3});
  t.compute_at("C", out, 1);
  search::define_split(t, "C", 2, 2);  // k -> k.0 k.1 (searched)
  t.reorder("C", {2, 3, 0, 1});        // k.0 k.1 i j
  t.annotate("C", 3, sched::Annotation::Vectorized);
  std::printf("the template (unset lengths print as ?):\n%s\n", t.to_string().c_str());

  const search::SearchOptions options;
  const int samples = 16;
  auto templ = loom_examples::random_search(task, {t}, options, samples, 7);
  auto full = loom_examples::random_search(task, search::generate_sketches(task, options), options,
                                           samples, 7);
  const double gflop = task.dag->flop_count() * 1e-9;
  std::printf("best of %d programs from the template:       %7.3f ms (%5.1f GFLOP/s)\n",
              templ.measured, templ.best_ms, gflop / (templ.best_ms * 1e-3));
  std::printf("best of %d programs from the built-in rules: %7.3f ms (%5.1f GFLOP/s)\n",
              full.measured, full.best_ms, gflop / (full.best_ms * 1e-3));
  std::printf("best program of the template:\n%s\n", templ.best->to_string().c_str());
  // The fixed parts survived: C stays inside the output's tiles, the column tile is fixed.
  const sched::State& best = *templ.best;
  bool kept =
      best.stage("C").location == sched::ComputeLocation::At && best.stage("C").attach_stage == out;
  if (auto* sp = std::get_if<sched::SplitStep>(&best.steps()[1]))
    kept = kept && *sp->lengths[0] == 2 * lanes;
  const bool ok = templ.wrong == 0 && full.wrong == 0 && kept;
  std::printf("%s\n", ok ? "OK: every program matched the reference interpreter"
                         : "FAILED: a wrong result or the template was not kept");
  return ok ? 0 : 1;
}
