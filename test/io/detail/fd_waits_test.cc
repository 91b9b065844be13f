// Closing a descriptor while operations wait on it, and descriptor numbers reused after a
// wait ended in every possible way: on both backends, nothing hangs and nothing of one
// socket reaches another.

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// Far above any scheduling delay: reaching it means a hang, which is what these tests
// look for, reported as a failure instead of a stuck test binary.
constexpr auto kHangLimit = 30s;

// How the first socket's read ends before the socket is closed.
enum class End {
  kCompleted,            // the peer's bytes arrive
  kCancelled,            // a CancellationSource stops it
  kTimedOut,             // the stream's read time limit
  kWithdrawn,            // the coroutine suspended in it is destroyed (on the worker)
  kClosedFromElsewhere,  // the stream is closed from the test thread while it waits
  kClosedOnTheWorker,    // the stream is closed on the loop's own thread while it waits
  kReadinessCompleted,   // a readable() wait instead, which the peer's bytes complete
  kWriteCompleted,       // a write instead, which waits for room until the peer reads
};

const char* endName(End end) {
  switch (end) {
    case End::kCompleted: return "completion";
    case End::kCancelled: return "cancellation";
    case End::kTimedOut: return "time limit";
    case End::kWithdrawn: return "withdraw by destruction";
    case End::kClosedFromElsewhere: return "close from another thread";
    case End::kClosedOnTheWorker: return "close on the loop's thread";
    case End::kReadinessCompleted: return "readiness wait completed";
    case End::kWriteCompleted: return "write completed after waiting for room";
  }
  return "?";
}

Lazy<std::size_t> readInto(TcpStream& stream, std::span<std::byte> buffer) {
  co_return co_await stream.read(buffer);
}

Lazy<std::size_t> readableOf(TcpStream& stream) { co_return co_await stream.readable(); }

Lazy<std::size_t> writeFrom(TcpStream& stream, std::span<const std::byte> buffer) {
  co_return co_await stream.write(buffer);
}

bool isClosedWhileWaiting(const test::Outcome<std::size_t>& read) {
  if (!read.endedWith<std::system_error>()) return false;
  try {
    std::rethrow_exception(read.result.exception());
  } catch (const std::system_error& e) {
    return e.code().value() == ECANCELED &&
           std::string(e.what()).find("closed while the operation waited") != std::string::npos;
  }
  return false;
}

