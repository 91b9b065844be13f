#include "weft/coro/sleep.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/detail/job.h"
#include "weft/executors/detail/timer_queue.h"
#include "weft/executors/inline_executor.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/manual_executor.h"
#include "test/support/thread_states.h"
#include "test/support/timer_probe_executor.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::Watchdog;

std::string currentThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return name;
}

using ProbeExecutor = test::TimerProbeExecutor;

// The lower bound is the semantics of sleep (not a timing threshold): waking early is a
// bug on any machine, however loaded.
TEST(SleepTest, SleepsAtLeastTheDurationOnAPool) {
  ThreadPool pool(2);
  auto body = [&]() -> Lazy<bool> {
    auto start = std::chrono::steady_clock::now();
    co_await sleep(5ms);
    co_return std::chrono::steady_clock::now() - start >= 5ms && pool.currentThreadInExecutor();
  };
  EXPECT_TRUE(syncAwait(body().via(&pool)));
}

// Sleeps until one sleep has suspended and returns the name of the thread that resumed
// it. A sleep whose timer fires while its await_suspend still runs (the thread preempted
// for the whole duration, on a loaded machine) rightly continues on its own thread
// without suspending: such an attempt is not the case under test, and is retried, rather
// than hoping 20 ms is "long enough to be armed".
Lazy<std::string> nameOfTheThreadThatEndsASleep() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::thread::id before = std::this_thread::get_id();
    const auto start = std::chrono::steady_clock::now();
    co_await sleep(20ms);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
    if (std::this_thread::get_id() != before) co_return currentThreadName();
  }
  co_return "(no sleep suspended in 100 attempts)";
}

TEST(SleepTest, WithoutAnExecutorResumesOnTheTimerThread) {
  EXPECT_EQ(syncAwait(nameOfTheThreadThatEndsASleep()), "weft-timer");
}

TEST(SleepTest, OnAnInlineExecutorResumesOnTheTimerThread) {
  InlineExecutor inlineExecutor;
  EXPECT_EQ(syncAwait(nameOfTheThreadThatEndsASleep().via(&inlineExecutor)), "weft-timer");
}

TEST(SleepTest, OutsideAWeftCoroutineWorksToo) {
  auto start = std::chrono::steady_clock::now();
  syncAwait(sleep(1ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1ms);
}

TEST(SleepTest, ZeroOrNegativeDurationDoesNotSuspend) {
  auto body = []() -> Lazy<bool> {
    const auto self = std::this_thread::get_id();
    co_await sleep(0ms);
    co_await sleep(-5s);
    co_await sleepUntil(std::chrono::steady_clock::now() - 1s);
    co_return std::this_thread::get_id() == self;  // never went through the timer thread
  };
  EXPECT_TRUE(syncAwait(body()));
}

TEST(SleepTest, SleepUntilAcceptsOtherClocks) {
  ThreadPool pool(1);
  auto body = []() -> Lazy<bool> {
    auto deadline = std::chrono::system_clock::now() + 3ms;
    co_await sleepUntil(deadline);
    co_return std::chrono::system_clock::now() >= deadline - 1ms;  // a clock jump may shift it
  };
  EXPECT_TRUE(syncAwait(body().via(&pool)));
}

// Many timers with shuffled deadlines wake in deadline order (a single worker makes the
// wake-up order observable; equal deadlines keep arming order). Every sleeper must be
// armed before the first deadline (one whose deadline has passed does not suspend at
// all): the deadlines start `margin` ahead, and a last branch, which collectAll starts
// only once every sleeper has read the clock and suspended, records when that was. If
// it was past the first deadline (a loaded machine, a sanitizer), the run proves
// nothing: false, and the caller tries again with a larger margin. No timing is judged.
bool wokeInDeadlineOrder(Executor* executor, std::chrono::milliseconds margin) {
  constexpr int kTimers = 200;
  std::vector<int> slot(kTimers);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), std::mt19937(42));
  std::mutex mutex;
  std::vector<int> woke;
  const auto base = std::chrono::steady_clock::now() + margin;
  auto sleeper = [&](int i) -> Lazy<void> {
    co_await sleepUntil(base + slot[i] / 4 * 200us);  // groups of 4 equal deadlines
    std::lock_guard lock(mutex);
    woke.push_back(i);
  };
  std::chrono::steady_clock::time_point allArmed{};
  auto lastBranch = [&]() -> Lazy<void> {
    allArmed = std::chrono::steady_clock::now();
    co_return;
  };
  std::vector<Lazy<void>> sleepers;
  for (int i = 0; i < kTimers; ++i) sleepers.push_back(sleeper(i));
  sleepers.push_back(lastBranch());
  auto all = collectAll(std::move(sleepers));
  if (executor != nullptr) {
    syncAwait(std::move(all), executor);
  } else {
    syncAwait(std::move(all));
  }
  if (allArmed >= base) return false;  // some sleeper may have found its deadline passed
  EXPECT_EQ(woke.size(), std::size_t{kTimers});
  for (int k = 1; k < static_cast<int>(woke.size()); ++k) {
    const int a = woke[k - 1], b = woke[k];
    const int groupA = slot[a] / 4, groupB = slot[b] / 4;
    EXPECT_LE(groupA, groupB) << "timer " << b << " woke after a later one";
    if (groupA == groupB) {
      EXPECT_LT(a, b) << "equal deadlines must keep arming order";
    }
  }
  return true;
}

