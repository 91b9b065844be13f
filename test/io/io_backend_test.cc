// Which event-loop backend kAuto picks (IoLoop::resolveBackend, ThreadPoolOptions): epoll,
// weft's default, whether the kernel offers io_uring, refuses it through seccomp (EPERM)
// or has none (ENOSYS); WEFT_IO_BACKEND=epoll / io_uring decides for kAuto, a value
// naming no backend is rejected with std::invalid_argument, io_uring asked for where it
// is refused is an error (never a silent epoll), and an explicit IoBackendChoice beats
// the environment.
//
// Every test runs in a forked child (test::runInChild): the seccomp filter and setenv
// must not touch the test process. IoLoop::resolveBackend probes io_uring once per
// process (for io_uring asked for, and IoLoop::available) and caches the answer in a
// function-local static, which a child inherits: so NOTHING in this binary's parent
// process may probe (no ThreadPool, IoLoop::create or resolveBackend with io_uring or
// kAuto, no IoLoop::available outside a child). Each child then
// starts with the probe not yet made. (A test added here that probes in the parent would
// make the fallback tests fail, not pass: the child would inherit "io_uring".) The
// children call detail::probeIoUring() directly (uncached) to check what the kernel says.
//
// The seccomp filter (raw BPF) makes the native io_uring_setup fail with a chosen errno
// and allows everything else; it checks the architecture field first and leaves system
// calls of another ABI alone. Where seccomp is not available (qemu-user refuses
// PR_SET_SECCOMP: the filter would apply to the emulator), the tests that need it skip.
//
// Child exit codes: 0 success, 77 seccomp unavailable (skip), 20+ the step that failed.

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/executors/detail/io_loop_base.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "test/support/io_support.h"

