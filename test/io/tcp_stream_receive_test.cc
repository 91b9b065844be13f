// TcpStream::receive(): bytes received into buffers the event loop lends (LentBuffer),
// once per backend. What arrived is returned in order, whole, once; the end of the stream
// is an empty LentBuffer; buffers come back to the loop from any thread, also after the
// stream and the pool are gone; a loop whose buffers are all held lends more (io_uring:
// a receive that finds the ring empty becomes a plain recv, and the ring grows) without losing or
// reordering a byte; time limits, withdrawal and fibers behave as for read(). Every test
// checks that no lent buffer is left out (IoLoop::lentBuffers) and no descriptor leaked.
// Races of receive() against cancellation and time limits: io_cancellation_test.cc.

#include <sys/socket.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/executors/lent_buffer.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;

using test::lentBuffers;

using test::errnoOf;
using test::text;

Lazy<LentBuffer> receiveOnce(TcpStream& stream) { co_return co_await stream.receive(); }

// What a coroutine waiting in receive() keeps in its frame, besides the IoAwaiter: the
// awaitable (the descriptor and the time limit) and nothing else; the LentBuffer it
// returns is 32 bytes. An idle connection is mostly that frame
// (docs/design/2026-11-idle-connection-memory.md).
static_assert(sizeof(TcpStream::ReceiveOperation) == 2 * sizeof(std::int64_t));
static_assert(sizeof(TcpStream::ReceiveOperation::Awaiter) == sizeof(IoAwaiter));
static_assert(sizeof(LentBuffer) == 3 * sizeof(void*) + 2 * sizeof(std::uint32_t));

class TcpStreamReceiveTest : public test::IoLeakCheckedTest {};

TEST_P(TcpStreamReceiveTest, ReturnsWhatArrivedThenEmptyAtTheEndOfTheStream) {
  test::Watchdog watchdog(60s, "ReturnsWhatArrived");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "hello", 5));
  LentBuffer first = syncAwait([&]() -> Lazy<LentBuffer> {
    co_return co_await pair.stream.receive();
  }().via(&pool));
  EXPECT_EQ(text(first), "hello");
  EXPECT_EQ(lentBuffers(pool), 1u);
  first.consume(2);
  EXPECT_EQ(text(first), "llo");
  first.reset();
  EXPECT_TRUE(first.empty());
  EXPECT_EQ(lentBuffers(pool), 0u);

  ::shutdown(pair.peer.get(), SHUT_WR);
  const LentBuffer end = syncAwait([&]() -> Lazy<LentBuffer> {
    co_return co_await pair.stream.receive();
  }().via(&pool));
  EXPECT_TRUE(end.empty());
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// Byte i of connection c's stream.
std::byte patternByte(std::size_t c, std::size_t i) {
  return static_cast<std::byte>(static_cast<std::uint8_t>((i * 131 + c * 7 + (i >> 9)) & 0xff));
}

TEST_P(TcpStreamReceiveTest, PlainStyleEchoReturnsEveryByteInOrder) {
  test::Watchdog watchdog(120s, "PlainStyleEcho");
  ThreadPool pool(options(2));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  constexpr std::size_t kConnections = 8;
  const std::size_t messages = test::reducedIoScale() ? 50 : 200;
  auto serveOne = [&]() -> Lazy<std::size_t> {
    TcpStream stream = co_await listener.accept();
    std::size_t echoed = 0;
    for (;;) {  // the plain style
      LentBuffer data = co_await stream.receive();
      if (data.empty()) break;
      co_await stream.writeAll(data);
      echoed += data.size();
    }
    co_return echoed;
  };
  auto client = [&](std::size_t c) -> Lazy<std::size_t> {
    TcpStream stream = co_await TcpStream::connect(address);
    std::size_t position = 0;
    std::vector<std::byte> sent;
    std::vector<std::byte> echo;
    for (std::size_t m = 0; m < messages; ++m) {
      // 1..700 bytes, and one message in 20 of 20..60 KiB: several receives and lent
      // buffers, echoed piece by piece.
      const std::size_t size = m % 20 == 7 ? 20000 + (m * 977) % 40000 : 1 + (m * 37 + c) % 700;
      sent.resize(size);
      for (std::size_t i = 0; i < size; ++i) sent[i] = patternByte(c, position + i);
      co_await stream.writeAll(sent);
      echo.assign(size, std::byte{0});
      co_await stream.readExactly(echo);
      if (echo != sent) throw std::runtime_error("connection " + std::to_string(c) + ": echo differs");
      position += size;
    }
    stream.shutdownWrite();
    std::byte extra[8];
    if (co_await stream.read(extra, sizeof extra) != 0) throw std::runtime_error("extra bytes");
    co_return position;
  };
  std::vector<Lazy<std::size_t>> servers;
  std::vector<Lazy<std::size_t>> clients;
  for (std::size_t c = 0; c < kConnections; ++c) {
    servers.push_back(serveOne());
    clients.push_back(client(c));
  }
  auto [served, checked] =
      syncAwait(collectAll(collectAll(std::move(servers)), collectAllPara(std::move(clients)))
                    .via(&pool));
  std::size_t echoed = 0;
  std::size_t sentTotal = 0;
  for (auto& s : served.value()) echoed += s.value();
  for (auto& c : checked.value()) sentTotal += c.value();
  EXPECT_EQ(echoed, sentTotal);
}