void expectWakeInDeadlineOrder(Executor* executor) {
  auto margin = 150ms;
  while (!wokeInDeadlineOrder(executor, margin)) {
    margin *= 2;
    ASSERT_LT(margin, 10min) << "arming 200 timers never took less than " << margin.count()
                             << " ms";
  }
}

TEST(SleepTest, ManyTimersWakeInDeadlineOrderOnASingleThreadPool) {
  ThreadPool pool(1);
  expectWakeInDeadlineOrder(&pool);
}

TEST(SleepTest, ManyTimersWakeInDeadlineOrderWithoutAnExecutor) {
  expectWakeInDeadlineOrder(nullptr);
}

TEST(SleepTest, ManySleepersOnATwoThreadPoolAllWake) {
  ThreadPool pool(2);
  std::atomic<int> woke{0};
  auto sleeper = [&](int i) -> Lazy<void> {
    co_await sleep(std::chrono::microseconds(i % 50 * 20));
    woke.fetch_add(1);
  };
  std::vector<Lazy<void>> sleepers;
  for (int i = 0; i < 2000; ++i) sleepers.push_back(sleeper(i));
  syncAwait(collectAllPara(std::move(sleepers)), &pool);
  EXPECT_EQ(woke.load(), 2000);
}

// --- cancellation ------------------------------------------------------------------------

TEST(SleepCancellationTest, CancelledBeforeThrowsWithoutArmingATimer) {
  ThreadPool pool(1);
  ProbeExecutor probe(pool);
  CancellationSource source;
  source.requestCancellation();
  auto body = []() -> Lazy<void> { co_await sleep(1h); };
  Watchdog watchdog(60s, "CancelledBeforeThrowsWithoutArmingATimer");
  EXPECT_THROW(syncAwait(withCancellation(source.token(), body()).via(&probe)), OperationCancelled);
  EXPECT_EQ(probe.armed.load(), 0);
}

TEST(SleepCancellationTest, CancelledDuringThrowsAndDisarmsTheTimer) {
  ThreadPool pool(2);
  ProbeExecutor probe(pool);
  CancellationSource source;
  std::atomic<bool> completedNormally{false};
  auto body = [&]() -> Lazy<void> {
    co_await sleep(1h);
    completedNormally = true;
  };
  std::thread canceller([&] {
    while (probe.armed.load() == 0) std::this_thread::yield();
    source.requestCancellation();
  });
  Watchdog watchdog(60s, "CancelledDuringThrowsAndDisarmsTheTimer");
  bool resumedOnExecutor = false;
  auto outer = [&]() -> Lazy<void> {
    try {
      co_await withCancellation(source.token(), body());
    } catch (...) {
      resumedOnExecutor = pool.currentThreadInExecutor();
      throw;
    }
  };
  EXPECT_THROW(syncAwait(outer().via(&probe)), OperationCancelled);
  canceller.join();
  EXPECT_FALSE(completedNormally);
  EXPECT_TRUE(resumedOnExecutor);       // not on the canceller's thread
  EXPECT_EQ(probe.disarmed.load(), 1);  // the timer entry left the heap at once
}

TEST(SleepCancellationTest, CancelledAfterCompletionChangesNothing) {
  ThreadPool pool(1);
  CancellationSource source;
  auto body = []() -> Lazy<int> {
    co_await sleep(1ms);
    co_return 5;
  };
  EXPECT_EQ(syncAwait(withCancellation(source.token(), body()).via(&pool)), 5);
  EXPECT_TRUE(source.requestCancellation());
}

