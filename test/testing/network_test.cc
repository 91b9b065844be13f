#include "weft/testing/network.h"

#include <dirent.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/executors/executor_clock.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/testing/faults.h"
#include "weft/testing/for_each_seed.h"
#include "weft/testing/gtest.h"
#include "weft/testing/simulation.h"

// weft::testing::Network: every fault, in both directions, at exact virtual times;
// determinism (the same seed gives the same pieces at the same times, another seed other
// pieces); no descriptor, task or timer left behind.

namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using weft::Lazy;
using weft::TcpListener;
using weft::TcpStream;
using weft::testing::Faults;
using weft::testing::Network;
using weft::testing::NetworkEvent;
using weft::testing::Simulation;
using Kind = NetworkEvent::Kind;

Simulation::Duration elapsed() { return weft::ExecutorClock::now() - Simulation::kStartTime; }

// The process's open descriptors (entries of /proc/self/fd, less the one listing them).
std::size_t openDescriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) throw std::system_error(errno, std::generic_category(), "/proc/self/fd");
  std::size_t count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;
}

int errorOf(const std::system_error& e) { return e.code().value(); }

std::string pattern(std::size_t size) {
  std::string text(size, '\0');
  for (std::size_t i = 0; i < size; ++i) text[i] = static_cast<char>('a' + (i * 7 + i / 26) % 26);
  return text;
}

// What a side read until the end of its stream (or an error): the bytes, the size and
// virtual time of each read, and the error that ended it (0: the end of the stream).
struct Received {
  std::string bytes;
  std::vector<std::size_t> sizes;
  std::vector<Simulation::Duration> times;
  int error = 0;
  Simulation::Duration endedAt{};
};

Lazy<Received> readToEnd(TcpStream& stream, std::size_t bufferSize = 4096) {
  Received got;
  std::vector<char> buffer(bufferSize);
  try {
    for (;;) {
      const std::size_t n = co_await stream.read(buffer.data(), buffer.size());
      if (n == 0) break;
      got.bytes.append(buffer.data(), n);
      got.sizes.push_back(n);
      got.times.push_back(elapsed());
    }
  } catch (const std::system_error& e) {
    got.error = errorOf(e);
  }
  got.endedAt = elapsed();
  co_return got;
}

// The server of most tests: accepts one connection and echoes it until its end, then
// closes it.
Lazy<void> echoOne(TcpListener& listener) {
  TcpStream stream = co_await listener.accept();
  std::array<char, 4096> buffer{};
  for (;;) {
    const std::size_t n = co_await stream.read(buffer.data(), buffer.size());
    if (n == 0) break;
    co_await stream.writeAll(std::string_view(buffer.data(), n));
  }
}

// The kDeliver events of one direction: (time, bytes).
std::vector<std::pair<Simulation::Duration, std::size_t>> deliveries(const Network& net,
                                                                     bool toServer) {
  std::vector<std::pair<Simulation::Duration, std::size_t>> out;
  for (const NetworkEvent& e : net.events()) {
    if (e.kind == Kind::kDeliver && e.toServer == toServer) out.emplace_back(e.time, e.bytes);
  }
  return out;
}

// Nothing is left: no relay, nothing runnable, no timer armed.
void expectQuiet(Simulation& sim, Network& net) {
  sim.run(net.allClosed());
  sim.runUntilBlocked();
  EXPECT_EQ(net.openConnections(), 0u);
  EXPECT_EQ(sim.runnableCount(), 0u);
  EXPECT_EQ(sim.timerCount(), 0u);
}

TEST(NetworkTest, CarriesEveryByteBothWaysUnderRandomFaults) {
  const std::string message = pattern(1000);
  weft::testing::forEachSeed(50, [&](Simulation& sim) {
    Network net(sim);
    TcpListener listener = net.listen("echo");
    const Faults faults = Faults::random(sim);
    SCOPED_TRACE(faults.toString());
    Received got;
    sim.run([&]() -> Lazy<void> {
      auto client = [&]() -> Lazy<void> {
        TcpStream stream = co_await net.connect("echo", faults);
        auto write = [&]() -> Lazy<void> {
          co_await stream.writeAll(message);
          stream.shutdownWrite();
        };
        auto [written, read] = co_await weft::collectAll(write(), readToEnd(stream));
        written.value();
        got = std::move(read).value();
      };
      co_await weft::collectAll(echoOne(listener), client());
    }());
    EXPECT_EQ(got.error, 0);
    EXPECT_EQ(got.bytes, message);
    expectQuiet(sim, net);
  });
}

