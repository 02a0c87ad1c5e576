// How good is the search space before any search? GEMM 1024^3 (fp32, row-major): distinct
// random programs are sampled from the sketches with a fixed seed (search::sample_programs, what
// Ansor's initial population is), each one is JIT-compiled, checked against a double reference
// and timed; the best, median and worst GFLOP/s are reported next to oneDNN and OpenBLAS measured
// in the same run on the same thread count (before and after the programs; the better of the
// two counts, so that a busy spell on a shared machine does not flatter loom).
//
// One benchmark per ->Args({size, programs, threads}), run once (Iterations(1)): the counters
// carry the numbers, and a table of the distribution is printed before Google Benchmark's line.
// The number of distinct programs among 10,000 samples is BM_Search_Diversity10000 in
// bench_sketch_gen.
//
// Timing. A program's first call runs in a forked child process, so that it can be stopped: bad
// random programs take seconds, and a few take minutes. A call still running after
// kCallCapSeconds is killed and the program counts as kCallCapSeconds (its GFLOP/s an upper
// bound; `capped` counts them). Only at one thread: the child of a fork has none of loom's
// worker threads, so with more the first call runs here, uncapped. A first call slower than
// kSlowCallSeconds is the program's timing (the child also checks the result). Faster programs
// are run again here: one warm-up call, then up to kMaxTimedCalls timed calls within
// kProgramBudgetSeconds, whose median counts. GFLOP/s are per wall second; the `_cpu` figures
// divide by the CPU time instead, which a busy, shared machine disturbs less at one thread.
// Needs POSIX fork().
#include <loom/cpu.hpp>
#include <loom/sched/record.hpp>
#include <loom/search/annotate.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "baselines/common.hpp"
#include "baselines/context.hpp"
#include "baselines/dnnl.hpp"
#include "baselines/openblas.hpp"

namespace {

using namespace loom;

constexpr double kCallCapSeconds = 10.0;
constexpr double kSlowCallSeconds = 0.5;
constexpr int kMaxTimedCalls = 5;
constexpr double kProgramBudgetSeconds = 1.0;
constexpr uint64_t kSeed = 42;

/// One timing: wall and process CPU seconds of a call.
struct Timing {
  double wall = 0, cpu = 0;
};

/// The median timing of `call` under the rules of the file comment (by wall time; the CPU time of
/// the same call comes with it).
Timing measure(const std::function<void()>& call) {
  auto time_once = [&] {
    const double cpu0 = loom_bench::process_cpu_seconds();
    const auto wall0 = std::chrono::steady_clock::now();
    call();
    benchmark::ClobberMemory();
    return Timing{std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(),
                  loom_bench::process_cpu_seconds() - cpu0};
  };
  const Timing warm = time_once();
  if (warm.wall > kSlowCallSeconds) return warm;
  std::vector<Timing> runs;
  double spent = 0;
  while (static_cast<int>(runs.size()) < kMaxTimedCalls &&
         (runs.empty() || spent + runs.back().wall <= kProgramBudgetSeconds)) {
    runs.push_back(time_once());
    spent += runs.back().wall;
  }
  std::sort(runs.begin(), runs.end(),
            [](const Timing& a, const Timing& b) { return a.wall < b.wall; });
  return runs[runs.size() / 2];
}

/// How a program's first call ended.
enum class FirstCall { Right, Wrong, Crashed, Capped };

/// Runs `run_and_check` (one call of the program, then the result check) in a forked child, if
/// `in_child`, and waits at most kCallCapSeconds for it; otherwise here, uncapped. `timing` gets
/// the call's wall and CPU time (the cap when it was stopped).
FirstCall first_call(const std::function<bool()>& run_and_check, bool in_child, Timing& timing) {
  std::fflush(nullptr);  // the child must not flush the parent's buffered output a second time
  const auto wall0 = std::chrono::steady_clock::now();
  const pid_t pid = in_child ? fork() : -1;
  if (pid < 0) {  // no child: run it here, uncapped
    const double cpu0 = loom_bench::process_cpu_seconds();
    const bool ok = run_and_check();
    timing = {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(),
              loom_bench::process_cpu_seconds() - cpu0};
    return ok ? FirstCall::Right : FirstCall::Wrong;
  }
  if (pid == 0) _exit(run_and_check() ? 0 : 1);
  for (;;) {
    int status = 0;
    rusage usage{};
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    if (wait4(pid, &status, WNOHANG, &usage) == pid) {
      timing = {wall, double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                          1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)};
      if (!WIFEXITED(status)) return FirstCall::Crashed;
      return WEXITSTATUS(status) == 0 ? FirstCall::Right : FirstCall::Wrong;
    }
    if (wall > kCallCapSeconds) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      timing = {kCallCapSeconds, kCallCapSeconds};
      return FirstCall::Capped;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Task gemm_task(int64_t n, int threads) {
  auto A = placeholder<float>("A", {n, n});
  auto B = placeholder<float>("B", {n, n});
  auto k = reduce_axis(n, "k");
  auto C = compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); }, "matmul");
  // The search sizes its parallel loops by the target's cores: the thread count of the run.
  Target target = Target::host();
  target.num_cores = threads;
  return Task(ComputeDAG({A, B}, {C}), target);
}