TEST(SleepCancellationTest, CancelledWithoutAnExecutorThrowsOnTheCancellingThread) {
  CancellationSource source;
  auto body = [&]() -> Lazy<std::thread::id> {
    try {
      co_await sleep(1h);
    } catch (const OperationCancelled&) {
      co_return std::this_thread::get_id();
    }
    co_return std::thread::id();
  };
  Watchdog watchdog(60s, "CancelledWithoutAnExecutorThrowsOnTheCancellingThread");
  // Hand-shake: the cancellation comes once the sleep is armed (it is in the process-wide
  // timer queue) and this thread, after that, is blocked (in syncAwait: the coroutine has
  // suspended). So the cancellation resumes a suspended sleep, on the canceller's thread.
  const std::size_t armedBefore = detail::globalTimerQueue().size();
  const pid_t awaiting = test::currentThreadId();
  std::thread::id cancellerId;
  std::thread canceller([&] {
    cancellerId = std::this_thread::get_id();
    while (detail::globalTimerQueue().size() != armedBefore + 1) std::this_thread::yield();
    EXPECT_TRUE(test::waitUntilBlocked(awaiting));
    source.requestCancellation();
  });
  std::thread::id resumedOn = syncAwait(withCancellation(source.token(), body()));
  canceller.join();
  EXPECT_EQ(resumedOn, cancellerId);
}

// Short sleeps racing cancellation on a 2-thread pool: each sleep ends exactly once,
// normally or with OperationCancelled; nothing hangs, no frame leaks.
TEST(SleepCancellationTest, SleepRacingCancellationStress) {
  ThreadPool pool(2);
  Counted::reset();
  Watchdog watchdog(120s, "SleepRacingCancellationStress");
  std::mt19937 rng(7);
  int cancelled = 0, completed = 0;
  for (int round = 0; round < 2000; ++round) {
    CancellationSource source;
    const auto sleepFor = std::chrono::microseconds(rng() % 200);
    const int spin = static_cast<int>(rng() % 2000);
    auto sleeper = [&, sleepFor]() -> Lazy<bool> {
      Counted alive;
      try {
        co_await sleep(sleepFor);
        co_return true;
      } catch (const OperationCancelled&) {
        co_return false;
      }
    };
    auto canceller = [&, spin]() -> Lazy<void> {
      for (int i = 0; i < spin; ++i) std::atomic_signal_fence(std::memory_order_seq_cst);
      source.requestCancellation();
      co_return;
    };
    auto [s, c] =
        syncAwait(collectAllPara(withCancellation(source.token(), sleeper()), canceller()), &pool);
    ASSERT_TRUE(s.hasValue());
    (s.value() ? completed : cancelled)++;
  }
  EXPECT_EQ(completed + cancelled, 2000);
  EXPECT_EQ(Counted::alive(), 0);
}

// --- shutdown ----------------------------------------------------------------------------

// Chosen behaviour: ThreadPool::shutdown() does not wait for pending sleeps. Each ends at
// once with ExecutorShutDown, on a worker, while the pool drains; the coroutine sees the
// exception (it may catch it) and finishes; a sleep attempted after that throws
// ExecutorShutDown at once. No hang, no leaked frame, no lost exception.
TEST(SleepShutdownTest, ShutdownEndsPendingSleepsWithExecutorShutDown) {
  Counted::reset();
  constexpr int kSleepers = 50;
  std::atomic<int> shutDownSeen{0}, otherOutcome{0}, retriedAndRefused{0};
  Watchdog watchdog(60s, "ShutdownEndsPendingSleepsWithExecutorShutDown");
  {
    ThreadPool pool(2);
    std::atomic<int> armed{0};
    auto sleeper = [&]() -> Lazy<void> {
      Counted alive;
      armed.fetch_add(1);
      std::exception_ptr error;
      try {
        co_await sleep(1h);
      } catch (const ExecutorShutDown&) {
        error = std::current_exception();
      }
      if (error) {
        // Sleeping again during the drain is refused at once, not a hang.
        try {
          co_await sleep(1h);
        } catch (const ExecutorShutDown&) {
          retriedAndRefused.fetch_add(1);
        }
        std::rethrow_exception(error);
      }
    };
    for (int i = 0; i < kSleepers; ++i) {
      sleeper().via(&pool).start([&](Try<void>&& result) {
        try {
          result.value();
          otherOutcome.fetch_add(1);
        } catch (const ExecutorShutDown&) {
          shutDownSeen.fetch_add(1);
        } catch (...) {
          otherOutcome.fetch_add(1);
        }
      });
    }
    while (armed.load() < kSleepers) std::this_thread::yield();
    pool.shutdown();
  }
  EXPECT_EQ(shutDownSeen.load(), kSleepers);
  EXPECT_EQ(retriedAndRefused.load(), kSleepers);
  EXPECT_EQ(otherOutcome.load(), 0);
  EXPECT_EQ(Counted::alive(), 0);
}