// Holds more buffers than the io_uring loop's ring can lend (4,096): a receive that finds
// the ring empty (ENOBUFS) becomes a plain recv into a pool buffer, and the ring grows up
// to its capacity.
// Each held buffer has exactly its own byte, in order.
TEST_P(TcpStreamReceiveTest, HeldBuffersMakeTheLoopLendMoreWithoutLosingAByte) {
  test::Watchdog watchdog(240s, "HeldBuffers");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const std::size_t kHeld = 4096 + 300;
  std::vector<LentBuffer> held;
  held.reserve(kHeld);
  // One byte at a time: the peer sends it, the worker receives it into a buffer it keeps.
  std::thread peer([&] {
    for (std::size_t i = 0; i < kHeld; ++i) {
      const auto byte = static_cast<std::uint8_t>(i % 251);
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), &byte, 1));
      char ack;
      ASSERT_EQ(::recv(pair.peer.get(), &ack, 1, MSG_WAITALL), 1);
    }
  });
  syncAwait([&]() -> Lazy<void> {
    for (std::size_t i = 0; i < kHeld; ++i) {
      LentBuffer data = co_await pair.stream.receive();
      held.push_back(std::move(data));
      co_await pair.stream.writeAll("a");
    }
  }().via(&pool));
  peer.join();
  ASSERT_EQ(held.size(), kHeld);
  for (std::size_t i = 0; i < kHeld; ++i) {
    ASSERT_EQ(held[i].size(), 1u) << "buffer " << i;
    ASSERT_EQ(held[i].data()[0], static_cast<std::byte>(i % 251)) << "buffer " << i;
  }
  EXPECT_EQ(lentBuffers(pool), kHeld);
  // Half come back on another thread, half on the worker.
  std::thread([&] {
    for (std::size_t i = 0; i < kHeld; i += 2) held[i].reset();
  }).join();
  test::onWorker(pool, [&] {
    for (std::size_t i = 1; i < kHeld; i += 2) held[i].reset();
  });
  EXPECT_EQ(lentBuffers(pool), 0u);
  // The loop lends from what came back: the stream goes on.
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "more", 4));
  const LentBuffer more = syncAwait([&]() -> Lazy<LentBuffer> {
    co_return co_await pair.stream.receive();
  }().via(&pool));
  EXPECT_EQ(text(more), "more");
}

TEST_P(TcpStreamReceiveTest, BuffersOutliveTheStreamAndThePool) {
  test::Watchdog watchdog(60s, "BuffersOutlive");
  std::vector<LentBuffer> kept;
  {
    ThreadPool pool(options(1));
    test::StreamAndPeer pair = test::connectedPair(pool);
    for (const char* message : {"first", "second", "third"}) {
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), message, std::strlen(message)));
      kept.push_back(syncAwait([&]() -> Lazy<LentBuffer> {
        co_return co_await pair.stream.receive();
      }().via(&pool)));
    }
    kept.front().reset();  // one comes back while the loop lives
    pair.stream.close();
  }  // the pool and its loops are gone; two buffers are still lent
  EXPECT_EQ(text(kept[1]), "second");
  EXPECT_EQ(text(kept[2]), "third");
  // Given back on another thread, then on this one: the last frees the loop's pool
  // (ASan and LeakSanitizer check both).
  std::thread([&] { kept[1].reset(); }).join();
  kept[2].reset();
}

TEST_P(TcpStreamReceiveTest, ReceiveHonoursTheReadTimeLimitAndTheStreamGoesOn) {
  test::Watchdog watchdog(60s, "ReadTimeLimit");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  pair.stream.setReadTimeout(20ms);
  // Nothing arrives: the limit ends it.
  EXPECT_EQ(errnoOf([&] { (void)syncAwait(receiveOnce(pair.stream).via(&pool)); }), ETIMEDOUT);
  pair.stream.setReadTimeout(0ns);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "late", 4));
  const LentBuffer late = syncAwait([&]() -> Lazy<LentBuffer> {
    co_return co_await pair.stream.receive();
  }().via(&pool));
  EXPECT_EQ(text(late), "late");
  EXPECT_EQ(lentBuffers(pool), 1u);
}

Lazy<LentBuffer> receiveCounted(TcpStream& stream) {
  Counted inFrame;
  co_return co_await stream.receive();
}

