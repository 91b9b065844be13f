// Many connections at once: every client exchanges many messages with an echo server on
// the same ThreadPool(2), and every byte that comes back is checked against what was sent
// (messages of varying sizes, whose contents derive from the connection's index and the
// message's number, so a byte delivered to the wrong connection, out of order, twice or
// not at all is caught). Runs once per backend, from Lazys (whose server is written in the
// plain style: receive() into lent buffers, writeAll) and from fibers (read() into a
// buffer of their own).
//
// Full size: 1,000 connections x 1,000 messages from Lazys (a million round trips through
// lent buffers: the plain style's proof), 1,000 x 100 from fibers (2,000 fibers alive at
// once: one per client and one per served connection). ASan, TSan and emulated runs scale
// down to 100 x 100 and 100 x 50 (test::reducedIoScale). The file-descriptor limit is raised
// to what the test needs (two per connection, plus the pool's), or the test skips.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <latch>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/io_support.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

struct Scale {
  std::size_t connections;
  std::size_t messages;
};

Scale lazyScale() { return test::reducedIoScale() ? Scale{100, 100} : Scale{1000, 1000}; }
Scale fiberScale() { return test::reducedIoScale() ? Scale{100, 50} : Scale{1000, 100}; }

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t messageKey(std::size_t connection, std::size_t message) {
  return mix((std::uint64_t{connection} << 32) | message);
}

// Mostly small messages (1..600 bytes); one in 50 is 4..32 KiB, which takes several reads
// on each side and several echo writes.
std::size_t messageSize(std::size_t connection, std::size_t message) {
  const std::uint64_t key = messageKey(connection, message);
  if (key % 50 == 0) return 4096 + (key >> 8) % (32768 - 4096);
  return 1 + (key >> 8) % 600;
}

// Byte i of a message: a sequence whose start and step (odd) derive from the connection
// and the message.
std::byte messageByte(std::uint64_t key, std::size_t i) {
  const auto start = static_cast<std::uint8_t>(key >> 24);
  const auto step = static_cast<std::uint8_t>((key >> 40) | 1);
  return static_cast<std::byte>(static_cast<std::uint8_t>(start + i * step));
}

void fillMessage(std::size_t connection, std::size_t message, std::vector<std::byte>& out) {
  const std::uint64_t key = messageKey(connection, message);
  out.resize(messageSize(connection, message));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = messageByte(key, i);
}

// Throws std::runtime_error naming the first byte of `echo` that differs from `sent`.
void checkEcho(std::size_t connection, std::size_t message, const std::vector<std::byte>& sent,
               const std::vector<std::byte>& echo) {
  if (echo == sent) return;
  std::size_t at = 0;
  while (at < sent.size() && echo[at] == sent[at]) ++at;
  throw std::runtime_error("connection " + std::to_string(connection) + ", message " +
                           std::to_string(message) + " (" + std::to_string(sent.size()) +
                           " bytes): the echo differs at byte " + std::to_string(at));
}

// Records the first failure of any connection (detached tasks and fibers report here).
class Failures {
 public:
  void add(const std::string& what) {
    std::lock_guard lock(mutex_);
    if (count_++ == 0) first_ = what;
  }
  void add(const Try<std::size_t>& result) {
    if (!result.hasException()) return;
    try {
      std::rethrow_exception(result.exception());
    } catch (const std::exception& e) {
      add(e.what());
    }
  }
  int count() const {
    std::lock_guard lock(mutex_);
    return count_;
  }
  std::string first() const {
    std::lock_guard lock(mutex_);
    return first_;
  }

 private:
  mutable std::mutex mutex_;
  int count_ = 0;
  std::string first_;
};

class TcpLoadTest : public test::IoBackendTest {
 protected:
  void SetUp() override {
    test::IoBackendTest::SetUp();
    if (IsSkipped()) return;
    // Two descriptors per connection (both ends live in this process), the listener, the
    // loops' (an epoll fd or a ring, and an eventfd, per worker) and gtest's own.
    const rlim_t needed = 2 * lazyScale().connections + 100;
    const rlim_t got = test::raiseFdLimit(needed);
    if (got < needed) {
      GTEST_SKIP() << "RLIMIT_NOFILE cannot be raised to " << needed
                   << " (the hard limit allows " << got << "): raise it (ulimit -Hn) to run "
                   << "the load test";
    }
  }
};

// The server's side of one connection, in the plain style (receive() into buffers the
// loop lends, writeAll of each): echoes until the client ends the stream. Returns how
// many bytes it echoed.
Lazy<std::size_t> echo(TcpStream stream) {
  std::size_t total = 0;
  for (;;) {
    LentBuffer data = co_await stream.receive();
    if (data.empty()) co_return total;
    co_await stream.writeAll(data);
    total += data.size();
  }
}

// Accepts `connections` connections and starts an echo task for each on `pool`.
Lazy<void> acceptAll(TcpListener& listener, std::size_t connections, ThreadPool& pool,
                     Failures& failures, std::atomic<std::size_t>& echoed, std::latch& served) {
  for (std::size_t i = 0; i < connections; ++i) {
    TcpStream stream = co_await listener.accept();
    echo(std::move(stream)).via(&pool).start([&](Try<std::size_t> result) {
      failures.add(result);
      if (result.hasValue()) echoed.fetch_add(result.value());
      served.count_down();
    });
  }
}

