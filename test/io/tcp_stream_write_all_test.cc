// TcpStream::writeAll of one buffer and readExactly as one operation on the event loop
// (detail::WholeTransferAwaitable, IoOperation::whole): what carrying a transfer on after
// its partial transfers, without resuming the coroutine in between, could get wrong. Every
// test runs once per backend.
//
//  - Large buffers through many partial transfers (a 4 KiB send buffer; a peer that reads
//    or writes in 4 KiB pieces): every byte in place, with and without a time limit
//    (whose timer each further wait arms anew), from a Lazy and from a fiber.
//  - Order: a writeAll waiting part-way keeps its place: writes issued after it (a
//    writeAll, a write) go after all of its bytes; a read issued after a readExactly gets
//    bytes only after it is full. (A loop that served the next operation when the first
//    one's part completed put the later bytes inside the first's: the test's rounds
//    catch that at once.)
//  - Cancellation and withTimeout racing partial transfers, in rounds with the cut at
//    different places: the count an IncompleteTransfer reports is exactly what the peer
//    received (writes) or what the buffer holds before the rest of the stream (reads).
//  - Destroying a coroutine suspended part-way (on the worker) withdraws the transfer:
//    the stream stays usable, nothing more of the withdrawn buffer moves.
//  - A close while a writeAll waits part-way; a pool shutdown; a closed stream (EBADF);
//    empty buffers, which complete at once whatever the stream's state.
//  - The awaitable where a Lazy went: converted to Lazy<void>, .via, syncAwait with an
//    executor, collectAll, spawn, withTimeout; called twice.
//
// Hand-shakes only (what the peer has received, FIONREAD, quiesce): no sleep.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "test/support/counted.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/spawn.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/task_group.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/tcp_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Outcome;
using test::queuedToRead;
using test::quiesce;
using test::startOn;
using test::waitUntil;

constexpr std::size_t kPiece = 4096;  // what the peer reads or writes at a time
// The stream's send buffer for the large transfers: far smaller than the buffer, so that
// it is written in hundreds of parts.
constexpr int kLargeSendBuffer = 32 * 1024;

std::size_t largeSize() { return test::reducedIoScale() ? (1u << 20) : (8u << 20); }
int rounds(int full) { return test::reducedIoScale() ? std::max(full / 4, 3) : full; }

// Bytes that differ with their position and with `seed`, so that a misplaced, repeated
// or foreign run shows.
std::vector<std::byte> pattern(int seed, std::size_t size) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) {
    bytes[i] =
        static_cast<std::byte>((i * 131 + (i >> 9) + static_cast<std::size_t>(seed) * 71) & 0xff);
  }
  return bytes;
}

// "" when `got` equals `want`, else where they first differ.
std::string firstDifference(const std::vector<std::byte>& got, const std::vector<std::byte>& want) {
  const auto [g, w] = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
  if (g == got.end() && w == want.end()) return "";
  return "got " + std::to_string(got.size()) + " bytes, want " + std::to_string(want.size()) +
         "; first difference at byte " + std::to_string(g - got.begin());
}

void setBufferSize(int fd, int option, int size) {
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, option, &size, sizeof size), 0) << std::strerror(errno);
}

// A thread that reads `fd` in pieces of `piece` bytes until the end of the stream (or an
// error), keeping what it got; received() counts it as it goes.
class PeerReader {
 public:
  explicit PeerReader(int fd, std::size_t piece = kPiece) {
    thread_ = std::thread([this, fd, piece] {
      std::vector<std::byte> chunk(piece);
      for (;;) {
        // Acknowledge at once (TCP_QUICKACK lasts a while only): a send buffer smaller
        // than loopback's segments otherwise waits for a delayed acknowledgement (40 ms)
        // at each fill, which would make the large transfers take seconds.
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
        const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        data_.insert(data_.end(), chunk.begin(), chunk.begin() + n);
        count_.fetch_add(static_cast<std::size_t>(n));
      }
    });
  }
  PeerReader(const PeerReader&) = delete;
  PeerReader& operator=(const PeerReader&) = delete;
  ~PeerReader() {
    if (thread_.joinable()) thread_.join();
  }
  std::size_t received() const { return count_.load(); }
  // After the writer ended the stream (or closed it): everything the peer got.
  std::vector<std::byte> join() {
    thread_.join();
    return std::move(data_);
  }

