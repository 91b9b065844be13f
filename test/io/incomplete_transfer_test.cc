// IncompleteTransfer: what a composed I/O operation (TcpStream::readExactly and writeAll,
// File::readExactlyAt and writeAllAt) throws when it fails after transferring part of its
// buffer. Stream tests run once per backend.
//
//  - readExactly stopped by withTimeout, by a CancellationSource, by the stream's read
//    time limit, by a reset and by the pool's shutdown, after the peer sent 10 of the 16
//    bytes asked for: the caller gets IncompleteTransfer(10) with the cause, the 10 bytes
//    are in the buffer, and the rest sent later is read by the next read (nothing lost,
//    nothing duplicated). Hand-shakes: the peer's first part is sent before the read
//    starts and seen in the stream's receive queue (FIONREAD); the first read's taking it
//    is seen as that queue emptying; the second part is held until the caller got the
//    exception, so the timeouts fire because the peer never sends in time.
//  - writeAll of 4 MiB to a peer that does not read (the stream's SO_SNDBUF small) stopped
//    by a CancellationSource, withTimeout, the write time limit or a reset: the caller gets
//    IncompleteTransfer(n), the peer receives exactly buffer[0, n), then exactly
//    buffer[n..] when the caller writes that.
//  - With nothing transferred, the failure is unchanged (TimeoutError, OperationCancelled,
//    ETIMEDOUT); the end of the stream is still EndOfStream with its count.
//  - File: writeAllAt past RLIMIT_FSIZE (a short write, then EFBIG) on both backends;
//    readExactlyAt (a file shorter than the buffer) and writeAllAt (past RLIMIT_FSIZE)
//    cancelled between their first and second calls, on the blocking-pool path: from a
//    test::ManualExecutor the test runs by hand, with the blocking pool held to one busy
//    thread until the first call has been queued. On io_uring, a read of a regular file
//    completes within the loop's turn that submits it, so a cancellation between two
//    calls cannot be placed from outside there; the loop around the calls is the same
//    code on both paths.

#include "weft/io/incomplete_transfer.h"

#include <linux/sockios.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/executor.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/blocking.h"
#include "weft/io/file.h"
#include "weft/io/tcp_stream.h"
#include "test/support/io_support.h"
#include "test/support/manual_executor.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------
// Helpers.

using test::Outcome;
using test::quiesce;
using test::startOn;

using test::notYetAcknowledged;
using test::queuedToRead;
using test::waitUntil;

// Runs `body` expecting it to throw IncompleteTransfer; returns a copy (or nullopt after
// reporting what it did instead).
template <class Body>
std::optional<IncompleteTransfer> catchIncomplete(Body body) {
  try {
    body();
    ADD_FAILURE() << "no exception";
  } catch (const IncompleteTransfer& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something else: " << e.what();
  }
  return std::nullopt;
}

// True if `e`'s cause is an E; `what` receives the cause's what().
template <class E>
bool causeIs(const IncompleteTransfer& e, std::string* what = nullptr) {
  if (!e.cause()) return false;
  try {
    std::rethrow_exception(e.cause());
  } catch (const E& cause) {
    if (what != nullptr) *what = cause.what();
    return true;
  } catch (...) {
    return false;
  }
}

// The errno of `e`'s cause if it is a std::system_error, else 0.
int causeErrno(const IncompleteTransfer& e) {
  try {
    std::rethrow_exception(e.cause());
  } catch (const std::system_error& cause) {
    return cause.code().value();
  } catch (...) {
    return 0;
  }
}

// Bytes that differ with their position, so a misplaced or repeated chunk shows.
std::vector<std::byte> pattern(std::size_t size) {
  std::vector<std::byte> data(size);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::byte& b : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = std::byte(static_cast<unsigned char>(x));
  }
  return data;
}