bool isOpenDescriptor(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

class FdWaitsTest : public test::IoBackendTest {
 protected:
  void SetUp() override {
    test::IoBackendTest::SetUp();
    fdsBefore_ = test::openFdCount();
  }
  void TearDown() override {
    if (IsSkipped()) return;
    EXPECT_EQ(test::openFdCount(), fdsBefore_) << "a descriptor leaked";
  }

  // Ends a read on `stream` the way `end` says; the stream is closed afterwards.
  void endARead(ThreadPool& pool, TcpStream& stream, int peer, End end) {
    std::byte buffer[16];
    test::Outcome<std::size_t> read;
    switch (end) {
      case End::kCompleted: {
        test::startOn(pool, readInto(stream, buffer), read);
        test::quiesce(pool);
        ASSERT_TRUE(test::sendAllBlocking(peer, "first", 5));
        ASSERT_TRUE(read.waitFor(kHangLimit));
        ASSERT_TRUE(read.result.hasValue()) << read.what();
        EXPECT_EQ(read.result.value(), 5u);
        break;
      }
      case End::kCancelled: {
        CancellationSource source;
        test::startOn(pool, withCancellation(source.token(), readInto(stream, buffer)), read);
        test::quiesce(pool);
        source.requestCancellation();
        ASSERT_TRUE(read.waitFor(kHangLimit));
        EXPECT_TRUE(read.endedWith<OperationCancelled>()) << read.what();
        break;
      }
      case End::kTimedOut: {
        // The peer never writes: the limit must end the read, however late it is seen.
        stream.setReadTimeout(1ms);
        test::startOn(pool, readInto(stream, buffer), read);
        ASSERT_TRUE(read.waitFor(kHangLimit));
        EXPECT_TRUE(read.endedWith<std::system_error>()) << read.what();
        break;
      }
      case End::kWithdrawn: {
        std::optional<Lazy<std::size_t>> doomed;
        bool suspended = false;
        test::onWorker(pool, [&] {
          doomed.emplace(readInto(stream, buffer));
          suspended = test::startSuspended(pool, *doomed);
        });
        ASSERT_TRUE(suspended);
        test::quiesce(pool);  // the read waits in the kernel (io_uring) or on the fd (epoll)
        test::onWorker(pool, [&] { doomed.reset(); });
        break;
      }
      case End::kClosedFromElsewhere:
      case End::kClosedOnTheWorker: {
        test::startOn(pool, readInto(stream, buffer), read);
        test::quiesce(pool);
        EXPECT_EQ(read.ends.load(), 0);
        if (end == End::kClosedFromElsewhere) {
          stream.close();
        } else {
          test::onWorker(pool, [&] { stream.close(); });
        }
        ASSERT_TRUE(read.waitFor(kHangLimit)) << "closing the stream left its read waiting";
        EXPECT_TRUE(isClosedWhileWaiting(read)) << read.what();
        break;
      }
      case End::kReadinessCompleted: {
        test::startOn(pool, readableOf(stream), read);
        test::quiesce(pool);
        ASSERT_TRUE(test::sendAllBlocking(peer, "first", 5));
        ASSERT_TRUE(read.waitFor(kHangLimit));
        EXPECT_TRUE(read.result.hasValue()) << read.what();
        break;
      }
      case End::kWriteCompleted: {
        // Fill the socket's buffers; then a write waits for room (unless acknowledgements
        // freed some meanwhile) and completes as the peer reads.
        std::byte chunk[4096] = {};
        while (stream.tryWrite(chunk)) {
        }
        test::startOn(pool, writeFrom(stream, chunk), read);
        const auto deadline = std::chrono::steady_clock::now() + kHangLimit;
        while (read.ends.load() == 0) {
          ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the write never got room";
          std::byte sink[65536];
          if (::recv(peer, sink, sizeof sink, MSG_DONTWAIT) <= 0) std::this_thread::yield();
        }
        EXPECT_TRUE(read.result.hasValue()) << read.what();
        break;
      }
    }
    stream.close();
  }

  int fdsBefore_ = 0;
};

// The reported hang: on epoll, a read that timed out (or was cancelled, or withdrawn) left
// the loop believing the descriptor's one-shot registration armed; the socket accepted next
// got the same number, its registration was skipped, and its read never completed.
TEST_P(FdWaitsTest, ASocketThatReusesTheNumberIsServedAfterEveryWayAWaitEnds) {
  test::Watchdog watchdog(120s, "FdWaitsTest.ASocketThatReusesTheNumber");
  ThreadPool pool(options(1));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  for (End end : {End::kCompleted, End::kCancelled, End::kTimedOut, End::kWithdrawn,
                  End::kClosedFromElsewhere, End::kClosedOnTheWorker, End::kReadinessCompleted,
                  End::kWriteCompleted}) {
    SCOPED_TRACE(endName(end));
    test::OwnedFd firstPeer = test::connectBlocking(listener.localAddress());
    ASSERT_TRUE(firstPeer);
    TcpStream first = syncAwait(listener.accept().via(&pool));
    const int number = first.nativeHandle();
    // Connected now, so that its own descriptor does not take the number freed below.
    test::OwnedFd secondPeer = test::connectBlocking(listener.localAddress());
    ASSERT_TRUE(secondPeer);
    endARead(pool, first, firstPeer.get(), end);
    ASSERT_FALSE(first.isOpen());

    // The next accept gets the lowest free number: the one the first socket had.
    TcpStream second = syncAwait(listener.accept().via(&pool));
    ASSERT_EQ(second.nativeHandle(), number) << "the test needs the number to be reused";

    // Its read waits first (no data yet), then the peer writes: it must complete, with
    // the second peer's bytes.
    std::byte buffer[16];
    test::Outcome<std::size_t> read;
    test::startOn(pool, readInto(second, buffer), read);
    test::quiesce(pool);
    EXPECT_EQ(read.ends.load(), 0);
    ASSERT_TRUE(test::sendAllBlocking(secondPeer.get(), "second", 6));
    ASSERT_TRUE(read.waitFor(kHangLimit))
        << "a read on a socket that reuses the number of one whose read ended by "
        << endName(end) << " never completed";
    ASSERT_TRUE(read.result.hasValue()) << read.what();
    ASSERT_EQ(read.result.value(), 6u);
    EXPECT_EQ(std::memcmp(buffer, "second", 6), 0);
  }
}

// A stream released and its descriptor closed with close(2) by the user, behind weft's
// back: release() retired the number, so the socket that reuses it is served (on epoll, a
// registration of the closed file must not be taken for the new socket's).
TEST_P(FdWaitsTest, ANumberReleasedAndClosedBehindWeftsBackIsServedWhenReused) {
  test::Watchdog watchdog(120s, "FdWaitsTest.ANumberReleasedAndClosedBehindWeftsBack");
  ThreadPool pool(options(1));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  test::OwnedFd firstPeer = test::connectBlocking(listener.localAddress());
  ASSERT_TRUE(firstPeer);
  TcpStream first = syncAwait(listener.accept().via(&pool));
  const int number = first.nativeHandle();
  test::OwnedFd secondPeer = test::connectBlocking(listener.localAddress());
  ASSERT_TRUE(secondPeer);
  for (const char* text : {"one", "two"}) {  // waits, so the loop registers the socket
    std::byte buffer[16];
    test::Outcome<std::size_t> read;
    test::startOn(pool, readInto(first, buffer), read);
    test::quiesce(pool);
    ASSERT_TRUE(test::sendAllBlocking(firstPeer.get(), text, 3));
    ASSERT_TRUE(read.waitFor(kHangLimit));
    ASSERT_TRUE(read.result.hasValue()) << read.what();
  }
  ::close(first.release());

  TcpStream second = syncAwait(listener.accept().via(&pool));
  ASSERT_EQ(second.nativeHandle(), number) << "the test needs the number to be reused";
  std::byte buffer[16];
  test::Outcome<std::size_t> read;
  test::startOn(pool, readInto(second, buffer), read);
  test::quiesce(pool);
  EXPECT_EQ(read.ends.load(), 0);
  ASSERT_TRUE(test::sendAllBlocking(secondPeer.get(), "second", 6));
  ASSERT_TRUE(read.waitFor(kHangLimit)) << "the socket that reused a released number hung";
  ASSERT_TRUE(read.result.hasValue()) << read.what();
  ASSERT_EQ(read.result.value(), 6u);
  EXPECT_EQ(std::memcmp(buffer, "second", 6), 0);
}

// The number is not given back to the kernel while the read still waits (its loop has not
// yet taken the cancellation in): no other socket can get it and inherit the wait.
TEST_P(FdWaitsTest, CloseKeepsTheNumberUntilTheWaitingReadHasEnded) {
  test::Watchdog watchdog(60s, "FdWaitsTest.CloseKeepsTheNumber");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const int number = pair.stream.nativeHandle();
  std::byte buffer[16];
  test::Outcome<std::size_t> read;
  test::startOn(pool, readInto(pair.stream, buffer), read);
  test::quiesce(pool);
  {
    test::WorkerHold hold(pool);  // the loop cannot run the cancellation's completion
    pair.stream.close();
    EXPECT_FALSE(pair.stream.isOpen());
    EXPECT_TRUE(isOpenDescriptor(number)) << "closed while a read still waited on it";
    hold.release([] {});
  }
  ASSERT_TRUE(read.waitFor(kHangLimit));
  EXPECT_TRUE(isClosedWhileWaiting(read)) << read.what();
  EXPECT_FALSE(isOpenDescriptor(number)) << "the descriptor was not closed after its read ended";
}

// Reads and readiness waits on one stream, closed while all of them wait: each ends once,
// with the clear error, and a later read fails with EBADF at once.
TEST_P(FdWaitsTest, CloseEndsEveryWaitingOperationOnTheStream) {
  test::Watchdog watchdog(60s, "FdWaitsTest.CloseEndsEveryWaitingOperation");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  std::byte one[8];
  std::byte two[8];
  test::Outcome<std::size_t> first;
  test::Outcome<std::size_t> second;
  test::Outcome<std::size_t> readable;
  test::startOn(pool, readInto(pair.stream, one), first);
  test::startOn(pool, readInto(pair.stream, two), second);
  test::startOn(pool, [](TcpStream& s) -> Lazy<std::size_t> { co_return co_await s.readable(); }(pair.stream),
                readable);
  test::quiesce(pool);
  pair.stream.close();
  for (test::Outcome<std::size_t>* op : {&first, &second, &readable}) {
    ASSERT_TRUE(op->waitFor(kHangLimit));
    EXPECT_EQ(op->ends.load(), 1);
    EXPECT_TRUE(isClosedWhileWaiting(*op)) << op->what();
  }
  try {
    syncAwait(readInto(pair.stream, one).via(&pool));
    ADD_FAILURE() << "a read on a closed stream succeeded";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EBADF) << e.what();
  }
}

// A server that stops: closing the listener ends the accept that waits on it.
TEST_P(FdWaitsTest, ClosingAListenerEndsItsWaitingAccept) {
  test::Watchdog watchdog(60s, "FdWaitsTest.ClosingAListener");
  ThreadPool pool(options(1));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  test::Outcome<TcpStream> accept;
  test::startOn(pool, [](TcpListener& l) -> Lazy<TcpStream> { co_return co_await l.accept(); }(listener),
                accept);
  test::quiesce(pool);
  EXPECT_EQ(accept.ends.load(), 0);
  listener.close();
  ASSERT_TRUE(accept.waitFor(kHangLimit)) << "closing the listener left its accept waiting";
  EXPECT_TRUE(accept.endedWith<std::system_error>()) << accept.what();
  EXPECT_NE(accept.what().find("closed while the operation waited"), std::string::npos)
      << accept.what();
}

INSTANTIATE_TEST_SUITE_P(Backends, FdWaitsTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
