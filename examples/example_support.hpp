/// \file
/// What the customization examples share: random inputs, a check against loom's reference
/// interpreter, timing, and a small random search (sample, JIT-compile, check, time; keep the
/// fastest). The real tuner, with the learned cost model and evolution, is search/'s next
/// component; this is only enough to show what the customizations change.
#ifndef LOOM_EXAMPLES_SUPPORT_HPP
#define LOOM_EXAMPLES_SUPPORT_HPP

#include <loom/cpu.hpp>
#include <loom/search/annotate.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <vector>

namespace loom_examples {

/// One float buffer per kernel argument (inputs random in [-1, 1), outputs zero).
inline std::vector<std::vector<float>> make_buffers(const loom::ComputeDAG& dag, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> bufs;
  const auto n_inputs = dag.inputs().size();
  for (const auto& t : dag.arguments()) {
    int64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    bufs.emplace_back(n, 0.0f);
    if (bufs.size() <= n_inputs)
      for (float& x : bufs.back()) x = dist(gen);
  }
  return bufs;
}

inline std::vector<void*> pointers(std::vector<std::vector<float>>& bufs) {
  std::vector<void*> p;
  for (auto& b : bufs) p.push_back(b.data());
  return p;
}

/// Median wall time of `reps` calls, in milliseconds.
inline double median_ms(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct SearchResult {
  std::optional<loom::sched::State> best;
  double best_ms = 1e300;
  int measured = 0, wrong = 0;
};

/// Samples `count` distinct programs from `sketches`, JIT-compiles each, checks its output
/// against the reference interpreter (relative error 1e-4) and times it; returns the fastest
/// correct one. A wrong program is counted and reported (it would be a bug in loom).
inline SearchResult random_search(const loom::Task& task,
                                  const std::vector<loom::sched::State>& sketches,
                                  const loom::search::SearchOptions& options, int count,
                                  uint64_t seed,
                                  const std::vector<loom::search::InitRule>& init_rules = {}) {
  auto bufs = make_buffers(*task.dag, 1);
  auto expected = bufs;
  loom::evaluate(*task.dag, pointers(expected));
  std::mt19937_64 rng(seed);
  SearchResult r;
  for (const auto& program :
       loom::search::sample_programs(sketches, task, options, rng, count, init_rules)) {
    loom::Kernel k = loom::build(task, program);
    auto ptrs = pointers(bufs);
    k.run_unchecked(ptrs.data());
    ++r.measured;
    const auto& out = bufs.back();
    const auto& want = expected.back();
    double err = 0, scale = 1e-30;
    for (size_t i = 0; i < out.size(); ++i) {
      err = std::max(err, static_cast<double>(std::fabs(out[i] - want[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    }
    if (err > 1e-4 * scale) {
      ++r.wrong;
      std::printf("WRONG RESULT (max error %.3g) from\n%s\n", err, program.to_string().c_str());
      continue;
    }
    const double ms = median_ms(3, [&] { k.run_unchecked(ptrs.data()); });
    if (ms < r.best_ms) {
      r.best_ms = ms;
      r.best = program;
    }
  }
  return r;
}

}  // namespace loom_examples

#endif  // LOOM_EXAMPLES_SUPPORT_HPP
