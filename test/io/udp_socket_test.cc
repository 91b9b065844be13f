// UdpSocket over both event loops (every test runs once per backend): IPv4, IPv6 and
// Unix datagram sockets, from Lazys and from fibers.
#include "weft/io/udp_socket.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/io_backends.h"
#include "test/support/io_support.h"
#include "test/support/thread_states.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

std::span<const std::byte> bytes(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

std::string text(std::span<const std::byte> data) {
  return std::string(reinterpret_cast<const char*>(data.data()), data.size());
}

// A directory under TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "weft-udp-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::system_category(), "mkdtemp");
    }
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const char* name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

class UdpSocketTest : public ::testing::TestWithParam<IoBackendChoice> {
 protected:
  // io_uring is skipped where the kernel (or the build) does not offer it.
  void SetUp() override { WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam()); }
  ThreadPool& pool(std::size_t threads = 1) {
    if (!pool_) pool_.emplace(ThreadPoolOptions{threads, "udp-test", GetParam()});
    return *pool_;
  }
  std::optional<ThreadPool> pool_;
};

// Echoes `count` datagrams back to their senders.
Lazy<void> echo(UdpSocket& socket, int count) {
  std::array<std::byte, 2048> buffer;
  for (int i = 0; i < count; ++i) {
    const Datagram d = co_await socket.receiveFrom(buffer);
    EXPECT_FALSE(d.truncated);
    co_await socket.sendTo(std::span<const std::byte>(buffer.data(), d.size), d.from);
  }
}

// Sends `count` messages and checks each echo; returns the address replies came from.
Lazy<SocketAddress> roundTrips(UdpSocket& socket, SocketAddress server, int count) {
  std::array<std::byte, 2048> buffer;
  SocketAddress from;
  for (int i = 0; i < count; ++i) {
    const std::string message = "datagram " + std::to_string(i);
    EXPECT_EQ(co_await socket.sendTo(bytes(message), server), message.size());
    const Datagram d = co_await socket.receiveFrom(buffer);
    EXPECT_EQ(text(std::span<const std::byte>(buffer.data(), d.size)), message);
    EXPECT_FALSE(d.truncated);
    from = d.from;
  }
  co_return from;
}

TEST_P(UdpSocketTest, EchoesDatagramsOverIpv4FromLazys) {
  ThreadPool& p = pool();
  UdpSocket server = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = server.localAddress();
  EXPECT_NE(address.port(), 0);
  UdpSocket client = UdpSocket::open(AF_INET);
  auto [served, from] =
      syncAwait(collectAll(echo(server, 100), roundTrips(client, address, 100)).via(&p));
  served.value();
  EXPECT_EQ(from.value(), address);
}

TEST_P(UdpSocketTest, EchoesDatagramsFromFibers) {
  ThreadPool& p = pool(2);
  UdpSocket server = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = server.localAddress();
  auto serverFiber = spawnFiber(&p, [&] {
    std::array<std::byte, 2048> buffer;
    for (int i = 0; i < 50; ++i) {
      const Datagram d = await(server.receiveFrom(buffer));
      await(server.sendTo(std::span<const std::byte>(buffer.data(), d.size), d.from));
    }
  });
  auto clientFiber = spawnFiber(&p, [&] {
    UdpSocket client = UdpSocket::open(AF_INET);
    client.connect(address);
    EXPECT_EQ(client.peerAddress(), address);
    std::array<std::byte, 2048> buffer;
    int matched = 0;
    for (int i = 0; i < 50; ++i) {
      const std::string message = "fiber " + std::to_string(i);
      EXPECT_EQ(await(client.send(bytes(message))), message.size());
      const Datagram d = await(client.receive(buffer));
      EXPECT_EQ(d.from, address);
      if (text(std::span<const std::byte>(buffer.data(), d.size)) == message) ++matched;
    }
    return matched;
  });
  EXPECT_EQ(syncAwait(std::move(clientFiber)), 50);
  syncAwait(std::move(serverFiber));
}