// The ids of this process's threads (Linux: /proc/self/task). Compared as sets, so a
// thread of an earlier test that is still exiting does not disturb the checks below.
std::set<std::string> threadIds() {
  std::set<std::string> ids;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    ids.insert(task.path().filename().string());
  }
  return ids;
}

// The threads in `after` that were not in `before`.
std::vector<std::string> newThreads(const std::set<std::string>& before,
                                    const std::set<std::string>& after) {
  std::vector<std::string> added;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                      std::back_inserter(added));
  return added;
}

TEST(SleepShutdownTest, APoolStartsItsTimerThreadOnlyWithItsFirstSleep) {
  // Start the process-wide timer thread first, so that only the pool's can appear below.
  // (1 ms, not less: a deadline that has passed by the time it is awaited arms nothing.)
  syncAwait(sleep(1ms));
  ThreadPool pool(1);
  syncAwait([]() -> Lazy<void> { co_return; }().via(&pool));
  const std::set<std::string> before = threadIds();
  syncAwait([]() -> Lazy<void> { co_return; }().via(&pool));
  EXPECT_TRUE(newThreads(before, threadIds()).empty());  // pay for what you use
  syncAwait([]() -> Lazy<void> { co_await sleep(1ms); }().via(&pool));
  const std::vector<std::string> timer = newThreads(before, threadIds());
  ASSERT_EQ(timer.size(), 1u);  // the pool's timer thread
  syncAwait([]() -> Lazy<void> { co_await sleep(1ms); }().via(&pool));
  EXPECT_EQ(newThreads(before, threadIds()), timer);  // and only that one
  pool.shutdown();
  EXPECT_EQ(threadIds().count(timer[0]), 0u);  // joined by shutdown
}

// --- destroying a coroutine suspended in a sleep -----------------------------------------
//
// The rule (docs/concurrency.md, "Destroying a suspended coroutine"): destroying a
// coroutine suspended in sleep() withdraws the sleep: its timer leaves the timer heap and
// its cancellation callback is deregistered, so timers and the token keep working. If the
// wake-up was already claimed (the timer fired, or a cancellation claimed the sleep, and
// its resumption is on its way), the destruction is a use error: weft says so and aborts.

// Starts `lazy` on this thread with `executor` (and, if given, `token`): it runs until it
// suspends (it has no continuation: it must not finish).
template <class T>
void startSuspended(Lazy<T>& lazy, Executor* executor, const CancellationToken* token = nullptr) {
  auto handle = detail::LazyAccess::handle(lazy);
  handle.promise().setExecutor(executor);
  if (token != nullptr) handle.promise().setCancellationToken(token);
  handle.resume();
  ASSERT_FALSE(handle.done()) << "the coroutine was expected to suspend";
}

Lazy<void> sleepsAnHour(bool& resumed) {
  Counted alive;
  co_await sleep(1h);
  resumed = true;
}

TEST(SleepDestroyTest, DestroyingASleeperOnAPoolDisarmsItsTimer) {
  Counted::reset();
  ThreadPool pool(2);
  ProbeExecutor probe(pool);
  bool resumed = false;
  {
    Lazy<void> sleeper = sleepsAnHour(resumed);
    startSuspended(sleeper, &probe);
    EXPECT_EQ(probe.armed.load(), 1);
    EXPECT_EQ(Counted::alive(), 1);
  }  // destroys the suspended frame
  EXPECT_EQ(probe.disarmed.load(), 1);  // its timer left the heap with it
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_FALSE(resumed);
  // The pool's timers keep working (a dangling entry in the heap would be read here, and
  // fired with the pool's shutdown).
  auto body = []() -> Lazy<int> {
    co_await sleep(1ms);
    co_return 3;
  };
  EXPECT_EQ(syncAwait(body().via(&probe)), 3);
  EXPECT_EQ(syncAwait(body().via(&pool)), 3);
}

