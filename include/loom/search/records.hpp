/// \file
/// Tuning records (layer search/): the append-only log of measured programs that a tuning run
/// writes and that later runs, tools and users read back — to apply the best schedule found, to
/// resume a run without measuring a program twice, or to train a cost model.
///
/// **Format.** A log is a text file of JSON lines (".jsonl"): one compact JSON object per
/// measured program, keys in this order:
///
/// | key             | value                                                               |
/// |-----------------|---------------------------------------------------------------------|
/// | `version`       | the format version, `"loom-records/1"` (kRecordsVersion)            |
/// | `workload`      | the DAG's workload key (ComputeDAG::workload_key())                 |
/// | `target`        | the target string (Target::to_string())                             |
/// | `steps`         | the program's transform steps (sched::history_to_json, sched/record.hpp) |
/// | `costs`         | seconds per run, one per repeat; `[]` when the measurement failed   |
/// | `error`         | the MeasureError number (Ansor's numbers; 0 = none)                 |
/// | `error_name`    | its name (measure_error_name()), for people reading the log         |
/// | `error_message` | what went wrong, `""` when nothing did                              |
/// | `compile_s`     | wall seconds spent building the program                             |
/// | `run_s`         | wall seconds spent checking and timing it                           |
/// | `timestamp`     | when it was measured, unix seconds                                  |
/// | `threads`       | optional: the threads the program ran with (absent: not recorded)   |
/// | `device`        | optional: the processor it ran on, LLVM's CPU name for the CPU (`"znver5"`)
/// |                 | or the GPU's name as its driver gives it (`"NVIDIA H200"`)          |
/// | `cold_constants`| optional: `true` when the weights were evicted before each timed call |
/// | `structure`     | optional: the DAG's structure key, the computation up to its extents |
/// | `extents`       | optional: every op's shape, concatenated (ComputeDAG::extents)       |
/// | `origins`       | optional: `[l, a]`, where the history's compute-location part and annotation
/// part begin (sched::StepOrigins; absent: not recorded, as in logs of earlier versions) |
///
/// For example (one line in the file, wrapped here):
///
///     {"version":"loom-records/1","workload":"wk-5b9f1c0e2d4a6b7c","target":"llvm -mcpu=skylake",
///      "steps":[["SP","C",0,64,[4,16]],["FU","C",[0,2]],["AN","C",0,"parallel"]],
///      "costs":[1.25e-05,1.2e-05,1.3e-05],"error":0,"error_name":"none","error_message":"",
///      "compile_s":0.21,"run_s":0.05,"timestamp":1718000000.5,"threads":2,"device":"skylake"}
///
/// Like Ansor's records (ansor.md §2.4) a line stores the steps only, never the stages: replaying
/// them on the task's DAG (sched::replay) rebuilds the program. Unlike Ansor's, the keys are
/// named and the target is only its string (the core count and vector width are not part of
/// it). Doubles are written with as many digits as they need to read back exactly. Text that
/// is not valid UTF-8 (a compiler message can hold anything) is written with U+FFFD in place of
/// the bad bytes, so a line always stays valid JSON.
///
/// **Reading** is lenient with files and strict with lines. A line that is blank or starts with
/// `#` is ignored; every other line must be one record of the current version. read_records()
/// skips a line that is not (a torn line left by a killed writer, a line of another format
/// version, garbage) with a warning naming the file, the line and what is wrong, and keeps the
/// other records: a log that a crash damaged loses the damaged line, never the run.
///
/// **Appending** is safe against crashes and concurrent writers (on local file systems): the
/// lines of one append_records() call are written under an exclusive flock() with as few write()
/// calls as possible, so two processes appending to one log never interleave lines, a reader
/// (which takes a shared lock) never sees half a batch, and a writer killed with SIGKILL loses
/// at most the lines it had not finished writing — the lines before are untouched, and a later
/// append starts on a new line. Nothing is fsync()ed: the log survives a killed process, not a
/// power cut.
///
/// Errors: loom::user_error `[loom.search.E820]` to `[loom.search.E827]` (see each function).
#ifndef LOOM_SEARCH_RECORDS_HPP
#define LOOM_SEARCH_RECORDS_HPP

#include "loom/sched/state.hpp"
#include "loom/sched/steps.hpp"
#include "loom/search/measure.hpp"
#include "loom/search/task.hpp"

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// The format version this loom writes, and the only one it reads.
inline constexpr const char* kRecordsVersion = "loom-records/1";

