// ThreadPool's timers (executors/thread_pool_timers.cc, "Timers"): a timer armed on a worker
// lives in that worker's heap and is fired by that worker; one armed outside the pool goes
// to the timer thread; a busy worker's timers are taken by the timer thread's backstop;
// shutdown ends every armed timer. No test here waits for time to pass as a hand-shake:
// deadlines are either far away (the timer must not fire) or short, with the test
// waiting, under a watchdog's generous bound, for what the timer does.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "test/support/io_backends.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/thread_pool.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = TimerEntry::Clock;

// Turns a hang into a failure: no single wait here legitimately takes this long.
constexpr auto kTimeout = 60s;

// A one-shot flag that one thread sets and another waits for, with a timeout.
class Flag {
 public:
  void set() {
    std::lock_guard<std::mutex> lock(mutex_);
    set_ = true;
    changed_.notify_all();
  }
  [[nodiscard]] bool waitFor(std::chrono::milliseconds timeout = kTimeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return set_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool set_ = false;
};

// Runs `f()` on one of `pool`'s workers and returns once it has.
template <class F>
void onWorker(ThreadPool& pool, F f) {
  Flag done;
  pool.schedule([&] {
    f();
    done.set();
  });
  ASSERT_TRUE(done.waitFor());
}

// A timer that records where its fire function ran and whether it was a shutdown.
struct Probe : TimerEntry {
  Probe() {
    complete = [](detail::Job* job, bool run) noexcept {
      auto* self = static_cast<Probe*>(job);
      self->firedOn = std::this_thread::get_id();
      self->firedOnWorker = ThreadPool::current() != nullptr;
      self->wasShutDown = self->shutDown || !run;
      self->fireCount.fetch_add(1);
      self->fired.set();
    };
  }
  std::thread::id firedOn;
  bool firedOnWorker = false;
  bool wasShutDown = false;
  std::atomic<int> fireCount{0};
  Flag fired;
};

// Shuts the pool down when the scope ends (declared after what its jobs use).
class ShutdownOnExit {
 public:
  explicit ShutdownOnExit(ThreadPool& pool) : pool_(pool) {}
  ~ShutdownOnExit() { pool_.shutdown(); }

