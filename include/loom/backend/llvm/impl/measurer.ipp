// Bodies of loom/backend/llvm/measurer.hpp: the parent's batch loop (measure_each) and the body
// of a measuring child. Two parts are files of their own, compiled through this one
// (cmake/LoomCompiled.cmake) after the child protocol below, which they use: reference.ipp (the
// task's inputs and reference outputs) and timing.ipp (how a child times its program, and when
// the parent kills a slow build or run). The child processes themselves (frames, fork, reaping,
// how a child died) are backend/child_process.hpp's, shared with the GPU measurer.
#include "loom/backend/llvm/measurer.hpp"

#include "loom/detail/cores.hpp"

#include "loom/backend/child_process.hpp"
#include "loom/backend/llvm/codegen.hpp"
#include "loom/backend/measure_data.hpp"
#include "loom/detail/clock.hpp"
#include "loom/lower/lower.hpp"
#include "loom/runtime/parallel.hpp"
#include "loom/sched/default_schedule.hpp"
#include "loom/sched/layout_rewrite.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {
namespace detail {

using backend::detail::ChildProcess;
using backend::detail::Decoder;
using backend::detail::Encoder;
using backend::detail::fork_child;
using backend::detail::poll_ms;
using backend::detail::send_frame;
using backend::detail::write_all;
using backend::measure_data::compare_output;
using backend::measure_data::coordinates;
using backend::measure_data::poison;

using clock = std::chrono::steady_clock;
using search::MeasureError;
using search::MeasureResult;

using ::loom::detail::format_seconds;
using ::loom::detail::seconds_since;

// --- the child → parent protocol -------------------------------------------------------------
//
// Frames (backend/child_process.hpp) whose body starts with a kind: 'B' f64 compile_seconds
// (built, waiting for the go byte); 'F' (the first, checked call has returned); 'R' i32 error,
// f64 compile_seconds, f64 run_seconds, u8 packed, the costs (a count, then f64 each), the
// message (the final result). The parent answers 'B' with one byte, 'g', outside any frame.

constexpr char kBuilt = 'B';
constexpr char kFirstRunDone = 'F';
constexpr char kResult = 'R';
/// The longest message a result carries (the rest is cut).
constexpr size_t kMaxMessage = 8192;

/// A frame body of `kind`, for its fields to follow.
inline Encoder frame_of(char kind) {
  Encoder e;
  e.put(kind);
  return e;
}

/// What a child found, as the 'R' frame carries it.
struct ChildResult {
  MeasureError error = MeasureError::none;
  double compile_seconds = 0;
  double run_seconds = 0;
  bool packed = false;
  std::vector<double> costs;
  std::string message;
};

inline std::string encode_result(const ChildResult& r) {
  Encoder e = frame_of(kResult);
  e.put(static_cast<int32_t>(r.error));
  e.put(r.compile_seconds);
  e.put(r.run_seconds);
  e.put(static_cast<uint8_t>(r.packed));
  e.put_count(r.costs.size());
  for (double c : r.costs) e.put(c);
  e.put_string(std::string_view(r.message).substr(0, kMaxMessage));
  return e.body();
}

/// The result an 'R' frame body carries; nothing for a frame of another kind or a short one.
inline std::optional<ChildResult> decode_result(const std::string& body) {
  try {
    Decoder d(body);
    if (d.get<char>() != kResult) return std::nullopt;
    ChildResult r;
    r.error = static_cast<MeasureError>(d.get<int32_t>());
    r.compile_seconds = d.get<double>();
    r.run_seconds = d.get<double>();
    r.packed = d.get<uint8_t>() != 0;
    r.costs.resize(d.get_count(size_t{1} << 20));
    for (double& c : r.costs) c = d.get<double>();
    r.message = d.get_string();
    return r;
  } catch (const backend::detail::FrameError&) {
    return std::nullopt;
  }
}

/// How a child ended and what it printed last (backend::detail::describe_death), or, where it
/// printed one, LLVM's own fatal error: "LLVM ERROR: ..." says more than the abort after it.
inline std::string describe_child_death(int status, const std::string& while_doing,
                                        const std::string& output_tail) {
  const size_t llvm = output_tail.rfind("LLVM ERROR: ");
  if (llvm == std::string::npos)
    return backend::detail::describe_death(status, while_doing, output_tail);
  size_t end = output_tail.find('\n', llvm);
  if (end == std::string::npos) end = output_tail.size();
  return "LLVM error: " + output_tail.substr(llvm + 12, end - llvm - 12) + " (" +
         backend::detail::describe_end(status, while_doing) + ")";
}

/// A program as the child runs it: the main kernel and one pack kernel per constant input that
/// is measured packed.
struct ChildProgram {
  struct Pack {
    std::string input;
    CompiledKernel kernel;
    int argument = -1;
    size_t packed_bytes = 0;
  };
  CompiledKernel kernel;
  std::vector<Pack> packs;
};

}  // namespace detail
}  // namespace cpu_jit
LOOM_END_NAMESPACE

