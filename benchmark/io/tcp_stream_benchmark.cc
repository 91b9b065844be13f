// TcpStream ping-pong over 127.0.0.1 inside one process: the cost of weft's I/O path per
// round trip (two reads, two writes, four completions), for each event loop.
//
//  - BM_TcpStream_PingPong/<backend>/<connections>: `connections` client Lazys and as
//    many server Lazys on a ThreadPool(1); every client writes a 64-byte message and
//    reads the echo back. Time per round trip (all connections together), wall clock.
//  - BM_TcpStream_PingPongReceive/<backend>/<connections>: the same exchange in the plain
//    style, both ends reading with receive() (buffers the loop lends; on io_uring a
//    multishot receive kept armed per stream) instead of read() into their own buffers.
//  - BM_Baseline_BlockingSockets_PingPong: the same exchange on one connection between
//    two threads using blocking send/recv (no event loop): what the kernel alone costs,
//    plus two thread wake-ups per round trip.
//
// The peers measured against other libraries and languages are in benchmark/io/run.sh;
// this one is for instruction counts (callgrind) and regressions of weft itself:
// WEFT_BENCH_ITERATIONS=n fixes every benchmark's iteration count (no calibration runs), so
// that a run of 2n minus a run of n, over n, is one iteration (20,000 round trips), as for
// coro/lazy_benchmark (under valgrind, only the epoll cases: valgrind does not know
// io_uring).

#include <benchmark/benchmark.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/lent_buffer.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"

