// Bodies of loom/backend/cuda/measurer.hpp.
#include "loom/backend/cuda/measurer.hpp"

#include "loom/backend/child_process.hpp"
#include "loom/backend/cuda/driver.hpp"
#include "loom/backend/cuda/nvrtc.hpp"
#include "loom/backend/cuda/program.hpp"
#include "loom/detail/clock.hpp"
#include "loom/detail/cores.hpp"
#include "loom/dag/evaluate.hpp"
#include "loom/lower/gpu.hpp"
#include "loom/sched/default_schedule.hpp"
#include "loom/backend/measure_data.hpp"

#include <poll.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>

extern char** environ;

LOOM_BEGIN_NAMESPACE
namespace cuda {
namespace detail {

using backend::measure_data::OutputSpec;
using search::MeasureError;

inline constexpr const char* kWorkerEnv = "LOOM_CUDA_MEASURE_WORKER";

using ::loom::detail::seconds_since;

// --- messages between the measurer and its worker ---------------------------------------------
//
// Frames (backend/child_process.hpp), one request and one reply at a time. A request starts with
// its kind: kSetup (the task's arguments, then its inputs and reference outputs, or the seed and
// the reference program), kRun (a program and how to time it). The worker's first frame, kHello,
// says whether it found the device. A run is answered by kFirstRunDone (alone, once the program's
// first launch has finished: until then the measurer may kill a worker whose program runs far
// longer than the task's best, MeasureOptions::slow_run_kill_factor), then kRunResult. Every
// reply but kFirstRunDone ends with a u8: 1 when the worker's CUDA context is gone and it exits.

using backend::detail::Decoder;
using backend::detail::Encoder;
using backend::detail::receive_frame;
using backend::detail::Received;
using backend::detail::send_frame;

/// The most items a list in a message may count (arguments, dimensions, kernels, costs).
inline constexpr std::size_t kMaxCount = std::size_t{1} << 24;

inline void put_plan(Encoder& w, const LaunchPlan& p) {
  w.put_count(p.arg_bytes.size());
  for (std::size_t b : p.arg_bytes) w.put<int64_t>(static_cast<int64_t>(b));
  for (std::size_t i = 0; i < p.arg_bytes.size(); ++i)
    w.put<int64_t>(i < p.arg_written.size() && p.arg_written[i]);
  w.put_count(p.workspace_bytes.size());
  for (std::size_t b : p.workspace_bytes) w.put<int64_t>(static_cast<int64_t>(b));
  w.put_count(p.kernels.size());
  for (const KernelLaunch& k : p.kernels) {
    w.put_string(k.name);
    for (unsigned g : k.grid) w.put<int64_t>(g);
    for (unsigned b : k.block) w.put<int64_t>(b);
    w.put_count(k.buffers.size());
    for (int b : k.buffers) w.put<int64_t>(b);
    w.put<int64_t>(k.dynamic_shared_bytes);
  }
}

inline LaunchPlan get_plan(Decoder& r) {
  LaunchPlan p;
  p.arg_bytes.resize(r.get_count(kMaxCount));
  for (std::size_t& b : p.arg_bytes) b = static_cast<std::size_t>(r.get<int64_t>());
  p.arg_written.resize(p.arg_bytes.size());
  for (std::size_t i = 0; i < p.arg_bytes.size(); ++i) p.arg_written[i] = r.get<int64_t>() != 0;
  p.workspace_bytes.resize(r.get_count(kMaxCount));
  for (std::size_t& b : p.workspace_bytes) b = static_cast<std::size_t>(r.get<int64_t>());
  p.kernels.resize(r.get_count(kMaxCount));
  for (KernelLaunch& k : p.kernels) {
    k.name = r.get_string();
    for (unsigned& g : k.grid) g = static_cast<unsigned>(r.get<int64_t>());
    for (unsigned& b : k.block) b = static_cast<unsigned>(r.get<int64_t>());
    k.buffers.resize(r.get_count(kMaxCount));
    for (int& b : k.buffers) b = static_cast<int>(r.get<int64_t>());
    k.dynamic_shared_bytes = static_cast<unsigned>(r.get<int64_t>());
  }
  return p;
}

enum : uint8_t { kSetup = 1, kRun = 2, kHello = 3, kFirstRunDone = 4, kRunResult = 5 };

/// A first launch at least this long is long enough to be its program's cost when it is slow
/// (slow_program_factor): the lazy loading of the module's kernels, which it also pays, is
/// at most a few milliseconds.
inline constexpr double kFirstLaunchCostMin = 0.05;

// --- the worker process --------------------------------------------------------------------------

/// One argument of the task as the worker sees it.
struct ArgSpec {
  OutputSpec spec;
  std::size_t bytes = 0;
  bool is_output = false;
};

inline void put_arg(Encoder& w, const ArgSpec& a) {
  w.put_string(a.spec.name);
  w.put<uint8_t>(static_cast<uint8_t>(a.spec.dtype.code));
  w.put<uint8_t>(a.spec.dtype.bits);
  w.put<int64_t>(a.spec.elements);
  w.put_count(a.spec.shape.size());
  for (int64_t e : a.spec.shape) w.put<int64_t>(e);
  w.put<uint8_t>(a.is_output);
}

inline ArgSpec get_arg(Decoder& r) {
  ArgSpec a;
  a.spec.name = r.get_string();
  a.spec.dtype.code = static_cast<ir::DType::Code>(r.get<uint8_t>());
  a.spec.dtype.bits = r.get<uint8_t>();
  a.spec.elements = r.get<int64_t>();
  a.spec.shape.resize(r.get_count(kMaxCount));
  for (int64_t& e : a.spec.shape) e = r.get<int64_t>();
  a.is_output = r.get<uint8_t>() != 0;
  a.bytes =
      static_cast<std::size_t>(a.spec.elements) * static_cast<std::size_t>(a.spec.dtype.bytes());
  return a;
}

/// What the worker keeps for the current task: inputs on the device, outputs' reference and
/// poison on the host.
struct WorkerTask {
  std::vector<ArgSpec> args;
  std::vector<DeviceBuffer> buffers;
  std::vector<std::vector<unsigned char>> reference;  // per argument; empty for inputs
  std::vector<CUdeviceptr> pointers() const {
    std::vector<CUdeviceptr> p;
    for (const DeviceBuffer& b : buffers) p.push_back(b.ptr());
    return p;
  }
  /// Outputs start as poison, so that an element a program never writes is caught: NaN bytes
  /// for floats, 0x5A bytes for integers (as the CPU measurer's poison).
  void poison_outputs() {
    for (std::size_t i = 0; i < args.size(); ++i)
      if (args[i].is_output) buffers[i].fill_bytes(args[i].spec.dtype.is_float() ? 0xFF : 0x5A);
  }
  /// Empty when every output equals its reference.
  std::string compare(double rtol, double atol) const {
    std::vector<unsigned char> got;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_output) continue;
      got.resize(args[i].bytes);
      buffers[i].download(got.data(), got.size());
      std::string diff = backend::measure_data::compare_output(args[i].spec, got.data(),
                                                               reference[i].data(), rtol, atol);
      if (!diff.empty()) return diff;
    }
    return {};
  }
};

