// UdpSocket::receiveFrom() and receive() without a buffer: datagrams received into buffers
// the event loop lends (LentDatagram), once per backend. Each receive returns one datagram,
// whole, once, in order, with its sender; an empty datagram is a valid one; a datagram
// longer than a lent buffer (16 KiB) is cut to it and reported truncated, never silently;
// buffers come back to the loop from any thread, also after the socket and the pool are
// gone; a loop whose buffers are all held lends more (io_uring: a receive that finds the
// ring empty becomes a plain recvmsg, and the ring grows) without losing or reordering a
// datagram;
// cancellation and withTimeout racing an arrival lose no datagram and no buffer;
// withdrawal, close and fibers behave as for receiveFrom(buffer). Every test checks that no
// lent buffer is left out (IoLoop::lentBuffers), no frame is left (test::Counted) and no
// descriptor leaked.
//
// No datagram may be lost here: senders and receivers are on loopback, and every test
// that sends many datagrams sends them in windows that the receiver acknowledges, far
// below what a default receive buffer holds, so the kernel never has to drop one.

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/lent_buffer.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/lent_datagram.h"
#include "weft/io/socket_address.h"
#include "weft/io/udp_socket.h"
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

constexpr std::size_t kLent = 16384;  // the loops' lent buffer size (docs/io.md)

