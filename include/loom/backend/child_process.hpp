/// \file
/// Child processes of the measurers (layer backend/, namespace loom::backend::detail): the framed
/// messages a measurer and its child exchange on a socket, forking a child with that socket and
/// its output captured, waiting for it with deadlines, and describing how it died. A program
/// that crashes, hangs or corrupts its process must end that process, never the tuning run, so
/// both backends measure in children:
/// - the CPU measurer (backend/llvm) forks one child per program and one per task's reference
///   (`fork_child`), and reads many children at once through their `ChildProcess`;
/// - the GPU measurer (backend/cuda) forks one child per program build (NVRTC) and keeps one
///   worker process for the runs, this executable started again (posix_spawn: a fresh process,
///   where the CUDA driver starts as in any program, rather than a fork of the measurer), and
///   exchanges one request and one reply at a time with it (`send_frame`, `receive_frame`).
///
/// A frame is a u64 byte count, then that many bytes of body. An Encoder writes a body and a
/// Decoder reads it back in the same order: fixed-width values as their bytes, strings and
/// counts after a u64 length. Both ends are the same program on the same machine, so byte order
/// and type widths always agree; what a body holds is each measurer's own protocol.
///
/// The bodies (impl/child_process.ipp) are inline and included in every build, not LOOM_DECL
/// under LOOM_SEPARATE_COMPILATION: the measurers that use them are compiled in different
/// libraries (cmake/LoomCompiled.cmake: loom_compiled for CUDA, loom_compiled_llvm for the CPU),
/// neither of which compiles the bodies of backend/ outside llvm/ and cuda/.
///
/// POSIX only (fork, socketpair, poll, waitpid).
#ifndef LOOM_BACKEND_CHILD_PROCESS_HPP
#define LOOM_BACKEND_CHILD_PROCESS_HPP

#include "loom/config.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <sys/types.h>

LOOM_BEGIN_NAMESPACE
namespace backend::detail {

// --- frames ------------------------------------------------------------------------------------

/// A frame body that ends before what its reader expects, or a count beyond its reader's bound:
/// both ends run the same code, so this is a bug, not a message to act on.
class FrameError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A frame body under construction.
class Encoder {
 public:
  /// Appends the bytes of `v` (an arithmetic or enum value).
  template <class T>
  void put(T v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "put() writes plain values");
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  /// Appends the length of `s`, then its bytes.
  inline void put_string(std::string_view s);
  /// Appends a number of items that follow (Decoder::get_count bounds it).
  void put_count(size_t n) { put(static_cast<uint64_t>(n)); }
  const std::string& body() const { return bytes_; }

 private:
  std::string bytes_;
};

/// Reads an Encoder's body back, in the order it was written; throws FrameError where the body
/// ends early.
class Decoder {
 public:
  /// `body` must outlive the decoder.
  explicit Decoder(std::string_view body) : rest_(body) {}
  template <class T>
  T get() {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "get() reads plain values");
    T v{};
    std::memcpy(&v, take(sizeof v).data(), sizeof v);
    return v;
  }
  inline std::string get_string();
  /// A count that put_count wrote; throws FrameError above `max`, so that a corrupt count cannot
  /// ask for a huge allocation.
  inline size_t get_count(size_t max);

 private:
  inline std::string_view take(size_t n);
  std::string_view rest_;
};

/// Writes all `n` bytes; false when the peer is gone (never SIGPIPE).
inline bool write_all(int fd, const char* data, size_t n);

/// Sends one frame; false when the peer is gone.
inline bool send_frame(int fd, std::string_view body);

/// Takes the first complete frame off the front of `inbox` (bytes read from a socket as they
/// came) into `body`; false when `inbox` holds no complete frame yet.
inline bool pop_frame(std::string& inbox, std::string& body);

enum class Received { frame, timeout, closed };

/// Reads one frame from a blocking socket, never a byte past it; `timeout_s` < 0 waits for ever.
inline Received receive_frame(int fd, std::string& body, double timeout_s);

/// Milliseconds for poll() until `seconds` from now: rounded up, at least 0, at most an hour.
inline int poll_ms(double seconds);

// --- child processes -----------------------------------------------------------------------------