 private:
  std::atomic<std::size_t> count_{0};
  std::vector<std::byte> data_;
  std::thread thread_;
};

// The bytes a whole transfer moved before it ended with `error` (none: all of `size`).
// An IncompleteTransfer says how many; any other failure means none.
std::size_t movedBy(const std::exception_ptr& error, std::size_t size, std::string* what) {
  if (!error) return size;
  try {
    std::rethrow_exception(error);
  } catch (const IncompleteTransfer& e) {
    *what = e.what();
    EXPECT_EQ(e.bytesRequested(), size);
    EXPECT_GE(e.bytesTransferred(), 1u);
    EXPECT_LT(e.bytesTransferred(), size);
    return e.bytesTransferred();
  } catch (const std::exception& e) {
    *what = e.what();
  }
  return 0;
}

Lazy<void> writeAllOf(TcpStream& stream, std::span<const std::byte> bytes) {
  co_await stream.writeAll(bytes);
}
Lazy<void> readExactlyInto(TcpStream& stream, std::span<std::byte> buffer) {
  co_await stream.readExactly(buffer);
}
Lazy<std::size_t> readOnce(TcpStream& stream, std::span<std::byte> buffer) {
  co_return co_await stream.read(buffer);
}
Lazy<std::size_t> writeOnce(TcpStream& stream, std::span<const std::byte> bytes) {
  co_return co_await stream.write(bytes);
}

class TcpStreamWriteAllTest : public test::IoBackendTest {};

// ---------------------------------------------------------------------------------------
// Large buffers through partial transfers.

TEST_P(TcpStreamWriteAllTest, WritesEveryByteOfALargeBufferThroughPartialWrites) {
  test::Watchdog watchdog(240s, "WritesEveryByteOfALargeBuffer");
  ThreadPool pool(options(1));
  const std::vector<std::byte> data = pattern(1, largeSize());
  for (const bool timed : {false, true}) {
    test::StreamAndPeer pair = test::connectedPair(pool);
    setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, kLargeSendBuffer);
    // Never reached: each wait for room arms the limit again (its timer, io_uring's linked
    // timeout or the epoll loop's deadline), and the transfer must go on regardless.
    if (timed) pair.stream.setWriteTimeout(1h);
    Outcome<void> write;
    startOn(pool, pair.stream.writeAll(data), write);
    // Part of it is sent; the rest waits for room, which only the peer's reads make.
    waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
    quiesce(pool);
    EXPECT_EQ(write.ends.load(), 0) << "writeAll ended though the peer read nothing";
    PeerReader reader(pair.peer.get());
    write.wait();
    ASSERT_FALSE(write.result.hasException()) << write.what();
    EXPECT_EQ(write.ends.load(), 1);
    pair.stream.shutdownWrite();
    const std::vector<std::byte> received = reader.join();
    EXPECT_EQ(firstDifference(received, data), "") << "timed " << timed;
  }
}

TEST_P(TcpStreamWriteAllTest, ReadsEveryByteOfALargeBufferThroughPartialReads) {
  test::Watchdog watchdog(240s, "ReadsEveryByteOfALargeBuffer");
  ThreadPool pool(options(1));
  const std::vector<std::byte> data = pattern(2, largeSize());
  for (const bool timed : {false, true}) {
    test::StreamAndPeer pair = test::connectedPair(pool);
    if (timed) pair.stream.setReadTimeout(1h);
    std::vector<std::byte> buffer(data.size());
    Outcome<void> read;
    startOn(pool, pair.stream.readExactly(buffer), read);
    // The peer writes in pieces: the read completes part by part.
    std::thread writer([&] {
      for (std::size_t at = 0; at < data.size(); at += kPiece) {
        ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), data.data() + at,
                                          std::min(kPiece, data.size() - at)));
      }
    });
    read.wait();
    writer.join();
    ASSERT_FALSE(read.result.hasException()) << read.what();
    EXPECT_EQ(firstDifference(buffer, data), "") << "timed " << timed;
  }
}