using test::errnoOf;
using test::text;

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Sends one datagram from `socket` (non-blocking, as weft's are) to `to` with plain system
// calls, waiting with poll() while the socket's send buffer is full. False on failure.
bool sendRaw(const UdpSocket& socket, std::span<const std::byte> data, const SocketAddress& to) {
  for (;;) {
    const ssize_t n = ::sendto(socket.nativeHandle(), data.data(), data.size(), 0, to.native(),
                               to.nativeLength());
    if (n >= 0) return static_cast<std::size_t>(n) == data.size();
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return false;
    pollfd writable{socket.nativeHandle(), POLLOUT, 0};
    ::poll(&writable, 1, -1);
  }
}
bool sendRaw(const UdpSocket& socket, const std::string& s, const SocketAddress& to) {
  return sendRaw(socket, bytes(s), to);
}

// Datagram `index` of sender `sender`: its size (1..1400, one in 16 of 4..16 KiB, and
// the edges 16383 and exactly 16384) and its bytes, the index first.
std::vector<std::byte> patternDatagram(std::uint32_t sender, std::uint32_t index) {
  std::size_t size = 4 + (index * 37 + sender * 11) % 1400;
  if (index % 16 == 5) size = 4096 + (index * 977) % 12289;
  if (index % 50 == 17) size = kLent - 1;
  if (index % 50 == 33) size = kLent;
  std::vector<std::byte> data(size);
  std::memcpy(data.data(), &index, sizeof index);
  for (std::size_t i = sizeof index; i < size; ++i) {
    data[i] = static_cast<std::byte>(static_cast<std::uint8_t>(i * 131 + index * 7 + sender));
  }
  return data;
}

Lazy<LentDatagram> receiveOnce(UdpSocket& socket) { co_return co_await socket.receiveFrom(); }

Lazy<LentDatagram> receiveCounted(UdpSocket& socket) {
  Counted inFrame;
  co_return co_await socket.receiveFrom();
}

class UdpSocketReceiveTest : public test::IoLeakCheckedTest {};

TEST_P(UdpSocketReceiveTest, ReturnsOneDatagramWithItsSenderInALentBuffer) {
  test::Watchdog watchdog(60s, "ReturnsOneDatagram");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::bind(SocketAddress::loopbackV4(0));
  // Two datagrams queued before the receives: each receive takes one, never both.
  ASSERT_TRUE(sendRaw(sender, "hello", receiver.localAddress()));
  ASSERT_TRUE(sendRaw(sender, "world", receiver.localAddress()));
  LentDatagram first = syncAwait(receiveOnce(receiver).via(&pool));
  EXPECT_EQ(text(first.data), "hello");
  EXPECT_FALSE(first.truncated);
  EXPECT_EQ(first.from, sender.localAddress());
  EXPECT_EQ(lentBuffers(pool), 1u);
  LentDatagram second = syncAwait(receiveOnce(receiver).via(&pool));
  EXPECT_EQ(text(second.data), "world");
  EXPECT_EQ(lentBuffers(pool), 2u);
  first.data.consume(1);
  EXPECT_EQ(text(first.data), "ello");
  first.data.reset();
  second = LentDatagram{};  // gives its buffer back too
  EXPECT_EQ(lentBuffers(pool), 0u);

  // A receive that waits before the datagram arrives (io_uring: the kernel's retry).
  test::Outcome<LentDatagram> waiting;
  test::startOn(pool, receiveOnce(receiver), waiting);
  test::quiesce(pool);
  EXPECT_EQ(waiting.ends.load(), 0);
  EXPECT_EQ(lentBuffers(pool), 0u) << "a waiting receive holds no buffer";
  ASSERT_TRUE(sendRaw(sender, "late", receiver.localAddress()));
  waiting.wait();
  EXPECT_EQ(text(waiting.result.value().data), "late");
  EXPECT_EQ(waiting.result.value().from, sender.localAddress());
  waiting.result = Try<LentDatagram>();
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// Two senders, 300 datagrams each, interleaved, in windows of 16 that the receiver
// acknowledges: every datagram arrives once, whole, with its sender, each sender's in
// the order sent. The receiver keeps every LentDatagram until the end (600 buffers held:
// the io_uring ring grows from 32 on the way).
TEST_P(UdpSocketReceiveTest, ReceivesManyDatagramsInOrderWithTheirContentsAndSenders) {
  test::Watchdog watchdog(120s, "ManyDatagrams");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress to = receiver.localAddress();
  UdpSocket senders[2] = {UdpSocket::bind(SocketAddress::loopbackV4(0)),
                          UdpSocket::bind(SocketAddress::loopbackV4(0))};
  const std::uint32_t perSender = test::reducedIoScale() ? 100 : 300;
  constexpr std::uint32_t kWindow = 16;
  std::atomic<std::uint32_t> received{0};
  std::vector<LentDatagram> kept;
  // Named: the coroutine refers to the lambda's captures, which must outlive it.
  auto receiveAll = [&]() -> Lazy<int> {
    for (std::uint32_t i = 0; i < 2 * perSender; ++i) {
      kept.push_back(co_await receiver.receiveFrom());
      received.store(i + 1);
      received.notify_all();
    }
    co_return 0;
  };
  test::Outcome<int> receiving;
  test::startOn(pool, receiveAll(), receiving);
  std::uint32_t sent = 0;
  for (std::uint32_t index = 0; index < perSender; ++index) {
    for (std::uint32_t s = 0; s < 2; ++s) {
      // At most kWindow datagrams wait in the receive buffer.
      for (std::uint32_t seen = received.load(); sent - seen >= kWindow; seen = received.load()) {
        received.wait(seen);
      }
      ASSERT_TRUE(sendRaw(senders[s], patternDatagram(s, index), to));
      ++sent;
    }
  }
  receiving.wait();
  ASSERT_TRUE(receiving.result.hasValue()) << receiving.what();
  ASSERT_EQ(kept.size(), 2 * perSender);
  std::uint32_t next[2] = {0, 0};
  for (std::size_t k = 0; k < kept.size(); ++k) {
    const LentDatagram& d = kept[k];
    const std::uint32_t s = d.from == senders[0].localAddress() ? 0 : 1;
    ASSERT_EQ(d.from, senders[s].localAddress()) << "datagram " << k;
    const std::vector<std::byte> expected = patternDatagram(s, next[s]);
    ASSERT_FALSE(d.truncated) << "datagram " << k << " of " << expected.size() << " bytes";
    ASSERT_EQ(d.data.size(), expected.size()) << "sender " << s << " datagram " << next[s];
    ASSERT_EQ(std::memcmp(d.data.data(), expected.data(), expected.size()), 0)
        << "sender " << s << " datagram " << next[s];
    ++next[s];
  }
  EXPECT_EQ(next[0], perSender);
  EXPECT_EQ(next[1], perSender);
  EXPECT_EQ(lentBuffers(pool), kept.size());
  kept.clear();
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// Empty datagrams are datagrams: an empty LentBuffer, not truncated, with the sender; the
// datagrams around them arrive as sent. 200 of them in a row (io_uring: the kernel takes
// no ring buffer for them, or gives it back; either way the ring must not run dry).
TEST_P(UdpSocketReceiveTest, AnEmptyDatagramIsAValidDatagram) {
  test::Watchdog watchdog(60s, "EmptyDatagram");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress to = receiver.localAddress();
  ASSERT_TRUE(sendRaw(sender, "before", to));
  ASSERT_TRUE(sendRaw(sender, std::span<const std::byte>(), to));
  ASSERT_TRUE(sendRaw(sender, "after", to));
  LentDatagram d = syncAwait(receiveOnce(receiver).via(&pool));
  EXPECT_EQ(text(d.data), "before");
  d = syncAwait(receiveOnce(receiver).via(&pool));
  EXPECT_TRUE(d.data.empty());
  EXPECT_FALSE(d.truncated);
  EXPECT_EQ(d.from, sender.localAddress());
  d = syncAwait(receiveOnce(receiver).via(&pool));
  EXPECT_EQ(text(d.data), "after");
  d = LentDatagram{};
  EXPECT_EQ(lentBuffers(pool), 0u);

  // Waiting first, then an empty datagram arrives.
  test::Outcome<LentDatagram> waiting;
  test::startOn(pool, receiveOnce(receiver), waiting);
  test::quiesce(pool);
  ASSERT_TRUE(sendRaw(sender, std::span<const std::byte>(), to));
  waiting.wait();
  ASSERT_TRUE(waiting.result.hasValue()) << waiting.what();
  EXPECT_TRUE(waiting.result.value().data.empty());
  EXPECT_FALSE(waiting.result.value().truncated);
  EXPECT_EQ(waiting.result.value().from, sender.localAddress());

  const int empties = 200;
  const int got = syncAwait([&]() -> Lazy<int> {
    int n = 0;
    for (int i = 0; i < empties; ++i) {
      if (!sendRaw(sender, std::span<const std::byte>(), to)) throw std::runtime_error("send");
      const LentDatagram e = co_await receiver.receiveFrom();
      if (e.data.empty() && !e.truncated && e.from == sender.localAddress()) ++n;
    }
    co_return n;
  }().via(&pool));
  EXPECT_EQ(got, empties);
  ASSERT_TRUE(sendRaw(sender, "last", to));
  EXPECT_EQ(text(syncAwait(receiveOnce(receiver).via(&pool)).data), "last");
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// A datagram longer than a lent buffer: its first 16 KiB, `truncated` set (the rest is
// lost, as receiveFrom(buffer) into a 16 KiB buffer loses it), and the next datagram is the
// next one sent, not the rest. Exactly 16 KiB is whole. Queued before the receive and
// arriving while it waits alike.
TEST_P(UdpSocketReceiveTest, ADatagramLongerThanALentBufferIsCutAndReportedTruncated) {
  test::Watchdog watchdog(60s, "OversizedDatagram");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress to = receiver.localAddress();
  auto pattern = [](std::size_t size) {
    std::vector<std::byte> data(size);
    for (std::size_t i = 0; i < size; ++i) {
      data[i] = static_cast<std::byte>((i * 7 + i / 251) & 0xff);
    }
    return data;
  };
  for (bool waitFirst : {false, true}) {
    SCOPED_TRACE(waitFirst ? "the receive waits first" : "the datagrams are queued first");
    for (std::size_t size : {kLent + 1, std::size_t{20000}, std::size_t{65000}, kLent}) {
      SCOPED_TRACE(size);
      const std::vector<std::byte> big = pattern(size);
      test::Outcome<LentDatagram> outcome;
      if (waitFirst) {
        test::startOn(pool, receiveOnce(receiver), outcome);
        test::quiesce(pool);
      }
      ASSERT_TRUE(sendRaw(sender, big, to));
      ASSERT_TRUE(sendRaw(sender, "next", to));
      if (!waitFirst) test::startOn(pool, receiveOnce(receiver), outcome);
      outcome.wait();
      ASSERT_TRUE(outcome.result.hasValue()) << outcome.what();
      const LentDatagram& d = outcome.result.value();
      EXPECT_EQ(d.truncated, size > kLent);
      ASSERT_EQ(d.data.size(), std::min(size, kLent));
      EXPECT_EQ(std::memcmp(d.data.data(), big.data(), d.data.size()), 0);
      EXPECT_EQ(d.from, sender.localAddress());
      const LentDatagram next = syncAwait(receiveOnce(receiver).via(&pool));
      EXPECT_EQ(text(next.data), "next");
      EXPECT_FALSE(next.truncated);
    }
  }
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// Holds more buffers than the io_uring loop's ring can lend (4,096): a receive that finds
// the ring empty (ENOBUFS) becomes a plain recvmsg into a pool buffer, and the ring grows
// up to its capacity.
// Each held buffer has exactly its own datagram, in order. The buffers then come back, half
// on another thread and half on the worker, and the loop lends from them again.
TEST_P(UdpSocketReceiveTest, HeldDatagramsMakeTheLoopLendMoreWithoutLosingOne) {
  test::Watchdog watchdog(240s, "HeldDatagrams");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress to = receiver.localAddress();
  const std::uint32_t kHeld = 4096 + 300;
  constexpr std::uint32_t kWindow = 16;
  std::vector<LentDatagram> held;
  held.reserve(kHeld);
  std::atomic<std::uint32_t> received{0};
  auto receiveAll = [&]() -> Lazy<int> {  // named, as above
    for (std::uint32_t i = 0; i < kHeld; ++i) {
      held.push_back(co_await receiver.receiveFrom());
      received.store(i + 1);
      received.notify_all();
    }
    co_return 0;
  };
  test::Outcome<int> receiving;
  test::startOn(pool, receiveAll(), receiving);
  for (std::uint32_t i = 0; i < kHeld; ++i) {
    for (std::uint32_t seen = received.load(); i - seen >= kWindow; seen = received.load()) {
      received.wait(seen);
    }
    ASSERT_TRUE(sendRaw(sender, std::as_bytes(std::span<const std::uint32_t>(&i, 1)), to));
  }
  receiving.wait();
  ASSERT_TRUE(receiving.result.hasValue()) << receiving.what();
  ASSERT_EQ(held.size(), kHeld);
  for (std::uint32_t i = 0; i < kHeld; ++i) {
    ASSERT_EQ(held[i].data.size(), sizeof i) << "datagram " << i;
    std::uint32_t value;
    std::memcpy(&value, held[i].data.data(), sizeof value);
    ASSERT_EQ(value, i) << "datagram " << i;
  }
  EXPECT_EQ(lentBuffers(pool), kHeld);
  std::thread([&] {
    for (std::size_t i = 0; i < kHeld; i += 2) held[i].data.reset();
  }).join();
  test::onWorker(pool, [&] {
    for (std::size_t i = 1; i < kHeld; i += 2) held[i].data.reset();
  });
  EXPECT_EQ(lentBuffers(pool), 0u);
  ASSERT_TRUE(sendRaw(sender, "more", to));
  EXPECT_EQ(text(syncAwait(receiveOnce(receiver).via(&pool)).data), "more");
  EXPECT_EQ(lentBuffers(pool), 0u);
}

TEST_P(UdpSocketReceiveTest, BuffersOutliveTheSocketAndThePool) {
  test::Watchdog watchdog(60s, "BuffersOutlive");
  std::vector<LentDatagram> kept;
  {
    ThreadPool pool(options(1));
    UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
    UdpSocket sender = UdpSocket::bind(SocketAddress::loopbackV4(0));
    for (const char* message : {"first", "second", "third"}) {
      ASSERT_TRUE(sendRaw(sender, message, receiver.localAddress()));
      kept.push_back(syncAwait(receiveOnce(receiver).via(&pool)));
    }
    kept.front().data.reset();  // one comes back while the loop lives
    EXPECT_EQ(lentBuffers(pool), 2u);
    receiver.close();
  }  // the pool and its loops are gone; two buffers are still lent
  EXPECT_EQ(text(kept[1].data), "second");
  EXPECT_EQ(text(kept[2].data), "third");
  // Given back on another thread, then on this one: the last frees the loop's pool
  // (ASan and LeakSanitizer check both).
  std::thread([&] { kept[1].data.reset(); }).join();
  kept[2].data.reset();
}

// A connected socket's receive() takes only its peer's datagrams, with the peer as `from`.
TEST_P(UdpSocketReceiveTest, AConnectedSocketReceivesItsPeersDatagrams) {
  test::Watchdog watchdog(60s, "ConnectedReceive");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket peer = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket stranger = UdpSocket::bind(SocketAddress::loopbackV4(0));
  receiver.connect(peer.localAddress());
  ASSERT_TRUE(sendRaw(stranger, "not for you", receiver.localAddress()));  // filtered out
  ASSERT_TRUE(sendRaw(peer, "for you", receiver.localAddress()));
  const LentDatagram d = syncAwait(
      [&]() -> Lazy<LentDatagram> { co_return co_await receiver.receive(); }().via(&pool));
  EXPECT_EQ(text(d.data), "for you");
  EXPECT_EQ(d.from, peer.localAddress());
}

// Unix datagram sockets: a sender autobound to an abstract name is `from`.
TEST_P(UdpSocketReceiveTest, UnixDatagramSocketsReceiveIntoLentBuffers) {
  test::Watchdog watchdog(60s, "UnixDatagrams");
  ThreadPool pool(options(1));
  const SocketAddress address =
      SocketAddress::unixPath("@weft-udp-receive-test-" + std::to_string(::getpid()));
  UdpSocket receiver = UdpSocket::bind(address);
  UdpSocket sender = UdpSocket::open(AF_UNIX);
  ASSERT_TRUE(sendRaw(sender, "over unix", address));
  ASSERT_TRUE(sendRaw(sender, std::span<const std::byte>(), address));
  LentDatagram d = syncAwait(receiveOnce(receiver).via(&pool));
  EXPECT_EQ(text(d.data), "over unix");
  EXPECT_EQ(d.from, sender.localAddress());
  d = syncAwait(receiveOnce(receiver).via(&pool));
  EXPECT_TRUE(d.data.empty());
  EXPECT_FALSE(d.truncated);
  EXPECT_EQ(d.from, sender.localAddress());
}

// Several receives in flight on one socket, started in turn: served in that order, each
// datagram to exactly one of them.
TEST_P(UdpSocketReceiveTest, ServesSeveralReceivesInFlightInTheirOrder) {
  test::Watchdog watchdog(60s, "SeveralReceives");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::bind(SocketAddress::loopbackV4(0));
  test::Outcome<LentDatagram> outcomes[4];
  for (auto& outcome : outcomes) {
    test::startOn(pool, receiveOnce(receiver), outcome);
    test::quiesce(pool);
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(sendRaw(sender, "datagram " + std::to_string(i), receiver.localAddress()));
  }
  for (int i = 0; i < 4; ++i) {
    outcomes[i].wait();
    ASSERT_TRUE(outcomes[i].result.hasValue()) << outcomes[i].what();
    EXPECT_EQ(text(outcomes[i].result.value().data), "datagram " + std::to_string(i));
    outcomes[i].result = Try<LentDatagram>();
  }
  EXPECT_EQ(lentBuffers(pool), 0u);
}

TEST_P(UdpSocketReceiveTest, DestroyingASuspendedReceiveWithdrawsItAndTakesNothing) {
  test::Watchdog watchdog(60s, "DestroyingASuspendedReceive");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::bind(SocketAddress::loopbackV4(0));
  for (bool submittedFirst : {false, true}) {
    SCOPED_TRACE(submittedFirst ? "waiting in the kernel" : "not yet submitted");
    std::optional<Lazy<LentDatagram>> doomed;
    bool suspended = false;
    test::onWorker(pool, [&] {
      doomed.emplace(receiveCounted(receiver));
      suspended = test::startSuspended(pool, *doomed);
      if (!submittedFirst) doomed.reset();  // before the loop's next turn
    });
    ASSERT_TRUE(suspended);
    if (submittedFirst) {
      test::quiesce(pool);  // now the receive waits in the kernel
      test::onWorker(pool, [&] { doomed.reset(); });
    }
    EXPECT_EQ(Counted::alive(), 0);
    ASSERT_TRUE(sendRaw(sender, "next", receiver.localAddress()));
    const LentDatagram got = syncAwait(receiveCounted(receiver).via(&pool));
    EXPECT_EQ(text(got.data), "next");
  }
  EXPECT_EQ(lentBuffers(pool), 0u);
}

TEST_P(UdpSocketReceiveTest, CloseEndsAWaitingReceiveAndAClosedSocketFailsWithEbadf) {
  test::Watchdog watchdog(60s, "Close");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  test::Outcome<LentDatagram> waiting;
  test::startOn(pool, receiveCounted(receiver), waiting);
  test::quiesce(pool);
  receiver.close();  // from the test thread, while the receive waits
  waiting.wait();
  EXPECT_EQ(errnoOf([&] { waiting.result.value(); }), ECANCELED) << waiting.what();
  EXPECT_EQ(errnoOf([&] { (void)syncAwait(receiveOnce(receiver).via(&pool)); }), EBADF);
  EXPECT_EQ(
      errnoOf([&] {
        (void)syncAwait(
            [&]() -> Lazy<LentDatagram> { co_return co_await receiver.receive(); }().via(&pool));
      }),
      EBADF);
  EXPECT_EQ(lentBuffers(pool), 0u);
}

TEST_P(UdpSocketReceiveTest, FibersReceiveDatagramsInLentBuffers) {
  test::Watchdog watchdog(60s, "Fibers");
  ThreadPool pool(options(2));
  UdpSocket server = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = server.localAddress();
  constexpr int kMessages = 100;
  FiberFuture<int> echo = spawnFiber(&pool, [&] {
    for (int i = 0; i < kMessages; ++i) {
      LentDatagram d = await(server.receiveFrom());
      await(server.sendTo(d.data, d.from));
    }
    return kMessages;
  });
  FiberFuture<std::string> client = spawnFiber(&pool, [&] {
    UdpSocket socket = UdpSocket::bind(SocketAddress::loopbackV4(0));
    socket.connect(address);
    std::string back;
    for (int i = 0; i < kMessages; ++i) {
      const std::string message = "message " + std::to_string(i) + ";";
      await(socket.send(message));
      const LentDatagram d = await(socket.receive());
      if (d.from != address) throw std::runtime_error("a reply from elsewhere");
      back += text(d.data);
    }
    return back;
  });
  const std::string back = syncAwait(std::move(client));
  EXPECT_EQ(syncAwait(std::move(echo)), kMessages);
  std::string expected;
  for (int i = 0; i < kMessages; ++i) expected += "message " + std::to_string(i) + ";";
  EXPECT_EQ(back, expected);
}

// ---------------------------------------------------------------------------------------
// Races: cancellation and withTimeout against datagrams arriving at random moments.

void spin(unsigned rounds) {
  std::atomic<unsigned> counter{0};
  while (counter.fetch_add(1, std::memory_order_relaxed) < rounds) {
  }
}

enum class Race { kCancellationSource, kTimeout };

// A counted receive that announces its start; returns the datagram's sequence number.
Lazy<std::uint32_t> receiveAnnounced(UdpSocket& socket, std::atomic<int>& starts) {
  Counted inFrame;
  starts.fetch_add(1);
  starts.notify_all();
  const LentDatagram d = co_await socket.receiveFrom();
  std::uint32_t sequence;
  if (d.data.size() != sizeof sequence || d.truncated) throw std::length_error("a wrong datagram");
  std::memcpy(&sequence, d.data.data(), sizeof sequence);
  co_return sequence;
}

// Each iteration starts a receive; a peer thread sends the next datagram (3 iterations in
// 4) and the cancellation is requested (or the timeout runs out), each after a spin of
// random length from the receive's start; 1 cancellation in 8 comes before the receive is
// even started. Each receive ends exactly once, with a datagram or with the cancellation's
// exception; a cancelled one leaves its datagram for the next. At the end, the datagrams
// returned plus those still queued are exactly those sent, in order, once each.
void raceReceivesAgainstASender(ThreadPool& pool, Race race) {
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress to = receiver.localAddress();
  const int iterations = test::reducedIoScale() ? 500 : 2000;
  std::atomic<int> receiveStarted{-1};  // the iteration whose receive has started; -2: stop
  std::uint32_t sent = 0;
  std::thread peer([&] {
    std::minstd_rand random(7);
    int last = -1;
    for (;;) {
      receiveStarted.wait(last);
      last = receiveStarted.load();
      if (last == -2) break;
      if (random() % 4 == 0) continue;
      spin(random() % 20000);
      ASSERT_TRUE(sendRaw(sender, std::as_bytes(std::span<const std::uint32_t>(&sent, 1)), to));
      ++sent;
    }
  });

  std::vector<std::uint32_t> received;
  std::minstd_rand random(11);
  std::atomic<int> starts{0};
  int cancelled = 0;
  int wrongEnds = 0;
  std::string firstWrongEnd;
  for (int i = 0; i < iterations; ++i) {
    test::Outcome<std::uint32_t> outcome;
    CancellationSource source;
    const unsigned when = random() % 8;
    if (race == Race::kCancellationSource && when == 0) source.requestCancellation();
    const int before = starts.load();
    if (race == Race::kCancellationSource) {
      test::startOn(pool, withCancellation(source.token(), receiveAnnounced(receiver, starts)),
                    outcome);
    } else {
      test::startOn(pool,
                    withTimeout(receiveAnnounced(receiver, starts),
                                std::chrono::microseconds(when == 0 ? 0 : random() % (when * 25))),
                    outcome);
    }
    starts.wait(before);  // the receive has started on the worker
    receiveStarted.store(i);
    receiveStarted.notify_all();
    if (race == Race::kCancellationSource && when != 0) {
      spin(random() % (when * 3000));
      source.requestCancellation();
    }
    outcome.wait();
    EXPECT_EQ(outcome.ends.load(), 1);
    if (outcome.result.hasValue()) {
      received.push_back(outcome.result.value());
    } else if (race == Race::kTimeout ? outcome.endedWith<TimeoutError>()
                                      : outcome.endedWith<OperationCancelled>()) {
      ++cancelled;
    } else {
      ++wrongEnds;
      if (firstWrongEnd.empty()) firstWrongEnd = outcome.what();
    }
  }
  receiveStarted.store(-2);
  receiveStarted.notify_all();
  peer.join();
  const std::size_t byWeft = received.size();
  // What is still queued, read without weft: poll() waits up to 10 s for each (a bound
  // for a datagram that was lost, not a timing claim: a queued one is there at once).
  while (received.size() < sent) {
    pollfd readable{receiver.nativeHandle(), POLLIN, 0};
    if (::poll(&readable, 1, 10'000) != 1) break;
    std::uint32_t sequence = 0;
    const ssize_t n = ::recv(receiver.nativeHandle(), &sequence, sizeof sequence, MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(sizeof sequence)) break;
    received.push_back(sequence);
  }
  EXPECT_EQ(wrongEnds, 0) << "first: " << firstWrongEnd;
  ASSERT_EQ(received.size(), sent) << "datagrams lost or duplicated";
  for (std::uint32_t k = 0; k < sent; ++k) {
    ASSERT_EQ(received[k], k) << "datagram " << k << " of " << sent;
  }
  std::uint32_t extra = 0;
  EXPECT_LT(::recv(receiver.nativeHandle(), &extra, sizeof extra, MSG_DONTWAIT), 0)
      << "a datagram nobody sent";
  std::printf("  %d receives: %zu returned a datagram, %d ended by the cancellation; %u sent\n",
              iterations, byWeft, cancelled, sent);
  // Every buffer a receive was lent came back (those of cancelled receives too).
  EXPECT_EQ(lentBuffers(pool), 0u) << "lent buffers were not given back";
}

TEST_P(UdpSocketReceiveTest, ReceivesCancelledFromAnotherThreadLoseNoDatagramAndNoBuffer) {
  test::Watchdog watchdog(120s, "ReceivesCancelled");
  ThreadPool pool(options(1));
  raceReceivesAgainstASender(pool, Race::kCancellationSource);
}

TEST_P(UdpSocketReceiveTest, ReceivesWithTinyTimeoutsLoseNoDatagramAndNoBuffer) {
  test::Watchdog watchdog(120s, "ReceivesWithTinyTimeouts");
  ThreadPool pool(options(1));
  raceReceivesAgainstASender(pool, Race::kTimeout);
}

INSTANTIATE_TEST_SUITE_P(Backends, UdpSocketReceiveTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
