// Unix domain stream sockets through TcpListener and TcpStream (which create AF_UNIX
// sockets for a SocketAddress::unixPath), over both event loops, at a filesystem path
// and at an abstract name, from Lazys and from fibers.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/io_backends.h"

namespace weft {
namespace {

// A directory under TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "weft-unix-XXXXXX").string();
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

class UnixStreamTest : public ::testing::TestWithParam<IoBackendChoice> {
 protected:
  // io_uring is skipped where the kernel (or the build) does not offer it.
  void SetUp() override { WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam()); }
  ThreadPool& pool(std::size_t threads = 1) {
    if (!pool_) pool_.emplace(ThreadPoolOptions{threads, "unix-test", GetParam()});
    return *pool_;
  }
  // A filesystem path in a fresh directory, and an abstract name unique to this process.
  std::vector<SocketAddress> addresses(const char* name) {
    return {SocketAddress::unixPath(dir_.file(name)),
            SocketAddress::unixPath("@weft-unix-test-" + std::to_string(::getpid()) + "-" + name)};
  }

  TempDir dir_;
  std::optional<ThreadPool> pool_;
};

std::span<std::byte> writable(std::string& text) {
  return std::as_writable_bytes(std::span<char>(text.data(), text.size()));
}

Lazy<void> echoOnce(TcpListener& listener) {
  TcpStream stream = co_await listener.accept();
  // The client never bound a name: its address is the unnamed Unix address.
  EXPECT_TRUE(stream.peerAddress().isUnix());
  EXPECT_EQ(stream.peerAddress().host(), "");
  std::array<std::byte, 4096> buffer;
  for (;;) {
    const std::size_t n = co_await stream.read(buffer);
    if (n == 0) co_return;
    co_await stream.writeAll(std::span<const std::byte>(buffer.data(), n));
  }
}

Lazy<std::string> client(SocketAddress address, int messages) {
  TcpStream stream = co_await TcpStream::connect(address);
  EXPECT_EQ(stream.peerAddress(), address);
  std::string received;
  for (int i = 0; i < messages; ++i) {
    const std::string message = "unix message " + std::to_string(i);
    co_await stream.writeAll(message);
    std::string echo(message.size(), '\0');
    co_await stream.readExactly(writable(echo));
    received += echo;
  }
  stream.shutdownWrite();
  std::array<std::byte, 16> rest;
  EXPECT_EQ(co_await stream.read(rest), 0u);
  co_return received;
}

std::string expected(int messages) {
  std::string all;
  for (int i = 0; i < messages; ++i) all += "unix message " + std::to_string(i);
  return all;
}

TEST_P(UnixStreamTest, EchoesFromLazysAtAPathAndAnAbstractName) {
  ThreadPool& p = pool();
  for (const SocketAddress& address : addresses("lazy.sock")) {
    SCOPED_TRACE(address.toString());
    TcpListener listener = TcpListener::bind(address);
    EXPECT_EQ(listener.localAddress(), address);
    auto [served, received] =
        syncAwait(collectAll(echoOnce(listener), client(address, 100)).via(&p));
    served.value();
    EXPECT_EQ(received.value(), expected(100));
  }
}

TEST_P(UnixStreamTest, EchoesFromFibersAtAPathAndAnAbstractName) {
  ThreadPool& p = pool(2);
  for (const SocketAddress& address : addresses("fiber.sock")) {
    SCOPED_TRACE(address.toString());
    TcpListener listener = TcpListener::bind(address);
    auto server = spawnFiber(&p, [&] {
      TcpStream stream = await(listener.accept());
      std::array<std::byte, 4096> buffer;
      while (const std::size_t n = await(stream.read(buffer))) {
        await(stream.writeAll(std::span<const std::byte>(buffer.data(), n)));
      }
    });
    auto clientFiber = spawnFiber(&p, [&] {
      TcpStream stream = await(TcpStream::connect(address));
      std::string received;
      for (int i = 0; i < 100; ++i) {
        const std::string message = "unix message " + std::to_string(i);
        await(stream.writeAll(message));
        std::string echo(message.size(), '\0');
        await(stream.readExactly(writable(echo)));
        received += echo;
      }
      stream.shutdownWrite();
      return received;
    });
    EXPECT_EQ(syncAwait(std::move(clientFiber)), expected(100));
    syncAwait(std::move(server));
  }
}

// Several connections at once, each with its own bytes (a large transfer on one).
TEST_P(UnixStreamTest, ServesConcurrentConnections) {
  ThreadPool& p = pool(2);
  const SocketAddress address = addresses("many.sock")[0];
  TcpListener listener = TcpListener::bind(address);
  auto big = [](std::size_t size) {
    std::string data(size, '\0');
    for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<char>('a' + (i * 7) % 26);
    return data;
  };
  auto transfer = [&](std::string data) -> Lazy<bool> {
    TcpStream stream = co_await TcpStream::connect(address);
    auto writer = [&]() -> Lazy<void> {
      co_await stream.writeAll(data);
      stream.shutdownWrite();
    };
    auto reader = [&]() -> Lazy<std::string> {
      std::string back(data.size(), '\0');
      co_await stream.readExactly(writable(back));
      co_return back;
    };
    auto [written, back] = co_await collectAll(writer(), reader());
    written.value();
    co_return back.value() == data;
  };
  auto [s1, s2, s3, c1, c2, c3] =
      syncAwait(collectAll(echoOnce(listener), echoOnce(listener), echoOnce(listener),
                           transfer(big(4 << 20)), transfer("short"), transfer(big(100000)))
                    .via(&p));
  s1.value();
  s2.value();
  s3.value();
  EXPECT_TRUE(c1.value());
  EXPECT_TRUE(c2.value());
  EXPECT_TRUE(c3.value());
}

// A listener stays what it is when moved: a Unix one, move-constructed or move-assigned,
// accepts Unix streams (it used to take the moved-to listener for TCP and fail each accept
// setting TCP_NODELAY on the accepted stream, EOPNOTSUPP, closing the connection).
TEST_P(UnixStreamTest, AMovedListenerStillAcceptsUnixStreams) {
  ThreadPool& p = pool();
  const SocketAddress address = addresses("moved.sock")[1];
  TcpListener original = TcpListener::bind(address);
  TcpListener constructed(std::move(original));
  EXPECT_FALSE(original.isOpen());
  auto [served, received] =
      syncAwait(collectAll(echoOnce(constructed), client(address, 3)).via(&p));
  served.value();
  EXPECT_EQ(received.value(), expected(3));
  TcpListener assigned;
  assigned = std::move(constructed);
  auto [servedAgain, receivedAgain] =
      syncAwait(collectAll(echoOnce(assigned), client(address, 3)).via(&p));
  servedAgain.value();
  EXPECT_EQ(receivedAgain.value(), expected(3));
}

TEST_P(UnixStreamTest, ConnectingToNobodyNamesTheAddress) {
  ThreadPool& p = pool();
  const SocketAddress address = addresses("nobody.sock")[0];
  try {
    syncAwait(TcpStream::connect(address).via(&p));
    ADD_FAILURE() << "connected to nobody";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT) << e.what();
    EXPECT_NE(std::string(e.what()).find(address.toString()), std::string::npos) << e.what();
  }
}

TEST_P(UnixStreamTest, TcpOptionsAreRefused) {
  ThreadPool& p = pool();
  const SocketAddress address = addresses("options.sock")[1];
  TcpListener listener = TcpListener::bind(address);
  syncAwait([&]() -> Lazy<void> {
    TcpStream stream = co_await TcpStream::connect(address);
    TcpStream accepted = co_await listener.accept();
    try {
      stream.setNoDelay(true);
      ADD_FAILURE() << "TCP_NODELAY set on a Unix stream";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EOPNOTSUPP) << e.what();
    }
  }().via(&p));
}

INSTANTIATE_TEST_SUITE_P(Backends, UnixStreamTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
