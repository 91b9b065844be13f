// Tests of examples/echo_server.h in virtual time, with weft::testing: the server's own
// code (echo, serveEcho), unchanged, behind in-memory connections with faults, each
// scenario under 1000 seeds (each seed: another interleaving, other latencies, bandwidths
// and pieces). A 30-second idle timeout and a 5-second shutdown grace take microseconds;
// the times asserted are exact. A failure names the seed that replays it:
//   WEFT_TEST_SEED=412 examples/echo_server_test
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <system_error>

#include <weft/coro/cancellation.h>
#include <weft/coro/collect.h>
#include <weft/coro/sleep.h>
#include <weft/executors/executor_clock.h>
#include <weft/testing/faults.h>
#include <weft/testing/for_each_seed.h>
#include <weft/testing/gtest.h>
#include <weft/testing/network.h>
#include <weft/testing/simulation.h>

#include "echo_server.h"

namespace {

using namespace std::chrono_literals;
using weft::Lazy;
using weft::TcpStream;
using weft::testing::Faults;
using weft::testing::Network;
using weft::testing::NetworkEvent;
using weft::testing::Simulation;
using Duration = Simulation::Duration;

constexpr int kSeeds = 1000;

Duration now() { return weft::ExecutorClock::now() - Simulation::kStartTime; }

// What the client read until the end of its stream or an error (0: the end).
struct Reply {
  std::string bytes;
  int error = 0;
  Duration endedAt{};
};

Lazy<Reply> readToEnd(TcpStream& stream) {
  Reply reply;
  char buffer[4096];
  try {
    while (const std::size_t n = co_await stream.read(buffer, sizeof buffer)) {
      reply.bytes.append(buffer, n);
    }
  } catch (const std::system_error& e) {
    reply.error = e.code().value();
  }
  reply.endedAt = now();
  co_return reply;
}

Lazy<std::string> readExactly(TcpStream& stream, std::size_t size) {
  std::string text(size, '\0');
  co_await stream.readExactly(text);
  co_return text;
}

// How the handler ended: 0 when it returned, else the errno it threw.
Lazy<int> handlerOutcome(weft::TcpListener& listener, std::chrono::milliseconds idle,
                         Duration* endedAt) {
  int error = 0;
  try {
    co_await echo(co_await listener.accept(), idle);
  } catch (const std::system_error& e) {
    error = e.code().value();
  }
  *endedAt = now();
  co_return error;
}

// When the last byte reached the server (the Network's log).
Duration lastDeliveryToServer(const Network& net) {
  Duration last{};
  for (const NetworkEvent& e : net.events()) {
    if (e.kind == NetworkEvent::Kind::kDeliver && e.toServer) last = e.time;
  }
  return last;
}

// The end of every scenario: every connection closed, nothing left running or armed.
void expectNothingLeft(Simulation& sim, Network& net) {
  sim.run(net.allClosed());
  sim.runUntilBlocked();
  EXPECT_EQ(net.openConnections(), 0u);
  EXPECT_EQ(sim.runnableCount(), 0u);
  EXPECT_EQ(sim.timerCount(), 0u);
}

TEST(EchoServerTest, AnIdleClientIsClosedAtExactlyTheIdleTimeout) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    Network net(sim);
    weft::TcpListener listener = net.listen("echo");
    const Faults faults = Faults::random(sim);  // latency, bandwidth, pieces of any size
    SCOPED_TRACE(faults.toString());
    Duration handlerEnded{};
    int handlerError = 0;
    Reply reply;
    sim.run([&]() -> Lazy<void> {
      auto client = [&]() -> Lazy<void> {
        TcpStream stream = co_await net.connect("echo", faults);
        co_await stream.writeAll("hello");
        reply = co_await readToEnd(stream);  // then nothing: the client is idle
      };
      auto [outcome, done] =
          co_await weft::collectAll(handlerOutcome(listener, 30s, &handlerEnded), client());
      handlerError = outcome.value();
      done.value();  // rethrows what the client threw
    }());
    // The handler's last receive began when the last byte arrived; 30 s later it failed.
    EXPECT_EQ(handlerError, ETIMEDOUT);
    EXPECT_EQ(handlerEnded, lastDeliveryToServer(net) + 30s);
    EXPECT_EQ(reply.bytes, "hello");
    EXPECT_EQ(reply.error, 0);  // the server closed: the end of the stream...
    EXPECT_EQ(reply.endedAt, handlerEnded + faults.toClient.latency);  // ...one latency on
    expectNothingLeft(sim, net);
  });
}

