// Channel<T> and select() throughput (issue #4), read against Go: benchmark/go/
// channel_pingpong and benchmark/go/channel_echo_ring run the same programs with
// goroutines (GOMAXPROCS(1)); the target is <= 0.25 x Go's time per message.
//
//  - BM_Channel_PingPong: two Lazys on a ThreadPool(1) bounce a value over two
//    unbuffered channels. Time per message (one send taken by the other side: a
//    rendezvous, a hand-off through the pool's queue and a resume). Baseline:
//    BM_Baseline_PoolHop_PingPong, two coroutines that resume each other through the same
//    pool with no channel at all (what the executor alone costs per hand-off).
//  - BM_Channel_EchoRing30000: 30,000 Lazys on a ThreadPool(1), each owning a channel of
//    capacity 1 and echoing every value it receives to the driver over one shared
//    channel of capacity 1; a round sends one value to every echoer and collects the
//    30,000 echoes. 1000 rounds; time per hop (a round is 60,000 hops, each of which
//    wakes a blocked task: Go's "time per switch"). The memory of the same ring is
//    measured by benchmark/coro/channel_memory.cc.
//  - BM_Select_PingPong: the ping-pong where the echo side waits with a two-case select
//    (the ping channel, or a quit channel): the cost select adds.
//  - BM_FiberChannel_PingPong, BM_FiberChannel_EchoRing30000: the same with fibers
//    (spawnFiber, weft::await) instead of Lazys; the echo ring's 30,000 fibers get 16 KiB
//    guarded stacks from a StackPool that keeps them between repetitions.
//
// All the work runs on the pool's thread, where the benchmark loop itself runs too (the
// driver coroutine calls state.KeepRunningBatch), so CPU time is that thread's; wall time
// is reported (UseRealTime) to include the pool's scheduling. Every result is checked; a
// wrong value aborts the run.

#include <benchmark/benchmark.h>

#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "benchmark/support/echo_ring.h"
#include "benchmark/support/fixed_iterations.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/select.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "weft/stackful/stack_pool.h"

namespace {

using weft::Channel;
using weft::Lazy;

void check(bool ok, const char* what) {
  if (!ok) [[unlikely]] {
    std::fprintf(stderr, "%s: wrong result\n", what);
    std::abort();
  }
}

// Runs `lazies` to completion on `pool`, each started there (FIFO on ThreadPool(1)).
void runOn(weft::ThreadPool& pool, std::vector<Lazy<void>> lazies) {
  for (auto& result : weft::syncAwait(weft::collectAllPara(std::move(lazies)).via(&pool))) {
    result.value();
  }
}

// ---------------------------------------------------------------------------------------
// Ping-pong.

void BM_Channel_PingPong(benchmark::State& state) {
  weft::ThreadPool pool(1, "pingpong");
  Channel<std::int64_t> ping, pong;
  auto echo = [&]() -> Lazy<void> {
    while (std::optional<std::int64_t> v = co_await ping.receive()) co_await pong.send(*v + 1);
  };
  auto driver = [&]() -> Lazy<void> {
    std::int64_t v = 0, rounds = 0;
    while (state.KeepRunningBatch(2)) {  // one round trip: two messages
      co_await ping.send(v);
      v = *co_await pong.receive();
      ++rounds;
    }
    check(v == rounds, "BM_Channel_PingPong");
    ping.close();
  };
  std::vector<Lazy<void>> all;
  all.push_back(echo());
  all.push_back(driver());
  runOn(pool, std::move(all));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Channel_PingPong)->UseRealTime()->Apply(weft::bench::fixIterations);

void BM_Select_PingPong(benchmark::State& state) {
  weft::ThreadPool pool(1, "pingpong");
  Channel<std::int64_t> ping, pong, quit;
  auto echo = [&]() -> Lazy<void> {
    for (;;) {
      auto r = co_await weft::select(ping.receiveCase(), quit.receiveCase());
      if (r.index() != 0) break;
      co_await pong.send(*std::get<0>(r) + 1);
    }
  };
  auto driver = [&]() -> Lazy<void> {
    std::int64_t v = 0, rounds = 0;
    while (state.KeepRunningBatch(2)) {
      co_await ping.send(v);
      v = *co_await pong.receive();
      ++rounds;
    }
    check(v == rounds, "BM_Select_PingPong");
    quit.close();
  };
  std::vector<Lazy<void>> all;
  all.push_back(echo());
  all.push_back(driver());
  runOn(pool, std::move(all));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Select_PingPong)->UseRealTime()->Apply(weft::bench::fixIterations);

// The baseline: two coroutines hand control to each other through the pool's queue,
// with no channel: each "message" is a schedule of the other side and a suspension.
struct Hop {
  std::coroutine_handle<>* park;   // where the suspended side records itself
  std::coroutine_handle<>* other;  // whom to wake (recorded by the other side)
  weft::ThreadPool* pool;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> self) const {
    *park = self;
    std::coroutine_handle<> wake = std::exchange(*other, nullptr);
    if (wake) pool->schedule(wake);
  }
  void await_resume() const noexcept {}
};

// A minimal fire-and-forget coroutine for the baseline (no executor logic, no result).
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::abort(); }
  };
};

