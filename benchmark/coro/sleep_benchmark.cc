// How late 1 ms sleeps wake up (issue #4: BM_Sleep_Accuracy; issue #29: with a busy
// worker), on a 2-thread ThreadPool.
//
//  - BM_Sleep_Accuracy/load:N: each iteration, 16 coroutines on the pool each sleep 1 ms
//    once (collectAllPara); a sample is (wake-up time - deadline). Meanwhile N CPU-bound
//    coroutines per worker keep the pool's queues full: each computes for ~20 us, then
//    `co_await yield()` (back of its worker's queue). load:0 is the idle pool.
//  - BM_Sleep_Accuracy_BusyWorker/hog_ms:M: the same 16 sleepers, while one coroutine
//    computes for M ms at a stretch, then yields, over and over: whichever worker runs it
//    is stuck in one long item, and the sleepers whose timers that worker holds wait for
//    someone else to fire them (the pool's timer thread: before issue #29, every timer
//    was there; since, it takes a busy worker's timers once they are 0.5 ms overdue).
//  - BM_Baseline_SleepFor_Accuracy/load:N: the baseline: a plain std::thread calling
//    std::this_thread::sleep_for(1 ms) with the same load on the pool (what the OS gives
//    a thread that owns a core's attention).
//
// Counters (microseconds, over every sample of the run): p50_late_us, p99_late_us,
// max_late_us. The time per iteration is ~1 ms + lateness and means little on its own.
//
// Why the pool stays accurate under load: a worker fires its own due timers before its
// next item (and timers armed elsewhere reach a due list that workers check before their
// queues), so a woken sleeper waits for at most the item a worker is running (~20 us
// here), not for the whole queue (N x 20 us).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kSleepers = 16;
constexpr auto kSleep = 1ms;
constexpr auto kBurnSlice = 20us;

// Spins for `slice` of CPU time (wall clock: the pool owns both cores' worth of threads).
void burn(Clock::duration slice) {
  const auto until = Clock::now() + slice;
  while (Clock::now() < until) {
  }
}

// N coroutines per worker that compute and yield until told to stop.
class Load {
 public:
  Load(weft::ThreadPool& pool, int perWorker) {
    const int n = perWorker * static_cast<int>(pool.threadCount());
    for (int i = 0; i < n; ++i) {
      running_.fetch_add(1);
      loop().via(&pool).start([this](weft::Try<void>&& result) {
        if (!result.hasValue()) std::abort();
        running_.fetch_sub(1);
      });
    }
  }
  ~Load() {
    stop_ = true;
    while (running_.load() != 0) std::this_thread::yield();
  }

 private:
  weft::Lazy<void> loop() {
    while (!stop_.load(std::memory_order_relaxed)) {
      burn(kBurnSlice);
      co_await weft::yield();
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> running_{0};
};

// One coroutine that computes for `slice` at a stretch, then yields, until told to stop:
// one worker at a time is busy in a long item.
class Hog {
 public:
  Hog(weft::ThreadPool& pool, Clock::duration slice) : slice_(slice) {
    running_ = true;
    loop().via(&pool).start([this](weft::Try<void>&& result) {
      if (!result.hasValue()) std::abort();
      running_ = false;
    });
  }
  ~Hog() {
    stop_ = true;
    while (running_.load()) std::this_thread::yield();
  }

 private:
  weft::Lazy<void> loop() {
    while (!stop_.load(std::memory_order_relaxed)) {
      burn(slice_);
      co_await weft::yield();
    }
  }

  Clock::duration slice_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
};

struct Samples {
  std::mutex mutex;
  std::vector<double> lateUs;
  void add(Clock::duration late) {
    std::lock_guard lock(mutex);
    lateUs.push_back(std::chrono::duration<double, std::micro>(late).count());
  }
  void report(benchmark::State& state) {
    if (lateUs.empty()) return;
    std::sort(lateUs.begin(), lateUs.end());
    auto at = [&](double q) {
      return lateUs[std::min(lateUs.size() - 1, static_cast<std::size_t>(q * lateUs.size()))];
    };
    state.counters["p50_late_us"] = at(0.50);
    state.counters["p99_late_us"] = at(0.99);
    state.counters["max_late_us"] = lateUs.back();
    state.counters["samples"] = static_cast<double>(lateUs.size());
  }
};

weft::Lazy<void> sleeper(Samples& samples) {
  const auto deadline = Clock::now() + kSleep;
  co_await weft::sleepUntil(deadline);
  samples.add(Clock::now() - deadline);
}

void BM_Sleep_Accuracy(benchmark::State& state) {
  weft::ThreadPool pool(2, "sleep-bench");
  Samples samples;
  {
    Load load(pool, static_cast<int>(state.range(0)));
    for (auto _ : state) {
      std::vector<weft::Lazy<void>> sleepers;
      for (int i = 0; i < kSleepers; ++i) sleepers.push_back(sleeper(samples));
      for (auto& result : weft::syncAwait(weft::collectAllPara(std::move(sleepers)), &pool)) {
        result.value();
      }
    }
  }
  samples.report(state);
}
BENCHMARK(BM_Sleep_Accuracy)->ArgName("load")->Arg(0)->Arg(4)->Arg(16)->UseRealTime();

void BM_Sleep_Accuracy_BusyWorker(benchmark::State& state) {
  weft::ThreadPool pool(2, "sleep-bench");
  Samples samples;
  {
    Hog hog(pool, std::chrono::milliseconds(state.range(0)));
    for (auto _ : state) {
      std::vector<weft::Lazy<void>> sleepers;
      for (int i = 0; i < kSleepers; ++i) sleepers.push_back(sleeper(samples));
      for (auto& result : weft::syncAwait(weft::collectAllPara(std::move(sleepers)), &pool)) {
        result.value();
      }
    }
  }
  samples.report(state);
}
BENCHMARK(BM_Sleep_Accuracy_BusyWorker)->ArgName("hog_ms")->Arg(20)->UseRealTime();

void BM_Baseline_SleepFor_Accuracy(benchmark::State& state) {
  weft::ThreadPool pool(2, "sleep-bench");
  Samples samples;
  {
    Load load(pool, static_cast<int>(state.range(0)));
    for (auto _ : state) {
      const auto deadline = Clock::now() + kSleep;
      std::this_thread::sleep_until(deadline);
      samples.add(Clock::now() - deadline);
    }
  }
  samples.report(state);
}
BENCHMARK(BM_Baseline_SleepFor_Accuracy)->ArgName("load")->Arg(0)->Arg(4)->Arg(16)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
