// Bodies of loom/backend/llvm/measurer.hpp.
#include "loom/backend/llvm/measurer.hpp"

#include "loom/backend/llvm/codegen.hpp"
#include "loom/dag/evaluate.hpp"
#include "loom/detail/clock.hpp"
#include "loom/lower/lower.hpp"
#include "loom/runtime/buffer.hpp"
#include "loom/runtime/parallel.hpp"
#include "loom/sched/default_schedule.hpp"
#include "loom/backend/measure_data.hpp"
#include "loom/sched/layout_rewrite.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif
#if defined(__linux__)
#include <sys/prctl.h>
#endif

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {

/// One task's inputs and reference outputs, in one shared anonymous mapping: inputs first, then
/// (from a page boundary, so that a reference child can write-protect the inputs alone) the
/// reference outputs. Mapped before any child is forked; children see it without copying.
struct LocalMeasurer::TaskData {
  struct Arg {
    std::string name;
    ir::DType dtype;
    std::vector<int64_t> shape;
    int64_t elements = 1;
    size_t bytes = 0;
    size_t offset = 0;  ///< into the mapping: the input's data, or the output's reference
    bool is_output = false;
  };
  std::vector<Arg> args;
  unsigned char* base = nullptr;
  size_t size = 0;
  size_t outputs_offset = 0;  ///< page-aligned start of the reference outputs
  /// Empty when the mapping failed; then every program of the task is `unknown` with this.
  std::string map_error;
  bool reference_tried = false;
  bool reference_ok = false;
  std::string reference_error;
  /// The lowest cost measured for the task so far (0: none yet); children read the value it had
  /// when they were forked (MeasureOptions::slow_program_factor).
  double best_cost = 0;
  /// Seconds each successful build of the task took, time stopped excluded
  /// (MeasureOptions::slow_build_kill_factor).
  std::vector<double> build_seconds;

  TaskData() = default;
  TaskData(const TaskData&) = delete;
  TaskData& operator=(const TaskData&) = delete;
  ~TaskData() {
    if (base) munmap(base, size);
  }
  void* data(size_t arg) const { return base + args[arg].offset; }
};

namespace measurer_detail {

using backend::measure_data::compare_output;
using backend::measure_data::coordinates;
using backend::measure_data::fill_random;
using backend::measure_data::poison;

using clock = std::chrono::steady_clock;
using search::MeasureError;
using search::MeasureResult;

using ::loom::detail::format_seconds;
using ::loom::detail::seconds_since;

inline std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGTRAP: return "SIGTRAP";
    case SIGPIPE: return "SIGPIPE";
    case SIGXCPU: return "SIGXCPU";
    case SIGSYS: return "SIGSYS";
    default: return "signal " + std::to_string(sig);
  }
}

/// Cores this process may run on.
inline int available_cores() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

// --- the child → parent protocol -------------------------------------------------------------
//
// Frames on a stream socket: u32 length, then the body. Bodies: 'B' f64 compile_seconds (built,
// waiting for the go byte); 'F' (the first, checked call has returned); 'R' i32 error,
// f64 compile_seconds, f64 run_seconds, u8 packed,
// u32 n, n × f64 costs, u32 m, m message bytes (the final result). The parent answers 'B' with
// one byte, 'g'.

constexpr char kBuilt = 'B';
constexpr char kFirstRunDone = 'F';
constexpr char kResult = 'R';
constexpr size_t kMaxMessage = 8192;

class Encoder {
 public:
  explicit Encoder(char kind) { bytes_.push_back(kind); }
  template <class T>
  void put(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_string(const std::string& s) {
    const uint32_t n = static_cast<uint32_t>(std::min(s.size(), kMaxMessage));
    put(n);
    bytes_.append(s.data(), n);
  }
  std::string frame() const {
    const uint32_t n = static_cast<uint32_t>(bytes_.size());
    std::string out(reinterpret_cast<const char*>(&n), sizeof n);
    return out + bytes_;
  }

 private:
  std::string bytes_;
};

class Decoder {
 public:
  Decoder(const char* p, size_t n) : p_(p), end_(p + n) {}
  template <class T>
  T get() {
    T v{};
    if (static_cast<size_t>(end_ - p_) < sizeof v) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
      ok_ = false;
      return {};
    }
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  bool ok() const { return ok_; }

 private:
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

#if defined(MSG_NOSIGNAL)
constexpr int kSendFlags = MSG_NOSIGNAL;  // a dead peer is an error code, not a SIGPIPE
#else
constexpr int kSendFlags = 0;  // the sockets get SO_NOSIGPIPE instead (BSDs, macOS)
#endif

/// Writes all of `s`; false when the peer is gone.
inline bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, kSendFlags);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
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
  Encoder e(kResult);
  e.put(static_cast<int32_t>(r.error));
  e.put(r.compile_seconds);
  e.put(r.run_seconds);
  e.put(static_cast<uint8_t>(r.packed));
  e.put(static_cast<uint32_t>(r.costs.size()));
  for (double c : r.costs) e.put(c);
  e.put_string(r.message);
  return e.frame();
}

