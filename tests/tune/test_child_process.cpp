// The child processes both measurers are built on (loom/backend/child_process.hpp): a frame
// comes back as it was encoded, through a socket whole or in pieces; a short body or an
// oversized count is a FrameError; receiving times out on a silent peer and ends on a closed
// one; a forked child's death is described by its signal or exit status and the end of its
// output; a child that ignores its socket is killed by stop() after the grace period.
#include <doctest/doctest.h>

#include <loom/backend/child_process.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace loom::backend::detail;

namespace {

/// A connected socket pair, closed at the end of the scope.
struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() {
    std::string error;
    REQUIRE_MESSAGE(open_socket_pair(fds, error), error);
  }
  ~SocketPair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  void close_end(int i) {
    ::close(fds[i]);
    fds[i] = -1;
  }
};

std::string sample_body() {
  Encoder e;
  e.put<uint8_t>(7);
  e.put<int64_t>(-42);
  e.put(2.5);
  e.put_string("a string");
  e.put_string(std::string("\0\1", 2));
  e.put_count(3);
  return e.body();
}

void check_sample(const std::string& body) {
  Decoder d(body);
  CHECK(d.get<uint8_t>() == 7);
  CHECK(d.get<int64_t>() == -42);
  CHECK(d.get<double>() == 2.5);
  CHECK(d.get_string() == "a string");
  CHECK(d.get_string() == std::string("\0\1", 2));
  CHECK(d.get_count(3) == 3);
  CHECK_THROWS_AS(d.get<uint8_t>(), FrameError);
}

// A child that waits for a signal for ever.
void fork_pausing(ChildProcess& child) {
  std::string error;
  REQUIRE(fork_child(
      child, {},
      [](int) {
        for (;;) ::pause();
      },
      error));
}

}  // namespace