/// One measured program: what was measured (workload, target, steps), how it went, and when.
struct TuningRecord {
  std::string workload_key;
  std::string target;
  std::vector<sched::Step> steps;
  MeasureResult result;
  /// Unix seconds.
  double timestamp = 0;
  /// Threads the program ran with when it was measured; 0 when not recorded (logs of earlier
  /// loom versions, measurers that do not say). The fastest schedule depends on it, so
  /// best_record() can prefer the records of the caller's thread count. Written as the optional
  /// field "threads" (omitted when 0).
  int threads = 0;
  /// The processor the program was measured on (Measurer::device(): LLVM's name of the host CPU,
  /// "znver5", for the CPU measurer; the GPU's name, "NVIDIA H200", for the GPU measurer); ""
  /// when not recorded (GPU records from before the GPU measurer named its device). The target
  /// string "llvm -mcpu=host" names no CPU, and a schedule tuned on one (AVX2, 16 vector registers)
  /// is not the best on another (AVX-512, 32), so best_record() prefers the caller's device as it
  /// prefers its thread count. Written as the optional field "device" (omitted when empty).
  std::string device;
  /// Measured with the task's constant inputs evicted from the caches before each timed call
  /// (MeasureOptions::cold_constants), as a network's layers meet their weights. Such a cost is
  /// higher than a warm one of the same program, so the two kinds never compete: a resumed run
  /// measures the other kind's fastest programs again, and best_record() prefers the cold ones.
  /// Written as the optional field "cold_constants" (omitted when false).
  bool cold_constants = false;
  /// Where the parts of the steps' history begin, as the search made the program
  /// (sched::State::origins()); a resumed run gives them back to the replayed program, so that
  /// mutation and crossover need not infer them. Written as the optional field "origins",
  /// `[location_begin, annotate_begin]` (omitted when unknown).
  sched::StepOrigins origins;
  /// The DAG's structure key and extents (ComputeDAG::structure_key, ComputeDAG::extents): a
  /// task of the same structure at other extents that the log has no record of takes the
  /// schedule of the nearest one (transferred_state). Written as the optional fields
  /// "structure" and "extents" (omitted when empty, as in logs of earlier versions).
  std::string structure_key;
  std::vector<int64_t> extents;
  /// The format version of the line the record was read from. Writing always stamps
  /// kRecordsVersion, whatever this holds (as Ansor re-stamps old records).
  std::string version = kRecordsVersion;
};

/// The record of `program` measured for `task` with `result`, stamped with the current time.
TuningRecord make_tuning_record(const Task& task, const sched::State& program,
                                const MeasureResult& result);

/// The current time in unix seconds (what make_tuning_record stamps).
double unix_time_now();

/// `record` as one line of compact JSON, without the newline (see the format above). Throws
/// loom::user_error `[loom.search.E825]` when a cost, a time or the timestamp is not a finite
/// number (JSON has no NaN or infinity, and the line could not be read back).
std::string to_json_line(const TuningRecord& record);

/// Reads one line written by to_json_line() (a trailing '\n' or "\r\n" is allowed). Throws
/// loom::user_error, naming what is wrong:
///  - `[loom.search.E820]` the text is not a JSON object (a torn or garbled line);
///  - `[loom.search.E821]` a field is missing or has the wrong JSON type;
///  - `[loom.search.E822]` the line is of another format version than kRecordsVersion;
///  - `[loom.search.E823]` the steps are not a well-formed history (carries the
///    `[loom.sched.E250]` message);
///  - `[loom.search.E824]` a value is out of range: an unknown error number, an error name that
///    does not match it, a negative or non-finite cost or time.
/// Whether the steps are legal for the workload is not checked here: replaying them is.
TuningRecord record_from_json_line(const std::string& line);

/// Appends `records`, one line each, to the log at `path` (created with mode 0644 if missing).
/// All lines are formatted first (so a record that cannot be written, E825, leaves the file
/// untouched), then written under an exclusive flock() in as few write() calls as possible. If
/// the file does not end with a newline (a writer was killed mid-line), a newline is written
/// first so that the torn line stays one bad line and the new records stay good. Safe to call
/// from several threads and processes at once. Does nothing for an empty `records`. Throws
/// loom::user_error `[loom.search.E826]` naming the path and the system's reason when the file
/// cannot be opened, locked or written (some of the lines may then be written).
void append_records(const std::string& path, const std::vector<TuningRecord>& records);

/// Receives one warning of read_records(): "<path>:<line>: <what is wrong>".
using RecordWarningFn = std::function<void(const std::string&)>;

/// Prints a read_records() warning to stderr as "loom: warning: <path>:<line>: ...".
void print_record_warning(const std::string& warning);

