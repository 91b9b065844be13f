// A stream's reads through its inbox (io/detail/stream_reads.cc): on io_uring, receive()
// keeps one multishot receive armed per stream and what arrives while no read waits is
// kept, in order, for the next read. Every test runs on both backends (on epoll the same
// programs take the single-shot path and must give the same bytes) and checks that no
// descriptor leaked and no frame was left.
//
//  - every byte of many connections x messages, echoed in the plain style at both ends;
//  - a reader that stops reading holds few of the loop's buffers (the inbox's bound), and
//    reads everything in order when it goes on;
//  - receive() mixed with read(), readExactly(), readable() + tryRead(): one stream, in
//    order;
//  - a receiving coroutine that moves between loops (two pools, resumeOn) and between the
//    workers of a ThreadPool(2) (yield until it moved): in order, nothing lost;
//  - close with a receive armed and bytes kept, from the worker and from another thread:
//    the peer sees the end of the stream, every buffer comes back; a receive waiting then
//    ends with ECANCELED;
//  - a pool shut down with receives armed and bytes kept: a waiting receive ends with
//    ExecutorShutDown, and the bytes are received later on another pool;
//  - the loop's buffer ring running dry under many armed receives (ENOBUFS);
//  - receives raced by withTimeout and by the read time limit, with arrivals from another
//    thread: every byte once, in order, and every buffer back;
//  - destroying a receive that waits on one loop while the armed request is on another;
//  - release() after receive(); a stream that adopts the released descriptor before the
//    released stream's receive has ended reads it and closes it.

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/resume_on.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/coro/with_timeout.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/yield.h"
#include "weft/executors/lent_buffer.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/io/detail/fd_waits.h"
#include "weft/io/detail/stream_reads.h"
#include "test/support/counted.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/thread_states.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// Byte i of stream `s`: a pattern that a reordered, lost or repeated byte breaks.
std::byte streamByte(std::uint64_t s, std::uint64_t i) {
  return static_cast<std::byte>(static_cast<std::uint8_t>((i * 131 + s * 7 + (i >> 10)) & 0xff));
}

std::vector<std::byte> streamBytes(std::uint64_t s, std::uint64_t from, std::size_t n) {
  std::vector<std::byte> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = streamByte(s, from + i);
  return bytes;
}

// The first position in `bytes` (stream `s` from `from`) that is wrong, or npos.
std::size_t firstWrong(std::uint64_t s, std::uint64_t from, std::span<const std::byte> bytes) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != streamByte(s, from + i)) return i;
  }
  return std::string::npos;
}

// A peer thread writing stream `s` (`total` bytes in pieces of 1..maxPiece) into a
// blocking socket, then ending it (SHUT_WR). sent() is how far it got.
class PeerWriter {
 public:
  PeerWriter(int fd, std::uint64_t s, std::uint64_t total, std::size_t maxPiece,
             unsigned seed = 1)
      : thread_([this, fd, s, total, maxPiece, seed] {
          tid_.store(test::currentThreadId());
          std::mt19937 random(seed);
          std::vector<std::byte> piece;
          while (sent_.load() < total) {
            const std::size_t n = std::min<std::uint64_t>(
                total - sent_.load(), 1 + random() % maxPiece);
            piece = streamBytes(s, sent_.load(), n);
            if (!test::sendAllBlocking(fd, piece.data(), n)) {
              failed_.store(true);
              return;
            }
            sent_.fetch_add(n);
          }
          ::shutdown(fd, SHUT_WR);
        }) {}
  PeerWriter(const PeerWriter&) = delete;
  PeerWriter& operator=(const PeerWriter&) = delete;
  ~PeerWriter() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t sent() const { return sent_.load(); }
  pid_t tid() const {
    while (tid_.load() == 0) std::this_thread::yield();
    return tid_.load();
  }
  bool failed() const { return failed_.load(); }