 private:
  ThreadPool& pool_;
};

TEST(ThreadPoolTimersTest, ATimerArmedOnAWorkerGoesToThatWorkersHeapNotTheTimerThread) {
  ThreadPool pool(2, "own-heap");
  Probe probe;
  probe.deadline = Clock::now() + 1h;  // never reached: cancelled below
  onWorker(pool, [&] { pool.scheduleTimer(probe); });
  const ThreadPool::TimerCounts counts = pool.timerCounts();
  EXPECT_EQ(counts.onWorkers, 1u);
  EXPECT_EQ(counts.onTimerThread, 0u);
  // Cancelled from a thread outside the pool: the entry names its heap.
  EXPECT_TRUE(pool.cancelTimer(probe));
  EXPECT_FALSE(pool.cancelTimer(probe));
  EXPECT_EQ(pool.timerCounts().onWorkers, 0u);
  pool.shutdown();
  EXPECT_EQ(probe.fireCount.load(), 0);  // not even flushed by the shutdown
}

TEST(ThreadPoolTimersTest, ATimerArmedOnAWorkerFiresOnThatWorker) {
  ThreadPool pool(2, "same-worker");
  ShutdownOnExit shutdown(pool);
  for (int round = 0; round < 20; ++round) {
    Probe probe;
    std::thread::id armedOn;
    onWorker(pool, [&] {
      armedOn = std::this_thread::get_id();
      probe.deadline = Clock::now() + 2ms;
      pool.scheduleTimer(probe);
      EXPECT_EQ(pool.timerCounts().onTimerThread, 0u);
    });
    ASSERT_TRUE(probe.fired.waitFor());
    EXPECT_FALSE(probe.wasShutDown);
    EXPECT_TRUE(probe.firedOnWorker);
    // Its worker fires it, unless the worker got no CPU for a millisecond past the
    // deadline (a busy machine): then the timer thread's backstop handed it to any worker,
    // and says so.
    if (pool.timerCounts().takenFromBusyWorkers == 0) {
      EXPECT_EQ(probe.firedOn, armedOn);
    }
  }
  EXPECT_EQ(pool.timerCounts().onTimerThread, 0u);
}

TEST(ThreadPoolTimersTest, ASleepOnAWorkerResumesOnThatWorker) {
  ThreadPool pool(2, "sleeper");
  ShutdownOnExit shutdown(pool);
  for (int round = 0; round < 20; ++round) {
    const auto [before, after] = syncAwait(
        []() -> Lazy<std::pair<std::thread::id, std::thread::id>> {
          const std::thread::id before = std::this_thread::get_id();
          co_await sleep(1ms);
          co_return std::pair{before, std::this_thread::get_id()};
        }(),
        &pool);
    if (pool.timerCounts().takenFromBusyWorkers == 0) {
      EXPECT_EQ(before, after);
    }
  }
  EXPECT_EQ(pool.timerCounts().onTimerThread, 0u);
}

TEST(ThreadPoolTimersTest, WorkerTimersFireInDeadlineOrderAndEqualDeadlinesInArmingOrder) {
  constexpr int kTimers = 64;
  ThreadPool pool(1, "ordered");  // one worker: whoever fires them, they run in one sequence
  ShutdownOnExit shutdown(pool);
  struct Ordered : TimerEntry {
    std::vector<int>* order;
    int index;
    Flag* last;
    int count;
  };
  std::vector<int> order;
  Flag allFired;
  std::vector<Ordered> timers(kTimers);
  // Deadlines in a shuffled order, in pairs that share a deadline.
  std::vector<int> slots(kTimers);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937(29));
  onWorker(pool, [&] {
    const auto base = Clock::now() + 5ms;
    for (int i = 0; i < kTimers; ++i) {
      Ordered& timer = timers[i];
      timer.order = &order;
      timer.index = i;
      timer.last = &allFired;
      timer.count = kTimers;
      timer.deadline = base + (slots[i] / 2) * 50us;
      timer.complete = [](detail::Job* job, bool) noexcept {
        auto* self = static_cast<Ordered*>(job);
        self->order->push_back(self->index);
        if (static_cast<int>(self->order->size()) == self->count) self->last->set();
      };
      pool.scheduleTimer(timer);
    }
  });
  ASSERT_TRUE(allFired.waitFor());
  std::vector<int> expected(kTimers);
  std::iota(expected.begin(), expected.end(), 0);
  std::stable_sort(expected.begin(), expected.end(),
                   [&](int a, int b) { return slots[a] / 2 < slots[b] / 2; });
  EXPECT_EQ(order, expected);
}

TEST(ThreadPoolTimersTest, ATimerArmedOutsideThePoolFiresOnAWorkerThroughTheTimerThread) {
  ThreadPool pool(2, "outside");
  ShutdownOnExit shutdown(pool);
  Probe far;
  far.deadline = Clock::now() + 1h;
  pool.scheduleTimer(far);  // from this thread: the timer thread's heap
  EXPECT_EQ(pool.timerCounts().onTimerThread, 1u);
  EXPECT_EQ(pool.timerCounts().onWorkers, 0u);
  EXPECT_TRUE(pool.cancelTimer(far));
  EXPECT_EQ(pool.timerCounts().onTimerThread, 0u);

  Probe soon;
  soon.deadline = Clock::now() + 1ms;
  pool.scheduleTimer(soon);
  ASSERT_TRUE(soon.fired.waitFor());
  EXPECT_TRUE(soon.firedOnWorker);
  EXPECT_FALSE(soon.wasShutDown);
  EXPECT_FALSE(pool.cancelTimer(soon));
}