inline bool decode_result(Decoder& d, ChildResult& r) {
  r.error = static_cast<MeasureError>(d.get<int32_t>());
  r.compile_seconds = d.get<double>();
  r.run_seconds = d.get<double>();
  r.packed = d.get<uint8_t>() != 0;
  const uint32_t n = d.get<uint32_t>();
  if (!d.ok() || n > (1u << 20)) return false;
  r.costs.resize(n);
  for (double& c : r.costs) c = d.get<double>();
  r.message = d.get_string();
  return d.ok();
}

/// The parent's side of one child: its socket, its stderr, and what it has said so far.
struct ChildChannel {
  pid_t pid = -1;
  int sock = -1;
  int err = -1;
  bool sock_eof = false;
  bool err_eof = false;
  std::string inbox;
  std::string err_tail;  ///< the last kErrTail bytes the child wrote to stderr
  static constexpr size_t kErrTail = 4096;

  /// Reads what is available on `fd` (non-blocking); false at end of file or on an error.
  static bool drain(int fd, std::string& into, size_t keep_tail) {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        into.append(buf, static_cast<size_t>(n));
        if (keep_tail && into.size() > 2 * keep_tail) into.erase(0, into.size() - keep_tail);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
  }
  void read_sock() {
    if (!sock_eof && !drain(sock, inbox, 0)) sock_eof = true;
  }
  void read_err() {
    if (!err_eof && !drain(err, err_tail, kErrTail)) err_eof = true;
  }
  /// Pops one complete frame from the inbox.
  bool next_frame(std::string& body) {
    uint32_t n = 0;
    if (inbox.size() < sizeof n) return false;
    std::memcpy(&n, inbox.data(), sizeof n);
    if (inbox.size() < sizeof n + n) return false;
    body = inbox.substr(sizeof n, n);
    inbox.erase(0, sizeof n + n);
    return true;
  }
  void close_fds() {
    if (sock >= 0) ::close(sock);
    if (err >= 0) ::close(err);
    sock = err = -1;
  }
  /// Waits for the child to end (after SIGKILL if `kill_first`), closes the descriptors after
  /// reading what is left of its stderr, and returns its wait status (-1 if unknown).
  int reap(bool kill_first) {
    if (pid <= 0) return -1;
    if (kill_first) ::kill(pid, SIGKILL);
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(pid, &status, 0);
    } while (r < 0 && errno == EINTR);
    pid = -1;
    if (err >= 0) {
      // The child is gone, so its stderr ends; drain() stops at end of file (or EAGAIN if a
      // grandchild still held the pipe).
      read_err();
    }
    close_fds();
    return r < 0 ? -1 : status;
  }
};

/// "while building" → a description of how the child ended, plus the useful end of its stderr
/// (LLVM's "LLVM ERROR: ..." line where there is one).
inline std::string describe_death(int status, const std::string& while_doing,
                                  const std::string& err_tail) {
  std::string what;
  if (status == -1)
    what = "ended without a result " + while_doing + " (its exit status is unknown)";
  else if (WIFSIGNALED(status))
    what = "killed by " + signal_name(WTERMSIG(status)) + " " + while_doing;
  else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    what = "exited with status " + std::to_string(WEXITSTATUS(status)) + " " + while_doing;
  else
    what = "exited without a result " + while_doing;
  const size_t llvm = err_tail.rfind("LLVM ERROR: ");
  if (llvm != std::string::npos) {
    size_t end = err_tail.find('\n', llvm);
    if (end == std::string::npos) end = err_tail.size();
    return "LLVM error: " + err_tail.substr(llvm + 12, end - llvm - 12) + " (" + what + ")";
  }
  // Otherwise the last few non-empty lines of its output, if any.
  std::vector<std::string> lines;
  std::istringstream in(err_tail);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  if (lines.empty()) return what;
  std::string last;
  for (size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i)
    last += (last.empty() ? "" : " | ") + lines[i];
  if (last.size() > 600) last = "..." + last.substr(last.size() - 600);
  return what + "; its output ended with: " + last;
}

/// Forks a child with a socket and a captured stdout/stderr. In the child, closes
/// `close_in_child`, makes the captured pipe its stdout and stderr and calls `body(socket)`,
/// which should end with _exit (if it returns or throws, the child exits with status 1; it never
/// returns into the caller's code). Returns false (with `error`) when the socket, the pipe or fork
/// fails.
template <class Body>
bool spawn(ChildChannel& ch, const std::vector<int>& close_in_child, Body&& body,
           std::string& error) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    error = std::string("socketpair failed: ") + std::strerror(errno);
    return false;
  }
  int ep[2];
  if (::pipe(ep) != 0) {
    error = std::string("pipe failed: ") + std::strerror(errno);
    ::close(sv[0]);
    ::close(sv[1]);
    return false;
  }
  // Programs another thread of the tuner execs must not inherit these.
  for (int fd : {sv[0], sv[1], ep[0], ep[1]}) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
#if !defined(MSG_NOSIGNAL) && defined(SO_NOSIGPIPE)
  const int on = 1;
  for (int fd : {sv[0], sv[1]}) ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof on);
