// What weft::withTimeout costs (issue #29, item 3), read against tokio's
// tokio::time::timeout (benchmark/timeout/tokio) and Go's context.WithTimeout
// (benchmark/go/with_timeout), which do the same work; benchmark/timeout/run.sh runs the
// three side by side and prints the ratios. Every case runs on a ThreadPool(1) worker (the
// benchmark loop itself runs in a Lazy on that worker), with the pool's default event loop:
// io_uring, or whatever WEFT_IO_BACKEND names (the label says which). The limit is 10 s and
// is never reached: what is measured is arming and disarming it.
//
//  - BM_WithTimeout_Ready: `co_await withTimeout(ready(), 10s)`, where ready() is a Lazy
//    that returns a value without suspending. Baseline BM_Baseline_NoTimeout_Ready: the
//    same Lazy awaited directly. (withTimeout starts the work first and arms its timer
//    only if the work suspends, so no timer is armed here and the clock is not read:
//    this is the floor of withTimeout.)
//  - BM_WithTimeout_Yield: the work suspends once (`co_await yield()`: back of the worker's
//    queue) and then returns a value, so the timer is armed and then disarmed on every
//    operation. Baseline BM_Baseline_NoTimeout_Yield: the same Lazy awaited directly.
//  - BM_WithTimeout_TcpPingPong: a 1-byte ping-pong over 127.0.0.1: the client writes a
//    byte, an echo server (a Lazy on the same worker) reads it and writes it back, the
//    client reads it with `co_await withTimeout(stream.read(buf), 10s)`. Time per round
//    trip. Baseline BM_Baseline_NoTimeout_TcpPingPong: the same read without the timeout;
//    the difference is what the timeout costs around real I/O.
//  - BM_StreamReadTimeout_TcpPingPong (informational): the same limit set with
//    TcpStream::setReadTimeout, which the event loop enforces itself (io_uring: a linked
//    timeout; epoll: the loop's deadlines) with no timer thread.
//
// Wall time per operation (UseRealTime): the pool's timer thread, which withTimeout's
// timer wakes, is part of the cost. Every result is checked; a wrong value aborts the run.

#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_timeout.h"
#include "weft/coro/yield.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"