void BM_Baseline_PoolHop_PingPong(benchmark::State& state) {
  weft::ThreadPool pool(1, "pingpong");
  std::coroutine_handle<> a, b;
  std::int64_t messages = 0;
  bool stop = false;
  weft::syncAwait([&]() -> Lazy<void> {
    // Both sides are started on the pool's thread; `done` wakes this driver at the end.
    weft::Channel<int> done;
    auto side = [&](std::coroutine_handle<>* self, std::coroutine_handle<>* other,
                    bool driver) -> Detached {
      for (;;) {
        if (driver) {
          if (!state.KeepRunningBatch(2)) {
            stop = true;
            break;
          }
        } else if (stop) {
          break;
        }
        ++messages;
        co_await Hop{self, other, &pool};
      }
      if (driver) {
        if (std::coroutine_handle<> wake = std::exchange(*other, nullptr)) pool.schedule(wake);
      } else {
        done.trySend(0);  // the driver waits in done.receive()
      }
    };
    side(&b, &a, false);  // parks at once: nothing to wake yet
    side(&a, &b, true);
    co_await done.receive();
  }()
                                                .via(&pool));
  check(messages >= state.iterations(), "BM_Baseline_PoolHop_PingPong");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Baseline_PoolHop_PingPong)->UseRealTime()->Apply(weft::bench::fixIterations);

// ---------------------------------------------------------------------------------------
// The 30,000-task echo ring.

constexpr int kEchoTasks = 30000;
constexpr std::int64_t kEchoRounds = 1000;
// Each repetition is 60,000,000 messages (seconds): fewer repetitions than the other
// benchmarks (benchmark/run.sh asks for 15), so a full run stays short. A repetition
// count set here overrides --benchmark_repetitions.
constexpr int kEchoRepetitions = 5;

// WEFT_BENCH_SMOKE=1 (test/run.sh's crash check of every benchmark): one repetition of
// two rounds instead of seconds of them.
bool smokeRun() { return std::getenv("WEFT_BENCH_SMOKE") != nullptr; }
std::int64_t echoIterations() { return 2 * kEchoTasks * (smokeRun() ? 2 : kEchoRounds); }
int echoRepetitions() { return smokeRun() ? 1 : kEchoRepetitions; }

void BM_Channel_EchoRing30000(benchmark::State& state) {
  weft::ThreadPool pool(1, "echo-ring");
  weft::bench::EchoRing ring(kEchoTasks);
  auto driver = [&]() -> Lazy<void> {
    while (state.KeepRunningBatch(2 * kEchoTasks)) {
      check(co_await ring.lazyRound(), "BM_Channel_EchoRing30000");
    }
    ring.close();
  };
  std::vector<Lazy<void>> all;
  all.reserve(kEchoTasks + 1);
  for (int i = 0; i < kEchoTasks; ++i) all.push_back(ring.lazyEcho(i));
  all.push_back(driver());  // started last: every echoer is waiting by then
  runOn(pool, std::move(all));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Channel_EchoRing30000)
    ->UseRealTime()
    ->Iterations(echoIterations())
    ->Repetitions(echoRepetitions())
    ->Unit(benchmark::kNanosecond);

// ---------------------------------------------------------------------------------------
// Fibers: the same programs with weft::await from spawned fibers.

void BM_FiberChannel_PingPong(benchmark::State& state) {
  weft::ThreadPool pool(1, "pingpong");
  Channel<std::int64_t> ping, pong;
  auto echo = weft::spawnFiber(&pool, [&] {
    while (std::optional<std::int64_t> v = weft::await(ping.receive())) {
      weft::await(pong.send(*v + 1));
    }
  });
  auto driver = weft::spawnFiber(&pool, [&] {
    std::int64_t v = 0, rounds = 0;
    while (state.KeepRunningBatch(2)) {
      weft::await(ping.send(v));
      v = *weft::await(pong.receive());
      ++rounds;
    }
    check(v == rounds, "BM_FiberChannel_PingPong");
    ping.close();
  });
  weft::syncAwait(std::move(driver));
  weft::syncAwait(std::move(echo));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FiberChannel_PingPong)->UseRealTime()->Apply(weft::bench::fixIterations);

// 16 KiB stacks, all kept between repetitions (30,000 guarded stacks are 60,000 kernel
// mappings: mapping them again for every repetition would dominate the setup).
weft::StackPool& echoStacks() {
  static weft::StackPool pool(16 * 1024, kEchoTasks + 16);
  return pool;
}

void BM_FiberChannel_EchoRing30000(benchmark::State& state) {
  weft::ThreadPool pool(1, "echo-ring");
  weft::bench::EchoRing ring(kEchoTasks);
  weft::SpawnFiberOptions options;
  options.stackPool = &echoStacks();
  std::vector<weft::FiberFuture<void>> echoes;
  echoes.reserve(kEchoTasks);
  for (int i = 0; i < kEchoTasks; ++i) {
    echoes.push_back(weft::spawnFiber(&pool, [&ring, i] { ring.fiberEcho(i); }, options));
  }
  auto driver = weft::spawnFiber(
      &pool,
      [&] {
        while (state.KeepRunningBatch(2 * kEchoTasks)) {
          check(ring.fiberRound(), "BM_FiberChannel_EchoRing30000");
        }
        ring.close();
      },
      options);
  weft::syncAwait(std::move(driver));
  for (auto& echo : echoes) weft::syncAwait(std::move(echo));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FiberChannel_EchoRing30000)
    ->UseRealTime()
    ->Iterations(echoIterations())
    ->Repetitions(echoRepetitions())
    ->Unit(benchmark::kNanosecond);

}  // namespace

BENCHMARK_MAIN();
