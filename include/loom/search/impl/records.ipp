// Bodies of loom/search/records.hpp: tuning records as JSON lines, appended under flock().
#include "loom/error.hpp"
#include "loom/sched/record.hpp"
#include "loom/search/records.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <set>
#include <string_view>
#include <sys/file.h>
#include <sys/stat.h>
#include <system_error>
#include <unordered_map>
#include <unistd.h>

LOOM_BEGIN_NAMESPACE
namespace search {

namespace detail {

using json = nlohmann::json;

// Compiler messages and user names may hold bytes that are not UTF-8; dump() would throw on
// them. Replacing them keeps every line valid JSON.
inline std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

inline std::string system_reason(int err) { return std::generic_category().message(err); }

// Closes the descriptor on every path out (the lock goes with it).
struct file_descriptor {
  int fd = -1;
  explicit file_descriptor(int f) : fd(f) {}
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
  ~file_descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

inline int lock_retrying(int fd, int op) {
  int rc;
  do rc = ::flock(fd, op);
  while (rc != 0 && errno == EINTR);
  return rc;
}

inline void put_number(std::string& out, const char* key, double v) {
  LOOM_USER_CHECK(std::isfinite(v), "loom.search.E825")
      << "cannot write a tuning record whose " << key << " is " << v
      << ": JSON has no NaN or infinity; the measurer must report a finite number";
  out += json(v).dump();
}

inline const char* json_type(const json& j) {
  return j.is_number_integer() ? "integer" : j.type_name();
}

// The field `key` of the record, which must exist and satisfy `is` (a JSON type named `type`).
inline const json& field(const json& j, const char* key, bool (json::*is)() const noexcept,
                         const char* type) {
  auto it = j.find(key);
  LOOM_USER_CHECK(it != j.end(), "loom.search.E821")
      << "the tuning record has no field '" << key << "'";
  LOOM_USER_CHECK(((*it).*is)(), "loom.search.E821")
      << "field '" << key << "' of the tuning record is " << json_type(*it) << ", not " << type;
  return *it;
}

inline double seconds_field(const json& j, const char* key) {
  const double v = field(j, key, &json::is_number, "a number").get<double>();
  LOOM_USER_CHECK(std::isfinite(v) && v >= 0, "loom.search.E824")
      << "field '" << key << "' of the tuning record is " << v << ", not a time in seconds";
  return v;
}

inline MeasureError error_from_number(int64_t n) {
  switch (n) {
    case 0: return MeasureError::none;
    case 1: return MeasureError::instantiation;
    case 2: return MeasureError::compile;
    case 4: return MeasureError::runtime;
    case 5: return MeasureError::wrong_answer;
    case 6: return MeasureError::compile_timeout;
    case 7: return MeasureError::run_timeout;
    case 8: return MeasureError::unknown;
  }
  LOOM_USER_FAIL("loom.search.E824") << "field 'error' of the tuning record is " << n
                                     << ", not a MeasureError number (0, 1, 2, 4, 5, 6, 7 or 8)";
  return MeasureError::unknown;
}

}  // namespace detail

LOOM_DECL double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

LOOM_DECL TuningRecord make_tuning_record(const Task& task, const sched::State& program,
                                          const MeasureResult& result) {
  TuningRecord r;
  r.workload_key = task.workload_key();
  r.target = task.target.to_string();
  r.steps = program.steps();
  r.origins = program.origins();
  r.structure_key = task.dag->structure_key();
  r.extents = task.dag->extents();
  r.result = result;
  r.timestamp = unix_time_now();
  return r;
}

LOOM_DECL std::string to_json_line(const TuningRecord& record) {
  using detail::dump;
  using detail::json;
  using detail::put_number;
  const MeasureResult& m = record.result;
  // Written by hand rather than as one json object so that the keys keep the documented order
  // (nlohmann::json sorts them) and `version` comes first for people reading the file.
  std::string out = "{\"version\":";
  out += json(kRecordsVersion).dump();
  out += ",\"workload\":" + dump(record.workload_key);
  out += ",\"target\":" + dump(record.target);
  out += ",\"steps\":" + dump(sched::history_to_json(record.steps));
  out += ",\"costs\":[";
  for (size_t i = 0; i < m.costs.size(); ++i) {
    if (i) out += ',';
    put_number(out, "cost", m.costs[i]);
  }
  out += "],\"error\":" + std::to_string(static_cast<int>(m.error));
  out += ",\"error_name\":" + json(measure_error_name(m.error)).dump();
  out += ",\"error_message\":" + dump(m.error_message);
  out += ",\"compile_s\":";
  put_number(out, "compile_s", m.compile_seconds);
  out += ",\"run_s\":";
  put_number(out, "run_s", m.run_seconds);
  out += ",\"timestamp\":";
  put_number(out, "timestamp", record.timestamp);
  if (record.threads > 0) out += ",\"threads\":" + std::to_string(record.threads);
  if (!record.device.empty()) out += ",\"device\":" + dump(record.device);
  if (record.cold_constants) out += ",\"cold_constants\":true";
  if (!record.structure_key.empty()) out += ",\"structure\":" + dump(record.structure_key);
  if (!record.extents.empty()) {
    out += ",\"extents\":[";
    for (size_t i = 0; i < record.extents.size(); ++i)
      out += (i ? "," : "") + std::to_string(record.extents[i]);
    out += ']';
  }
  if (record.origins.known())
    out += ",\"origins\":[" + std::to_string(record.origins.location_begin) + "," +
           std::to_string(record.origins.annotate_begin) + "]";
  out += '}';
  return out;
}

LOOM_DECL TuningRecord record_from_json_line(const std::string& line) {
  using detail::field;
  using detail::json;
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    LOOM_USER_FAIL("loom.search.E820") << "not a JSON object: " << e.what();
  }
  LOOM_USER_CHECK(j.is_object(), "loom.search.E820")
      << "not a JSON object but " << detail::json_type(j);

