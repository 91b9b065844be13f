// TcpStream and TcpListener over both event loops (every test runs once per backend).
#include "io/tcp_stream.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>
#include <system_error>
#include <thread>
#include <utility>
#include <sys/socket.h>

#include "coro/collect.h"
#include "coro/lazy.h"
#include "coro/sync_await.h"
#include "coro/task.h"
#include "executors/thread_pool.h"
#include "io/tcp_listener.h"
#include "test/support/io_backends.h"

namespace weft {
namespace {

class TcpStreamTest : public ::testing::TestWithParam<IoBackendChoice> {
 protected:
  ThreadPool& pool(std::size_t threads = 1) {
    if (!pool_) pool_.emplace(ThreadPoolOptions{threads, "io-test", GetParam()});
    return *pool_;
  }
  std::optional<ThreadPool> pool_;
};

Lazy<void> echoOnce(TcpListener& listener) {
  TcpStream stream = co_await listener.accept();
  std::array<std::byte, 4096> buffer;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) co_return;
    co_await stream.writeAll(std::span<const std::byte>(buffer.data(), n));
  }
}

TEST_P(TcpStreamTest, EchoesBytesOverLoopback) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  ThreadPool& p = pool();
  EXPECT_EQ(p.ioBackend(), GetParam() == IoBackendChoice::kEpoll ? IoBackend::kEpoll : IoBackend::kIoUring);
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  auto client = [&]() -> Lazy<std::string> {
    TcpStream stream = co_await TcpStream::connect(address);
    std::string received;
    for (int i = 0; i < 100; ++i) {
      const std::string message = "message " + std::to_string(i);
      co_await stream.writeAll(message);
      std::string echo(message.size(), '\0');
      co_await stream.readExactly(std::as_writable_bytes(std::span<char>(echo.data(), echo.size())));
      received += echo;
    }
    stream.shutdownWrite();
    std::array<std::byte, 16> rest;
    EXPECT_EQ(co_await stream.read(rest), 0u);
    co_return received;
  };
  auto [served, received] = syncAwait(collectAll(echoOnce(listener), client()).via(&p));
  served.value();
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += "message " + std::to_string(i);
  EXPECT_EQ(received.value(), expected);
}

// A connected pair on the pool's thread: (client, server).
Lazy<std::pair<TcpStream, TcpStream>> connectedPair(TcpListener& listener) {
  TcpStream client = co_await TcpStream::connect(listener.localAddress());
  TcpStream server = co_await listener.accept();
  co_return std::pair<TcpStream, TcpStream>(std::move(client), std::move(server));
}

TEST_P(TcpStreamTest, ReadTimeoutFailsAWaitingReadAndTheStreamStaysUsable) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  ThreadPool& p = pool();
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  auto body = [&]() -> Lazy<std::string> {
    auto [client, server] = co_await connectedPair(listener);
    server.setReadTimeout(std::chrono::milliseconds(20));
    std::array<char, 16> buffer;
    int timeouts = 0;
    try {
      co_await server.read(buffer.data(), buffer.size());
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), ETIMEDOUT) << e.what();
      ++timeouts;
    }
    EXPECT_EQ(timeouts, 1);
    co_await client.writeAll("after");
    const std::size_t n = co_await server.read(buffer.data(), buffer.size());
    co_return std::string(buffer.data(), n);
  };
  EXPECT_EQ(syncAwait(body().via(&p)), "after");
}

// Reads with a 1 ms limit race a writer that sends at irregular moments around it: every
// byte arrives exactly once and in order, whatever each read's fate (data or ETIMEDOUT).
TEST_P(TcpStreamTest, ReadTimeoutNeverLosesOrDuplicatesData) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  ThreadPool& p = pool();
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  constexpr int kMessages = 300;
  std::pair<TcpStream, TcpStream> streams = syncAwait(connectedPair(listener).via(&p));
  std::thread writer([&] {
    std::uint32_t state = 12345;
    for (int i = 0; i < kMessages; ++i) {
      state = state * 1103515245u + 12345u;
      std::this_thread::sleep_for(std::chrono::microseconds((state >> 16) % 2000));
      const unsigned char byte = static_cast<unsigned char>(i);
      ASSERT_EQ(::send(streams.first.nativeHandle(), &byte, 1, MSG_NOSIGNAL), 1);
    }
    streams.first.shutdownWrite();
  });
  auto reader = [&]() -> Lazy<std::pair<std::string, int>> {
    TcpStream& server = streams.second;
    server.setReadTimeout(std::chrono::milliseconds(1));
    std::string received;
    int timeouts = 0;
    std::array<char, 64> buffer;
    for (;;) {
      try {
        const std::size_t n = co_await server.read(buffer.data(), buffer.size());
        if (n == 0) break;
        received.append(buffer.data(), n);
      } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), ETIMEDOUT);
        ++timeouts;
      }
    }
    co_return std::pair<std::string, int>(std::move(received), timeouts);
  };
  auto [received, timeouts] = syncAwait(reader().via(&p));
  writer.join();
  ASSERT_EQ(received.size(), static_cast<std::size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(static_cast<unsigned char>(received[i]), static_cast<unsigned char>(i)) << i;
  }
  EXPECT_GT(timeouts, 0);  // the limit did fire (the writer pauses up to 2 ms)
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpStreamTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