/// Serves a setup: allocates the task's buffers, fills the inputs and gets the reference.
/// Returns the reference program's run time in seconds (0 when the host sent the reference).
inline double serve_setup(Decoder& r, WorkerTask& t, int device) {
  t = WorkerTask{};
  const std::size_t n = r.get_count(kMaxCount);
  for (std::size_t i = 0; i < n; ++i) t.args.push_back(get_arg(r));
  Context& ctx = Context::get(device);
  for (const ArgSpec& a : t.args) t.buffers.emplace_back(std::max<std::size_t>(a.bytes, 1), ctx);
  t.reference.resize(n);
  const uint8_t mode = r.get<uint8_t>();
  if (mode == 0) {
    // Inputs and reference outputs computed on the host.
    for (std::size_t i = 0; i < n; ++i) {
      std::string data = r.get_string();
      if (data.size() != t.args[i].bytes) throw std::runtime_error("setup: wrong data size");
      if (t.args[i].is_output)
        t.reference[i].assign(data.begin(), data.end());
      else
        t.buffers[i].upload(data.data(), data.size());
    }
    return 0;
  }
  // Inputs from the seed; the reference from a (trusted) program run here.
  const uint64_t seed = r.get<uint64_t>();
  std::vector<unsigned char> host;
  for (std::size_t i = 0; i < n; ++i) {
    if (t.args[i].is_output) continue;
    host.resize(t.args[i].bytes);
    backend::measure_data::fill_random(host.data(), t.args[i].spec.dtype, t.args[i].spec.elements,
                                       seed + i);
    t.buffers[i].upload(host.data(), host.size());
  }
  const std::string image = r.get_string();
  Program reference(image, get_plan(r), ctx);
  t.poison_outputs();
  const std::vector<CUdeviceptr> args = t.pointers();
  const double seconds = time_launches([&] { reference.launch(args); }, 1, ctx);
  for (std::size_t i = 0; i < n; ++i) {
    if (!t.args[i].is_output) continue;
    t.reference[i].resize(t.args[i].bytes);
    t.buffers[i].download(t.reference[i].data(), t.reference[i].size());
    // Outputs start as NaN: one left there means the reference program did not write it.
    const ir::DType d = t.args[i].spec.dtype;
    if (d.is_float()) {
      for (int64_t e = 0; e < t.args[i].spec.elements; ++e)
        if (std::isnan(backend::measure_data::value_at(t.reference[i].data(), d, e)))
          throw std::runtime_error("the reference program left element " + std::to_string(e) +
                                   " of output '" + t.args[i].spec.name + "' unwritten (NaN)");
    }
  }
  return seconds;
}