 private:
  std::atomic<std::uint64_t> sent_{0};
  std::atomic<pid_t> tid_{0};
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

// Receives stream `s` to its end with receive(), checking every byte; returns the count.
Lazy<std::uint64_t> receiveAll(TcpStream& stream, std::uint64_t s, std::uint64_t from = 0) {
  std::uint64_t position = from;
  for (;;) {
    LentBuffer data = co_await stream.receive();
    if (data.empty()) co_return position - from;
    if (const std::size_t wrong = firstWrong(s, position, data.bytes()); wrong != std::string::npos) {
      throw std::runtime_error("wrong byte at " + std::to_string(position + wrong));
    }
    position += data.size();
  }
}

Lazy<LentBuffer> receiveOnce(TcpStream& stream) { co_return co_await stream.receive(); }

// Whether the pool's one worker's loop keeps receives armed (io_uring, unless
// WEFT_IO_URING_SETUP says `singleshot` or the kernel lacks it): streams then have inboxes.
bool keepsReceivesArmed(ThreadPool& pool) {
  bool armed = false;
  test::onWorker(pool, [&] { armed = IoLoop::current()->multishotReceive(); });
  return armed;
}

Lazy<LentBuffer> receiveCounted(TcpStream& stream) {
  test::Counted inFrame;
  co_return co_await stream.receive();
}

class StreamReadsTest : public test::IoLeakCheckedTest {};

// Many connections, many messages, the plain style at both ends (receive() and writeAll):
// the servers on a ThreadPool(2), the clients on a ThreadPool(1) whose loop's buffers are
// all back at the end.
TEST_P(StreamReadsTest, EveryByteOfManyConnectionsInThePlainStyle) {
  test::Watchdog watchdog(240s, "EveryByteOfManyConnections");
  ThreadPool servers(options(2, "servers"));
  ThreadPool clients(options(1, "clients"));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  const std::size_t connections = test::reducedIoScale() ? 24 : 100;
  const std::size_t messages = test::reducedIoScale() ? 40 : 200;
  auto serveOne = [&]() -> Lazy<std::uint64_t> {
    TcpStream stream = co_await listener.accept();
    std::uint64_t echoed = 0;
    for (;;) {
      LentBuffer data = co_await stream.receive();
      if (data.empty()) break;
      co_await stream.writeAll(data);
      echoed += data.size();
    }
    co_return echoed;
  };
  auto client = [&](std::size_t c) -> Lazy<std::uint64_t> {
    TcpStream stream = co_await TcpStream::connect(address);
    std::uint64_t position = 0;
    for (std::size_t m = 0; m < messages; ++m) {
      // 1..1,500 bytes, and one message in 25 of 70..130 KiB (several arrivals, several
      // buffers, echoed piece by piece).
      const std::size_t size = m % 25 == 11 ? 70000 + (m * 977 + c) % 60000 : 1 + (m * 37 + c) % 1500;
      co_await stream.writeAll(streamBytes(c, position, size));
      std::size_t back = 0;
      while (back < size) {
        LentBuffer echo = co_await stream.receive();
        if (echo.empty()) throw std::runtime_error("the echo ended early");
        if (firstWrong(c, position + back, echo.bytes()) != std::string::npos) {
          throw std::runtime_error("connection " + std::to_string(c) + ": wrong echo");
        }
        back += echo.size();
      }
      if (back != size) throw std::runtime_error("the echo went past the message");
      position += size;
    }
    stream.shutdownWrite();
    if (!(co_await stream.receive()).empty()) throw std::runtime_error("bytes after the end");
    co_return position;
  };
  std::vector<Lazy<std::uint64_t>> serving;
  std::vector<Lazy<std::uint64_t>> calling;
  for (std::size_t c = 0; c < connections; ++c) {
    serving.push_back(serveOne());
    calling.push_back(client(c));
  }
  auto [served, called] = syncAwait(collectAll(collectAllPara(std::move(serving)).via(&servers),
                                               collectAllPara(std::move(calling)).via(&clients)));
  std::uint64_t echoed = 0;
  std::uint64_t sent = 0;
  for (auto& r : served.value()) echoed += r.value();
  for (auto& r : called.value()) sent += r.value();
  EXPECT_EQ(echoed, sent);
  EXPECT_EQ(test::lentBuffers(clients), 0u);
}

// A reader that stops reading while the peer streams: the stream's inbox keeps a few
// arrivals and then lets the socket hold the rest back (on io_uring; epoll keeps none), so
// the peer ends up blocked with most of its bytes unsent, and the loop has lent only a
// few buffers. Reading again gets every byte in order.
TEST_P(StreamReadsTest, AReaderThatPausesHoldsFewBuffersAndThenGetsEverything) {
  test::Watchdog watchdog(240s, "AReaderThatPauses");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  // Small socket buffers (no autotuning): what the kernel holds back stays far below what
  // the peer means to send.
  const int small = 128 * 1024;
  ASSERT_EQ(::setsockopt(pair.stream.nativeHandle(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  ASSERT_EQ(::setsockopt(pair.peer.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  const std::uint64_t total = std::uint64_t{64} << 20;
  PeerWriter writer(pair.peer.get(), 5, total, 256 * 1024);
  // One receive, and then none: the request stays armed (io_uring) with nobody reading.
  LentBuffer first = syncAwait(receiveOnce(pair.stream).via(&pool));
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(firstWrong(5, 0, first.bytes()), std::string::npos);
  // The peer blocks for good: blocked in send, with the same count across two turns of the
  // worker's loop (which would take in whatever a receive still armed brought).
  for (std::uint64_t before = ~std::uint64_t{0};;) {
    test::quiesce(pool);
    const std::uint64_t now = writer.sent();
    if (now == before && test::blockedState(test::threadState(writer.tid()))) break;
    before = now;
    ASSERT_LT(now, total) << "the peer sent everything: nothing held it back";
    std::this_thread::yield();
  }
  const std::size_t lent = test::lentBuffers(pool);
  EXPECT_LE(lent, 1u + 64u) << "a reader that stopped reading holds " << lent << " buffers";
  EXPECT_LT(writer.sent(), total / 2);
  // Reading again: everything, in order (the rest of the first buffer counted).
  const std::uint64_t rest =
      syncAwait(receiveAll(pair.stream, 5, first.size()).via(&pool));
  writer.join();
  ASSERT_FALSE(writer.failed());
  EXPECT_EQ(first.size() + rest, total);
  first.reset();
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// receive(), read(), readExactly() and readable() + tryRead() in a random mix on one
// stream while the peer writes in random pieces: one stream of bytes, in order. On
// io_uring the reads find bytes the armed receive kept, and take them first.
TEST_P(StreamReadsTest, ReceivesMixedWithReadsSeeEveryByteInOrder) {
  test::Watchdog watchdog(240s, "ReceivesMixedWithReads");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const std::uint64_t total = test::reducedIoScale() ? (std::uint64_t{2} << 20) : (std::uint64_t{16} << 20);
  PeerWriter writer(pair.peer.get(), 9, total, 9000, 7);
  struct Counts {
    std::uint64_t bytes = 0;
    int receives = 0, reads = 0, exacts = 0, tries = 0;
  };
  const Counts counts = syncAwait([&]() -> Lazy<Counts> {
    std::mt19937 random(11);
    Counts c;
    std::vector<std::byte> buffer(80000);
    auto check = [&](std::span<const std::byte> got) {
      if (const std::size_t wrong = firstWrong(9, c.bytes, got); wrong != std::string::npos) {
        throw std::runtime_error("wrong byte at " + std::to_string(c.bytes + wrong));
      }
      c.bytes += got.size();
    };
    for (;;) {
      switch (random() % 4) {
        case 0: {
          LentBuffer data = co_await pair.stream.receive();
          if (data.empty()) co_return c;
          check(data.bytes());
          ++c.receives;
          break;
        }
        case 1: {
          const std::size_t n =
              co_await pair.stream.read(std::span(buffer).first(1 + random() % buffer.size()));
          if (n == 0) co_return c;
          check(std::span(buffer).first(n));
          ++c.reads;
          break;
        }
        case 2: {
          const std::size_t want = std::min<std::uint64_t>(1 + random() % 20000, total - c.bytes);
          if (want == 0) break;
          co_await pair.stream.readExactly(std::span(buffer).first(want));
          check(std::span(buffer).first(want));
          ++c.exacts;
          break;
        }
        default: {
          co_await pair.stream.readable();
          const std::optional<std::size_t> n =
              pair.stream.tryRead(std::span(buffer).first(1 + random() % buffer.size()));
          if (!n) break;  // a hint: nothing after all
          if (*n == 0) co_return c;
          check(std::span(buffer).first(*n));
          ++c.tries;
          break;
        }
      }
    }
  }().via(&pool));
  writer.join();
  EXPECT_EQ(counts.bytes, total);
  EXPECT_GT(counts.receives, 0);
  EXPECT_GT(counts.reads, 0);
  EXPECT_GT(counts.exacts, 0);
  EXPECT_GT(counts.tries, 0);
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// Bytes kept while no read waited are read first, by whichever read comes: read() into a
// small buffer takes part of an arrival, readExactly() the rest of it and bytes that come
// after it, tryRead() what is kept.
TEST_P(StreamReadsTest, ReadsTakeKeptBytesFirst) {
  test::Watchdog watchdog(60s, "ReadsTakeKeptBytesFirst");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "a", 1));
  EXPECT_EQ(test::text(syncAwait(receiveOnce(pair.stream).via(&pool))), "a");
  // On io_uring the receive stays armed: these arrive while no read waits.
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "bcdefgh", 7));
  if (keepsReceivesArmed(pool)) {
    test::waitUntil([&] { return test::lentBuffers(pool) == 1; });  // kept in the inbox
  }
  char small[3];
  EXPECT_EQ(syncAwait([&]() -> Lazy<std::size_t> {
              co_return co_await pair.stream.read(small, sizeof small);
            }().via(&pool)),
            3u);
  EXPECT_EQ(std::string(small, 3), "bcd");
  std::thread later([&] { ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "ijk", 3)); });
  char exact[6];
  syncAwait(pair.stream.readExactly(std::as_writable_bytes(std::span(exact))).via(&pool));
  later.join();
  EXPECT_EQ(std::string(exact, 6), "efghij");
  char rest[8];
  std::optional<std::size_t> n;
  while (!(n = pair.stream.tryRead(std::as_writable_bytes(std::span(rest))))) {
    syncAwait([&]() -> Lazy<void> { co_await pair.stream.readable(); }().via(&pool));
  }
  EXPECT_EQ(std::string(rest, *n), "k");
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// What an idle stream holds: arrivals that a waiting receive() takes are handed over
// without being kept, and the ring that keeps arrivals while no read waits is given back
// once they are read. Rounds of bursts (more messages than the ring's first size) with
// the reader away, then read to the last byte under a read time limit (a parked
// receive): every byte once, in order, and after each round no ring and no lent buffer.
TEST_P(StreamReadsTest, AnIdleStreamHoldsNoRingOfKeptArrivals) {
  test::Watchdog watchdog(120s, "AnIdleStreamHoldsNoRing");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const bool armed = keepsReceivesArmed(pool);
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  auto exchange = [&](std::size_t size) {  // one message, received at once
    const std::vector<std::byte> piece = streamBytes(9, sent, size);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), piece.data(), piece.size()));
    sent += piece.size();
    while (received < sent) {
      LentBuffer data = syncAwait(receiveOnce(pair.stream).via(&pool));
      ASSERT_FALSE(data.empty());
      ASSERT_EQ(firstWrong(9, received, data.bytes()), std::string::npos);
      received += data.size();
    }
  };
  // A receive() without a time limit gives the stream its inbox (on io_uring; one with a
  // limit arms none of its own): the rounds below read under a limit, parked in it.
  exchange(1);
  pair.stream.setReadTimeout(std::chrono::milliseconds(60000));
  for (int round = 0; round < 20; ++round) {
    // A receive that found nothing kept: on io_uring the request is armed from here on.
    exchange(1 + round);
    // A burst of 1 to 12 messages while no read waits: the armed receive keeps them.
    const int messages = 1 + round % 12;
    for (int m = 0; m < messages; ++m) {
      const std::vector<std::byte> piece = streamBytes(9, sent, 1 + (round * 7 + m) % 300);
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), piece.data(), piece.size()));
      sent += piece.size();
    }
    if (armed) test::waitUntil([] { return detail::keptArrivalRings() == 1; });
    while (received < sent) {
      LentBuffer data = syncAwait(receiveOnce(pair.stream).via(&pool));
      ASSERT_FALSE(data.empty());
      ASSERT_EQ(firstWrong(9, received, data.bytes()), std::string::npos) << "round " << round;
      received += data.size();
    }
    EXPECT_EQ(received, sent);
    EXPECT_EQ(detail::keptArrivalRings(), 0u) << "round " << round;
    EXPECT_EQ(test::lentBuffers(pool), 0u) << "round " << round;
  }
  // A receive that waits (parked: it has a time limit) when the next arrival comes takes it
  // without a ring.
  std::thread later([&] {
    const std::vector<std::byte> piece = streamBytes(9, sent, 100);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), piece.data(), piece.size()));
  });
  LentBuffer last = syncAwait(receiveOnce(pair.stream).via(&pool));
  later.join();
  ASSERT_FALSE(last.empty());
  EXPECT_EQ(firstWrong(9, received, last.bytes()), std::string::npos);
  EXPECT_EQ(detail::keptArrivalRings(), 0u);
  last.reset();
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// A receiving coroutine hops between the workers of two pools (resumeOn) while the peer
// writes: each receive on the other loop takes over the stream's armed request (its
// arrivals until it ends first), and the bytes come in order.
TEST_P(StreamReadsTest, ReceivesFollowTheirCoroutineToAnotherLoop) {
  test::Watchdog watchdog(240s, "ReceivesFollowTheirCoroutine");
  ThreadPool a(options(1, "loop-a"));
  ThreadPool b(options(1, "loop-b"));
  test::StreamAndPeer pair = test::connectedPair(a);
  const std::uint64_t total = test::reducedIoScale() ? (std::uint64_t{1} << 20) : (std::uint64_t{8} << 20);
  PeerWriter writer(pair.peer.get(), 3, total, 3000, 5);
  int hops = 0;
  const std::uint64_t got = syncAwait([&]() -> Lazy<std::uint64_t> {
    std::uint64_t position = 0;
    for (int i = 0;; ++i) {
      // Two receives here, then over to the other pool.
      for (int j = 0; j < 2; ++j) {
        LentBuffer data = co_await pair.stream.receive();
        if (data.empty()) co_return position;
        if (firstWrong(3, position, data.bytes()) != std::string::npos) {
          throw std::runtime_error("wrong byte after a hop");
        }
        position += data.size();
      }
      co_await resumeOn(i % 2 == 0 ? &b : &a);
      ++hops;
    }
  }().via(&a));
  writer.join();
  EXPECT_EQ(got, total);
  EXPECT_GT(hops, 0);
  pair.stream.close();  // what either loop kept is given back
  EXPECT_EQ(test::lentBuffers(a), 0u);
  EXPECT_EQ(test::lentBuffers(b), 0u);
}