std::span<const std::byte> bytes(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

std::string text(std::span<const std::byte> data) {
  return std::string(reinterpret_cast<const char*>(data.data()), data.size());
}

// ---------------------------------------------------------------------------------------
// The type.

TEST(IncompleteTransferTest, NamesTheOperationTheCountsAndTheCause) {
  std::optional<IncompleteTransfer> caught;
  try {
    try {
      throw std::system_error(ECONNRESET, std::system_category(), "weft: read from a TcpStream");
    } catch (...) {
      throw IncompleteTransfer("readExactly from a TcpStream", 10, 16);
    }
  } catch (const IncompleteTransfer& e) {
    caught.emplace(e);
  }
  ASSERT_TRUE(caught);
  const IncompleteTransfer& e = *caught;
  EXPECT_EQ(e.bytesTransferred(), 10u);
  EXPECT_EQ(e.bytesRequested(), 16u);
  const std::string what = e.what();
  EXPECT_NE(what.find("readExactly from a TcpStream"), std::string::npos) << what;
  EXPECT_NE(what.find("10 of 16 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("weft: read from a TcpStream: "), std::string::npos) << what;
  EXPECT_EQ(causeErrno(e), ECONNRESET);
  // A std::nested_exception: the standard way to reach the cause works too.
  EXPECT_THROW(std::rethrow_if_nested(e), std::system_error);
  // Neither a cancellation nor a timeout (so withTimeout passes it through).
  const std::exception_ptr asPointer = std::make_exception_ptr(e);
  EXPECT_THROW(std::rethrow_exception(asPointer), std::runtime_error);
  try {
    std::rethrow_exception(asPointer);
  } catch (const OperationCancelled&) {
    ADD_FAILURE() << "an IncompleteTransfer is an OperationCancelled";
  } catch (const TimeoutError&) {
    ADD_FAILURE() << "an IncompleteTransfer is a TimeoutError";
  } catch (const IncompleteTransfer&) {
  }
}

TEST(IncompleteTransferTest, RefusesToBeBuiltWithoutACause) {
  try {
    IncompleteTransfer e("writeAll to a TcpStream", 1, 2);
    ADD_FAILURE() << "built outside a handler: " << e.what();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("outside a catch block"), std::string::npos) << e.what();
  }
}

// withTimeout passes an IncompleteTransfer through, though it came after the timeout's
// cancellation: "TimeoutError means the work obtained nothing" stays true.
TEST(IncompleteTransferTest, WithTimeoutPassesItThrough) {
  ThreadPool pool(1);
  auto work = []() -> Lazy<void> {
    try {
      co_await sleep(1h);  // cancelled by the timeout
    } catch (...) {
      throw IncompleteTransfer("a transfer", 3, 8);
    }
  };
  const auto e = catchIncomplete([&] { syncAwait(withTimeout(work(), 1ms), &pool); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->bytesTransferred(), 3u);
  EXPECT_TRUE(causeIs<OperationCancelled>(*e));
}

// ---------------------------------------------------------------------------------------
// TcpStream::readExactly.

class TcpStreamIncompleteTransferTest : public test::IoBackendTest {};

const std::string kFirst = "0123456789";  // sent before readExactly starts
const std::string kRest = "ABCDEF";       // the rest of the 16 bytes, sent after it stopped
const std::string kTail = "-tail";        // what follows them on the stream
constexpr std::size_t kAsked = 16;

// Sends kFirst from the peer and waits until the stream has all of it to read.
void sendFirstPart(test::StreamAndPeer& pair) {
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), kFirst.data(), kFirst.size()));
  waitUntil([&] { return queuedToRead(pair.stream.nativeHandle()) == static_cast<int>(kFirst.size()); });
}

// After readExactly stopped with `e`: the buffer holds kFirst, and the rest of the stream
// (sent now) is read by the next reads, exactly once.
void expectTheRestFollows(ThreadPool& pool, test::StreamAndPeer& pair,
                          std::array<std::byte, kAsked>& buffer, const IncompleteTransfer& e) {
  ASSERT_EQ(e.bytesTransferred(), kFirst.size()) << e.what();
  EXPECT_EQ(e.bytesRequested(), kAsked);
  EXPECT_EQ(text(std::span(buffer).first(kFirst.size())), kFirst);
  const std::string later = kRest + kTail;
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), later.data(), later.size()));
  ::shutdown(pair.peer.get(), SHUT_WR);
  syncAwait(pair.stream.readExactly(std::span(buffer).subspan(e.bytesTransferred())), &pool);
  EXPECT_EQ(text(buffer), kFirst + kRest);
  std::array<std::byte, 64> tail;
  std::size_t got = 0;
  auto readSome = [&]() -> Lazy<std::size_t> {
    co_return co_await pair.stream.read(std::span(tail).subspan(got));
  };
  while (std::size_t n = syncAwait(readSome(), &pool)) got += n;
  EXPECT_EQ(text(std::span(tail).first(got)), kTail);
}