struct RunReply {
  MeasureError error = MeasureError::none;
  std::string message;
  std::vector<double> costs;
};

/// Checks and times one program (see the file comment of measurer.hpp); tells the measurer on
/// `fd` when the program's first launch has finished.
inline RunReply serve_run(Decoder& r, WorkerTask& t, int device, int fd) {
  RunReply out;
  const std::string image = r.get_string();
  LaunchPlan plan = get_plan(r);
  const bool check = r.get<uint8_t>() != 0;
  const int64_t number = r.get<int64_t>(), repeat = r.get<int64_t>();
  const double min_repeat_ms = r.get<double>();
  const int64_t warmup = r.get<int64_t>();
  const double slow_limit_s = r.get<double>(), rtol = r.get<double>(), atol = r.get<double>();
  Context& ctx = Context::get(device);
  std::optional<Program> program;
  try {
    program.emplace(image, std::move(plan), ctx);
  } catch (const std::exception& e) {
    out.error = MeasureError::compile;
    out.message = e.what();
    return out;
  }
  const std::vector<CUdeviceptr> args = t.pointers();
  auto launch_all = [&] { program->launch(args); };
  auto first_run_done = [&] {
    Encoder done;
    done.put<uint8_t>(kFirstRunDone);
    (void)send_frame(fd, done.body());  // a closed socket fails the reply too
  };
  if (check) t.poison_outputs();
  const double first_launch = time_launches(launch_all, 1, ctx);
  first_run_done();
  if (check) {
    std::string diff = t.compare(rtol, atol);
    if (!diff.empty()) {
      out.error = MeasureError::wrong_answer;
      out.message = std::move(diff);
      return out;
    }
  }
  // The first launch of a module also loads its kernels (the driver loads them lazily): a
  // microsecond kernel would look slow. So the cutoff and the calibration use a later run,
  // unless the first launch was long enough to speak for itself and already slow.
  if (slow_limit_s > 0 && first_launch > slow_limit_s && first_launch >= kFirstLaunchCostMin) {
    out.costs = {first_launch};
    return out;
  }
  const double first = time_launches(launch_all, 1, ctx);
  if (slow_limit_s > 0 && first > slow_limit_s) {
    out.costs = {first};
    return out;
  }
  if (warmup > 0) (void)time_launches(launch_all, static_cast<int>(warmup), ctx);
  int64_t n = number;
  if (first > 0)
    n = std::max<int64_t>(n, static_cast<int64_t>(std::ceil(min_repeat_ms * 1e-3 / first)));
  n = std::min<int64_t>(n, 100000);
  for (int64_t k = 0; k < repeat; ++k)
    out.costs.push_back(time_launches(launch_all, static_cast<int>(n), ctx));
  return out;
}

/// The worker's loop: answers setups and runs until the measurer closes the socket. After a
/// kernel faulted the process's CUDA context is unusable; the worker says so and exits.
[[noreturn]] inline void worker_main(int fd, int device) {
  WorkerTask task;
  bool have_task = false;
  {
    Encoder hello;
    hello.put<uint8_t>(kHello);
    std::string why;
    const bool ok = device_available(&why) && device < device_count();
    hello.put<uint8_t>(ok);
    hello.put_string(ok ? device_info(device).name : why);
    if (!send_frame(fd, hello.body()) || !ok) ::_exit(0);
  }
  for (;;) {
    std::string msg;
    if (receive_frame(fd, msg, -1) != Received::frame) ::_exit(0);
    Encoder reply;
    bool fatal = false;
    try {
      Decoder r(msg);
      const uint8_t kind = r.get<uint8_t>();
      if (kind == kSetup) {
        have_task = false;
        double reference_seconds = 0;
        std::string error;
        try {
          reference_seconds = serve_setup(r, task, device);
          have_task = true;
        } catch (const std::exception& e) {
          error = e.what();
        }
        fatal = Context::get(device).needs_reset();
        reply.put<uint8_t>(have_task);
        reply.put_string(error);
        reply.put<double>(reference_seconds);
      } else if (kind == kRun) {
        RunReply out;
        if (!have_task) {
          out.error = MeasureError::unknown;
          out.message = "the GPU measurer's worker has no task";
        } else {
          try {
            out = serve_run(r, task, device, fd);
          } catch (const std::exception& e) {
            out.error = MeasureError::runtime;
            out.message = e.what();
          }
        }
        fatal = Context::get(device).needs_reset();
        reply.put<uint8_t>(kRunResult);
        reply.put<uint8_t>(static_cast<uint8_t>(out.error));
        reply.put_string(out.message);
        reply.put_count(out.costs.size());
        for (double c : out.costs) reply.put<double>(c);
      } else {
        ::_exit(2);
      }
    } catch (const std::exception&) {
      ::_exit(2);
    }
    reply.put<uint8_t>(fatal);
    if (!send_frame(fd, reply.body()) || fatal) ::_exit(0);
  }
}

