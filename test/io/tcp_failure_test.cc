// TcpStream and TcpListener when things go wrong: a peer that resets the connection
// during a read, a peer that goes away while we write (no SIGPIPE), a connection refused,
// operations on a closed stream, I/O awaited where there is no event loop, and accept
// running out of file descriptors. Each test runs once per backend.
//
// What the backends do (both the same, as the kernel decides; asserted below):
//  - a reset (the peer closes with SO_LINGER {1, 0}) while a read waits: the read throws
//    std::system_error ECONNRESET; the next read returns 0 (end of stream). Data the peer
//    sent before the reset and that was not read yet is kept: reads return it first,
//    then ECONNRESET, then 0.
//  - the peer closes (with our data unread, so its kernel answers with a reset) while a
//    large write waits for buffer space: the write fails with std::system_error,
//    ECONNRESET or EPIPE (the tests accept both and print which), which writeAll, having
//    sent part of its buffer, reports as the cause of an IncompleteTransfer; the process
//    gets no SIGPIPE.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "test/support/io_support.h"
#include "test/support/manual_timer_executor.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// How a task started on the pool ended.
template <class T>
struct Outcome {
  std::atomic<bool> done{false};
  Try<T> result;

  void wait() const { done.wait(false); }
  // The errno of the std::system_error it ended with (or that caused the
  // IncompleteTransfer it ended with), or -1.
  int error() const {
    if (!result.hasException()) return -1;
    try {
      try {
        std::rethrow_exception(result.exception());
      } catch (const IncompleteTransfer& e) {
        std::rethrow_exception(e.cause());
      }
    } catch (const std::system_error& e) {
      return e.code().value();
    } catch (...) {
      return -1;
    }
    return -1;
  }
  bool endedWithIncompleteTransfer() const {
    if (!result.hasException()) return false;
    try {
      std::rethrow_exception(result.exception());
    } catch (const IncompleteTransfer&) {
      return true;
    } catch (...) {
      return false;
    }
  }
  std::string what() const {
    if (!result.hasException()) return "(a value)";
    try {
      std::rethrow_exception(result.exception());
    } catch (const std::exception& e) {
      return e.what();
    }
  }
};

// T from `outcome` alone: writeAll's awaitable converts to the Lazy.
template <class T>
void startOn(Executor& executor, std::type_identity_t<Lazy<T>> lazy, Outcome<T>& outcome) {
  std::move(lazy).via(&executor).start([&outcome](Try<T> result) {
    outcome.result = std::move(result);
    outcome.done.store(true);
    outcome.done.notify_all();
  });
}

using test::quiesce;

Lazy<std::size_t> readSome(TcpStream& stream, std::span<std::byte> buffer) {
  co_return co_await stream.read(buffer);
}

Lazy<std::size_t> writeSome(TcpStream& stream, std::string_view text) {
  co_return co_await stream.write(text.data(), text.size());
}

void resetConnection(test::OwnedFd& peer) {
  const linger abort{1, 0};
  ASSERT_EQ(::setsockopt(peer.get(), SOL_SOCKET, SO_LINGER, &abort, sizeof abort), 0);
  peer.reset();  // close(2) with a zero linger: a reset, not an orderly end
}

class TcpFailureTest : public test::IoBackendTest {
 protected:
  void SetUp() override {
    test::IoBackendTest::SetUp();
    fdsBefore_ = test::openFdCount();
  }
  void TearDown() override {
    if (!IsSkipped()) {
      EXPECT_EQ(test::openFdCount(), fdsBefore_) << "a descriptor leaked";
    }
  }
  int fdsBefore_ = 0;
};

TEST_P(TcpFailureTest, ResetDuringAReadThrowsConnectionResetThenEndsTheStream) {
  test::Watchdog watchdog(60s, "ResetDuringARead");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  std::byte buffer[64];
  Outcome<std::size_t> read;
  startOn(pool, readSome(pair.stream, buffer), read);
  quiesce(pool);  // the read waits in the kernel
  EXPECT_FALSE(read.done.load());
  resetConnection(pair.peer);
  read.wait();
  EXPECT_EQ(read.error(), ECONNRESET) << read.what();
  EXPECT_NE(read.what().find("read from a TcpStream"), std::string::npos) << read.what();
  // The connection is over: the next read sees the end of the stream, not another error.
  EXPECT_EQ(syncAwait(readSome(pair.stream, buffer).via(&pool)), 0u);
}