// 1280 datagrams of varying sizes, each with its own contents, sent in windows of 64
// (acknowledged, so that the receive buffer never overflows and drops one).
TEST_P(UdpSocketTest, DeliversManyDatagramsWithTheirContents) {
  ThreadPool& p = pool(2);
  constexpr int kWindows = 20;
  constexpr int kWindow = 64;
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::open(AF_INET);
  sender.connect(receiver.localAddress());
  auto contents = [](int index) {
    std::vector<std::byte> data(static_cast<std::size_t>(1 + (index * 37) % 1200));
    for (std::size_t j = 0; j < data.size(); ++j) {
      data[j] = std::byte(static_cast<unsigned char>(index * 31 + j * 7));
    }
    return data;
  };
  auto receive = [&]() -> Lazy<int> {
    std::array<std::byte, 2048> buffer;
    int good = 0;
    for (int w = 0; w < kWindows; ++w) {
      SocketAddress from;
      for (int i = 0; i < kWindow; ++i) {
        const Datagram d = co_await receiver.receiveFrom(buffer);
        const std::vector<std::byte> expected = contents(w * kWindow + i);
        if (!d.truncated && d.size == expected.size() &&
            std::memcmp(buffer.data(), expected.data(), d.size) == 0) {
          ++good;
        }
        from = d.from;
      }
      co_await receiver.sendTo(bytes("ack"), from);
    }
    co_return good;
  };
  auto send = [&]() -> Lazy<void> {
    std::array<std::byte, 16> ack;
    for (int w = 0; w < kWindows; ++w) {
      for (int i = 0; i < kWindow; ++i) {
        const std::vector<std::byte> data = contents(w * kWindow + i);
        EXPECT_EQ(co_await sender.send(data), data.size());
      }
      const Datagram d = co_await sender.receive(ack);
      EXPECT_EQ(text(std::span<const std::byte>(ack.data(), d.size)), "ack");
    }
  };
  auto [good, sent] = syncAwait(collectAll(receive(), send()).via(&p));
  sent.value();
  EXPECT_EQ(good.value(), kWindows * kWindow);
}

TEST_P(UdpSocketTest, ReportsTruncationAndEmptyDatagrams) {
  ThreadPool& p = pool();
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::open(AF_INET);
  const std::string longMessage(100, 'x');
  syncAwait([&]() -> Lazy<void> {
    co_await sender.sendTo(bytes("0123456789abcdef"), receiver.localAddress());
    co_await sender.sendTo(bytes(longMessage), receiver.localAddress());
    co_await sender.sendTo(std::span<const std::byte>(), receiver.localAddress());
    co_await sender.sendTo(bytes("short"), receiver.localAddress());
    std::array<std::byte, 10> small;
    Datagram d = co_await receiver.receiveFrom(small);
    EXPECT_TRUE(d.truncated);
    EXPECT_EQ(d.size, 10u);
    EXPECT_EQ(text(small), "0123456789");
    EXPECT_EQ(d.from, SocketAddress::loopbackV4(sender.localAddress().port()));
    d = co_await receiver.receiveFrom(small);
    EXPECT_TRUE(d.truncated);
    EXPECT_EQ(d.size, 10u);
    d = co_await receiver.receiveFrom(small);  // the empty datagram
    EXPECT_FALSE(d.truncated);
    EXPECT_EQ(d.size, 0u);
    d = co_await receiver.receiveFrom(small);
    EXPECT_FALSE(d.truncated);
    EXPECT_EQ(text(std::span<const std::byte>(small.data(), d.size)), "short");
  }().via(&p));
}