TEST_P(TcpStreamIncompleteTransferTest, ReadExactlyStoppedByWithTimeoutSaysHowMuchItRead) {
  test::Watchdog watchdog(120s, "ReadExactlyStoppedByWithTimeout");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  sendFirstPart(pair);
  std::array<std::byte, kAsked> buffer{};
  // The timer fires for sure: the peer sends nothing more until the caller got its
  // answer. It may fire before the first read took the bytes (a stalled machine): then
  // nothing was read, the answer is TimeoutError, and the test waits longer.
  for (auto limit = 20ms;; limit *= 2) {
    try {
      syncAwait(withTimeout(pair.stream.readExactly(buffer), limit), &pool);
      FAIL() << "readExactly finished without the rest of the data";
    } catch (const TimeoutError&) {
      ASSERT_EQ(queuedToRead(pair.stream.nativeHandle()), static_cast<int>(kFirst.size()))
          << "a TimeoutError, yet bytes were taken from the stream";
      ASSERT_LT(limit, 20s);
      continue;
    } catch (const IncompleteTransfer& e) {
      EXPECT_TRUE(causeIs<OperationCancelled>(e)) << e.what();
      EXPECT_NE(std::string(e.what()).find("readExactly"), std::string::npos) << e.what();
      expectTheRestFollows(pool, pair, buffer, e);
    }
    break;
  }
}

