// The shipped GPU records (benchmarks/results/h100_gpu_best.jsonl, h200_gpu_best.jsonl: the best
// program of each bench_gpu workload tuned on that device) still replay on bench_gpu's
// workloads, lower for the device's limits and compile with NVRTC: what bench_gpu times as
// LoomTuned without tuning. A change to steps, replay, lowering, the code generator or a
// workload's definition that breaks a shipped program fails here rather than on the next GPU.
#include <doctest/doctest.h>

#include <loom/backend/cuda/codegen.hpp>
#include <loom/backend/cuda/nvrtc.hpp>
#include <loom/lower/gpu.hpp>
#include <loom/search/records.hpp>

#include <fstream>
#include <map>
#include <string>

#include "gpu/gpu_workloads.hpp"

using namespace loom;

TEST_SUITE("cuda.shipped_records") {
  TEST_CASE("the shipped GPU records replay, lower and compile for sm_90") {
    std::map<std::string, Task> tasks;  // by workload key and target
    for (const loom_bench_gpu::Spec& s :
         loom_bench_gpu::workload_specs([](const std::string&) { return true; }))
      if (auto t = loom_bench_gpu::loom_task(s, loom_bench_gpu::hopper_target()))
        tasks.emplace(t->workload_key() + " " + t->target.to_string(), *t);
    for (const char* file : {"h100_gpu_best.jsonl", "h200_gpu_best.jsonl"}) {
      CAPTURE(file);
      std::ifstream in(std::string(LOOM_TEST_DATA_DIR "/../benchmarks/results/") + file);
      REQUIRE(in.good());
      std::string line, source;
      int lines = 0, replayed = 0;
      while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        ++lines;
        const search::TuningRecord r = search::record_from_json_line(line);
        const auto t = tasks.find(r.workload_key + " " + r.target);
        // Every shipped record is of a bench_gpu workload: a redefined workload would
        // silently drop its records from bench_gpu's LoomTuned.
        CHECK_MESSAGE(t != tasks.end(), r.workload_key << " on " << r.target);
        if (t == tasks.end()) continue;
        const sched::State s = sched::replay(t->second.dag, r.steps);
        source += cuda::to_cuda_source(
            lower::lower_gpu(s, t->second.target, "r" + std::to_string(replayed++)));
      }
      CHECK(replayed == lines);
      CHECK(replayed > 0);
      // One compilation for the file's kernels (each has a name of its own).
      const std::string ptx = cuda::compile_to_ptx(source, "sm_90", {});
      CHECK(ptx.find(".entry") != std::string::npos);
    }
  }
}
