// loom's GEMM in bench_gemm: C[M,N] = A[M,K] * B[K,N], row-major, scheduled by hand through
// loom's transform steps (the schedule is below, step by step), JIT-compiled through LLVM ORC.
// Registered as the contender "LoomHand" next to the baselines of bench_gemm.cpp.
#include <loom/cpu.hpp>

#include "baselines/gemm_bench.hpp"

#include <cstdlib>

namespace {

using namespace loom;
using sched::Annotation;

// Register tile: MR rows x NR columns of C kept in vector registers while k runs. NR is two
// vectors (16 floats with AVX2, 32 with AVX-512); MR = 6 leaves AVX2's 16 registers room for
// 12 accumulators, 2 B vectors and a broadcast A value. LOOM_GEMM_MR / LOOM_GEMM_NR override.
int env_or(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

sched::State hand_schedule(std::shared_ptr<const ComputeDAG> dag, const Target& target) {
  const int lanes = target.vector_lanes(4);
  const int mr = env_or("LOOM_GEMM_MR", 6), nr = env_or("LOOM_GEMM_NR", 2 * lanes);
  sched::State s(std::move(dag));
  // C.local: the MR x NR accumulator tile; C then only copies it out.
  std::string cl = s.cache_write("C", ir::MemoryScope::Local);
  s.split("C", 0, {mr});                      // C: i.0 i.1 j
  s.split("C", 2, {nr});                      // C: i.0 i.1 j.0 j.1
  s.reorder("C", {2, 0, 1, 3});               // C: j.0 i.0 i.1 j.1   (column panels outermost)
  s.compute_at(cl, "C", 1);                   // one accumulator tile per (j.0, i.0)
  s.reorder(cl, {2, 0, 1});                   // C.local: k i j       (k outside the register tile)
  s.annotate(cl, 1, Annotation::Unrolled);    // MR rows, unrolled
  s.annotate(cl, 2, Annotation::Vectorized);  // NR columns, as vectors
  // Pack B's K x NR column panel once per panel: contiguous, reused by every row tile.
  std::string bl = s.cache_read("B", ir::MemoryScope::Local, {cl});
  s.compute_at(bl, "C", 0);
  s.annotate(bl, 1, Annotation::Vectorized);
  s.annotate("C", 0, Annotation::Parallel);  // column panels over the threads
  s.annotate("C", 2, Annotation::Unrolled);
  s.annotate("C", 3, Annotation::Vectorized);
  return s;
}

struct loom_gemm {
  Kernel kernel;
  std::string label;
};

loom_bench::GemmInstance prepare(const loom_bench::GemmShape& shape, int threads, const float*,
                                 const float*) {
  const int64_t M = shape.m, N = shape.n, K = shape.k;
  auto A = placeholder<float>("A", {M, K});
  auto B = placeholder<float>("B", {K, N});
  auto k = reduce_axis(K, "k");
  auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); }, "matmul");
  Task task(ComputeDAG({A, B}, {C}));
  runtime::set_num_threads(threads);
  auto g = std::make_shared<loom_gemm>();
  g->kernel = build(task, hand_schedule(task.dag, task.target));
  g->label = "hand 6x" + std::to_string(2 * task.target.vector_lanes(4)) + " packedB";
  return {[g](const float* a, const float* b, float* c) {
            void* args[] = {const_cast<float*>(a), const_cast<float*>(b), c};
            g->kernel.run_unchecked(args);
          },
          g->label};
}

loom_bench::GemmContender make_contender() {
  loom_bench::GemmContender c;
  c.name = "LoomHand";
  c.max_threads = 2;
  c.set_threads = [](int n) { runtime::set_num_threads(n); };
  c.prepare = prepare;
  return c;
}

const bool registered = loom_bench::add_gemm_contender(make_contender());

}  // namespace
