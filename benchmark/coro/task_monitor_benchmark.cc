// TaskMonitor (coro/task_monitor.h): what a monitored task costs beside the same task
// unmonitored, on ThreadPool(1), the rows of spawn_benchmark.cc repeated in both forms.
//
//  - BM_TaskMonitor_SpawnJoin / BM_Baseline_Spawn_Join: a Lazy on the pool spawns a
//    trivial Lazy (run inline, up to its end; instrumented in the first) and awaits its
//    JoinHandle. Time per spawn and join: the monitored one pays instrument()'s record and
//    coroutine, and its first and last poll (clock reads, atomic adds).
//  - BM_TaskMonitor_PingPong / BM_Baseline_Spawn_PingPong: two spawned tasks (both
//    instrumented in the first) exchange messages over two channels. Time per message:
//    every message ends one poll and starts another (with task tracking; without it the
//    two rows run the same per message).
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
#include "weft/coro/task_monitor.h"
#include "weft/executors/thread_pool.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) [[unlikely]] {
    std::fprintf(stderr, "%s: wrong result\n", what);
    std::abort();
  }
}

weft::Lazy<int> one() { co_return 1; }

weft::Lazy<std::int64_t> spawnAndJoin(benchmark::State& state, const weft::TaskMonitor* monitor) {
  weft::Executor* executor = co_await weft::currentExecutor();
  std::int64_t sum = 0;
  for (auto _ : state) {
    if (monitor != nullptr) {
      sum += co_await weft::spawn(executor, monitor->instrument(one()));
    } else {
      sum += co_await weft::spawn(executor, one());
    }
  }
  co_return sum;
}

void spawnJoin(benchmark::State& state, const weft::TaskMonitor* monitor, const char* name) {
  weft::ThreadPool pool(1);
  const std::int64_t sum = weft::syncAwait(spawnAndJoin(state, monitor), &pool);
  check(sum == static_cast<std::int64_t>(state.iterations()), name);
  if (monitor != nullptr) {
    check(monitor->cumulative().droppedCount == static_cast<std::uint64_t>(state.iterations()),
          name);
  }
}

void BM_TaskMonitor_SpawnJoin(benchmark::State& state) {
  weft::TaskMonitor monitor;
  spawnJoin(state, &monitor, "BM_TaskMonitor_SpawnJoin");
}
BENCHMARK(BM_TaskMonitor_SpawnJoin)->UseRealTime()->Apply(weft::bench::fixIterations);

void BM_Baseline_Spawn_Join(benchmark::State& state) {
  spawnJoin(state, nullptr, "BM_Baseline_Spawn_Join");
}
BENCHMARK(BM_Baseline_Spawn_Join)->UseRealTime()->Apply(weft::bench::fixIterations);

void pingPong(benchmark::State& state, const weft::TaskMonitor* monitor, const char* name) {
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
    check(v == rounds, name);
    ping.close();
  };
  auto maybeMonitored = [&](weft::Lazy<void> lazy) {
    return monitor != nullptr ? monitor->instrument(std::move(lazy)) : std::move(lazy);
  };
  weft::JoinHandle<void> echoTask = weft::spawn(&pool, maybeMonitored(echo()));
  weft::JoinHandle<void> driverTask = weft::spawn(&pool, maybeMonitored(driver()));
  weft::syncAwait(std::move(driverTask));
  weft::syncAwait(std::move(echoTask));
  state.SetItemsProcessed(state.iterations());
}

void BM_TaskMonitor_PingPong(benchmark::State& state) {
  weft::TaskMonitor monitor;
  pingPong(state, &monitor, "BM_TaskMonitor_PingPong");
}
BENCHMARK(BM_TaskMonitor_PingPong)->UseRealTime()->Apply(weft::bench::fixIterations);

void BM_Baseline_Spawn_PingPong(benchmark::State& state) {
  pingPong(state, nullptr, "BM_Baseline_Spawn_PingPong");
}
BENCHMARK(BM_Baseline_Spawn_PingPong)->UseRealTime()->Apply(weft::bench::fixIterations);

}  // namespace

BENCHMARK_MAIN();