TEST(ThreadPoolTimersTest, AnEntryThatNeverExpiresGoesToTheTimerThreadEvenFromAWorker) {
  ThreadPool pool(1, "guard");
  Probe guard;
  guard.deadline = Clock::time_point::max();
  onWorker(pool, [&] { pool.scheduleTimer(guard); });
  EXPECT_EQ(pool.timerCounts().onTimerThread, 1u);
  EXPECT_EQ(pool.timerCounts().onWorkers, 0u);
  pool.shutdown();  // fires it, flagged
  ASSERT_TRUE(guard.fired.waitFor());
  EXPECT_TRUE(guard.wasShutDown);
}

// The worker that armed the timer spins (one long item) until the timer has fired: only
// the timer thread's backstop can hand the timer to the other worker.
TEST(ThreadPoolTimersTest, ABusyWorkersTimerFiresOnAnotherWorker) {
  ThreadPool pool(2, "busy");
  ShutdownOnExit shutdown(pool);
  Probe probe;
  std::atomic<bool> armed{false};
  std::thread::id busyWorker;
  Flag spun;
  pool.schedule([&] {
    busyWorker = std::this_thread::get_id();
    probe.deadline = Clock::now() + 2ms;
    pool.scheduleTimer(probe);
    armed = true;
    const auto giveUp = Clock::now() + kTimeout;
    while (probe.fireCount.load() == 0 && Clock::now() < giveUp) std::this_thread::yield();
    spun.set();
  });
  ASSERT_TRUE(probe.fired.waitFor());
  ASSERT_TRUE(spun.waitFor());
  EXPECT_NE(probe.firedOn, busyWorker);
  EXPECT_TRUE(probe.firedOnWorker);
  EXPECT_FALSE(probe.wasShutDown);
  EXPECT_GE(pool.timerCounts().takenFromBusyWorkers, 1u);
}

// A sleep whose worker then runs a long item (queued behind the sleeping coroutine on the
// same worker, spinning until the sleep has ended) still ends: on its own worker if the
// other worker stole the spinner, else through the backstop.
TEST(ThreadPoolTimersTest, ASleepWhoseWorkerIsBusyStillEnds) {
  ThreadPool pool(2, "busy-sleep");
  ShutdownOnExit shutdown(pool);
  std::atomic<bool> slept{false};
  Flag spun;
  Flag done;
  [](ThreadPool& pool, std::atomic<bool>& slept,
     Flag& spun) -> Lazy<void> {
    pool.schedule([&slept, &spun] {  // on this worker's queue
      const auto giveUp = Clock::now() + kTimeout;
      while (!slept.load() && Clock::now() < giveUp) std::this_thread::yield();
      spun.set();
    });
    co_await sleep(1ms);
    slept = true;
  }(pool, slept, spun)
                        .via(&pool)
                        .start([&done](Try<void>&& result) {
                          EXPECT_TRUE(result.hasValue());
                          done.set();
                        });
  ASSERT_TRUE(done.waitFor());
  ASSERT_TRUE(spun.waitFor());
  EXPECT_TRUE(slept.load());
}

