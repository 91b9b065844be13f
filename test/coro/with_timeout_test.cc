#include "weft/coro/with_timeout.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <coroutine>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/event.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/semaphore.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/yield.h"
#include "weft/executors/detail/timer_queue.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/manual_event.h"
#include "test/support/manual_timer_executor.h"
#include "test/support/timer_probe_executor.h"
#include "test/support/wait_until.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::TimerProbeExecutor;
using test::Watchdog;

TEST(WithTimeoutTest, WorkFinishingFirstReturnsItsValueAndDisarmsTheTimer) {
  ThreadPool pool(2);
  TimerProbeExecutor probe(pool);
  // Hand-shake: the work finishes only once the timeout is armed (withTimeout arms it
  // once the work has suspended), whatever the machine's speed.
  Event timeoutArmed;
  auto work = [&]() -> Lazy<int> {
    co_await timeoutArmed.wait();
    co_return 42;
  };
  std::thread releaser([&] {
    test::waitUntil([&] { return probe.armed.load() == 1; });
    timeoutArmed.set();
  });
  auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
  Watchdog watchdog(60s, "WithTimeoutTest.WorkFinishingFirstReturnsItsValueAndDisarmsTheTimer");
  EXPECT_EQ(syncAwait(body().via(&probe)), 42);
  releaser.join();
  EXPECT_EQ(probe.armed.load(), 1);     // the timeout
  EXPECT_EQ(probe.disarmed.load(), 1);  // left the heap at once
}

TEST(WithTimeoutTest, SynchronousWorkArmsNoTimer) {
  ThreadPool pool(1);
  TimerProbeExecutor probe(pool);
  auto work = []() -> Lazy<int> { co_return 5; };
  auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
  EXPECT_EQ(syncAwait(body().via(&probe)), 5);
  EXPECT_EQ(probe.armed.load(), 0);
}

// Work that finishes without suspending (with a value or an exception) never reads the
// clock or touches a timer: nothing armed, nothing to disarm.
TEST(WithTimeoutTest, SynchronousWorkNeverTouchesTheTimers) {
  ThreadPool pool(1);
  TimerProbeExecutor probe(pool);
  auto value = [](int i) -> Lazy<int> { co_return i; };
  auto fails = []() -> Lazy<int> { throw std::logic_error("at once"); };
  auto body = [&]() -> Lazy<long> {
    long sum = 0;
    for (int i = 0; i < 1000; ++i) {
      sum += co_await withTimeout(value(i), 1h);
      EXPECT_THROW((void)co_await withTimeout(fails(), 1h), std::logic_error);
    }
    co_return sum;
  };
  EXPECT_EQ(syncAwait(body().via(&probe)), 999L * 1000 / 2);
  EXPECT_EQ(probe.armed.load(), 0);
  EXPECT_EQ(probe.disarmed.load() + probe.disarmFailed.load(), 0);
  EXPECT_EQ(pool.timerCounts().onWorkers, 0u);
  EXPECT_EQ(pool.timerCounts().onTimerThread, 0u);
}

// An awaitable that knows of executors but resumes its waiter inline, on the thread that
// calls resume(): lets a test finish the work at a chosen point of another call.
struct InlineParking {
  std::coroutine_handle<> waiter;
  struct Awaiter {
    InlineParking* parking;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept { parking->waiter = h; }
    void await_resume() const noexcept {}
  };
  Awaiter coAwait(Executor*) noexcept { return Awaiter{this}; }
  void resume() { std::exchange(waiter, nullptr).resume(); }
};

// Arms every timer on the pool, then finishes the parked work before returning: the work
// finishes (its sink runs) after the timer is armed but before withTimeout has arrived
// from arming it.
class FinishWhileArmingExecutor final : public Executor {
 public:
  FinishWhileArmingExecutor(ThreadPool& pool, InlineParking& parking)
      : Executor("finish-while-arming"), probe_(pool), parking_(parking) {}
  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override { probe_.schedule(h); }
  bool currentThreadInExecutor() const noexcept override {
    return probe_.currentThreadInExecutor();
  }
  void scheduleTimer(TimerEntry& timer) override {
    probe_.scheduleTimer(timer);
    parking_.resume();
  }
  bool cancelTimer(TimerEntry& timer) noexcept override { return probe_.cancelTimer(timer); }
  TimerProbeExecutor& probe() { return probe_; }