namespace {

using weft::Lazy;

constexpr std::size_t kMessage = 64;

void fixIterations(benchmark::internal::Benchmark* b) {
  const char* fixed = std::getenv("WEFT_BENCH_ITERATIONS");
  if (fixed != nullptr && std::atol(fixed) > 0) b->Iterations(std::atol(fixed));
}

void check(bool ok, const char* what) {
  if (!ok) [[unlikely]] {
    std::fprintf(stderr, "%s: wrong result\n", what);
    std::abort();
  }
}

Lazy<void> serve(weft::TcpStream stream) {
  std::array<std::byte, kMessage> buffer;
  while (std::size_t n = co_await stream.read(buffer)) {
    co_await stream.writeAll(std::span<const std::byte>(buffer.data(), n));
  }
}

Lazy<void> client(weft::TcpStream stream, std::int64_t roundTrips) {
  std::array<std::byte, kMessage> message{};
  std::array<std::byte, kMessage> echo;
  for (std::int64_t i = 0; i < roundTrips; ++i) {
    message[0] = static_cast<std::byte>(i);
    co_await stream.writeAll(message);
    co_await stream.readExactly(echo);
    check(echo[0] == message[0], "BM_TcpStream_PingPong");
  }
  stream.shutdownWrite();
}

Lazy<void> pingPong(weft::TcpListener& listener, int connections, std::int64_t roundTrips) {
  std::vector<Lazy<void>> work;
  const weft::SocketAddress address = listener.localAddress();
  for (int i = 0; i < connections; ++i) {
    weft::TcpStream out = co_await weft::TcpStream::connect(address);
    weft::TcpStream in = co_await listener.accept();
    work.push_back(serve(std::move(in)));
    work.push_back(client(std::move(out), roundTrips));
  }
  auto results = co_await weft::collectAll(std::move(work));
  for (auto& r : results) r.value();
}

void BM_TcpStream_PingPong(benchmark::State& state) {
  const auto backend = state.range(0) == 0 ? weft::IoBackendChoice::kIoUring : weft::IoBackendChoice::kEpoll;
  if (backend == weft::IoBackendChoice::kIoUring && !weft::IoLoop::available(weft::IoBackend::kIoUring)) {
    state.SkipWithError("io_uring is not available");
    return;
  }
  const int connections = static_cast<int>(state.range(1));
  weft::ThreadPool pool(weft::ThreadPoolOptions{1, "bench", backend});
  auto listener = weft::TcpListener::bind(weft::SocketAddress::loopbackV4(0));
  const std::int64_t perConnection = 20000 / connections;
  std::int64_t total = 0;
  for (auto _ : state) {
    weft::syncAwait(pingPong(listener, connections, perConnection).via(&pool));
    total += perConnection * connections;
  }
  state.SetItemsProcessed(total);
  state.counters["us/roundtrip"] = benchmark::Counter(
      static_cast<double>(total), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TcpStream_PingPong)
    ->ArgNames({"epoll", "conns"})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({0, 100})
    ->Args({1, 100})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Apply(fixIterations);

Lazy<void> serveReceive(weft::TcpStream stream) {
  for (;;) {  // the plain style
    weft::LentBuffer data = co_await stream.receive();
    if (data.empty()) break;
    co_await stream.writeAll(data);
  }
}

Lazy<void> clientReceive(weft::TcpStream stream, std::int64_t roundTrips) {
  std::array<std::byte, kMessage> message{};
  for (std::int64_t i = 0; i < roundTrips; ++i) {
    message[0] = static_cast<std::byte>(i);
    co_await stream.writeAll(message);
    std::size_t got = 0;
    while (got < kMessage) {
      weft::LentBuffer echo = co_await stream.receive();
      check(!echo.empty() && (got != 0 || echo.data()[0] == message[0]),
            "BM_TcpStream_PingPongReceive");
      got += echo.size();
    }
  }
  stream.shutdownWrite();
}

Lazy<void> pingPongReceive(weft::TcpListener& listener, int connections,
                           std::int64_t roundTrips) {
  std::vector<Lazy<void>> work;
  const weft::SocketAddress address = listener.localAddress();
  for (int i = 0; i < connections; ++i) {
    weft::TcpStream out = co_await weft::TcpStream::connect(address);
    weft::TcpStream in = co_await listener.accept();
    work.push_back(serveReceive(std::move(in)));
    work.push_back(clientReceive(std::move(out), roundTrips));
  }
  auto results = co_await weft::collectAll(std::move(work));
  for (auto& r : results) r.value();
}

void BM_TcpStream_PingPongReceive(benchmark::State& state) {
  const auto backend = state.range(0) == 0 ? weft::IoBackendChoice::kIoUring : weft::IoBackendChoice::kEpoll;
  if (backend == weft::IoBackendChoice::kIoUring && !weft::IoLoop::available(weft::IoBackend::kIoUring)) {
    state.SkipWithError("io_uring is not available");
    return;
  }
  const int connections = static_cast<int>(state.range(1));
  weft::ThreadPool pool(weft::ThreadPoolOptions{1, "bench", backend});
  auto listener = weft::TcpListener::bind(weft::SocketAddress::loopbackV4(0));
  const std::int64_t perConnection = 20000 / connections;
  std::int64_t total = 0;
  for (auto _ : state) {
    weft::syncAwait(pingPongReceive(listener, connections, perConnection).via(&pool));
    total += perConnection * connections;
  }
  state.SetItemsProcessed(total);
  state.counters["us/roundtrip"] = benchmark::Counter(
      static_cast<double>(total), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TcpStream_PingPongReceive)
    ->ArgNames({"epoll", "conns"})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({0, 100})
    ->Args({1, 100})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Apply(fixIterations);

void BM_Baseline_BlockingSockets_PingPong(benchmark::State& state) {
  const std::int64_t roundTrips = 20000;
  std::int64_t total = 0;
  for (auto _ : state) {
    int fds[2];
    check(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, "socketpair");
    std::thread echo([fd = fds[1]] {
      std::array<char, kMessage> buffer;
      for (;;) {
        const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n <= 0) break;
        check(::send(fd, buffer.data(), static_cast<std::size_t>(n), 0) == n, "send");
      }
    });
    std::array<char, kMessage> message{}, reply;
    for (std::int64_t i = 0; i < roundTrips; ++i) {
      check(::send(fds[0], message.data(), message.size(), 0) == kMessage, "send");
      std::size_t got = 0;
      while (got < kMessage) {
        const ssize_t n = ::recv(fds[0], reply.data() + got, kMessage - got, 0);
        check(n > 0, "recv");
        got += static_cast<std::size_t>(n);
      }
    }
    ::shutdown(fds[0], SHUT_WR);
    echo.join();
    ::close(fds[0]);
    ::close(fds[1]);
    total += roundTrips;
  }
  state.SetItemsProcessed(total);
  state.counters["us/roundtrip"] = benchmark::Counter(
      static_cast<double>(total), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Baseline_BlockingSockets_PingPong)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Apply(fixIterations);

}  // namespace

BENCHMARK_MAIN();