TEST(ThreadPoolTimersTest, ShutdownEndsArmedWorkerSleepsWithExecutorShutDownAndRefusesNewOnes) {
  constexpr int kSleepers = 8;
  auto pool = std::make_unique<ThreadPool>(2, "stopping");
  std::atomic<int> endedWithShutdown{0};
  std::atomic<int> refusedAfter{0};
  std::atomic<int> finished{0};
  for (int i = 0; i < kSleepers; ++i) {
    [](std::atomic<int>& ended,
       std::atomic<int>& refused) -> Lazy<void> {
      try {
        co_await sleep(1h);
      } catch (const ExecutorShutDown&) {
        ended.fetch_add(1);
      }
      // During the drain: a new sleep on this worker is refused at once.
      try {
        co_await sleep(1h);
      } catch (const ExecutorShutDown&) {
        refused.fetch_add(1);
      }
    }(endedWithShutdown, refusedAfter)
                                         .via(pool.get())
                                         .start([&finished](Try<void>&& result) {
                                           EXPECT_TRUE(result.hasValue());
                                           finished.fetch_add(1);
                                         });
  }
  // Hand-shake: every sleep is armed (in the workers' heaps) before the shutdown begins.
  const auto giveUp = Clock::now() + kTimeout;
  while (pool->timerCounts().onWorkers != kSleepers) {
    ASSERT_LT(Clock::now(), giveUp);
    std::this_thread::yield();
  }
  pool->shutdown();  // would wait an hour if it did not end the sleeps
  EXPECT_EQ(finished.load(), kSleepers);
  EXPECT_EQ(endedWithShutdown.load(), kSleepers);
  EXPECT_EQ(refusedAfter.load(), kSleepers);
  EXPECT_EQ(pool->timerCounts().onWorkers, 0u);
}

// A fire function cancels another timer of the same worker, due right after its own: the
// worker pops one timer at a time, so the other is still in its heap (or on the due list,
// if the backstop took both), the cancel succeeds and it never fires. (On two workers, if
// the backstop took both, the other worker may take the second from the due list while
// the first one's fire function runs: then the cancel fails and the second fires once.)
TEST(ThreadPoolTimersTest, AFireFunctionMayCancelAnotherTimerOfTheSameWorker) {
  for (std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
    ThreadPool pool(threads, "cancel-peer");
    ShutdownOnExit shutdown(pool);
    struct Canceller : TimerEntry {
      ThreadPool* pool;
      TimerEntry* victim;
      std::atomic<int> cancelled{-1};  // 1: cancel returned true, 0: false
    } first;
    Probe second;  // due just after `first`
    Probe last;    // later: once it fired, `second` would have fired too (or is firing)
    first.pool = &pool;
    first.victim = &second;
    first.complete = [](detail::Job* job, bool) noexcept {
      auto* self = static_cast<Canceller*>(job);
      self->cancelled = self->pool->cancelTimer(*self->victim) ? 1 : 0;
    };
    onWorker(pool, [&] {
      const auto due = Clock::now() + 1ms;
      first.deadline = due;
      second.deadline = due + 1us;
      last.deadline = due + 2ms;
      pool.scheduleTimer(second);  // armed first: `first` cannot fire before it is armed
      pool.scheduleTimer(first);
      pool.scheduleTimer(last);
    });
    ASSERT_TRUE(last.fired.waitFor());
    const int cancelled = first.cancelled.load();
    if (threads == 1 || pool.timerCounts().takenFromBusyWorkers == 0) {
      EXPECT_EQ(cancelled, 1) << threads << " threads";
    }
    if (cancelled == 1) {
      EXPECT_EQ(second.fireCount.load(), 0);
    } else {
      EXPECT_EQ(cancelled, 0);
      ASSERT_TRUE(second.fired.waitFor());
      EXPECT_EQ(second.fireCount.load(), 1);
    }
  }
}

