#include "weft/testing/detail/virtual_io_loop.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/executor_clock.h"
#include "weft/io/tcp_stream.h"
#include "weft/testing/deadlock.h"
#include "weft/testing/for_each_seed.h"
#include "weft/testing/gtest.h"
#include "weft/testing/simulation.h"

// I/O inside a Simulation: TcpStreams over an AF_UNIX socketpair (both ends in the
// simulation), on its epoll loop, with time limits kept in virtual time.

namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using weft::Lazy;
using weft::TcpStream;
using weft::testing::Simulation;

Simulation::Duration elapsed() { return weft::ExecutorClock::now() - Simulation::kStartTime; }

// Two connected streams, each owning one end of a Unix stream socketpair.
std::pair<TcpStream, TcpStream> streamPair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
    throw std::system_error(errno, std::generic_category(), "socketpair");
  }
  return {TcpStream(fds[0]), TcpStream(fds[1])};
}

int errorOf(const std::system_error& e) { return e.code().value(); }

TEST(VirtualIoLoopTest, AReadTimeLimitExpiresInVirtualTime) {
  Simulation sim(1);
  auto streams = streamPair();
  TcpStream& server = streams.first;
  // streams.second: the peer, which never writes.
  int error = 0;
  sim.run([&]() -> Lazy<void> {
    server.setReadTimeout(10s);
    std::array<std::byte, 16> buffer{};
    try {
      co_await server.read(buffer);
    } catch (const std::system_error& e) {
      error = errorOf(e);
    }
  }());
  EXPECT_EQ(error, ETIMEDOUT);
  EXPECT_EQ(sim.elapsed(), 10s);
  EXPECT_EQ(sim.timerCount(), 0u);
}

TEST(VirtualIoLoopTest, DataBeforeTheLimitIsReadAndTheLimitDisarmed) {
  Simulation sim(2);
  auto streams = streamPair();
  TcpStream& server = streams.first;
  TcpStream& client = streams.second;
  std::string got;
  sim.run([&]() -> Lazy<void> {
    auto reader = [&]() -> Lazy<void> {
      server.setReadTimeout(10s);
      std::array<char, 16> buffer{};
      const std::size_t n = co_await server.read(buffer.data(), buffer.size());
      got.assign(buffer.data(), n);
      EXPECT_EQ(elapsed(), 3s);
    };
    auto writer = [&]() -> Lazy<void> {
      co_await weft::sleep(3s);  // the reader's read is in flight, durably blocked
      co_await client.writeAll("ping");
    };
    co_await weft::collectAll(reader(), writer());
  }());
  EXPECT_EQ(got, "ping");
  EXPECT_EQ(sim.elapsed(), 3s);
  EXPECT_EQ(sim.timerCount(), 0u);
}

TEST(VirtualIoLoopTest, AWriteTimeLimitExpiresWhenThePeerStopsReading) {
  Simulation sim(3);
  auto streams = streamPair();
  // streams.first: the peer, which never reads.
  TcpStream& client = streams.second;
  int error = 0;
  std::size_t written = 0;
  sim.run([&]() -> Lazy<void> {
    client.setWriteTimeout(2s);
    const std::vector<std::byte> chunk(64 * 1024);
    try {
      for (;;) written += co_await client.write(chunk);  // until the socket buffers fill
    } catch (const std::system_error& e) {
      error = errorOf(e);
    }
  }());
  EXPECT_EQ(error, ETIMEDOUT);
  EXPECT_GT(written, 0u);
  EXPECT_EQ(sim.elapsed(), 2s);
}

TEST(VirtualIoLoopTest, TimeJumpsOverIoThatIsDurablyBlocked) {
  Simulation sim(4);
  auto streams = streamPair();
  TcpStream& server = streams.first;
  // streams.second: the peer, which never writes.
  std::array<std::byte, 16> buffer{};
  EXPECT_THROW(sim.run(weft::withTimeout(
                   [&]() -> Lazy<std::size_t> { co_return co_await server.read(buffer); }(), 5s)),
               weft::TimeoutError);
  EXPECT_EQ(sim.elapsed(), 5s);
}

TEST(VirtualIoLoopTest, IoThatNothingWillCompleteIsADeadlock) {
  Simulation sim(5);
  auto streams = streamPair();
  TcpStream& server = streams.first;
  // streams.second: the peer, which never writes.
  std::array<std::byte, 16> buffer{};
  try {
    sim.run([&]() -> Lazy<void> { co_await server.read(buffer); }());
    ADD_FAILURE() << "no Deadlock";
  } catch (const weft::testing::Deadlock& deadlock) {
    EXPECT_THAT(deadlock.what(), HasSubstr("I/O in flight: yes"));
  }
}

