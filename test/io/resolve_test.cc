#include "weft/io/resolve.h"

#include <gtest/gtest.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
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


// Resolves and returns what() of the std::invalid_argument it throws ("" if none).
std::string rejection(const std::string& host, const std::string& service) {
  try {
    const std::vector<SocketAddress> addresses = syncAwait(resolve(host, service));
    ADD_FAILURE() << "resolve accepted service of " << service.size() << " bytes: port "
                  << (addresses.empty() ? -1 : addresses[0].port());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// As SocketAddress::parse does, a numeric service is a port in 0..65535: getaddrinfo
// itself keeps the low 16 bits ("65536" is port 0, "65617" port 81), for numeric and
// named hosts alike.
TEST(ResolveTest, OutOfRangePortsAreRejected) {
  for (const char* service : {"65536", "65617", "70000", "4294967297", "18446744073709551616",
                              "99999999999999999999999999"}) {
    for (const char* host : {"127.0.0.1", "localhost", ""}) {
      const std::string what = rejection(host, service);
      EXPECT_NE(what.find(std::string("\"") + service + "\""), std::string::npos)
          << host << " " << service << ": " << what;
      EXPECT_NE(what.find("out of range (0..65535)"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(syncAwait(resolve("127.0.0.1", "65535"))[0].port(), 65535);
  EXPECT_EQ(syncAwait(resolve("127.0.0.1", "0"))[0].port(), 0);
  EXPECT_EQ(syncAwait(resolve("127.0.0.1", "00080"))[0].port(), 80);
}

// What getaddrinfo reads as a number but SocketAddress::parse does not ("-1" would be
// port 65535): only decimal digits make a port.
TEST(ResolveTest, SignedOrSpacedPortsAreRejected) {
  for (const char* service : {"-1", "-0", "+80", " 80", "\t80", "\n80"}) {
    const std::string what = rejection("127.0.0.1", service);
    EXPECT_NE(what.find("not a decimal number"), std::string::npos) << what;
  }
  // A service name that starts with a digit is still a name (not a port): getaddrinfo's
  // error, not std::invalid_argument.
  EXPECT_THROW(syncAwait(resolve("127.0.0.1", "80x-no-such-service")), std::system_error);
}

// getaddrinfo takes C strings: a NUL would cut the host or the service short, and
// "127.0.0.1\0.evil.example" would resolve to 127.0.0.1.
TEST(ResolveTest, NulBytesInHostOrServiceAreRejected) {
  using namespace std::string_literals;
  const std::pair<std::string, std::string> inputs[] = {
      {"127.0.0.1\0.evil.example"s, "80"},
      {"localhost\0"s, "80"},
      {"\0"s, "80"},
      {"127.0.0.1", "80\0"s + "1"},
      {"localhost", "http\0"s + "evil"},
      {"", "\0"s},
  };
  for (const auto& [host, service] : inputs) {
    const std::string what = rejection(host, service);
    EXPECT_NE(what.find("NUL byte"), std::string::npos) << what;
    // The input is named, its NUL shown as \0 (what() itself is a C string).
    EXPECT_NE(what.find("\\0"), std::string::npos) << what;
    EXPECT_EQ(std::string(what.c_str()).size(), what.size());
  }
}

}  // namespace
}  // namespace weft