 private:
  void scheduleJob(Job* job) override {
    probe_.schedule([job] { job->complete(job, true); });
  }
  TimerProbeExecutor probe_;
  InlineParking& parking_;
};

TEST(WithTimeoutTest, WorkFinishingWhileTheTimerIsArmedDisarmsIt) {
  ThreadPool pool(1);
  InlineParking parking;
  FinishWhileArmingExecutor executor(pool, parking);
  auto work = [&]() -> Lazy<int> {
    co_await parking;
    co_return 6;
  };
  auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
  EXPECT_EQ(syncAwait(body().via(&executor)), 6);
  EXPECT_EQ(executor.probe().armed.load(), 1);
  EXPECT_EQ(executor.probe().disarmed.load(), 1);  // by withTimeout, once it had armed it
  EXPECT_EQ(pool.timerCounts().onWorkers, 0u);
}

// The work suspends, the timer is armed, and the work then finishes on another thread:
// its completion disarms the timer (which never fires) and returns the value.
TEST(WithTimeoutTest, WorkFinishingOnAnotherThreadWhileTheTimerIsArmedDisarmsIt) {
  ThreadPool pool(2);
  test::ManualTimerExecutor timers(pool);
  test::ManualEvent event;
  std::thread finisher([&] {
    ASSERT_TRUE(timers.waitUntilArmed(1));  // withTimeout arms once the work has suspended
    event.release();
  });
  auto work = [&]() -> Lazy<int> {
    co_await event;
    co_return 12;
  };
  auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
  Watchdog watchdog(60s, "WithTimeoutTest.WorkFinishingOnAnotherThread");
  EXPECT_EQ(syncAwait(body().via(&timers)), 12);
  finisher.join();
  EXPECT_EQ(timers.armed(), 0u);  // disarmed, never fired
}

// A timer that cannot be armed (the executor refuses it) ends the work as a timeout
// would, and its error replaces the work's OperationCancelled.
class RefusingTimersExecutor final : public Executor {
 public:
  explicit RefusingTimersExecutor(ThreadPool& pool) : Executor("refusing-timers"), pool_(pool) {}
  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override { pool_.schedule(h); }
  bool currentThreadInExecutor() const noexcept override { return pool_.currentThreadInExecutor(); }
  void scheduleTimer(TimerEntry&) override { throw ExecutorShutDown(name()); }
  bool cancelTimer(TimerEntry&) noexcept override { return false; }

 private:
  void scheduleJob(Job* job) override {
    pool_.schedule([job] { job->complete(job, true); });
  }
  ThreadPool& pool_;
};

TEST(WithTimeoutTest, ATimerThatCannotBeArmedCancelsTheWorkAndReportsWhy) {
  ThreadPool pool(1);
  RefusingTimersExecutor executor(pool);
  Channel<int> channel;
  auto body = [&]() -> Lazy<void> {
    EXPECT_THROW((void)co_await withTimeout(channel.receive(), 1h), ExecutorShutDown);
    // Work that finishes without suspending needs no timer.
    EXPECT_EQ(co_await withTimeout([]() -> Lazy<int> { co_return 3; }(), 1h), 3);
  };
  Watchdog watchdog(60s, "WithTimeoutTest.ATimerThatCannotBeArmed");
  syncAwait(body().via(&executor));
}

// ThreadPool::shutdown ends the timer early (its fire function runs with shutDown set, or
// arming it is refused if the shutdown came first): the work is cancelled, and its
// OperationCancelled becomes ExecutorShutDown.
TEST(WithTimeoutTest, PoolShutdownEndsAWaitingWithTimeoutWithExecutorShutDown) {
  Watchdog watchdog(60s, "WithTimeoutTest.PoolShutdownEndsAWaitingWithTimeout");
  Channel<int> never;
  std::atomic<bool> done{false};
  std::exception_ptr error;
  {
    ThreadPool pool(1);
    Channel<int> started(1);
    auto waiter = [&]() -> Lazy<void> {
      co_await started.send(0);
      (void)co_await withTimeout(never.receive(), 1h);
    };
    waiter().via(&pool).start([&](Try<void> r) {
      if (r.hasException()) error = r.exception();
      done = true;
    });
    syncAwait(started.receive());
    pool.shutdown();
  }
  EXPECT_TRUE(done.load());
  ASSERT_TRUE(error);
  EXPECT_THROW(std::rethrow_exception(error), ExecutorShutDown);
}