  TuningRecord r;
  r.version = field(j, "version", &json::is_string, "a string").get<std::string>();
  LOOM_USER_CHECK(r.version == kRecordsVersion, "loom.search.E822")
      << "the record is of format version '" << r.version << "'; this loom reads '"
      << kRecordsVersion << "' only";
  r.workload_key = field(j, "workload", &json::is_string, "a string").get<std::string>();
  r.target = field(j, "target", &json::is_string, "a string").get<std::string>();
  const json& steps = field(j, "steps", &json::is_array, "an array");
  try {
    r.steps = sched::history_from_json(steps);
  } catch (const user_error& e) {
    LOOM_USER_FAIL("loom.search.E823") << "field 'steps' is not a step history: " << e.what();
  }

  MeasureResult& m = r.result;
  for (const json& c : field(j, "costs", &json::is_array, "an array")) {
    LOOM_USER_CHECK(c.is_number(), "loom.search.E821")
        << "field 'costs' of the tuning record holds " << detail::json_type(c)
        << ", not only numbers";
    const double v = c.get<double>();
    LOOM_USER_CHECK(std::isfinite(v) && v >= 0, "loom.search.E824")
        << "field 'costs' of the tuning record holds " << v << ", not a time in seconds";
    m.costs.push_back(v);
  }
  m.error = detail::error_from_number(
      field(j, "error", &json::is_number_integer, "an integer").get<int64_t>());
  const std::string name = field(j, "error_name", &json::is_string, "a string").get<std::string>();
  LOOM_USER_CHECK(name == measure_error_name(m.error), "loom.search.E824")
      << "field 'error_name' of the tuning record is '" << name << "' but error "
      << static_cast<int>(m.error) << " is '" << measure_error_name(m.error) << "'";
  m.error_message = field(j, "error_message", &json::is_string, "a string").get<std::string>();
  m.compile_seconds = detail::seconds_field(j, "compile_s");
  m.run_seconds = detail::seconds_field(j, "run_s");
  r.timestamp = field(j, "timestamp", &json::is_number, "a number").get<double>();
  LOOM_USER_CHECK(std::isfinite(r.timestamp), "loom.search.E824")
      << "field 'timestamp' of the tuning record is not a finite number";
  if (j.contains("threads")) {
    const json& t = field(j, "threads", &json::is_number_integer, "an integer");
    LOOM_USER_CHECK(t.get<int64_t>() >= 1 && t.get<int64_t>() <= 1 << 20, "loom.search.E824")
        << "field 'threads' of the tuning record is " << t.get<int64_t>() << ", not a thread count";
    r.threads = static_cast<int>(t.get<int64_t>());
  }
  if (j.contains("device")) {
    r.device = field(j, "device", &json::is_string, "a string").get<std::string>();
    LOOM_USER_CHECK(!r.device.empty(), "loom.search.E824")
        << "field 'device' of the tuning record is empty (omit it when the device is unknown)";
  }
  if (j.contains("cold_constants"))
    r.cold_constants = field(j, "cold_constants", &json::is_boolean, "true or false").get<bool>();
  if (j.contains("structure"))
    r.structure_key = field(j, "structure", &json::is_string, "a string").get<std::string>();
  if (j.contains("extents")) {
    for (const json& e : field(j, "extents", &json::is_array, "an array")) {
      LOOM_USER_CHECK(e.is_number_integer() && e.get<int64_t>() >= 1, "loom.search.E824")
          << "field 'extents' of the tuning record holds " << e.dump()
          << ", not only extents (integers >= 1)";
      r.extents.push_back(e.get<int64_t>());
    }
  }
  if (j.contains("origins")) {
    const json& o = field(j, "origins", &json::is_array, "an array");
    const int64_t n = static_cast<int64_t>(r.steps.size());
    LOOM_USER_CHECK(o.size() == 2 && o[0].is_number_integer() && o[1].is_number_integer() &&
                        o[0].get<int64_t>() >= 0 && o[0].get<int64_t>() <= o[1].get<int64_t>() &&
                        o[1].get<int64_t>() <= n,
                    "loom.search.E824")
        << "field 'origins' of the tuning record is " << o.dump() << ", not [l, a] with 0 <= l "
        << "<= a <= " << n << " (the number of steps)";
    r.origins = {static_cast<int>(o[0].get<int64_t>()), static_cast<int>(o[1].get<int64_t>())};
  }
  return r;
}

LOOM_DECL void append_records(const std::string& path, const std::vector<TuningRecord>& records) {
  if (records.empty()) return;
  // Everything is formatted before the file is touched: a record that cannot be written must
  // not leave half a batch behind.
  std::string text;
  for (const TuningRecord& r : records) {
    text += to_json_line(r);
    text += '\n';
  }

  // O_RDWR rather than O_WRONLY: the last byte is read back to repair a torn line.
  detail::file_descriptor f(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
  LOOM_USER_CHECK(f.fd >= 0, "loom.search.E826")
      << "cannot open the tuning log '" << path
      << "' for appending: " << detail::system_reason(errno);
  LOOM_USER_CHECK(detail::lock_retrying(f.fd, LOCK_EX) == 0, "loom.search.E826")
      << "cannot lock the tuning log '" << path << "': " << detail::system_reason(errno);

  // A writer killed in the middle of a line leaves no newline at the end; without one the
  // first new record would be glued to the torn line and lost with it.
  struct stat st{};
  LOOM_USER_CHECK(::fstat(f.fd, &st) == 0, "loom.search.E826")
      << "cannot stat the tuning log '" << path << "': " << detail::system_reason(errno);
  if (st.st_size > 0) {
    char last = '\n';
    ssize_t n;
    do n = ::pread(f.fd, &last, 1, st.st_size - 1);
    while (n < 0 && errno == EINTR);
    LOOM_USER_CHECK(n == 1, "loom.search.E826")
        << "cannot read the end of the tuning log '" << path
        << "': " << (n < 0 ? detail::system_reason(errno) : std::string("file shrank"));
    if (last != '\n') text.insert(text.begin(), '\n');
  }

  // Under the exclusive lock no cooperating writer appends in between, so a partial write is
  // simply continued where it stopped.
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(f.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    LOOM_USER_CHECK(n > 0, "loom.search.E826")
        << "cannot write to the tuning log '" << path << "' (" << done << " of " << text.size()
        << " bytes written): "
        << (n < 0 ? detail::system_reason(errno) : std::string("no progress"));
    done += static_cast<size_t>(n);
  }
  detail::lock_retrying(f.fd, LOCK_UN);
}

LOOM_DECL void print_record_warning(const std::string& warning) {
  std::fprintf(stderr, "loom: warning: %s\n", warning.c_str());
}

LOOM_DECL std::vector<TuningRecord> read_records(const std::string& path,
                                                 const RecordWarningFn& on_warning) {
  std::string text;
  {
    detail::file_descriptor f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (f.fd < 0 && errno == ENOENT) return {};
    LOOM_USER_CHECK(f.fd >= 0, "loom.search.E827")
        << "cannot open the tuning log '" << path << "': " << detail::system_reason(errno);
    // The shared lock waits for a writer's batch to be complete; it is held only while the
    // bytes are copied, not while they are parsed.
    LOOM_USER_CHECK(detail::lock_retrying(f.fd, LOCK_SH) == 0, "loom.search.E827")
        << "cannot lock the tuning log '" << path << "': " << detail::system_reason(errno);
    struct stat st{};
    if (::fstat(f.fd, &st) == 0 && st.st_size > 0) text.reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(f.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      LOOM_USER_CHECK(n >= 0, "loom.search.E827")
          << "cannot read the tuning log '" << path << "': " << detail::system_reason(errno);
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
  }

  std::vector<TuningRecord> records;
  size_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    const bool has_newline = end != std::string::npos;
    if (!has_newline) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos || line.front() == '#') continue;
    try {
      records.push_back(record_from_json_line(std::string(line)));
    } catch (const user_error& e) {
      if (!on_warning) continue;
      std::string w = path + ":" + std::to_string(line_no) + ": " + e.what();
      if (!has_newline)
        w += " (the last line has no newline: a writer was probably killed while appending it)";
      on_warning(w);
    }
  }
  return records;
}

LOOM_DECL double median_cost(std::vector<double> mean_costs) {
  if (mean_costs.empty()) return kFailedCost;
  const auto middle = mean_costs.begin() + static_cast<std::ptrdiff_t>(mean_costs.size() / 2);
  std::nth_element(mean_costs.begin(), middle, mean_costs.end());
  return *middle;
}

namespace detail {

/// The index of the record whose cost is the median of the fastest program among the records
/// that `competes` lets in (grouped by steps, threads and device), or nothing.
template <class Competes>
std::optional<size_t> fastest_program_record(const std::vector<TuningRecord>& records,
                                             const Competes& competes) {
  std::unordered_map<std::string, size_t> program_of;  // key -> index into programs
  std::vector<std::vector<size_t>> programs;           // record indices, in file order
  for (size_t i = 0; i < records.size(); ++i) {
    const TuningRecord& r = records[i];
    if (!competes(r)) continue;
    const std::string key =
        sched::to_record(r.steps) + '\n' + std::to_string(r.threads) + '\n' + r.device;
    const auto [it, added] = program_of.emplace(key, programs.size());
    if (added) programs.emplace_back();
    programs[it->second].push_back(i);
  }
  std::optional<size_t> best;
  double best_cost = kFailedCost;
  for (const std::vector<size_t>& measured : programs) {
    std::vector<double> costs;
    for (size_t i : measured) costs.push_back(records[i].result.mean_cost());
    const double cost = median_cost(costs);
    if (!(cost < best_cost)) continue;
    for (size_t i : measured)
      if (records[i].result.ok() && records[i].result.mean_cost() == cost) {
        best = i;
        best_cost = cost;
        break;
      }
  }
  return best;
}

}  // namespace detail

LOOM_DECL std::optional<size_t> best_record_index(const std::vector<TuningRecord>& records,
                                                  const std::string& workload_key,
                                                  const std::string& target, int threads,
                                                  const std::string& device) {
  // How much a record is like the caller's run: the device first (same > unknown > another),
  // then the thread count, then cold constants over warm (costs of the two never compare). The
  // most alike class that has a successful record decides.
  auto likeness = [&](const TuningRecord& r) {
    const int same_device = device.empty() ? 1 : r.device == device ? 2 : r.device.empty() ? 1 : 0;
    return 4 * same_device + 2 * (threads > 0 && r.threads == threads ? 1 : 0) +
           (r.cold_constants ? 1 : 0);
  };
  auto ours = [&](const TuningRecord& r) {
    return r.workload_key == workload_key && r.target == target;
  };
  int best_likeness = -1;
  for (const TuningRecord& r : records)
    if (r.result.ok() && ours(r)) best_likeness = std::max(best_likeness, likeness(r));
  if (best_likeness < 0) return std::nullopt;
  return detail::fastest_program_record(
      records, [&](const TuningRecord& r) { return ours(r) && likeness(r) == best_likeness; });
}

LOOM_DECL std::optional<TuningRecord> best_record(const std::vector<TuningRecord>& records,
                                                  const std::string& workload_key,
                                                  const std::string& target, int threads,
                                                  const std::string& device) {
  const auto i = best_record_index(records, workload_key, target, threads, device);
  if (!i) return std::nullopt;
  return records[*i];
}

LOOM_DECL std::optional<TransferredState> transferred_state(const Task& task,
                                                            const std::string& path, int threads) {
  return transferred_state(task, read_records(path), threads);
}

LOOM_DECL std::optional<TransferredState> transferred_state(
    const Task& task, const std::vector<TuningRecord>& records, int threads) {
  const std::string& structure = task.dag->structure_key();
  const std::string target = task.target.to_string();
  const std::vector<int64_t> ours = task.dag->extents();
  // Workloads of the task's structure, nearest first.
  std::vector<std::pair<double, size_t>> candidates;  // (distance, a record of the workload)
  std::set<std::string> seen;
  for (size_t i = 0; i < records.size(); ++i) {
    const TuningRecord& r = records[i];
    if (r.structure_key != structure || r.target != target || r.extents.size() != ours.size() ||
        !seen.insert(r.workload_key).second)
      continue;
    double distance = 0;
    for (size_t d = 0; d < ours.size(); ++d)
      distance += std::abs(std::log(static_cast<double>(r.extents[d]) / ours[d]));
    candidates.emplace_back(distance, i);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [distance, i] : candidates) {
    const std::optional<TuningRecord> best =
        best_record(records, records[i].workload_key, target, threads);
    if (!best) continue;
    try {
      sched::State state = sched::replay_adapted(task.dag, best->steps);
      state.set_origins(best->origins);
      return TransferredState{std::move(state), best->workload_key, records[i].extents};
    } catch (const user_error&) {
      // Same names and ranks, other loops (a stride or dilation changed a loop's presence):
      // the next nearest may fit.
    }
  }
  return std::nullopt;
}

LOOM_DECL std::optional<sched::State> best_recorded_state(const Task& task, const std::string& path,
                                                          int threads, const std::string& device) {
  const std::optional<TuningRecord> best = best_record(read_records(path), task.workload_key(),
                                                       task.target.to_string(), threads, device);
  if (!best) return std::nullopt;
  return sched::replay(task.dag, best->steps);
}

LOOM_DECL std::map<RecordKey, TuningRecord> best_records_by_workload(
    const std::vector<TuningRecord>& records) {
  std::set<RecordKey> keys;
  for (const TuningRecord& r : records)
    if (r.result.ok()) keys.insert({r.workload_key, r.target});
  std::map<RecordKey, TuningRecord> out;
  for (const RecordKey& key : keys)
    if (const auto i = best_record_index(records, key.first, key.second))
      out.emplace(key, records[*i]);
  return out;
}

LOOM_DECL std::set<std::string> measured_programs(const std::vector<TuningRecord>& records,
                                                  const std::string& workload_key,
                                                  const std::string& target) {
  std::set<std::string> out;
  for (const TuningRecord& r : records)
    if (r.workload_key == workload_key && r.target == target) out.insert(sched::to_record(r.steps));
  return out;
}

}  // namespace search
LOOM_END_NAMESPACE
