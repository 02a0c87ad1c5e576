// Bodies of loom/backend/child_process.hpp (inline in every build: see its file comment).
#include "loom/backend/child_process.hpp"

#include "loom/detail/clock.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/prctl.h>
#include <sys/resource.h>
#endif

LOOM_BEGIN_NAMESPACE
namespace backend::detail {

// --- frames ------------------------------------------------------------------------------------

inline void Encoder::put_string(std::string_view s) {
  put(static_cast<uint64_t>(s.size()));
  bytes_.append(s.data(), s.size());
}

inline std::string_view Decoder::take(size_t n) {
  if (n > rest_.size())
    throw FrameError("a frame body ended " + std::to_string(n - rest_.size()) +
                     " bytes before its reader expected");
  const std::string_view taken = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return taken;
}

inline std::string Decoder::get_string() {
  const uint64_t n = get<uint64_t>();
  if (n > rest_.size())
    throw FrameError("a frame body holds " + std::to_string(rest_.size()) +
                     " bytes where a string of " + std::to_string(n) + " was expected");
  return std::string(take(static_cast<size_t>(n)));
}

inline size_t Decoder::get_count(size_t max) {
  const uint64_t n = get<uint64_t>();
  if (n > max)
    throw FrameError("a frame body counts " + std::to_string(n) + " items, more than " +
                     std::to_string(max));
  return static_cast<size_t>(n);
}

#if defined(MSG_NOSIGNAL)
inline constexpr int kSendFlags = MSG_NOSIGNAL;  // a dead peer is an error code, not a SIGPIPE
#else
inline constexpr int kSendFlags = 0;  // the sockets get SO_NOSIGPIPE instead (BSDs, macOS)
#endif

inline bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, kSendFlags);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool send_frame(int fd, std::string_view body) {
  const uint64_t n = body.size();
  // A small frame goes out in one write, so that the reader wakes once for it; a large one (a
  // GPU program's image, a task's inputs) is not copied to be prefixed.
  constexpr size_t kCopyAtMost = 64 * 1024;
  if (body.size() <= kCopyAtMost) {
    std::string frame(reinterpret_cast<const char*>(&n), sizeof n);
    frame.append(body);
    return write_all(fd, frame.data(), frame.size());
  }
  return write_all(fd, reinterpret_cast<const char*>(&n), sizeof n) &&
         write_all(fd, body.data(), body.size());
}

inline bool pop_frame(std::string& inbox, std::string& body) {
  uint64_t n = 0;
  if (inbox.size() < sizeof n) return false;
  std::memcpy(&n, inbox.data(), sizeof n);
  if (inbox.size() - sizeof n < n) return false;
  body = inbox.substr(sizeof n, static_cast<size_t>(n));
  inbox.erase(0, sizeof n + static_cast<size_t>(n));
  return true;
}

inline Received receive_frame(int fd, std::string& body, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  std::string buf;
  uint64_t want = sizeof(uint64_t);
  bool have_header = false;
  char chunk[1 << 16];
  for (;;) {
    if (buf.size() >= want) {
      if (!have_header) {
        std::memcpy(&want, buf.data(), sizeof want);
        buf.clear();
        have_header = true;
        continue;
      }
      body = std::move(buf);
      return Received::frame;
    }
    if (timeout_s >= 0) {
      const double left = timeout_s - ::loom::detail::seconds_since(start);
      if (left <= 0) return Received::timeout;
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, poll_ms(left));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return Received::timeout;
    }
    // Never past this frame: the next one is the next call's.
    const size_t room = static_cast<size_t>(std::min<uint64_t>(sizeof chunk, want - buf.size()));
    const ssize_t got = ::recv(fd, chunk, room, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Received::closed;
    buf.append(chunk, static_cast<size_t>(got));
  }
}

inline int poll_ms(double seconds) {
  if (seconds <= 0) return 0;
  return static_cast<int>(std::min(std::ceil(seconds * 1e3), 3.6e6));
}

// --- child processes -----------------------------------------------------------------------------