// An awaiter cancelled before withTimeout starts: the work starts with its token
// cancelled, and no timer is armed for it.
TEST(WithTimeoutTest, AnAwaiterCancelledBeforehandStartsTheWorkCancelled) {
  ThreadPool pool(1);
  TimerProbeExecutor probe(pool);
  CancellationSource source;
  source.requestCancellation();
  test::ManualEvent event;
  std::thread releaser([&] {
    while (event.waiting() == 0) std::this_thread::yield();  // the work has suspended
    event.release();
  });
  std::atomic<bool> sawCancellation{false};
  auto work = [&]() -> Lazy<int> {
    CancellationToken token = co_await currentCancellationToken();
    sawCancellation = token.isCancellationRequested();
    co_await event;  // suspends: withTimeout would arm its timer, were it not cancelled
    token.throwIfCancellationRequested();
    co_return 1;
  };
  auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
  Watchdog watchdog(60s, "WithTimeoutTest.AnAwaiterCancelledBeforehand");
  EXPECT_THROW(syncAwait(withCancellation(source.token(), body()).via(&probe)), OperationCancelled);
  releaser.join();
  EXPECT_TRUE(sawCancellation.load());
  EXPECT_EQ(probe.armed.load(), 0);
}

// The check is that it returns and reports the timeout (not how fast).
TEST(WithTimeoutTest, WorkThatNeverCompletesIsCancelledAndReportsTimeoutError) {
  ThreadPool pool(2);
  Counted::reset();
  std::atomic<bool> workCancelled{false};
  auto never = [&]() -> Lazy<void> {
    Counted alive;
    try {
      co_await sleep(std::chrono::hours(24 * 365));
    } catch (const OperationCancelled&) {
      workCancelled = true;
      throw;
    }
  };
  Watchdog watchdog(60s, "WithTimeoutTest.WorkThatNeverCompletes");
  auto body = [&]() -> Lazy<void> { co_await withTimeout(never(), 5ms); };
  EXPECT_THROW(syncAwait(body().via(&pool)), TimeoutError);
  EXPECT_TRUE(workCancelled);  // cancelled and finished before withTimeout returned
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(WithTimeoutTest, WorksWithoutAnExecutor) {
  auto never = []() -> Lazy<int> {
    co_await sleep(1h);
    co_return 0;
  };
  Watchdog watchdog(60s, "WithTimeoutTest.WorksWithoutAnExecutor");
  EXPECT_THROW(syncAwait(withTimeout(never(), 2ms)), TimeoutError);
}

TEST(WithTimeoutTest, WorksOnVoidAndReferenceResults) {
  int target = 3;
  auto ref = [&]() -> Lazy<int&> { co_return target; };
  auto nothing = []() -> Lazy<void> { co_return; };
  int& r = syncAwait(withTimeout(ref(), 1h));
  EXPECT_EQ(&r, &target);
  EXPECT_NO_THROW(syncAwait(withTimeout(nothing(), 1h)));
}

TEST(WithTimeoutTest, TheWorksExceptionPropagates) {
  auto fails = []() -> Lazy<int> {
    co_await sleep(1ms);
    throw std::logic_error("bad");
  };
  EXPECT_THROW(syncAwait(withTimeout(fails(), 1h)), std::logic_error);
}

TEST(WithTimeoutTest, CancellingTheAwaiterThrowsOperationCancelledNotTimeout) {
  ThreadPool pool(2);
  CancellationSource source;
  auto never = []() -> Lazy<void> { co_await sleep(1h); };
  // Hand-shake: collectAll starts its second branch only once the first has suspended,
  // that is once the work's sleep and the timeout's timer are both armed. So the
  // cancellation reaches a withTimeout that waits, never one that has not started.
  auto cancel = [&]() -> Lazy<void> {
    source.requestCancellation();
    co_return;
  };
  Watchdog watchdog(60s, "WithTimeoutTest.CancellingTheAwaiter");
  auto [waited, cancelled] = syncAwait(
      collectAll(withCancellation(source.token(), withTimeout(never(), 1h)), cancel()).via(&pool));
  EXPECT_THROW(waited.value(), OperationCancelled);
  cancelled.value();
}

TEST(WithTimeoutTest, NestedTimeoutsTheInnerFiresFirst) {
  ThreadPool pool(2);
  auto never = []() -> Lazy<void> { co_await sleep(1h); };
  auto inner = [&]() -> Lazy<bool> {
    try {
      co_await withTimeout(never(), 2ms);
    } catch (const TimeoutError&) {
      co_return true;
    }
    co_return false;
  };
  Watchdog watchdog(60s, "WithTimeoutTest.NestedTimeouts");
  auto outer = [&]() -> Lazy<bool> { co_return co_await withTimeout(inner(), 1h); };
  EXPECT_TRUE(syncAwait(outer().via(&pool)));
}

// --- the work finishing anyway: nothing is discarded --------------------------------------

// Finishes with `value` (or throws, if `fail`) once its token is cancelled: its own wait
// is not cancellable, like work that obtained its result just as the timeout fired.
Lazy<int> finishesAfterItsCancellation(int value, bool fail = false) {
  Counted alive;
  test::ManualEvent go;
  CancellationToken token = co_await currentCancellationToken();
  CancellationCallback onCancel(token, [&go] { go.release(); });
  co_await go;
  if (fail) throw std::logic_error("failed after the timeout");
  co_return value;
}

TEST(WithTimeoutTest, WorkThatFinishesWithAValueAfterTheTimeoutReturnsIt) {
  Counted::reset();
  Watchdog watchdog(60s, "WithTimeoutTest.WorkThatFinishesWithAValueAfterTheTimeout");
  EXPECT_EQ(syncAwait(withTimeout(finishesAfterItsCancellation(7), 1ms)), 7);
  ThreadPool pool(2);
  auto body = [&]() -> Lazy<int> {
    co_return co_await withTimeout(finishesAfterItsCancellation(8), 1ms);
  };
  EXPECT_EQ(syncAwait(body().via(&pool)), 8);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(WithTimeoutTest, WorkThatFailsAfterTheTimeoutThrowsItsOwnException) {
  Watchdog watchdog(60s, "WithTimeoutTest.WorkThatFailsAfterTheTimeout");
  EXPECT_THROW(syncAwait(withTimeout(finishesAfterItsCancellation(7, /*fail=*/true), 1ms)),
               std::logic_error);
}

TEST(WithTimeoutTest, ANaNTimeoutThrowsInvalidArgument) {
  auto never = []() -> Lazy<void> { co_await sleep(1h); };
  EXPECT_THROW(syncAwait(withTimeout(never(), std::chrono::duration<double>(std::nan("")))),
               std::invalid_argument);
}

// --- destroying a coroutine suspended in withTimeout ---------------------------------------

Lazy<int> sleepsAnHour() {
  Counted alive;
  co_await sleep(1h);
  co_return 1;
}

// withTimeout and withCancellation of awaitables that are not Lazys.

TEST(WithTimeoutAwaitableTest, AChannelReceiveTimesOutAndAValueSentInTimeIsReturned) {
  ThreadPool pool(2);
  Channel<int> channel(1);
  auto body = [&]() -> Lazy<void> {
    EXPECT_THROW((void)co_await withTimeout(channel.receive(), 5ms), TimeoutError);
    co_await channel.send(7);
    std::optional<int> v = co_await withTimeout(channel.receive(), 1h);
    EXPECT_EQ(v, std::optional<int>(7));
  };
  Watchdog watchdog(60s, "WithTimeoutAwaitableTest.AChannelReceive");
  syncAwait(body(), &pool);
}

TEST(WithTimeoutAwaitableTest, ATaskIsCancelledByTheTimeout) {
  ThreadPool pool(2);
  std::atomic<bool> cancelled{false};
  auto never = [&]() -> Lazy<int> {
    try {
      co_await sleep(std::chrono::hours(1));
    } catch (const OperationCancelled&) {
      cancelled = true;
      throw;
    }
    co_return 1;
  };
  auto quick = []() -> Lazy<int> { co_return 2; };
  auto body = [&]() -> Lazy<int> {
    Task<int> slow = never().via(&pool);
    EXPECT_THROW((void)co_await withTimeout(std::move(slow), 5ms), TimeoutError);
    co_return co_await withTimeout(quick().via(&pool), 1h);
  };
  Watchdog watchdog(60s, "WithTimeoutAwaitableTest.ATaskIsCancelledByTheTimeout");
  EXPECT_EQ(syncAwait(body(), &pool), 2);
  EXPECT_TRUE(cancelled.load());
}

TEST(WithTimeoutAwaitableTest, AMutexLockGrantedInTimeIsKept) {
  ThreadPool pool(2);
  Mutex mutex;
  auto body = [&]() -> Lazy<void> {
    ScopedLock<Mutex> lock = co_await withTimeout(mutex.scopedLock(), 1h);
    EXPECT_TRUE(lock.ownsLock());
    EXPECT_FALSE(mutex.tryLock());
    // Held: a second lock can only time out.
    EXPECT_THROW((void)co_await withTimeout(mutex.scopedLock(), 5ms), TimeoutError);
  };
  Watchdog watchdog(60s, "WithTimeoutAwaitableTest.AMutexLockGrantedInTimeIsKept");
  syncAwait(body(), &pool);
  EXPECT_TRUE(mutex.tryLock());  // the ScopedLock unlocked it
  mutex.unlock();
}

// A user's awaitable that knows nothing of cancellation: withTimeout cannot end it early,
// so it waits for it and returns its value (nothing obtained is thrown away). Its thread
// resumes the awaiter only once the timeout has fired: `timers` holds the timeout's timer
// until the awaitable is waiting, then fires it, and fireAll() returns once withTimeout
// has taken the timeout in (the work's token cancelled). So the value always comes after
// the timeout, whatever the machine's speed.
struct PlainThreadAwaitable {
  int value;
  std::thread* thread;
  test::ManualTimerExecutor* timers;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    *thread = std::thread([h, timers = timers] {
      // withTimeout arms its timer after this await has suspended.
      ASSERT_TRUE(timers->waitUntilArmed(1));
      timers->fireAll();
      h.resume();
    });
  }
  int await_resume() const noexcept { return value; }
};

TEST(WithTimeoutAwaitableTest, AnAwaitableThatCannotBeCancelledDeliversItsValue) {
  ThreadPool pool(2);
  test::ManualTimerExecutor timers(pool);
  std::thread resumer;
  auto body = [&]() -> Lazy<int> {
    co_return co_await withTimeout(PlainThreadAwaitable{9, &resumer, &timers}, 1ms);
  };
  Watchdog watchdog(60s, "WithTimeoutAwaitableTest.AnAwaitableThatCannotBeCancelled");
  EXPECT_EQ(syncAwait(body().via(&timers)), 9);
  resumer.join();
}

// A user's cancellation-aware awaitable (coAwait with the token) is cancelled by it.
struct CancellableWait {
  struct Awaiter {
    const CancellationToken* token;
    std::optional<CancellationCallback> onCancel;
    Executor* executor;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      onCancel.emplace(*token, [this, h] { executor->schedule(h); });
    }
    void await_resume() { throw OperationCancelled(); }
  };
  Awaiter coAwait(Executor* executor, const CancellationToken& token) const noexcept {
    return Awaiter{&token, std::nullopt, executor};
  }
};