TEST(NetworkTest, LatencyDelaysEachDirectionByItsOwn) {
  Simulation sim(1);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Faults faults;
  faults.toServer.latency = 30ms;
  faults.toClient.latency = 50ms;
  Received atServer;
  Received atClient;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      std::array<char, 16> buffer{};
      const std::size_t n = co_await stream.read(buffer.data(), buffer.size());
      atServer.bytes.assign(buffer.data(), n);
      atServer.times.push_back(elapsed());
      co_await weft::sleep(5ms);
      co_await stream.writeAll("pong");
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", faults);
      co_await stream.writeAll("ping");
      atClient = co_await readToEnd(stream);
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atServer.bytes, "ping");
  EXPECT_THAT(atServer.times, ElementsAre(30ms));
  EXPECT_EQ(atClient.bytes, "pong");
  EXPECT_THAT(atClient.times, ElementsAre(30ms + 5ms + 50ms));
  EXPECT_EQ(atClient.endedAt, 30ms + 5ms + 50ms);  // the server closed after writing
  expectQuiet(sim, net);
}

TEST(NetworkTest, BandwidthPacesTheSenderAndEachPieceArrivesWhenItsLastByteWould) {
  Simulation sim(2);
  Network net(sim);
  TcpListener listener = net.listen("sink");
  Faults faults;
  faults.toServer.bytesPerSecond = 1000;
  faults.toServer.maxChunk = 100;
  faults.toClient.bytesPerSecond = 10'000;
  faults.toClient.maxChunk = 1000;
  const std::string big = pattern(30'000);
  Received atServer;
  Received atClient;
  Simulation::Duration bigWritten{};
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      std::array<char, 1000> request{};
      co_await stream.readExactly(request);
      atServer.times.push_back(elapsed());
      co_await stream.writeAll(big);  // waits for room: the link takes 10 kB/s
      bigWritten = elapsed();
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("sink", faults);
      co_await stream.writeAll(pattern(1000));
      atClient = co_await readToEnd(stream, 65536);
    };
    co_await weft::collectAll(server(), client());
  }());
  // 1000 bytes at 1000 B/s, in pieces of 100: one every 0.1 s.
  std::vector<std::pair<Simulation::Duration, std::size_t>> expected;
  for (int i = 1; i <= 10; ++i) expected.emplace_back(i * 100ms, 100);
  EXPECT_EQ(deliveries(net, true), expected);
  EXPECT_THAT(atServer.times, ElementsAre(1s));
  // The response arrives whole, paced: pieces of at most 1000 bytes, the last 3 s after
  // the first byte left (30 kB at 10 kB/s).
  EXPECT_EQ(atClient.bytes, big);
  EXPECT_EQ(atClient.error, 0);
  EXPECT_EQ(atClient.times.back(), 1s + 3s);
  for (const std::size_t size : atClient.sizes) EXPECT_LE(size, 1000u);
  // The server's writes waited for the link: only the socket buffers (a few KiB) were
  // written ahead of it (without the pacing, the write would end at 1 s).
  EXPECT_GE(bigWritten, 1s + 1s);
  expectQuiet(sim, net);
}

// The server's reads, one per piece (each piece arrives alone: the bandwidth spaces them).
std::vector<std::size_t> pieceSizes(std::uint64_t seed, std::vector<NetworkEvent>* events) {
  Simulation sim(seed);
  Network net(sim);
  TcpListener listener = net.listen("pieces");
  Faults faults;
  faults.toServer.randomChunks = true;
  faults.toServer.maxChunk = 16;
  faults.toServer.bytesPerSecond = 1000;
  faults.toClient = faults.toServer;
  Received atServer;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      atServer = co_await readToEnd(stream, 64);
      co_await stream.writeAll(atServer.bytes);
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("pieces", faults);
      co_await stream.writeAll(pattern(200));
      stream.shutdownWrite();
      const Received back = co_await readToEnd(stream);
      EXPECT_EQ(back.bytes, pattern(200));
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atServer.bytes, pattern(200));
  std::size_t total = 0;
  for (const std::size_t size : atServer.sizes) {
    EXPECT_GE(size, 1u);
    EXPECT_LE(size, 16u);
    total += size;
  }
  EXPECT_EQ(total, 200u);
  expectQuiet(sim, net);
  if (events != nullptr) *events = net.events();
  return atServer.sizes;
}

