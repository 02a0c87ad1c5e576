// loom's GEMM from its search space, without the tuner: the best of N programs sampled at random
// from the sketches of C = A * B (search/annotate.hpp), each JIT-compiled and timed once while
// the contender is prepared. Two contenders, on the same sampled programs:
//   LoomSampled       - the programs as sampled (a PackReusedInput sketch packs B per call);
//   LoomSampledPacked - the same programs with B stored once in their tile order
//                       (build_with_packed_input), like oneDNN's prepacked weights.
// LOOM_BENCH_SAMPLES sets N (default 32). This is a lower bound on what the tuner will find: it
// measures random programs, with no cost model and no evolution.
#include <loom/cpu.hpp>
#include <loom/search/annotate.hpp>

#include "baselines/gemm_bench.hpp"

#include <chrono>
#include <cstdlib>
#include <limits>

namespace {

using namespace loom;

int samples() {
  const char* v = std::getenv("LOOM_BENCH_SAMPLES");
  return v ? std::max(1, std::atoi(v)) : 32;
}

double seconds_of(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct sampled_gemm {
  Kernel kernel;
  std::vector<float> packed_b;  // empty: the kernel reads B itself
};

loom_bench::GemmInstance prepare(const loom_bench::GemmShape& shape, int threads, const float* a,
                                 const float* b, bool prepack) {
  auto A = placeholder<float>("A", {shape.m, shape.k});
  auto B = placeholder<float>("B", {shape.k, shape.n});
  auto k = reduce_axis(shape.k, "k");
  auto C = compute(
      "C", {shape.m, shape.n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); }, "matmul");
  Task task(ComputeDAG({A, B}, {C}));
  runtime::set_num_threads(threads);
  const search::SearchOptions options;
  std::mt19937_64 rng(2026);
  auto programs = search::sample_programs(search::generate_sketches(task, options), task, options,
                                          rng, samples());
  std::vector<float> c(static_cast<size_t>(shape.m * shape.n));
  auto best = std::make_shared<sampled_gemm>();
  double best_s = std::numeric_limits<double>::infinity();
  int index = 0, best_index = -1;
  for (const auto& p : programs) {
    auto g = std::make_shared<sampled_gemm>();
    if (prepack) {
      PackedKernel pk = build_with_packed_input(task, p, "B");
      int64_t n = 1;
      for (int64_t d : pk.packed_shape) n *= d;
      g->packed_b.resize(static_cast<size_t>(n));
      pk.pack(b, g->packed_b.data());
      g->kernel = pk.kernel;
    } else {
      g->kernel = build(task, p);
    }
    const float* bb = prepack ? g->packed_b.data() : b;
    void* args[] = {const_cast<float*>(a), const_cast<float*>(bb), c.data()};
    g->kernel.run_unchecked(args);  // warm-up (first-touch, caches)
    const double s = seconds_of([&] { g->kernel.run_unchecked(args); });
    if (s < best_s) {
      best_s = s;
      best = g;
      best_index = index;
    }
    ++index;
  }
  const std::string label = "best of " + std::to_string(programs.size()) + " sampled (#" +
                            std::to_string(best_index) + ")" + (prepack ? ", B prepacked" : "");
  return {[best](const float* a2, const float* b2, float* c2) {
            void* args[] = {const_cast<float*>(a2),
                            best->packed_b.empty() ? const_cast<float*>(b2) : best->packed_b.data(),
                            c2};
            best->kernel.run_unchecked(args);
          },
          label};
}

loom_bench::GemmContender make_contender(bool prepack) {
  loom_bench::GemmContender c;
  c.name = prepack ? "LoomSampledPacked" : "LoomSampled";
  c.max_threads = 2;
  c.set_threads = [](int n) { runtime::set_num_threads(n); };
  c.prepare = [prepack](const loom_bench::GemmShape& s, int threads, const float* a,
                        const float* b) { return prepare(s, threads, a, b, prepack); };
  return c;
}

const bool registered = loom_bench::add_gemm_contender(make_contender(false)) &&
                        loom_bench::add_gemm_contender(make_contender(true));

}  // namespace
