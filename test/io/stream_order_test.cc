// Several operations in flight on one stream, in one direction, are served in the order
// they were issued, each one's bytes contiguous, and a later write never overtakes one
// waiting for room (docs/io.md). Every test runs once per backend: the two loops must
// agree.
//
//  - Writes: the stream's send buffer is filled (a small SO_SNDBUF, a peer that does
//    not read), three single writes with distinct byte patterns are started one
//    after the other on the pool's one worker (each handed to the loop before the next
//    starts: quiesce), then the peer reads everything. It must receive the fill, then the
//    first write's bytes, the second's, the third's: as many of each as each write
//    reported. 50 rounds, each on a new connection (the io_uring loop that did not
//    keep the order failed the first round in every run).
//  - Reads: three reads in flight, then the peer sends three chunks at once; the reads'
//    bytes, in issue order, must be the start of what the peer sent.
//  - An operation queued behind another (io_uring keeps it in the loop until the one
//    before it completes) behaves as a lone one: cancelled, it ends at once and takes
//    nothing; its time limit runs from its start, not from its turn; destroying its
//    coroutine withdraws it (and destroying the first lets the next one read); a pool
//    shutdown ends it with ExecutorShutDown.
//
// Hand-shakes only: quiesce (two round trips through the worker) to know an operation
// waits in its loop; no sleep.

#include <sys/socket.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/tcp_stream.h"
#include "test/support/counted.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

constexpr int kOps = 3;
constexpr int kFill = 3;  // the pattern number of the bytes that fill the send buffer

int rounds() { return test::reducedIoScale() ? 20 : 50; }

// Byte `i` of operation `k`'s bytes: the low two bits name the operation (0..2, or kFill),
// the rest counts along it with period 61, so that bytes out of place, a run split in
// two or one that starts at the wrong offset all differ from what is expected.
std::byte patternByte(int k, std::size_t i) {
  return static_cast<std::byte>(((i % 61) << 2) | static_cast<std::size_t>(k));
}

std::vector<std::byte> pattern(int k, std::size_t size) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = patternByte(k, i);
  return bytes;
}

// The runs of operations in `bytes`, e.g. "F012" (F: the fill), for failure messages.
std::string runs(std::span<const std::byte> bytes) {
  std::string order;
  for (std::byte b : bytes) {
    const int k = static_cast<int>(b) & 3;
    const char c = k == kFill ? 'F' : static_cast<char>('0' + k);
    if (order.empty() || order.back() != c) order += c;
  }
  return order;
}

void setBufferSize(int fd, int option, int size) {
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, option, &size, sizeof size), 0) << std::strerror(errno);
}

Lazy<std::size_t> writeOnce(TcpStream& stream, std::span<const std::byte> bytes) {
  co_return co_await stream.write(bytes);
}

Lazy<std::size_t> readOnce(TcpStream& stream, std::span<std::byte> buffer) {
  co_return co_await stream.read(buffer);
}

// Waits until `a` or `b` has ended (a hand-shake; the test's watchdog is the hang guard).
template <class T>
void waitForEither(const test::Outcome<T>& a, const test::Outcome<T>& b) {
  while (a.ends.load() == 0 && b.ends.load() == 0) std::this_thread::yield();
}

class StreamOrderTest : public test::IoBackendTest {};