TEST_P(TcpFailureTest, ResetAfterUnreadDataDeliversTheDataThenConnectionReset) {
  test::Watchdog watchdog(60s, "ResetAfterUnreadData");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const char data[] = "sent before the reset";
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), data, sizeof data));
  // The data is in our receive queue before the reset follows it (loopback delivers it
  // within send(); polled to be sure, not timed).
  const int sent = static_cast<int>(sizeof data);
  test::waitUntil([&] { return test::queuedToRead(pair.stream.nativeHandle()) == sent; });
  resetConnection(pair.peer);
  // Linux keeps what was received: the data first, then the reset, then the end.
  std::byte buffer[64];
  ASSERT_EQ(syncAwait(readSome(pair.stream, buffer).via(&pool)), sizeof data);
  EXPECT_EQ(std::memcmp(buffer, data, sizeof data), 0);
  Outcome<std::size_t> read;
  startOn(pool, readSome(pair.stream, buffer), read);
  read.wait();
  EXPECT_EQ(read.error(), ECONNRESET) << read.what();
  EXPECT_EQ(syncAwait(readSome(pair.stream, buffer).via(&pool)), 0u);
}

// In a child process, so that a SIGPIPE shows as the child's death rather than the
// test binary's. No SIGPIPE handler is installed: the default action would kill.
TEST_P(TcpFailureTest, PeerClosingDuringAWriteFailsTheWriteWithoutSigpipe) {
  const IoBackendChoice backend = GetParam();
  const int status = test::runInChild([backend]() -> int {
    ::alarm(60);  // hang guard: SIGALRM
    struct sigaction current{};
    if (::sigaction(SIGPIPE, nullptr, &current) != 0) return 10;
    if (current.sa_handler != SIG_DFL) return 11;  // the test would prove nothing
    ThreadPool pool(ThreadPoolOptions{1, "sigpipe", backend});
    test::StreamAndPeer pair = test::connectedPair(pool);
    // More than the socket buffers of both ends hold: the write waits for the peer.
    std::vector<std::byte> big(64 << 20, std::byte{'x'});
    Outcome<void> write;
    startOn(pool, pair.stream.writeAll(big), write);
    quiesce(pool);
    if (write.done.load()) return 12;  // it should be waiting for buffer space
    pair.peer.reset();  // our data unread in its queue: the peer's kernel resets
    write.wait();
    // writeAll had sent part of the buffer: IncompleteTransfer, the error as its cause.
    if (!write.endedWithIncompleteTransfer()) {
      std::fprintf(stderr, "child: the write ended with: %s\n", write.what().c_str());
      return 16;
    }
    const int error = write.error();
    if (error != EPIPE && error != ECONNRESET) {
      std::fprintf(stderr, "child: the write ended with: %s\n", write.what().c_str());
      return 13;
    }
    if (write.what().find("write to a TcpStream") == std::string::npos) return 14;
    // A second write after the failure: EPIPE, and still no signal.
    Outcome<std::size_t> again;
    startOn(pool, writeSome(pair.stream, "y"), again);
    again.wait();
    if (again.error() != EPIPE && again.error() != ECONNRESET) return 15;
    return error == EPIPE ? 0 : 1;
  });
  ASSERT_TRUE(WIFEXITED(status)) << test::describeStatus(status);
  const int code = WEXITSTATUS(status);
  EXPECT_TRUE(code == 0 || code == 1) << test::describeStatus(status);
  std::printf("  [%s] a write waiting when the peer closed failed with %s\n",
              test::ioBackendName({GetParam(), 0}).c_str(),
              code == 0 ? "EPIPE" : code == 1 ? "ECONNRESET" : "?");
}

TEST_P(TcpFailureTest, ConnectToAPortNobodyListensOnIsRefused) {
  test::Watchdog watchdog(60s, "ConnectRefused");
  ThreadPool pool(options(1));
  // Bound but not listening: the port is ours (nobody else can listen on it) and the
  // kernel answers a connection with a reset.
  test::OwnedFd bound(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const SocketAddress any = SocketAddress::loopbackV4(0);
  ASSERT_EQ(::bind(bound.get(), any.native(), any.nativeLength()), 0);
  SocketAddress address;
  socklen_t length = SocketAddress::kNativeCapacity;
  ASSERT_EQ(::getsockname(bound.get(), address.nativeBuffer(), &length), 0);
  address.setNativeLength(length);
  try {
    syncAwait(TcpStream::connect(address).via(&pool));
    ADD_FAILURE() << "connected to a port nobody listens on";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ECONNREFUSED) << e.what();
    EXPECT_NE(std::string(e.what()).find("connect to " + address.toString()), std::string::npos)
        << e.what();
  }
}

// Every operation of a stream that holds no socket throws EBADF (and crashes nothing).
void expectEbadf(const std::function<void()>& operation, const char* what) {
  try {
    operation();
    ADD_FAILURE() << what << " did not throw";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EBADF) << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw something else: " << e.what();
  }
}

