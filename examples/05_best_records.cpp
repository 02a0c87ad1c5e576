/// \file
/// Summarizing a tuning log: `05_best_records <log.jsonl>` reads the records a tuning run
/// appended (search/records.hpp) and prints, for every workload and target, and within them for
/// every device and thread count the programs were measured with (costs of a Zen 3 and a Zen 5,
/// or of 1 and 2 threads, do not compare), how many programs were measured, how many failed,
/// and the best one's mean cost, step count and time of measurement. Damaged lines are reported on stderr and skipped, as every reader of a log does.
///
/// The log holds no computation, only its workload key, so the tool cannot count FLOPs: it
/// prints costs, not GFLOP/s. To apply the best schedule, replay its steps on the task's DAG
/// (`sched::replay(task.dag, search::best_record(...)->steps)`).
#include <loom/search/records.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace loom;

namespace {

struct Summary {
  int records = 0;
  int failures = 0;
  const search::TuningRecord* best = nullptr;  // the fastest correct one
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
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <log.jsonl>\n", argc > 0 ? argv[0] : "05_best_records");
    return 2;
  }
  const std::string path = argv[1];
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "%s: no such file\n", path.c_str());
    return 1;
  }
  std::vector<search::TuningRecord> records;
  try {
    records = search::read_records(path);
  } catch (const loom::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }

  // workload, target, device, threads
  using GroupKey = std::tuple<std::string, std::string, std::string, int>;
  std::map<GroupKey, Summary> summaries;
  for (const auto& r : records) {
    Summary& s = summaries[{r.workload_key, r.target, r.device, r.threads}];
    ++s.records;
    s.failures += !r.result.ok();
    if (r.result.ok() && (!s.best || r.result.mean_cost() < s.best->result.mean_cost()))
      s.best = &r;
  }

  std::vector<std::vector<std::string>> rows = {{"workload", "target", "device", "threads",
                                                 "records", "failed", "best (us)", "steps",
                                                 "measured (UTC)"}};
  for (const auto& [key, s] : summaries) {
    const auto& [workload, target, device, threads] = key;
    rows.push_back({workload, target, device.empty() ? "?" : device,
                    threads > 0 ? std::to_string(threads) : "?", std::to_string(s.records),
                    std::to_string(s.failures),
                    s.best ? format("%.3f", s.best->result.mean_cost() * 1e6) : "-",
                    s.best ? std::to_string(s.best->steps.size()) : "-",
                    s.best ? utc_time(s.best->timestamp) : "-"});
  }

  // Names left-aligned, numbers right-aligned, the time last.
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::printf("%s: %zu records\n", path.c_str(), records.size());
  for (const auto& row : rows) {
    for (size_t c = 0; c + 1 < row.size(); ++c)
      std::printf(c < 3 ? "%-*s  " : "%*s  ", static_cast<int>(width[c]), row[c].c_str());
    std::printf("%s\n", row.back().c_str());
  }
  return 0;
}