TEST_P(TcpStreamWriteAllTest, FibersWriteAndReadWholeBuffers) {
  test::Watchdog watchdog(240s, "FibersWriteAndReadWholeBuffers");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, kLargeSendBuffer);
  const std::vector<std::byte> data = pattern(3, largeSize());
  PeerReader reader(pair.peer.get());
  FiberFuture<void> writer = spawnFiber(&pool, [&] {
    await(pair.stream.writeAll(data));
    pair.stream.shutdownWrite();
  });
  syncAwait(std::move(writer));
  EXPECT_EQ(firstDifference(reader.join(), data), "");

  std::vector<std::byte> buffer(data.size());
  FiberFuture<void> fiberReader =
      spawnFiber(&pool, [&] { await(pair.stream.readExactly(buffer)); });
  for (std::size_t at = 0; at < data.size(); at += kPiece) {
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), data.data() + at,
                                      std::min(kPiece, data.size() - at)));
  }
  syncAwait(std::move(fiberReader));
  EXPECT_EQ(firstDifference(buffer, data), "");
}

// ---------------------------------------------------------------------------------------
// Order.

// A writeAll that waits part-way, then a writeAll and a write issued after it by other
// coroutines: the peer gets all of the first, then all of the second, then the third's
// bytes. With a time limit too: the later ones queue with timers of their own (io_uring),
// and the second goes on part by part once its turn comes.
TEST_P(TcpStreamWriteAllTest, WritesIssuedLaterNeverGoInsideAWriteAll) {
  test::Watchdog watchdog(240s, "WritesIssuedLaterNeverGoInsideAWriteAll");
  ThreadPool pool(options(1));
  const std::vector<std::byte> first = pattern(10, 256 * 1024);
  const std::vector<std::byte> second = pattern(11, 96 * 1024);
  const std::vector<std::byte> third = pattern(12, 3000);
  for (int round = 0; round < rounds(20); ++round) {
    const bool timed = round % 2 == 1;
    test::StreamAndPeer pair = test::connectedPair(pool);
    setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, 4096);
    if (timed) pair.stream.setWriteTimeout(1h);
    Outcome<void> write1, write2;
    Outcome<std::size_t> write3;
    startOn(pool, writeAllOf(pair.stream, first), write1);
    waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
    quiesce(pool);  // the first has sent a part and waits for room
    startOn(pool, writeAllOf(pair.stream, second), write2);
    quiesce(pool);
    startOn(pool, writeOnce(pair.stream, third), write3);
    quiesce(pool);
    EXPECT_EQ(write1.ends.load() + write2.ends.load() + write3.ends.load(), 0);
    // A reader that takes little at a time: room comes in many small steps, and every
    // step is a partial transfer of the operation at the head.
    PeerReader reader(pair.peer.get());
    write1.wait();
    write2.wait();
    write3.wait();
    ASSERT_FALSE(write1.result.hasException()) << write1.what();
    ASSERT_FALSE(write2.result.hasException()) << write2.what();
    ASSERT_FALSE(write3.result.hasException()) << write3.what();
    std::vector<std::byte> expected = first;
    expected.insert(expected.end(), second.begin(), second.end());
    expected.insert(expected.end(), third.begin(),
                    third.begin() + static_cast<std::ptrdiff_t>(write3.result.value()));
    pair.stream.shutdownWrite();
    ASSERT_EQ(firstDifference(reader.join(), expected), "") << "round " << round;
  }
}

