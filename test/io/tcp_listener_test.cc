// TcpListener: accept when the process is out of descriptors on a worker that has never
// done I/O (its event loop, created by that first accept, needs descriptors too).

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <system_error>
#include <vector>

#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"

namespace weft {
namespace {

class TcpListenerTest : public test::IoBackendTest {};

// The first accept on a fresh worker, out of descriptors: creating the worker's loop
// fails with EMFILE, which accept treats as it treats its own EMFILE (waits, retries),
// rather than failing. Once descriptors are freed, the pending connection is accepted.
// In a child: the descriptor limit is lowered for the whole process.
//
// Child exit codes: 0 success; 20+ the step that failed.
TEST_P(TcpListenerTest, AcceptOnAFreshWorkerOutOfDescriptorsWaitsAndRetries) {
  const IoBackendChoice backend = GetParam();
  const int status = test::runInChild([backend]() -> int {
    ::alarm(60);  // a hang ends the child with SIGALRM
    ThreadPool pool(ThreadPoolOptions{1, "fresh", backend});
    // The pool's timer thread (accept's backoff sleeps) starts before the limit drops;
    // a sleep does no I/O, so the worker still has no event loop.
    syncAwait([]() -> Lazy<void> { co_await sleep(std::chrono::milliseconds(1)); }().via(&pool));
    // UBSan's vptr check probes memory through a pipe the first time it meets a dynamic
    // type, which EMFILE would turn into a false report: the types this test meets out of
    // descriptors are met here first (a loop of the same kind, the error categories that
    // accept compares against, the exception it catches).
    IoLoop::create(backend).reset();
    if (std::error_code(EMFILE, std::generic_category()) != std::errc::too_many_files_open ||
        std::error_code(EMFILE, std::system_category()) != std::errc::too_many_files_open) {
      return 19;
    }
    try {
      throw std::system_error(EMFILE, std::generic_category(), "warm-up");
    } catch (const std::system_error& e) {
      if (e.code() != std::errc::too_many_files_open) return 18;
    }
    TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
    test::OwnedFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!client) return 20;
    // Descriptors to free later: the loop needs two, the accepted socket one, and UBSan's
    // vptr probe a pipe (two) when it meets the new loop.
    std::vector<test::OwnedFd> spares;
    for (int i = 0; i < 8; ++i) spares.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    for (const test::OwnedFd& spare : spares) {
      if (!spare) return 21;
    }
    const int lowestFree = ::dup(0);
    if (lowestFree < 0) return 22;
    ::close(lowestFree);
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = static_cast<rlim_t>(lowestFree);
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 23;
    if (::dup(0) >= 0 || errno != EMFILE) return 24;
    if (IoLoop::currentIfAny() != nullptr) return 25;

    test::Outcome<TcpStream> accept;
    test::startOn(pool, listener.accept(), accept);
    if (::connect(client.get(), listener.localAddress().native(),
                  listener.localAddress().nativeLength()) != 0) {
      return 26;
    }
    // The accept's first attempt ran before this (ThreadPool(1) runs in order): it must
    // be waiting to retry, not ended.
    test::quiesce(pool);
    if (accept.ends.load() != 0) {
      std::fprintf(stderr, "child: accept ended during EMFILE: %s\n", accept.what().c_str());
      return 27;
    }
    spares.clear();  // descriptors free: the loop and the connection fit
    accept.wait();   // the backoff is at most 1 s; the alarm guards a hang
    if (!accept.result.hasValue()) {
      std::fprintf(stderr, "child: accept failed: %s\n", accept.what().c_str());
      return 28;
    }
    TcpStream served = std::move(accept.result).value();
    if (!test::sendAllBlocking(client.get(), "x", 1)) return 29;
    std::byte byte[1];
    if (syncAwait([](TcpStream& s, std::byte* b) -> Lazy<std::size_t> {
          co_return co_await s.read(b, 1);
        }(served, byte).via(&pool)) != 1) {
      return 30;
    }
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::describeStatus(status);
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpListenerTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