TEST_SUITE("backend.child_process") {
  TEST_CASE("a frame comes back as it was encoded, whole or byte by byte") {
    const std::string body = sample_body();
    check_sample(body);

    SocketPair s;
    REQUIRE(send_frame(s.fds[0], body));
    std::string got;
    REQUIRE(receive_frame(s.fds[1], got, 1.0) == Received::frame);
    CHECK(got == body);

    // Two frames back to back: receive_frame takes the first only, the second stays for the
    // next call. A frame larger than the copy threshold is sent without being copied.
    const std::string large(200 * 1024, 'x');
    std::string received;
    REQUIRE(send_frame(s.fds[0], body));
    std::thread writer([&] { send_frame(s.fds[0], large); });
    REQUIRE(receive_frame(s.fds[1], got, 5.0) == Received::frame);
    CHECK(got == body);
    REQUIRE(receive_frame(s.fds[1], received, 5.0) == Received::frame);
    writer.join();
    CHECK(received == large);

    // pop_frame assembles frames from bytes as they arrive.
    std::string wire(8, '\0');
    const uint64_t n = body.size();
    std::memcpy(wire.data(), &n, sizeof n);
    wire += body;
    wire += wire;  // two frames
    std::string inbox, popped;
    int frames = 0;
    for (char c : wire) {
      inbox += c;
      while (pop_frame(inbox, popped)) {
        CHECK(popped == body);
        ++frames;
      }
    }
    CHECK(frames == 2);
    CHECK(inbox.empty());
    CHECK_FALSE(pop_frame(inbox, popped));
  }

  TEST_CASE("a short body and an oversized count are frame errors") {
    const std::string body = sample_body();
    Decoder truncated(std::string_view(body).substr(0, 5));  // the u8 and half the i64
    CHECK(truncated.get<uint8_t>() == 7);
    CHECK_THROWS_AS(truncated.get<int64_t>(), FrameError);

    Encoder e;
    e.put_count(1000);
    Decoder d(e.body());
    CHECK_THROWS_AS(d.get_count(999), FrameError);

    Encoder s;
    s.put<uint64_t>(100);  // a string length past the end of the body
    s.put<uint8_t>(1);
    Decoder ds(s.body());
    CHECK_THROWS_AS(ds.get_string(), FrameError);
  }

  TEST_CASE("receiving times out on a silent peer and ends on a closed one") {
    SocketPair s;
    std::string body;
    const auto start = std::chrono::steady_clock::now();
    CHECK(receive_frame(s.fds[1], body, 0.05) == Received::timeout);
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(50));
    // Half a header, then the end: closed, not a frame.
    REQUIRE(write_all(s.fds[0], "\3\0\0", 3));
    s.close_end(0);
    CHECK(receive_frame(s.fds[1], body, 1.0) == Received::closed);
  }

  TEST_CASE("a child's frames reach the parent, and its death is described") {
    SUBCASE("a child killed by a signal: the signal and the end of its output") {
      ChildProcess child;
      std::string error;
      REQUIRE_MESSAGE(fork_child(
                          child, {},
                          [](int sock) {
                            Encoder e;
                            e.put_string("hello");
                            send_frame(sock, e.body());
                            std::fprintf(stderr, "first line\n\nsecond line\nabout to crash\n");
                            std::fflush(stderr);
                            std::raise(SIGSEGV);
                          },
                          error),
                      error);
      while (!child.sock_eof) REQUIRE(child.wait_and_read(5.0));
      std::string body;
      REQUIRE(child.next_frame(body));
      CHECK(Decoder(body).get_string() == "hello");
      const int status = child.reap(/*kill_first=*/false);
      REQUIRE(WIFSIGNALED(status));
      CHECK(describe_death(status, "while testing", child.output_tail) ==
            "killed by SIGSEGV while testing; its output ended with: first line | second line | "
            "about to crash");
      CHECK_FALSE(child.alive());
      CHECK(child.sock == -1);
      CHECK(child.output == -1);
    }
    SUBCASE("a child that exits: its status; a silent one: no output part") {
      ChildProcess child;
      std::string error;
      REQUIRE(fork_child(child, {}, [](int) { ::_exit(3); }, error));
      const int status = child.reap(/*kill_first=*/false);
      CHECK(describe_death(status, "while testing", child.output_tail) ==
            "exited with status 3 while testing");
    }
    SUBCASE("a body that throws ends its child with status 1") {
      ChildProcess child;
      std::string error;
      REQUIRE(fork_child(
          child, {}, [](int) { throw std::runtime_error("thrown in the child"); }, error));
      CHECK(describe_end(child.reap(false), "") == "exited with status 1");
    }
    CHECK(describe_end(-1, "while testing") ==
          "ended without a result while testing (its exit status is unknown)");
    CHECK(describe_end(0, "") == "exited without a result");
    CHECK(signal_name(SIGKILL) == "SIGKILL");
    CHECK(signal_name(64) == "signal 64");
  }

  TEST_CASE("stop() lets a child that ends with its socket exit, and kills one that does not") {
    SUBCASE("exits by itself") {
      ChildProcess child;
      std::string error;
      REQUIRE(fork_child(
          child, {},
          [](int sock) {
            char c;
            while (::recv(sock, &c, 1, 0) > 0) {
            }
            ::_exit(0);
          },
          error));
      const int status = child.stop(/*grace_s=*/5.0);
      REQUIRE(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
    }
    SUBCASE("killed after the grace period") {
      ChildProcess child;
      fork_pausing(child);
      const auto start = std::chrono::steady_clock::now();
      const int status = child.stop(/*grace_s=*/0.05);
      CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(50));
      CHECK(describe_end(status, "") == "killed by SIGKILL");
    }
    SUBCASE("a ChildProcess that goes out of scope takes its child with it") {
      pid_t pid = -1;
      {
        ChildProcess child;
        fork_pausing(child);
        pid = child.pid;
      }
      CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);  // already reaped: no such child
    }
  }
}
