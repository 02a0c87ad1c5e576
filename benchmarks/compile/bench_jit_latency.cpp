// JIT latency: how long loom takes to turn a schedule into a callable kernel (lower + LLVM O3 +
// machine code + link), for the tiled, vectorized GEMM of bench_gemm, and how much memory stays
// behind after compiling and dropping many kernels (the search compiles thousands).
#include <benchmark/benchmark.h>
#include <loom/cpu.hpp>

#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace {

using namespace loom;
using sched::Annotation;

std::shared_ptr<const ComputeDAG> gemm_dag(int64_t n) {
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  auto k = reduce_axis(n, "k");
  auto C = compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  return std::make_shared<const ComputeDAG>(ComputeDAG({A, B}, {C}));
}

sched::State tiled(std::shared_ptr<const ComputeDAG> dag, int nr) {
  sched::State s(dag);
  auto cl = s.cache_write("C", ir::MemoryScope::Local);
  s.split("C", 0, {6});
  s.split("C", 2, {nr});
  s.reorder("C", {2, 0, 1, 3});
  s.compute_at(cl, "C", 1);
  s.reorder(cl, {2, 0, 1});
  s.annotate(cl, 1, Annotation::Unrolled);
  s.annotate(cl, 2, Annotation::Vectorized);
  auto bl = s.cache_read("B", ir::MemoryScope::Local, {cl});
  s.compute_at(bl, "C", 0);
  s.annotate(bl, 1, Annotation::Vectorized);
  s.annotate("C", 0, Annotation::Parallel);
  s.annotate("C", 2, Annotation::Unrolled);
  s.annotate("C", 3, Annotation::Vectorized);
  return s;
}

double rss_mb() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

void BM_Jit_LowerAndCompileTiledGemm(benchmark::State& state) {
  Task task(gemm_dag(state.range(0)));
  sched::State s = tiled(task.dag, 2 * task.target.vector_lanes(4));
  for (auto _ : state) {
    Kernel k = build(task, s);
    benchmark::DoNotOptimize(k);
  }
  state.SetLabel("6x16 tile, packed B, parallel, O3");
}
BENCHMARK(BM_Jit_LowerAndCompileTiledGemm)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Jit_LowerOnly(benchmark::State& state) {
  Task task(gemm_dag(state.range(0)));
  sched::State s = tiled(task.dag, 2 * task.target.vector_lanes(4));
  for (auto _ : state) benchmark::DoNotOptimize(lower::lower(s));
}
BENCHMARK(BM_Jit_LowerOnly)->Arg(1024)->Unit(benchmark::kMicrosecond);

// Compile and drop 2,000 kernels; report resident memory before, after and the growth.
void BM_Jit_CompileAndDrop2000(benchmark::State& state) {
  Task task(gemm_dag(128));
  sched::State s = tiled(task.dag, 2 * task.target.vector_lanes(4));
  {
    Kernel warm = build(task, s);
  }
  double before = 0, after = 0;
  for (auto _ : state) {
    before = rss_mb();
    for (int i = 0; i < 2000; ++i) {
      Kernel k = build(task, s);
      benchmark::DoNotOptimize(k);
    }
    after = rss_mb();
  }
  state.counters["rss_before_MB"] = before;
  state.counters["rss_after_MB"] = after;
  state.counters["rss_growth_MB"] = after - before;
}
BENCHMARK(BM_Jit_CompileAndDrop2000)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
