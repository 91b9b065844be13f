#include "weft/io/resolve.h"

#include <gtest/gtest.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/blocking.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

// Only loopback names and numeric addresses: no test depends on a network or a DNS server.

namespace weft {
namespace {

using namespace std::chrono_literals;
using Family = ResolveOptions::Family;

// True if this machine can bind a socket to ::1.
bool haveIpv6Loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return bound;
}

bool contains(const std::vector<SocketAddress>& addresses, std::string_view text) {
  return std::find(addresses.begin(), addresses.end(), SocketAddress::parse(text)) !=
         addresses.end();
}

TEST(ResolveTest, LocalhostIsLoopback) {
  const std::vector<SocketAddress> addresses = syncAwait(resolve("localhost", "80"));
  ASSERT_FALSE(addresses.empty());
  for (const SocketAddress& a : addresses) {
    EXPECT_TRUE(a.isLoopback()) << a.toString();
    EXPECT_EQ(a.port(), 80) << a.toString();
  }
  EXPECT_TRUE(contains(addresses, "127.0.0.1:80") || contains(addresses, "[::1]:80"));
}

TEST(ResolveTest, LocalhostAsIpv4) {
  const auto addresses = syncAwait(resolve("localhost", "8080", {.family = Family::kIpv4}));
  ASSERT_FALSE(addresses.empty());
  for (const SocketAddress& a : addresses) EXPECT_TRUE(a.isIpv4()) << a.toString();
  EXPECT_TRUE(contains(addresses, "127.0.0.1:8080"));
}

TEST(ResolveTest, NumericIpv4) {
  const auto addresses = syncAwait(resolve("127.0.0.1", "443"));
  ASSERT_EQ(addresses.size(), 1u);
  EXPECT_EQ(addresses[0].toString(), "127.0.0.1:443");
}

TEST(ResolveTest, NumericIpv6) {
  if (!haveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback here";
  const auto addresses = syncAwait(resolve("::1", "443"));
  ASSERT_EQ(addresses.size(), 1u);
  EXPECT_TRUE(addresses[0].isIpv6());
  EXPECT_EQ(addresses[0].toString(), "[::1]:443");
}

TEST(ResolveTest, NumericHostsDoNotUseThePool) {
  BlockingPool pool(1, 10s, "closed");
  pool.shutdown();  // a lookup on it would throw ExecutorShutDown
  const auto addresses = syncAwait(resolve("127.0.0.1", "7", {.pool = &pool}));
  ASSERT_EQ(addresses.size(), 1u);
  EXPECT_EQ(addresses[0].toString(), "127.0.0.1:7");
  // A name does.
  EXPECT_THROW(syncAwait(resolve("localhost", "7", {.pool = &pool})), ExecutorShutDown);
}

TEST(ResolveTest, ServiceNamesResolve) {
  // "echo" is port 7 in every /etc/services; skipped where there is none.
  try {
    const auto addresses = syncAwait(resolve("127.0.0.1", "echo"));
    ASSERT_EQ(addresses.size(), 1u);
    EXPECT_EQ(addresses[0].port(), 7);
  } catch (const std::system_error& e) {
    GTEST_SKIP() << "no service database: " << e.what();
  }
}

TEST(ResolveTest, PassiveEmptyHostIsTheWildcard) {
  const auto addresses =
      syncAwait(resolve("", "9000", {.family = Family::kIpv4, .passive = true}));
  ASSERT_EQ(addresses.size(), 1u);
  EXPECT_EQ(addresses[0].toString(), "0.0.0.0:9000");
}

TEST(ResolveTest, EmptyHostIsLoopback) {
  const auto addresses = syncAwait(resolve("", "9000", {.family = Family::kIpv4}));
  ASSERT_EQ(addresses.size(), 1u);
  EXPECT_EQ(addresses[0].toString(), "127.0.0.1:9000");
}

TEST(ResolveTest, UnknownServiceIsAGetaddrinfoError) {
  try {
    syncAwait(resolve("localhost", "no-such-service-weft"));
    FAIL() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_STREQ(e.code().category().name(), "getaddrinfo");
    EXPECT_TRUE(e.code() == std::error_code(EAI_SERVICE, getaddrinfoCategory()) ||
                e.code() == std::error_code(EAI_NONAME, getaddrinfoCategory()))
        << e.code().value();
    const std::string what = e.what();
    EXPECT_NE(what.find("\"localhost\""), std::string::npos) << what;
    EXPECT_NE(what.find("\"no-such-service-weft\""), std::string::npos) << what;
    EXPECT_NE(what.find(gai_strerror(e.code().value())), std::string::npos) << what;
  }
}

TEST(ResolveTest, NumericHostOfAnotherFamilyIsAGetaddrinfoError) {
  // Fails without consulting any resolver (a name that does not exist would need one).
  try {
    syncAwait(resolve("::1", "80", {.family = Family::kIpv4}));
    FAIL() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(&e.code().category(), &getaddrinfoCategory());
    EXPECT_NE(std::string(e.what()).find("\"::1\""), std::string::npos) << e.what();
  }
}

TEST(ResolveTest, CategoryNamesItselfAndUsesGaiStrerror) {
  EXPECT_STREQ(getaddrinfoCategory().name(), "getaddrinfo");
  EXPECT_EQ(getaddrinfoCategory().message(EAI_NONAME), gai_strerror(EAI_NONAME));
}

TEST(ResolveTest, FromATaskResumesOnItsPool) {
  ThreadPool pool(2, "resolve");
  auto body = [&]() -> Lazy<bool> {
    const auto addresses = co_await resolve("localhost", "80");
    co_return !addresses.empty() && ThreadPool::current() == &pool;
  };
  EXPECT_TRUE(syncAwait(body().via(&pool)));
}

TEST(ResolveTest, FromAFiber) {
  ThreadPool pool(2, "resolve");
  auto future = spawnFiber(&pool, [] {
    return weft::await(resolve("localhost", "80", {.family = Family::kIpv4}));
  });
  const auto addresses = syncAwait(std::move(future));
  EXPECT_TRUE(contains(addresses, "127.0.0.1:80"));
}

TEST(ResolveTest, CancelledWhileQueuedThrowsOperationCancelled) {
  BlockingPool pool(1, 10s, "resolve-cancel");
  std::latch started(1), gate(1);
  std::atomic<int> done{0};
  auto occupy = [&]() -> Lazy<void> {
    co_await blocking(pool, [&] {
      started.count_down();
      gate.wait();
    });
  };
  occupy().start([&](Try<void>) { ++done; });
  started.wait();
  CancellationSource source;
  Try<std::vector<SocketAddress>> outcome;
  bool finished = false;
  withCancellation(source.token(), resolve("localhost", "80", {.pool = &pool}))
      .start([&](Try<std::vector<SocketAddress>> result) {
        outcome = std::move(result);
        finished = true;
      });
  EXPECT_EQ(pool.queuedCount(), 1u);
  EXPECT_FALSE(finished);
  source.requestCancellation();
  EXPECT_TRUE(finished);
  EXPECT_EQ(pool.queuedCount(), 0u);
  EXPECT_THROW(outcome.value(), OperationCancelled);
  gate.count_down();
  while (done.load() == 0) std::this_thread::yield();
}

TEST(ResolveTest, AlreadyCancelledThrowsEvenForNumericHosts) {
  CancellationSource source;
  source.requestCancellation();
  EXPECT_THROW(syncAwait(withCancellation(source.token(), resolve("127.0.0.1", "80"))),
               OperationCancelled);
}

}  // namespace
}  // namespace weft