namespace {

using namespace std::chrono_literals;
using weft::Lazy;

// WEFT_BENCH_ITERATIONS=n fixes every benchmark's iteration count (no calibration runs),
// so that `valgrind --tool=callgrind` gives repeatable instruction counts: a run of 2n
// minus a run of n, over n, is one iteration (as for coro/lazy_benchmark).
void fixIterations(benchmark::internal::Benchmark* b) {
  const char* fixed = std::getenv("WEFT_BENCH_ITERATIONS");
  if (fixed != nullptr && std::atol(fixed) > 0) b->Iterations(std::atol(fixed));
}

// Generous: never reached, so every timer armed here is disarmed before it fires.
constexpr auto kLimit = 10s;

void check(bool ok, const char* what) {
  if (!ok) [[unlikely]] {
    std::fprintf(stderr, "%s: wrong result\n", what);
    std::abort();
  }
}

// noinline: the work stays a real call and a real coroutine frame, as an operation
// behind an interface would be.
[[gnu::noinline]] Lazy<std::int64_t> ready(std::int64_t v) { co_return v; }
[[gnu::noinline]] Lazy<std::int64_t> afterYield(std::int64_t v) {
  co_await weft::yield();
  co_return v;
}

// Runs `loop(state)` (a Lazy that iterates over `state`) on a ThreadPool(1) worker, on
// the default backend (WEFT_IO_BACKEND, else epoll), which
// the label names so that results from both backends can be told apart.
template <class Loop>
void runOnPool(benchmark::State& state, Loop loop) {
  weft::ThreadPool pool(1, "timeout-bench");
  state.SetLabel(std::string(weft::ioBackendName(pool.ioBackend())));
  weft::syncAwait(loop(state), &pool);
  state.SetItemsProcessed(state.iterations());
}

// ---------------------------------------------------------------------------------------
// (a) Work that completes at once, and work that suspends once.

void BM_WithTimeout_Ready(benchmark::State& state) {
  runOnPool(state, [](benchmark::State& s) -> Lazy<void> {
    std::int64_t i = 0;
    for (auto _ : s) {
      check(co_await weft::withTimeout(ready(i), kLimit) == i, "BM_WithTimeout_Ready");
      ++i;
    }
  });
}
BENCHMARK(BM_WithTimeout_Ready)->UseRealTime()->Apply(fixIterations);

void BM_Baseline_NoTimeout_Ready(benchmark::State& state) {
  runOnPool(state, [](benchmark::State& s) -> Lazy<void> {
    std::int64_t i = 0;
    for (auto _ : s) {
      check(co_await ready(i) == i, "BM_Baseline_NoTimeout_Ready");
      ++i;
    }
  });
}
BENCHMARK(BM_Baseline_NoTimeout_Ready)->UseRealTime()->Apply(fixIterations);

void BM_WithTimeout_Yield(benchmark::State& state) {
  runOnPool(state, [](benchmark::State& s) -> Lazy<void> {
    std::int64_t i = 0;
    for (auto _ : s) {
      check(co_await weft::withTimeout(afterYield(i), kLimit) == i, "BM_WithTimeout_Yield");
      ++i;
    }
  });
}
BENCHMARK(BM_WithTimeout_Yield)->UseRealTime()->Apply(fixIterations);

void BM_Baseline_NoTimeout_Yield(benchmark::State& state) {
  runOnPool(state, [](benchmark::State& s) -> Lazy<void> {
    std::int64_t i = 0;
    for (auto _ : s) {
      check(co_await afterYield(i) == i, "BM_Baseline_NoTimeout_Yield");
      ++i;
    }
  });
}
BENCHMARK(BM_Baseline_NoTimeout_Yield)->UseRealTime()->Apply(fixIterations);

// ---------------------------------------------------------------------------------------
// (b) A 1-byte TCP ping-pong over 127.0.0.1, client and echo server on the same worker.

enum class ReadLimit { kNone, kWithTimeout, kStreamReadTimeout };

Lazy<void> echo(weft::TcpStream stream) {
  std::array<std::byte, 1> buffer;
  while (std::size_t n = co_await stream.read(buffer)) {
    check(co_await stream.write(std::span<const std::byte>(buffer.data(), n)) == n, "echo write");
  }
}

Lazy<void> client(weft::TcpStream stream, benchmark::State& state, ReadLimit limit) {
  if (limit == ReadLimit::kStreamReadTimeout) stream.setReadTimeout(kLimit);
  std::array<std::byte, 1> ping{};
  std::array<std::byte, 1> pong{};
  std::uint8_t i = 0;
  for (auto _ : state) {
    ping[0] = static_cast<std::byte>(++i);
    check(co_await stream.write(ping) == 1, "client write");
    const std::size_t n = limit == ReadLimit::kWithTimeout
                              ? co_await weft::withTimeout(stream.read(pong), kLimit)
                              : co_await stream.read(pong);
    check(n == 1 && pong[0] == ping[0], "client read");
  }
  stream.shutdownWrite();  // the echo server reads the end of the stream and returns
}

Lazy<void> pingPong(benchmark::State& state, ReadLimit limit) {
  auto listener = weft::TcpListener::bind(weft::SocketAddress::loopbackV4(0));
  weft::TcpStream out = co_await weft::TcpStream::connect(listener.localAddress());
  weft::TcpStream in = co_await listener.accept();
  auto [server, driver] =
      co_await weft::collectAll(echo(std::move(in)), client(std::move(out), state, limit));
  server.value();
  driver.value();
}

void runPingPong(benchmark::State& state, ReadLimit limit) {
  runOnPool(state, [limit](benchmark::State& s) { return pingPong(s, limit); });
}

void BM_WithTimeout_TcpPingPong(benchmark::State& state) {
  runPingPong(state, ReadLimit::kWithTimeout);
}
BENCHMARK(BM_WithTimeout_TcpPingPong)->UseRealTime()->Apply(fixIterations);

void BM_Baseline_NoTimeout_TcpPingPong(benchmark::State& state) {
  runPingPong(state, ReadLimit::kNone);
}
BENCHMARK(BM_Baseline_NoTimeout_TcpPingPong)->UseRealTime()->Apply(fixIterations);

void BM_StreamReadTimeout_TcpPingPong(benchmark::State& state) {
  runPingPong(state, ReadLimit::kStreamReadTimeout);
}
BENCHMARK(BM_StreamReadTimeout_TcpPingPong)->UseRealTime()->Apply(fixIterations);

}  // namespace

BENCHMARK_MAIN();