/// Runs before main in every program that links this file: when started as a measurer's
/// worker, serve it and never return.
inline bool run_worker_if_asked() {
  const char* env = std::getenv(kWorkerEnv);
  if (!env || !*env) return false;
  int fd = -1, device = 0;
  if (std::sscanf(env, "%d:%d", &fd, &device) < 1 || fd < 0) return false;
  ::unsetenv(kWorkerEnv);
  worker_main(fd, device);
}

inline const bool worker_hook = run_worker_if_asked();

}  // namespace detail

// --- the measurer's side ------------------------------------------------------------------------

struct GpuMeasurer::Worker {
  /// The worker process and its socket (blocking: one request, one reply). Its output is not
  /// captured: it is the user's program, and what the CUDA driver prints goes where that
  /// program's output goes.
  backend::detail::ChildProcess process;
  std::string task;  // workload key of the task set up in it ("" for none)

  ~Worker() { stop(); }
  bool alive() const { return process.alive(); }
  int fd() const { return process.sock; }
  /// Ends the process and reaps it: it exits by itself when its socket closes; one that does
  /// not within a moment (a kernel that hangs) is killed. Returns how it ended ("" when there
  /// was no process).
  std::string stop() {
    const bool was_alive = process.alive();
    const int status = process.stop(/*grace_s=*/0.1);
    task.clear();
    return was_alive ? backend::detail::describe_end(status, "") : "";
  }
  /// Starts this executable again as the worker; returns "" or why it could not.
  std::string start(int device, double timeout_s) {
    stop();
    int sv[2];
    std::string error;
    if (!backend::detail::open_socket_pair(sv, error)) return error;
    // The child's end must survive exec: posix_spawn dups it onto itself without O_CLOEXEC.
    const std::string env = std::string(detail::kWorkerEnv) + "=" + std::to_string(sv[1]) + ":" +
                            std::to_string(device);
    std::vector<std::string> env_strings{env};
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, detail::kWorkerEnv, std::strlen(detail::kWorkerEnv)) != 0)
        env_strings.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string arg0 = "loom-cuda-measure-worker";
    char* argv[] = {arg0.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // dup2 onto itself clears FD_CLOEXEC in the child (POSIX.1-2024; glibc ≥ 2.29 does this).
    posix_spawn_file_actions_adddup2(&actions, sv[1], sv[1]);
    pid_t child = -1;
    const int rc = ::posix_spawn(&child, "/proc/self/exe", &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(sv[1]);
    if (rc != 0) {
      ::close(sv[0]);
      return std::string("posix_spawn of /proc/self/exe failed: ") + std::strerror(rc);
    }
    process.pid = child;
    process.sock = sv[0];
    std::string hello;
    const backend::detail::Received got = backend::detail::receive_frame(fd(), hello, timeout_s);
    if (got != backend::detail::Received::frame) {
      const std::string how = stop();
      return got == backend::detail::Received::timeout
                 ? "the worker process did not answer within " + std::to_string(timeout_s) +
                       " s (is /proc/self/exe a program that links loom's CUDA measurer?)"
                 : "the worker process ended before answering (" + how + ")";
    }
    backend::detail::Decoder r(hello);
    if (r.get<uint8_t>() != detail::kHello) {
      stop();
      return "the worker process sent something unexpected";
    }
    const bool ok = r.get<uint8_t>() != 0;
    const std::string what = r.get_string();
    if (!ok) {
      stop();
      return "no CUDA device in the worker process: " + what;
    }
    return {};
  }
};

struct GpuMeasurer::TaskData {
  std::vector<detail::ArgSpec> args;
  /// The setup message (inputs and reference, or the reference program), or why there is none.
  std::string setup;
  std::string error;
  double best_cost = search::kFailedCost;
};