// One client: `messages` round trips, each checked byte for byte, then the end of the
// stream both ways. Returns how many bytes it checked.
Lazy<std::size_t> client(SocketAddress address, std::size_t connection, std::size_t messages) {
  TcpStream stream = co_await TcpStream::connect(address);
  std::vector<std::byte> sent;
  std::vector<std::byte> echo;
  std::size_t checked = 0;
  for (std::size_t message = 0; message < messages; ++message) {
    fillMessage(connection, message, sent);
    co_await stream.writeAll(sent);
    echo.assign(sent.size(), std::byte{0});
    co_await stream.readExactly(echo);
    checkEcho(connection, message, sent, echo);
    checked += sent.size();
  }
  stream.shutdownWrite();
  std::byte extra[16];
  if (const std::size_t n = co_await stream.read(extra, sizeof extra); n != 0) {
    throw std::runtime_error("connection " + std::to_string(connection) + ": " +
                             std::to_string(n) + " bytes after the last echo");
  }
  co_return checked;
}

std::size_t expectedBytes(Scale scale) {
  std::size_t total = 0;
  for (std::size_t c = 0; c < scale.connections; ++c) {
    for (std::size_t m = 0; m < scale.messages; ++m) total += messageSize(c, m);
  }
  return total;
}

TEST_P(TcpLoadTest, EveryByteOfEveryConnectionComesBackFromLazys) {
  const Scale scale = lazyScale();
  test::Watchdog watchdog(std::chrono::seconds(280), "TcpLoadTest (Lazys)");
  const int fdsBefore = test::openFdCount();
  Failures failures;
  std::atomic<std::size_t> echoed{0};
  std::latch served(static_cast<std::ptrdiff_t>(scale.connections));
  std::size_t checked = 0;
  {
    ThreadPool pool(options(2, "load"));
    TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
    const SocketAddress address = listener.localAddress();
    std::vector<Lazy<std::size_t>> clients;
    for (std::size_t c = 0; c < scale.connections; ++c) {
      clients.push_back(client(address, c, scale.messages));
    }
    auto [accepted, results] = syncAwait(
        collectAll(acceptAll(listener, scale.connections, pool, failures, echoed, served),
                   collectAllPara(std::move(clients)))
            .via(&pool));
    EXPECT_TRUE(accepted.hasValue());
    ASSERT_TRUE(results.hasValue());
    for (const Try<std::size_t>& result : results.value()) {
      failures.add(result);
      if (result.hasValue()) checked += result.value();
    }
    served.wait();
  }
  EXPECT_EQ(failures.count(), 0) << "first failure: " << failures.first();
  EXPECT_EQ(checked, expectedBytes(scale));
  EXPECT_EQ(echoed.load(), expectedBytes(scale));
  EXPECT_EQ(test::openFdCount(), fdsBefore);
}

// The same with a fiber per client and per served connection.
std::size_t echoInFiber(TcpStream& stream) {
  std::vector<std::byte> buffer(4096);
  std::size_t total = 0;
  for (;;) {
    const std::size_t n = await(stream.read(buffer));
    if (n == 0) return total;
    await(stream.writeAll(std::span<const std::byte>(buffer.data(), n)));
    total += n;
  }
}

std::size_t clientInFiber(const SocketAddress& address, std::size_t connection,
                          std::size_t messages) {
  TcpStream stream = await(TcpStream::connect(address));
  std::vector<std::byte> sent;
  std::vector<std::byte> echo;
  std::size_t checked = 0;
  for (std::size_t message = 0; message < messages; ++message) {
    fillMessage(connection, message, sent);
    await(stream.writeAll(sent));
    echo.assign(sent.size(), std::byte{0});
    await(stream.readExactly(echo));
    checkEcho(connection, message, sent, echo);
    checked += sent.size();
  }
  stream.shutdownWrite();
  std::byte extra[16];
  if (const std::size_t n = await(stream.read(extra, sizeof extra)); n != 0) {
    throw std::runtime_error("connection " + std::to_string(connection) + ": " +
                             std::to_string(n) + " bytes after the last echo");
  }
  return checked;
}

TEST_P(TcpLoadTest, EveryByteOfEveryConnectionComesBackFromFibers) {
  const Scale scale = fiberScale();
  test::Watchdog watchdog(std::chrono::seconds(280), "TcpLoadTest (fibers)");
  const int fdsBefore = test::openFdCount();
  Failures failures;
  std::size_t checked = 0;
  std::size_t echoed = 0;
  {
    ThreadPool pool(options(2, "load-fiber"));
    TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
    const SocketAddress address = listener.localAddress();
    // The acceptor fiber is the only one that touches `servers` until it has finished.
    std::vector<FiberFuture<std::size_t>> servers;
    FiberFuture<void> acceptor = spawnFiber(&pool, [&] {
      for (std::size_t i = 0; i < scale.connections; ++i) {
        servers.push_back(spawnFiber(&pool, [stream = await(listener.accept())]() mutable {
          return echoInFiber(stream);
        }));
      }
    });
    std::vector<FiberFuture<std::size_t>> clients;
    for (std::size_t c = 0; c < scale.connections; ++c) {
      clients.push_back(spawnFiber(&pool, [&address, c, &scale] {
        return clientInFiber(address, c, scale.messages);
      }));
    }
    syncAwait(std::move(acceptor));
    for (auto& future : clients) {
      try {
        checked += syncAwait(std::move(future));
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    }
    ASSERT_EQ(servers.size(), scale.connections);
    for (auto& future : servers) {
      try {
        echoed += syncAwait(std::move(future));
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    }
  }
  EXPECT_EQ(failures.count(), 0) << "first failure: " << failures.first();
  EXPECT_EQ(checked, expectedBytes(scale));
  EXPECT_EQ(echoed, expectedBytes(scale));
  EXPECT_EQ(test::openFdCount(), fdsBefore);
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpLoadTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