TEST_P(StreamOrderTest, WritesWaitingForRoomAreServedInIssueOrder) {
  test::Watchdog watchdog(240s, "StreamOrderTest.WritesWaitingForRoomAreServedInIssueOrder");
  ThreadPool pool(options(1));
  // Sizes of the three writes: larger than the room a peer's read makes at once, so that
  // writes complete partially too, and of different lengths.
  const std::array<std::size_t, kOps> sizes{24 * 1024, 5000, 16 * 1024};
  std::array<std::vector<std::byte>, kOps> data;
  for (int k = 0; k < kOps; ++k) data[k] = pattern(k, sizes[k]);
  const std::vector<std::byte> fill = pattern(kFill, 4096);
  for (int round = 0; round < rounds(); ++round) {
    test::StreamAndPeer pair = test::connectedPair(pool);
    // A small send buffer fills fast. (Not a small receive buffer at the peer: its tiny
    // window would leave the sender to TCP's persist timer, hundreds of ms per round.)
    setBufferSize(pair.stream.nativeHandle(), SO_SNDBUF, 4096);
    // Fill the send buffer (tryWrite: any thread, no loop): nothing more fits until the
    // peer reads.
    std::vector<std::byte> expected;
    while (std::optional<std::size_t> n = pair.stream.tryWrite(fill)) {
      expected.insert(expected.end(), fill.begin(), fill.begin() + static_cast<long>(*n));
    }
    ASSERT_FALSE(expected.empty());
    std::array<test::Outcome<std::size_t>, kOps> written;
    for (int k = 0; k < kOps; ++k) {
      test::startOn(pool, writeOnce(pair.stream, data[k]), written[k]);
      test::quiesce(pool);  // write k waits in the loop before write k + 1 starts
    }
    std::vector<std::byte> received;
    std::thread reader([&] {
      std::array<std::byte, 65536> chunk;
      for (;;) {
        const ssize_t n = ::recv(pair.peer.get(), chunk.data(), chunk.size(), 0);
        if (n <= 0) break;
        received.insert(received.end(), chunk.begin(), chunk.begin() + n);
      }
    });
    for (int k = 0; k < kOps; ++k) {
      written[k].wait();
      if (written[k].result.hasException()) {
        ADD_FAILURE() << "write " << k << " failed: " << written[k].what();
      } else {
        const std::size_t n = written[k].result.value();
        EXPECT_GT(n, 0u);
        expected.insert(expected.end(), data[k].begin(), data[k].begin() + static_cast<long>(n));
      }
    }
    pair.stream.shutdownWrite();  // the reader sees the end of the stream
    reader.join();
    ASSERT_EQ(runs(received), runs(expected)) << "round " << round;
    ASSERT_TRUE(received == expected) << "round " << round << ": the runs are in order but "
                                      << "a write's bytes are not contiguous";
  }
}

TEST_P(StreamOrderTest, ReadsWaitingForDataAreServedInIssueOrder) {
  test::Watchdog watchdog(240s, "StreamOrderTest.ReadsWaitingForDataAreServedInIssueOrder");
  ThreadPool pool(options(1));
  constexpr std::size_t kChunk = 1000;
  std::vector<std::byte> sent;
  for (int k = 0; k < kOps; ++k) {
    const std::vector<std::byte> chunk = pattern(k, kChunk);
    sent.insert(sent.end(), chunk.begin(), chunk.end());
  }
  for (int round = 0; round < rounds(); ++round) {
    test::StreamAndPeer pair = test::connectedPair(pool);
    std::array<std::array<std::byte, kChunk>, kOps> buffers;
    std::array<test::Outcome<std::size_t>, kOps> read;
    for (int k = 0; k < kOps; ++k) {
      test::startOn(pool, readOnce(pair.stream, buffers[k]), read[k]);
      test::quiesce(pool);  // read k waits in the loop before read k + 1 starts
    }
    // One send of all three chunks: as much data as the reads have room for, so each
    // read gets at least one byte, whatever the first ones take.
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), sent.data(), sent.size()));
    std::vector<std::byte> got;
    for (int k = 0; k < kOps; ++k) {
      read[k].wait();
      ASSERT_FALSE(read[k].result.hasException()) << "read " << k << ": " << read[k].what();
      const std::size_t n = read[k].result.value();
      EXPECT_GT(n, 0u);
      got.insert(got.end(), buffers[k].begin(), buffers[k].begin() + static_cast<long>(n));
    }
    ASSERT_LE(got.size(), sent.size());
    const std::span<const std::byte> start(sent.data(), got.size());
    ASSERT_EQ(runs(got), runs(start)) << "round " << round;
    ASSERT_TRUE(std::equal(got.begin(), got.end(), start.begin()))
        << "round " << round << ": the reads' bytes are not the start of the stream, in order";
  }
}