TEST(NetworkTest, PartialTransfersHaveSizesFromTheSeedAndReplayExactly) {
  std::vector<NetworkEvent> first;
  std::vector<NetworkEvent> again;
  std::vector<NetworkEvent> other;
  const std::vector<std::size_t> sizes = pieceSizes(5, &first);
  EXPECT_EQ(pieceSizes(5, &again), sizes);
  EXPECT_EQ(again, first);  // the same pieces, delivered at the same virtual times
  EXPECT_NE(pieceSizes(6, &other), sizes);
  EXPECT_NE(other, first);
  // Not all of one size: partial reads and writes of many sizes.
  EXPECT_GT(std::set<std::size_t>(sizes.begin(), sizes.end()).size(), 4u);
}

TEST(NetworkTest, RandomFaultsReplayTheSameEventsForTheSameSeed) {
  const auto run = [](std::uint64_t seed) {
    Simulation sim(seed);
    Network net(sim);
    TcpListener listener = net.listen("echo");
    Faults faults = Faults::random(sim);
    faults.toServer.randomChunks = true;
    faults.toServer.maxChunk = 64;
    sim.run([&]() -> Lazy<void> {
      auto client = [&]() -> Lazy<void> {
        TcpStream stream = co_await net.connect("echo", faults);
        co_await stream.writeAll(pattern(1500));
        stream.shutdownWrite();
        EXPECT_EQ((co_await readToEnd(stream)).bytes, pattern(1500));
      };
      co_await weft::collectAll(echoOne(listener), client());
    }());
    expectQuiet(sim, net);
    return std::make_pair(net.events(), sim.elapsed());
  };
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    SCOPED_TRACE(seed);
    EXPECT_EQ(run(seed), run(seed));
  }
  EXPECT_NE(run(1).first, run(2).first);
}

TEST(NetworkTest, ResetAfterBytesResetsBothSidesAfterWhatWasDelivered) {
  Simulation sim(3);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Faults faults;
  faults.toServer.resetAfter = 5;
  faults.toServer.latency = 1s;
  Received atServer;
  Received atClient;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      atServer = co_await readToEnd(stream);
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", faults);
      co_await stream.writeAll("0123456789");
      atClient = co_await readToEnd(stream);
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atServer.bytes, "01234");
  EXPECT_EQ(atServer.error, ECONNRESET);
  EXPECT_EQ(atServer.endedAt, 1s);
  EXPECT_EQ(atClient.bytes, "");
  EXPECT_EQ(atClient.error, ECONNRESET);
  EXPECT_EQ(atClient.endedAt, 1s);
  expectQuiet(sim, net);
}

TEST(NetworkTest, ResetAtResetsAnIdleConnectionAtThatTime) {
  Simulation sim(4);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Faults faults;
  faults.resetAt = 2s;
  Received atServer;
  Received atClient;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      co_await stream.writeAll("hello");
      atServer = co_await readToEnd(stream);
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", faults);
      atClient = co_await readToEnd(stream);
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atServer.error, ECONNRESET);
  EXPECT_EQ(atServer.endedAt, 2s);
  EXPECT_EQ(atClient.bytes, "hello");  // delivered before the reset: still read
  EXPECT_EQ(atClient.error, ECONNRESET);
  EXPECT_EQ(atClient.endedAt, 2s);
  expectQuiet(sim, net);
}

TEST(NetworkTest, AResetBeforeTheServerAcceptsReachesItWhenItDoes) {
  Simulation sim(5);
  Network net(sim);
  TcpListener listener = net.listen("slow");
  Faults faults;
  faults.resetAt = 1s;
  Received atServer;
  Received atClient;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      co_await weft::sleep(3s);
      TcpStream stream = co_await listener.accept();
      atServer = co_await readToEnd(stream);
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("slow", faults);
      atClient = co_await readToEnd(stream);
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atClient.error, ECONNRESET);
  EXPECT_EQ(atClient.endedAt, 1s);
  EXPECT_EQ(atServer.error, ECONNRESET);
  EXPECT_EQ(atServer.endedAt, 3s);
  expectQuiet(sim, net);
}

