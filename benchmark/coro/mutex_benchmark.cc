// weft::Mutex (issue #4), each case beside a baseline in this binary so results read as
// ratios: BM_Mutex_X / BM_Baseline_StdMutex_X.
//
//  - *_Uncontended: lock + unlock by one coroutine (weft) or one thread (std::mutex),
//    nobody else around: the fast path, one atomic read-modify-write each way.
//  - *_Contended/threads:2: two lockers hammer one mutex around a tiny critical section
//    (a non-atomic increment). weft: two Tasks on a 2-thread ThreadPool; std: two
//    threads. weft's Mutex hands the lock to the oldest waiter (FIFO, no barging), so
//    under this contention nearly every unlock is a hand-off that costs a resumption
//    through the pool; std::mutex lets the unlocking thread take the lock straight back
//    (unfair, but cheap). The ratio is the price of fairness plus suspension.
//  - BM_Baseline_Handoff_CondvarPingPong: two threads passing a turn back and forth
//    with std::mutex + std::condition_variable; time per round trip (two passes). The
//    cost of a blocking thread-to-thread hand-off, to read the contended numbers
//    against.
//
// Every result is checked; a wrong count aborts the run.

#include <benchmark/benchmark.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "benchmark/support/fixed_iterations.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/executors/thread_pool.h"

namespace {

void check(long got, long expected, const char* what) {
  if (got != expected) [[unlikely]] {
    std::fprintf(stderr, "%s: wrong count %ld, expected %ld\n", what, got, expected);
    std::abort();
  }
}

// ---------------------------------------------------------------------------------------
// Uncontended.

void BM_Mutex_Uncontended(benchmark::State& state) {
  weft::Mutex mutex;
  long counter = 0;
  weft::syncAwait([&]() -> weft::Lazy<> {
    for (auto _ : state) {
      co_await mutex.lock();
      ++counter;
      benchmark::DoNotOptimize(counter);
      mutex.unlock();
    }
  }());
  check(counter, static_cast<long>(state.iterations()), "BM_Mutex_Uncontended");
}

void BM_Mutex_UncontendedScoped(benchmark::State& state) {
  weft::Mutex mutex;
  long counter = 0;
  weft::syncAwait([&]() -> weft::Lazy<> {
    for (auto _ : state) {
      weft::ScopedLock lock = co_await mutex.scopedLock();
      ++counter;
      benchmark::DoNotOptimize(counter);
    }
  }());
  check(counter, static_cast<long>(state.iterations()), "BM_Mutex_UncontendedScoped");
}

void BM_Baseline_StdMutex_Uncontended(benchmark::State& state) {
  std::mutex mutex;
  long counter = 0;
  for (auto _ : state) {
    mutex.lock();
    ++counter;
    benchmark::DoNotOptimize(counter);
    mutex.unlock();
  }
  check(counter, static_cast<long>(state.iterations()), "BM_Baseline_StdMutex_Uncontended");
}

// ---------------------------------------------------------------------------------------
// Contended by two threads.

// Shared by the benchmark threads of one run. Google Benchmark starts the threads of a
// run together and joins them before the next run, so thread 0 can set these up at the
// start of the loop (after the start barrier every thread sees them) and check them
// after the final barrier.
weft::ThreadPool& pool() {
  static weft::ThreadPool instance(2, "bench-pool");
  return instance;
}
weft::Mutex gWeftMutex;
std::mutex gStdMutex;
long gCounter = 0;  // guarded by the mutex under test

// The loop runs inside a Task on the pool: the benchmark thread only waits. Google
// Benchmark's per-thread State is touched by one coroutine at a time (resumptions are
// ordered by the pool's queues), so it is safe to iterate it there. Real time and
// process CPU time are reported: the coroutine may move between the pool's threads.
void BM_Mutex_Contended(benchmark::State& state) {
  if (state.thread_index() == 0) gCounter = 0;  // before the start barrier
  weft::syncAwait(
      [&]() -> weft::Lazy<> {
        for (auto _ : state) {
          co_await gWeftMutex.lock();
          ++gCounter;
          gWeftMutex.unlock();
        }
      }(),
      &pool());
  // After the stop barrier both loops are done (every thread runs the same count).
  if (state.thread_index() == 0) {
    check(gCounter, state.threads() * static_cast<long>(state.iterations()),
          "BM_Mutex_Contended");
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Baseline_StdMutex_Contended(benchmark::State& state) {
  if (state.thread_index() == 0) gCounter = 0;
  for (auto _ : state) {
    gStdMutex.lock();
    ++gCounter;
    gStdMutex.unlock();
  }
  if (state.thread_index() == 0) {
    std::lock_guard lock(gStdMutex);
    check(gCounter, state.threads() * static_cast<long>(state.iterations()),
          "BM_Baseline_StdMutex_Contended");
  }
  state.SetItemsProcessed(state.iterations());
}

// ---------------------------------------------------------------------------------------
// Hand-off baselines.

void BM_Baseline_Handoff_CondvarPingPong(benchmark::State& state) {
  std::mutex mutex;
  std::condition_variable turnChanged;
  int turn = 0;  // guarded by mutex: whose turn it is
  bool stop = false;
  long passes = 0;
  std::thread partner([&] {
    std::unique_lock lock(mutex);
    for (;;) {
      turnChanged.wait(lock, [&] { return turn == 1 || stop; });
      if (stop) return;
      turn = 0;
      ++passes;
      turnChanged.notify_one();
    }
  });
  {
    std::unique_lock lock(mutex);
    for (auto _ : state) {
      turn = 1;
      ++passes;
      turnChanged.notify_one();
      turnChanged.wait(lock, [&] { return turn == 0; });
    }
    stop = true;
    turnChanged.notify_one();
  }
  partner.join();
  check(passes, 2 * static_cast<long>(state.iterations()),
        "BM_Baseline_Handoff_CondvarPingPong");
  state.SetItemsProcessed(2 * state.iterations());  // items: one-way passes
}

}  // namespace

BENCHMARK(BM_Mutex_Uncontended)->Apply(weft::bench::fixIterations);
BENCHMARK(BM_Mutex_UncontendedScoped)->Apply(weft::bench::fixIterations);
BENCHMARK(BM_Baseline_StdMutex_Uncontended)->Apply(weft::bench::fixIterations);
BENCHMARK(BM_Mutex_Contended)->Threads(2)->UseRealTime()->MeasureProcessCPUTime();
BENCHMARK(BM_Baseline_StdMutex_Contended)->Threads(2)->UseRealTime()->MeasureProcessCPUTime();
BENCHMARK(BM_Baseline_Handoff_CondvarPingPong)->UseRealTime();

BENCHMARK_MAIN();