// On a ThreadPool(2), a receiving coroutine is moved to the other worker after every
// receive while the peer writes: in order, nothing lost. The move: a job that holds the
// coroutine's worker (while it runs there) and a yield, until the other worker, which
// the queued coroutine wakes, has taken it (a job that lands on the other worker returns
// at once, and the next round schedules another).
TEST_P(StreamReadsTest, ReceivesOnAPoolThatMovesTheCoroutineAreInOrder) {
  test::Watchdog watchdog(240s, "ReceivesOnAPoolThatMoves");
  std::atomic<std::uint64_t> moves{0};  // before the pool: its last jobs may run at its end
  ThreadPool pool(options(2));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const std::uint64_t total = test::reducedIoScale() ? (std::uint64_t{1} << 20) : (std::uint64_t{4} << 20);
  PeerWriter writer(pair.peer.get(), 4, total, 2000, 9);
  auto moveToTheOtherWorker = [&]() -> Lazy<void> {
    const pid_t here = test::currentThreadId();
    const std::uint64_t target = moves.load() + 1;
    while (test::currentThreadId() == here) {
      pool.schedule([&moves, here, target] {
        while (test::currentThreadId() == here && moves.load() < target) std::this_thread::yield();
      });
      co_await yield();
    }
    moves.store(target);  // lets the job that held `here` go
  };
  const std::uint64_t got = syncAwait([&]() -> Lazy<std::uint64_t> {
    std::uint64_t position = 0;
    for (;;) {
      LentBuffer data = co_await pair.stream.receive();
      if (data.empty()) co_return position;
      if (firstWrong(4, position, data.bytes()) != std::string::npos) {
        throw std::runtime_error("wrong byte after a move");
      }
      position += data.size();
      co_await moveToTheOtherWorker();
    }
  }().via(&pool));
  writer.join();
  EXPECT_EQ(got, total);
  EXPECT_GT(moves.load(), 0u);
}

