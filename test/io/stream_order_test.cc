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
//    reported. Many rounds, each on a new connection.
//  - Reads: three reads in flight, then the peer sends three chunks at once; the reads'
//    bytes, in issue order, must be the start of what the peer sent.
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
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/lazy.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/tcp_stream.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

constexpr int kOps = 3;
constexpr int kFill = 3;  // the pattern number of the bytes that fill the send buffer

int rounds() { return test::reducedIoScale() ? 30 : 100; }

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

INSTANTIATE_TEST_SUITE_P(Backends, StreamOrderTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