/// Every record of the log at `path`, in file order. A missing file is an empty log. A line
/// that record_from_json_line() rejects is skipped and reported to `on_warning` as
/// "<path>:<line>: <message>"; bad content never throws. The file is read under a shared
/// flock(), so a batch that a live writer is appending is seen whole or not at all. Throws
/// loom::user_error `[loom.search.E827]` naming the path and the system's reason when the file
/// exists but cannot be read (a directory, no permission).
std::vector<TuningRecord> read_records(const std::string& path,
                                       const RecordWarningFn& on_warning = print_record_warning);

// --- queries ------------------------------------------------------------------------------------

/// The workload and target a record is keyed on.
using RecordKey = std::pair<std::string, std::string>;

/// The cost a program is judged by when it was measured more than once in one setting (a tuning
/// run measures its best programs again at its end, TuneOptions::rerank_top): the median of the
/// measurements' mean costs, the upper one of an even count, with a failed measurement counting
/// as kFailedCost. One measurement is its own median. The fastest of a thousand noisy
/// measurements is as likely a lucky one as a fast program; its median is not.
double median_cost(std::vector<double> mean_costs);

/// The successful record of `workload_key` on `target` of the program with the lowest
/// median_cost() of its records (a program: the same steps, threads and device), or nothing
/// when there is none. The record returned is the one whose cost is that median, the first
/// such in `records` on a tie. A program whose median is a failure never wins.
///
/// With `threads` > 0 or a `device`, records measured like the caller's run are preferred, in
/// this order: the same device (a record without one comes after those with the caller's and
/// before those with another), then the same thread count, then records measured with cold
/// constants (TuningRecord::cold_constants). Only the records of the best such class that has
/// one compete; with `threads` == 0 and no `device` the warm and the cold ones are still apart.
/// A record's cost says how fast it ran where and how it was measured, nothing about elsewhere.
std::optional<TuningRecord> best_record(const std::vector<TuningRecord>& records,
                                        const std::string& workload_key, const std::string& target,
                                        int threads = 0, const std::string& device = "");

/// The state of the fastest correct record of the task's workload and target in the log at
/// `path`, replayed on the task's DAG (threads and device preferred as for best_record);
/// nothing when the log has none (a missing file has none). What cuda::best_recorded_schedule
/// uses.
std::optional<sched::State> best_recorded_state(const Task& task, const std::string& path,
                                                int threads = 0, const std::string& device = "");

/// How a kernel built from a log got its schedule (loom::kernel_from_records for the CPU,
/// cuda::program_from_records for the GPU).
enum class ScheduleSource {
  Recorded,     ///< the log's best record of this very workload
  Transferred,  ///< the best record of the nearest other shape, adapted (transferred_state)
  Predicted,    ///< no record of this computation: the pretrained model's pick (compile_from_model)
  Default,      ///< no record and no usable model: the default schedule
};

/// A schedule carried over from another shape: the state, and the workload and extents of the
/// records it came from.
struct TransferredState {
  sched::State state;
  std::string workload_key;
  std::vector<int64_t> extents;
};

/// For a task that the log at `path` has no record of: the best program (best_record, with
/// `threads`) of the nearest workload of the same structure and target, replayed on the task's
/// DAG with its split lengths adapted (sched::replay_adapted). Nearest: the smallest sum over
/// the extents of |log(theirs / ours)|; on a tie the first in the log. Nothing when no record
/// has the task's structure key, or none of those replays here (a record whose steps do not
/// fit is skipped).
std::optional<TransferredState> transferred_state(const Task& task, const std::string& path,
                                                  int threads = 0);
/// transferred_state over records already read (read_records), for a caller that also looks
/// for the task's own record in them.
std::optional<TransferredState> transferred_state(const Task& task,
                                                  const std::vector<TuningRecord>& records,
                                                  int threads = 0);

/// The index in `records` of what best_record() returns, for a caller that needs to know which
/// record won (the log file it came from, say), or nothing.
std::optional<size_t> best_record_index(const std::vector<TuningRecord>& records,
                                        const std::string& workload_key, const std::string& target,
                                        int threads = 0, const std::string& device = "");

/// best_record() (no thread count or device preferred) for every (workload, target) with at
/// least one successful record.
std::map<RecordKey, TuningRecord> best_records_by_workload(
    const std::vector<TuningRecord>& records);

/// The programs of `workload_key` on `target` that `records` hold, successful or not, each as
/// its steps' JSON text (sched::to_record). A tuning run resuming from a log skips a candidate
/// whose `sched::to_record(state.steps())` is in the set: measuring it again would teach
/// nothing new (a failure fails again).
std::set<std::string> measured_programs(const std::vector<TuningRecord>& records,
                                        const std::string& workload_key, const std::string& target);

}  // namespace search
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/search/impl/records.ipp"
#endif

#endif  // LOOM_SEARCH_RECORDS_HPP