namespace child_process_impl {

/// Reads what is available on the non-blocking `fd` into `into`, keeping only about the last
/// `keep_tail` bytes when that is not 0; false at end of file or on an error.
inline bool drain(int fd, std::string& into, size_t keep_tail) {
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

inline void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace child_process_impl

inline void ChildProcess::read_socket() {
  if (!sock_eof && !child_process_impl::drain(sock, inbox, 0)) sock_eof = true;
}

inline void ChildProcess::read_output() {
  if (!output_eof && !child_process_impl::drain(output, output_tail, kOutputTail))
    output_eof = true;
}

inline bool ChildProcess::wait_and_read(double timeout_s) {
  pollfd fds[2];
  nfds_t n = 0;
  if (!sock_eof) fds[n++] = {sock, POLLIN, 0};
  if (output >= 0 && !output_eof) fds[n++] = {output, POLLIN, 0};
  if (n == 0) return true;
  if (::poll(fds, n, poll_ms(timeout_s)) < 0 && errno != EINTR) return false;
  read_socket();
  if (output >= 0) read_output();
  return true;
}

inline void ChildProcess::close_fds() {
  if (sock >= 0) ::close(sock);
  if (output >= 0) ::close(output);
  sock = output = -1;
}

inline int ChildProcess::reap(bool kill_first) {
  if (pid <= 0) {
    close_fds();
    return -1;
  }
  if (kill_first) ::kill(pid, SIGKILL);
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  pid = -1;
  // The child is gone, so its output ends; drain() stops at end of file (or at EAGAIN if a
  // grandchild still holds the pipe).
  if (output >= 0) read_output();
  close_fds();
  return r < 0 ? -1 : status;
}

inline int ChildProcess::stop(double grace_s) {
  if (sock >= 0) ::close(sock);
  sock = -1;
  if (pid <= 0) return reap(false);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      if (output >= 0) read_output();
      close_fds();
      return status;
    }
    if (::loom::detail::seconds_since(start) >= grace_s) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return reap(/*kill_first=*/true);
}

inline bool open_socket_pair(int fds[2], std::string& error) {
#if defined(SOCK_CLOEXEC)
  // Atomically: another thread may fork and exec between the two calls otherwise.
  const int type = SOCK_STREAM | SOCK_CLOEXEC;
#else
  const int type = SOCK_STREAM;
#endif
  if (::socketpair(AF_UNIX, type, 0, fds) != 0) {
    error = std::string("socketpair failed: ") + std::strerror(errno);
    return false;
  }
#if !defined(SOCK_CLOEXEC)
  for (int i = 0; i < 2; ++i) ::fcntl(fds[i], F_SETFD, FD_CLOEXEC);
#endif
#if !defined(MSG_NOSIGNAL) && defined(SO_NOSIGPIPE)
  const int on = 1;
  for (int i = 0; i < 2; ++i) ::setsockopt(fds[i], SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof on);
#endif
  return true;
}

inline bool fork_child(ChildProcess& child, const std::vector<int>& close_in_child,
                       const std::function<void(int)>& body, std::string& error) {
  int sv[2];
  if (!open_socket_pair(sv, error)) return false;
  int ep[2];
  if (::pipe(ep) != 0) {
    error = std::string("pipe failed: ") + std::strerror(errno);
    ::close(sv[0]);
    ::close(sv[1]);
    return false;
  }
  // Programs another thread of the tuner execs must not inherit these.
  for (int fd : ep) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
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
  child_process_impl::set_nonblocking(sv[0]);
  child_process_impl::set_nonblocking(ep[0]);
  child.pid = pid;
  child.sock = sv[0];
  child.output = ep[0];
  return true;
}

inline bool limit_memory_growth(size_t bytes, std::string& error) {
  if (bytes == 0) return true;
#if defined(__linux__)
  // RLIMIT_DATA bounds the process's private writable mappings as a whole (VmData), so the cap
  // is what it holds now plus the growth allowed.
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) {
    error = std::string("cannot read /proc/self/status: ") + std::strerror(errno);
    return false;
  }
  char line[256];
  unsigned long long held_kb = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f))
    found = std::sscanf(line, "VmData: %llu kB", &held_kb) == 1;
  std::fclose(f);
  if (!found) {
    error = "/proc/self/status has no VmData line";
    return false;
  }
  const unsigned long long cap = held_kb * 1024ULL + bytes;
  rlimit limit{};
  if (::getrlimit(RLIMIT_DATA, &limit) != 0) {
    error = std::string("getrlimit(RLIMIT_DATA) failed: ") + std::strerror(errno);
    return false;
  }
  if (limit.rlim_max != RLIM_INFINITY && cap > limit.rlim_max) return true;  // tighter already
  limit.rlim_cur = static_cast<rlim_t>(cap);
  if (::setrlimit(RLIMIT_DATA, &limit) != 0) {
    error = std::string("setrlimit(RLIMIT_DATA) failed: ") + std::strerror(errno);
    return false;
  }
  return true;
#else
  error = "memory limits are implemented on Linux only";
  return false;
#endif
}

inline void name_memory_limit(std::string& message, double limit_mb) {
  if (limit_mb > 0 && (message.find("bad_alloc") != std::string::npos ||
                       message.find("out of memory") != std::string::npos ||
                       message.find("OUT_OF_MEMORY") != std::string::npos))
    message += " (past MeasureOptions::memory_limit_mb, " +
               std::to_string(static_cast<long long>(limit_mb)) + " MiB)";
}

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

inline std::string describe_end(int status, const std::string& while_doing) {
  const std::string doing = while_doing.empty() ? "" : " " + while_doing;
  if (status == -1) return "ended without a result" + doing + " (its exit status is unknown)";
  if (WIFSIGNALED(status)) return "killed by " + signal_name(WTERMSIG(status)) + doing;
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return "exited with status " + std::to_string(WEXITSTATUS(status)) + doing;
  return "exited without a result" + doing;
}

inline std::string last_lines(const std::string& output, size_t lines, size_t max_chars) {
  std::vector<std::string> found;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) found.push_back(line);
  std::string last;
  for (size_t i = found.size() > lines ? found.size() - lines : 0; i < found.size(); ++i)
    last += (last.empty() ? "" : " | ") + found[i];
  if (last.size() > max_chars) last = "..." + last.substr(last.size() - max_chars);
  return last;
}

inline std::string describe_death(int status, const std::string& while_doing,
                                  const std::string& output_tail) {
  const std::string what = describe_end(status, while_doing);
  const std::string last = last_lines(output_tail);
  return last.empty() ? what : what + "; its output ended with: " + last;
}

}  // namespace backend::detail
LOOM_END_NAMESPACE
