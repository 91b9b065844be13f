// ThreadPool throughput, read against baselines in the same binary:
//  - MutexQueuePool: the textbook pool (one std::mutex + std::condition_variable around
//    one FIFO, N threads) running exactly the same workloads through the same Executor
//    interface, so ThreadPool/MutexQueuePool is the gain from per-worker queues,
//    stealing and the wake-up protocol;
//  - ThreadHandOff: two std::threads passing a token back and forth (atomic wait/notify),
//    the cost of a cross-thread hand-off that the single-threaded ping-pong avoids.
//
// Workloads:
//  - ScheduleRun: one outside thread schedules 100,000 callables, then waits for all.
//  - PingPong: two coroutines hand control to each other through the executor's queue
//    (each hop is one schedule(handle) + one resume); on ThreadPool(1) this is the event
//    loop's fast path. Reported per hop.
//  - SpawnTree: a binary tree of callables, each scheduling its two children from inside
//    the pool (local pushes, stealing); 65,535 jobs per iteration.
//  - CoroutineFanOut: 50 coroutines each hop through the pool 50 times, then join; the
//    shape of collectAllPara over 50-deep chains, without the coro/ library.

#include <benchmark/benchmark.h>

#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/executors/detail/job.h"
#include "weft/executors/detail/ring_buffer.h"
#include "weft/executors/executor.h"
#include "weft/executors/thread_pool.h"

namespace weft::bench {
namespace {

// WEFT_BENCH_ITERATIONS=n fixes every benchmark's iteration count (no calibration runs),
// so that `valgrind --tool=callgrind` gives repeatable instruction counts: a run of 2n
// minus a run of n, over n, is one iteration (as for coro/lazy_benchmark).
void fixIterations(benchmark::internal::Benchmark* b) {
  const char* fixed = std::getenv("WEFT_BENCH_ITERATIONS");
  if (fixed != nullptr && std::atol(fixed) > 0) b->Iterations(std::atol(fixed));
}

// Baseline: one lock, one queue, one condition variable.
class MutexQueuePool final : public Executor {
 public:
  explicit MutexQueuePool(std::size_t threads) : Executor("mutex-queue") {
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~MutexQueuePool() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    nonEmpty_.notify_all();
    for (auto& t : threads_) t.join();
  }

  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override { push(detail::WorkItem::fromHandle(h)); }
  bool currentThreadInExecutor() const noexcept override { return false; }

 private:
  void scheduleJob(detail::Job* job) override { push(detail::WorkItem::fromJob(job)); }

  void push(detail::WorkItem item) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push(item);
    }
    nonEmpty_.notify_one();
  }

  void run() {
    for (;;) {
      detail::WorkItem item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        nonEmpty_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = queue_.pop();
      }
      item.run();
    }
  }

  std::mutex mutex_;
  std::condition_variable nonEmpty_;
  detail::RingBuffer<detail::WorkItem> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Blocks until `count` reaches `target` (futex wait; no spinning measured as work).
void waitUntil(std::atomic<std::int64_t>& count, std::int64_t target) {
  for (std::int64_t seen = count.load(); seen != target; seen = count.load()) {
    count.wait(seen);
  }
}

void arrive(std::atomic<std::int64_t>& count, std::int64_t target) {
  if (count.fetch_add(1) + 1 == target) count.notify_all();
}

// A fire-and-forget coroutine: starts eagerly, frees itself at the end.
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

struct ResumeOn {
  Executor& executor;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const { executor.schedule(h); }
  void await_resume() const noexcept {}
};

// ---------------------------------------------------------------------------------------
constexpr std::int64_t kScheduleRunJobs = 100'000;

template <class Pool>
void scheduleRun(benchmark::State& state) {
  Pool pool(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    std::atomic<std::int64_t> done{0};
    for (std::int64_t i = 0; i < kScheduleRunJobs; ++i) {
      pool.schedule([&done] { arrive(done, kScheduleRunJobs); });
    }
    waitUntil(done, kScheduleRunJobs);
  }
  state.SetItemsProcessed(state.iterations() * kScheduleRunJobs);
}

void BM_ThreadPool_ScheduleRun(benchmark::State& state) { scheduleRun<ThreadPool>(state); }
void BM_MutexQueuePool_ScheduleRun(benchmark::State& state) { scheduleRun<MutexQueuePool>(state); }
BENCHMARK(BM_ThreadPool_ScheduleRun)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Apply(fixIterations);
BENCHMARK(BM_MutexQueuePool_ScheduleRun)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Apply(fixIterations);

// ---------------------------------------------------------------------------------------
constexpr std::int64_t kHops = 100'000;

Detached pingPongPlayer(Executor& ex, std::int64_t hops, std::atomic<std::int64_t>& done) {
  for (std::int64_t i = 0; i < hops; ++i) co_await ResumeOn{ex};
  arrive(done, 2);
}