/// GFLOP/s of one program (or baseline) by wall and by CPU time.
struct Rate {
  double wall = 0, cpu = 0;
};

Rate rate_of(const Timing& t, double gflop) {
  return {t.wall > 0 ? gflop / t.wall : 0, t.cpu > 0 ? gflop / t.cpu : 0};
}

/// The value at quantile q of `v` (sorted ascending), nearest rank.
double quantile(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  return v[std::min(v.size() - 1,
                    static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

void BM_RandomPrograms_Gemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int count = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const double gflop = 2.0 * static_cast<double>(n * n * n) * 1e-9;
  runtime::set_num_threads(threads);

  loom_bench::AlignedFloats a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n)),
      ref(size_t(n * n));
  loom_bench::fill_uniform(a.data(), a.size(), 0x5eed0001u);
  loom_bench::fill_uniform(b.data(), b.size(), 0x5eed0002u);
  loom_bench::gemm_reference(a.data(), b.data(), ref.data(), n, n, n);
  const double tol = loom_bench::gemm_tolerance(n);
  auto correct = [&] { return loom_bench::check_close(c.data(), ref.data(), c.size(), tol).ok; };

  for (auto _ : state) {
    // --- the baselines, same inputs, same thread count, before and after the programs (the
    // better of the two counts, so that a busy spell on a shared machine does not flatter loom)
    Rate onednn, openblas;
    auto better = [](Rate& best, const Rate& r) {
      best.wall = std::max(best.wall, r.wall);
      best.cpu = std::max(best.cpu, r.cpu);
    };
    auto measure_baselines = [&] {
#if defined(LOOM_BENCH_HAVE_DNNL)
      {
        loom_bench::DnnlMatmul mm(n, n, n, b.data(), loom_bench::DnnlBLayout::RowMajor, threads);
        loom_bench::wait_until_quiet();
        better(onednn, rate_of(measure([&] { mm(a.data(), b.data(), c.data()); }), gflop));
        if (!correct()) state.SkipWithError("oneDNN computed a wrong result");
      }
#endif
#if defined(LOOM_BENCH_HAVE_OPENBLAS)
      loom_bench::openblas_set_threads(threads);
      loom_bench::wait_until_quiet();
      better(openblas, rate_of(measure([&] {
                                 loom_bench::gemm_openblas(a.data(), b.data(), c.data(), n, n, n);
                               }),
                               gflop));
      if (!correct()) state.SkipWithError("OpenBLAS computed a wrong result");
#endif
    };
    measure_baselines();

    // --- the random programs -------------------------------------------------------------------
    const Task task = gemm_task(n, threads);
    const search::SearchOptions options;
    const auto sketches = search::generate_sketches(task, options);
    std::mt19937_64 rng(kSeed);
    const auto programs = search::sample_programs(sketches, task, options, rng, count);
    std::vector<double> wall, cpu;
    std::vector<std::string> records;
    int wrong = 0, capped = 0;
    double compile_seconds = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const sched::State& p : programs) {
      const size_t done = wall.size() + static_cast<size_t>(wrong);  // capped ones are in wall
      if (done % 25 == 0)  // slow programs take seconds each: show that the run moves
        std::fprintf(
            stderr, "bench_random_programs: %zu of %zu programs measured, %.0f s\n", done,
            programs.size(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      const auto t0 = std::chrono::steady_clock::now();
      const Kernel k = build(task, p);
      compile_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      void* args[] = {a.data(), b.data(), c.data()};
      Timing t;
      const FirstCall first = first_call(
          [&] {
            loom_bench::fill_nan(c.data(), c.size());
            k.run_unchecked(args);
            return correct();
          },
          threads == 1, t);
      if (first == FirstCall::Wrong || first == FirstCall::Crashed) {
        ++wrong;
        std::fprintf(stderr, "%s: %s\n", first == FirstCall::Wrong ? "wrong result" : "crashed",
                     sched::to_record(p.steps()).c_str());
        continue;
      }
      if (first == FirstCall::Capped) {
        ++capped;
        std::fprintf(stderr, "stopped after %.0f s: %s\n", kCallCapSeconds,
                     sched::to_record(p.steps()).c_str());
      } else if (t.wall <= kSlowCallSeconds) {
        loom_bench::fill_nan(c.data(), c.size());
        t = measure([&] { k.run_unchecked(args); });
        if (!correct()) {  // right in the child, wrong here: a data race or uninitialized memory
          ++wrong;
          std::fprintf(stderr, "wrong result on a later call: %s\n",
                       sched::to_record(p.steps()).c_str());
          continue;
        }
      }
      const Rate r = rate_of(t, gflop);
      wall.push_back(r.wall);
      cpu.push_back(r.cpu);
      records.push_back(sched::to_record(p.steps()));
    }
    measure_baselines();
    if (wall.empty()) {
      state.SkipWithError("no program computed the right result");
      break;
    }
    const size_t best_index =
        static_cast<size_t>(std::max_element(wall.begin(), wall.end()) - wall.begin());
    std::vector<double> sorted = wall, sorted_cpu = cpu;
    std::sort(sorted.begin(), sorted.end());
    std::sort(sorted_cpu.begin(), sorted_cpu.end());
    const double best = sorted.back(), median = quantile(sorted, 0.5), worst = sorted.front();

    state.counters["programs"] = static_cast<double>(programs.size());
    state.counters["sketches"] = static_cast<double>(sketches.size());
    state.counters["wrong"] = wrong;
    state.counters["capped"] = capped;
    state.counters["best_GFLOPS"] = best;
    state.counters["median_GFLOPS"] = median;
    state.counters["worst_GFLOPS"] = worst;
    state.counters["best_GFLOPS_cpu"] = sorted_cpu.back();
    state.counters["median_GFLOPS_cpu"] = quantile(sorted_cpu, 0.5);
    state.counters["worst_GFLOPS_cpu"] = sorted_cpu.front();
    state.counters["compile_s_per_program"] =
        compile_seconds / static_cast<double>(programs.size());
    if (onednn.wall > 0) {
      state.counters["oneDNN_GFLOPS"] = onednn.wall;
      state.counters["oneDNN_GFLOPS_cpu"] = onednn.cpu;
      state.counters["best_vs_oneDNN"] = best / onednn.wall;
      state.counters["median_vs_oneDNN"] = median / onednn.wall;
      state.counters["best_vs_oneDNN_cpu"] = sorted_cpu.back() / onednn.cpu;
      state.counters["median_vs_oneDNN_cpu"] = quantile(sorted_cpu, 0.5) / onednn.cpu;
    }
    if (openblas.wall > 0) {
      state.counters["OpenBLAS_GFLOPS"] = openblas.wall;
      state.counters["OpenBLAS_GFLOPS_cpu"] = openblas.cpu;
      state.counters["best_vs_OpenBLAS"] = best / openblas.wall;
    }

    std::printf(
        "GEMM %lld^3 fp32, %d thread(s): %zu distinct random programs from %zu sketches "
        "(seed %llu), %d wrong, %d stopped after %.0f s (worst is then an upper bound), "
        "%.0f ms to lower + compile each\n",
        static_cast<long long>(n), threads, programs.size(), sketches.size(),
        static_cast<unsigned long long>(kSeed), wrong, capped, kCallCapSeconds,
        1e3 * compile_seconds / static_cast<double>(programs.size()));
    std::printf(
        "  GFLOP/s (wall)  best %.2f  p90 %.2f  p75 %.2f  median %.2f  p25 %.2f  worst %.3f\n",
        best, quantile(sorted, 0.9), quantile(sorted, 0.75), median, quantile(sorted, 0.25), worst);
    std::printf(
        "  GFLOP/s (cpu)   best %.2f  p90 %.2f  p75 %.2f  median %.2f  p25 %.2f  worst %.3f\n",
        sorted_cpu.back(), quantile(sorted_cpu, 0.9), quantile(sorted_cpu, 0.75),
        quantile(sorted_cpu, 0.5), quantile(sorted_cpu, 0.25), sorted_cpu.front());
    auto versus = [&](const char* name, const Rate& r) {
      std::printf(
          "  %-8s %.2f GFLOP/s (cpu %.2f): best program %.3fx (cpu %.3fx), median %.4fx "
          "(cpu %.4fx), worst %.5fx\n",
          name, r.wall, r.cpu, best / r.wall, sorted_cpu.back() / r.cpu, median / r.wall,
          quantile(sorted_cpu, 0.5) / r.cpu, worst / r.wall);
    };
    if (onednn.wall > 0) versus("oneDNN", onednn);
    if (openblas.wall > 0) versus("OpenBLAS", openblas);
    std::printf("  best program: %s\n", records[best_index].c_str());
    std::fflush(stdout);
    state.SetLabel(std::to_string(programs.size()) + " random programs, seed " +
                   std::to_string(kSeed));
  }
}
BENCHMARK(BM_RandomPrograms_Gemm)
    ->Args({1024, 200, 1})
    ->ArgNames({"n", "programs", "threads"})
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  loom_bench::add_library_context();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