namespace weft {
namespace {

constexpr int kSeccompUnavailable = 77;

// WEFT_TEST_IO_URING_BUILT, defined by the build for the tests: 0 where weft is built
// without its io_uring loop (CMake -DWEFT_IO_URING=OFF or no liburing found, Bazel
// --config=epoll). There io_uring is "not available" with ENOSYS whatever the kernel says,
// so the tests that weft passes on the kernel's own errno (EPERM under seccomp) skip.
#ifndef WEFT_TEST_IO_URING_BUILT
#define WEFT_TEST_IO_URING_BUILT 1
#endif
#define WEFT_SKIP_WITHOUT_IO_URING_LOOP()                                                     \
  do {                                                                                        \
    if (!WEFT_TEST_IO_URING_BUILT) {                                                          \
      GTEST_SKIP() << "weft is built without the io_uring loop: every probe answers ENOSYS"; \
    }                                                                                         \
  } while (false)

#if defined(__x86_64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
#error "io_backend_test: add this architecture's AUDIT_ARCH_* value"
#endif

// Installs a seccomp filter on the calling (single-threaded) process under which
// io_uring_setup fails with `error`. Returns 0, or the errno of the prctl that failed.
int denyIoUringSetup(int error) {
  sock_filter filter[] = {
      // Another ABI's system call numbers mean other calls: allow them.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K,
               SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(error) & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) return errno;
  return 0;
}

// One echo round trip on `pool` over 127.0.0.1: true if the bytes came back.
bool echoRoundTrip(ThreadPool& pool) {
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  auto server = [](TcpListener& l) -> Lazy<void> {
    TcpStream stream = co_await l.accept();
    std::array<std::byte, 64> buffer;
    for (;;) {
      const std::size_t n = co_await stream.read(buffer);
      if (n == 0) co_return;
      co_await stream.writeAll(std::span<const std::byte>(buffer.data(), n));
    }
  };
  auto client = [](SocketAddress a) -> Lazy<std::string> {
    TcpStream stream = co_await TcpStream::connect(a);
    co_await stream.writeAll("round trip");
    std::string echo(10, '\0');
    co_await stream.readExactly(std::as_writable_bytes(std::span<char>(echo.data(), echo.size())));
    stream.shutdownWrite();
    co_return echo;
  };
  auto [served, echoed] = syncAwait(collectAll(server(listener), client(address)).via(&pool));
  return served.hasValue() && echoed.hasValue() && echoed.value() == "round trip";
}

bool ioUringAvailable() { return detail::probeIoUring() == 0; }

// Runs `body` in a child with WEFT_IO_BACKEND unset (or set to `env`) and expects it to
// exit 0; skips the calling test on exit 77.
template <class Body>
void expectChildSucceeds(const char* env, Body body) {
  const int status = test::runInChild([env, &body]() -> int {
    ::alarm(60);  // hang guard: SIGALRM
    if (env == nullptr) {
      ::unsetenv("WEFT_IO_BACKEND");
    } else {
      ::setenv("WEFT_IO_BACKEND", env, 1);
    }
    return body();
  });
  if (WIFEXITED(status) && WEXITSTATUS(status) == kSeccompUnavailable) {
    GTEST_SKIP() << "seccomp filters are not available here (an emulator, or a kernel "
                    "without CONFIG_SECCOMP_FILTER)";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::describeStatus(status);
}

// In the child: io_uring_setup denied with `error`; kAuto must still choose epoll, without
// an error, everywhere.
int autoIsEpollWhereIoUringIsDenied(int error) {
  if (denyIoUringSetup(error) != 0) return kSeccompUnavailable;
  if (const int probed = detail::probeIoUring(); probed != error) {
    std::fprintf(stderr, "child: probeIoUring() = %d (%s), expected %d\n", probed,
                 std::strerror(probed), error);
    return 20;
  }
  if (IoLoop::resolveBackend(IoBackendChoice::kAuto) != IoBackend::kEpoll) return 21;
  if (IoLoop::create(IoBackendChoice::kAuto)->backend() != IoBackend::kEpoll) return 22;
  ThreadPool pool(ThreadPoolOptions{1, "fallback", IoBackendChoice::kAuto});
  if (pool.ioBackend() != IoBackend::kEpoll) return 23;
  if (!echoRoundTrip(pool)) return 24;
  return 0;
}

TEST(IoLoopBackendTest, AutoIsEpollWhenSeccompDeniesIoUringWithEperm) {
  WEFT_SKIP_WITHOUT_IO_URING_LOOP();
  expectChildSucceeds(nullptr, [] { return autoIsEpollWhereIoUringIsDenied(EPERM); });
}

TEST(IoLoopBackendTest, AutoIsEpollWhenTheKernelHasNoIoUring) {
  expectChildSucceeds(nullptr, [] { return autoIsEpollWhereIoUringIsDenied(ENOSYS); });
}

// Forcing io_uring where it is refused is an error, never a silent fallback:
// resolveBackend, IoLoop::create and the ThreadPool constructor throw std::system_error
// with the errno the kernel gave.
TEST(IoLoopBackendTest, ForcedIoUringWhereItIsDeniedFailsWithTheErrno) {
  WEFT_SKIP_WITHOUT_IO_URING_LOOP();
  expectChildSucceeds(nullptr, []() -> int {
    if (denyIoUringSetup(EPERM) != 0) return kSeccompUnavailable;
    auto failsWithEperm = [](auto operation) {
      try {
        operation();
        return false;
      } catch (const std::system_error& e) {
        if (e.code().value() == EPERM) return true;
        std::fprintf(stderr, "child: %s\n", e.what());
        return false;
      }
    };
    if (!failsWithEperm([] { (void)IoLoop::resolveBackend(IoBackendChoice::kIoUring); })) return 20;
    if (!failsWithEperm([] { (void)IoLoop::create(IoBackendChoice::kIoUring); })) return 21;
    const ThreadPoolOptions forced{1, "forced", IoBackendChoice::kIoUring};
    if (!failsWithEperm([&] { ThreadPool pool(forced); })) return 22;
    // kAuto and epoll asked for work.
    if (IoLoop::resolveBackend(IoBackendChoice::kAuto) != IoBackend::kEpoll) return 24;
    ThreadPool epoll(ThreadPoolOptions{1, "epoll", IoBackendChoice::kEpoll});
    return echoRoundTrip(epoll) ? 0 : 23;
  });
}

// epoll is the default even where io_uring is available (docs/io.md, "Which backend").
TEST(IoLoopBackendTest, AutoIsEpollWhereTheKernelOffersIoUring) {
  expectChildSucceeds(nullptr, []() -> int {
    if (IoLoop::resolveBackend(IoBackendChoice::kAuto) != IoBackend::kEpoll) return 20;
    ThreadPool pool(ThreadPoolOptions{1, "auto", IoBackendChoice::kAuto});
    if (pool.ioBackend() != IoBackend::kEpoll) return 21;
    return echoRoundTrip(pool) ? 0 : 22;
  });
}

TEST(IoLoopBackendTest, EnvironmentEpollDecidesAuto) {
  expectChildSucceeds("epoll", []() -> int {
    if (IoLoop::resolveBackend(IoBackendChoice::kAuto) != IoBackend::kEpoll) return 20;
    ThreadPool pool(ThreadPoolOptions{1, "env-epoll", IoBackendChoice::kAuto});
    if (pool.ioBackend() != IoBackend::kEpoll) return 21;
    return echoRoundTrip(pool) ? 0 : 22;
  });
}

TEST(IoLoopBackendTest, EnvironmentIoUringDecidesAuto) {
  if (!ioUringAvailable()) GTEST_SKIP() << "io_uring is not available to this process";
  expectChildSucceeds("io_uring", []() -> int {
    if (IoLoop::resolveBackend(IoBackendChoice::kAuto) != IoBackend::kIoUring) return 20;
    ThreadPool pool(ThreadPoolOptions{1, "env-uring", IoBackendChoice::kAuto});
    if (pool.ioBackend() != IoBackend::kIoUring) return 21;
    return echoRoundTrip(pool) ? 0 : 22;
  });
}

// WEFT_IO_BACKEND=io_uring where the kernel refuses it is the same error as asking for
// io_uring explicitly, not a fallback.
TEST(IoLoopBackendTest, EnvironmentIoUringWhereItIsDeniedFailsWithTheErrno) {
  WEFT_SKIP_WITHOUT_IO_URING_LOOP();
  expectChildSucceeds("io_uring", []() -> int {
    if (denyIoUringSetup(EPERM) != 0) return kSeccompUnavailable;
    try {
      (void)IoLoop::resolveBackend(IoBackendChoice::kAuto);
      return 20;
    } catch (const std::system_error& e) {
      if (e.code().value() != EPERM) return 21;
      if (std::string(e.what()).find("WEFT_IO_BACKEND=io_uring") == std::string::npos) return 22;
    }
    try {
      ThreadPool pool(ThreadPoolOptions{1, "env-uring", IoBackendChoice::kAuto});
      return 23;
    } catch (const std::system_error& e) {
      return e.code().value() == EPERM ? 0 : 24;
    }
  });
}

TEST(IoLoopBackendTest, EnvironmentAutoIsTheDefault) {
  expectChildSucceeds("auto", []() -> int {
    return IoLoop::resolveBackend(IoBackendChoice::kAuto) == IoBackend::kEpoll ? 0 : 20;
  });
}

TEST(IoLoopBackendTest, EnvironmentNamingNoBackendIsRejected) {
  expectChildSucceeds("bogus", []() -> int {
    try {
      (void)IoLoop::resolveBackend(IoBackendChoice::kAuto);
      return 20;
    } catch (const std::invalid_argument& e) {
      if (std::string(e.what()).find("'bogus'") == std::string::npos) return 21;
    }
    try {
      (void)IoLoop::create(IoBackendChoice::kAuto);
      return 22;
    } catch (const std::invalid_argument&) {
    }
    try {
      ThreadPool pool(ThreadPoolOptions{1, "bogus", IoBackendChoice::kAuto});
      return 23;
    } catch (const std::invalid_argument&) {
    }
    return 0;
  });
}

TEST(IoLoopBackendTest, ExplicitChoiceBeatsTheEnvironment) {
  const bool uring = ioUringAvailable();
  expectChildSucceeds("epoll", [uring]() -> int {
    if (!uring) {
      // Asked for and unavailable (qemu-user, a build without liburing): an error, never
      // a silent epoll.
      try {
        IoLoop::resolveBackend(IoBackendChoice::kIoUring);
        return 23;
      } catch (const std::system_error&) {
        return 0;
      }
    }
    if (IoLoop::resolveBackend(IoBackendChoice::kIoUring) != IoBackend::kIoUring) return 20;
    ThreadPool pool(ThreadPoolOptions{1, "explicit", IoBackendChoice::kIoUring});
    if (pool.ioBackend() != IoBackend::kIoUring) return 21;
    return echoRoundTrip(pool) ? 0 : 22;
  });
  expectChildSucceeds("io_uring", []() -> int {
    if (IoLoop::resolveBackend(IoBackendChoice::kEpoll) != IoBackend::kEpoll) return 20;
    ThreadPool pool(ThreadPoolOptions{1, "explicit", IoBackendChoice::kEpoll});
    if (pool.ioBackend() != IoBackend::kEpoll) return 21;
    return echoRoundTrip(pool) ? 0 : 22;
  });
  expectChildSucceeds("bogus", []() -> int {
    // Not even read: an explicit choice never looks at the environment.
    ThreadPool pool(ThreadPoolOptions{1, "explicit", IoBackendChoice::kEpoll});
    if (pool.ioBackend() != IoBackend::kEpoll) return 20;
    return echoRoundTrip(pool) ? 0 : 21;
  });
}

}  // namespace
}  // namespace weft