TEST(WithTimeoutAwaitableTest, AUsersCancellationAwareAwaitableIsCancelled) {
  ThreadPool pool(2);
  auto body = [&]() -> Lazy<void> { co_await withTimeout(CancellableWait{}, 5ms); };
  Watchdog watchdog(60s, "WithTimeoutAwaitableTest.AUsersCancellationAwareAwaitableIsCancelled");
  EXPECT_THROW(syncAwait(body(), &pool), TimeoutError);
}

TEST(WithTimeoutAwaitableTest, FromAFiber) {
  ThreadPool pool(2);
  Channel<int> channel(1);
  auto fiber = spawnFiber(&pool, [&] {
    EXPECT_THROW((void)weft::await(withTimeout(channel.receive(), 5ms)), TimeoutError);
    weft::await(channel.send(3));
    return *weft::await(withTimeout(channel.receive(), 1h));
  });
  Watchdog watchdog(60s, "WithTimeoutAwaitableTest.FromAFiber");
  EXPECT_EQ(syncAwait(std::move(fiber)), 3);
}

TEST(WithCancellationAwaitableTest, BindsTheTokenToAnAwaitable) {
  ThreadPool pool(2);
  CancellationSource source;
  Channel<int> channel;
  auto body = [&]() -> Lazy<std::optional<int>> {
    co_return co_await withCancellation(source.token(), channel.receive());
  };
  // Hand-shake: collectAll starts the canceller only once body() has suspended in the
  // receive, so the cancellation reaches a waiting receive.
  auto cancel = [&]() -> Lazy<void> {
    source.requestCancellation();
    co_return;
  };
  Watchdog watchdog(60s, "WithCancellationAwaitableTest.BindsTheTokenToAnAwaitable");
  auto [received, cancelled] = syncAwait(collectAll(body(), cancel()), &pool);
  EXPECT_THROW(received.value(), OperationCancelled);
  cancelled.value();
}

