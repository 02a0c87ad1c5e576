// The shipped records (benchmarks/results/cpu_best.jsonl: the best program of each benchmark
// workload) replay and lower to the same code as when the golden file was written: a change to
// steps, records, replay or lowering that alters a shipped program fails here. The golden file
// holds one line per record, "<line> <workload key> <hash of the lowered body>";
// LOOM_WRITE_SHIPPED_GOLDEN=<path> writes it instead of checking (after a deliberate change of
// the lowered code, with the reason in the commit).
#include <doctest/doctest.h>
#include <loom/detail/hash.hpp>
#include <loom/lower/c_source.hpp>
#include <loom/lower/lower.hpp>
#include <loom/sched/state.hpp>
#include <loom/search/records.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "tune/tune_workloads.hpp"

namespace {

const std::string kRecords = LOOM_TEST_DATA_DIR "/../benchmarks/results/cpu_best.jsonl";
const std::string kGolden = LOOM_TEST_DATA_DIR "/data/records/cpu_best.lowered.txt";

// "<line> <workload> <hash>" for every record of the file whose workload is a benchmark one.
std::string lowered_hashes() {
  std::map<std::string, loom::Task> tasks;
  for (const auto& w : loom_bench::tune_workloads()) {
    loom::Task t = w.make();
    tasks.emplace(t.workload_key(), std::move(t));
  }
  std::ifstream in(kRecords);
  REQUIRE(in.good());
  std::ostringstream out;
  std::string line;
  int line_no = 0, replayed = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const loom::search::TuningRecord r = loom::search::record_from_json_line(line);
    const auto t = tasks.find(r.workload_key);
    if (t == tasks.end()) continue;
    const loom::sched::State s = loom::sched::replay(t->second.dag, r.steps);
    std::ostringstream body;
    body << loom::lower::to_c_source(loom::lower::lower(s));
    out << line_no << ' ' << r.workload_key << ' ' << loom::detail::hash_string(body.str()) << '\n';
    ++replayed;
  }
  // Every shipped record is of a benchmark workload; a renamed or redefined workload would
  // silently drop its records from this check.
  CHECK(replayed == line_no);
  return out.str();
}

}  // namespace

TEST_CASE("the shipped records replay to the lowered code of the golden file") {
  const std::string now = lowered_hashes();
  if (const char* path = std::getenv("LOOM_WRITE_SHIPPED_GOLDEN")) {
    std::ofstream(path) << now;
    MESSAGE("wrote " << path);
    return;
  }
  std::ifstream golden(kGolden);
  REQUIRE_MESSAGE(golden.good(), "no golden file " << kGolden);
  std::stringstream want;
  want << golden.rdbuf();
  // Line by line, so a failure names the records that changed.
  std::istringstream a(now), b(want.str());
  std::string la, lb;
  while (std::getline(b, lb)) {
    REQUIRE(std::getline(a, la));
    CHECK(la == lb);
  }
  CHECK_FALSE(std::getline(a, la));
}
