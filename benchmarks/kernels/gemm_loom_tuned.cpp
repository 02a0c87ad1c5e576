// loom's GEMM as the tuner found it: the best program recorded for the shape in the tuning logs
// of a directory (benchmarks/tune/tune_workloads.cpp writes them), built with loom::build_best.
// Two contenders:
//   LoomTuned       - the recorded program (a PackReusedInput sketch packs B inside the kernel);
//   LoomTunedPacked - the same program with B stored once in its tile order
//                     (build_with_packed_input), like oneDNN's prepacked weights; only for
//                     programs whose loop nest admits the rewrite.
// LOOM_BENCH_RECORDS names the directory (default: ./tuning). Every *.jsonl file in it is read;
// a shape without a record there is skipped with that message.
#include <loom/tune.hpp>

#include "baselines/gemm_bench.hpp"
#include "baselines/loom_tuned.hpp"

namespace {

using namespace loom;

Task gemm_task(const loom_bench::GemmShape& shape) {
  // Built exactly as tune_workloads builds it, so that the workload keys match.
  auto a = placeholder<float>("A", {shape.m, shape.k});
  auto b = placeholder<float>("B", {shape.k, shape.n});
  return Task(ComputeDAG({a, b}, {ops::matmul(a, b)}));
}

struct tuned_gemm {
  Kernel kernel;
  std::vector<float> packed_b;
};

loom_bench::GemmInstance prepare(const loom_bench::GemmShape& shape, int threads, const float*,
                                 const float* b, bool prepack) {
  Task task = gemm_task(shape);
  runtime::set_num_threads(threads);
  auto best = loom_bench::tuned_program(task);
  auto g = std::make_shared<tuned_gemm>();
  std::string label = "tuned (" + best.second + ")";
  if (prepack) {
    PackedKernel pk;
    pk = build_with_packed_input(task, best.first, "B");  // a user_error skips the pair
    int64_t n = 1;
    for (int64_t d : pk.packed_shape) n *= d;
    g->packed_b.resize(static_cast<size_t>(n));
    pk.pack(b, g->packed_b.data());
    g->kernel = pk.kernel;
    label += ", B prepacked";
  } else {
    g->kernel = build(task, best.first);
  }
  return {[g](const float* a2, const float* b2, float* c2) {
            void* args[] = {const_cast<float*>(a2),
                            g->packed_b.empty() ? const_cast<float*>(b2) : g->packed_b.data(), c2};
            g->kernel.run_unchecked(args);
          },
          label};
}

loom_bench::GemmContender make_contender(bool prepack) {
  loom_bench::GemmContender c;
  c.name = prepack ? "LoomTunedPacked" : "LoomTuned";
  c.max_threads = 2;
  c.set_threads = [](int n) { runtime::set_num_threads(n); };
  c.prepare = [prepack](const loom_bench::GemmShape& s, int threads, const float* a,
                        const float* b) { return prepare(s, threads, a, b, prepack); };
  return c;
}

const bool registered = loom_bench::add_gemm_contender(make_contender(false)) &&
                        loom_bench::add_gemm_contender(make_contender(true));

}  // namespace