TEST(WithTimeoutDestroyTest, DestroyingASuspendedWithTimeoutDisarmsBothTimers) {
  ThreadPool pool(2);
  TimerProbeExecutor probe(pool);
  Counted::reset();
  {
    Lazy<int> lazy = withTimeout(sleepsAnHour(), 1h);
    auto handle = detail::LazyAccess::handle(lazy);
    handle.promise().setExecutor(&probe);
    handle.resume();  // runs until both the work and the timer sleep
    ASSERT_FALSE(handle.done());
    EXPECT_EQ(probe.armed.load(), 2);
    EXPECT_EQ(Counted::alive(), 1);
  }
  EXPECT_EQ(probe.disarmed.load(), 2);
  EXPECT_EQ(Counted::alive(), 0);
  auto work = []() -> Lazy<int> {
    co_await sleep(1ms);
    co_return 4;
  };
  auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
  EXPECT_EQ(syncAwait(body().via(&probe)), 4);  // timers keep working
}

TEST(WithTimeoutDestroyTest, DestroyingASuspendedWithTimeoutWithoutAnExecutor) {
  Counted::reset();
  syncAwait(sleep(1ms));  // the timer thread runs; its heap is empty again
  const std::size_t before = detail::globalTimerQueue().size();
  {
    Lazy<int> lazy = withTimeout(sleepsAnHour(), 1h);
    detail::LazyAccess::handle(lazy).resume();
    EXPECT_EQ(detail::globalTimerQueue().size(), before + 2);
  }
  EXPECT_EQ(detail::globalTimerQueue().size(), before);
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_THROW(syncAwait(withTimeout(sleepsAnHour(), 1ms)), TimeoutError);
}