// close() of a stream whose receive is armed and which keeps bytes, on the worker and
// from another thread: the peer sees the end of the stream (the armed request does not
// keep the socket open), and every buffer comes back.
TEST_P(StreamReadsTest, CloseWithAReceiveArmedAndBytesKeptGivesEverythingBack) {
  test::Watchdog watchdog(60s, "CloseWithAReceiveArmed");
  for (const bool onWorker : {true, false}) {
    ThreadPool pool(options(1));
    test::StreamAndPeer pair = test::connectedPair(pool);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "x", 1));
    EXPECT_EQ(test::text(syncAwait(receiveOnce(pair.stream).via(&pool))), "x");
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "kept", 4));
    if (keepsReceivesArmed(pool)) {
      test::waitUntil([&] { return test::lentBuffers(pool) == 1; });
    }
    if (onWorker) {
      test::onWorker(pool, [&] { pair.stream.close(); });
    } else {
      pair.stream.close();
    }
    // The end of the stream, or a reset where unread bytes were left in the socket
    // (epoll): either way closed, where an armed request keeping it open would hang here.
    char byte;
    const ssize_t r = ::recv(pair.peer.get(), &byte, 1, 0);
    EXPECT_TRUE(r == 0 || (r < 0 && errno == ECONNRESET)) << "the socket was not closed";
    EXPECT_EQ(test::lentBuffers(pool), 0u);
  }
}