void expectEveryOperationFailsWithEbadf(ThreadPool& pool, TcpStream& stream) {
  EXPECT_FALSE(stream.isOpen());
  std::byte buffer[8]{};
  expectEbadf([&] { syncAwait(readSome(stream, buffer).via(&pool)); }, "read");
  expectEbadf(
      [&] {
        syncAwait(writeSome(stream, "x").via(&pool));
      },
      "write");
  expectEbadf([&] { syncAwait(stream.readExactly(buffer).via(&pool)); }, "readExactly");
  expectEbadf([&] { syncAwait(stream.writeAll("text").via(&pool)); }, "writeAll");
  expectEbadf([&] { stream.shutdownWrite(); }, "shutdownWrite");
  expectEbadf([&] { stream.setNoDelay(true); }, "setNoDelay");
  expectEbadf([&] { stream.setKeepAlive(true); }, "setKeepAlive");
  expectEbadf([&] { (void)stream.localAddress(); }, "localAddress");
  expectEbadf([&] { (void)stream.peerAddress(); }, "peerAddress");
}

TEST_P(TcpFailureTest, OperationsOnAClosedOrMovedFromStreamFailWithEbadf) {
  test::Watchdog watchdog(60s, "ClosedStream");
  ThreadPool pool(options(1));
  {
    TcpStream never;
    expectEveryOperationFailsWithEbadf(pool, never);
  }
  {
    test::StreamAndPeer pair = test::connectedPair(pool);
    pair.stream.close();
    expectEveryOperationFailsWithEbadf(pool, pair.stream);
    pair.stream.close();  // idempotent
  }
  {
    test::StreamAndPeer pair = test::connectedPair(pool);
    TcpStream taker = std::move(pair.stream);
    expectEveryOperationFailsWithEbadf(pool, pair.stream);
    EXPECT_TRUE(taker.isOpen());  // and the socket moved on intact
    EXPECT_NO_THROW((void)taker.peerAddress());
  }
  {
    TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
    TcpListener taker = std::move(listener);
    expectEbadf([&] { syncAwait(listener.accept().via(&pool)); }, "accept (moved-from)");
    taker.close();
    expectEbadf([&] { syncAwait(taker.accept().via(&pool)); }, "accept (closed)");
    expectEbadf([&] { (void)taker.localAddress(); }, "listener localAddress");
  }
}

// syncAwait of a plain Lazy runs it on the calling thread, which has no event loop.
void expectNoLoopError(const std::function<void()>& operation, const char* what) {
  try {
    operation();
    ADD_FAILURE() << what << " did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("without an event loop"), std::string::npos)
        << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw something else: " << e.what();
  }
}