TEST_P(UdpSocketTest, EchoesDatagramsOverIpv6) {
  ThreadPool& p = pool();
  std::optional<UdpSocket> server;
  try {
    server.emplace(UdpSocket::bind(SocketAddress::loopbackV6(0)));
  } catch (const std::system_error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  const SocketAddress address = server->localAddress();
  EXPECT_TRUE(address.isIpv6());
  UdpSocket client = UdpSocket::open(AF_INET6);
  auto [served, from] =
      syncAwait(collectAll(echo(*server, 20), roundTrips(client, address, 20)).via(&p));
  served.value();
  EXPECT_EQ(from.value(), address);
}

TEST_P(UdpSocketTest, EchoesOverUnixDatagramSocketsAtAPathAndAnAbstractName) {
  ThreadPool& p = pool();
  TempDir dir;
  for (const SocketAddress& address :
       {SocketAddress::unixPath(dir.file("server.sock")),
        SocketAddress::unixPath("@weft-udp-test-" + std::to_string(::getpid()))}) {
    SCOPED_TRACE(address.toString());
    UdpSocket server = UdpSocket::bind(address);
    EXPECT_EQ(server.localAddress(), address);
    UdpSocket client = UdpSocket::open(AF_UNIX);
    // open() autobinds the client to an abstract name, so the server can reply.
    EXPECT_EQ(client.localAddress().host().substr(0, 1), "@");
    auto [served, from] =
        syncAwait(collectAll(echo(server, 20), roundTrips(client, address, 20)).via(&p));
    served.value();
    EXPECT_EQ(from.value(), address);
  }
}

TEST_P(UdpSocketTest, CancelsAPendingReceiveFromAnotherThread) {
  ThreadPool& p = pool();
  UdpSocket socket = UdpSocket::bind(SocketAddress::loopbackV4(0));
  CancellationSource source;
  std::atomic<bool> started{false};
  auto receive = [&]() -> Lazy<void> {
    std::array<std::byte, 64> buffer;
    started = true;
    co_await socket.receiveFrom(buffer);
    ADD_FAILURE() << "nothing was sent";
  };
  // Hand-shake: once the receive has started and the pool's worker is asleep, the
  // receive is in flight (the loop hands queued operations to the kernel before it
  // sleeps), so the cancellation ends a pending receive.
  std::thread canceller([&] {
    while (!started) std::this_thread::yield();
    EXPECT_TRUE(test::waitUntilIdle(p));
    source.requestCancellation();
  });
  EXPECT_THROW(syncAwait(withCancellation(source.token(), receive()).via(&p)), OperationCancelled);
  canceller.join();
  // The socket still works afterwards.
  UdpSocket sender = UdpSocket::open(AF_INET);
  syncAwait([&]() -> Lazy<void> {
    co_await sender.sendTo(bytes("after"), socket.localAddress());
    std::array<std::byte, 64> buffer;
    const Datagram d = co_await socket.receiveFrom(buffer);
    EXPECT_EQ(text(std::span<const std::byte>(buffer.data(), d.size)), "after");
  }().via(&p));
}

// Several receives in flight on one socket: each datagram goes to exactly one of them.
TEST_P(UdpSocketTest, ServesSeveralReceivesInFlight) {
  ThreadPool& p = pool(2);
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::open(AF_INET);
  auto receiveOne = [&]() -> Lazy<std::string> {
    std::array<std::byte, 64> buffer;
    const Datagram d = co_await receiver.receiveFrom(buffer);
    co_return text(std::span<const std::byte>(buffer.data(), d.size));
  };
  auto sendAll = [&]() -> Lazy<void> {
    for (int i = 0; i < 4; ++i) {
      co_await sender.sendTo(bytes("datagram " + std::to_string(i)), receiver.localAddress());
    }
  };
  auto [a, b, c, d, sent] =
      syncAwait(collectAll(receiveOne(), receiveOne(), receiveOne(), receiveOne(), sendAll())
                    .via(&p));
  sent.value();
  std::vector<std::string> received{a.value(), b.value(), c.value(), d.value()};
  std::sort(received.begin(), received.end());
  EXPECT_EQ(received, (std::vector<std::string>{"datagram 0", "datagram 1", "datagram 2",
                                                "datagram 3"}));
}

TEST_P(UdpSocketTest, AppliesTheBindOptions) {
  UdpSocketOptions options;
  options.reusePort = true;
  options.broadcast = true;
  UdpSocket first = UdpSocket::bind(SocketAddress::loopbackV4(0), options);
  // SO_REUSEPORT on both: a second socket binds the same port.
  UdpSocket second = UdpSocket::bind(first.localAddress(), options);
  EXPECT_EQ(second.localAddress(), first.localAddress());
  int broadcast = 0;
  socklen_t length = sizeof broadcast;
  ASSERT_EQ(::getsockopt(first.nativeHandle(), SOL_SOCKET, SO_BROADCAST, &broadcast, &length), 0);
  EXPECT_EQ(broadcast, 1);
  // Without the option the port is taken.
  EXPECT_THROW(UdpSocket::bind(first.localAddress()), std::system_error);
}

void expectBadDescriptor(const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EBADF) << e.what();
  }
}