TEST(EchoServerTest, ASlowClientGetsTheWholeResponse) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    Network net(sim);
    weft::TcpListener listener = net.listen("echo");
    Faults faults;
    faults.toServer.latency = std::chrono::milliseconds(sim.randomBelow(100));
    faults.toClient.latency = std::chrono::milliseconds(sim.randomBelow(100));
    faults.toClient.bytesPerSecond = 2000;  // a slow client: 2 kB/s...
    faults.toClient.maxChunk = 1024;        // ...in pieces of 1 to 1024 bytes
    faults.toClient.randomChunks = true;
    std::string request(8000, '\0');
    for (char& c : request) c = static_cast<char>('a' + sim.randomBelow(26));
    Reply reply;
    Duration handlerEnded{};
    int handlerError = 0;
    sim.run([&]() -> Lazy<void> {
      auto client = [&]() -> Lazy<void> {
        TcpStream stream = co_await net.connect("echo", faults);
        // Writes and reads at once: the echo comes back while the request goes out (a
        // client that wrote it all first could wait on full buffers forever).
        auto send = [&]() -> Lazy<void> {
          co_await stream.writeAll(request);
          stream.shutdownWrite();
        };
        auto [sent, received] = co_await weft::collectAll(send(), readToEnd(stream));
        sent.value();
        reply = received.value();
      };
      auto [outcome, done] =
          co_await weft::collectAll(handlerOutcome(listener, 30s, &handlerEnded), client());
      handlerError = outcome.value();
      done.value();  // rethrows what the client threw
    }());
    EXPECT_EQ(handlerError, 0);  // the server waited for room, and finished
    EXPECT_EQ(reply.error, 0);
    EXPECT_EQ(reply.bytes, request);  // whole, in order
    EXPECT_GE(reply.endedAt, 4s);     // 8000 bytes at 2000 B/s
    expectNothingLeft(sim, net);
  });
}

TEST(EchoServerTest, AResetInTheMiddleOfARequestEndsTheHandlerWithTheError) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    Network net(sim);
    weft::TcpListener listener = net.listen("echo");
    Faults faults = Faults::random(sim);
    // Long after the first half of the request has arrived and been echoed (100 ms of
    // latency at most, 50 bytes at 10 kB/s or more), before the second half is sent.
    faults.resetAt = 500ms + std::chrono::milliseconds(sim.randomBelow(500));
    SCOPED_TRACE(faults.toString());
    Duration handlerEnded{};
    int handlerError = 0;
    Reply reply;
    sim.run([&]() -> Lazy<void> {
      auto client = [&]() -> Lazy<void> {
        TcpStream stream = co_await net.connect("echo", faults);
        co_await stream.writeAll(std::string(50, 'x'));  // the first half
        EXPECT_EQ(co_await readExactly(stream, 50), std::string(50, 'x'));
        reply = co_await readToEnd(stream);  // the second half would follow at 2 s
      };
      auto [outcome, done] =
          co_await weft::collectAll(handlerOutcome(listener, 0ms, &handlerEnded), client());
      handlerError = outcome.value();
      done.value();  // rethrows what the client threw
    }());
    EXPECT_EQ(handlerError, ECONNRESET);       // the handler ended with the error...
    EXPECT_EQ(handlerEnded, *faults.resetAt);  // ...at the time of the reset
    EXPECT_EQ(reply.error, ECONNRESET);
    EXPECT_EQ(reply.endedAt, *faults.resetAt);
    expectNothingLeft(sim, net);  // its stream closed, the relay ended: no leak
  });
}

TEST(EchoServerTest, AGracefulStopLetsConnectionsFinishThenCancelsTheRestAtTheDeadline) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    Network net(sim);
    weft::TcpListener listener = net.listen("echo");
    const Faults quick = Faults::random(sim);      // finishes within the grace
    const Faults lingering = Faults::random(sim);  // still open at the deadline
    const EchoOptions options{.idleTimeout = 0ms, .shutdownGrace = 5s};
    constexpr Duration kStop = 1s;
    Duration served{};
    std::string quickGot;
    Reply lingeringGot;
    sim.run([&]() -> Lazy<void> {
      weft::CancellationSource stop;
      auto server = [&]() -> Lazy<void> {
        co_await serveEcho(listener, options, stop.token());
        served = now();
      };
      auto stopper = [&]() -> Lazy<void> {
        co_await weft::sleep(kStop);
        stop.requestCancellation();
      };
      auto quickClient = [&]() -> Lazy<void> {
        TcpStream stream = co_await net.connect("echo", quick);
        co_await stream.writeAll("before ");
        quickGot += co_await readExactly(stream, 7);
        co_await weft::sleep(3s);  // after the stop, within the grace
        co_await stream.writeAll("after");
        quickGot += co_await readExactly(stream, 5);
      };  // closed: its handler ends
      auto lingeringClient = [&]() -> Lazy<void> {
        TcpStream stream = co_await net.connect("echo", lingering);
        co_await stream.writeAll("idle");
        EXPECT_EQ(co_await readExactly(stream, 4), "idle");
        lingeringGot = co_await readToEnd(stream);  // waits past the deadline
      };
      auto [serverDone, stopperDone, quickDone, lingeringDone] =
          co_await weft::collectAll(server(), stopper(), quickClient(), lingeringClient());
      serverDone.value();  // each rethrows what its task threw
      stopperDone.value();
      quickDone.value();
      lingeringDone.value();
    }());
    EXPECT_EQ(quickGot, "before after");               // finished in time, served to the end
    EXPECT_EQ(served, kStop + options.shutdownGrace);  // exactly at the deadline
    EXPECT_EQ(lingeringGot.error, 0);  // cancelled: its stream closed at the deadline
    EXPECT_EQ(lingeringGot.endedAt, kStop + options.shutdownGrace + lingering.toClient.latency);
    expectNothingLeft(sim, net);
  });
}

}  // namespace