// A stream read only with a time limit holds no inbox: on io_uring each such receive() is
// a single receive of its own, as on a loop that keeps none (what an idle connection of a
// server with read time limits holds: docs/design/2026-11-idle-connection-memory.md). A
// receive() without a limit then gives the stream its inbox, and the timed receives after
// it wait in that inbox, parked: every byte once, in order, every buffer back.
TEST_P(StreamReadsTest, ReceivesWithATimeLimitAloneArmNothing) {
  test::Watchdog watchdog(60s, "ReceivesWithATimeLimitAlone");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const bool armed = keepsReceivesArmed(pool);
  const int fd = pair.stream.nativeHandle();
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  auto exchange = [&](std::size_t size) {
    const std::vector<std::byte> piece = streamBytes(4, sent, size);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), piece.data(), piece.size()));
    sent += piece.size();
    while (received < sent) {
      LentBuffer data = syncAwait(receiveOnce(pair.stream).via(&pool));
      ASSERT_FALSE(data.empty());
      ASSERT_EQ(firstWrong(4, received, data.bytes()), std::string::npos);
      received += data.size();
    }
  };
  pair.stream.setReadTimeout(std::chrono::milliseconds(60000));
  for (std::size_t size = 1; size <= 4096; size *= 4) exchange(size);
  EXPECT_FALSE(detail::streamReadsActive(fd));
  // A timed receive whose bytes come from another thread, perhaps while it waits (no
  // inbox: its own receive in the kernel).
  std::thread later([&] {
    const std::vector<std::byte> piece = streamBytes(4, sent, 100);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), piece.data(), piece.size()));
  });
  test::quiesce(pool);
  LentBuffer data = syncAwait(receiveOnce(pair.stream).via(&pool));
  later.join();
  sent += 100;
  ASSERT_FALSE(data.empty());
  EXPECT_EQ(firstWrong(4, received, data.bytes()), std::string::npos);
  received += data.size();
  data.reset();
  while (received < sent) {
    LentBuffer more = syncAwait(receiveOnce(pair.stream).via(&pool));
    ASSERT_FALSE(more.empty());
    ASSERT_EQ(firstWrong(4, received, more.bytes()), std::string::npos);
    received += more.size();
  }
  EXPECT_FALSE(detail::streamReadsActive(fd));
  pair.stream.setReadTimeout(std::chrono::milliseconds(0));
  exchange(10);
  EXPECT_EQ(detail::streamReadsActive(fd), armed);
  pair.stream.setReadTimeout(std::chrono::milliseconds(60000));
  for (std::size_t size = 1; size <= 4096; size *= 4) exchange(size);
  EXPECT_EQ(detail::streamReadsActive(fd), armed);
  EXPECT_EQ(received, sent);
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// close() while a receive waits (directly, and parked: with a read time limit), from
// another thread: it ends with ECANCELED, the peer sees the end of the stream.
TEST_P(StreamReadsTest, CloseWhileAReceiveWaitsEndsIt) {
  test::Watchdog watchdog(60s, "CloseWhileAReceiveWaits");
  for (const bool timed : {false, true}) {
    ThreadPool pool(options(1));
    test::StreamAndPeer pair = test::connectedPair(pool);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "x", 1));
    EXPECT_EQ(test::text(syncAwait(receiveOnce(pair.stream).via(&pool))), "x");
    if (timed) pair.stream.setReadTimeout(1h);
    test::Outcome<LentBuffer> waiting;
    test::startOn(pool, receiveCounted(pair.stream), waiting);
    test::quiesce(pool);
    EXPECT_EQ(waiting.ends.load(), 0);
    pair.stream.close();
    waiting.wait();
    ASSERT_TRUE(waiting.endedWith<std::system_error>()) << waiting.what();
    EXPECT_EQ(test::errnoOf([&] { (void)waiting.result.value(); }), ECANCELED);
    char byte;
    EXPECT_EQ(::recv(pair.peer.get(), &byte, 1, 0), 0);
    EXPECT_EQ(test::lentBuffers(pool), 0u);
  }
}