// A read queued behind one that waits for data, cancelled (from the test thread, the way
// a task's cancellation comes), ends with OperationCancelled at once and takes nothing;
// the reads before and after it keep their order. (Reads: a write's wait for room can end
// by itself, when the kernel has sent what filled the buffer; a read's wait cannot.)
TEST_P(StreamOrderTest, ACancelledQueuedReadTakesNothingAndTheOthersKeepTheirOrder) {
  test::Watchdog watchdog(120s, "StreamOrderTest.ACancelledQueuedRead");
  ThreadPool pool(options(1));
  for (int round = 0; round < 5; ++round) {
    test::StreamAndPeer pair = test::connectedPair(pool);
    std::array<std::array<std::byte, 16>, kOps> buffers;
    std::array<test::Outcome<std::size_t>, kOps> read;
    CancellationSource source;
    test::startOn(pool, readOnce(pair.stream, buffers[0]), read[0]);
    test::quiesce(pool);
    test::startOn(pool, withCancellation(source.token(), readOnce(pair.stream, buffers[1])),
                  read[1]);
    test::quiesce(pool);
    source.requestCancellation();
    read[1].wait();  // nobody sends: only the cancellation can end it
    EXPECT_TRUE(read[1].endedWith<OperationCancelled>()) << read[1].what();
    EXPECT_EQ(read[0].ends.load(), 0);
    test::startOn(pool, readOnce(pair.stream, buffers[2]), read[2]);
    test::quiesce(pool);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "abc", 3));
    waitForEither(read[0], read[2]);
    // The first read gets the bytes, the third still waits (had the third overtaken it,
    // the next bytes let the first end, and the checks below fail).
    EXPECT_EQ(read[2].ends.load(), 0);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "de", 2));
    read[0].wait();
    ASSERT_FALSE(read[0].result.hasException()) << read[0].what();
    ASSERT_EQ(read[0].result.value(), 3u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(buffers[0].data()), 3), "abc");
    read[2].wait();
    ASSERT_FALSE(read[2].result.hasException()) << read[2].what();
    ASSERT_EQ(read[2].result.value(), 2u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(buffers[2].data()), 2), "de");
  }
}

// A queued read's time limit runs from its start, as a lone read's does: it times out
// while the read before it (no limit) still waits, and leaves the data to that one. A
// read whose turn came (the one before it got data) times out in its own turn.
TEST_P(StreamOrderTest, AQueuedReadTimesOutOnItsOwnLimit) {
  test::Watchdog watchdog(120s, "StreamOrderTest.AQueuedReadTimesOutOnItsOwnLimit");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  std::array<std::byte, 16> first, second, third, fourth;
  test::Outcome<std::size_t> read1, read2, read3, read4;
  test::startOn(pool, readOnce(pair.stream, first), read1);  // no limit
  test::quiesce(pool);
  pair.stream.setReadTimeout(20ms);
  test::startOn(pool, readOnce(pair.stream, second), read2);
  read2.wait();  // nobody sends: only its own limit can end it
  EXPECT_EQ(read1.ends.load(), 0);
  ASSERT_TRUE(read2.endedWith<std::system_error>()) << read2.what();
  try {
    std::rethrow_exception(read2.result.exception());
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ETIMEDOUT) << e.what();
  }
  // Queued again, with a limit long enough that the first read usually completes first:
  // then it waits in its own turn and times out there (either way, ETIMEDOUT).
  pair.stream.setReadTimeout(200ms);
  test::startOn(pool, readOnce(pair.stream, third), read3);
  test::quiesce(pool);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "x", 1));
  waitForEither(read1, read3);
  if (read1.ends.load() == 0 && !read3.result.hasException()) {
    // The third read overtook the first and took the byte: let the first end, and fail.
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "x", 1));
    read1.wait();
    FAIL() << "the read queued behind the first got the byte first";
  }
  read1.wait();
  ASSERT_FALSE(read1.result.hasException()) << read1.what();
  EXPECT_EQ(read1.result.value(), 1u);
  EXPECT_EQ(first[0], std::byte{'x'});
  read3.wait();
  ASSERT_TRUE(read3.endedWith<std::system_error>()) << read3.what();
  try {
    std::rethrow_exception(read3.result.exception());
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ETIMEDOUT) << e.what();
  }
  // The stream stays usable, and nothing was lost.
  pair.stream.setReadTimeout(0ms);
  test::startOn(pool, readOnce(pair.stream, fourth), read4);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "yz", 2));
  read4.wait();
  ASSERT_FALSE(read4.result.hasException()) << read4.what();
  EXPECT_EQ(read4.result.value(), 2u);
  EXPECT_EQ(fourth[0], std::byte{'y'});
}

