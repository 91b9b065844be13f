// What a weft::testing::Simulation costs per scheduled item, against ThreadPool(1) in the
// same binary (issue #31: the test runtime may cost more; say how much). The same
// coroutines run on both; only the executor differs.
//
//  - BM_YieldPingPong_{Simulation,ThreadPool1}: two coroutines co_await yield() in turn,
//    5,000 times each: 10,000 items per iteration. On ThreadPool(1) each is the worker's
//    local-queue fast path; in a Simulation, one seeded pick among the runnable items (two
//    here) under the simulation's lock.
//  - BM_YieldCrowd_{Simulation,ThreadPool1}: 100 coroutines yield 100 times each: the
//    pick is among 100 runnable items (O(1) in the simulation: a swap with the last).
//  - BM_SleepJump_Simulation: one coroutine sleeps 1 ms, 10,000 times: each sleep arms a
//    timer and the virtual clock jumps to it (10 s of virtual time per iteration). No
//    ThreadPool counterpart: there, it takes 10 s of real time.
//
// Reported per item: items_per_second, and the counter per_item (time per item). The
// Simulation is made once per benchmark and runs one main task per iteration; the pool's
// per-iteration syncAwait (a hand-off to the worker and back) is spread over the 10,000
// items. docs/testing.md ("Cost") has the numbers, with callgrind's instruction counts
// (WEFT_BENCH_ITERATIONS, as in the other benchmarks).

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/testing/simulation.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "simulation_benchmark: %s\n", what);
  std::abort();
}

std::uint64_t yields = 0;  // counted by every yielder: checked after each iteration

weft::Lazy<void> yielder(int times) {
  for (int i = 0; i < times; ++i) {
    co_await weft::yield();
    ++yields;
  }
}

// `tasks` coroutines yielding `times` times each, side by side.
weft::Lazy<void> yielders(int tasks, int times) {
  std::vector<weft::Lazy<void>> all;
  all.reserve(static_cast<std::size_t>(tasks));
  for (int i = 0; i < tasks; ++i) all.push_back(yielder(times));
  co_await weft::collectAll(std::move(all));
}

weft::Lazy<void> sleeper(int times) {
  for (int i = 0; i < times; ++i) {
    co_await weft::sleep(std::chrono::milliseconds(1));
    ++yields;
  }
}

struct OnSimulation {
  weft::testing::Simulation sim{42};
  void run(weft::Lazy<void> lazy) { sim.run(std::move(lazy)); }
};

struct OnThreadPool1 {
  weft::ThreadPool pool{1};
  void run(weft::Lazy<void> lazy) { weft::syncAwait(std::move(lazy), &pool); }
};

void reportPerItem(benchmark::State& state, std::int64_t itemsPerIteration) {
  state.SetItemsProcessed(state.iterations() * itemsPerIteration);
  state.counters["per_item"] = benchmark::Counter(
      static_cast<double>(itemsPerIteration),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

template <class On>
void BM_Yields(benchmark::State& state) {
  const int tasks = static_cast<int>(state.range(0));
  const int times = static_cast<int>(state.range(1));
  const std::uint64_t items = static_cast<std::uint64_t>(tasks) * static_cast<std::uint64_t>(times);
  On on;
  for (auto _ : state) {
    yields = 0;
    on.run(yielders(tasks, times));
    if (yields != items) fail("a yield was lost");
  }
  reportPerItem(state, static_cast<std::int64_t>(items));
}

void BM_SleepJump_Simulation(benchmark::State& state) {
  constexpr int kSleeps = 10'000;
  OnSimulation on;
  for (auto _ : state) {
    yields = 0;
    on.run(sleeper(kSleeps));
    if (yields != kSleeps) fail("a sleep was lost");
  }
  reportPerItem(state, kSleeps);
}

// WEFT_BENCH_ITERATIONS=n fixes every benchmark's iteration count (no calibration runs),
// so that `valgrind --tool=callgrind` gives repeatable instruction counts: a run of 2n
// minus a run of n, over n, is one iteration (as for coro/lazy_benchmark).
void fixIterations(benchmark::internal::Benchmark* b) {
  const char* fixed = std::getenv("WEFT_BENCH_ITERATIONS");
  if (fixed != nullptr && std::atol(fixed) > 0) b->Iterations(std::atol(fixed));
}

BENCHMARK(BM_Yields<OnSimulation>)
    ->Name("BM_YieldPingPong_Simulation")
    ->Args({2, 5000})
    ->UseRealTime()
    ->Apply(fixIterations);
BENCHMARK(BM_Yields<OnThreadPool1>)
    ->Name("BM_YieldPingPong_ThreadPool1")
    ->Args({2, 5000})
    ->UseRealTime()
    ->Apply(fixIterations);
BENCHMARK(BM_Yields<OnSimulation>)
    ->Name("BM_YieldCrowd_Simulation")
    ->Args({100, 100})
    ->UseRealTime()
    ->Apply(fixIterations);
BENCHMARK(BM_Yields<OnThreadPool1>)
    ->Name("BM_YieldCrowd_ThreadPool1")
    ->Args({100, 100})
    ->UseRealTime()
    ->Apply(fixIterations);
BENCHMARK(BM_SleepJump_Simulation)->UseRealTime()->Apply(fixIterations);

}  // namespace

BENCHMARK_MAIN();