// --- racing a consuming operation: nothing is lost ---------------------------------------
//
// withTimeout(operation, tiny) against the party that completes the operation, on a
// two-thread pool: the timeout's cancellation and the completion race. Whatever the
// operation obtained (a value, a permit, the lock) must reach the caller. Fewer rounds
// under sanitizers (they are 5-20x slower); the race is the same.

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr long kRaceRounds = 5'000;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr long kRaceRounds = 5'000;
#else
constexpr long kRaceRounds = 100'000;
#endif
#else
constexpr long kRaceRounds = 100'000;
#endif

// Timeouts of 0 to 3 us: 0 cancels the operation as soon as it suspends, the others
// fire while the other thread may be completing it.
std::chrono::microseconds tinyTimeout(long round) { return std::chrono::microseconds(round % 4); }

// The timer firing and the work finishing on two other threads at once, round after
// round: the work's wait ends either by its delivery (then its value must come back) or
// by the timeout's cancellation (then TimeoutError), decided by whoever claims it first;
// withTimeout must report exactly that, and never hang or resume twice.
TEST(WithTimeoutRaceTest, TimerAndCompletionRacingLoseNothing) {
  ThreadPool pool(2);
  test::ManualTimerExecutor timers(pool);
  constexpr int kRounds = kRaceRounds >= 100'000 ? 2'000 : 1'000;
  int values = 0, timeouts = 0;
  Watchdog watchdog(240s, "WithTimeoutRaceTest.TimerAndCompletionRacingLoseNothing");
  for (int round = 0; round < kRounds; ++round) {
    test::ManualEvent event;
    std::atomic<bool> claimed{false}, delivered{false};
    auto work = [&]() -> Lazy<int> {
      CancellationToken token = co_await currentCancellationToken();
      CancellationCallback onCancel(token, [&] {
        if (!claimed.exchange(true)) event.release();
      });
      co_await event;
      if (delivered.load()) co_return round;
      throw OperationCancelled();
    };
    std::atomic<int> ready{0};
    auto startTogether = [&] {
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
    };
    std::thread deliverer([&] {
      ASSERT_TRUE(timers.waitUntilArmed(1));
      startTogether();
      if (!claimed.exchange(true)) {
        delivered = true;
        event.release();
      }
    });
    std::thread firer([&] {
      ASSERT_TRUE(timers.waitUntilArmed(1));
      startTogether();
      timers.fireAll();  // fires it unless the work's completion disarmed it first
    });
    auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
    try {
      EXPECT_EQ(syncAwait(body().via(&timers)), round);
      EXPECT_TRUE(delivered.load());
      ++values;
    } catch (const TimeoutError&) {
      EXPECT_FALSE(delivered.load());
      ++timeouts;
    }
    deliverer.join();
    firer.join();
    ASSERT_EQ(timers.armed(), 0u);
  }
  EXPECT_EQ(values + timeouts, kRounds);
  std::printf("%d values, %d timeouts\n", values, timeouts);
}