#include "loom/backend/llvm/impl/reference.ipp"
#include "loom/backend/llvm/impl/timing.ipp"

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {
namespace detail {

// --- building a program in the child ---------------------------------------------------------

/// Lowers and compiles `state` (and its layout rewrites) into `out`. Returns an error and sets
/// `message` on failure.
inline MeasureError build_child_program(const Task& task, const sched::State& state,
                                        const std::vector<std::string>& constant_inputs,
                                        ChildProgram& out, std::string& message) {
  sched::State current = state;
  struct PendingPack {
    std::string input;
    std::shared_ptr<const ComputeDAG> transform;
    int argument;
    size_t bytes;
  };
  std::vector<PendingPack> pending;
  for (const std::string& name : constant_inputs) {
    bool is_input = false;
    for (const ir::Tensor& t : current.dag().inputs()) is_input = is_input || t.name() == name;
    if (!is_input) continue;
    try {
      sched::LayoutRewrite rw = sched::rewrite_layout(current, name);
      size_t bytes = static_cast<size_t>(rw.packed.dtype().bytes());
      for (int64_t d : rw.packed.shape()) bytes *= static_cast<size_t>(d);
      pending.push_back({name, rw.transform, rw.argument, bytes});
      current = std::move(rw.state);
    } catch (const user_error&) {
      // The rewrite does not apply to this program: it is measured with the input as it is.
    } catch (const std::exception& e) {
      message = "the layout rewrite of constant input '" + name + "' failed: " + e.what();
      return MeasureError::instantiation;
    }
  }
  ir::LoweredFunc lowered;
  std::vector<ir::LoweredFunc> pack_lowered;
  try {
    lowered = lower::lower(current, "measured");
    for (const PendingPack& p : pending)
      pack_lowered.push_back(lower::lower(sched::default_schedule(p.transform, task.target),
                                          "measured_pack_" + p.input));
  } catch (const std::exception& e) {
    message = std::string("lowering failed: ") + e.what();
    return MeasureError::instantiation;
  }
  try {
    out.kernel = compile(lowered);
    // A pack kernel runs once, untimed. At O3, LLVM 19 takes seconds on some of these copy
    // nests (5.7 s instead of 82 ms at O2 for one GEMM 256^3 layout), which would turn into
    // build timeouts.
    CodegenOptions pack_options;
    pack_options.opt_level = 2;
    for (size_t i = 0; i < pending.size(); ++i) {
      ChildProgram::Pack pack;
      pack.input = pending[i].input;
      pack.kernel = compile(pack_lowered[i], pack_options);
      pack.argument = pending[i].argument;
      pack.packed_bytes = pending[i].bytes;
      out.packs.push_back(std::move(pack));
    }
  } catch (const std::exception& e) {
    message = std::string("code generation failed: ") + e.what();
    return MeasureError::compile;
  }
  return MeasureError::none;
}

/// The body of a measuring child: builds, reports "built", waits for the go byte, runs, reports
/// the result. Never returns.
[[noreturn]] inline void measuring_child(int sock, size_t index, const Task& task,
                                         const sched::State& state, const search::MeasureOptions& o,
                                         const LocalMeasurerOptions& local,
                                         const LocalMeasurer::TaskData& td) noexcept {
  ChildResult r;
  bool built = false;
  try {
    // Inputs and references are shared with every other child: a program that writes into
    // them faults here instead of corrupting them.
    ::mprotect(td.base, td.size, PROT_READ);
    // A limit that cannot be set leaves the program unlimited, as outside Linux.
    std::string no_limit;
    backend::detail::limit_memory_growth(static_cast<size_t>(o.memory_limit_mb * 1048576.0),
                                         no_limit);
    if (o.fault_injection_hook) o.fault_injection_hook(index, 0);
    const auto t0 = clock::now();
    ChildProgram prog;
    r.error = build_child_program(task, state, local.constant_inputs, prog, r.message);
    r.compile_seconds = seconds_since(t0);
    r.packed = !prog.packs.empty();
    if (r.error != MeasureError::none) {
      send_frame(sock, encode_result(r));
      ::_exit(0);
    }
    built = true;
    Encoder b = frame_of(kBuilt);
    b.put(r.compile_seconds);
    if (!send_frame(sock, b.body())) ::_exit(0);
    char go = 0;
    ssize_t n;
    do {
      n = ::recv(sock, &go, 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n != 1) ::_exit(0);  // the parent is gone or gave up on this program
    if (o.fault_injection_hook) o.fault_injection_hook(index, 1);
    measure_child_run(o, td, prog, local.constant_inputs, sock, r);
  } catch (const std::exception& e) {
    r.error = built ? MeasureError::runtime : MeasureError::unknown;
    r.message =
        std::string(built ? "exception while running: " : "exception while building: ") + e.what();
    r.costs.clear();
  } catch (...) {
    r.error = MeasureError::unknown;
    r.message = "unknown exception in the measuring process";
    r.costs.clear();
  }
  send_frame(sock, encode_result(r));
  ::_exit(0);
}

/// The engine is created once in the parent so that children inherit it (copy-on-write)
/// instead of each detecting the host and building an LLJIT again. A failure is left to the
/// children, which report it per program.
inline void warm_engine() {
  static const bool done = [] {
    try {
      Engine::global();
    } catch (const std::exception&) {
    }
    return true;
  }();
  (void)done;
}

// --- the parent's batch ------------------------------------------------------------------------

/// A batch's results, each told to the caller (Measurer::measure_each) as soon as it is final.
struct BatchResults {
  std::vector<MeasureResult> results;
  const search::Measurer::ResultCallback& on_result;

  void tell(size_t i) const {
    if (on_result) on_result(i, results[i]);
  }
  void fail(size_t i, MeasureError error, std::string message) {
    results[i].error = error;
    results[i].error_message = std::move(message);
    tell(i);
  }
};

/// The programs of the batch to measure: those of the task's computation, and, when programs
/// are checked, those of another computation with the same kernel arguments (see the file
/// comment of measurer.hpp). The others fail at once as instantiation errors.
inline std::vector<size_t> programs_of_task(const Task& task,
                                            const std::vector<sched::State>& states,
                                            const search::MeasureOptions& o, BatchResults& out) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < states.size(); ++i) {
    const ComputeDAG& dag = states[i].dag();
    if (dag.workload_key() == task.workload_key()) {
      todo.push_back(i);
    } else if (o.check_correctness && same_signature(dag, *task.dag)) {
      todo.push_back(i);
    } else {
      out.fail(i, MeasureError::instantiation,
               "the program was made for workload " + dag.workload_key() +
                   ", not for this task's " + task.workload_key());
    }
  }
  return todo;
}

/// The children of one batch and the machine they share (see the file comment of
/// measurer.hpp): up to `parallelism` children build at once; the built one with the lowest
/// index runs alone while every build is stopped; deadlines and ends of file decide the rest.
/// A child's ChildProcess kills and reaps it when it is destroyed, so none outlives the batch,
/// whatever ends it.
class Batch {
 public:
  Batch(const Task& task, const std::vector<sched::State>& states, const search::MeasureOptions& o,
        const LocalMeasurerOptions& local, LocalMeasurer::TaskData& td, LocalMeasurerStats& stats,
        BatchResults& out)
      : task_(task),
        states_(states),
        o_(o),
        local_(local),
        td_(td),
        stats_(stats),
        out_(out),
        parallelism_(o.build_parallelism > 0 ? o.build_parallelism
                                             : ::loom::detail::available_cores()),
        build_limit_(slow_build_limit(td, o)) {}

  /// Measures the programs `todo` (indices into the batch); returns when each has its result.
  void run(std::vector<size_t> todo) {
    todo_ = std::move(todo);
    while (next_ < todo_.size() || !live_.empty()) {
      if (!running_) {
        const auto now = clock::now();
        if (Child* ready = first_built()) {
          start_run(*ready, now);
        } else {
          resume_builds(now);
          fork_builders();
        }
      }
      if (live_.empty()) continue;
      if (wait_for_children()) settle(clock::now());
    }
  }

 private:
  enum class Phase { building, built, running };
  struct Child {
    size_t index = 0;
    ChildProcess process;
    Phase phase = Phase::building;
    bool stopped = false;
    double build_used = 0;      ///< build seconds used before the current stretch
    clock::time_point resumed;  ///< start of the current unstopped stretch (building)
    clock::time_point run_started;
    bool first_run_done = false;  ///< the child said so ('F')
    double compile_seconds = 0;   ///< from the child's "built" frame
    std::optional<ChildResult> result;
  };

  double build_seconds_used(const Child& c, clock::time_point now) const {
    return c.build_used +
           (c.stopped ? 0.0 : std::chrono::duration<double>(now - c.resumed).count());
  }
  double run_limit(const Child& c) const { return detail::run_limit(c.first_run_done, td_, o_); }

  /// The built child that runs next: the lowest index, as the batch is ordered.
  Child* first_built() const {
    Child* ready = nullptr;
    for (auto& c : live_)
      if (c->phase == Phase::built && (!ready || c->index < ready->index)) ready = c.get();
    return ready;
  }

  /// Gives the machine to `ready`: the machine belongs to the timed program, so every build
  /// pauses.
  void start_run(Child& ready, clock::time_point now) {
    for (auto& c : live_)
      if (c->phase == Phase::building && !c->stopped) {
        ::kill(c->process.pid, SIGSTOP);
        c->build_used += std::chrono::duration<double>(now - c->resumed).count();
        c->stopped = true;
      }
    if (ready.stopped) {
      ::kill(ready.process.pid, SIGCONT);
      ready.stopped = false;
    }
    ready.phase = Phase::running;
    ready.run_started = clock::now();
    running_ = &ready;
    // If the child died meanwhile, the send fails and its end of file says the rest.
    write_all(ready.process.sock, "g", 1);
  }

  void resume_builds(clock::time_point now) {
    for (auto& c : live_)
      if (c->stopped) {
        ::kill(c->process.pid, SIGCONT);
        c->stopped = false;
        c->resumed = now;
      }
  }

  /// Forks children for the next programs until `parallelism_` build at once.
  void fork_builders() {
    int building = 0;
    for (auto& c : live_) building += c->phase == Phase::building;
    while (building < parallelism_ && next_ < todo_.size()) {
      auto c = std::make_unique<Child>();
      c->index = todo_[next_++];
      std::vector<int> others;
      for (auto& l : live_) others.insert(others.end(), {l->process.sock, l->process.output});
      std::string error;
      const size_t index = c->index;
      const bool ok = fork_child(
          c->process, others,
          [&](int sock) { measuring_child(sock, index, task_, states_[index], o_, local_, td_); },
          error);
      if (!ok) {
        out_.fail(index, MeasureError::unknown, "cannot start a measuring process: " + error);
        continue;
      }
      c->resumed = clock::now();
      live_.push_back(std::move(c));
      ++building;
    }
  }

  /// Waits for a frame, an end of file or the nearest deadline, and reads what came. False when
  /// poll() failed; then every child has been killed with its result.
  bool wait_for_children() {
    const auto now = clock::now();
    double wait = 3600;
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is its socket)
    for (auto& c : live_) {
      if (c->phase == Phase::running)
        wait = std::min(
            wait, run_limit(*c) - std::chrono::duration<double>(now - c->run_started).count());
      else if (c->phase == Phase::building && !c->stopped)
        wait = std::min(wait, build_limit_ - build_seconds_used(*c, now));
      if (!c->process.sock_eof) {
        fds.push_back({c->process.sock, POLLIN, 0});
        owners.emplace_back(c.get(), true);
      }
      if (!c->process.output_eof) {
        fds.push_back({c->process.output, POLLIN, 0});
        owners.emplace_back(c.get(), false);
      }
    }
    const int n = ::poll(fds.data(), fds.size(), poll_ms(wait));
    if (n < 0 && errno != EINTR) {
      const std::string why = std::string("poll failed: ") + std::strerror(errno);
      for (auto& c : live_) {
        c->process.reap(/*kill_first=*/true);
        MeasureResult r;
        r.error = MeasureError::unknown;
        r.error_message = why;
        finish(*c, r);
      }
      live_.clear();
      running_ = nullptr;
      return false;
    }
    for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      Child& c = *owners[k].first;
      if (owners[k].second)
        c.process.read_socket();
      else
        c.process.read_output();
    }
    return true;
  }

  /// Frames, ends and deadlines: every child that is done gets its result and leaves the batch.
  void settle(clock::time_point now) {
    for (size_t k = 0; k < live_.size();) {
      Child& c = *live_[k];
      read_frames(c, now);
      if (std::optional<MeasureResult> r = outcome(c, now)) {
        if (running_ == &c) running_ = nullptr;
        finish(c, std::move(*r));
        live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        ++k;
      }
    }
  }

  void read_frames(Child& c, clock::time_point now) {
    std::string body;
    while (c.process.next_frame(body)) {
      if (body.empty()) continue;
      try {
        Decoder d(body);
        const char kind = d.get<char>();
        if (kind == kBuilt && c.phase == Phase::building) {
          c.compile_seconds = d.get<double>();
          c.phase = Phase::built;
          td_.build_seconds.push_back(build_seconds_used(c, now));
          build_limit_ = slow_build_limit(td_, o_);
        } else if (kind == kFirstRunDone) {
          c.first_run_done = true;
        } else if (kind == kResult) {
          c.result = decode_result(body);
        }
      } catch (const backend::detail::FrameError&) {
        // Only this file's child code writes these frames, so a short one is a bug: it is
        // dropped, and the child's end of file or a deadline decides its program.
      }
    }
  }

  /// The result of a child that is done (it ended, or ran or built past its limit and was
  /// killed); nothing while it goes on.
  std::optional<MeasureResult> outcome(Child& c, clock::time_point now) {
    if (c.process.sock_eof) return ended(c, now);
    MeasureResult r;
    if (c.phase == Phase::running &&
        std::chrono::duration<double>(now - c.run_started).count() >= run_limit(c)) {
      const double limit = run_limit(c);
      c.process.reap(/*kill_first=*/true);
      r.error = MeasureError::run_timeout;
      r.error_message = search::run_kill_message(limit, td_.best_cost, o_);
      r.compile_seconds = c.compile_seconds;
      r.run_seconds = limit;
      return r;
    }
    if (c.phase == Phase::building && !c.stopped && build_seconds_used(c, now) >= build_limit_) {
      c.process.reap(/*kill_first=*/true);
      r.error = MeasureError::compile_timeout;
      r.error_message = build_kill_message(build_limit_, td_, o_);
      r.compile_seconds = build_limit_;
      return r;
    }
    return std::nullopt;
  }

  /// The result of a child whose socket ended: what it reported, or how it died.
  MeasureResult ended(Child& c, clock::time_point now) {
    const Phase phase = c.phase;
    const double build_seconds = build_seconds_used(c, now);
    const int status = c.process.reap(/*kill_first=*/false);
    MeasureResult r;
    if (c.result) {
      r = to_measure_result(*c.result);
      if (c.result->packed && r.ok()) ++stats_.packed_programs;
    } else if (phase == Phase::running) {
      r.error = MeasureError::runtime;
      r.error_message = describe_child_death(status, "while running", c.process.output_tail);
      r.compile_seconds = c.compile_seconds;
      r.run_seconds = seconds_since(c.run_started);
    } else if (phase == Phase::building) {
      r.error = MeasureError::compile;
      r.error_message = describe_child_death(status, "while building", c.process.output_tail);
      r.compile_seconds = build_seconds;
    } else {
      r.error = MeasureError::unknown;
      r.error_message = describe_child_death(status, "while waiting to run", c.process.output_tail);
      r.compile_seconds = c.compile_seconds;
    }
    if (!r.ok()) backend::detail::name_memory_limit(r.error_message, o_.memory_limit_mb);
    return r;
  }

  static MeasureResult to_measure_result(const ChildResult& cr) {
    MeasureResult r;
    r.error = cr.error;
    r.error_message = cr.message;
    r.compile_seconds = cr.compile_seconds;
    r.run_seconds = cr.run_seconds;
    if (cr.error == MeasureError::none) r.costs = cr.costs;
    if (cr.error == MeasureError::none && r.costs.empty()) {
      r.error = MeasureError::unknown;
      r.error_message = "the measuring process reported no cost";
    }
    return r;
  }

  void finish(Child& c, MeasureResult r) {
    stats_.compile_seconds += r.compile_seconds;
    stats_.run_seconds += r.run_seconds;
    // Children forked after this one judge slowness by the best so far, this batch included.
    if (r.ok() && (td_.best_cost == 0 || r.mean_cost() < td_.best_cost))
      td_.best_cost = r.mean_cost();
    out_.results[c.index] = std::move(r);
    out_.tell(c.index);
  }

  const Task& task_;
  const std::vector<sched::State>& states_;
  const search::MeasureOptions& o_;
  const LocalMeasurerOptions& local_;
  LocalMeasurer::TaskData& td_;
  LocalMeasurerStats& stats_;
  BatchResults& out_;
  const int parallelism_;
  double build_limit_;  ///< slow_build_limit, as the task's builds so far set it
  std::vector<size_t> todo_;
  size_t next_ = 0;  ///< into todo_: the next program to fork a child for
  std::vector<std::unique_ptr<Child>> live_;
  Child* running_ = nullptr;
};

}  // namespace detail

