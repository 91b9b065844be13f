// TcpStream and TcpListener over both event loops (every test runs once per backend).
#include "io/tcp_stream.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

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

INSTANTIATE_TEST_SUITE_P(Backends, TcpStreamTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