TEST_P(TcpFailureTest, IoAwaitedOnAThreadWithoutAnEventLoopThrowsLogicError) {
  ASSERT_EQ(IoLoop::currentIfAny(), nullptr);
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  expectNoLoopError([&] { syncAwait(TcpStream::connect(listener.localAddress())); }, "connect");
  expectNoLoopError([&] { syncAwait(listener.accept()); }, "accept");
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  TcpStream a(fds[0]);
  TcpStream b(fds[1]);
  std::byte buffer[8];
  expectNoLoopError([&] { syncAwait(readSome(a, buffer)); }, "read");
  expectNoLoopError([&] { syncAwait(b.writeAll("x")); }, "writeAll");
  // Nothing was sent: the stream is as it was (a loop-less await consumed nothing).
  EXPECT_EQ(::recv(fds[0], buffer, sizeof buffer, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  // The message names the operation.
  try {
    syncAwait(readSome(a, buffer));
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("read from a TcpStream"), std::string::npos) << e.what();
  }
}

// accept() out of descriptors: in a child whose RLIMIT_NOFILE is lowered until no new
// descriptor fits. The listener must keep serving the connection it has, must not spin
// (each failed attempt waits for a backoff timer), and must accept the pending connection
// once a descriptor is freed. The backoff sleeps are armed on a ManualTimerExecutor, so
// they fire when the test says: "no retry until the backoff ends" is a hand-shake, not a
// measure of CPU time over a window of real time.
//
// Child exit codes: 0 success; 20+ a step that failed (see the returns).
TEST_P(TcpFailureTest, AcceptOutOfDescriptorsKeepsServingAndResumesWithoutSpinning) {
  const IoBackendChoice backend = GetParam();
  const int status = test::runInChild([backend]() -> int {
    ::alarm(60);  // hang guard: SIGALRM
    ThreadPool pool(ThreadPoolOptions{1, "emfile", backend});
    // The accept's executor: the pool's worker runs it, and its backoff sleeps wait here
    // until fireAll().
    test::ManualTimerExecutor timers(pool);
    TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
    const SocketAddress address = listener.localAddress();
    test::OwnedFd clientA = test::connectBlocking(address);
    if (!clientA) return 20;
    const timeval guard{10, 0};  // a reply that never comes fails the step, not the test run
    ::setsockopt(clientA.get(), SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
    TcpStream serverA = syncAwait(listener.accept().via(&pool));
    auto echo = [](TcpStream& stream) -> Lazy<void> {
      std::byte buffer[256];
      for (;;) {
        const std::size_t n = co_await stream.read(buffer);
        if (n == 0) co_return;
        co_await stream.writeAll(std::span<const std::byte>(buffer, n));
      }
    };
    Outcome<void> echoA;
    startOn(pool, echo(serverA), echoA);
    auto roundTrip = [](int fd, char tag) {
      char message[4] = {'p', 'i', 'n', tag};
      char reply[4] = {};
      if (!test::sendAllBlocking(fd, message, sizeof message)) return false;
      std::size_t got = 0;
      while (got < sizeof reply) {
        const ssize_t n = ::recv(fd, reply + got, sizeof reply - got, 0);
        if (n <= 0) return false;
        got += static_cast<std::size_t>(n);
      }
      return std::memcmp(message, reply, sizeof message) == 0;
    };
    if (!roundTrip(clientA.get(), '0')) return 21;

    // UBSan's vptr check makes a pipe to probe memory the first time it meets a dynamic
    // type, which EMFILE would turn into a false report: the manual executor's members
    // that the accept calls out of descriptors (schedule, scheduleTimer) and a timer's
    // fire path are called here first, by a sleep armed on it and fired by hand.
    Outcome<void> warmUp;
    auto sleepAnHour = []() -> Lazy<void> { co_await sleep(1h); };
    startOn(timers, sleepAnHour(), warmUp);
    if (!timers.waitUntilArmed(1)) return 21;
    timers.fireAll();
    warmUp.wait();
    if (!warmUp.result.hasValue()) return 21;
    // The same holds for the first virtual call on an error category (the accept's EMFILE
    // becomes a std::system_error): make it here, while a pipe can still be made.
    (void)std::system_error(EMFILE, std::system_category()).code().message();
    (void)std::system_error(EMFILE, std::generic_category()).code().message();

    // The second client's socket exists before the limit drops; the spare descriptor is
    // what will be freed.
    test::OwnedFd clientB(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    test::OwnedFd spare(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!clientB || !spare) return 22;
    ::setsockopt(clientB.get(), SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
    // The lowest free descriptor number becomes the limit: no new descriptor fits.
    const int lowestFree = ::dup(0);
    if (lowestFree < 0) return 23;
    ::close(lowestFree);
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = static_cast<rlim_t>(lowestFree);
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 24;
    if (::dup(0) >= 0 || errno != EMFILE) return 25;

    Outcome<TcpStream> acceptB;
    startOn(timers, listener.accept(), acceptB);
    if (::connect(clientB.get(), address.native(), address.nativeLength()) != 0) return 26;

    // Rounds of EMFILE with a connection pending: each failed attempt arms one backoff
    // timer and waits for it. While it is held the listener tries nothing (a listener that
    // retried at once would never arm a timer: the alarm would end the child), the worker
    // serves connection A, and the accept has not ended; firing it makes the next
    // attempt, which fails the same way and arms the next backoff.
    for (int round = 0; round < 3; ++round) {
      if (!timers.waitUntilArmed(1)) return 27;
      if (!roundTrip(clientA.get(), static_cast<char>('a' + round))) return 27;
      if (acceptB.done.load()) {
        std::fprintf(stderr, "child: accept ended during EMFILE: %s\n", acceptB.what().c_str());
        return 28;
      }
      if (timers.armed() != 1) return 29;  // one attempt, one backoff
      timers.fireAll();
    }
    if (!timers.waitUntilArmed(1)) return 29;

    spare.reset();     // one descriptor free: the pending connection can be accepted
    timers.fireAll();  // the backoff ends: the next attempt accepts it
    acceptB.wait();
    if (!acceptB.result.hasValue()) {
      std::fprintf(stderr, "child: accept failed: %s\n", acceptB.what().c_str());
      return 30;
    }
    TcpStream serverB = std::move(acceptB.result).value();
    Outcome<void> echoB;
    startOn(pool, echo(serverB), echoB);
    if (!roundTrip(clientB.get(), 'B')) return 31;
    if (!roundTrip(clientA.get(), 'A')) return 32;
    clientA.reset();
    clientB.reset();
    echoA.wait();
    echoB.wait();
    if (echoA.result.hasException() || echoB.result.hasException()) return 33;
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::describeStatus(status);
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpFailureTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