// A readExactly that got part of its buffer, then a read issued after it: the peer's next
// pieces go to the readExactly until it is full, and only then to the read.
TEST_P(TcpStreamWriteAllTest, ReadsIssuedLaterNeverTakeBytesBeforeAReadExactlyIsFull) {
  test::Watchdog watchdog(240s, "ReadsIssuedLaterNeverTakeBytes");
  ThreadPool pool(options(1));
  constexpr std::size_t kParts = 6;
  constexpr std::size_t kPart = 1000;
  const std::vector<std::byte> data = pattern(20, kParts * kPart + 100);
  for (int round = 0; round < rounds(20); ++round) {
    const bool timed = round % 2 == 1;
    test::StreamAndPeer pair = test::connectedPair(pool);
    if (timed) pair.stream.setReadTimeout(1h);
    std::vector<std::byte> whole(kParts * kPart);
    std::array<std::byte, 4096> later;
    Outcome<void> read1;
    Outcome<std::size_t> read2;
    startOn(pool, readExactlyInto(pair.stream, whole), read1);
    quiesce(pool);
    std::optional<std::size_t> overtakenAt;
    for (std::size_t k = 0; k < kParts && !overtakenAt; ++k) {
      EXPECT_TRUE(test::sendAllBlocking(pair.peer.get(), data.data() + k * kPart, kPart));
      // The readExactly took this part (the socket is empty again) and waits for more.
      waitUntil([&] { return queuedToRead(pair.stream.nativeHandle()) == 0; });
      quiesce(pool);
      if (k == 0) {
        startOn(pool, readOnce(pair.stream, later), read2);  // after the first part
        quiesce(pool);
      }
      if (read2.ends.load() != 0) overtakenAt = k;
      if (k + 1 < kParts) {
        EXPECT_EQ(read1.ends.load(), 0) << "part " << k;
      }
    }
    if (overtakenAt) {
      pair.stream.close();  // ends the readExactly, which waits for bytes the read took
      read1.wait();
      FAIL() << "round " << round << ": the later read took part " << *overtakenAt
             << " before the readExactly was full";
    }
    EXPECT_TRUE(test::sendAllBlocking(pair.peer.get(), data.data() + kParts * kPart, 100));
    read1.wait();
    read2.wait();
    ASSERT_FALSE(read1.result.hasException()) << read1.what();
    ASSERT_FALSE(read2.result.hasException()) << read2.what();
    EXPECT_EQ(
        firstDifference(whole, std::vector<std::byte>(data.begin(), data.begin() + kParts * kPart)),
        "");
    ASSERT_EQ(read2.result.value(), 100u);
    EXPECT_TRUE(std::equal(later.begin(), later.begin() + 100, data.begin() + kParts * kPart));
  }
}

// ---------------------------------------------------------------------------------------
// Cancellation, time limits and failures part-way: the count is exact.

// Cancellation (or withTimeout's timer) comes while the peer reads and partial writes
// keep completing: whatever the outcome (all written, IncompleteTransfer(n), nothing
// written), the peer received exactly the bytes reported, and they are the buffer's
// first ones.
TEST_P(TcpStreamWriteAllTest, ACancellationRacingPartialWritesCountsWhatThePeerGot) {
  test::Watchdog watchdog(300s, "ACancellationRacingPartialWrites");
  ThreadPool pool(options(1));
  const std::vector<std::byte> data = pattern(30, 1 << 20);
  int incomplete = 0;
  for (int round = 0; round < rounds(40); ++round) {
    const bool byTimer = round % 2 == 1;
    test::StreamAndPeer pair = test::connectedPair(pool);
    setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, 4096);
    CancellationSource source;
    Outcome<void> write;
    if (byTimer) {
      const auto limit = std::chrono::microseconds(200 * (1 + round % 7));
      startOn(pool, withTimeout(pair.stream.writeAll(data), limit), write);
    } else {
      startOn(pool, withCancellation(source.token(), pair.stream.writeAll(data)), write);
    }
    PeerReader reader(pair.peer.get());
    if (!byTimer) {
      // The cut falls somewhere else each round, while the transfer is going on.
      const std::size_t cut = 1 + (static_cast<std::size_t>(round) * 7919 * 13) % (data.size() / 2);
      waitUntil([&] { return reader.received() >= cut || write.ends.load() != 0; });
      source.requestCancellation();
    }
    write.wait();
    std::string what;
    const std::size_t n = movedBy(write.result.exception(), data.size(), &what);
    if (n > 0 && n < data.size()) ++incomplete;
    pair.stream.shutdownWrite();
    const std::vector<std::byte> received = reader.join();
    ASSERT_EQ(firstDifference(received, std::vector<std::byte>(data.begin(), data.begin() + n)), "")
        << "round " << round << ": " << what;
  }
  // Not a requirement (a fast machine may finish first), but the cuts are meant to land.
  std::printf("%d of %d rounds stopped part-way\n", incomplete, rounds(40));
}