LOOM_DECL GpuMeasurer::GpuMeasurer(search::MeasureOptions options, GpuMeasurerOptions gpu)
    : options_(std::move(options)), gpu_(std::move(gpu)) {
  std::string problems = search::measure_options_problems(options_);
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) problems += (problems.empty() ? "" : ", ") + what;
  };
  need(gpu_.reference_timeout_s > 0,
       "reference_timeout_s " + std::to_string(gpu_.reference_timeout_s) + " (must be > 0)");
  need(gpu_.worker_start_timeout_s > 0,
       "worker_start_timeout_s " + std::to_string(gpu_.worker_start_timeout_s) + " (must be > 0)");
  need(gpu_.device >= 0, "device " + std::to_string(gpu_.device) + " (must be ≥ 0)");
  LOOM_USER_CHECK(problems.empty(), "loom.cuda.E922")
      << "GpuMeasurer options out of range: " << problems;
  worker_ = std::make_unique<Worker>();
}

LOOM_DECL GpuMeasurer::~GpuMeasurer() = default;

LOOM_DECL std::string GpuMeasurer::device() const {
  // The driver answers without a context, so asking here keeps the process free of one.
  std::string why;
  if (!device_available(&why) || gpu_.device >= device_count()) return "";
  return device_info(gpu_.device).name;
}