#endif
  const pid_t parent = ::getpid();
  // Nothing buffered may be written twice: the child ends with _exit, which flushes nothing,
  // but a child that dies in a library's own exit path could.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    error = std::string("fork failed: ") + std::strerror(errno);
    for (int fd : {sv[0], sv[1], ep[0], ep[1]}) ::close(fd);
    return false;
  }
  if (pid == 0) {
#if defined(__linux__)
    // A tuner that dies takes its measurements with it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(0);
#else
    (void)parent;
#endif
    ::close(sv[0]);
    ::close(ep[0]);
    for (int fd : close_in_child) ::close(fd);
    // The child's output is captured (LLVM prints its fatal errors there) and kept out of the
    // tuner's own output.
    ::dup2(ep[1], STDOUT_FILENO);
    ::dup2(ep[1], STDERR_FILENO);
    ::close(ep[1]);
    // Crash handlers the parent installed (a test framework's, a tuner's) must not run in the
    // child: it is meant to die of its crash, and the parent reads the signal.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS})
      ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    try {
      body(sv[1]);
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(sv[1]);
  ::close(ep[1]);
  ::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  ::fcntl(ep[0], F_SETFL, ::fcntl(ep[0], F_GETFL) | O_NONBLOCK);
  ch.pid = pid;
  ch.sock = sv[0];
  ch.err = ep[0];
  return true;
}

/// Milliseconds for poll() until `seconds` from now (rounded up, at least 0).
inline int poll_ms(double seconds) {
  if (seconds <= 0) return 0;
  return static_cast<int>(std::min(std::ceil(seconds * 1e3), 3.6e6));
}

// --- inputs, outputs and comparison ----------------------------------------------------------

/// Scratch memory of the child on kernel_buffer_alignment, as applications are told to hold
/// kernel buffers (never freed: the child ends with _exit).
inline void* child_alloc(size_t bytes) {
  constexpr size_t align = kernel_buffer_alignment;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

// --- building a program in the child ---------------------------------------------------------

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

/// Bytes written between runs when flushing caches: twice the last-level cache, at most
/// 128 MiB, or 64 MiB when the system does not say. The cap matters: some systems report the
/// whole socket's L3 (256 MiB on a 64-core EPYC), of which one core's share is far smaller.
inline size_t cache_flush_bytes() {
  long llc = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return llc > 0 ? std::min(2 * static_cast<size_t>(llc), size_t{128} << 20) : size_t{64} << 20;
}

/// Whether `o` asks for a task's constant inputs to be evicted before each timed call (flush_cache,
/// which evicts everything, wins).
inline bool evicts_constants(const search::MeasureOptions& o) {
  return o.cold_constants.value_or(false) && !o.flush_cache;
}

/// Writes back and drops every cache line of [data, data + bytes) from every level of the
/// hierarchy, as a buffer last touched long ago would be (MeasureOptions::cold_constants).
inline void evict_from_caches(const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
#if defined(__x86_64__) || defined(__i386__)
  for (size_t b = 0; b < bytes; b += 64) _mm_clflush(p + b);
  _mm_mfence();
#elif defined(__aarch64__)
  for (size_t b = 0; b < bytes; b += 64) asm volatile("dc civac, %0" ::"r"(p + b) : "memory");
  asm volatile("dsb ish" ::: "memory");
#else
  // No portable way to drop lines: write a buffer larger than the last-level cache instead.
  static_cast<void>(p);
  static_cast<void>(bytes);
  static std::vector<unsigned char> flush(cache_flush_bytes());
  static unsigned char round = 0;
  std::memset(flush.data(), ++round, flush.size());
  static_cast<void>(*static_cast<volatile unsigned char*>(flush.data() + flush.size() / 2));
#endif
}

/// Runs, checks and times a built program in the child (see MeasureOptions for the knobs).
///
/// The first call runs on fresh poisoned outputs and is checked; it counts as the first warm-up
/// run. Without cache flushing, `number` starts at options.number and is raised (to the
/// estimate that reaches min_repeat_ms, at least doubling) until one repeat lasts
/// min_repeat_ms; that repeat is the first cost. With cache flushing every repeat is one call
/// after writing a buffer larger than the last-level cache.
inline void measure_child_run(const search::MeasureOptions& o, const LocalMeasurer::TaskData& td,
                              const ChildProgram& prog,
                              const std::vector<std::string>& constant_inputs, int sock,
                              ChildResult& r) {
  const auto t0 = clock::now();
  if (o.num_threads > 0) runtime::set_num_threads(o.num_threads);
  std::vector<void*> args(td.args.size());
  std::vector<size_t> outputs;
  for (size_t i = 0; i < td.args.size(); ++i) {
    const auto& a = td.args[i];
    if (a.is_output) {
      args[i] = child_alloc(a.bytes);
      poison(args[i], a.dtype, a.elements);
      outputs.push_back(i);
    } else {
      args[i] = td.data(i);
    }
  }
  auto finish = [&] { r.run_seconds = seconds_since(t0); };
  for (const ChildProgram::Pack& p : prog.packs) {
    void* packed = child_alloc(p.packed_bytes);
    void* pack_args[2] = {td.data(static_cast<size_t>(p.argument)), packed};
    if (const int32_t rc = p.kernel.fn(pack_args); rc != 0) {
      r.error = MeasureError::runtime;
      r.message = "the pack kernel of constant input '" + p.input + "' returned error code " +
                  std::to_string(rc);
      return finish();
    }
    args[static_cast<size_t>(p.argument)] = packed;
  }
  // One-off costs that are not the program's, paid before its first call: that call decides
  // whether the program is timed at all (slow_program_factor). A forked child has no pool
  // workers yet (the first parallel loop starts them), and its pages of the shared inputs are
  // not mapped yet. On 2 threads, starting the worker made the first call of a 12 µs GEMM take
  // 110–200 µs, and 2 programs in 3 of a tuning run were judged by that call alone.
  // The inputs lie before the reference outputs in the mapping (task_data).
  const volatile unsigned char* inputs = td.base;
  for (size_t b = 0; b < td.outputs_offset; b += 4096) (void)inputs[b];
  runtime::parallel_for(runtime::num_threads(), [](int64_t, int64_t) {});
  void** argv = args.data();
  const kernel_fn fn = prog.kernel.fn;
  const auto first_start = clock::now();
  const int32_t first_rc = fn(argv);
  const double first_seconds = seconds_since(first_start);
  // Ends the parent's slow_run_kill_factor window.
  write_all(sock, Encoder(kFirstRunDone).frame());
  if (const int32_t rc = first_rc; rc != 0) {
    r.error = MeasureError::runtime;
    r.message = "the kernel returned error code " + std::to_string(rc);
    return finish();
  }
  if (o.check_correctness) {
    for (size_t i : outputs) {
      std::string diff =
          compare_output({td.args[i].name, td.args[i].dtype, td.args[i].shape, td.args[i].elements},
                         args[i], td.data(i), o.rtol, o.atol);
      if (!diff.empty()) {
        r.error = MeasureError::wrong_answer;
        r.message = std::move(diff);
        return finish();
      }
    }
  }
  // A program far slower than the task's best is not worth timing precisely: its checked run
  // is its cost (the first call also pays cold caches, so this errs on the slow side). A long
  // first run is trusted at a tighter factor: its one-off costs are a negligible part of it.
  const bool long_first_run = o.min_repeat_ms > 0 && first_seconds >= o.min_repeat_ms * 1e-3;
  const double slow_factor = long_first_run && o.slow_long_program_factor > 0
                                 ? std::min(o.slow_program_factor, o.slow_long_program_factor)
                                 : o.slow_program_factor;
  if (o.slow_program_factor > 0 && td.best_cost > 0 && first_seconds > slow_factor * td.best_cost) {
    // A short first run can be mostly one-off costs: a BERT layer's attention-times-V product
    // (about 80 µs) sometimes took 1-2 ms on its first call, and once the task's best was that
    // fast every later measurement of its top programs was that single call. A second call
    // decides; a long first run has no such excuse.
    double seconds = first_seconds;
    if (!long_first_run) {
      const auto start = clock::now();
      const int32_t second_rc = fn(argv);
      seconds = std::min(seconds, seconds_since(start));
      if (second_rc != 0) {
        r.error = MeasureError::runtime;
        r.message = "the kernel returned error code " + std::to_string(second_rc);
        return finish();
      }
    }
    if (seconds > slow_factor * td.best_cost) {
      r.costs.push_back(seconds);
      return finish();
    }
  }
  int32_t rc = 0;
  for (int w = 1; w < o.warmup; ++w) rc |= fn(argv);
  auto time_calls = [&](int64_t number) {
    const auto start = clock::now();
    for (int64_t k = 0; k < number; ++k) rc |= fn(argv);
    return seconds_since(start);
  };
  std::vector<std::pair<const void*, size_t>> constants;
  if (evicts_constants(o)) {
    for (size_t i = 0; i < td.args.size(); ++i) {
      const auto& a = td.args[i];
      if (a.is_output || std::find(constant_inputs.begin(), constant_inputs.end(), a.name) ==
                             constant_inputs.end())
        continue;
      size_t bytes = a.bytes;
      for (const ChildProgram::Pack& p : prog.packs)
        if (p.argument == static_cast<int>(i)) bytes = p.packed_bytes;
      constants.emplace_back(args[i], bytes);
    }
  }
  // A task without constants has nothing to evict: timed warm, like any other.
  if (!constants.empty()) {
    // A repeat is the mean of single calls, each after an eviction (untimed), that add up to
    // min_repeat_ms: one cold call of a 20 µs kernel is mostly noise.
    const double min_repeat_s = o.min_repeat_ms * 1e-3;
    for (int k = 0; k < o.repeat; ++k) {
      double total = 0;
      int64_t calls = 0;
      do {
        for (const auto& [data, bytes] : constants) evict_from_caches(data, bytes);
        total += time_calls(1);
        ++calls;
      } while (calls < o.number || (total < min_repeat_s && calls < 100000));
      r.costs.push_back(total / static_cast<double>(calls));
    }
  } else if (o.flush_cache) {
    const size_t flush_bytes = cache_flush_bytes();
    auto* flush = static_cast<unsigned char*>(child_alloc(flush_bytes));
    for (int k = 0; k < o.repeat; ++k) {
      std::memset(flush, k + 1, flush_bytes);
      // A read the compiler must perform keeps the writes.
      static_cast<void>(*static_cast<volatile unsigned char*>(flush + flush_bytes / 2));
      r.costs.push_back(time_calls(1));
    }
  } else {
    const double min_repeat_s = o.min_repeat_ms * 1e-3;
    int64_t number = std::max(1, o.number);
    // A checked run long enough to be a repeat is one (MeasureOptions::warmup).
    const bool first_is_repeat = long_first_run && o.warmup <= 1 && o.number <= 1;
    if (first_is_repeat) r.costs.push_back(first_seconds);
    double t = first_is_repeat ? first_seconds : time_calls(number);
    while (t < min_repeat_s) {
      const double per_call = std::max(t / static_cast<double>(number), 1e-9);
      const double wanted = std::ceil(1.1 * min_repeat_s / per_call);
      number =
          static_cast<int64_t>(std::min(std::max(wanted, 2.0 * static_cast<double>(number)), 1e9));
      t = time_calls(number);
    }
    if (!first_is_repeat) r.costs.push_back(t / static_cast<double>(number));
    for (int k = 1; k < o.repeat; ++k)
      r.costs.push_back(time_calls(number) / static_cast<double>(number));
  }
  if (rc != 0) {
    r.error = MeasureError::runtime;
    r.message = "the kernel returned an error code while being timed";
    r.costs.clear();
  }
  finish();
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
    if (o.fault_injection_hook) o.fault_injection_hook(index, 0);
    const auto t0 = clock::now();
    ChildProgram prog;
    r.error = build_child_program(task, state, local.constant_inputs, prog, r.message);
    r.compile_seconds = seconds_since(t0);
    r.packed = !prog.packs.empty();
    if (r.error != MeasureError::none) {
      write_all(sock, encode_result(r));
      ::_exit(0);
    }
    built = true;
    Encoder b(kBuilt);
    b.put(r.compile_seconds);
    if (!write_all(sock, b.frame())) ::_exit(0);
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
  write_all(sock, encode_result(r));
  ::_exit(0);
}

/// Whether two computations take the same kernel arguments (names, types, shapes, order).
inline bool same_signature(const ComputeDAG& a, const ComputeDAG& b) {
  const auto x = a.arguments(), y = b.arguments();
  if (x.size() != y.size() || a.inputs().size() != b.inputs().size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].name() != y[i].name() || !(x[i].dtype() == y[i].dtype()) ||
        x[i].shape() != y[i].shape())
      return false;
  return true;
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

/// The median of the task's successful build times (0 when there is none).
inline double median_build_seconds(const LocalMeasurer::TaskData& td) {
  if (td.build_seconds.empty()) return 0;
  std::vector<double> v = td.build_seconds;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

/// How long a build of the task may take (MeasureOptions::slow_build_kill_factor).
inline double slow_build_limit(const LocalMeasurer::TaskData& td, const search::MeasureOptions& o) {
  constexpr size_t kMinBuilds = 8;  // a median of fewer says little
  if (o.slow_build_kill_factor <= 0 || td.build_seconds.size() < kMinBuilds)
    return o.build_timeout_s;
  return std::min(o.build_timeout_s, std::max(o.slow_build_kill_min_s,
                                              o.slow_build_kill_factor * median_build_seconds(td)));
}

/// How long a program's first run may take, from its go (MeasureOptions::slow_run_kill_factor);
/// 0 when there is no such limit.
inline double slow_run_limit(const LocalMeasurer::TaskData& td, const search::MeasureOptions& o) {
  if (o.slow_run_kill_factor <= 0 || td.best_cost <= 0) return 0;
  const double limit = std::max(o.slow_run_kill_min_s, o.slow_run_kill_factor * td.best_cost);
  return limit < o.run_timeout_s ? limit : 0;
}

/// Computes the task's reference outputs into the shared region, in a child of its own (a crash
/// there must not end the tuning run either): the interpreter for small DAGs, else the default
/// schedule. Returns an empty string, or why there is no usable reference.
inline std::string compute_reference(const Task& task, const LocalMeasurer::TaskData& td,
                                     const search::MeasureOptions& o, double reference_timeout_s) {
  const auto t0 = clock::now();
  const bool interpret = task.dag->flop_count() <= o.interpreter_flop_limit;
  const char* how = interpret ? "the reference interpreter" : "the default schedule";
  ChildChannel ch;
  std::string spawn_error;
  const bool spawned = spawn(
      ch, {},
      [&](int sock) {
        ChildResult r;
        try {
          ::mprotect(td.base, td.outputs_offset, PROT_READ);
          std::vector<void*> ptrs;
          for (size_t i = 0; i < td.args.size(); ++i) ptrs.push_back(td.data(i));
          if (interpret) {
            evaluate(*task.dag, ptrs);
          } else {
            if (o.num_threads > 0) runtime::set_num_threads(o.num_threads);
            CompiledKernel k =
                compile(lower::lower(sched::default_schedule(task.dag, task.target), "reference"));
            if (const int32_t rc = k.fn(ptrs.data()); rc != 0)
              throw backend_error("the kernel returned error code " + std::to_string(rc));
          }
        } catch (const std::exception& e) {
          r.error = MeasureError::unknown;
          r.message = e.what();
        }
        write_all(sock, encode_result(r));
        ::_exit(0);
      },
      spawn_error);
  std::string failure;
  if (!spawned) {
    failure = spawn_error;
  } else {
    bool timed_out = false;
    while (!ch.sock_eof) {
      const double left = reference_timeout_s - seconds_since(t0);
      if (left <= 0) {
        timed_out = true;
        break;
      }
      pollfd fds[2] = {{ch.sock, POLLIN, 0}, {ch.err, POLLIN, 0}};
      const int n = ::poll(fds, ch.err_eof ? 1 : 2, poll_ms(left));
      if (n < 0 && errno != EINTR) break;
      ch.read_sock();
      ch.read_err();
    }
    const int status = ch.reap(/*kill_first=*/timed_out || !ch.sock_eof);
    std::string body;
    ChildResult r;
    bool have = false;
    if (ch.next_frame(body) && !body.empty() && body[0] == kResult) {
      Decoder d(body.data() + 1, body.size() - 1);
      have = decode_result(d, r);
    }
    if (timed_out)
      failure = "it took longer than " + format_seconds(reference_timeout_s) + " s";
    else if (!have)
      failure = describe_death(status, "while computing it", ch.err_tail);
    else if (r.error != MeasureError::none)
      failure = r.message;
  }
  if (failure.empty()) {
    // A NaN in the reference would make every program wrong; it means the random inputs do
    // not suit this computation, which is worth saying once, plainly.
    for (size_t i = 0; i < td.args.size() && failure.empty(); ++i) {
      const auto& a = td.args[i];
      if (!a.is_output || !a.dtype.is_float() || (a.dtype.bits != 32 && a.dtype.bits != 64))
        continue;
      for (int64_t e = 0; e < a.elements; ++e) {
        const double v = a.dtype.bits == 32 ? static_cast<const float*>(td.data(i))[e]
                                            : static_cast<const double*>(td.data(i))[e];
        if (std::isnan(v)) {
          failure = "its output '" + a.name + "' has NaN at element " + std::to_string(e) + " " +
                    coordinates(e, a.shape) +
                    " for the random inputs (floats in [0.5, 1.5), integers in [1, 8])";
          break;
        }
      }
    }
  }
  if (!failure.empty())
    failure = std::string("no reference output to check programs against: ") + how +
              " failed: " + failure;
  return failure;
}

}  // namespace measurer_detail

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
  if (!measurer_detail::evicts_constants(options_)) return false;
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

LOOM_DECL LocalMeasurer::TaskData& LocalMeasurer::task_data(const Task& task) {
  auto it = tasks_.find(task.workload_key());
  if (it != tasks_.end()) return *it->second;
  auto td = std::make_unique<TaskData>();
  const ComputeDAG& dag = *task.dag;
  const auto arguments = dag.arguments();
  const size_t page = static_cast<size_t>(std::max(4096L, sysconf(_SC_PAGESIZE)));
  size_t offset = 0;
  bool outputs_started = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    TaskData::Arg a;
    a.name = arguments[i].name();
    a.dtype = arguments[i].dtype();
    a.shape = arguments[i].shape();
    for (int64_t d : a.shape) a.elements *= d;
    a.bytes = static_cast<size_t>(a.elements) * static_cast<size_t>(a.dtype.bytes());
    a.is_output = i >= dag.inputs().size();
    if (a.is_output && !outputs_started) {
      offset = (offset + page - 1) / page * page;
      td->outputs_offset = offset;
      outputs_started = true;
    }
    a.offset = offset;
    offset += (a.bytes + 63) / 64 * 64;
    td->args.push_back(std::move(a));
  }
  td->size = std::max<size_t>((offset + page - 1) / page * page, page);
  void* p = ::mmap(nullptr, td->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    td->map_error = "cannot map " + std::to_string(td->size) +
                    " bytes of shared memory for the task's inputs: " + std::strerror(errno);
  } else {
    td->base = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < td->args.size(); ++i)
      if (!td->args[i].is_output)
        measurer_detail::fill_random(td->data(i), td->args[i].dtype, td->args[i].elements,
                                     local_.seed + 0x9e3779b97f4a7c15ULL * (i + 1));
  }
  return *tasks_.emplace(task.workload_key(), std::move(td)).first->second;
}

