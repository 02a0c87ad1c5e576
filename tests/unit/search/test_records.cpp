// Tuning records (loom/search/records.hpp): the JSON-lines round trip of real sampled programs
// and of failed measurements, the reader's tolerance of torn and corrupt lines, the best-record
// queries, and the append's guarantees under concurrent writers and a writer killed mid-append.
#include <loom/ops.hpp>
#include <loom/sched/record.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/records.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>
#include "support/search_target.hpp"

using namespace loom;
namespace fs = std::filesystem;

namespace {

using loom_test::test_target;

// A fresh directory for one test case, removed with everything in it at the end.
struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "loom_records_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

struct sampled_task {
  std::shared_ptr<const ComputeDAG> dag;
  Task task;
  std::vector<sched::State> programs;
};

// Programs drawn the way the tuner draws them, so the records hold every step kind that the
// search really emits.
sampled_task sample(std::vector<ir::Tensor> inputs, std::vector<ir::Tensor> outputs, uint64_t seed,
                    int count) {
  auto dag = std::make_shared<const ComputeDAG>(std::move(inputs), std::move(outputs));
  Task task(dag, test_target());
  const search::SearchOptions options;
  auto sketches = search::generate_sketches(task, options);
  std::mt19937_64 rng(seed);
  auto programs = search::sample_programs(sketches, task, options, rng, count);
  return {dag, task, std::move(programs)};
}

const sampled_task& matmul_bias_relu_programs() {
  static const sampled_task t = [] {
    // The bias add is inlined (CI), the relu fused into the matmul's tiles.
    auto a = placeholder<float>("A", {24, 20});
    auto b = placeholder<float>("B", {20, 32});
    auto bias = placeholder<float>("bias", {32});
    return sample({a, b, bias}, {ops::relu(ops::bias_add(ops::matmul(a, b), bias, 1))}, 11, 40);
  }();
  return t;
}

const sampled_task& softmax_programs() {
  static const sampled_task t = [] {
    auto x = placeholder<float>("X", {3, 37});
    return sample({x}, {ops::softmax(x)}, 12, 20);
  }();
  return t;
}

// A matrix-vector product: little spatial parallelism, so the rfactor sketches apply.
const sampled_task& matvec_programs() {
  static const sampled_task t = [] {
    auto a = placeholder<float>("A", {2, 70});
    auto b = placeholder<float>("B", {70, 1});
    return sample({a, b}, {ops::matmul(a, b)}, 13, 10);
  }();
  return t;
}

search::MeasureResult ok_result(std::vector<double> costs) {
  search::MeasureResult m;
  m.costs = std::move(costs);
  m.compile_seconds = 0.125;
  m.run_seconds = 0.0625;
  return m;
}

search::MeasureResult failed_result(search::MeasureError e, std::string message) {
  search::MeasureResult m;
  m.error = e;
  m.error_message = std::move(message);
  m.compile_seconds = 1.5;
  m.run_seconds = 0.25;
  return m;
}

search::TuningRecord record(const std::string& workload, const std::string& target,
                            search::MeasureResult result, std::vector<sched::Step> steps = {},
                            double timestamp = 1718000000.25) {
  search::TuningRecord r;
  r.workload_key = workload;
  r.target = target;
  r.steps = std::move(steps);
  r.result = std::move(result);
  r.timestamp = timestamp;
  return r;
}

void check_same(const search::TuningRecord& a, const search::TuningRecord& b) {
  CHECK(a.workload_key == b.workload_key);
  CHECK(a.target == b.target);
  CHECK(sched::to_record(a.steps) == sched::to_record(b.steps));
  CHECK(a.result.costs == b.result.costs);  // exact: doubles are written to round-trip
  CHECK(a.result.error == b.result.error);
  CHECK(a.result.error_message == b.result.error_message);
  CHECK(a.result.compile_seconds == b.result.compile_seconds);
  CHECK(a.result.run_seconds == b.result.run_seconds);
  CHECK(a.timestamp == b.timestamp);
  CHECK(a.origins == b.origins);
  CHECK(b.version == search::kRecordsVersion);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

struct collected_warnings {
  std::vector<std::string> list;
  search::RecordWarningFn fn() {
    return [this](const std::string& w) { list.push_back(w); };
  }
};

// The records a writer process appends: its id in the workload key, its sequence number in the
// timestamp, and a real program's steps so that lines are a few hundred bytes to kilobytes.
search::TuningRecord writer_record(int writer, int seq) {
  const auto& programs = matmul_bias_relu_programs().programs;
  return record("writer-" + std::to_string(writer), "llvm -mcpu=test",
                ok_result({1e-6 * (seq + 1)}), programs[seq % programs.size()].steps(), seq);
}

// Runs `body` in a forked child that exits 0 when it returns and 1 when it throws; returns the
// child's pid. The child must not touch doctest.
template <class F>
pid_t fork_child(F body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 0;
    try {
      body();
    } catch (...) {
      rc = 1;
    }
    ::_exit(rc);
  }
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_SUITE("search") {
  TEST_CASE("records of sampled programs round-trip through a log and replay to the same state") {
    temp_dir dir;
    const std::string log = dir.file("tune.jsonl");
    std::vector<search::TuningRecord> written;
    std::vector<const sampled_task*> owner;
    std::vector<const sched::State*> program_of;
    std::set<std::string> kinds;
    for (const sampled_task* t :
         {&matmul_bias_relu_programs(), &softmax_programs(), &matvec_programs()}) {
      REQUIRE(t->programs.size() >= 5);
      for (size_t i = 0; i < t->programs.size(); ++i) {
        const sched::State& p = t->programs[i];
        for (const sched::Step& s : p.steps()) kinds.insert(sched::step_tag(s));
        // Costs that need all 17 digits to read back exactly.
        search::TuningRecord r = search::make_tuning_record(
            t->task, p, ok_result({1.0 / (3 + i), 2.0 / (7 + i), 1e-7 * std::sqrt(2.0 + i)}));
        CHECK(r.workload_key == t->dag->workload_key());
        CHECK(r.target == test_target().to_string());
        CHECK(r.origins.known());
        CHECK(r.origins == p.origins());
        written.push_back(r);
        owner.push_back(t);
        program_of.push_back(&p);
      }
    }
    MESSAGE("step kinds in the sampled programs: " << [&] {
      std::string s;
      for (auto& k : kinds) s += k + " ";
      return s;
    }());
    // The sampled programs exercise the step kinds the CPU search emits; if sampling stops
    // producing one of them, this test no longer covers its record.
    for (const char* k : {"SP", "FSP", "FU", "RE", "AN", "CA", "CI", "CHW", "CHR", "PR", "RF"})
      CHECK_MESSAGE(kinds.count(k) == 1, "no sampled program has a " << std::string(k) << " step");

    // Written in batches of different sizes, as a tuning run appends one batch per round.
    for (size_t begin = 0, batch = 1; begin < written.size(); begin += batch, batch = batch * 2 + 1)
      search::append_records(log, std::vector<search::TuningRecord>(
                                      written.begin() + begin,
                                      written.begin() + std::min(written.size(), begin + batch)));
    const auto file_lines = lines_of(slurp(log));
    REQUIRE(file_lines.size() == written.size());
    for (const auto& l : file_lines) {
      CHECK(l.rfind("{\"version\":\"loom-records/1\",\"workload\":", 0) == 0);
      CHECK(l.find('\n') == std::string::npos);
    }

    collected_warnings warnings;
    const auto read = search::read_records(log, warnings.fn());
    CHECK(warnings.list.empty());
    REQUIRE(read.size() == written.size());
    for (size_t i = 0; i < read.size(); ++i) {
      check_same(written[i], read[i]);
      // The record is enough to rebuild the program.
      CHECK(sched::replay(owner[i]->dag, read[i].steps).to_string() == program_of[i]->to_string());
    }
  }

  TEST_CASE("every program replays from its line alone") {
    const sampled_task& t = matmul_bias_relu_programs();
    for (const sched::State& p : t.programs) {
      const std::string line =
          search::to_json_line(search::make_tuning_record(t.task, p, ok_result({1e-3})));
      CHECK(sched::replay(t.dag, search::record_from_json_line(line).steps).to_string() ==
            p.to_string());
    }
  }

  TEST_CASE("a record carries where its history's parts begin; a line without them reads") {
    const sampled_task& t = matmul_bias_relu_programs();
    const sched::State& p = t.programs[0];
    const std::string line =
        search::to_json_line(search::make_tuning_record(t.task, p, ok_result({1e-3})));
    const sched::StepOrigins o = p.origins();
    const std::string field = ",\"origins\":[" + std::to_string(o.location_begin) + "," +
                              std::to_string(o.annotate_begin) + "]";
    REQUIRE(line.find(field) != std::string::npos);
    CHECK(search::record_from_json_line(line).origins == o);
    // As in logs written before records carried them.
    std::string old = line;
    old.erase(old.find(field), field.size());
    CHECK(!search::record_from_json_line(old).origins.known());
    const std::string n = std::to_string(p.steps().size());
    for (const std::string& bad :
         {std::string("[3,1]"), "[0," + n + "1]", std::string("[1]"), std::string("[-1,2]")}) {
      std::string line_bad = old;
      line_bad.insert(line_bad.size() - 1, ",\"origins\":" + bad);
      CHECK_THROWS_WITH_AS(search::record_from_json_line(line_bad),
                           doctest::Contains("[loom.search.E824]"), user_error);
    }
    old.insert(old.size() - 1, ",\"origins\":\"x\"");
    CHECK_THROWS_WITH_AS(search::record_from_json_line(old),
                         doctest::Contains("[loom.search.E821] field 'origins'"), user_error);
  }

  TEST_CASE("failed measurements keep their error, message and times") {
    temp_dir dir;
    const std::string log = dir.file("failed.jsonl");
    const std::vector<search::MeasureError> errors = {
        search::MeasureError::instantiation,   search::MeasureError::compile,
        search::MeasureError::runtime,         search::MeasureError::wrong_answer,
        search::MeasureError::compile_timeout, search::MeasureError::run_timeout,
        search::MeasureError::unknown};
    std::vector<search::TuningRecord> written;
    for (auto e : errors)
      written.push_back(record("wk-f", "llvm -mcpu=test",
                               failed_result(e, std::string("line 1 \"quoted\"\n\tline 2 ") +
                                                    search::measure_error_name(e) + " µs")));
    // A wrong answer that was timed before it was checked still carries its costs.
    written.push_back(record(
        "wk-f", "llvm -mcpu=test",
        [] {
          auto m = failed_result(search::MeasureError::wrong_answer, "max diff 3");
          m.costs = {1e-9};
          return m;
        }(),
        matmul_bias_relu_programs().programs[0].steps()));
    search::append_records(log, written);
    CHECK(lines_of(slurp(log)).size() == written.size());  // newlines in messages are escaped

    collected_warnings warnings;
    const auto read = search::read_records(log, warnings.fn());
    CHECK(warnings.list.empty());
    REQUIRE(read.size() == written.size());
    for (size_t i = 0; i < read.size(); ++i) {
      check_same(written[i], read[i]);
      CHECK_FALSE(read[i].result.ok());
      CHECK(read[i].result.mean_cost() == search::kFailedCost);
    }
    const std::string line = search::to_json_line(written[2]);
    CHECK(line.find("\"error\":4,\"error_name\":\"runtime\"") != std::string::npos);

    // Bytes that are not UTF-8 (a compiler's message can hold anything) still give valid JSON.
    auto bad = record("wk-f", "llvm -mcpu=test",
                      failed_result(search::MeasureError::compile, "bad \xff\xfe bytes"));
    const auto back = search::record_from_json_line(search::to_json_line(bad));
    CHECK(back.result.error_message == "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
  }

  TEST_CASE("a record with a non-finite number is refused before the file is touched") {
    temp_dir dir;
    const std::string log = dir.file("nan.jsonl");
    auto good = record("wk", "t", ok_result({1e-3}));
    auto nan = record("wk", "t", ok_result({1e-3, std::nan("")}));
    CHECK_THROWS_WITH_AS(search::to_json_line(nan),
                         doctest::Contains("[loom.search.E825] cannot write a tuning record whose "
                                           "cost is nan"),
                         user_error);
    CHECK_THROWS_AS(search::append_records(log, {good, nan}), user_error);
    CHECK_FALSE(fs::exists(log));
  }

  TEST_CASE("a torn last line is skipped with one warning and the next append starts afresh") {
    temp_dir dir;
    const std::string log = dir.file("torn.jsonl");
    const auto& programs = matmul_bias_relu_programs().programs;
    std::vector<search::TuningRecord> written;
    for (int i = 0; i < 5; ++i)
      written.push_back(record("wk-t", "t", ok_result({1e-3 * (i + 1)}), programs[i].steps(), i));
    search::append_records(log, written);
    const std::string text = slurp(log);
    const size_t last_line_begin = text.rfind('\n', text.size() - 2) + 1;
    // Cut in the middle of the last line, as a writer killed mid-write leaves it.
    fs::resize_file(log, last_line_begin + (text.size() - last_line_begin) / 2);

    collected_warnings warnings;
    auto read = search::read_records(log, warnings.fn());
    REQUIRE(read.size() == 4);
    for (int i = 0; i < 4; ++i) check_same(written[i], read[i]);
    REQUIRE(warnings.list.size() == 1);
    CHECK(warnings.list[0].rfind(log + ":5: [loom.search.E820] not a JSON object", 0) == 0);
    CHECK(warnings.list[0].find("the last line has no newline") != std::string::npos);

    // The next append must not glue its first record to the torn line.
    search::append_records(log, {written[4]});
    warnings.list.clear();
    read = search::read_records(log, warnings.fn());
    REQUIRE(read.size() == 5);
    check_same(written[4], read[4]);
    REQUIRE(warnings.list.size() == 1);
    CHECK(warnings.list[0].rfind(log + ":5: [loom.search.E820]", 0) == 0);
    CHECK(warnings.list[0].find("no newline") == std::string::npos);
  }

  TEST_CASE("corrupt lines are skipped one by one, each with a warning saying what is wrong") {
    temp_dir dir;
    const std::string log = dir.file("corrupt.jsonl");
    const auto& programs = matmul_bias_relu_programs().programs;
    const auto good = [&](int i) {
      return search::to_json_line(
          record("wk-c", "t", ok_result({1e-3 * (i + 1)}), programs[i].steps(), i));
    };
    const std::string g = good(0);
    auto replace = [&](std::string s, const std::string& from, const std::string& to) {
      const size_t at = s.find(from);
      REQUIRE(at != std::string::npos);
      return s.replace(at, from.size(), to);
    };
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"garbage {", "[loom.search.E820] not a JSON object: "},
        {"[1, 2, 3]", "[loom.search.E820] not a JSON object but array"},
        {replace(g, "loom-records/1", "loom-records/2"),
         "[loom.search.E822] the record is of format version 'loom-records/2'; this loom reads "
         "'loom-records/1' only"},
        {replace(g, "\"costs\":", "\"kosts\":"),
         "[loom.search.E821] the tuning record has no field 'costs'"},
        {replace(g, "\"target\":\"t\"", "\"target\":7"),
         "[loom.search.E821] field 'target' of the tuning record is integer, not a string"},
        {replace(g, "\"steps\":[[\"", "\"steps\":[[\"XX"),
         "[loom.search.E823] field 'steps' is not a step history: [loom.sched.E250]"},
        {replace(g, "\"error\":0,", "\"error\":3,"),
         "[loom.search.E824] field 'error' of the tuning record is 3, not a MeasureError number"},
        {replace(g, "\"error_name\":\"none\"", "\"error_name\":\"compile\""),
         "[loom.search.E824] field 'error_name' of the tuning record is 'compile' but error 0 is "
         "'none'"},
        {replace(g, "\"costs\":[", "\"costs\":[-1,"),
         "[loom.search.E824] field 'costs' of the tuning record holds -1, not a time in seconds"},
    };
    for (auto& [line, message] : bad)
      CHECK_THROWS_WITH_AS(search::record_from_json_line(line), doctest::Contains(message.c_str()),
                           user_error);

    // good, then each bad line, with comments and blank lines in between that are not warned
    // about; line numbers count every line of the file.
    std::string text = "# a log written by hand\n" + good(1) + "\n\n";
    std::vector<int> bad_line_numbers;
    int line_no = 3;
    for (size_t i = 0; i < bad.size(); ++i) {
      text += bad[i].first + "\n";
      bad_line_numbers.push_back(++line_no);
      text += (i % 2 ? "   \n" : good(2 + static_cast<int>(i)) + "\r\n");
      ++line_no;
    }
    write_file(log, text);
    collected_warnings warnings;
    const auto read = search::read_records(log, warnings.fn());
    CHECK(read.size() == 1 + (bad.size() + 1) / 2);
    REQUIRE(warnings.list.size() == bad.size());
    for (size_t i = 0; i < bad.size(); ++i) {
      const std::string prefix = log + ":" + std::to_string(bad_line_numbers[i]) + ": ";
      CHECK(warnings.list[i].rfind(prefix, 0) == 0);
      CHECK_MESSAGE(warnings.list[i].find(bad[i].second) == prefix.size(), warnings.list[i]);
    }
  }

  TEST_CASE("a missing log is empty; an unusable path is an error naming it") {
    temp_dir dir;
    collected_warnings warnings;
    CHECK(search::read_records(dir.file("none.jsonl"), warnings.fn()).empty());
    CHECK(warnings.list.empty());
    CHECK_FALSE(fs::exists(dir.file("none.jsonl")));

    const std::string in_missing_dir = dir.file("no/such/dir.jsonl");
    CHECK_THROWS_WITH_AS(
        search::append_records(in_missing_dir, {record("wk", "t", ok_result({1}))}),
        doctest::Contains(("[loom.search.E826] cannot open the tuning log '" + in_missing_dir +
                           "' for appending: No such file")
                              .c_str()),
        user_error);
    CHECK_THROWS_WITH_AS(search::read_records(dir.path.string()),
                         doctest::Contains(("[loom.search.E827] cannot read the tuning log '" +
                                            dir.path.string() + "': Is a directory")
                                               .c_str()),
                         user_error);
    search::append_records(dir.file("empty.jsonl"), {});
    CHECK_FALSE(fs::exists(dir.file("empty.jsonl")));
  }

  TEST_CASE("best_record picks the lowest mean cost among successes of its workload and target") {
    const auto& programs = matmul_bias_relu_programs().programs;
    const auto steps = [&](int i) { return programs[i].steps(); };
    auto wrong = failed_result(search::MeasureError::wrong_answer, "differs");
    wrong.costs = {1e-9};  // fast, but wrong: must never win
    const std::vector<search::TuningRecord> records = {
        record("wk-a", "t1", ok_result({3e-3, 3e-3}), steps(0), 1),
        record("wk-a", "t1", ok_result({1e-3, 2e-3}), steps(1), 2),  // mean 1.5e-3: the best
        record("wk-a", "t1", wrong, steps(2), 3),
        record("wk-a", "t1", failed_result(search::MeasureError::run_timeout, "10 s"), steps(3), 4),
        record("wk-a", "t1", ok_result({2e-3, 1.5e-3}), steps(4), 5),
        record("wk-a", "t1", ok_result({1.5e-3}), steps(5), 6),  // ties with the best, later
        record("wk-a", "t2", ok_result({1e-4}), steps(6), 7),
        record("wk-b", "t1", ok_result({1e-5}), steps(7), 8),
        record("wk-c", "t1", failed_result(search::MeasureError::compile, "no"), steps(8), 9),
    };
    auto best = search::best_record(records, "wk-a", "t1");
    REQUIRE(best.has_value());
    CHECK(best->timestamp == 2);
    CHECK(best->result.mean_cost() == doctest::Approx(1.5e-3));
    CHECK(search::best_record(records, "wk-a", "t2")->timestamp == 7);
    CHECK_FALSE(search::best_record(records, "wk-c", "t1").has_value());
    CHECK_FALSE(search::best_record(records, "wk-a", "t3").has_value());
    CHECK_FALSE(search::best_record({}, "wk-a", "t1").has_value());

    const auto by = search::best_records_by_workload(records);
    REQUIRE(by.size() == 3);  // wk-c has only a failure
    CHECK(by.at({"wk-a", "t1"}).timestamp == 2);
    CHECK(by.at({"wk-a", "t2"}).timestamp == 7);
    CHECK(by.at({"wk-b", "t1"}).timestamp == 8);

    // Failures count as measured: measuring them again would fail again.
    const auto measured = search::measured_programs(records, "wk-a", "t1");
    std::set<std::string> expected;
    for (int i = 0; i < 6; ++i) expected.insert(sched::to_record(steps(i)));
    CHECK(measured == expected);
    CHECK(search::measured_programs(records, "wk-a", "t2") ==
          std::set<std::string>{sched::to_record(steps(6))});
    CHECK(search::measured_programs(records, "wk-z", "t1").empty());
  }

  TEST_CASE("a program measured several times competes with the median of its measurements") {
    CHECK(search::median_cost({}) == search::kFailedCost);
    CHECK(search::median_cost({3e-3}) == 3e-3);
    CHECK(search::median_cost({1e-3, 5e-3}) == 5e-3);  // the upper of an even count
    CHECK(search::median_cost({4e-3, 1e-3, 3e-3}) == 3e-3);
    CHECK(search::median_cost({1e-3, search::kFailedCost, search::kFailedCost}) ==
          search::kFailedCost);

    const auto& programs = matmul_bias_relu_programs().programs;
    auto measured = [&](int i, const search::MeasureResult& result, double timestamp) {
      return record("wk-a", "t1", result, programs[i].steps(), timestamp);
    };
    const auto timeout = failed_result(search::MeasureError::run_timeout, "10 s");
    std::vector<search::TuningRecord> records = {
        measured(0, ok_result({1.0e-3}), 1),  // measured once
        measured(1, ok_result({0.8e-3}), 2),  // lucky the first time...
        measured(2, ok_result({0.5e-3}), 3),  // fast, but fails two times of three
        measured(1, ok_result({1.3e-3}), 4),  // ...slower the next three
        measured(2, timeout, 5),
        measured(1, ok_result({1.2e-3}), 6),
        measured(2, timeout, 7),
        measured(1, ok_result({1.25e-3}), 8),
    };
    // Program 1: 0.8, 1.3, 1.2, 1.25 → median 1.25e-3 (its record at 8); program 2: a failure.
    auto best = search::best_record(records, "wk-a", "t1");
    REQUIRE(best.has_value());
    CHECK(best->timestamp == 1);
    CHECK(search::best_record_index(records, "wk-a", "t1") == 0u);
    CHECK(search::best_records_by_workload(records).at({"wk-a", "t1"}).timestamp == 1);

    // Program 0 measured again, slower: now program 1's median wins, through the record that
    // holds it.
    records.push_back(measured(0, ok_result({1.4e-3}), 9));
    best = search::best_record(records, "wk-a", "t1");
    REQUIRE(best.has_value());
    CHECK(best->timestamp == 8);
    CHECK(best->result.mean_cost() == 1.25e-3);

    // A measurement with another thread count is another program's: mixed into program 0's,
    // the median of 1.0, 1.4 and 0.9 would be 1.0 and its record at 1 would win.
    search::TuningRecord two_threads = measured(0, ok_result({0.9e-3}), 10);
    two_threads.threads = 2;
    records.push_back(two_threads);
    CHECK(search::best_record(records, "wk-a", "t1")->timestamp == 10);
  }

  TEST_CASE("records keep the thread count they were measured with; best_record prefers it") {
    const auto& programs = matmul_bias_relu_programs().programs;
    auto with_threads = [&](int i, double cost, int threads) {
      auto r = record("wk-a", "t1", ok_result({cost}), programs[i].steps(), i);
      r.threads = threads;
      return r;
    };
    const std::vector<search::TuningRecord> records = {
        with_threads(0, 1e-3, 2),                            // the fastest, measured with 2 threads
        with_threads(1, 3e-3, 1), with_threads(2, 2e-3, 1),  // the fastest of 1 thread
        with_threads(3, 5e-4, 0),  // fastest of all, thread count unknown (older log)
    };
    CHECK(search::best_record(records, "wk-a", "t1")->timestamp == 3);     // any count
    CHECK(search::best_record(records, "wk-a", "t1", 1)->timestamp == 2);  // 1 thread wins
    CHECK(search::best_record(records, "wk-a", "t1", 2)->timestamp == 0);
    CHECK(search::best_record(records, "wk-a", "t1", 4)->timestamp == 3);  // none of 4: all
    CHECK(search::best_record_index(records, "wk-a", "t1", 1) == 2u);
    CHECK(search::best_record_index(records, "wk-a", "t1") == 3u);
    CHECK_FALSE(search::best_record_index(records, "wk-b", "t1").has_value());

    // The count round-trips as the optional field "threads", absent when unknown.
    for (const auto& r : records) {
      const std::string line = search::to_json_line(r);
      CHECK((line.find("\"threads\"") != std::string::npos) == (r.threads > 0));
      CHECK(search::record_from_json_line(line).threads == r.threads);
    }
    std::string bad = search::to_json_line(records[0]);
    bad.replace(bad.find("\"threads\":2"), 11, "\"threads\":0");
    CHECK_THROWS_WITH_AS(search::record_from_json_line(bad), doctest::Contains("loom.search.E824"),
                         user_error);
    bad.replace(bad.find("\"threads\":0"), 11, "\"threads\":\"two\"");
    CHECK_THROWS_WITH_AS(search::record_from_json_line(bad), doctest::Contains("loom.search.E821"),
                         user_error);
  }

  TEST_CASE(
      "records keep the device they were measured on; best_record prefers it, then the "
      "thread count") {
    const auto& programs = matmul_bias_relu_programs().programs;
    auto made = [&](int i, double cost, int threads, const std::string& device) {
      auto r = record("wk-a", "t1", ok_result({cost}), programs[i].steps(), i);
      r.threads = threads;
      r.device = device;
      return r;
    };
    const std::vector<search::TuningRecord> records = {
        made(0, 1e-4, 2, "znver3"),                              // the fastest, on another CPU
        made(1, 3e-3, 1, "znver5"), made(2, 2e-3, 2, "znver5"),  // the fastest of znver5
        made(3, 5e-4, 1, ""),                                    // device unknown (older log)
    };
    CHECK(search::best_record(records, "wk-a", "t1")->timestamp == 0);  // no preference
    CHECK(search::best_record(records, "wk-a", "t1", 0, "znver5")->timestamp == 2);
    CHECK(search::best_record(records, "wk-a", "t1", 1, "znver5")->timestamp == 1);
    CHECK(search::best_record(records, "wk-a", "t1", 2, "znver5")->timestamp == 2);
    // A device with no record of its own: unknown devices come before other known ones.
    CHECK(search::best_record(records, "wk-a", "t1", 0, "skylake")->timestamp == 3);
    CHECK(search::best_record(records, "wk-a", "t1", 2, "skylake")->timestamp == 3);
    CHECK(search::best_record(records, "wk-a", "t1", 2, "znver3")->timestamp == 0);
    CHECK(search::best_record_index(records, "wk-a", "t1", 1, "znver3") == 0u);
    // Without the unknown record, another device's records are still used.
    const std::vector<search::TuningRecord> known(records.begin(), records.begin() + 3);
    CHECK(search::best_record(known, "wk-a", "t1", 0, "skylake")->timestamp == 0);
    CHECK(search::best_record(known, "wk-a", "t1", 1, "skylake")->timestamp == 1);

    // The device round-trips as the optional field "device", absent when unknown.
    for (const auto& r : records) {
      const std::string line = search::to_json_line(r);
      CHECK((line.find("\"device\"") != std::string::npos) == !r.device.empty());
      CHECK(search::record_from_json_line(line).device == r.device);
    }
    std::string bad = search::to_json_line(records[0]);
    bad.replace(bad.find("\"device\":\"znver3\""), 17, "\"device\":\"\"");
    CHECK_THROWS_WITH_AS(search::record_from_json_line(bad), doctest::Contains("loom.search.E824"),
                         user_error);
    bad.replace(bad.find("\"device\":\"\""), 11, "\"device\":5");
    CHECK_THROWS_WITH_AS(search::record_from_json_line(bad), doctest::Contains("loom.search.E821"),
                         user_error);
  }

  TEST_CASE(
      "records measured with cold constants never compete with warm ones; best_record "
      "prefers them after the device and the thread count") {
    const auto& programs = matmul_bias_relu_programs().programs;
    auto made = [&](int i, double cost, int threads, bool cold) {
      auto r = record("wk-a", "t1", ok_result({cost}), programs[i].steps(), i);
      r.threads = threads;
      r.cold_constants = cold;
      return r;
    };
    const std::vector<search::TuningRecord> records = {
        made(0, 1e-4, 2, false),                         // the fastest, weights warm
        made(1, 3e-4, 2, true),                          // the fastest of the cold ones
        made(2, 5e-4, 2, true), made(3, 2e-4, 1, true),  // one thread
    };
    CHECK(search::best_record(records, "wk-a", "t1")->timestamp == 3);
    CHECK(search::best_record(records, "wk-a", "t1", 2)->timestamp == 1);
    CHECK(search::best_record(records, "wk-a", "t1", 1)->timestamp == 3);
    // The thread count comes first: a warm record of the caller's count beats cold ones of another.
    const std::vector<search::TuningRecord> warm_two(records.begin(), records.begin() + 1);
    std::vector<search::TuningRecord> mixed = warm_two;
    mixed.push_back(records[3]);
    CHECK(search::best_record(mixed, "wk-a", "t1", 2)->timestamp == 0);

    // Round-trips as the optional field "cold_constants", absent when false.
    for (const auto& r : records) {
      const std::string line = search::to_json_line(r);
      CHECK((line.find("\"cold_constants\"") != std::string::npos) == r.cold_constants);
      CHECK(search::record_from_json_line(line).cold_constants == r.cold_constants);
    }
    std::string bad = search::to_json_line(records[1]);
    bad.replace(bad.find("\"cold_constants\":true"), 21, "\"cold_constants\":1");
    CHECK_THROWS_WITH_AS(search::record_from_json_line(bad), doctest::Contains("cold_constants"),
                         user_error);
  }

  TEST_CASE("two processes appending to one log at once never interleave lines") {
    temp_dir dir;
    const std::string log = dir.file("shared.jsonl");
    (void)matmul_bias_relu_programs();  // sample before forking, so both children start writing at
                                        // once
    constexpr int kPerWriter = 300;
    std::vector<pid_t> children;
    for (int w = 0; w < 2; ++w)
      children.push_back(fork_child([&, w] {
        std::mt19937_64 rng(100 + w);
        for (int seq = 0; seq < kPerWriter;) {
          const int batch = std::min<int>(kPerWriter - seq, 1 + static_cast<int>(rng() % 23));
          std::vector<search::TuningRecord> records;
          for (int i = 0; i < batch; ++i) records.push_back(writer_record(w, seq + i));
          search::append_records(log, records);
          seq += batch;
        }
      }));
    for (pid_t pid : children) CHECK(wait_exit_code(pid) == 0);

    collected_warnings warnings;
    const auto read = search::read_records(log, warnings.fn());
    CHECK(warnings.list.empty());
    CHECK(lines_of(slurp(log)).size() == 2 * kPerWriter);
    REQUIRE(read.size() == 2 * kPerWriter);
    // Each writer's records arrive whole and in its own order.
    std::map<std::string, std::vector<double>> seqs;
    for (const auto& r : read) seqs[r.workload_key].push_back(r.timestamp);
    REQUIRE(seqs.size() == 2);
    for (auto& [writer, s] : seqs) {
      REQUIRE(s.size() == kPerWriter);
      for (int i = 0; i < kPerWriter; ++i) CHECK(s[i] == i);
    }
    // Not only the count: the steps came through intact.
    for (size_t i = 0; i < read.size(); i += 37) {
      const int w = read[i].workload_key == "writer-0" ? 0 : 1;
      check_same(writer_record(w, static_cast<int>(read[i].timestamp)), read[i]);
    }
  }

  TEST_CASE("a writer killed while appending leaves only its last line torn, if any") {
    temp_dir dir;
    (void)matmul_bias_relu_programs();
    std::vector<search::TuningRecord> batch;
    for (int i = 0; i < 64; ++i) batch.push_back(writer_record(0, i));
    // Kills land at different points of the append (formatting, writing, between batches).
    for (int round = 0; round < 3; ++round) {
      const std::string log = dir.file("killed" + std::to_string(round) + ".jsonl");
      const uintmax_t threshold = (round + 1) * (uintmax_t{1} << 19);
      const pid_t pid = fork_child([&] {
        for (;;) search::append_records(log, batch);
      });
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      std::error_code ec;
      while ((!fs::exists(log, ec) || fs::file_size(log, ec) < threshold) &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200 + 300 * round));
      REQUIRE(::kill(pid, SIGKILL) == 0);
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      CHECK(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == SIGKILL);

      const std::string text = slurp(log);
      const auto lines = lines_of(text);
      REQUIRE(lines.size() >= batch.size());
      for (size_t i = 0; i + 1 < lines.size(); ++i)
        CHECK_NOTHROW(search::record_from_json_line(lines[i]));
      collected_warnings warnings;
      const auto read = search::read_records(log, warnings.fn());
      CHECK(warnings.list.size() <= 1);
      CHECK(read.size() + warnings.list.size() == lines.size());
      if (!warnings.list.empty())
        CHECK(warnings.list[0].rfind(log + ":" + std::to_string(lines.size()) + ": ", 0) == 0);
      // What was written whole is the writer's records, in order.
      for (size_t i = 0; i < read.size(); ++i) check_same(batch[i % batch.size()], read[i]);
    }
  }
}