namespace detail {

struct Built {
  std::optional<CompiledProgram> program;
  search::MeasureResult result;  // filled when the build failed
};

inline Built build_one(const Task& task, const sched::State& state,
                       const std::vector<ArgSpec>& args, const search::MeasureOptions& o,
                       const GpuMeasurerOptions& gpu) {
  Built b;
  const auto start = std::chrono::steady_clock::now();
  std::optional<lower::GpuProgram> g;
  try {
    g = lower::lower_gpu(state, task.target, "loom_measure");
    bool same = g->args.size() == args.size();
    for (std::size_t i = 0; same && i < args.size(); ++i)
      same = g->args[i]->num_elements() == args[i].spec.elements &&
             g->args[i]->dtype == args[i].spec.dtype;
    if (!same) throw std::runtime_error("the program's arguments are not the task's");
  } catch (const std::exception& e) {
    b.result.error = MeasureError::instantiation;
    b.result.error_message = e.what();
    b.result.compile_seconds = seconds_since(start);
    return b;
  }
  try {
    b.program = compile_program(*g, task.target.arch, gpu.nvrtc_options, gpu.image);
  } catch (const std::exception& e) {
    b.result.error = MeasureError::compile;
    b.result.error_message = e.what();
  }
  b.result.compile_seconds = seconds_since(start);
  if (b.program && b.result.compile_seconds > o.build_timeout_s) {
    b.program.reset();
    b.result.error = MeasureError::compile_timeout;
    b.result.error_message = "building took " + std::to_string(b.result.compile_seconds) +
                             " s, over build_timeout_s " + std::to_string(o.build_timeout_s);
  }
  return b;
}

/// A build process's one frame: the Built, program included.
inline std::string encode_built(const Built& b) {
  Encoder w;
  w.put<uint8_t>(b.program.has_value());
  w.put<double>(b.result.compile_seconds);
  if (b.program) {
    w.put_string(b.program->source);
    w.put_string(b.program->image);
    w.put<uint8_t>(static_cast<uint8_t>(b.program->kind));
    put_plan(w, b.program->plan);
  } else {
    w.put<uint8_t>(static_cast<uint8_t>(b.result.error));
    w.put_string(b.result.error_message);
  }
  return w.body();
}

inline Built decode_built(std::string_view body) {
  Decoder r(body);
  Built b;
  const bool has_program = r.get<uint8_t>() != 0;
  b.result.compile_seconds = r.get<double>();
  if (has_program) {
    CompiledProgram p;
    p.source = r.get_string();
    p.image = r.get_string();
    p.kind = static_cast<ImageKind>(r.get<uint8_t>());
    p.plan = get_plan(r);
    b.program = std::move(p);
  } else {
    b.result.error = static_cast<MeasureError>(r.get<uint8_t>());
    b.result.error_message = r.get_string();
  }
  return b;
}

/// Builds every program of a batch (build_one), each in a forked process of its own, at most
/// `parallelism` at once. NVRTC cannot be interrupted and its memory is not bounded in-process,
/// so a build that runs away must run away in a process that can be killed: each gets
/// MeasureOptions::memory_limit_mb (allocations past it fail, the build with them) and is killed
/// after build_timeout_s (compile_timeout). A build process that dies (NVRTC aborts, a fault)
/// fails its program alone, as `compile` with how it died and the end of its output.
inline std::vector<Built> build_in_processes(const Task& task,
                                             const std::vector<sched::State>& states,
                                             const std::vector<ArgSpec>& args,
                                             const search::MeasureOptions& o,
                                             const GpuMeasurerOptions& gpu, unsigned parallelism) {
  using backend::detail::ChildProcess;
  using clock = std::chrono::steady_clock;
  struct Builder {
    std::size_t index = 0;
    ChildProcess process;
    clock::time_point started;
    std::optional<Built> built;
  };
  std::vector<Built> built(states.size());
  std::vector<std::unique_ptr<Builder>> live;
  std::size_t next = 0;
  auto fail = [&](std::size_t i, MeasureError error, std::string message, double seconds) {
    built[i].program.reset();
    built[i].result.error = error;
    built[i].result.error_message = std::move(message);
    built[i].result.compile_seconds = seconds;
  };
  // NVRTC is loaded here, once, rather than in every build process (a failure to load it is each
  // build's compile error, as before).
  (void)nvrtc_available();
  while (next < states.size() || !live.empty()) {
    while (live.size() < parallelism && next < states.size()) {
      auto b = std::make_unique<Builder>();
      b->index = next++;
      std::vector<int> others;
      for (const auto& l : live) others.insert(others.end(), {l->process.sock, l->process.output});
      std::string error;
      const std::size_t index = b->index;
      const bool ok = backend::detail::fork_child(
          b->process, others,
          [&](int sock) {
            // A limit that cannot be set leaves the build unlimited, as outside Linux.
            std::string no_limit;
            backend::detail::limit_memory_growth(
                static_cast<std::size_t>(o.memory_limit_mb * 1048576.0), no_limit);
            Built one;
            try {
              if (o.fault_injection_hook) o.fault_injection_hook(index, 0);
              one = build_one(task, states[index], args, o, gpu);
            } catch (const std::exception& e) {  // std::bad_alloc past the limit, mostly
              one.program.reset();
              one.result.error = MeasureError::compile;
              one.result.error_message = e.what();
            }
            send_frame(sock, encode_built(one));
            ::_exit(0);
          },
          error);
      if (!ok) {
        fail(index, MeasureError::unknown, "cannot start a build process: " + error, 0);
        continue;
      }
      b->started = clock::now();
      live.push_back(std::move(b));
    }
    if (live.empty()) continue;

    // Wait for a frame, an end of file or the nearest deadline.
    const auto now = clock::now();
    double wait = o.build_timeout_s;
    std::vector<pollfd> fds;
    std::vector<std::pair<Builder*, bool>> owners;  // (builder, is its socket)
    for (const auto& b : live) {
      wait = std::min(wait,
                      o.build_timeout_s - std::chrono::duration<double>(now - b->started).count());
      if (!b->process.sock_eof) {
        fds.push_back({b->process.sock, POLLIN, 0});
        owners.emplace_back(b.get(), true);
      }
      if (!b->process.output_eof) {
        fds.push_back({b->process.output, POLLIN, 0});
        owners.emplace_back(b.get(), false);
      }
    }
    const int n = ::poll(fds.data(), fds.size(), backend::detail::poll_ms(wait));
    if (n < 0 && errno != EINTR) {
      const std::string why = std::string("poll failed: ") + std::strerror(errno);
      for (const auto& b : live) {
        b->process.reap(/*kill_first=*/true);
        fail(b->index, MeasureError::unknown, why, seconds_since(b->started));
      }
      live.clear();
      continue;
    }
    for (std::size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      if (owners[k].second)
        owners[k].first->process.read_socket();
      else
        owners[k].first->process.read_output();
    }

    // Settle the builders that are done.
    for (std::size_t k = 0; k < live.size();) {
      Builder& b = *live[k];
      std::string body;
      while (!b.built && b.process.next_frame(body)) {
        try {
          b.built = decode_built(body);
        } catch (const backend::detail::FrameError&) {
          // Only build_in_processes's child writes this frame, so a short one is a bug: the
          // child's end of file says what happened to its program.
        }
      }
      const double seconds = seconds_since(b.started);
      bool done = true;
      if (b.built) {
        b.process.reap(/*kill_first=*/true);
        built[b.index] = std::move(*b.built);
        if (!built[b.index].program)
          backend::detail::name_memory_limit(built[b.index].result.error_message,
                                             o.memory_limit_mb);
      } else if (b.process.sock_eof) {
        const int status = b.process.reap(/*kill_first=*/false);
        std::string message =
            backend::detail::describe_death(status, "while building", b.process.output_tail);
        backend::detail::name_memory_limit(message, o.memory_limit_mb);
        fail(b.index, MeasureError::compile, "the build process ended without a result: " + message,
             seconds);
      } else if (seconds >= o.build_timeout_s) {
        b.process.reap(/*kill_first=*/true);
        fail(b.index, MeasureError::compile_timeout,
             "killed after building for longer than " +
                 ::loom::detail::format_seconds(o.build_timeout_s) + " s (build_timeout_s)",
             seconds);
      } else {
        done = false;
      }
      if (done)
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      else
        ++k;
    }
  }
  return built;
}

/// The setup message of a task: host inputs and the interpreter's outputs when the DAG is small,
/// else the seed and the default GPU schedule, compiled.
inline std::string make_setup(const Task& task, const std::vector<ArgSpec>& args,
                              const search::MeasureOptions& o, const GpuMeasurerOptions& gpu) {
  Encoder w;
  w.put<uint8_t>(kSetup);
  w.put_count(args.size());
  for (const ArgSpec& a : args) put_arg(w, a);
  if (task.dag->flop_count() <= o.interpreter_flop_limit) {
    std::vector<std::vector<unsigned char>> data(args.size());
    std::vector<void*> ptrs;
    for (std::size_t i = 0; i < args.size(); ++i) {
      data[i].resize(std::max<std::size_t>(args[i].bytes, 1));
      if (!args[i].is_output)
        backend::measure_data::fill_random(data[i].data(), args[i].spec.dtype,
                                           args[i].spec.elements, gpu.seed + i);
      ptrs.push_back(data[i].data());
    }
    evaluate(*task.dag, ptrs);
    w.put<uint8_t>(0);
    for (std::size_t i = 0; i < args.size(); ++i)
      w.put_string(std::string_view(reinterpret_cast<const char*>(data[i].data()), args[i].bytes));
  } else {
    const CompiledProgram ref =
        compile_program(lower::lower_gpu(sched::default_schedule(task.dag, task.target),
                                         task.target, "loom_reference"),
                        task.target.arch, gpu.nvrtc_options, gpu.image);
    w.put<uint8_t>(1);
    w.put<uint64_t>(gpu.seed);
    w.put_string(ref.image);
    put_plan(w, ref.plan);
  }
  return w.body();
}

}  // namespace detail