// The same for readExactly: the peer streams a pattern; whatever the cut, the buffer's
// first n bytes and then what later reads get are the stream, with no byte lost.
TEST_P(TcpStreamWriteAllTest, ACancellationRacingPartialReadsLosesNothing) {
  test::Watchdog watchdog(300s, "ACancellationRacingPartialReads");
  ThreadPool pool(options(1));
  const std::vector<std::byte> data = pattern(31, 1 << 20);
  for (int round = 0; round < rounds(40); ++round) {
    const bool byTimer = round % 2 == 1;
    test::StreamAndPeer pair = test::connectedPair(pool);
    std::vector<std::byte> buffer(data.size());
    std::atomic<std::size_t> sent{0};
    CancellationSource source;
    Outcome<void> read;
    if (byTimer) {
      const auto limit = std::chrono::microseconds(200 * (1 + round % 7));
      startOn(pool, withTimeout(pair.stream.readExactly(buffer), limit), read);
    } else {
      startOn(pool, withCancellation(source.token(), pair.stream.readExactly(buffer)), read);
    }
    std::thread writer([&] {
      for (std::size_t at = 0; at < data.size(); at += kPiece) {
        if (!test::sendAllBlocking(pair.peer.get(), data.data() + at,
                                   std::min(kPiece, data.size() - at))) {
          break;
        }
        sent.fetch_add(std::min(kPiece, data.size() - at));
      }
      ::shutdown(pair.peer.get(), SHUT_WR);
    });
    if (!byTimer) {
      const std::size_t cut = 1 + (static_cast<std::size_t>(round) * 7919 * 13) % (data.size() / 2);
      waitUntil([&] { return sent.load() >= cut || read.ends.load() != 0; });
      source.requestCancellation();
    }
    read.wait();
    std::string what;
    const std::size_t n = movedBy(read.result.exception(), data.size(), &what);
    // The rest of the stream, read after the cut, follows buffer[0, n) exactly.
    std::vector<std::byte> stream(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n));
    std::array<std::byte, 65536> chunk;
    for (;;) {
      const std::size_t got = syncAwait(readOnce(pair.stream, chunk).via(&pool));
      if (got == 0) break;
      stream.insert(stream.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(got));
    }
    writer.join();
    ASSERT_EQ(firstDifference(stream, data), "") << "round " << round << ": " << what;
  }
}

// Closing the stream (from another thread) while a writeAll waits part-way: it ends with
// IncompleteTransfer, its cause the close's ECANCELED, and the peer got exactly that many
// bytes before the end of the stream.
TEST_P(TcpStreamWriteAllTest, ACloseWhileAWriteAllWaitsPartWayCountsWhatWasSent) {
  test::Watchdog watchdog(120s, "ACloseWhileAWriteAllWaits");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, 4096);
  const std::vector<std::byte> data = pattern(40, 1 << 20);
  Outcome<void> write;
  startOn(pool, pair.stream.writeAll(data), write);
  waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
  quiesce(pool);
  ASSERT_EQ(write.ends.load(), 0);
  pair.stream.close();
  write.wait();
  std::string what;
  const std::size_t n = movedBy(write.result.exception(), data.size(), &what);
  try {
    write.result.value();
  } catch (const IncompleteTransfer& e) {
    try {
      std::rethrow_exception(e.cause());
    } catch (const std::system_error& cause) {
      EXPECT_EQ(cause.code().value(), ECANCELED) << e.what();
    } catch (...) {
      ADD_FAILURE() << "another cause: " << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an IncompleteTransfer: " << e.what();
  }
  PeerReader reader(pair.peer.get());
  EXPECT_EQ(firstDifference(reader.join(), std::vector<std::byte>(data.begin(), data.begin() + n)),
            "")
      << what;
}

// The pool shuts down while a writeAll waits part-way: IncompleteTransfer, its cause
// ExecutorShutDown, with the bytes the peer got.
TEST_P(TcpStreamWriteAllTest, AShutdownWhileAWriteAllWaitsPartWayCountsWhatWasSent) {
  test::Watchdog watchdog(120s, "AShutdownWhileAWriteAllWaits");
  const std::vector<std::byte> data = pattern(41, 1 << 20);
  std::optional<ThreadPool> pool(std::in_place, options(1));
  test::StreamAndPeer pair = test::connectedPair(*pool);
  setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, 4096);
  Outcome<void> write;
  startOn(*pool, pair.stream.writeAll(data), write);
  waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
  quiesce(*pool);
  pool->shutdown();
  write.wait();
  std::string what;
  const std::size_t n = movedBy(write.result.exception(), data.size(), &what);
  try {
    write.result.value();
  } catch (const IncompleteTransfer& e) {
    try {
      std::rethrow_exception(e.cause());
    } catch (const ExecutorShutDown&) {
    } catch (...) {
      ADD_FAILURE() << "another cause: " << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an IncompleteTransfer: " << e.what();
  }
  pair.stream.close();
  PeerReader reader(pair.peer.get());
  EXPECT_EQ(firstDifference(reader.join(), std::vector<std::byte>(data.begin(), data.begin() + n)),
            "")
      << what;
}

