// The standard comparisons for weft::Lazy and weft::Task (issue #2), each beside the same
// work done with the bare task of benchmark/support/bare_task.h. Read the results as
// ratios: BM_Lazy_X / BM_Baseline_BareTask_X; the targets are <= 1.25.
//
//  - *_Chain1000: a chain of 1000 nested awaits through 1000 distinct functions (the
//    lazy_fn<L, N> template recursion). With g++ this mostly measures code size (1000
//    instantiations overflow L2); with clang, frame elision (clang removes nearly every
//    nested allocation).
//  - *_RecursiveChain1000: one recursive coroutine awaited 1000 deep: the real per-level
//    cost of a frame, a suspend and a resume. Its baseline recycles frames through a
//    free list, as weft does.
//  - *_CollectAll5000x50: collectAllPara of 5000 chains of 50 awaits, with no executor
//    (so the branches run one after another on the calling thread).
//  - BM_Task_CollectAllPara5000x50: the same on a 2-thread ThreadPool (no baseline: the
//    bare task has no executor).
//
// Every result is checked; a wrong sum aborts the run.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "benchmark/support/bare_task.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/executors/thread_pool.h"

namespace {

using weft::bench::BareTask;
using weft::bench::PooledBareTask;

// lazy_fn<L, N>()() awaits lazy_fn<L, N - 1>()() and adds N; lazy_fn<L, 0> returns 1.
// (The name is the one these comparisons use everywhere, hence not CamelCase.)
template <template <class> class L, int N>
struct lazy_fn {
  L<int> operator()() const { co_return N + co_await lazy_fn<L, N - 1>{}(); }
};
template <template <class> class L>
struct lazy_fn<L, 0> {
  L<int> operator()() const { co_return 1; }
};

// What lazy_fn<L, n> and rec(n) return: 1 + n (n + 1) / 2.
constexpr long expectedSum(long n) { return 1 + n * (n + 1) / 2; }

constexpr int kChainDepth = 1000;
constexpr int kBranches = 5000;
constexpr int kBranchDepth = 50;

void check(long got, long expected, const char* what) {
  if (got != expected) [[unlikely]] {
    std::fprintf(stderr, "%s: wrong result %ld, expected %ld\n", what, got, expected);
    std::abort();
  }
}

// ---------------------------------------------------------------------------------------
// Chain of 1000 distinct functions.

void BM_Lazy_Chain1000(benchmark::State& state) {
  for (auto _ : state) {
    int result = weft::syncAwait(lazy_fn<weft::Lazy, kChainDepth>{}());
    check(result, expectedSum(kChainDepth), "BM_Lazy_Chain1000");
    benchmark::DoNotOptimize(result);
  }
}

void BM_Baseline_BareTask_Chain1000(benchmark::State& state) {
  for (auto _ : state) {
    int result = weft::bench::syncWait(lazy_fn<BareTask, kChainDepth>{}());
    check(result, expectedSum(kChainDepth), "BM_Baseline_BareTask_Chain1000");
    benchmark::DoNotOptimize(result);
  }
}

// ---------------------------------------------------------------------------------------
// 5000 chains of 50, collected.

weft::Lazy<long> lazyCollect() {
  std::vector<weft::Lazy<int>> branches;
  branches.reserve(kBranches);
  for (int i = 0; i < kBranches; ++i) branches.push_back(lazy_fn<weft::Lazy, kBranchDepth>{}());
  std::vector<weft::Try<int>> results = co_await weft::collectAllPara(std::move(branches));
  long sum = 0;
  for (weft::Try<int>& result : results) sum += result.value();
  co_return sum;
}

void BM_Lazy_CollectAll5000x50(benchmark::State& state) {
  for (auto _ : state) {
    long sum = weft::syncAwait(lazyCollect());
    check(sum, kBranches * expectedSum(kBranchDepth), "BM_Lazy_CollectAll5000x50");
    benchmark::DoNotOptimize(sum);
  }
}

void BM_Task_CollectAllPara5000x50(benchmark::State& state) {
  weft::ThreadPool pool(2);
  for (auto _ : state) {
    long sum = weft::syncAwait(lazyCollect(), &pool);
    check(sum, kBranches * expectedSum(kBranchDepth), "BM_Task_CollectAllPara5000x50");
    benchmark::DoNotOptimize(sum);
  }
}

BareTask<long> bareCollect() {
  std::vector<BareTask<int>> branches;
  branches.reserve(kBranches);
  for (int i = 0; i < kBranches; ++i) branches.push_back(lazy_fn<BareTask, kBranchDepth>{}());
  std::vector<int> results = co_await weft::bench::collectAll(std::move(branches));
  long sum = 0;
  for (int result : results) sum += result;
  co_return sum;
}

void BM_Baseline_BareTask_CollectAll5000x50(benchmark::State& state) {
  for (auto _ : state) {
    long sum = weft::bench::syncWait(bareCollect());
    check(sum, kBranches * expectedSum(kBranchDepth), "BM_Baseline_BareTask_CollectAll5000x50");
    benchmark::DoNotOptimize(sum);
  }
}

// ---------------------------------------------------------------------------------------
// One recursive function, 1000 deep.

weft::Lazy<int> rec(int n) {
  if (n == 0) co_return 1;
  co_return n + co_await rec(n - 1);
}

PooledBareTask<int> bareRec(int n) {
  if (n == 0) co_return 1;
  co_return n + co_await bareRec(n - 1);
}

void BM_Lazy_RecursiveChain1000(benchmark::State& state) {
  int depth = kChainDepth;
  for (auto _ : state) {
    benchmark::DoNotOptimize(depth);  // keep the depth opaque: no constant folding
    int result = weft::syncAwait(rec(depth));
    check(result, expectedSum(kChainDepth), "BM_Lazy_RecursiveChain1000");
    benchmark::DoNotOptimize(result);
  }
}

void BM_Baseline_BareTask_RecursiveChain1000(benchmark::State& state) {
  int depth = kChainDepth;
  for (auto _ : state) {
    benchmark::DoNotOptimize(depth);
    int result = weft::bench::syncWait(bareRec(depth));
    check(result, expectedSum(kChainDepth), "BM_Baseline_BareTask_RecursiveChain1000");
    benchmark::DoNotOptimize(result);
  }
}

}  // namespace