TEST_P(TcpStreamIncompleteTransferTest, ReadExactlyStoppedByCancellationSaysHowMuchItRead) {
  test::Watchdog watchdog(60s, "ReadExactlyStoppedByCancellation");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  sendFirstPart(pair);
  std::array<std::byte, kAsked> buffer{};
  CancellationSource source;
  Outcome<void> read;
  startOn(pool, withCancellation(source.token(), pair.stream.readExactly(buffer)), read);
  // The first read took the 10 bytes; then readExactly waits for the rest.
  waitUntil([&] { return queuedToRead(pair.stream.nativeHandle()) == 0; });
  quiesce(pool);
  EXPECT_EQ(read.ends.load(), 0);
  source.requestCancellation();
  read.wait();
  const auto e = catchIncomplete([&] { read.result.value(); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(causeIs<OperationCancelled>(*e)) << e->what();
  expectTheRestFollows(pool, pair, buffer, *e);
}

TEST_P(TcpStreamIncompleteTransferTest, ReadExactlyStoppedByTheReadTimeLimitSaysHowMuchItRead) {
  test::Watchdog watchdog(120s, "ReadExactlyStoppedByTheReadTimeLimit");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  sendFirstPart(pair);
  std::array<std::byte, kAsked> buffer{};
  for (auto limit = 20ms;; limit *= 2) {
    pair.stream.setReadTimeout(limit);
    try {
      syncAwait(pair.stream.readExactly(buffer), &pool);
      FAIL() << "readExactly finished without the rest of the data";
    } catch (const IncompleteTransfer& e) {
      EXPECT_EQ(causeErrno(e), ETIMEDOUT) << e.what();
      pair.stream.setReadTimeout(0s);
      expectTheRestFollows(pool, pair, buffer, e);
    } catch (const std::system_error& e) {
      // Only if the first read itself timed out: nothing read.
      ASSERT_EQ(e.code().value(), ETIMEDOUT) << e.what();
      ASSERT_EQ(queuedToRead(pair.stream.nativeHandle()), static_cast<int>(kFirst.size()));
      ASSERT_LT(limit, 20s);
      continue;
    }
    break;
  }
}

TEST_P(TcpStreamIncompleteTransferTest, ReadExactlyStoppedByAResetSaysHowMuchItRead) {
  test::Watchdog watchdog(60s, "ReadExactlyStoppedByAReset");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  sendFirstPart(pair);
  std::array<std::byte, kAsked> buffer{};
  Outcome<void> read;
  startOn(pool, pair.stream.readExactly(buffer), read);
  waitUntil([&] { return queuedToRead(pair.stream.nativeHandle()) == 0; });
  quiesce(pool);
  // Closing with a zero linger time resets the connection: the waiting read fails.
  const linger resetOnClose{1, 0};
  ASSERT_EQ(::setsockopt(pair.peer.get(), SOL_SOCKET, SO_LINGER, &resetOnClose, sizeof resetOnClose), 0);
  pair.peer.reset();
  read.wait();
  const auto e = catchIncomplete([&] { read.result.value(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->bytesTransferred(), kFirst.size()) << e->what();
  EXPECT_EQ(causeErrno(*e), ECONNRESET) << e->what();
  EXPECT_EQ(text(std::span(buffer).first(kFirst.size())), kFirst);
}

TEST_P(TcpStreamIncompleteTransferTest, ReadExactlyStoppedByTheShutdownSaysHowMuchItRead) {
  test::Watchdog watchdog(60s, "ReadExactlyStoppedByTheShutdown");
  std::optional<ThreadPool> pool;
  pool.emplace(options(1));
  test::StreamAndPeer pair = test::connectedPair(*pool);
  sendFirstPart(pair);
  std::array<std::byte, kAsked> buffer{};
  Outcome<void> read;
  startOn(*pool, pair.stream.readExactly(buffer), read);
  waitUntil([&] { return queuedToRead(pair.stream.nativeHandle()) == 0; });
  quiesce(*pool);
  pool->shutdown();
  read.wait();
  const auto e = catchIncomplete([&] { read.result.value(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->bytesTransferred(), kFirst.size()) << e->what();
  EXPECT_TRUE(causeIs<ExecutorShutDown>(*e)) << e->what();
  EXPECT_EQ(text(std::span(buffer).first(kFirst.size())), kFirst);
}

// With nothing read, the failure is the one that stopped the read, unchanged.
TEST_P(TcpStreamIncompleteTransferTest, ReadExactlyThatReadNothingThrowsTheFailureUnchanged) {
  test::Watchdog watchdog(60s, "ReadExactlyThatReadNothing");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  std::array<std::byte, kAsked> buffer{};
  EXPECT_THROW(syncAwait(withTimeout(pair.stream.readExactly(buffer), 10ms), &pool), TimeoutError);
  CancellationSource source;
  source.requestCancellation();
  EXPECT_THROW(syncAwait(withCancellation(source.token(), pair.stream.readExactly(buffer)), &pool),
               OperationCancelled);
  pair.stream.setReadTimeout(10ms);
  try {
    syncAwait(pair.stream.readExactly(buffer), &pool);
    ADD_FAILURE() << "no exception";
  } catch (const IncompleteTransfer& e) {
    ADD_FAILURE() << e.what();
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ETIMEDOUT) << e.what();
  }
}

// The end of the stream keeps its own type and count, with or without bytes read.
TEST_P(TcpStreamIncompleteTransferTest, TheEndOfTheStreamIsStillEndOfStream) {
  test::Watchdog watchdog(60s, "TheEndOfTheStreamIsStillEndOfStream");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  sendFirstPart(pair);
  ::shutdown(pair.peer.get(), SHUT_WR);
  std::array<std::byte, kAsked> buffer{};
  for (const std::size_t expected : {kFirst.size(), std::size_t{0}}) {
    try {
      syncAwait(pair.stream.readExactly(buffer), &pool);
      ADD_FAILURE() << "no exception";
    } catch (const IncompleteTransfer& e) {
      ADD_FAILURE() << e.what();
    } catch (const EndOfStream& e) {
      EXPECT_EQ(e.bytesRead(), expected);
    }
  }
  EXPECT_EQ(text(std::span(buffer).first(kFirst.size())), kFirst);
}

// ---------------------------------------------------------------------------------------
// TcpStream::writeAll.

constexpr std::size_t kWriteSize = 4 << 20;  // far more than the peer's receive buffer

void setSendBuffer(TcpStream& stream, int size) {
  ASSERT_EQ(::setsockopt(stream.nativeHandle(), SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
}

// The stream's send buffer made small, so that writeAll waits for room early.
void shrinkSendBuffer(TcpStream& stream) { setSendBuffer(stream, 4096); }

// Receives exactly `size` bytes from a blocking socket.
std::vector<std::byte> receiveExactly(int fd, std::size_t size) {
  std::vector<std::byte> data(size);
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, data.data() + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ADD_FAILURE() << "recv: " << (n == 0 ? "end of stream" : std::strerror(errno)) << " after "
                    << got << " of " << size << " bytes";
      data.resize(got);
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  return data;
}

// After writeAll stopped with `e`: the peer has received exactly data[0, n) (nothing
// beyond it is on the way), then exactly data[n..] once the caller writes that.
void expectThePeerGotThePrefixThenTheRest(ThreadPool& pool, test::StreamAndPeer& pair,
                                          const std::vector<std::byte>& data,
                                          const IncompleteTransfer& e) {
  const std::size_t n = e.bytesTransferred();
  ASSERT_GE(n, 1u) << e.what();
  ASSERT_LT(n, data.size()) << e.what();
  EXPECT_EQ(e.bytesRequested(), data.size());
  const std::vector<std::byte> prefix = receiveExactly(pair.peer.get(), n);
  ASSERT_EQ(prefix.size(), n);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), data.begin())) << "the prefix differs";
  // Everything the stream sent has arrived (acknowledged): nothing beyond n.
  waitUntil([&] { return notYetAcknowledged(pair.stream.nativeHandle()) == 0; });
  EXPECT_EQ(queuedToRead(pair.peer.get()), 0) << "more than the " << n << " bytes reported were sent";
  // The rest, written by the caller from data[n], completes the stream exactly (with a
  // send buffer of a usual size: through a small one, 4 MiB take seconds).
  setSendBuffer(pair.stream, 1 << 20);
  std::vector<std::byte> rest;
  std::thread reader([&] {
    std::array<std::byte, 65536> chunk;
    for (;;) {
      const ssize_t r = ::recv(pair.peer.get(), chunk.data(), chunk.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      rest.insert(rest.end(), chunk.begin(), chunk.begin() + r);
    }
  });
  syncAwait(pair.stream.writeAll(std::span(data).subspan(n)), &pool);
  pair.stream.shutdownWrite();
  reader.join();
  ASSERT_EQ(rest.size(), data.size() - n);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), data.begin() + static_cast<std::ptrdiff_t>(n)))
      << "the rest differs";
}

TEST_P(TcpStreamIncompleteTransferTest, WriteAllStoppedByCancellationSaysHowMuchItWrote) {
  test::Watchdog watchdog(120s, "WriteAllStoppedByCancellation");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  shrinkSendBuffer(pair.stream);
  const std::vector<std::byte> data = pattern(kWriteSize);
  CancellationSource source;
  Outcome<void> write;
  startOn(pool, withCancellation(source.token(), pair.stream.writeAll(data)), write);
  // Some bytes reached the peer: a write returned them (a completed write's count is
  // returned even if the cancellation comes next). The peer reads nothing, so writeAll
  // cannot finish.
  waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
  quiesce(pool);
  EXPECT_EQ(write.ends.load(), 0);
  source.requestCancellation();
  write.wait();
  const auto e = catchIncomplete([&] { write.result.value(); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(causeIs<OperationCancelled>(*e)) << e->what();
  EXPECT_NE(std::string(e->what()).find("writeAll"), std::string::npos) << e->what();
  expectThePeerGotThePrefixThenTheRest(pool, pair, data, *e);
}

TEST_P(TcpStreamIncompleteTransferTest, WriteAllStoppedByWithTimeoutSaysHowMuchItWrote) {
  test::Watchdog watchdog(120s, "WriteAllStoppedByWithTimeout");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  shrinkSendBuffer(pair.stream);
  const std::vector<std::byte> data = pattern(kWriteSize);
  // The timer fires for sure: the peer reads nothing. If it fired before the first write
  // (a stalled machine), nothing was sent: TimeoutError, and the test waits longer.
  for (auto limit = 20ms;; limit *= 2) {
    try {
      syncAwait(withTimeout(pair.stream.writeAll(data), limit), &pool);
      FAIL() << "writeAll finished though the peer reads nothing";
    } catch (const TimeoutError&) {
      ASSERT_EQ(notYetAcknowledged(pair.stream.nativeHandle()), 0);
      ASSERT_EQ(queuedToRead(pair.peer.get()), 0) << "a TimeoutError, yet bytes were sent";
      ASSERT_LT(limit, 20s);
      continue;
    } catch (const IncompleteTransfer& e) {
      EXPECT_TRUE(causeIs<OperationCancelled>(e)) << e.what();
      expectThePeerGotThePrefixThenTheRest(pool, pair, data, e);
    }
    break;
  }
}

TEST_P(TcpStreamIncompleteTransferTest, WriteAllStoppedByTheWriteTimeLimitSaysHowMuchItWrote) {
  test::Watchdog watchdog(120s, "WriteAllStoppedByTheWriteTimeLimit");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  shrinkSendBuffer(pair.stream);
  const std::vector<std::byte> data = pattern(kWriteSize);
  for (auto limit = 20ms;; limit *= 2) {
    pair.stream.setWriteTimeout(limit);
    try {
      syncAwait(pair.stream.writeAll(data), &pool);
      FAIL() << "writeAll finished though the peer reads nothing";
    } catch (const IncompleteTransfer& e) {
      EXPECT_EQ(causeErrno(e), ETIMEDOUT) << e.what();
      pair.stream.setWriteTimeout(0s);
      expectThePeerGotThePrefixThenTheRest(pool, pair, data, e);
    } catch (const std::system_error& e) {
      // Only if the first write itself timed out: nothing sent.
      ASSERT_EQ(e.code().value(), ETIMEDOUT) << e.what();
      ASSERT_EQ(queuedToRead(pair.peer.get()), 0);
      ASSERT_LT(limit, 20s);
      continue;
    }
    break;
  }
}

TEST_P(TcpStreamIncompleteTransferTest, WriteAllStoppedByAResetSaysHowMuchItWrote) {
  test::Watchdog watchdog(60s, "WriteAllStoppedByAReset");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  shrinkSendBuffer(pair.stream);
  const std::vector<std::byte> data = pattern(kWriteSize);
  Outcome<void> write;
  startOn(pool, pair.stream.writeAll(data), write);
  waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
  quiesce(pool);
  const linger resetOnClose{1, 0};
  ASSERT_EQ(::setsockopt(pair.peer.get(), SOL_SOCKET, SO_LINGER, &resetOnClose, sizeof resetOnClose), 0);
  pair.peer.reset();
  write.wait();
  const auto e = catchIncomplete([&] { write.result.value(); });
  ASSERT_TRUE(e);
  EXPECT_GE(e->bytesTransferred(), 1u);
  EXPECT_LT(e->bytesTransferred(), data.size());
  const int error = causeErrno(*e);
  EXPECT_TRUE(error == ECONNRESET || error == EPIPE) << e->what();
}

TEST_P(TcpStreamIncompleteTransferTest, WriteAllThatWroteNothingThrowsTheFailureUnchanged) {
  test::Watchdog watchdog(60s, "WriteAllThatWroteNothing");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  CancellationSource source;
  source.requestCancellation();
  EXPECT_THROW(syncAwait(withCancellation(source.token(), pair.stream.writeAll("never")), &pool),
               OperationCancelled);
  pair.peer.reset();
  pair.stream.close();
  try {
    syncAwait(pair.stream.writeAll("closed"), &pool);
    ADD_FAILURE() << "no exception";
  } catch (const IncompleteTransfer& e) {
    ADD_FAILURE() << e.what();
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EBADF) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpStreamIncompleteTransferTest, test::kIoBackends,
                         test::ioBackendName);

// ---------------------------------------------------------------------------------------
// File::readExactlyAt and writeAllAt.

// A file under TMPDIR (or /tmp), removed at the end.
class TempFile {
 public:
  TempFile() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "weft-incomplete-XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0) throw std::system_error(errno, std::system_category(), "mkstemp");
    ::close(fd);
    path_ = pattern;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The process's file size limit (RLIMIT_FSIZE) lowered to `limit`, with SIGXFSZ ignored,
// until restore() or the destructor: a write that crosses the limit writes up to it and
// returns the short count, and the next one fails with EFBIG.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t limit) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &saved_), 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    EXPECT_EQ(::sigaction(SIGXFSZ, &ignore, &savedAction_), 0);
    rlimit lowered = saved_;
    lowered.rlim_cur = limit;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &lowered), 0);
  }
  ~FileSizeLimit() { restore(); }
  void restore() {
    if (restored_) return;
    restored_ = true;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &saved_), 0);
    EXPECT_EQ(::sigaction(SIGXFSZ, &savedAction_, nullptr), 0);
  }

 private:
  rlimit saved_{};
  struct sigaction savedAction_ {};
  bool restored_ = false;
};