// A receive() whose token can be cancelled (a connection in a TaskGroup, or under
// withCancellation) waits like one whose token cannot: on io_uring directly, with no
// operation of its own. A cancellation from another thread while it waits ends it with
// OperationCancelled, and the bytes that arrive afterwards are the next receive's; a
// stream whose receive was cancelled goes on.
TEST_P(StreamReadsTest, ACancellableReceiveThatWaitsEndsOnCancellationAndLosesNothing) {
  test::Watchdog watchdog(60s, "ACancellableReceive");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  for (int round = 0; round < 3; ++round) {
    const std::string before = "b" + std::to_string(round);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), before.data(), before.size()));
    CancellationSource source;
    EXPECT_EQ(test::text(syncAwait(
                  withCancellation(source.token(), receiveOnce(pair.stream)).via(&pool))),
              before);
    test::Outcome<LentBuffer> waiting;
    test::startOn(pool, withCancellation(source.token(), receiveCounted(pair.stream)), waiting);
    test::quiesce(pool);  // it waits now (the worker has run it and gone back to its loop)
    EXPECT_EQ(waiting.ends.load(), 0);
    source.requestCancellation();  // from this thread, not the worker's
    waiting.wait();
    ASSERT_TRUE(waiting.endedWith<OperationCancelled>()) << waiting.what();
    const std::string after = "a" + std::to_string(round);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), after.data(), after.size()));
    EXPECT_EQ(test::text(syncAwait(receiveOnce(pair.stream).via(&pool))), after);
    EXPECT_EQ(test::lentBuffers(pool), 0u);
  }
}

// A cancellation racing an arrival, again and again: each receive either returns the byte
// or ends with OperationCancelled, and then the next receive returns it. Every byte once,
// in order, and every buffer back.
TEST_P(StreamReadsTest, ACancellationRacingAnArrivalLosesAndDuplicatesNothing) {
  test::Watchdog watchdog(60s, "ACancellationRacing");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  int cancelled = 0;
  for (int i = 0; i < 300; ++i) {
    CancellationSource source;
    test::Outcome<LentBuffer> waiting;
    test::startOn(pool, withCancellation(source.token(), receiveOnce(pair.stream)), waiting);
    if (i % 3 != 0) test::quiesce(pool);  // mostly waiting; sometimes not yet started
    const char byte = static_cast<char>('a' + i % 26);
    if (i % 2 == 0) {
      source.requestCancellation();
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), &byte, 1));
    } else {
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), &byte, 1));
      source.requestCancellation();
    }
    waiting.wait();
    std::string got;
    if (waiting.result.hasException()) {
      ASSERT_TRUE(waiting.endedWith<OperationCancelled>()) << waiting.what();
      ++cancelled;
      got = test::text(syncAwait(receiveOnce(pair.stream).via(&pool)));
    } else {
      got = test::text(waiting.result.value());
    }
    ASSERT_EQ(got, std::string(1, byte)) << "at " << i;
  }
  EXPECT_GT(cancelled, 0);
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// A pool shut down while its loop keeps receives armed, one with bytes kept and one with a
// receive waiting: the waiting receive ends with ExecutorShutDown, nothing leaks, and the
// kept bytes are read later on another pool, before what came after them.
TEST_P(StreamReadsTest, APoolShutDownWithReceivesArmedLosesNothing) {
  test::Watchdog watchdog(60s, "APoolShutDown");
  test::StreamAndPeer kept;
  test::StreamAndPeer waited;
  test::Outcome<LentBuffer> waiting;
  {
    ThreadPool pool(options(1));
    kept = test::connectedPair(pool);
    waited = test::connectedPair(pool);
    for (test::StreamAndPeer* pair : {&kept, &waited}) {
      ASSERT_TRUE(test::sendAllBlocking(pair->peer.get(), "1", 1));
      EXPECT_EQ(test::text(syncAwait(receiveOnce(pair->stream).via(&pool))), "1");
    }
    ASSERT_TRUE(test::sendAllBlocking(kept.peer.get(), "23", 2));
    if (keepsReceivesArmed(pool)) {
      test::waitUntil([&] { return test::lentBuffers(pool) == 1; });
    }
    test::startOn(pool, receiveCounted(waited.stream), waiting);
    test::quiesce(pool);
  }  // shut down
  ASSERT_EQ(waiting.ends.load(), 1);
  EXPECT_TRUE(waiting.endedWith<ExecutorShutDown>()) << waiting.what();
  ThreadPool later(options(1));
  ASSERT_TRUE(test::sendAllBlocking(kept.peer.get(), "45", 2));
  std::string got;
  while (got.size() < 4) got += test::text(syncAwait(receiveOnce(kept.stream).via(&later)));
  EXPECT_EQ(got, "2345");
  EXPECT_EQ(test::lentBuffers(later), 0u);
}

