// Does loom's memory stay flat when an application compiles many kernels and drops them, or when
// a tuning run goes on for thousands of trials? (Issue 35 §4; benchmarks/README.md, "Memory over
// long runs".) Prints the resident set size (VmRSS of /proc/self/status) as it goes:
//
//   memory_growth kernels N   build N distinct kernels one after another (an elementwise kernel
//                             whose shape and constant change every time, so that each is a new
//                             LLVM module), run each once, check one output, drop it
//   memory_growth tune N      tune a 128x128x128 matmul for N trials (loom::tune, the forked
//                             measurer, records in a temporary file); RSS after each round
//
// A plain program, not a Google Benchmark: the numbers are bytes, not times. Linux only.
#include <loom/cpu.hpp>
#include <loom/tune.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

using namespace loom;

/// Bytes the heap has handed out and not taken back, in MiB (glibc's mallinfo2: RSS less the
/// freed memory the allocator keeps, the code and the stacks).
double heap_in_use_mib() {
#if defined(__GLIBC__)
  return static_cast<double>(mallinfo2().uordblks) / 1048576.0;
#else
  return -1;
#endif
}

/// VmRSS of this process in MiB (-1 when /proc says nothing).
double rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  return -1;
}

int compile_and_drop(int n) {
  const double start = rss_mib();
  std::printf("kernels built and dropped, RSS MiB\n%8d %8.1f\n", 0, start);
  double after_first_tenth = 0;
  for (int i = 1; i <= n; ++i) {
    const int64_t len = 16 + i % 97;
    const float scale = 1.0f + static_cast<float>(i % 13);
    auto A = placeholder<float>("A", {len});
    auto B = compute("B", {len}, [&](Var j) { return A(j) * scale + 1.0f; });
    const Task task(std::make_shared<const ComputeDAG>(ComputeDAG({A}, {B})));
    std::vector<float> a(static_cast<size_t>(len), 2.0f), b(static_cast<size_t>(len), 0.0f);
    {
      const Kernel kernel = build(task);
      kernel(a, b);
    }
    if (b.back() != 2.0f * scale + 1.0f) {
      std::fprintf(stderr, "kernel %d computed %g, not %g\n", i, b.back(), 2.0f * scale + 1.0f);
      return 1;
    }
    if (i % (n / 10 > 0 ? n / 10 : 1) == 0) {
      const double now = rss_mib();
      if (after_first_tenth == 0) after_first_tenth = now;
      std::printf("%8d %8.1f\n", i, now);
      std::fflush(stdout);
    }
  }
  const double end = rss_mib();
  std::printf(
      "growth: %.1f MiB from the start, %.1f MiB after the first tenth (%.2f KiB per "
      "kernel)\n",
      end - start, end - after_first_tenth,
      (end - after_first_tenth) * 1024.0 / (n - n / 10 > 0 ? n - n / 10 : 1));
  return 0;
}

/// A log that samples RSS at the end of each line the tuner prints.
class RssLog final : public std::streambuf {
 public:
  struct Sample {
    std::string line;
    double rss, heap;
  };
  std::vector<Sample> samples;

 protected:
  int overflow(int c) override {
    if (c == '\n') {
      samples.push_back({line_, rss_mib(), heap_in_use_mib()});
      line_.clear();
    } else if (c != EOF) {
      line_ += static_cast<char>(c);
    }
    return c;
  }

 private:
  std::string line_;
};

int tune_long(int trials) {
  auto A = placeholder<float>("A", {128, 128});
  auto B = placeholder<float>("B", {128, 128});
  auto k = reduce_axis(128, "k");
  auto C = compute("C", {128, 128}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  const Task task(std::make_shared<const ComputeDAG>(ComputeDAG({A, B}, {C})));
  const std::string records = (std::filesystem::temp_directory_path() /
                               ("loom_memory_growth_" + std::to_string(::getpid()) + ".jsonl"))
                                  .string();
  RssLog buffer;
  std::ostream log(&buffer);
  TuneOptions o;
  o.trials = trials;
  o.records = records;
  o.log = &log;
  const double start = rss_mib(), start_heap = heap_in_use_mib();
  const TuneResult r = tune(task, o);
  std::filesystem::remove(records);
  std::printf("before tuning: RSS %.1f MiB, heap in use %.1f MiB\n", start, start_heap);
  std::printf("   RSS    heap  (MiB) after the tuner's log line\n");
  size_t shown = 0;
  for (size_t s = 0; s < buffer.samples.size(); ++s) {
    // About twenty lines: the first rounds, then evenly, and the last.
    const bool show = s < 3 || s + 1 == buffer.samples.size() ||
                      s * 20 / buffer.samples.size() != (s + 1) * 20 / buffer.samples.size();
    if (!show) continue;
    ++shown;
    const RssLog::Sample& x = buffer.samples[s];
    std::printf("%6.1f  %6.1f  %s\n", x.rss, x.heap, x.line.c_str());
  }
  std::printf(
      "after tuning: RSS %.1f MiB, heap in use %.1f MiB (%zu of %zu log lines shown); %d "
      "programs measured, best %.1f us\n",
      rss_mib(), heap_in_use_mib(), shown, buffer.samples.size(), r.report().trials,
      r.report().best_cost * 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int n = argc > 2 ? std::atoi(argv[2]) : 0;
  if ((mode != "kernels" && mode != "tune") || n <= 0) {
    std::fprintf(stderr, "usage: memory_growth kernels N | memory_growth tune N\n");
    return 2;
  }
  try {
    return mode == "kernels" ? compile_and_drop(n) : tune_long(n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_growth: %s\n", e.what());
    return 1;
  }
}