// ---------------------------------------------------------------------------------------
// Destroying a coroutine suspended part-way; closed streams; empty buffers.

Lazy<void> writeAllCounted(TcpStream& stream, std::span<const std::byte> bytes) {
  test::Counted alive;
  co_await stream.writeAll(bytes);
}
Lazy<void> readExactlyCounted(TcpStream& stream, std::span<std::byte> buffer) {
  test::Counted alive;
  co_await stream.readExactly(buffer);
}

TEST_P(TcpStreamWriteAllTest, DestroyingACoroutineSuspendedPartWayWithdrawsTheTransfer) {
  test::Watchdog watchdog(120s, "DestroyingACoroutineSuspendedPartWay");
  ThreadPool pool(options(1));
  test::Counted::reset();
  for (const bool timed : {false, true}) {
    // writeAll: part sent, the rest withdrawn; the stream then writes on, right after
    // that part.
    test::StreamAndPeer pair = test::connectedPair(pool);
    setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, 4096);
    if (timed) {
      pair.stream.setWriteTimeout(1h);
      pair.stream.setReadTimeout(1h);
    }
    const std::vector<std::byte> data = pattern(50, 1 << 20);
    std::optional<Lazy<void>> doomed;
    bool suspended = false;
    test::onWorker(pool, [&] {
      doomed.emplace(writeAllCounted(pair.stream, data));
      suspended = test::startSuspended(pool, *doomed);
    });
    ASSERT_TRUE(suspended);
    waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
    quiesce(pool);
    test::onWorker(pool, [&] { doomed.reset(); });
    EXPECT_EQ(test::Counted::alive(), 0);
    PeerReader reader(pair.peer.get());
    const std::vector<std::byte> after = pattern(51, 5000);
    syncAwait(pair.stream.writeAll(after), &pool);
    pair.stream.shutdownWrite();
    const std::vector<std::byte> received = reader.join();
    ASSERT_GE(received.size(), after.size());
    const std::size_t n = received.size() - after.size();
    EXPECT_GE(n, 1u);
    EXPECT_LT(n, data.size());
    EXPECT_EQ(firstDifference(received,
                              [&] {
                                std::vector<std::byte> expected(
                                    data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
                                expected.insert(expected.end(), after.begin(), after.end());
                                return expected;
                              }()),
              "")
        << "timed " << timed;

    // readExactly: part taken, the rest withdrawn; the next read gets what comes next.
    std::vector<std::byte> buffer(1000);
    test::onWorker(pool, [&] {
      doomed.emplace(readExactlyCounted(pair.stream, buffer));
      suspended = test::startSuspended(pool, *doomed);
    });
    ASSERT_TRUE(suspended);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "partial", 7));
    waitUntil([&] { return queuedToRead(pair.stream.nativeHandle()) == 0; });
    quiesce(pool);  // the readExactly took the 7 bytes and waits for more
    test::onWorker(pool, [&] { doomed.reset(); });
    EXPECT_EQ(test::Counted::alive(), 0);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "next", 4));
    std::array<std::byte, 16> next;
    const std::size_t got = syncAwait(readOnce(pair.stream, next).via(&pool));
    ASSERT_EQ(got, 4u);
    EXPECT_EQ(std::memcmp(next.data(), "next", 4), 0);
    EXPECT_EQ(std::memcmp(buffer.data(), "partial", 7), 0);
  }
}

std::optional<int> errnoOf(const std::function<void()>& operation) {
  try {
    operation();
  } catch (const IncompleteTransfer& e) {
    ADD_FAILURE() << "an IncompleteTransfer: " << e.what();
  } catch (const std::system_error& e) {
    return e.code().value();
  }
  return std::nullopt;
}