LOOM_DECL std::vector<search::MeasureResult> LocalMeasurer::measure_each(
    const Task& task, const std::vector<sched::State>& states, const ResultCallback& on_result) {
  using namespace measurer_detail;
  const auto batch_start = clock::now();
  std::vector<MeasureResult> results(states.size());
  ++stats_.batches;
  stats_.programs += states.size();
  if (states.empty()) return results;
  auto tell = [&](size_t i) {
    if (on_result) on_result(i, results[i]);
  };
  auto fail_all = [&](MeasureError e, const std::string& message) {
    for (size_t i = 0; i < results.size(); ++i) {
      results[i].error = e;
      results[i].error_message = message;
      tell(i);
    }
    stats_.wall_seconds += seconds_since(batch_start);
    return results;
  };
  if (!task.target.is_cpu())
    return fail_all(MeasureError::instantiation,
                    "the local CPU measurer cannot measure a task for " + task.target.to_string());
  TaskData& td = task_data(task);
  if (!td.map_error.empty()) return fail_all(MeasureError::unknown, td.map_error);
  warm_engine();

  const search::MeasureOptions& o = options_;
  if (o.check_correctness && !td.reference_tried) {
    td.reference_tried = true;
    const auto t0 = clock::now();
    td.reference_error = compute_reference(task, td, o, local_.reference_timeout_s);
    td.reference_ok = td.reference_error.empty();
    stats_.reference_seconds += seconds_since(t0);
  }
  if (o.check_correctness && !td.reference_ok)
    return fail_all(MeasureError::unknown, td.reference_error);

  // Programs of another computation: see the file comment.
  std::vector<size_t> todo;
  for (size_t i = 0; i < states.size(); ++i) {
    const ComputeDAG& dag = states[i].dag();
    if (dag.workload_key() == task.workload_key()) {
      todo.push_back(i);
    } else if (o.check_correctness && same_signature(dag, *task.dag)) {
      todo.push_back(i);
    } else {
      results[i].error = MeasureError::instantiation;
      results[i].error_message = "the program was made for workload " + dag.workload_key() +
                                 ", not for this task's " + task.workload_key();
      tell(i);
    }
  }

  // --- the children ---------------------------------------------------------------------------
  enum class Phase { building, built, running };
  struct Child {
    size_t index = 0;
    ChildChannel ch;
    Phase phase = Phase::building;
    bool stopped = false;
    double build_used = 0;      ///< build seconds used before the current stretch
    clock::time_point resumed;  ///< start of the current unstopped stretch (building)
    clock::time_point run_started;
    bool first_run_done = false;  ///< the child said so ('F')
    double compile_seconds = 0;   ///< from the child's "built" frame
    bool have_result = false;
    ChildResult result;
  };
  std::vector<std::unique_ptr<Child>> live;
  // Whatever happens in this function (an allocation failure), no child outlives it.
  struct Reaper {
    std::vector<std::unique_ptr<Child>>& live;
    ~Reaper() {
      for (auto& c : live) c->ch.reap(/*kill_first=*/true);
    }
  } reaper{live};

  const int parallelism = o.build_parallelism > 0 ? o.build_parallelism : available_cores();
  Child* running = nullptr;
  size_t next = 0;
  double build_limit = slow_build_limit(td, o);
  auto build_seconds_used = [](const Child& c, clock::time_point now) {
    return c.build_used +
           (c.stopped ? 0.0 : std::chrono::duration<double>(now - c.resumed).count());
  };
  // Seconds a running child may run: run_timeout_s, or less until its first call returns.
  auto run_limit = [&](const Child& c) {
    const double slow = c.first_run_done ? 0.0 : slow_run_limit(td, o);
    return slow > 0 ? slow : o.run_timeout_s;
  };

  auto finish = [&](Child& c, MeasureResult r) {
    stats_.compile_seconds += r.compile_seconds;
    stats_.run_seconds += r.run_seconds;
    // Children forked after this one judge slowness by the best so far, this batch included.
    if (r.ok() && (td.best_cost == 0 || r.mean_cost() < td.best_cost)) td.best_cost = r.mean_cost();
    results[c.index] = std::move(r);
    tell(c.index);
  };
  auto to_measure_result = [&](const ChildResult& cr) {
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
  };

  while (next < todo.size() || !live.empty()) {
    auto now = clock::now();
    if (!running) {
      Child* ready = nullptr;
      for (auto& c : live)
        if (c->phase == Phase::built && (!ready || c->index < ready->index)) ready = c.get();
      if (ready) {
        // The machine belongs to the timed program: every build pauses.
        for (auto& c : live)
          if (c->phase == Phase::building && !c->stopped) {
            ::kill(c->ch.pid, SIGSTOP);
            c->build_used += std::chrono::duration<double>(now - c->resumed).count();
            c->stopped = true;
          }
        if (ready->stopped) {
          ::kill(ready->ch.pid, SIGCONT);
          ready->stopped = false;
        }
        ready->phase = Phase::running;
        ready->run_started = clock::now();
        running = ready;
        // If the child died meanwhile, the send fails and its end of file says the rest.
        write_all(ready->ch.sock, std::string(1, 'g'));
      } else {
        for (auto& c : live)
          if (c->stopped) {
            ::kill(c->ch.pid, SIGCONT);
            c->stopped = false;
            c->resumed = now;
          }
        int building = 0;
        for (auto& c : live) building += c->phase == Phase::building;
        while (building < parallelism && next < todo.size()) {
          auto c = std::make_unique<Child>();
          c->index = todo[next++];
          std::vector<int> others;
          for (auto& l : live) others.insert(others.end(), {l->ch.sock, l->ch.err});
          std::string error;
          const size_t index = c->index;
          const bool ok = spawn(
              c->ch, others,
              [&](int sock) { measuring_child(sock, index, task, states[index], o, local_, td); },
              error);
          if (!ok) {
            results[index].error = MeasureError::unknown;
            results[index].error_message = "cannot start a measuring process: " + error;
            tell(index);
            continue;
          }
          c->resumed = clock::now();
          live.push_back(std::move(c));
          ++building;
        }
      }
    }
    if (live.empty()) continue;

    // Wait for a frame, an end of file or the nearest deadline.
    now = clock::now();
    double wait = 3600;
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is its socket)
    for (auto& c : live) {
      if (c->phase == Phase::running)
        wait = std::min(
            wait, run_limit(*c) - std::chrono::duration<double>(now - c->run_started).count());
      else if (c->phase == Phase::building && !c->stopped)
        wait = std::min(wait, build_limit - build_seconds_used(*c, now));
      if (!c->ch.sock_eof) {
        fds.push_back({c->ch.sock, POLLIN, 0});
        owners.emplace_back(c.get(), true);
      }
      if (!c->ch.err_eof) {
        fds.push_back({c->ch.err, POLLIN, 0});
        owners.emplace_back(c.get(), false);
      }
    }
    const int n = ::poll(fds.data(), fds.size(), poll_ms(wait));
    if (n < 0 && errno != EINTR) {
      const std::string why = std::string("poll failed: ") + std::strerror(errno);
      for (auto& c : live) {
        c->ch.reap(true);
        MeasureResult r;
        r.error = MeasureError::unknown;
        r.error_message = why;
        finish(*c, r);
      }
      live.clear();
      running = nullptr;
      continue;
    }
    for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      Child& c = *owners[k].first;
      if (owners[k].second)
        c.ch.read_sock();
      else
        c.ch.read_err();
    }

    // Frames, ends and deadlines.
    now = clock::now();
    for (size_t k = 0; k < live.size();) {
      Child& c = *live[k];
      std::string body;
      while (c.ch.next_frame(body)) {
        if (body.empty()) continue;
        Decoder d(body.data() + 1, body.size() - 1);
        if (body[0] == kBuilt && c.phase == Phase::building) {
          c.compile_seconds = d.get<double>();
          c.phase = Phase::built;
          td.build_seconds.push_back(build_seconds_used(c, now));
          build_limit = slow_build_limit(td, o);
        } else if (body[0] == kFirstRunDone) {
          c.first_run_done = true;
        } else if (body[0] == kResult) {
          c.have_result = decode_result(d, c.result);
        }
      }
      bool done = false;
      MeasureResult r;
      if (c.ch.sock_eof) {
        const Phase phase = c.phase;
        const double build_seconds = build_seconds_used(c, now);
        const int status = c.ch.reap(/*kill_first=*/false);
        if (c.have_result) {
          r = to_measure_result(c.result);
          if (c.result.packed && r.ok()) ++stats_.packed_programs;
        } else if (phase == Phase::running) {
          r.error = MeasureError::runtime;
          r.error_message = describe_death(status, "while running", c.ch.err_tail);
          r.compile_seconds = c.compile_seconds;
          r.run_seconds = seconds_since(c.run_started);
        } else if (phase == Phase::building) {
          r.error = MeasureError::compile;
          r.error_message = describe_death(status, "while building", c.ch.err_tail);
          r.compile_seconds = build_seconds;
        } else {
          r.error = MeasureError::unknown;
          r.error_message = describe_death(status, "while waiting to run", c.ch.err_tail);
          r.compile_seconds = c.compile_seconds;
        }
        done = true;
      } else if (c.phase == Phase::running &&
                 std::chrono::duration<double>(now - c.run_started).count() >= run_limit(c)) {
        const double limit = run_limit(c);
        c.ch.reap(/*kill_first=*/true);
        r.error = MeasureError::run_timeout;
        if (limit < o.run_timeout_s)
          r.error_message = "killed in its first run after " + format_seconds(limit) +
                            " s, more than " + format_seconds(o.slow_run_kill_factor) +
                            " times the best cost of the task so far, " +
                            format_seconds(td.best_cost) + " s (slow_run_kill_factor)";
        else
          r.error_message = "killed after running for longer than " +
                            format_seconds(o.run_timeout_s) + " s (run_timeout_s)";
        r.compile_seconds = c.compile_seconds;
        r.run_seconds = limit;
        done = true;
      } else if (c.phase == Phase::building && !c.stopped &&
                 build_seconds_used(c, now) >= build_limit) {
        c.ch.reap(/*kill_first=*/true);
        r.error = MeasureError::compile_timeout;
        if (build_limit < o.build_timeout_s)
          r.error_message = "killed after building for " + format_seconds(build_limit) +
                            " s, more than " + format_seconds(o.slow_build_kill_factor) +
                            " times the median build of the task's programs (" +
                            format_seconds(median_build_seconds(td)) +
                            " s) (slow_build_kill_factor)";
        else
          r.error_message = "killed after building for longer than " +
                            format_seconds(o.build_timeout_s) + " s (build_timeout_s)";
        r.compile_seconds = build_limit;
        done = true;
      }
      if (done) {
        if (running == &c) running = nullptr;
        finish(c, std::move(r));
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        ++k;
      }
    }
  }
  stats_.wall_seconds += seconds_since(batch_start);
  return results;
}

}  // namespace cpu_jit
LOOM_END_NAMESPACE