LOOM_DECL LocalMeasurer::LocalMeasurer(search::MeasureOptions options, LocalMeasurerOptions local)
    : options_(std::move(options)), local_(std::move(local)) {
  std::string problems = search::measure_options_problems(options_);
  if (local_.reference_timeout_s <= 0)
    problems += (problems.empty() ? "" : ", ") + std::string("reference_timeout_s ") +
                std::to_string(local_.reference_timeout_s) + " (must be > 0)";
  LOOM_USER_CHECK(problems.empty(), "loom.llvm.E530")
      << "LocalMeasurer: measure options out of range: " << problems;
}

LOOM_DECL LocalMeasurer::~LocalMeasurer() = default;

LOOM_DECL int LocalMeasurer::threads() const {
  return options_.num_threads > 0 ? options_.num_threads : runtime::num_threads();
}

LOOM_DECL bool LocalMeasurer::cold_constants(const Task& task) const {
  if (!detail::evicts_constants(options_)) return false;
  for (const ir::Tensor& t : task.dag->inputs())
    if (std::find(local_.constant_inputs.begin(), local_.constant_inputs.end(), t.name()) !=
        local_.constant_inputs.end())
      return true;
  return false;
}

LOOM_DECL std::string LocalMeasurer::device() const {
  try {
    return Engine::global().cpu_name();
  } catch (const std::exception&) {
    return "";  // no JIT: every measurement fails and says why; the records name no device
  }
}

