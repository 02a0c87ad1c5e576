/// \file
/// What the "LoomTuned" contenders share: the best program the tuner recorded for a task, looked
/// up in every tuning log (*.jsonl) of one directory — LOOM_BENCH_RECORDS, default ./tuning —
/// which benchmarks/tune/tune_workloads.cpp fills. A contender builds it with loom::build and
/// skips a shape that has no record.
#ifndef LOOM_BENCH_BASELINES_LOOM_TUNED_HPP
#define LOOM_BENCH_BASELINES_LOOM_TUNED_HPP

#include <loom/tune.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace loom_bench {

inline std::string tuned_records_dir() {
  const char* v = std::getenv("LOOM_BENCH_RECORDS");
  return v ? v : "tuning";
}

/// The best recorded program of `task` and the log it came from; throws std::runtime_error (the
/// harness skips the shape with the message) when no log of the directory has one. As
/// loom::build_best does, records measured with the current thread count
/// (loom::runtime::num_threads(), so set it first) and on this CPU win over the others.
inline std::pair<loom::sched::State, std::string> tuned_program(const loom::Task& task) {
  const int threads = loom::runtime::num_threads();
  const std::string device = loom::cpu_jit::Engine::global().cpu_name();
  // Each log's best, then the best of those: best_record() decides both times, so the thread
  // preference is its own; its index names the log.
  std::vector<loom::search::TuningRecord> bests;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tuned_records_dir(), ec)) {
    if (entry.path().extension() != ".jsonl") continue;
    const auto records =
        loom::search::read_records(entry.path().string(), [](const std::string&) {});
    if (auto r = loom::search::best_record(records, task.workload_key(), task.target.to_string(),
                                           threads, device)) {
      bests.push_back(std::move(*r));
      files.push_back(entry.path().filename().string());
    }
  }
  const auto i = loom::search::best_record_index(bests, task.workload_key(),
                                                 task.target.to_string(), threads, device);
  if (!i)
    throw std::runtime_error("no tuning record of this workload in " + tuned_records_dir() +
                             " (run tune_workloads first)");
  const loom::search::TuningRecord& best = bests[*i];
  std::string label = files[*i];
  if (best.threads > 0) label += ", measured with " + std::to_string(best.threads) + " threads";
  if (!best.device.empty()) label += " on " + best.device;
  return {loom::sched::replay(task.dag, best.steps), label};
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_BASELINES_LOOM_TUNED_HPP