TEST(WithTimeoutRaceTest, EveryValueSentIsReceivedExactlyOnce) {
  ThreadPool pool(2);
  Channel<long> channel;  // unbuffered: every value is handed from a sender to a receiver
  long received = 0, sum = 0, timeouts = 0;
  auto sender = [&]() -> Lazy<void> {
    for (long v = 1; v <= kRaceRounds; ++v) co_await channel.send(v);
    channel.close();
  };
  auto receiveOne = [&]() -> Lazy<std::optional<long>> { co_return co_await channel.receive(); };
  auto receiver = [&]() -> Lazy<void> {
    for (long round = 0;; ++round) {
      try {
        std::optional<long> v = co_await withTimeout(receiveOne(), tinyTimeout(round));
        if (!v) break;  // closed and drained
        ++received;
        sum += *v;
      } catch (const TimeoutError&) {
        ++timeouts;
      }
    }
  };
  Watchdog watchdog(240s, "WithTimeoutRaceTest.EveryValueSentIsReceivedExactlyOnce");
  auto [s, r] = syncAwait(collectAllPara(sender(), receiver()), &pool);
  s.value();
  r.value();
  EXPECT_EQ(received, kRaceRounds) << timeouts << " timeouts";
  EXPECT_EQ(sum, kRaceRounds * (kRaceRounds + 1) / 2);
}

TEST(WithTimeoutRaceTest, EveryPermitAcquiredReachesTheCaller) {
  ThreadPool pool(2);
  Semaphore semaphore(1);
  std::atomic<long> acquired{0}, timeouts{0};
  auto acquireOne = [&]() -> Lazy<void> { co_await semaphore.acquire(); };
  auto contender = [&](long seed) -> Lazy<void> {
    for (long round = 0; round < kRaceRounds / 2; ++round) {
      try {
        co_await withTimeout(acquireOne(), tinyTimeout(round + seed));
      } catch (const TimeoutError&) {
        timeouts.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      acquired.fetch_add(1, std::memory_order_relaxed);
      if (round % 2 == 0) co_await yield();  // hold it a little longer
      semaphore.release();
    }
  };
  Watchdog watchdog(240s, "WithTimeoutRaceTest.EveryPermitAcquiredReachesTheCaller");
  auto [a, b] = syncAwait(collectAllPara(contender(0), contender(1)), &pool);
  a.value();
  b.value();
  // A permit granted to a waiter that then reported TimeoutError would be missing here.
  EXPECT_EQ(semaphore.available(), 1) << acquired.load() << " acquired, " << timeouts.load()
                                      << " timeouts";
  EXPECT_TRUE(semaphore.tryAcquire());
  EXPECT_GT(acquired.load(), 0);
}

TEST(WithTimeoutRaceTest, EveryLockGrantedReachesTheCaller) {
  ThreadPool pool(2);
  Mutex mutex;
  long inside = 0;  // guarded by mutex
  std::atomic<long> timeouts{0};
  auto lockOne = [&]() -> Lazy<void> { co_await mutex.lock(); };
  auto contender = [&](long seed) -> Lazy<void> {
    for (long round = 0; round < kRaceRounds / 2; ++round) {
      try {
        co_await withTimeout(lockOne(), tinyTimeout(round + seed));
      } catch (const TimeoutError&) {
        timeouts.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      ++inside;
      if (round % 2 == 0) co_await yield();  // hold it a little longer
      mutex.unlock();
    }
  };
  Watchdog watchdog(240s, "WithTimeoutRaceTest.EveryLockGrantedReachesTheCaller");
  auto [a, b] = syncAwait(collectAllPara(contender(0), contender(1)), &pool);
  a.value();
  b.value();
  // A lock granted to a waiter that then reported TimeoutError would still be held.
  EXPECT_TRUE(mutex.tryLock()) << inside << " locked, " << timeouts.load() << " timeouts";
  mutex.unlock();
  EXPECT_GT(inside, 0);
}

}  // namespace
}  // namespace weft
