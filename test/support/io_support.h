#pragma once

// Helpers for the io/ test suites: the per-backend fixture, counting open file
// descriptors, raising RLIMIT_NOFILE, a reduced scale for sanitizer and emulator runs,
// connected socket pairs, and running a function in a forked child.

#include <dirent.h>
#include <netinet/in.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/lent_buffer.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "test/support/counted.h"
#include "test/support/io_backends.h"
#include "test/support/wait_until.h"

namespace weft::test {

// True in builds and runs where the heavy io suites scale down: ASan, TSan, or an
// emulator (CMake sets WEFT_TEST_EMULATOR=1 when tests run under one).
inline bool reducedIoScale() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#endif
#endif
  const char* emulator = std::getenv("WEFT_TEST_EMULATOR");
  return emulator != nullptr && *emulator != '\0' && std::strcmp(emulator, "0") != 0;
}

// A suite run once per I/O backend (GetParam() is the explicit choice), instantiated
// with test::kIoBackends and test::ioBackendName (test/support/io_backends.h). SetUp skips
// the io_uring instantiation where this process cannot run weft's io_uring loop (an old
// kernel, seccomp, qemu-user, a build without liburing).
//
// Example:
//   class ReadTest : public weft::test::IoBackendTest {};
//   TEST_P(ReadTest, Something) { weft::ThreadPool pool(options(1)); ... }
//   INSTANTIATE_TEST_SUITE_P(Backends, ReadTest, weft::test::kIoBackends,
//                            weft::test::ioBackendName);
class IoBackendTest : public ::testing::TestWithParam<IoBackendChoice> {
 protected:
  void SetUp() override { WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam()); }

  ThreadPoolOptions options(std::size_t threads, std::string name = "io-test") const {
    return ThreadPoolOptions{threads, std::move(name), GetParam()};
  }
};

// The number of open file descriptors of this process (the entries of /proc/self/fd,
// without the one that lists them). -1 if /proc is not mounted.
inline int openFdCount() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;  // the directory's own fd
}

// An IoBackendTest that checks after each test that no test::Counted object (a coroutine
// frame under test) is alive and that no descriptor leaked.
class IoLeakCheckedTest : public IoBackendTest {
 protected:
  void SetUp() override {
    IoBackendTest::SetUp();
    Counted::reset();
    fdsBefore_ = openFdCount();
  }
  void TearDown() override {
    if (IsSkipped()) return;
    EXPECT_EQ(Counted::alive(), 0) << "a frame was not freed";
    EXPECT_EQ(openFdCount(), fdsBefore_) << "a descriptor leaked";
  }
  int fdsBefore_ = 0;
};

// Bytes waiting in `fd`'s receive queue (FIONREAD).
inline int queuedToRead(int fd) {
  int n = -1;
  EXPECT_EQ(::ioctl(fd, FIONREAD, &n), 0);
  return n;
}

// Bytes of `fd`'s send queue not yet acknowledged by the peer (SIOCOUTQ).
inline int notYetAcknowledged(int fd) {
  int n = -1;
  EXPECT_EQ(::ioctl(fd, SIOCOUTQ, &n), 0);
  return n;
}

// Raises the soft RLIMIT_NOFILE to at least `wanted` (at most the hard limit). Returns
// the soft limit in force afterwards.
inline rlim_t raiseFdLimit(rlim_t wanted) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
    ::getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

// An owned raw file descriptor (a peer socket the test drives with plain system calls).
class OwnedFd {
 public:
  OwnedFd() noexcept = default;
  explicit OwnedFd(int fd) noexcept : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~OwnedFd() { reset(); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A blocking client socket connected to `address` (IPv4), with plain system calls: the
// kernel completes the handshake from the listener's backlog, before any accept.
inline OwnedFd connectBlocking(const SocketAddress& address) {
  OwnedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fd;
  if (::connect(fd.get(), address.native(), address.nativeLength()) != 0) fd.reset();
  return fd;
}

// Writes all of [data, data + size) to a blocking socket; false on failure.
inline bool sendAllBlocking(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size != 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// A connection over 127.0.0.1: `stream` is the accepted end (a TcpStream for the pool's
// coroutines), `peer` a blocking socket for the test thread.
struct StreamAndPeer {
  TcpStream stream;
  OwnedFd peer;
};

inline StreamAndPeer connectedPair(ThreadPool& pool) {
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  StreamAndPeer pair;
  pair.peer = connectBlocking(listener.localAddress());
  if (!pair.peer) throw std::system_error(errno, std::system_category(), "test: connect");
  pair.stream = syncAwait(listener.accept().via(&pool));
  return pair;
}

// Runs `body` in a forked child and returns its exit status as waitpid reports it. The
// child ends with _exit(body()): no atexit handlers, no gtest teardown, no leak check of
// the parent's copies. `body` returns 0 for success and a distinct code per failure;
// it should arm alarm() as a hang guard (a hang then ends with SIGALRM).
// Precondition: the calling process has no other threads (pools destroyed), so that the
// child starts clean (TSan refuses threads after a multi-threaded fork).
template <class Body>
int runInChild(Body body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: unexpected exception: %s\n", e.what());
      code = 98;
    } catch (...) {
      code = 97;
    }
    std::fflush(stderr);
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// "exit 3", "killed by signal 13 (Broken pipe)": a waitpid status for a failure message.
inline std::string describeStatus(int status) {
  if (status == -1) return "fork failed";
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "status " + std::to_string(status);
}

// The errno of the std::system_error that `f` throws; 0 if it throws none.
template <class F>
int errnoOf(F f) {
  try {
    f();
  } catch (const std::system_error& e) {
    return e.code().value();
  }
  return 0;
}

// A lent buffer's bytes as a string (what the receive tests compare).
inline std::string text(const LentBuffer& buffer) { return std::string(buffer.text()); }

}  // namespace weft::test