TEST(SleepDestroyTest, DestroyingASleeperWithoutAnExecutorDisarmsItsTimer) {
  Counted::reset();
  syncAwait(sleep(1ms));  // the timer thread runs; its heap is empty again
  const std::size_t before = detail::globalTimerQueue().size();
  bool resumed = false;
  {
    Lazy<void> sleeper = sleepsAnHour(resumed);
    startSuspended(sleeper, nullptr);
    EXPECT_EQ(detail::globalTimerQueue().size(), before + 1);
  }
  EXPECT_EQ(detail::globalTimerQueue().size(), before);
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_FALSE(resumed);
  syncAwait(sleep(1ms));  // timers keep working
}

TEST(SleepDestroyTest, DestroyingASleeperDeregistersItsCancellationCallback) {
  Counted::reset();
  ThreadPool pool(1);
  ProbeExecutor probe(pool);
  CancellationSource source;
  CancellationToken token = source.token();
  bool resumed = false;
  {
    Lazy<void> sleeper = sleepsAnHour(resumed);
    startSuspended(sleeper, &probe, &token);
  }
  EXPECT_EQ(probe.disarmed.load(), 1);
  // Runs no callback of the destroyed sleep (ASan would see its freed frame).
  EXPECT_TRUE(source.requestCancellation());
  EXPECT_EQ(probe.disarmed.load(), 1);
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_FALSE(resumed);
}

TEST(SleepDestroyTest, DestroyingManySleepersLeavesTheOthersWaking) {
  Counted::reset();
  ThreadPool pool(2);
  std::atomic<int> woke{0};
  auto sleeper = [](std::atomic<int>& woke, std::chrono::microseconds d) -> Lazy<void> {
    Counted alive;
    co_await sleep(d);
    woke.fetch_add(1);
  };
  std::vector<Lazy<void>> destroyed;
  for (int i = 0; i < 100; ++i) {
    destroyed.push_back(sleeper(woke, std::chrono::hours(1) + std::chrono::microseconds(i)));
    startSuspended(destroyed.back(), &pool);
  }
  std::vector<Lazy<void>> kept;
  for (int i = 0; i < 100; ++i) kept.push_back(sleeper(woke, std::chrono::microseconds(i * 10)));
  destroyed.erase(destroyed.begin(), destroyed.begin() + 50);  // some from the heap's middle
  syncAwait(collectAllPara(std::move(kept)), &pool);
  destroyed.clear();
  EXPECT_EQ(woke.load(), 100);
  EXPECT_EQ(Counted::alive(), 0);
}

// An executor with a timer queue of its own, which the test may stop without delivering
// its timers (as the process-wide queue is stopped at exit). Resumes inline.
class OwnTimersExecutor final : public Executor {
 public:
  OwnTimersExecutor() : Executor("own-timers"), timers_("own-timers", &deliver, nullptr) {}
  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override { h.resume(); }
  bool currentThreadInExecutor() const noexcept override { return false; }
  void scheduleTimer(detail::TimerEntry& timer) override {
    if (!timers_.add(timer)) throw ExecutorShutDown(name());
  }
  bool cancelTimer(detail::TimerEntry& timer) noexcept override { return timers_.cancel(timer); }
  void stopTimersWithoutDelivery() { timers_.stop(/*deliverPending=*/false); }

 private:
  static void deliver(void*, detail::TimerEntry& entry) noexcept { entry.complete(&entry, true); }
  void scheduleJob(detail::Job* job) override { job->complete(job, true); }
  detail::TimerQueue timers_;
};

// A timer dropped by a stopped queue never fires: nothing will resume the sleeper, so
// destroying it is legitimate (not the misuse below).
TEST(SleepDestroyTest, DestroyingASleeperWhoseTimerWasDroppedIsFine) {
  Counted::reset();
  OwnTimersExecutor executor;
  bool resumed = false;
  Lazy<void> sleeper = sleepsAnHour(resumed);
  startSuspended(sleeper, &executor);
  executor.stopTimersWithoutDelivery();
  sleeper = Lazy<void>();
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_FALSE(resumed);
}

// Timers on `pool` (whose own timer thread fires them onto its worker), resumptions
// counted and never run: a fired sleep's resumption stays "under way" for good. A timer
// is handed to the pool only by releaseTimer(): so it cannot fire before the sleep has
// suspended (a timer that fired inside await_suspend, on a thread preempted long enough,
// would let the sleep complete without suspending). For one timer at a time, armed and
// released on the test's thread.
class PoolTimersQueueForever final : public Executor {
 public:
  explicit PoolTimersQueueForever(ThreadPool& pool) : Executor("queue-forever"), pool_(pool) {}
  using Executor::schedule;
  void schedule(std::coroutine_handle<> /*h*/) override { queued.fetch_add(1); }
  bool currentThreadInExecutor() const noexcept override { return false; }
  void scheduleTimer(detail::TimerEntry& timer) override { held_ = &timer; }
  bool cancelTimer(detail::TimerEntry& timer) noexcept override {
    if (held_ == &timer) {
      held_ = nullptr;
      return true;
    }
    return pool_.cancelTimer(timer);
  }
  // Arms the held timer on the pool: it fires at its deadline.
  void releaseTimer() { pool_.scheduleTimer(*std::exchange(held_, nullptr)); }
  std::atomic<int> queued{0};