TEST(NetworkTest, ShutdownAfterBytesEndsOneDirectionOnly) {
  Simulation sim(6);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Faults faults;
  faults.toServer.shutdownAfter = 4;
  Received atServer;
  Received atClient;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      atServer = co_await readToEnd(stream);
      co_await stream.writeAll("got " + atServer.bytes);  // its own direction still works
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", faults);
      co_await stream.writeAll("hello world");
      co_await weft::sleep(1s);
      co_await stream.writeAll("more, dropped");  // the client does not know
      stream.shutdownWrite();
      atClient = co_await readToEnd(stream);
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atServer.bytes, "hell");
  EXPECT_EQ(atServer.error, 0);
  EXPECT_EQ(atServer.endedAt, 0s);
  EXPECT_EQ(atClient.bytes, "got hell");
  EXPECT_EQ(atClient.error, 0);
  expectQuiet(sim, net);
}

TEST(NetworkTest, ShutdownAfterBytesTowardTheClient) {
  Simulation sim(16);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Faults faults;
  faults.toClient.shutdownAfter = 5;
  faults.toClient.latency = 1s;
  Received atClient;
  Simulation::Duration serverDone{};
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      co_await stream.writeAll("hello world");
      co_await weft::sleep(2s);
      co_await stream.writeAll("more");  // dropped, and no error: the server does not know
      serverDone = elapsed();
      (void)co_await readToEnd(stream);  // until the client closes
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", faults);
      atClient = co_await readToEnd(stream);
      co_await weft::sleep(5s);
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atClient.bytes, "hello");
  EXPECT_EQ(atClient.error, 0);
  EXPECT_EQ(atClient.endedAt, 1s);
  EXPECT_EQ(serverDone, 2s);
  expectQuiet(sim, net);
}

TEST(NetworkTest, AHalfCloseReachesThePeerAfterItsBytesInBothDirections) {
  Simulation sim(7);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Faults faults;
  faults.toServer.latency = 10ms;
  faults.toClient.latency = 20ms;
  Received atServer;
  Received atClient;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      atServer = co_await readToEnd(stream);  // until the client's half-close
      co_await stream.writeAll("reply");
      stream.shutdownWrite();
      co_await weft::sleep(1s);  // the stream stays open, ended both ways
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", faults);
      co_await stream.writeAll("request");
      stream.shutdownWrite();
      atClient = co_await readToEnd(stream);
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atServer.bytes, "request");
  EXPECT_EQ(atServer.endedAt, 10ms);
  EXPECT_EQ(atClient.bytes, "reply");
  EXPECT_EQ(atClient.error, 0);
  EXPECT_EQ(atClient.endedAt, 10ms + 20ms);  // the server's end, before it closed
  expectQuiet(sim, net);
}

TEST(NetworkTest, AStalledReceiverMakesTheWritersTimeLimitExpireInVirtualTime) {
  Simulation sim(8);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Faults faults;
  faults.toClient.stallAt = 5s;  // the client stops reading at 5 s, for good
  Received atClient;
  int error = 0;
  std::size_t written = 0;
  Simulation::Duration failedAt{};
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      co_await weft::sleep(1s);
      co_await stream.writeAll("early");
      co_await weft::sleep(5s);
      stream.setWriteTimeout(2s);
      try {
        co_await stream.writeAll(pattern(256 * 1024));
      } catch (const weft::IncompleteTransfer& e) {
        written = e.bytesTransferred();
        try {
          std::rethrow_if_nested(e);
        } catch (const std::system_error& cause) {
          error = errorOf(cause);
        }
      }
      failedAt = elapsed();
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", faults);
      std::array<char, 5> early{};
      co_await stream.readExactly(early);
      atClient.bytes.assign(early.data(), early.size());
      co_await weft::sleep(10s);
    };  // closed: the stall ends, and the server's bytes reach a closed socket
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(error, ETIMEDOUT);
  EXPECT_EQ(failedAt, 6s + 2s);
  EXPECT_GT(written, 0u);
  EXPECT_LT(written, 64u * 1024);  // the send buffers are small: it bites within KiBs
  EXPECT_EQ(atClient.bytes, "early");
  expectQuiet(sim, net);
}

TEST(NetworkTest, AStallThatEndsDeliversEverythingAfterIt) {
  Simulation sim(9);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Faults faults;
  faults.toServer.stallAt = 1s;
  faults.toServer.stallFor = 3s;
  const std::string upload = pattern(100'000);
  Received atServer;
  Simulation::Duration uploaded{};
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      atServer = co_await readToEnd(stream, 65536);
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", faults);
      co_await weft::sleep(2s);
      co_await stream.writeAll(upload);  // waits from 2 s to 4 s, when the stall ends
      uploaded = elapsed();
      stream.shutdownWrite();
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atServer.bytes, upload);
  EXPECT_EQ(atServer.error, 0);
  EXPECT_EQ(atServer.times.front(), 4s);
  EXPECT_EQ(uploaded, 4s);
  expectQuiet(sim, net);
}