constexpr FileMode kReadWrite = FileMode::kReadWrite;
// Far above what any other write of the test process reaches (its logs), so lowering
// the limit disturbs nothing else; the file is sparse.
constexpr rlim_t kFileSizeLimit = rlim_t{1} << 30;

class FileIncompleteTransferTest : public test::IoBackendTest {};

// writeAllAt of 16 bytes ending 6 bytes past the size limit: the first write writes 10
// (a short write), the second fails with EFBIG.
TEST_P(FileIncompleteTransferTest, WriteAllAtStoppedByAnErrorSaysHowMuchItWrote) {
  test::Watchdog watchdog(60s, "WriteAllAtStoppedByAnError");
  ThreadPool pool(options(1));
  TempFile temp;
  File file = syncAwait(File::open(temp.path(), kReadWrite), &pool);
  const std::string data = kFirst + kRest;
  const std::uint64_t offset = kFileSizeLimit - kFirst.size();
  std::optional<IncompleteTransfer> e;
  {
    FileSizeLimit limit(kFileSizeLimit);
    e = catchIncomplete([&] { syncAwait(file.writeAllAt(bytes(data), offset), &pool); });
  }
  ASSERT_TRUE(e);
  EXPECT_EQ(e->bytesTransferred(), kFirst.size()) << e->what();
  EXPECT_EQ(e->bytesRequested(), data.size());
  EXPECT_EQ(causeErrno(*e), EFBIG) << e->what();
  EXPECT_NE(std::string(e->what()).find("writeAllAt on " + temp.path()), std::string::npos)
      << e->what();
  EXPECT_EQ(syncAwait(file.size(), &pool), kFileSizeLimit);
  // The limit lifted, the rest goes after the prefix: the file holds the buffer once.
  syncAwait(file.writeAllAt(bytes(data).subspan(e->bytesTransferred()),
                            offset + e->bytesTransferred()),
            &pool);
  std::string back(data.size(), '?');
  syncAwait(file.readExactlyAt(std::as_writable_bytes(std::span(back)), offset), &pool);
  EXPECT_EQ(back, data);
  EXPECT_EQ(syncAwait(file.size(), &pool), offset + data.size());
}

