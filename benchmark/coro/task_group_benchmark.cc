// TaskGroup against collectAll (issue #17): the cost per task of spawning N trivial Lazys
// into a TaskGroup and joining it, beside collectAllPara and collectAll over a vector of
// the same N Lazys, all from a Lazy running on ThreadPool(1). Target: TaskGroup <= 1.5 x
// collectAllPara per task.
//
//  - BM_TaskGroup_SpawnJoin/N: TaskGroup<> group; N x group.spawn(leaf(i)); join().
//  - BM_TaskGroup_SpawnNext/N: TaskGroup<int>; N spawns, then N x next() (results summed).
//  - BM_CollectAllPara/N, BM_CollectAll/N: the baselines.
//
// Every result is checked; a wrong sum aborts the run.

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task_group.h"
#include "weft/coro/try.h"
#include "weft/executors/thread_pool.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "task_group_benchmark: %s\n", what);
  std::abort();
}

std::atomic<std::int64_t> leafSum{0};

weft::Lazy<void> countingLeaf(int i) {
  leafSum.fetch_add(i, std::memory_order_relaxed);
  co_return;
}

weft::Lazy<int> leaf(int i) { co_return i; }

std::int64_t expectedSum(int n) { return std::int64_t{n} * (n - 1) / 2; }

weft::Lazy<void> groupSpawnJoin(int n) {
  weft::TaskGroup<> group(co_await weft::currentExecutor());
  for (int i = 0; i < n; ++i) group.spawn(countingLeaf(i));
  co_await group.join();
}

weft::Lazy<std::int64_t> groupSpawnNext(int n) {
  weft::TaskGroup<int> group(co_await weft::currentExecutor());
  for (int i = 0; i < n; ++i) group.spawn(leaf(i));
  std::int64_t sum = 0;
  while (std::optional<weft::Try<int>> r = co_await group.next()) sum += r->value();
  co_await group.join();
  co_return sum;
}

template <bool kPara>
weft::Lazy<std::int64_t> collect(int n) {
  std::vector<weft::Lazy<int>> branches;
  branches.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) branches.push_back(leaf(i));
  std::vector<weft::Try<int>> results = kPara ? co_await weft::collectAllPara(std::move(branches))
                                              : co_await weft::collectAll(std::move(branches));
  std::int64_t sum = 0;
  for (auto& r : results) sum += r.value();
  co_return sum;
}

void BM_TaskGroup_SpawnJoin(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  weft::ThreadPool pool(1);
  for (auto _ : state) {
    leafSum = 0;
    weft::syncAwait(groupSpawnJoin(n), &pool);
    if (leafSum.load() != expectedSum(n)) fail("a task of the group did not run");
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_TaskGroup_SpawnNext(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  weft::ThreadPool pool(1);
  for (auto _ : state) {
    if (weft::syncAwait(groupSpawnNext(n), &pool) != expectedSum(n)) fail("a result was lost");
  }
  state.SetItemsProcessed(state.iterations() * n);
}

template <bool kPara>
void BM_Collect(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  weft::ThreadPool pool(1);
  for (auto _ : state) {
    if (weft::syncAwait(collect<kPara>(n), &pool) != expectedSum(n)) fail("a result was lost");
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// WEFT_BENCH_ITERATIONS=n fixes every benchmark's iteration count (no calibration runs),
// so that `valgrind --tool=callgrind` gives repeatable instruction counts: a run of 2n
// minus a run of n, over n, is one iteration (as for coro/lazy_benchmark).
void fixIterations(benchmark::internal::Benchmark* b) {
  const char* fixed = std::getenv("WEFT_BENCH_ITERATIONS");
  if (fixed != nullptr && std::atol(fixed) > 0) b->Iterations(std::atol(fixed));
}

BENCHMARK(BM_TaskGroup_SpawnJoin)->Arg(1000)->UseRealTime()->Apply(fixIterations);
BENCHMARK(BM_TaskGroup_SpawnNext)->Arg(1000)->UseRealTime()->Apply(fixIterations);
BENCHMARK(BM_Collect<true>)->Name("BM_CollectAllPara")->Arg(1000)->UseRealTime()->Apply(fixIterations);
BENCHMARK(BM_Collect<false>)->Name("BM_CollectAll")->Arg(1000)->UseRealTime()->Apply(fixIterations);

}  // namespace

BENCHMARK_MAIN();