// A readExactly that reads part of what it waits for, inside a poll of the loop, makes
// room for a writeAll waiting on its peer, but that edge comes only in the next
// epoll_wait: the poll completed nothing, yet the I/O is not durably blocked. (Before the
// loop reported such progress, time jumped over it: to the 10 s time limit here.)
TEST(VirtualIoLoopTest, AWholeTransferThatMovesBytesIsProgressNotABlock) {
  Simulation sim(7);
  auto streams = streamPair();
  TcpStream& reader = streams.first;
  TcpStream& writer = streams.second;
  const int small = 4096;  // a few small writes fill it (each costs some hundred bytes)
  ASSERT_EQ(::setsockopt(writer.nativeHandle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  std::string got(60, '\0');
  sim.run(weft::withTimeout(
      [&]() -> Lazy<void> {
        auto read = [&]() -> Lazy<void> {
          co_await reader.readExactly(got);  // waits from the start, on the loop
        };
        auto write = [&]() -> Lazy<void> {
          co_await weft::sleep(1s);
          for (int i = 0; i < 20; ++i) co_await writer.writeAll("xyz");  // waits for room
        };
        co_await weft::collectAll(read(), write());
      }(),
      10s));
  std::string expected;
  for (int i = 0; i < 20; ++i) expected += "xyz";
  EXPECT_EQ(got, expected);
  EXPECT_EQ(sim.elapsed(), 1s);
}

TEST(VirtualIoLoopTest, ShutdownEndsIoInFlight) {
  Simulation sim(6);
  auto streams = streamPair();
  TcpStream& server = streams.first;
  // streams.second: the peer, which never writes.
  bool shutDown = false;
  auto reader = [&]() -> Lazy<void> {
    std::array<std::byte, 16> buffer{};
    try {
      co_await server.read(buffer);
    } catch (const weft::ExecutorShutDown&) {
      shutDown = true;
    }
  };
  // Without the simulation's token (a TaskGroup's or a spawn()'s would cancel it first).
  reader().via(&sim).start([](weft::Try<void>&&) {});
  sim.runUntilBlocked();
  sim.shutdown();
  EXPECT_TRUE(shutDown);
}

// A read's time limit and the byte it waits for, due at the same virtual instant: which
// comes first is the seed's choice. TcpStreamTest.ReadTimeoutNeverLosesOrDuplicatesData
// races them in real time, with a writer jittered around the limit; here every read
// (1 ms limit, started at a whole millisecond) meets a byte written at exactly its limit,
// and each seed replays its outcome. Whatever each read's fate (the byte, or ETIMEDOUT
// and the byte for the next read), every byte arrives once and in order, at the
// virtual time it was written; among the seeds the race goes both ways.
TEST(VirtualIoLoopTest, AReadTimeLimitRacingItsDataAtTheSameInstantLosesNothing) {
  constexpr int kBytes = 20;
  int fewestTimeouts = kBytes + 1;
  int mostTimeouts = -1;
  weft::testing::forEachSeed(200, [&](Simulation& sim) {
    auto streams = streamPair();
    TcpStream& reader = streams.first;
    TcpStream& writer = streams.second;
    std::string received;
    std::vector<Simulation::Duration> arrivals;  // when each byte was returned
    int timeouts = 0;
    sim.run([&]() -> Lazy<void> {
      auto read = [&]() -> Lazy<void> {
        reader.setReadTimeout(1ms);
        std::array<char, 64> buffer{};
        for (;;) {
          try {
            const std::size_t n = co_await reader.read(buffer.data(), buffer.size());
            if (n == 0) co_return;
            received.append(buffer.data(), n);
            arrivals.insert(arrivals.end(), n, elapsed());
          } catch (const std::system_error& e) {
            EXPECT_EQ(errorOf(e), ETIMEDOUT);
            ++timeouts;
          }
        }
      };
      auto write = [&]() -> Lazy<void> {
        for (int i = 0; i < kBytes; ++i) {
          co_await weft::sleep(1ms);  // due with the limit of the read under way
          const char byte = static_cast<char>('a' + i);
          co_await writer.writeAll(std::string_view(&byte, 1));
        }
        writer.shutdownWrite();
      };
      co_await weft::collectAll(read(), write());
    }());
    EXPECT_EQ(received, std::string("abcdefghijklmnopqrst"));
    ASSERT_EQ(arrivals.size(), static_cast<std::size_t>(kBytes));
    for (int i = 0; i < kBytes; ++i) EXPECT_EQ(arrivals[i], (i + 1) * 1ms) << "byte " << i;
    EXPECT_EQ(sim.elapsed(), kBytes * 1ms);
    fewestTimeouts = std::min(fewestTimeouts, timeouts);
    mostTimeouts = std::max(mostTimeouts, timeouts);
  });
  // Some reads lost the race to their limit and some won it, in different seeds.
  EXPECT_LT(fewestTimeouts, mostTimeouts);
}

}  // namespace