TEST_P(TcpStreamWriteAllTest, AClosedStreamFailsWithEbadfAndEmptyBuffersCompleteAtOnce) {
  test::Watchdog watchdog(60s, "AClosedStreamFailsWithEbadf");
  ThreadPool pool(options(1));
  TcpStream closed;
  std::array<std::byte, 8> buffer{};
  EXPECT_EQ(errnoOf([&] { syncAwait(closed.writeAll("text"), &pool); }), EBADF);
  EXPECT_EQ(errnoOf([&] { syncAwait(closed.readExactly(buffer), &pool); }), EBADF);
  EXPECT_EQ(errnoOf([&] { syncAwait(writeAllOf(closed, buffer).via(&pool)); }), EBADF);
  // An empty buffer: nothing is checked, not even the stream or the token, and nothing
  // is waited for (the peer below never reads, the send buffer is full).
  syncAwait(closed.writeAll(""), &pool);
  syncAwait(closed.readExactly(std::span<std::byte>()), &pool);
  CancellationSource cancelled;
  cancelled.requestCancellation();
  syncAwait(withCancellation(cancelled.token(), closed.writeAll(std::span<const std::byte>())),
            &pool);
  test::StreamAndPeer pair = test::connectedPair(pool);
  setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, 4096);
  // Far more than the peer's receive buffer takes while it reads nothing (it grows only
  // as the peer reads): this one waits for room until the stream is closed.
  const std::vector<std::byte> more = pattern(61, 4 << 20);
  Outcome<void> waiting;
  startOn(pool, pair.stream.writeAll(more), waiting);
  waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
  quiesce(pool);
  syncAwait(pair.stream.writeAll(""), &pool);  // not behind the waiting one
  syncAwait(pair.stream.readExactly(std::span<char>()), &pool);
  EXPECT_EQ(waiting.ends.load(), 0);
  pair.stream.close();
  waiting.wait();
}

// ---------------------------------------------------------------------------------------
// The awaitable where a Lazy<void> went.

Lazy<void> returnsTheTransfer(TcpStream& stream, std::span<const std::byte> bytes) {
  return stream.writeAll(bytes);  // not a coroutine: converts to Lazy<void>
}

TEST_P(TcpStreamWriteAllTest, GoesWhereverALazyWent) {
  test::Watchdog watchdog(120s, "GoesWhereverALazyWent");
  ThreadPool pool(options(2));
  test::StreamAndPeer pair = test::connectedPair(pool);
  PeerReader reader(pair.peer.get());
  std::string expected;
  auto bytes = [](const std::string& text) { return std::as_bytes(std::span(text)); };
  const std::string a = "converted;", b = "via;", c = "sync;", d = "collect;", e = "spawned;",
                    f = "timed;", g = "twice;", h = "grouped;", i = "started;";
  {
    Lazy<void> lazy = pair.stream.writeAll(a);
    syncAwait(std::move(lazy).via(&pool));
    expected += a;
  }
  syncAwait(pair.stream.writeAll(b).via(&pool));
  expected += b;
  syncAwait(pair.stream.writeAll(c), &pool);
  expected += c;
  syncAwait(returnsTheTransfer(pair.stream, bytes(c)).via(&pool));
  expected += c;
  auto [written, nothing] =
      syncAwait(collectAll(pair.stream.writeAll(d), pair.stream.writeAll("")).via(&pool));
  written.value();
  nothing.value();
  expected += d;
  syncAwait([&]() -> Lazy<void> {
    JoinHandle<void> handle = spawn(co_await currentExecutor(), pair.stream.writeAll(e));
    co_await std::move(handle);
    co_await withTimeout(pair.stream.writeAll(f), 1h);
    co_await pair.stream.writeAll(g);
    co_await pair.stream.writeAll(g);
    TaskGroup<> group(co_await currentExecutor());
    group.spawn(pair.stream.writeAll(h));
    co_await group.join();
  }()
                         .via(&pool));
  expected += e;
  expected += f;
  expected += g;
  expected += g;
  expected += h;
  Outcome<void> started;
  Lazy<void>(pair.stream.writeAll(i)).via(&pool).start(test::recordInto(started));
  started.wait();
  started.result.value();
  expected += i;
  pair.stream.shutdownWrite();
  const std::vector<std::byte> received = reader.join();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(received.data()), received.size()), expected);
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpStreamWriteAllTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