TEST_P(UdpSocketTest, OperationsOnAClosedSocketFailWithEbadf) {
  ThreadPool& p = pool();
  UdpSocket socket = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = socket.localAddress();
  socket.close();
  EXPECT_FALSE(socket.isOpen());
  std::array<std::byte, 16> buffer;
  const std::string x = "x";
  auto awaitOnPool = [&](auto makeAwaitable) {
    syncAwait([&]() -> Lazy<void> { co_await makeAwaitable(); }().via(&p));
  };
  expectBadDescriptor([&] { awaitOnPool([&] { return socket.receiveFrom(buffer); }); });
  expectBadDescriptor([&] { awaitOnPool([&] { return socket.sendTo(bytes(x), address); }); });
  expectBadDescriptor([&] { awaitOnPool([&] { return socket.send(bytes(x)); }); });
  expectBadDescriptor([&] { awaitOnPool([&] { return socket.receive(buffer); }); });
  expectBadDescriptor(
      [&] { syncAwait(spawnFiber(&p, [&] { weft::await(socket.receiveFrom(buffer)); })); });
  expectBadDescriptor([&] { socket.connect(address); });
  expectBadDescriptor([&] { (void)socket.localAddress(); });
}

TEST_P(UdpSocketTest, ErrorsNameTheAddress) {
  UdpSocket first = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = first.localAddress();
  try {
    UdpSocket::bind(address);
    ADD_FAILURE() << "the second bind succeeded";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EADDRINUSE);
    EXPECT_NE(std::string(e.what()).find(address.toString()), std::string::npos) << e.what();
  }
  EXPECT_THROW(UdpSocket::bind(SocketAddress()), std::invalid_argument);
  // A connected socket learns of an unreachable port (ICMP) on its next operation.
  ThreadPool& p = pool();
  UdpSocket closedPeer = UdpSocket::bind(SocketAddress::loopbackV4(0));
  const SocketAddress nobody = closedPeer.localAddress();
  closedPeer.close();
  UdpSocket client = UdpSocket::open(AF_INET);
  client.connect(nobody);
  try {
    syncAwait([&]() -> Lazy<void> {
      co_await client.send(bytes("anyone?"));
      std::array<std::byte, 16> buffer;
      co_await client.receive(buffer);
    }().via(&p));
    ADD_FAILURE() << "no error";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ECONNREFUSED) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, UdpSocketTest, test::kIoBackends, test::ioBackendName);


// The tests of empty buffers: a fixture of their own (test::IoBackendTest), both backends.
class UdpSocketEmptyBufferTest : public test::IoBackendTest {};

// A datagram socket has no end of stream, so a receive into an empty buffer keeps its
// meaning: it waits for the next datagram and takes it whole, reporting size 0 and
// `truncated` unless the datagram was empty; its sender is known. An empty buffer sent is
// an empty datagram. Nothing else is lost: the next receive gets the next datagram.
TEST_P(UdpSocketEmptyBufferTest, AReceiveIntoAnEmptyBufferTakesTheNextDatagramWhole) {
  ThreadPool pool(options(1, "udp-test"));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::open(AF_INET);
  const SocketAddress to = receiver.localAddress();
  syncAwait([&]() -> Lazy<void> {
    co_await sender.sendTo(bytes("abc"), to);
    EXPECT_EQ(co_await sender.sendTo(std::span<const std::byte>(), to), 0u);
    co_await sender.sendTo(bytes("next"), to);
    Datagram d = co_await receiver.receiveFrom(std::span<std::byte>());
    EXPECT_EQ(d.size, 0u);
    EXPECT_TRUE(d.truncated);  // "abc" did not fit: never silent
    EXPECT_EQ(d.from, SocketAddress::loopbackV4(sender.localAddress().port()));
    d = co_await receiver.receiveFrom(std::span<std::byte>());
    EXPECT_EQ(d.size, 0u);
    EXPECT_FALSE(d.truncated);  // the empty datagram
    std::array<std::byte, 16> buffer;
    d = co_await receiver.receiveFrom(buffer);
    EXPECT_EQ(text(std::span<const std::byte>(buffer.data(), d.size)), "next");
    EXPECT_FALSE(d.truncated);

    // Connected sockets: send() of an empty buffer sends an empty datagram, receive()
    // into an empty buffer takes one.
    sender.connect(to);
    receiver.connect(sender.localAddress());
    EXPECT_EQ(co_await sender.send(std::span<const std::byte>()), 0u);
    co_await sender.send(bytes("xy"));
    d = co_await receiver.receive(std::span<std::byte>());
    EXPECT_EQ(d.size, 0u);
    EXPECT_FALSE(d.truncated);
    d = co_await receiver.receive(std::span<std::byte>());
    EXPECT_EQ(d.size, 0u);
    EXPECT_TRUE(d.truncated);
  }().via(&pool));
}

INSTANTIATE_TEST_SUITE_P(Backends, UdpSocketEmptyBufferTest, test::kIoBackends,
                         test::ioBackendName);

}  // namespace
}  // namespace weft