// A read whose frame is counted.
Lazy<std::size_t> readCounted(TcpStream& stream, std::span<std::byte> buffer) {
  test::Counted inFrame;
  co_return co_await stream.read(buffer);
}

// Destroying a coroutine suspended in a read queued behind another (on the worker, #15's
// rule) withdraws it: nothing is taken, the read before it gets the data. With a time
// limit (its own timer in the kernel), before and after the loop's turn.
TEST_P(StreamOrderTest, DestroyingAQueuedReadWithdrawsIt) {
  test::Watchdog watchdog(120s, "StreamOrderTest.DestroyingAQueuedReadWithdrawsIt");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  test::Counted::reset();
  for (bool timed : {false, true}) {
    for (bool submittedFirst : {false, true}) {
      pair.stream.setReadTimeout(timed ? std::chrono::nanoseconds(1h) : 0ns);
      std::array<std::byte, 16> first, doomedBuffer;
      test::Outcome<std::size_t> read1;
      test::startOn(pool, readOnce(pair.stream, first), read1);
      test::quiesce(pool);
      std::optional<Lazy<std::size_t>> doomed;
      bool suspended = false;
      test::onWorker(pool, [&] {
        doomed.emplace(readCounted(pair.stream, doomedBuffer));
        suspended = test::startSuspended(pool, *doomed);
        if (!submittedFirst) doomed.reset();
      });
      ASSERT_TRUE(suspended);
      if (submittedFirst) {
        test::quiesce(pool);
        test::onWorker(pool, [&] { doomed.reset(); });
      }
      EXPECT_EQ(test::Counted::alive(), 0);
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "ab", 2));
      read1.wait();
      ASSERT_FALSE(read1.result.hasException()) << read1.what();
      EXPECT_EQ(read1.result.value(), 2u) << "timed " << timed << ", submitted " << submittedFirst;
    }
  }
}

// Destroying a coroutine suspended in the first read (the one in the kernel) lets the
// read queued behind it have the data.
TEST_P(StreamOrderTest, DestroyingTheFirstReadLetsTheNextOneRead) {
  test::Watchdog watchdog(120s, "StreamOrderTest.DestroyingTheFirstReadLetsTheNextOneRead");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  test::Counted::reset();
  std::array<std::byte, 16> doomedBuffer, second;
  std::optional<Lazy<std::size_t>> doomed;
  bool suspended = false;
  test::onWorker(pool, [&] {
    doomed.emplace(readCounted(pair.stream, doomedBuffer));
    suspended = test::startSuspended(pool, *doomed);
  });
  ASSERT_TRUE(suspended);
  test::quiesce(pool);
  test::Outcome<std::size_t> read2;
  test::startOn(pool, readOnce(pair.stream, second), read2);
  test::quiesce(pool);
  test::onWorker(pool, [&] { doomed.reset(); });
  EXPECT_EQ(test::Counted::alive(), 0);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "cd", 2));
  read2.wait();
  ASSERT_FALSE(read2.result.hasException()) << read2.what();
  EXPECT_EQ(read2.result.value(), 2u);
  EXPECT_EQ(second[0], std::byte{'c'});
}

// Shutting the pool down ends the reads queued behind the first (one with a time limit)
// with ExecutorShutDown, as it ends the first.
TEST_P(StreamOrderTest, ShutdownEndsQueuedReads) {
  test::Watchdog watchdog(120s, "StreamOrderTest.ShutdownEndsQueuedReads");
  std::optional<ThreadPool> pool(std::in_place, options(1));
  test::StreamAndPeer pair = test::connectedPair(*pool);
  std::array<std::array<std::byte, 16>, kOps> buffers;
  std::array<test::Outcome<std::size_t>, kOps> read;
  for (int k = 0; k < kOps; ++k) {
    if (k == 2) pair.stream.setReadTimeout(1h);
    test::startOn(*pool, readOnce(pair.stream, buffers[k]), read[k]);
    test::quiesce(*pool);
  }
  pool->shutdown();
  for (int k = 0; k < kOps; ++k) {
    read[k].wait();
    EXPECT_TRUE(read[k].endedWith<ExecutorShutDown>()) << "read " << k << ": " << read[k].what();
  }
  pool.reset();
}

INSTANTIATE_TEST_SUITE_P(Backends, StreamOrderTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