// Many streams keep receives armed while their readers hold every buffer they get: the
// loop's ring runs dry again and again (ENOBUFS), each such receive goes on with a buffer
// of its own, and every byte arrives once, in order.
TEST_P(StreamReadsTest, ReceivesWhenTheRingRunsDryLoseNothing) {
  test::Watchdog watchdog(240s, "ReceivesWhenTheRingRunsDry");
  ThreadPool pool(options(1));
  const std::size_t streams = 48;
  const std::size_t messages = test::reducedIoScale() ? 30 : 100;  // 4,800 > the ring's 4,096
  std::vector<test::StreamAndPeer> pairs;
  for (std::size_t s = 0; s < streams; ++s) pairs.push_back(test::connectedPair(pool));
  std::vector<std::vector<LentBuffer>> held(streams);
  std::thread peers([&] {
    for (std::size_t m = 0; m < messages; ++m) {
      for (std::size_t s = 0; s < streams; ++s) {
        const std::byte byte = streamByte(s, m);
        ASSERT_TRUE(test::sendAllBlocking(pairs[s].peer.get(), &byte, 1));
      }
    }
    for (auto& pair : pairs) ::shutdown(pair.peer.get(), SHUT_WR);
  });
  auto holder = [&](std::size_t s) -> Lazy<void> {
    for (;;) {
      LentBuffer data = co_await pairs[s].stream.receive();
      if (data.empty()) co_return;
      held[s].push_back(std::move(data));
    }
  };
  std::vector<Lazy<void>> holders;
  for (std::size_t s = 0; s < streams; ++s) holders.push_back(holder(s));
  syncAwait(collectAll(std::move(holders)).via(&pool));
  peers.join();
  std::size_t buffers = 0;
  for (std::size_t s = 0; s < streams; ++s) {
    std::vector<std::byte> bytes;
    for (const LentBuffer& b : held[s]) bytes.insert(bytes.end(), b.bytes().begin(), b.bytes().end());
    ASSERT_EQ(bytes.size(), messages) << "stream " << s;
    EXPECT_EQ(firstWrong(s, 0, bytes), std::string::npos) << "stream " << s;
    buffers += held[s].size();
  }
  EXPECT_EQ(test::lentBuffers(pool), buffers);
  held.clear();
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// Receives under withTimeout with limits of every length, and then under the stream's read
// time limit, while the peer writes from another thread: each returns bytes or times out,
// together they return every byte once, in order, and every buffer comes back.
TEST_P(StreamReadsTest, ReceivesRacedByTimeoutsLoseAndDuplicateNothing) {
  test::Watchdog watchdog(240s, "ReceivesRacedByTimeouts");
  for (const bool readTimeLimit : {false, true}) {
    ThreadPool pool(options(1));
    test::StreamAndPeer pair = test::connectedPair(pool);
    const std::uint64_t total = test::reducedIoScale() ? 200000 : 2000000;
    PeerWriter writer(pair.peer.get(), 6, total, 700, 3);
    struct Counts {
      std::uint64_t bytes = 0;
      int timeouts = 0;
    };
    const Counts counts = syncAwait([&]() -> Lazy<Counts> {
      const std::chrono::nanoseconds limits[] = {1us, 10us, 50us, 200us, 1ms};
      Counts c;
      for (std::size_t i = 0;; ++i) {
        const std::chrono::nanoseconds limit = limits[i % std::size(limits)];
        LentBuffer data;
        try {
          if (readTimeLimit) {
            pair.stream.setReadTimeout(limit);
            data = co_await pair.stream.receive();
          } else {
            data = co_await withTimeout(pair.stream.receive(), limit);
          }
        } catch (const TimeoutError&) {
          ++c.timeouts;
          continue;
        } catch (const std::system_error& e) {
          if (e.code().value() != ETIMEDOUT) throw;
          ++c.timeouts;
          continue;
        }
        if (data.empty()) co_return c;
        if (firstWrong(6, c.bytes, data.bytes()) != std::string::npos) {
          throw std::runtime_error("wrong byte at " + std::to_string(c.bytes));
        }
        c.bytes += data.size();
      }
    }().via(&pool));
    writer.join();
    EXPECT_EQ(counts.bytes, total);
    EXPECT_EQ(test::lentBuffers(pool), 0u);
  }
}

// Two receives wait, the first on the loop whose request is armed, the second behind it on
// another loop. The first gets the first arrival; the second is given the next one, and
// its coroutine is destroyed before its loop has handed it over (that worker is held):
// the bytes go back to the front of the inbox, and the next receive gets them.
TEST_P(StreamReadsTest, DestroyingAReceiveGivenBytesOnAnotherLoopKeepsThem) {
  test::Watchdog watchdog(60s, "DestroyingAReceiveGivenBytes");
  ThreadPool a(options(1, "loop-a"));
  ThreadPool b(options(1, "loop-b"));
  if (!keepsReceivesArmed(a)) {
    GTEST_SKIP() << "only an inbox hands bytes to a receive on another loop";
  }
  test::StreamAndPeer pair = test::connectedPair(a);
  for (int round = 0; round < (test::reducedIoScale() ? 10 : 50); ++round) {
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "<", 1));
    EXPECT_EQ(test::text(syncAwait(receiveOnce(pair.stream).via(&a))), "<");  // armed on a
    test::Outcome<LentBuffer> first;
    test::startOn(a, receiveCounted(pair.stream), first);
    test::quiesce(a);
    std::optional<Lazy<LentBuffer>> doomed;
    bool suspended = false;
    test::onWorker(b, [&] {
      doomed.emplace(receiveCounted(pair.stream));
      suspended = test::startSuspended(b, *doomed);  // parked behind the first
    });
    ASSERT_TRUE(suspended);
    {
      test::WorkerHold hold(b);
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "1", 1));
      first.wait();
      EXPECT_EQ(test::text(first.result.value()), "1");
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "2", 1));
      // a gives "2" to the second receive (a's buffers lent: "1" and "2").
      test::waitUntil([&] { return test::lentBuffers(a) == 2; });
      hold.release([&] { doomed.reset(); });
    }
    EXPECT_EQ(test::Counted::alive(), 0);
    first.result = Try<LentBuffer>();  // "1" goes back
    EXPECT_EQ(test::text(syncAwait(receiveOnce(pair.stream).via(round % 2 == 0 ? &a : &b))), "2");
  }
  pair.stream.close();
  EXPECT_EQ(test::lentBuffers(a), 0u);
  EXPECT_EQ(test::lentBuffers(b), 0u);
}