TEST_P(TcpStreamReceiveTest, DestroyingASuspendedReceiveWithdrawsItAndTakesNothing) {
  test::Watchdog watchdog(60s, "DestroyingASuspendedReceive");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  for (bool submittedFirst : {false, true}) {
    std::optional<Lazy<LentBuffer>> doomed;
    bool suspended = false;
    test::onWorker(pool, [&] {
      doomed.emplace(receiveCounted(pair.stream));
      suspended = test::startSuspended(pool, *doomed);
      if (!submittedFirst) doomed.reset();  // before the loop's next turn
    });
    ASSERT_TRUE(suspended);
    if (submittedFirst) {
      test::quiesce(pool);  // now the receive waits in the kernel
      test::onWorker(pool, [&] { doomed.reset(); });
    }
    EXPECT_EQ(Counted::alive(), 0);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "next", 4));
    const LentBuffer got = syncAwait(receiveCounted(pair.stream).via(&pool));
    EXPECT_EQ(text(got), "next");
  }
  EXPECT_EQ(lentBuffers(pool), 0u);
}

TEST_P(TcpStreamReceiveTest, FibersReceiveInThePlainStyle) {
  test::Watchdog watchdog(60s, "FibersReceive");
  ThreadPool pool(options(2));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  FiberFuture<std::size_t> server = spawnFiber(&pool, [&] {
    TcpStream stream = await(listener.accept());
    std::size_t echoed = 0;
    for (;;) {
      LentBuffer data = await(stream.receive());
      if (data.empty()) return echoed;
      await(stream.writeAll(data));
      echoed += data.size();
    }
  });
  FiberFuture<std::string> client = spawnFiber(&pool, [&] {
    TcpStream stream = await(TcpStream::connect(address));
    std::string back;
    for (int i = 0; i < 100; ++i) {
      const std::string message = "message " + std::to_string(i) + ";";
      await(stream.writeAll(message));
      std::string echo(message.size(), '\0');
      await(stream.readExactly(std::as_writable_bytes(std::span<char>(echo))));
      back += echo;
    }
    stream.shutdownWrite();
    return back;
  });
  const std::string back = syncAwait(std::move(client));
  const std::size_t echoed = syncAwait(std::move(server));
  EXPECT_EQ(echoed, back.size());
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += "message " + std::to_string(i) + ";";
  EXPECT_EQ(back, expected);
}

TEST_P(TcpStreamReceiveTest, ReceiveOnAClosedStreamFailsWithEbadf) {
  ThreadPool pool(options(1));
  TcpStream closed;
  EXPECT_EQ(errnoOf([&] { (void)syncAwait(receiveOnce(closed).via(&pool)); }), EBADF);
}

// The data and the end of the stream arrive together, while a receive waits: the receive
// gets the data (less than a buffer), and the next one must still see the end of the
// stream, for which no further event comes (epoll: a short receive marks the socket
// drained, except after a hang-up).
TEST_P(TcpStreamReceiveTest, TheEndOfTheStreamThatCameWithTheLastDataIsSeen) {
  test::Watchdog watchdog(60s, "EndOfStreamWithTheLastData");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  test::Outcome<LentBuffer> first;
  test::startOn(pool, receiveOnce(pair.stream), first);
  test::quiesce(pool);  // the receive waits
  {
    test::WorkerHold hold(pool);  // both arrive before the loop's next turn
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "abc", 3));
    ::shutdown(pair.peer.get(), SHUT_WR);
    hold.release([] {});
  }
  first.wait();
  EXPECT_EQ(text(first.result.value()), "abc");
  const LentBuffer end = syncAwait(receiveOnce(pair.stream).via(&pool));
  EXPECT_TRUE(end.empty());
}

// The same when the loop saw the hang-up while nobody waited on this socket (another
// operation kept the loop waiting): the data is then received at once, and the end of
// the stream after it too.
TEST_P(TcpStreamReceiveTest, TheEndOfTheStreamSeenWhileNobodyWaitedIsSeenAfterTheData) {
  test::Watchdog watchdog(60s, "EndOfStreamSeenWhileNobodyWaited");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  test::StreamAndPeer other = test::connectedPair(pool);
  // A first wait registers the socket with the loop.
  test::Outcome<LentBuffer> registered;
  test::startOn(pool, receiveOnce(pair.stream), registered);
  test::quiesce(pool);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "x", 1));
  registered.wait();
  EXPECT_EQ(text(registered.result.value()), "x");
  // Another socket's receive keeps the loop waiting, and its events are seen meanwhile.
  test::Outcome<LentBuffer> keeper;
  test::startOn(pool, receiveOnce(other.stream), keeper);
  test::quiesce(pool);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "abc", 3));
  ::shutdown(pair.peer.get(), SHUT_WR);
  test::quiesce(pool);  // the loop has turned (its wake-up) and seen the events
  EXPECT_EQ(text(syncAwait(receiveOnce(pair.stream).via(&pool))), "abc");
  EXPECT_TRUE(syncAwait(receiveOnce(pair.stream).via(&pool)).empty());
  ASSERT_TRUE(test::sendAllBlocking(other.peer.get(), "k", 1));
  keeper.wait();
  EXPECT_EQ(text(keeper.result.value()), "k");
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpStreamReceiveTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
