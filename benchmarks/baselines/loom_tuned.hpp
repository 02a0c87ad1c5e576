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

namespace loom_bench {

inline std::string tuned_records_dir() {
  const char* v = std::getenv("LOOM_BENCH_RECORDS");
  return v ? v : "tuning";
}

/// The best recorded program of `task` and the log it came from; throws std::runtime_error (the
/// harness skips the shape with the message) when no log of the directory has one.
inline std::pair<loom::sched::State, std::string> tuned_program(const loom::Task& task) {
  std::optional<std::pair<loom::sched::State, std::string>> best;
  double best_cost = loom::search::kFailedCost;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tuned_records_dir(), ec)) {
    if (entry.path().extension() != ".jsonl") continue;
    const auto records =
        loom::search::read_records(entry.path().string(), [](const std::string&) {});
    auto r = loom::search::best_record(records, task.workload_key(), task.target.to_string());
    if (r && r->result.mean_cost() < best_cost) {
      best_cost = r->result.mean_cost();
      best.emplace(loom::sched::replay(task.dag, r->steps), entry.path().filename().string());
    }
  }
  if (!best)
    throw std::runtime_error("no tuning record of this workload in " + tuned_records_dir() +
                             " (run tune_workloads first)");
  return std::move(*best);
}

}  // namespace loom_bench

#endif  // LOOM_BENCH_BASELINES_LOOM_TUNED_HPP