template <class Pool>
void pingPong(benchmark::State& state) {
  Pool pool(1);
  for (auto _ : state) {
    std::atomic<std::int64_t> done{0};
    // Both players start on the pool's thread, so every later hop is a push to and a
    // pop from the same queue, alternating between the two coroutines.
    pool.schedule([&] {
      pingPongPlayer(pool, kHops / 2, done);
      pingPongPlayer(pool, kHops / 2, done);
    });
    waitUntil(done, 2);
  }
  state.SetItemsProcessed(state.iterations() * kHops);
}

void BM_ThreadPool_PingPong(benchmark::State& state) { pingPong<ThreadPool>(state); }
void BM_MutexQueuePool_PingPong(benchmark::State& state) { pingPong<MutexQueuePool>(state); }
BENCHMARK(BM_ThreadPool_PingPong)->UseRealTime()->Apply(fixIterations);
BENCHMARK(BM_MutexQueuePool_PingPong)->UseRealTime()->Apply(fixIterations);

// Baseline: the same number of hand-offs between two threads.
void BM_ThreadHandOff_PingPong(benchmark::State& state) {
  std::atomic<std::int64_t> turn{0};  // even: main's turn, odd: the partner's
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    std::int64_t expected = 1;
    for (;;) {
      for (std::int64_t seen = turn.load(); seen != expected; seen = turn.load()) {
        if (stop.load()) return;
        turn.wait(seen);
      }
      turn.store(expected + 1);
      turn.notify_one();
      expected += 2;
    }
  });
  std::int64_t next = 0;
  for (auto _ : state) {
    for (std::int64_t i = 0; i < kHops / 2; ++i) {
      turn.store(next + 1);
      turn.notify_one();
      for (std::int64_t seen = turn.load(); seen != next + 2; seen = turn.load()) {
        turn.wait(seen);
      }
      next += 2;
    }
  }
  stop.store(true);
  turn.fetch_add(1);
  turn.notify_one();
  partner.join();
  state.SetItemsProcessed(state.iterations() * kHops);
}
BENCHMARK(BM_ThreadHandOff_PingPong)->UseRealTime()->Apply(fixIterations);

// ---------------------------------------------------------------------------------------
constexpr int kTreeDepth = 15;  // 2^16 - 1 jobs
constexpr std::int64_t kTreeJobs = (std::int64_t{1} << (kTreeDepth + 1)) - 1;

template <class Pool>
struct Tree {
  Pool& pool;
  std::atomic<std::int64_t>& done;
  void spawn(int depth) {
    pool.schedule([this, depth] {
      if (depth < kTreeDepth) {
        spawn(depth + 1);
        spawn(depth + 1);
      }
      arrive(done, kTreeJobs);
    });
  }
};

template <class Pool>
void spawnTree(benchmark::State& state) {
  Pool pool(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    std::atomic<std::int64_t> done{0};
    Tree<Pool> tree{pool, done};
    tree.spawn(0);
    waitUntil(done, kTreeJobs);
  }
  state.SetItemsProcessed(state.iterations() * kTreeJobs);
}

void BM_ThreadPool_SpawnTree(benchmark::State& state) { spawnTree<ThreadPool>(state); }
void BM_MutexQueuePool_SpawnTree(benchmark::State& state) { spawnTree<MutexQueuePool>(state); }
BENCHMARK(BM_ThreadPool_SpawnTree)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Apply(fixIterations);
BENCHMARK(BM_MutexQueuePool_SpawnTree)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Apply(fixIterations);

// ---------------------------------------------------------------------------------------
constexpr std::int64_t kFanOut = 50;
constexpr std::int64_t kChainHops = 50;

Detached chain(Executor& ex, std::atomic<std::int64_t>& done) {
  for (std::int64_t i = 0; i < kChainHops; ++i) co_await ResumeOn{ex};
  arrive(done, kFanOut);
}

template <class Pool>
void coroutineFanOut(benchmark::State& state) {
  Pool pool(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    std::atomic<std::int64_t> done{0};
    pool.schedule([&] {
      for (std::int64_t i = 0; i < kFanOut; ++i) chain(pool, done);
    });
    waitUntil(done, kFanOut);
  }
  state.SetItemsProcessed(state.iterations() * kFanOut * kChainHops);
}

void BM_ThreadPool_CoroutineFanOut(benchmark::State& state) { coroutineFanOut<ThreadPool>(state); }
void BM_MutexQueuePool_CoroutineFanOut(benchmark::State& state) {
  coroutineFanOut<MutexQueuePool>(state);
}
BENCHMARK(BM_ThreadPool_CoroutineFanOut)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Apply(fixIterations);
BENCHMARK(BM_MutexQueuePool_CoroutineFanOut)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Apply(fixIterations);

}  // namespace
}  // namespace weft::bench

BENCHMARK_MAIN();