LOOM_DECL std::vector<std::string> LocalMeasurer::packed_inputs(
    const sched::State& state, const std::vector<std::string>& constant_inputs) {
  std::vector<std::string> packed;
  sched::State current = state;
  for (const std::string& name : constant_inputs) {
    bool is_input = false;
    for (const ir::Tensor& t : current.dag().inputs()) is_input = is_input || t.name() == name;
    if (!is_input) continue;
    try {
      current = sched::rewrite_layout(current, name).state;
      packed.push_back(name);
    } catch (const user_error&) {
    }
  }
  return packed;
}

LOOM_DECL LocalMeasurer::TaskData* LocalMeasurer::ready_task(const Task& task,
                                                             search::MeasureResult& failure) {
  if (!task.target.is_cpu()) {
    failure.error = search::MeasureError::instantiation;
    failure.error_message =
        "the local CPU measurer cannot measure a task for " + task.target.to_string();
    return nullptr;
  }
  TaskData& td = task_data(task);
  if (!td.map_error.empty()) {
    failure.error = search::MeasureError::unknown;
    failure.error_message = td.map_error;
    return nullptr;
  }
  detail::warm_engine();
  if (options_.check_correctness && !td.reference_tried) {
    td.reference_tried = true;
    const auto t0 = detail::clock::now();
    td.reference_error = detail::compute_reference(task, td, options_, local_.reference_timeout_s);
    td.reference_ok = td.reference_error.empty();
    stats_.reference_seconds += detail::seconds_since(t0);
  }
  if (options_.check_correctness && !td.reference_ok) {
    failure.error = search::MeasureError::unknown;
    failure.error_message = td.reference_error;
    return nullptr;
  }
  return &td;
}

LOOM_DECL std::vector<search::MeasureResult> LocalMeasurer::measure_each(
    const Task& task, const std::vector<sched::State>& states, const ResultCallback& on_result) {
  using namespace detail;
  const auto batch_start = clock::now();
  BatchResults out{std::vector<MeasureResult>(states.size()), on_result};
  ++stats_.batches;
  stats_.programs += states.size();
  if (states.empty()) return std::move(out.results);
  MeasureResult failure;
  if (TaskData* td = ready_task(task, failure)) {
    Batch batch(task, states, options_, local_, *td, stats_, out);
    batch.run(programs_of_task(task, states, options_, out));
  } else {
    for (size_t i = 0; i < states.size(); ++i) out.fail(i, failure.error, failure.error_message);
  }
  stats_.wall_seconds += seconds_since(batch_start);
  return std::move(out.results);
}

}  // namespace cpu_jit
LOOM_END_NAMESPACE