INSTANTIATE_TEST_SUITE_P(Backends, FileIncompleteTransferTest, test::kIoBackends,
                         test::ioBackendName);

// The process-wide blocking pool (where File's calls go from a thread without an event
// loop) held to one thread, and that thread held busy by a call of the test's until
// release(): a File call made meanwhile waits in the queue, so it cannot complete before
// its coroutine has suspended.
class BlockingPoolHeld {
 public:
  explicit BlockingPoolHeld(ThreadPool& pool) : blockingPool_(BlockingPool::defaultPool()) {
    savedMaxThreads_ = blockingPool_.maxThreads();
    blockingPool_.setMaxThreads(1);
    waitUntil([&] { return blockingPool_.threadCount() <= 1; });  // surplus idle ones leave
    auto hold = [this]() -> Lazy<void> {
      co_await blocking([this] {
        holding_.store(true);
        release_.wait(false);
      });
    };
    startOn(pool, hold(), held_);
    waitUntil([&] { return holding_.load(); });
  }
  ~BlockingPoolHeld() {
    release();
    blockingPool_.setMaxThreads(savedMaxThreads_);
  }
  std::size_t queued() const { return blockingPool_.queuedCount(); }
  void release() {
    release_.store(true);
    release_.notify_all();
    held_.wait();
  }