 private:
  void scheduleJob(detail::Job* job) override {
    job->complete(job, false);
    throw ExecutorShutDown(name());
  }
  ThreadPool& pool_;
  detail::TimerEntry* held_ = nullptr;
};

// The misuse: the sleep's resumption is already queued on its executor (the timer fired,
// or a cancellation claimed the sleep) when the coroutine is destroyed. The executor
// never runs it, so the check is deterministic. Death tests in the default "fast" style
// (a fork; the "threadsafe" style re-executes the binary, which qemu-user without
// binfmt_misc cannot): everything with a thread is made inside the death statement.
TEST(SleepDestroyDeathTest, DestroyingASleeperWhoseTimerFiredAborts) {
  EXPECT_DEATH(
      {
        ThreadPool pool(1, "timers");
        PoolTimersQueueForever executor(pool);
        bool resumed = false;
        auto sleeper = [](bool& resumed) -> Lazy<void> {
          co_await sleep(20ms);
          resumed = true;
        };
        Lazy<void> lazy = sleeper(resumed);
        startSuspended(lazy, &executor);
        executor.releaseTimer();  // suspended: now the timer may fire
        while (executor.queued.load() == 0) std::this_thread::yield();  // fired and queued
        lazy = Lazy<void>();
      },
      "weft: a coroutine was destroyed while suspended in sleep\\(\\) after its wake-up had "
      "been claimed \\(its timer had fired");
}

TEST(SleepDestroyDeathTest, DestroyingASleeperWhoseCancellationWasDeliveredAborts) {
  EXPECT_DEATH(
      {
        test::ManualExecutor manual;
        CancellationSource source;
        CancellationToken token = source.token();
        bool resumed = false;
        Lazy<void> lazy = sleepsAnHour(resumed);
        startSuspended(lazy, &manual, &token);
        source.requestCancellation();  // claims the sleep; its resumption is queued
        lazy = Lazy<void>();
      },
      "weft: a coroutine was destroyed while suspended in sleep\\(\\) after its wake-up had "
      "been claimed \\(its cancellation had been delivered");
}

// --- time edge cases -----------------------------------------------------------------------

// Awaits `awaitable` once. A function template rather than a generic lambda coroutine
// (some compilers mishandle by-value parameters of those).
template <class Awaitable>
Lazy<void> awaitOnce(Awaitable awaitable) {
  co_await awaitable;
}

// Each of these is a deadline in the past: the sleep completes without suspending (so
// without touching the timer thread), and UBSan sees no overflow computing it.
TEST(SleepTimeEdgeTest, TimePointsFarInThePastDoNotSleep) {
  auto expectNoSleep = [](auto awaitable, const char* what) {
    Lazy<void> lazy = awaitOnce(awaitable);
    detail::LazyAccess::handle(lazy).promise().setContinuation(std::noop_coroutine());
    detail::LazyAccess::handle(lazy).resume();
    EXPECT_TRUE(detail::LazyAccess::handle(lazy).done()) << what << " suspended";
  };
  using std::chrono::duration;
  using std::chrono::hours;
  using std::chrono::steady_clock;
  using std::chrono::system_clock;
  using std::chrono::time_point;
  const double inf = std::numeric_limits<double>::infinity();
  expectNoSleep(sleepUntil(system_clock::time_point::min()), "system_clock min");
  expectNoSleep(sleepUntil(steady_clock::time_point::min()), "steady_clock min");
  expectNoSleep(sleepUntil(time_point<system_clock, hours>::min()), "system_clock hours min");
  expectNoSleep(sleepUntil(time_point<steady_clock, hours>::min()), "steady_clock hours min");
  expectNoSleep(sleepUntil(time_point<system_clock, duration<double>>(duration<double>(-inf))),
                "system_clock -inf");
  expectNoSleep(sleepUntil(time_point<steady_clock, duration<double>>(duration<double>(-inf))),
                "steady_clock -inf");
  // Picoseconds since 1970 end in 1970: any such time point has passed.
  expectNoSleep(sleepUntil(time_point<system_clock, duration<long long, std::pico>>::max()),
                "system_clock picoseconds max");
  expectNoSleep(sleep(hours::min()), "hours min");
  expectNoSleep(sleep(duration<double>(-inf)), "-inf seconds");
  expectNoSleep(sleep(duration<long long, std::pico>::min()), "picoseconds min");
}