LOOM_DECL std::vector<search::MeasureResult> GpuMeasurer::measure_each(
    const Task& task, const std::vector<sched::State>& states, const ResultCallback& on_result) {
  using namespace detail;
  LOOM_USER_CHECK(task.target.is_cuda(), "loom.cuda.E923")
      << "GpuMeasurer measures CUDA tasks; this task targets " << task.target.to_string()
      << " (use cpu_jit::LocalMeasurer, or Task(dag, Target::cuda(\"sm_90\")))";
  const auto wall_start = std::chrono::steady_clock::now();
  const search::MeasureOptions& o = options_;
  ++stats_.batches;
  stats_.programs += states.size();

  // The task's data, made once: the argument list and the reference.
  std::shared_ptr<TaskData>& slot = tasks_[task.workload_key()];
  if (!slot) {
    slot = std::make_shared<TaskData>();
    for (const ir::Tensor& t : task.dag->inputs())
      slot->args.push_back({{t.name(), t.dtype(), t.shape(), t.num_elements()},
                            static_cast<std::size_t>(t.num_elements() * t.dtype().bytes()),
                            false});
    for (const ir::Tensor& t : task.dag->outputs())
      slot->args.push_back({{t.name(), t.dtype(), t.shape(), t.num_elements()},
                            static_cast<std::size_t>(t.num_elements() * t.dtype().bytes()),
                            true});
    const auto start = std::chrono::steady_clock::now();
    try {
      slot->setup = make_setup(task, slot->args, o, gpu_);
    } catch (const std::exception& e) {
      slot->error = std::string("no reference output for this task: ") + e.what();
    }
    stats_.reference_seconds += seconds_since(start);
  }
  TaskData& td = *slot;

  std::vector<search::MeasureResult> results(states.size());
  const std::vector<Built> built = build_in_processes(
      task, states, td.args, o, gpu_,
      o.build_parallelism > 0 ? static_cast<unsigned>(o.build_parallelism)
                              : static_cast<unsigned>(::loom::detail::available_cores()));
  for (std::size_t i = 0; i < states.size(); ++i) {
    stats_.compile_seconds += built[i].result.compile_seconds;
    if (!built[i].program) {
      results[i] = built[i].result;
      if (on_result) on_result(i, results[i]);
    }
  }

  std::string setup_error = td.error;
  for (std::size_t i = 0; i < states.size(); ++i) {
    if (!built[i].program) continue;
    search::MeasureResult& res = results[i];
    res.compile_seconds = built[i].result.compile_seconds;
    const auto run_start = std::chrono::steady_clock::now();
    auto finish = [&] {
      res.run_seconds = seconds_since(run_start);
      stats_.run_seconds += res.run_seconds;
      if (on_result) on_result(i, res);
    };
    // A worker with this task set up.
    if (setup_error.empty() && (!worker_->alive() || worker_->task != task.workload_key())) {
      if (!worker_->alive()) {
        ++stats_.worker_starts;
        const std::string why = worker_->start(gpu_.device, gpu_.worker_start_timeout_s);
        if (!why.empty()) {
          // The first start failing means there is nothing to measure on: say so at once. A
          // later one (after a crash) fails the programs of this batch.
          LOOM_USER_CHECK(stats_.worker_starts > 1, "loom.cuda.E924")
              << "GpuMeasurer could not start its worker process: " << why;
          setup_error = "could not restart the GPU measurer's worker process: " + why;
        }
      }
      if (setup_error.empty()) {
        // The worker drops its task when a setup arrives, whether or not the setup succeeds.
        worker_->task.clear();
        const auto start = std::chrono::steady_clock::now();
        std::string reply;
        Received got = send_frame(worker_->fd(), td.setup)
                           ? receive_frame(worker_->fd(), reply, gpu_.reference_timeout_s)
                           : Received::closed;
        stats_.reference_seconds += seconds_since(start);
        if (got != Received::frame) {
          const std::string how = worker_->stop();
          setup_error = got == Received::timeout
                            ? "the reference took longer than reference_timeout_s"
                            : "the worker died while computing the reference (" + how + ")";
        } else {
          Decoder r(reply);
          const bool ok = r.get<uint8_t>() != 0;
          const std::string error = r.get_string();
          // The reference is a correct program: no program worth timing fully is many times
          // slower than it, even before the first one is measured.
          const double reference_seconds = r.get<double>();
          if (reference_seconds > 0) td.best_cost = std::min(td.best_cost, reference_seconds);
          const bool fatal = r.get<uint8_t>() != 0;
          if (fatal) worker_->stop();
          if (ok)
            worker_->task = task.workload_key();
          else
            setup_error = "no reference output for this task: " + error;
        }
      }
    }
    if (!setup_error.empty()) {
      res.error = MeasureError::unknown;
      res.error_message = setup_error;
      finish();
      continue;
    }
    if (o.fault_injection_hook) o.fault_injection_hook(i, 1);
    Encoder w;
    w.put<uint8_t>(kRun);
    w.put_string(built[i].program->image);
    put_plan(w, built[i].program->plan);
    w.put<uint8_t>(o.check_correctness);
    w.put<int64_t>(o.number);
    w.put<int64_t>(o.repeat);
    w.put<double>(o.min_repeat_ms);
    w.put<int64_t>(o.warmup);
    w.put<double>(o.slow_program_factor > 0 && td.best_cost < search::kFailedCost
                      ? o.slow_program_factor * td.best_cost
                      : 0);
    w.put<double>(o.rtol);
    w.put<double>(o.atol);
    // Until the first launch is done, a program may run slow_run_limit (counted from the
    // request; the task's best before any program is its reference program's time, where the
    // worker ran one); then up to run_timeout_s from the request in all.
    const double slow_limit = search::slow_run_limit(td.best_cost, o);
    std::string reply;
    Received got =
        send_frame(worker_->fd(), w.body())
            ? receive_frame(worker_->fd(), reply, slow_limit > 0 ? slow_limit : o.run_timeout_s)
            : Received::closed;
    const bool killed_in_first_run = got == Received::timeout && slow_limit > 0;
    if (got == Received::frame && reply.size() == 1 &&
        static_cast<uint8_t>(reply[0]) == kFirstRunDone) {
      const double left = o.run_timeout_s - seconds_since(run_start);
      got = left > 0 ? receive_frame(worker_->fd(), reply, left) : Received::timeout;
    }
    // Anything but a run's result from the worker: treat it as dead (Decoder would throw).
    if (got == Received::frame && (reply.empty() || static_cast<uint8_t>(reply[0]) != kRunResult))
      got = Received::closed;
    if (got != Received::frame) {
      const std::string how = worker_->stop();
      res.error = got == Received::timeout ? MeasureError::run_timeout : MeasureError::runtime;
      res.error_message =
          got == Received::timeout
              ? search::run_kill_message(killed_in_first_run ? slow_limit : o.run_timeout_s,
                                         td.best_cost, o) +
                    "; its worker was killed"
              : "the worker process died while running the program (" + how + ")";
      finish();
      continue;
    }
    Decoder r(reply);
    (void)r.get<uint8_t>();  // kRunResult
    res.error = static_cast<MeasureError>(r.get<uint8_t>());
    res.error_message = r.get_string();
    res.costs.resize(r.get_count(kMaxCount));
    for (double& c : res.costs) c = r.get<double>();
    if (r.get<uint8_t>() != 0) worker_->stop();  // its context is gone with the fault
    if (res.ok())
      td.best_cost = std::min(td.best_cost, *std::min_element(res.costs.begin(), res.costs.end()));
    finish();
  }
  stats_.wall_seconds += seconds_since(wall_start);
  return results;
}

}  // namespace cuda
LOOM_END_NAMESPACE