// release() after receive(): nothing kept, so the descriptor goes with nothing lost, and
// reads on it as a plain socket go on.
TEST_P(StreamReadsTest, ReleaseAfterReceiveHandsOverTheSocket) {
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "x", 1));
  EXPECT_EQ(test::text(syncAwait(receiveOnce(pair.stream).via(&pool))), "x");
  test::OwnedFd released(pair.stream.release());
  EXPECT_EQ(test::lentBuffers(pool), 0u);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "plain", 5));
  char buffer[8];
  std::size_t got = 0;
  while (got < 5) {
    const ssize_t n = ::recv(released.get(), buffer + got, sizeof buffer - got, 0);
    if (n < 0 && errno == EAGAIN) {  // non-blocking: a readiness hand-shake
      test::waitUntil([&] { return test::queuedToRead(released.get()) > 0; });
      continue;
    }
    ASSERT_GT(n, 0);
    got += static_cast<std::size_t>(n);
  }
  EXPECT_EQ(std::string(buffer, got), "plain");
}

// release() of a stream whose receive is armed (io_uring) cancels that receive, which ends
// later, on the loop. A stream that adopts the descriptor on the same worker before that
// end reads it (its receive() then takes a receive of its own: one armed beside the
// ending one could take its bytes) and closes it: the close waits for the released
// stream's receive to end (it is not in the descriptor's list of waits, nor its inbox),
// then closes the descriptor, whose peer sees the end. Every byte once, in order, every
// buffer back, many times over.
TEST_P(StreamReadsTest, AStreamAdoptingAReleasedDescriptorReadsItAndClosesIt) {
  test::Watchdog watchdog(60s, "AStreamAdoptingAReleasedDescriptor");
  ThreadPool pool(options(1));
  for (int round = 0; round < 50; ++round) {
    const bool readFirst = round % 2 == 0;
    test::StreamAndPeer pair = test::connectedPair(pool);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "x", 1));
    EXPECT_EQ(test::text(syncAwait(receiveOnce(pair.stream).via(&pool))), "x");
    // Released and adopted in one turn of the worker: the armed receive's end not reaped.
    std::optional<TcpStream> adopted;
    test::Outcome<LentBuffer> waiting;
    test::onWorker(pool, [&] {
      adopted.emplace(pair.stream.release());
      if (readFirst) {
        test::startOn(pool, receiveOnce(*adopted), waiting);
      } else {
        adopted->close();
      }
    });
    if (readFirst) {
      test::quiesce(pool);  // the released receive's cancellation in the kernel: the peer
                            // sends to the adopting stream only (see release())
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "abc", 3));
      waiting.wait();
      ASSERT_FALSE(waiting.result.hasException()) << waiting.what();
      std::string got = test::text(waiting.result.value());
      waiting.result.value().reset();  // given back
      while (got.size() < 3) got += test::text(syncAwait(receiveOnce(*adopted).via(&pool)));
      EXPECT_EQ(got, "abc");
      test::onWorker(pool, [&] { adopted->close(); });
    }
    char byte;
    EXPECT_EQ(::recv(pair.peer.get(), &byte, 1, 0), 0) << "round " << round;
    EXPECT_EQ(test::lentBuffers(pool), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StreamReadsTest, test::kIoBackends, test::ioBackendName);

// release() with bytes an armed receive kept (io_uring): they cannot be handed over, and
// weft says so and aborts (in a child process).
TEST(StreamReadsDeathTest, ReleaseWithBytesKeptIsReportedAndAborts) {
  if (!test::backendAvailable(IoBackendChoice::kIoUring)) GTEST_SKIP() << "no io_uring here";
  if (!IoLoop::create(IoBackendChoice::kIoUring)->multishotReceive()) {
    GTEST_SKIP() << "no receive kept armed here (WEFT_IO_URING_SETUP=singleshot, or the kernel)";
  }
  const int status = test::runInChild([] {
    ::alarm(60);
    ThreadPool pool(ThreadPoolOptions{1, "child", IoBackendChoice::kIoUring});
    test::StreamAndPeer pair = test::connectedPair(pool);
    if (!test::sendAllBlocking(pair.peer.get(), "x", 1)) return 1;
    (void)syncAwait(receiveOnce(pair.stream).via(&pool));
    if (!test::sendAllBlocking(pair.peer.get(), "kept", 4)) return 2;
    test::waitUntil([&] { return test::lentBuffers(pool) == 1; });
    (void)pair.stream.release();
    return 3;  // not reached
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) << test::describeStatus(status);
}

}  // namespace
}  // namespace weft