 private:
  BlockingPool& blockingPool_;
  std::size_t savedMaxThreads_ = 0;
  std::atomic<bool> holding_{false};
  std::atomic<bool> release_{false};
  Outcome<void> held_;
};

// Runs the operation started on `executor` (by the test thread, which has no event loop:
// File's calls go to the blocking pool, and resume on `executor`) until its first call
// has come back, requests cancellation, and runs it to its end: the cancellation comes
// after the first call and before the second.
void cancelAfterTheFirstCall(ThreadPool& pool, test::ManualExecutor& executor,
                             CancellationSource& source, Outcome<void>& outcome) {
  BlockingPoolHeld held(pool);
  executor.runAll();  // starts it: its first call waits in the blocking pool's queue
  EXPECT_EQ(held.queued(), 1u);
  held.release();  // the first call runs, then its coroutine is scheduled on `executor`
  waitUntil([&] { return executor.pending() > 0; });
  EXPECT_EQ(outcome.ends.load(), 0);
  source.requestCancellation();
  while (outcome.ends.load() == 0) {
    executor.runAll();
    std::this_thread::yield();
  }
}

TEST(FileIncompleteTransferTest, ReadExactlyAtStoppedByCancellationSaysHowMuchItRead) {
  test::Watchdog watchdog(60s, "ReadExactlyAtStoppedByCancellation");
  ThreadPool pool(1);
  TempFile temp;
  File file = syncAwait(File::open(temp.path(), kReadWrite), &pool);
  syncAwait(file.writeAllAt(bytes(kFirst), 0), &pool);  // the file is 10 bytes long
  std::array<std::byte, kAsked> buffer{};
  test::ManualExecutor executor;
  CancellationSource source;
  Outcome<void> read;
  // The first call reads the 10 bytes; the second (at the end of the file: it would
  // return 0 and readExactlyAt throw EndOfFile) never starts.
  startOn(executor, withCancellation(source.token(), file.readExactlyAt(buffer, 0)), read);
  cancelAfterTheFirstCall(pool, executor, source, read);
  const auto e = catchIncomplete([&] { read.result.value(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->bytesTransferred(), kFirst.size()) << e->what();
  EXPECT_TRUE(causeIs<OperationCancelled>(*e)) << e->what();
  EXPECT_NE(std::string(e->what()).find("readExactlyAt on " + temp.path()), std::string::npos)
      << e->what();
  EXPECT_EQ(text(std::span(buffer).first(kFirst.size())), kFirst);
}

TEST(FileIncompleteTransferTest, WriteAllAtStoppedByCancellationSaysHowMuchItWrote) {
  test::Watchdog watchdog(60s, "WriteAllAtStoppedByCancellation");
  ThreadPool pool(1);
  TempFile temp;
  File file = syncAwait(File::open(temp.path(), kReadWrite), &pool);
  const std::string data = kFirst + kRest;
  const std::uint64_t offset = kFileSizeLimit - kFirst.size();
  test::ManualExecutor executor;
  CancellationSource source;
  Outcome<void> write;
  {
    // The first call writes 10 bytes (up to the limit); the second never starts.
    FileSizeLimit limit(kFileSizeLimit);
    startOn(executor, withCancellation(source.token(), file.writeAllAt(bytes(data), offset)), write);
    cancelAfterTheFirstCall(pool, executor, source, write);
  }
  const auto e = catchIncomplete([&] { write.result.value(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->bytesTransferred(), kFirst.size()) << e->what();
  EXPECT_TRUE(causeIs<OperationCancelled>(*e)) << e->what();
  EXPECT_EQ(syncAwait(file.size(), &pool), kFileSizeLimit);
  std::string back(kFirst.size(), '?');
  syncAwait(file.readExactlyAt(std::as_writable_bytes(std::span(back)), offset), &pool);
  EXPECT_EQ(back, kFirst);
}

}  // namespace
}  // namespace weft