/// The parent's side of one child: its process, the socket to it and, for a child that
/// fork_child started, its captured stdout and stderr. Reaps the child (killing it first) when
/// destroyed, so that no child outlives the code that started it.
struct ChildProcess {
  pid_t pid = -1;
  int sock = -1;
  int output = -1;  ///< read end of the child's stdout and stderr (-1: not captured)
  bool sock_eof = false;
  bool output_eof = false;
  /// Bytes read from a non-blocking `sock` that pop_frame has not taken yet.
  std::string inbox;
  /// The end of what the child wrote to its stdout and stderr (about kOutputTail bytes).
  std::string output_tail;
  static constexpr size_t kOutputTail = 4096;

  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { reap(/*kill_first=*/true); }

  bool alive() const { return pid > 0; }
  /// Reads what is available on the non-blocking socket into `inbox`, and what is available of
  /// the output into `output_tail`, noting the ends of file.
  inline void read_socket();
  inline void read_output();
  /// Pops one complete frame from `inbox`.
  bool next_frame(std::string& body) { return pop_frame(inbox, body); }
  /// Waits at most `timeout_s` for the socket or the output to have something, then reads it;
  /// false when poll() failed.
  inline bool wait_and_read(double timeout_s);
  /// Waits for the child to end (after SIGKILL if `kill_first`), reads what is left of its
  /// output, closes the descriptors and returns its wait status (-1 if unknown or no child).
  inline int reap(bool kill_first);
  /// For a child that exits by itself when its socket ends (a worker serving requests): closes
  /// the socket, gives it `grace_s` to exit, kills it if it has not, and reaps it. Returns its
  /// wait status (-1 if unknown or no child).
  inline int stop(double grace_s);
  inline void close_fds();
};

/// Makes a connected pair of stream sockets that are closed on exec (programs another thread
/// starts must not inherit them) and never raise SIGPIPE. False, with `error`, when it fails.
inline bool open_socket_pair(int fds[2], std::string& error);

/// Forks a child with a socket and a captured stdout and stderr. In the child: closes
/// `close_in_child` (the parent's ends for other children), makes the captured pipe its stdout
/// and stderr, restores the default action of crash signals, dies with the parent, and calls
/// `body(socket)`, which should end with _exit; if it returns or throws, the child exits with
/// status 1 (it never returns into the caller's code). In the parent: returns true with `child`
/// set to the running child (its socket and output non-blocking), or false with `error` when the
/// socket, the pipe or fork failed.
inline bool fork_child(ChildProcess& child, const std::vector<int>& close_in_child,
                       const std::function<void(int)>& body, std::string& error);

/// Caps what the calling process may allocate from now on at `bytes` more than it holds (its
/// private data: heap and anonymous mappings, RLIMIT_DATA on Linux; mappings made before the
/// call, such as a sanitizer's shadow memory or the shared inputs, do not count against the
/// growth). Past the cap, allocations fail: malloc returns null, operator new throws, LLVM
/// reports "out of memory". For a forked child, before it does its work. 0: no cap. False,
/// with `error`, when the limit cannot be read or set (or outside Linux).
inline bool limit_memory_growth(size_t bytes, std::string& error);

/// Appends " (past MeasureOptions::memory_limit_mb, <limit_mb> MiB)" to `message` when it
/// reports a failed allocation ("bad_alloc", "out of memory", NVRTC's "OUT_OF_MEMORY") and
/// `limit_mb` > 0: in a measurer's child that is most likely the cap the measurer set
/// (limit_memory_growth), not the machine.
inline void name_memory_limit(std::string& message, double limit_mb);

/// "SIGSEGV", "SIGKILL", ..., or "signal 42".
inline std::string signal_name(int sig);

/// How a child ended, from its wait status (-1: unknown), with what it was doing, e.g.
/// `describe_end(s, "while running")`: "killed by SIGSEGV while running", "exited with status 3
/// while running", "exited without a result while running" (status 0: it had not said what it
/// was asked to). An empty `while_doing` is left out.
inline std::string describe_end(int status, const std::string& while_doing);

/// The last `lines` non-empty lines of `output`, joined with " | ", at most `max_chars`
/// characters (the end kept); empty when there is none.
inline std::string last_lines(const std::string& output, size_t lines = 3, size_t max_chars = 600);

/// describe_end, then the end of what the child wrote ("; its output ended with: ...") when it
/// wrote anything.
inline std::string describe_death(int status, const std::string& while_doing,
                                  const std::string& output_tail);

}  // namespace backend::detail
LOOM_END_NAMESPACE

#include "loom/backend/impl/child_process.ipp"

#endif  // LOOM_BACKEND_CHILD_PROCESS_HPP