// Timers armed on workers and cancelled from outside at the same time: each fires exactly
// once or is cancelled (cancel returned true), never both, never neither.
TEST(ThreadPoolTimersTest, CancellingWorkerTimersFromAnotherThreadWhileTheyFire) {
  constexpr int kTimers = 2000;
  struct Armed : Probe {
    std::atomic<bool> armed{false};
  };
  std::vector<std::unique_ptr<Armed>> probes;
  for (int i = 0; i < kTimers; ++i) probes.push_back(std::make_unique<Armed>());
  std::vector<bool> cancelled(kTimers, false);
  {
    ThreadPool pool(2, "cancel-race");
    ShutdownOnExit shutdown(pool);
    for (int i = 0; i < kTimers; ++i) {
      pool.schedule([&pool, &probe = *probes[i], i] {
        probe.deadline = Clock::now() + std::chrono::microseconds(i % 50);
        pool.scheduleTimer(probe);
        probe.armed.store(true, std::memory_order_release);
      });
    }
    for (int i = 0; i < kTimers; ++i) {
      // Cancelled only once armed (cancelling an entry being armed is not allowed).
      while (!probes[i]->armed.load(std::memory_order_acquire)) std::this_thread::yield();
      cancelled[i] = pool.cancelTimer(*probes[i]);
    }
    for (int i = 0; i < kTimers; ++i) {
      if (!cancelled[i]) {
        ASSERT_TRUE(probes[i]->fired.waitFor()) << i;  // it fired, or fires
      }
    }
  }
  for (int i = 0; i < kTimers; ++i) {
    EXPECT_EQ(probes[i]->fireCount.load(), cancelled[i] ? 0 : 1) << i;
  }
}

// Executor::scheduleShutdownTimer (what io's shutdown guard arms, through Executor only):
// the entry never expires, cancelTimer disarms it, and shutdown() fires it on a worker with
// shutDown set.
TEST(ThreadPoolTimersTest, AShutdownTimerFiresOnAWorkerWhenTheShutdownBegins) {
  Probe cancelled, fired;
  ThreadPool pool(2, "shutdown-timer");
  Executor& executor = pool;
  ASSERT_TRUE(executor.scheduleShutdownTimer(cancelled));
  EXPECT_EQ(cancelled.deadline, Clock::time_point::max());
  EXPECT_TRUE(executor.cancelTimer(cancelled));
  ASSERT_TRUE(executor.scheduleShutdownTimer(fired));
  pool.shutdown();
  ASSERT_TRUE(fired.fired.waitFor());
  EXPECT_EQ(fired.fireCount.load(), 1);
  EXPECT_TRUE(fired.firedOnWorker);
  EXPECT_TRUE(fired.wasShutDown);
  EXPECT_EQ(cancelled.fireCount.load(), 0);
  EXPECT_THROW(executor.scheduleShutdownTimer(cancelled), ExecutorShutDown);
}

// A worker with I/O in flight parks in its event loop: its timer must wake it there
// (IoLoop::runFor), on both backends.
class ThreadPoolLoopTimersTest : public ::testing::TestWithParam<IoBackendChoice> {};

TEST_P(ThreadPoolLoopTimersTest, AWorkerParkedInItsEventLoopFiresItsTimer) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  ThreadPoolOptions options;
  options.threads = 1;
  options.name = "loop-timer";
  options.ioBackend = GetParam();
  ThreadPool pool(options);
  int pipeFds[2];
  ASSERT_EQ(::pipe2(pipeFds, O_NONBLOCK | O_CLOEXEC), 0);
  struct Wait : IoOperation {
    Flag done;
  } wait;
  wait.opcode = IoOpcode::kPollReadable;
  wait.fd = pipeFds[0];
  wait.complete = [](IoOperation& op) noexcept { static_cast<Wait&>(op).done.set(); };
  Probe probe;
  onWorker(pool, [&] {
    ASSERT_FALSE(IoLoop::current()->submit(wait));  // the pipe is empty: it waits
    probe.deadline = Clock::now() + 2ms;
    pool.scheduleTimer(probe);
  });
  ASSERT_TRUE(probe.fired.waitFor());
  EXPECT_TRUE(probe.firedOnWorker);
  EXPECT_FALSE(probe.wasShutDown);
  ASSERT_EQ(::write(pipeFds[1], "x", 1), 1);  // ends the wait
  ASSERT_TRUE(wait.done.waitFor());
  pool.shutdown();
  ::close(pipeFds[0]);
  ::close(pipeFds[1]);
}

INSTANTIATE_TEST_SUITE_P(Backends, ThreadPoolLoopTimersTest, test::kIoBackends,
                         test::ioBackendName);

}  // namespace
}  // namespace weft