// A sleep "forever": still suspended once other timers have fired, and it ends with
// OperationCancelled when its token is cancelled (not by returning at once, which an
// overflowing deadline would do).
enum class SleepOutcome { kPending, kReturned, kCancelled, kOther };

template <class Awaitable>
Lazy<void> recordSleepOutcome(Awaitable awaitable, SleepOutcome& outcome) {
  try {
    co_await awaitable;
    outcome = SleepOutcome::kReturned;
  } catch (const OperationCancelled&) {
    outcome = SleepOutcome::kCancelled;
  } catch (...) {
    outcome = SleepOutcome::kOther;
  }
}

template <class Awaitable>
void expectSleepsUntilCancelled(Awaitable awaitable, const char* what) {
  SCOPED_TRACE(what);
  CancellationSource source;
  CancellationToken token = source.token();
  SleepOutcome outcome = SleepOutcome::kPending;
  Lazy<void> lazy = recordSleepOutcome(awaitable, outcome);
  auto handle = detail::LazyAccess::handle(lazy);
  handle.promise().setCancellationToken(&token);
  handle.promise().setContinuation(std::noop_coroutine());  // when it finishes
  handle.resume();
  EXPECT_EQ(outcome, SleepOutcome::kPending);
  syncAwait(sleep(2ms));  // other timers fire meanwhile
  EXPECT_EQ(outcome, SleepOutcome::kPending);
  // No executor: the cancellation resumes it here, before requestCancellation returns.
  source.requestCancellation();
  EXPECT_EQ(outcome, SleepOutcome::kCancelled);
  EXPECT_TRUE(handle.done());
}

TEST(SleepTimeEdgeTest, TimePointsFarInTheFutureSleepUntilCancelled) {
  using std::chrono::duration;
  using std::chrono::hours;
  using std::chrono::steady_clock;
  using std::chrono::system_clock;
  using std::chrono::time_point;
  const double inf = std::numeric_limits<double>::infinity();
  expectSleepsUntilCancelled(sleepUntil(time_point<steady_clock, hours>::max()),
                             "steady_clock hours max");
  expectSleepsUntilCancelled(sleepUntil(steady_clock::time_point::max()), "steady_clock max");
  expectSleepsUntilCancelled(sleepUntil(system_clock::time_point::max()), "system_clock max");
  expectSleepsUntilCancelled(sleepUntil(time_point<system_clock, hours>::max()),
                             "system_clock hours max");
  expectSleepsUntilCancelled(
      sleepUntil(time_point<system_clock, duration<double>>(duration<double>(inf))),
      "system_clock +inf");
  expectSleepsUntilCancelled(
      sleepUntil(time_point<steady_clock, duration<float>>(duration<float>(1e30f))),
      "steady_clock 1e30 s as float");
  expectSleepsUntilCancelled(
      sleepUntil(steady_clock::now() + hours(24 * 365 * 200)), "steady_clock now + 200 years");
  expectSleepsUntilCancelled(sleep(hours::max()), "hours max");
  expectSleepsUntilCancelled(sleep(duration<double>(inf)), "+inf seconds");
  expectSleepsUntilCancelled(sleep(duration<long long, std::ratio<86400 * 365>>::max()),
                             "years max");
  expectSleepsUntilCancelled(sleep(std::chrono::nanoseconds::max()), "nanoseconds max");
}

TEST(SleepTimeEdgeTest, ANaNDurationOrTimePointThrowsInvalidArgument) {
  using std::chrono::duration;
  using std::chrono::steady_clock;
  using std::chrono::system_clock;
  using std::chrono::time_point;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(syncAwait(awaitOnce(sleep(duration<double>(nan)))), std::invalid_argument);
  EXPECT_THROW(syncAwait(awaitOnce(sleep(duration<float, std::milli>(std::nanf(""))))),
               std::invalid_argument);
  EXPECT_THROW(
      syncAwait(awaitOnce(
          sleepUntil(time_point<steady_clock, duration<double>>(duration<double>(nan))))),
      std::invalid_argument);
  EXPECT_THROW(
      syncAwait(awaitOnce(
          sleepUntil(time_point<system_clock, duration<double>>(duration<double>(nan))))),
      std::invalid_argument);
  try {
    syncAwait(awaitOnce(sleep(duration<double>(nan))));
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("weft:"), std::string::npos) << e.what();
  }
}

