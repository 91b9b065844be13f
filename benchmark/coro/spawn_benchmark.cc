// weft::spawn: what a root task costs, and what its waits cost, on ThreadPool(1). With
// task tracking (docs/debugging.md, "Cost"), a spawned task is registered in its thread's
// ring while it lives, and each wait of one of its coroutines is published in its
// registry slot; the Lazys of BM_Lazy_* and the two sides of BM_Channel_PingPong (the
// branches of a collect) are not root tasks and publish nothing: these are the numbers for
// a task.
//
//  - BM_Spawn_Join: a Lazy on the pool spawns a trivial Lazy (run inline, up to its end)
//    and awaits its JoinHandle. Time per spawn and join.
//  - BM_Spawn_PingPong: BM_Channel_PingPong (coro/channel_benchmark.cc) between two
//    spawned tasks: each carries a cancellation token of its own (spawn's), so every
//    channel operation arms a cancellation callback, which the collect's branches do
//    not. Time per message.
//
// Every result is checked; a wrong value aborts the run.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "benchmark/support/fixed_iterations.h"
#include "weft/coro/channel.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/spawn.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) [[unlikely]] {
    std::fprintf(stderr, "%s: wrong result\n", what);
    std::abort();
  }
}

weft::Lazy<int> one() { co_return 1; }

weft::Lazy<std::int64_t> spawnAndJoin(benchmark::State& state) {
  weft::Executor* executor = co_await weft::currentExecutor();
  std::int64_t sum = 0;
  for (auto _ : state) sum += co_await weft::spawn(executor, one());
  co_return sum;
}

void BM_Spawn_Join(benchmark::State& state) {
  weft::ThreadPool pool(1);
  const std::int64_t sum = weft::syncAwait(spawnAndJoin(state), &pool);
  check(sum == static_cast<std::int64_t>(state.iterations()), "BM_Spawn_Join");
}
BENCHMARK(BM_Spawn_Join)->UseRealTime()->Apply(weft::bench::fixIterations);

void BM_Spawn_PingPong(benchmark::State& state) {
  weft::ThreadPool pool(1, "pingpong");
  weft::Channel<std::int64_t> ping, pong;
  auto echo = [&]() -> weft::Lazy<void> {
    while (std::optional<std::int64_t> v = co_await ping.receive()) co_await pong.send(*v + 1);
  };
  auto driver = [&]() -> weft::Lazy<void> {
    std::int64_t v = 0, rounds = 0;
    while (state.KeepRunningBatch(2)) {  // one round trip: two messages
      co_await ping.send(v);
      v = *co_await pong.receive();
      ++rounds;
    }
    check(v == rounds, "BM_Spawn_PingPong");
    ping.close();
  };
  weft::JoinHandle<void> echoTask = weft::spawn(&pool, echo());
  weft::JoinHandle<void> driverTask = weft::spawn(&pool, driver());
  weft::syncAwait(std::move(driverTask));
  weft::syncAwait(std::move(echoTask));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Spawn_PingPong)->UseRealTime()->Apply(weft::bench::fixIterations);

}  // namespace

BENCHMARK_MAIN();
