/// \file
/// Summarizing tuning logs: `05_best_records [--jsonl] <log.jsonl>...` reads the records tuning
/// runs appended (search/records.hpp) and prints, for every workload and target, and within them
/// for every device and thread count the programs were measured with (costs of a Zen 3 and a
/// Zen 5, or of 1 and 2 threads, do not compare), how many records there are, how many failed,
/// and the best program's cost, step count and time of measurement. "Best" is the tuner's own
/// rule (search::best_record): the lowest median over each program's measurements, so a lucky
/// single measurement does not win. With --jsonl it prints each group's best record as a log
/// line instead, ready to append to a file of shipped records (benchmarks/results/cpu_best.jsonl).
/// Damaged lines are reported on stderr and skipped, as every reader of a log does.
///
/// The log holds no computation, only its workload key, so the tool cannot count FLOPs: it
/// prints costs, not GFLOP/s. To apply the best schedule, replay its steps on the task's DAG
/// (`sched::replay(task.dag, search::best_record(...)->steps)`).
#include <loom/search/records.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

using namespace loom;

namespace {

struct Summary {
  int failures = 0;
  /// The records of one (workload, target, device, threads).
  std::vector<search::TuningRecord> group;
  std::optional<search::TuningRecord> best;
};

std::string utc_time(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  char buf[32];
  if (!gmtime_r(&t, &tm) || !std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm)) return "?";
  return buf;
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  bool jsonl = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--jsonl")
      jsonl = true;
    else
      paths.push_back(argv[i]);
  }
  if (paths.empty()) {
    std::fprintf(stderr, "usage: %s [--jsonl] <log.jsonl>...\n",
                 argc > 0 ? argv[0] : "05_best_records");
    return 2;
  }
  std::vector<search::TuningRecord> records;
  for (const std::string& path : paths) {
    if (!std::filesystem::exists(path)) {
      std::fprintf(stderr, "%s: no such file\n", path.c_str());
      return 1;
    }
    try {
      auto more = search::read_records(path);
      records.insert(records.end(), std::make_move_iterator(more.begin()),
                     std::make_move_iterator(more.end()));
    } catch (const loom::error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }

  // workload, target, device, threads
  using GroupKey = std::tuple<std::string, std::string, std::string, int>;
  std::map<GroupKey, Summary> summaries;
  for (const auto& r : records) {
    Summary& s = summaries[{r.workload_key, r.target, r.device, r.threads}];
    s.failures += !r.result.ok();
    s.group.push_back(r);
  }
  // Within one group every record was measured alike, so best_record needs no preference.
  for (auto& [key, s] : summaries)
    s.best = search::best_record(s.group, std::get<0>(key), std::get<1>(key));

  if (jsonl) {
    for (const auto& [key, s] : summaries)
      if (s.best) std::printf("%s\n", search::to_json_line(*s.best).c_str());
    return 0;
  }

  std::vector<std::vector<std::string>> rows = {{"workload", "target", "device", "threads",
                                                 "records", "failed", "best (us)", "steps",
                                                 "measured (UTC)"}};
  for (const auto& [key, s] : summaries) {
    const auto& [workload, target, device, threads] = key;
    const std::optional<search::TuningRecord>& best = s.best;
    rows.push_back(
        {workload, target, device.empty() ? "?" : device,
         threads > 0 ? std::to_string(threads) : "?", std::to_string(s.group.size()),
         std::to_string(s.failures), best ? format("%.3f", best->result.mean_cost() * 1e6) : "-",
         best ? std::to_string(best->steps.size()) : "-", best ? utc_time(best->timestamp) : "-"});
  }

  // Names left-aligned, numbers right-aligned, the time last.
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::printf("%zu records in %zu log%s\n", records.size(), paths.size(),
              paths.size() == 1 ? "" : "s");
  for (const auto& row : rows) {
    for (size_t c = 0; c + 1 < row.size(); ++c)
      std::printf(c < 3 ? "%-*s  " : "%*s  ", static_cast<int>(width[c]), row[c].c_str());
    std::printf("%s\n", row.back().c_str());
  }
  return 0;
}