// sleepUntil(t) is sleep(t - now) computed without overflow: a finite time point in the
// near future is slept until, not saturated.
TEST(SleepTimeEdgeTest, SleepUntilANearTimePointOfAnotherDurationSleepsUntilIt) {
  using std::chrono::duration;
  using std::chrono::steady_clock;
  using std::chrono::time_point;
  const auto start = steady_clock::now();
  const auto deadline =
      time_point<steady_clock, duration<double>>(start.time_since_epoch() + 3ms);
  syncAwait(sleepUntil(deadline));
  EXPECT_GE(steady_clock::now(), deadline);
  const auto coarse = std::chrono::ceil<std::chrono::milliseconds>(steady_clock::now() + 2ms);
  syncAwait(sleepUntil(coarse));
  EXPECT_GE(steady_clock::now(), coarse);
}

// --- from fibers (stackful/await.h): the same awaitables, `await(x)` instead of co_await -

TEST(SleepFiberTest, AFiberSleepsOnItsExecutor) {
  ThreadPool pool(2);
  auto future = spawnFiber(&pool, [&] {
    auto start = std::chrono::steady_clock::now();
    await(sleep(5ms));
    return std::chrono::steady_clock::now() - start >= 5ms && pool.currentThreadInExecutor();
  });
  EXPECT_TRUE(syncAwait(std::move(future)));
}

TEST(SleepFiberTest, AFibersSleepIsCancelledByItsToken) {
  ThreadPool pool(2);
  ProbeExecutor probe(pool);
  CancellationSource source;
  SpawnFiberOptions options;
  options.cancellationToken = source.token();
  auto future = spawnFiber(
      &probe,
      [&] {
        CancellationToken token = await(currentCancellationToken());
        EXPECT_EQ(token, source.token());
        try {
          await(sleep(1h));
        } catch (const OperationCancelled&) {
          return true;
        }
        return false;  // completed normally: it was never cancelled
      },
      std::move(options));
  std::thread canceller([&] {
    while (probe.armed.load() == 0) std::this_thread::yield();
    source.requestCancellation();
  });
  Watchdog watchdog(60s, "SleepFiberTest.AFibersSleepIsCancelledByItsToken");
  EXPECT_TRUE(syncAwait(std::move(future)));
  canceller.join();
  EXPECT_EQ(probe.disarmed.load(), 1);
}

TEST(SleepFiberTest, FibersAndLazysSleepingTogetherWakeInDeadlineOrder) {
  ThreadPool pool(1);
  std::mutex mutex;
  std::vector<int> woke;
  const auto base = std::chrono::steady_clock::now() + 100ms;
  auto record = [&](int i) {
    std::lock_guard lock(mutex);
    woke.push_back(i);
  };
  // Parameters, not captures: the Lazy outlives this statement's lambda temporaries.
  auto lazySleeper = [](auto& record, int i, auto deadline) -> Lazy<void> {
    co_await sleepUntil(deadline);
    record(i);
  };
  std::vector<FiberFuture<void>> fibers;
  std::vector<Lazy<void>> lazys;
  for (int i = 0; i < 20; ++i) {
    const auto deadline = base + (19 - i) * 500us;  // later-armed ones wake first
    if (i % 2 == 0) {
      fibers.push_back(spawnFiber(&pool, [&, i, deadline] {
        await(sleepUntil(deadline));
        record(i);
      }));
    } else {
      lazys.push_back(lazySleeper(record, i, deadline));
    }
  }
  syncAwait(collectAllPara(std::move(lazys)), &pool);
  for (auto& fiber : fibers) syncAwait(std::move(fiber));
  std::vector<int> expected(20);
  std::iota(expected.rbegin(), expected.rend(), 0);
  EXPECT_EQ(woke, expected);
}

TEST(SleepFiberTest, WithTimeoutFromAFiber) {
  ThreadPool pool(2);
  auto future = spawnFiber(&pool, [] {
    try {
      await(withTimeout([]() -> Lazy<void> { co_await sleep(1h); }(), 2ms));
    } catch (const TimeoutError&) {
      return true;
    }
    return false;
  });
  Watchdog watchdog(60s, "SleepFiberTest.WithTimeoutFromAFiber");
  EXPECT_TRUE(syncAwait(std::move(future)));
}

}  // namespace
}  // namespace weft