TEST(NetworkTest, AClientThatClosesWithUnreadBytesResetsTheServer) {
  Simulation sim(10);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Received atServer;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      co_await stream.writeAll("unread");
      atServer = co_await readToEnd(stream);
    };
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", Faults{});
      co_await weft::sleep(1s);  // "unread" has arrived; it is not read
      stream.close();
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(atServer.error, ECONNRESET);
  EXPECT_EQ(atServer.endedAt, 1s);
  expectQuiet(sim, net);
}

TEST(NetworkTest, AServerThatClosesEndsTheClientsStreamAndALaterWriteIsReset) {
  Simulation sim(11);
  Network net(sim);
  TcpListener listener = net.listen("server");
  Received first;
  Received second;
  sim.run([&]() -> Lazy<void> {
    auto server = [&]() -> Lazy<void> {
      TcpStream stream = co_await listener.accept();
      co_await stream.writeAll("bye");
    };  // closed with nothing unread: an orderly end
    auto client = [&]() -> Lazy<void> {
      TcpStream stream = co_await net.connect("server", Faults{});
      first = co_await readToEnd(stream);
      co_await weft::sleep(1s);
      co_await stream.writeAll("too late");  // reaches a closed socket: reset
      co_await weft::sleep(1s);
      second = co_await readToEnd(stream);
    };
    co_await weft::collectAll(server(), client());
  }());
  EXPECT_EQ(first.bytes, "bye");
  EXPECT_EQ(first.error, 0);
  EXPECT_EQ(second.error, ECONNRESET);
  EXPECT_EQ(second.endedAt, 2s);
  expectQuiet(sim, net);
}

TEST(NetworkTest, LeavesNoDescriptorTaskOrTimerBehind) {
  const std::size_t before = openDescriptors();
  {
    Simulation sim(12);
    Network net(sim);
    TcpListener listener = net.listen("server");
    std::vector<Faults> endings(4);
    endings[1].toServer.resetAfter = 3;
    endings[2].resetAt = 1s;
    endings[3].toClient.stallAt = 0s;
    sim.run([&]() -> Lazy<void> {
      auto server = [&]() -> Lazy<void> {
        for (std::size_t i = 0; i < endings.size(); ++i) {
          TcpStream stream = co_await listener.accept();
          (void)co_await readToEnd(stream);
        }
      };
      auto clients = [&]() -> Lazy<void> {
        for (const Faults& faults : endings) {
          TcpStream stream = co_await net.connect("server", faults);
          co_await stream.writeAll("some bytes");
          stream.shutdownWrite();
          // A stalled receiver would never see the end: that client closes instead.
          if (!faults.toClient.stallAt) (void)co_await readToEnd(stream);
        }
      };
      co_await weft::collectAll(server(), clients());
    }());
    expectQuiet(sim, net);
    EXPECT_EQ(std::count_if(net.events().begin(), net.events().end(),
                            [](const NetworkEvent& e) { return e.kind == Kind::kClose; }),
              4);
  }
  EXPECT_EQ(openDescriptors(), before);
}

TEST(NetworkTest, MisuseIsReported) {
  Simulation sim(13);
  Network net(sim);
  EXPECT_THROW(net.listen(""), std::invalid_argument);
  EXPECT_THROW(net.address("nobody"), std::invalid_argument);
  try {
    sim.run(net.connect("nobody"));
    ADD_FAILURE() << "connected to nothing";
  } catch (const std::system_error& e) {
    EXPECT_EQ(errorOf(e), ECONNREFUSED);
  }
  TcpListener listener = net.listen("server");
  Faults bad;
  bad.toClient.maxChunk = 0;
  EXPECT_THROW(sim.run(net.connect("server", bad)), std::invalid_argument);
  Simulation other(14);
  EXPECT_THROW(other.run(net.connect("server")), std::logic_error);  // not its simulation
  listener.close();
  try {
    sim.run(net.connect("server"));
    ADD_FAILURE() << "connected to a closed listener";
  } catch (const std::system_error& e) {
    EXPECT_EQ(errorOf(e), ECONNREFUSED);
  }
  EXPECT_EQ(net.openConnections(), 0u);
}

}  // namespace