// Registration is done here rather than with BENCHMARK() so that
// WEFT_BENCH_ITERATIONS=n can fix the iteration count (no calibration runs): with it,
// `valgrind --tool=callgrind` gives repeatable instruction counts per iteration
// (benchmark/run.sh subtracts a run of n from a run of 2n).
int main(int argc, char** argv) {
  const char* fixed = std::getenv("WEFT_BENCH_ITERATIONS");
  const long iterations = fixed != nullptr ? std::atol(fixed) : 0;
  auto add = [iterations](const char* name, void (*fn)(benchmark::State&)) {
    benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(name, fn);
    if (iterations > 0) b->Iterations(iterations);
    return b;
  };
  add("BM_Lazy_Chain1000", BM_Lazy_Chain1000);
  add("BM_Baseline_BareTask_Chain1000", BM_Baseline_BareTask_Chain1000);
  add("BM_Lazy_CollectAll5000x50", BM_Lazy_CollectAll5000x50)->Unit(benchmark::kMicrosecond);
  // Real time: the work happens on the pool's threads, not on the one that waits.
  add("BM_Task_CollectAllPara5000x50", BM_Task_CollectAllPara5000x50)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  add("BM_Baseline_BareTask_CollectAll5000x50", BM_Baseline_BareTask_CollectAll5000x50)
      ->Unit(benchmark::kMicrosecond);
  add("BM_Lazy_RecursiveChain1000", BM_Lazy_RecursiveChain1000);
  add("BM_Baseline_BareTask_RecursiveChain1000", BM_Baseline_BareTask_RecursiveChain1000);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
