#include "weft/coro/condition_variable.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/fiber.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/fiber_wait_cancellation.h"
#include "test/support/manual_executor.h"
#include "test/support/pool_threads.h"
#include "test/support/start_detached.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualExecutor;
using test::startDetached;
using test::Watchdog;

TEST(ConditionVariableTest, WaitReleasesTheMutexAndReturnsHoldingIt) {
  Mutex mutex;
  ConditionVariable cv;
  std::atomic<int> done{0};
  bool woke = false;
  bool heldAfterWake = false;
  auto waiter = [&]() -> Lazy<> {
    co_await mutex.lock();
    co_await cv.wait(mutex);
    woke = true;
    heldAfterWake = !mutex.tryLock();
    mutex.unlock();
  };
  startDetached(waiter(), done);
  ASSERT_TRUE(mutex.tryLock());  // released by the wait
  cv.notifyOne();                // moves the waiter to the mutex queue: we hold the mutex
  EXPECT_FALSE(woke);
  mutex.unlock();  // hands the mutex to the waiter
  EXPECT_TRUE(woke);
  EXPECT_TRUE(heldAfterWake);
  EXPECT_EQ(done.load(), 1);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(ConditionVariableTest, NotifyOneWakesTheOldestAndNotifyAllTheRest) {
  Mutex mutex;
  ConditionVariable cv;
  std::vector<int> order;
  std::atomic<int> done{0};
  auto waiter = [&](int id) -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    co_await cv.wait(mutex);
    order.push_back(id);
  };
  for (int i = 0; i < 4; ++i) startDetached(waiter(i), done);
  cv.notifyOne();  // the mutex is free: the oldest resumes at once
  EXPECT_EQ(order, (std::vector<int>{0}));
  cv.notifyAll();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(done.load(), 4);
  cv.notifyAll();  // nobody waits: nothing happens
  EXPECT_EQ(done.load(), 4);
}

TEST(ConditionVariableTest, PredicateWaitChecksFirstAndAfterEveryWakeUp) {
  Mutex mutex;
  ConditionVariable cv;
  int value = 0;
  int checks = 0;
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    co_await cv.wait(mutex, [&] {
      ++checks;
      EXPECT_FALSE(mutex.tryLock());  // checked with the mutex held
      return value == 2;
    });
    EXPECT_EQ(value, 2);
  };
  startDetached(waiter(), done);
  EXPECT_EQ(checks, 1);
  value = 1;
  cv.notifyOne();  // a wake-up with the predicate still false: it waits again
  EXPECT_EQ(checks, 2);
  EXPECT_EQ(done.load(), 0);
  value = 2;
  cv.notifyOne();
  EXPECT_EQ(checks, 3);
  EXPECT_EQ(done.load(), 1);

  // A predicate that is already true does not wait at all.
  syncAwait([&]() -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    co_await cv.wait(mutex, [&] { return true; });
  }());
}

TEST(ConditionVariableTest, APredicateThatThrowsPropagatesWithTheMutexHeld) {
  Mutex mutex;
  ConditionVariable cv;
  bool heldInHandler = false;
  syncAwait([&]() -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    try {
      co_await cv.wait(mutex, []() -> bool { throw std::runtime_error("predicate"); });
    } catch (const std::runtime_error&) {
      heldInHandler = !mutex.tryLock();
    }
  }());
  EXPECT_TRUE(heldInHandler);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(ConditionVariableTest, NotifiedWaitersWithAnExecutorAreScheduledOnIt) {
  Mutex mutex;
  ConditionVariable cv;
  ManualExecutor executor;
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    co_await cv.wait(mutex);
  };
  waiter().via(&executor).start([&](Try<void>) { done.fetch_add(1); });
  executor.runAll();
  cv.notifyAll();
  EXPECT_EQ(executor.pending(), 1u);
  EXPECT_FALSE(mutex.tryLock());  // already handed to the waiter
  executor.runAll();
  EXPECT_EQ(done.load(), 1);
}

TEST(ConditionVariableTest, DestroyedWaitersLeaveWhicheverQueueTheyAreIn) {
  // A destroyed wait counts as having reacquired the mutex (the frame believes it holds
  // it): with the documented ScopedLock around it, the frame's own unlock then leaves
  // the mutex exactly as it was apart from the destroyed coroutine. More cases in
  // test/coro/suspended_destruction_test.cc.
  Counted::reset();
  Mutex mutex;
  ConditionVariable cv;
  auto body = [&]() -> Lazy<> {
    Counted local;
    ScopedLock lock = co_await mutex.scopedLock();
    co_await cv.wait(mutex);
  };
  {
    Lazy<> inCvQueue = body();
    detail::LazyAccess::handle(inCvQueue).resume();
    EXPECT_EQ(Counted::alive(), 1);
  }
  EXPECT_EQ(Counted::alive(), 0);
  cv.notifyAll();  // must not touch it (ASan would tell)
  EXPECT_TRUE(mutex.tryLock()) << "the destroyed frame's ScopedLock released the mutex";
  mutex.unlock();
  {
    Lazy<> inMutexQueue = body();
    detail::LazyAccess::handle(inMutexQueue).resume();
    ASSERT_TRUE(mutex.tryLock());
    cv.notifyAll();  // into the mutex queue, behind our lock
  }
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_FALSE(mutex.tryLock()) << "still ours: the destroyed waiter took nothing from us";
  mutex.unlock();  // must not hand the mutex to the destroyed waiter
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(ConditionVariableTest, ADestroyedWaitWithoutAGuardKeepsTheMutexAsItsFrameHeldIt) {
  // Without a guard, the frame's code held the mutex at the wait as at any other point
  // after lock(): destroying it leaks the mutex, as destroying it anywhere between lock()
  // and unlock() would. The mutex stays consistently locked rather than being released
  // under a frame that believed it held it.
  Mutex mutex;
  ConditionVariable cv;
  auto body = [&]() -> Lazy<> {
    co_await mutex.lock();
    co_await cv.wait(mutex);
    mutex.unlock();
  };
  {
    Lazy<> waiter = body();
    detail::LazyAccess::handle(waiter).resume();
    EXPECT_TRUE(mutex.tryLock());  // released by the wait
    mutex.unlock();
  }
  EXPECT_FALSE(mutex.tryLock());
}

TEST(ConditionVariableTest, ProducersAndConsumersWithAPredicateOnTwoThreads) {
  Watchdog watchdog(120s, "ConditionVariableTest.ProducersAndConsumers");
  constexpr int kProducers = 50;
  constexpr int kConsumers = 50;
  constexpr int kItemsPerProducer = 2000;
  ThreadPool pool(2);
  Mutex mutex;
  ConditionVariable notEmpty;
  std::deque<long> queue;  // guarded by mutex
  int producersLeft = kProducers;
  long consumedSum = 0;
  long consumedCount = 0;
  auto producer = [&](int id) -> Lazy<> {
    for (int i = 0; i < kItemsPerProducer; ++i) {
      {
        ScopedLock lock = co_await mutex.scopedLock();
        queue.push_back(long{id} * kItemsPerProducer + i);
        if (i % 64 == 63) co_await yield();  // hold the mutex across a reschedule
      }
      if (i % 3 == 0) {
        notEmpty.notifyOne();
      } else if (i % 3 == 1) {
        notEmpty.notifyAll();
      }  // i % 3 == 2: no notification (a later one covers it)
    }
    ScopedLock lock = co_await mutex.scopedLock();
    --producersLeft;
    lock.unlock();
    notEmpty.notifyAll();
  };
  auto consumer = [&]() -> Lazy<> {
    for (;;) {
      ScopedLock lock = co_await mutex.scopedLock();
      co_await notEmpty.wait(mutex, [&] { return !queue.empty() || producersLeft == 0; });
      if (queue.empty()) co_return;  // producers are done and everything is consumed
      consumedSum += queue.front();
      ++consumedCount;
      queue.pop_front();
    }
  };
  std::vector<Lazy<>> branches;
  for (int i = 0; i < kConsumers; ++i) branches.push_back(consumer());
  for (int i = 0; i < kProducers; ++i) branches.push_back(producer(i));
  syncAwait(collectAllPara(std::move(branches)), &pool);
  const long n = long{kProducers} * kItemsPerProducer;
  EXPECT_EQ(consumedCount, n);
  EXPECT_EQ(consumedSum, n * (n - 1) / 2);
  EXPECT_TRUE(queue.empty());
}

// Locks, waits once, and reports whether the wait was cancelled and whether the mutex
// was held when it returned (normally or not).
Lazy<std::pair<bool, bool>> waitOrCancelled(Mutex& mutex, ConditionVariable& cv) {
  Counted alive;
  ScopedLock lock = co_await mutex.scopedLock();
  bool cancelled = false;
  try {
    co_await cv.wait(mutex);
  } catch (const OperationCancelled&) {
    cancelled = true;
  }
  co_return std::pair{cancelled, !mutex.tryLock()};
}

TEST(ConditionVariableCancellationTest, ACancelledWaitReacquiresTheMutexThenThrows) {
  Counted::reset();
  Mutex mutex;
  ConditionVariable cv;
  CancellationSource source;
  std::optional<std::pair<bool, bool>> result;
  withCancellation(source.token(), waitOrCancelled(mutex, cv))
      .start([&](Try<std::pair<bool, bool>> r) { result = r.value(); });
  ASSERT_TRUE(mutex.tryLock());  // the waiter released it
  source.requestCancellation();  // it leaves the cv queue and waits for the mutex
  EXPECT_FALSE(result.has_value());
  mutex.unlock();
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->first);   // cancelled
  EXPECT_TRUE(result->second);  // with the mutex held
  EXPECT_EQ(Counted::alive(), 0);
  cv.notifyAll();  // nobody left in the queue
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(ConditionVariableCancellationTest, BeforeTheWaitItThrowsWithoutReleasingTheMutex) {
  Mutex mutex;
  ConditionVariable cv;
  CancellationSource source;
  source.requestCancellation();
  auto [cancelled, held] =
      syncAwait(withCancellation(source.token(), waitOrCancelled(mutex, cv)));
  EXPECT_TRUE(cancelled);
  EXPECT_TRUE(held);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(ConditionVariableCancellationTest, AfterTheNotificationItHasNoEffect) {
  Mutex mutex;
  ConditionVariable cv;
  CancellationSource source;
  std::optional<std::pair<bool, bool>> result;
  withCancellation(source.token(), waitOrCancelled(mutex, cv))
      .start([&](Try<std::pair<bool, bool>> r) { result = r.value(); });
  ASSERT_TRUE(mutex.tryLock());
  cv.notifyOne();                // into the mutex queue
  source.requestCancellation();  // too late
  mutex.unlock();
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(result->first);
  EXPECT_TRUE(result->second);
}

TEST(ConditionVariableCancellationTest, CancellationRacingWithNotifyOnTwoThreads) {
  Watchdog watchdog(120s, "ConditionVariableCancellationTest.RacingWithNotify");
  Counted::reset();
  ThreadPool pool(2);
  long notified = 0, cancelled = 0;
  for (int round = 0; round < 300; ++round) {
    Mutex mutex;
    ConditionVariable cv;
    CancellationSource source;
    bool go = false;  // guarded by mutex
    std::atomic<int> waiting{0};
    std::vector<Lazy<bool>> branches;
    for (int i = 0; i < 4; ++i) {
      branches.push_back(withCancellation(
          source.token(), [](Mutex& m, ConditionVariable& c, bool& g,
                             std::atomic<int>& w) -> Lazy<bool> {
            Counted alive;
            ScopedLock<Mutex> lock;
            try {
              lock = co_await m.scopedLock();  // this wait is cancellable too
            } catch (const OperationCancelled&) {
              co_return true;
            }
            w.fetch_add(1);
            try {
              co_await c.wait(m, [&] { return g; });
            } catch (const OperationCancelled&) {
              if (m.tryLock()) std::abort();  // must hold the mutex here
              co_return true;
            }
            co_return false;
          }(mutex, cv, go, waiting)));
    }
    branches.push_back([](Mutex& m, ConditionVariable& c, bool& g) -> Lazy<bool> {
      {
        ScopedLock lock = co_await m.scopedLock();
        g = true;
      }
      c.notifyAll();
      co_return false;
    }(mutex, cv, go));
    branches.push_back([](CancellationSource& s) -> Lazy<bool> {
      s.requestCancellation();
      co_return false;
    }(source));
    auto results = syncAwait(collectAllPara(std::move(branches)), &pool);
    for (int i = 0; i < 4; ++i) (results[i].value() ? cancelled : notified) += 1;
    EXPECT_TRUE(mutex.tryLock());
    mutex.unlock();
  }
  EXPECT_EQ(notified + cancelled, 300 * 4);
  EXPECT_EQ(Counted::alive(), 0);
}

// On ThreadPool(1) these fibers act on their parks before switching out.
static_assert(ResumesOnlyThroughExecutor<detail::ConditionVariableWaitAwaiter>);
class ConditionVariableFiberTest : public test::PoolThreadsTest {};

TEST_P(ConditionVariableFiberTest, FiberProducersAndLazyConsumersAndViceVersa) {
  Watchdog watchdog(120s, "ConditionVariableFiberTest.FiberProducersAndLazyConsumers");
  constexpr int kEach = 20;     // of each kind: fiber producers, Lazy producers, ...
  constexpr int kItems = 500;  // per producer
  ThreadPool pool(GetParam());
  Mutex mutex;
  ConditionVariable notEmpty;
  std::deque<long> queue;  // guarded by mutex
  int producersLeft = 2 * kEach;
  long sum = 0, count = 0;
  auto produceOne = [&](long value) { queue.push_back(value); };
  std::vector<FiberFuture<void>> fibers;
  for (int i = 0; i < kEach; ++i) {
    fibers.push_back(spawnFiber(&pool, [&, i] {  // a producer
      for (int k = 0; k < kItems; ++k) {
        {
          ScopedLock lock = await(mutex.scopedLock());
          produceOne(long{i} * kItems + k);
        }
        notEmpty.notifyOne();
      }
      ScopedLock lock = await(mutex.scopedLock());
      --producersLeft;
      lock.unlock();
      notEmpty.notifyAll();
    }));
    fibers.push_back(spawnFiber(&pool, [&] {  // a consumer
      for (;;) {
        ScopedLock lock = await(mutex.scopedLock());
        await(notEmpty.wait(mutex, [&] { return !queue.empty() || producersLeft == 0; }));
        if (queue.empty()) return;
        sum += queue.front();
        ++count;
        queue.pop_front();
      }
    }));
  }
  auto lazyProducer = [&](int i) -> Lazy<> {
    for (int k = 0; k < kItems; ++k) {
      {
        ScopedLock lock = co_await mutex.scopedLock();
        produceOne(long{kEach + i} * kItems + k);
      }
      notEmpty.notifyOne();
    }
    ScopedLock lock = co_await mutex.scopedLock();
    --producersLeft;
    lock.unlock();
    notEmpty.notifyAll();
  };
  auto lazyConsumer = [&]() -> Lazy<> {
    for (;;) {
      ScopedLock lock = co_await mutex.scopedLock();
      co_await notEmpty.wait(mutex, [&] { return !queue.empty() || producersLeft == 0; });
      if (queue.empty()) co_return;
      sum += queue.front();
      ++count;
      queue.pop_front();
    }
  };
  std::vector<Lazy<>> lazys;
  for (int i = 0; i < kEach; ++i) {
    lazys.push_back(lazyConsumer());
    lazys.push_back(lazyProducer(i));
  }
  syncAwait(collectAllPara(std::move(lazys)), &pool);
  for (auto& fiber : fibers) syncAwait(std::move(fiber));
  const long n = 2L * kEach * kItems;
  EXPECT_EQ(count, n);
  EXPECT_EQ(sum, n * (n - 1) / 2);
}

// A fiber's token cancels its wait for a notification, before it queues and while it is
// queued; either way the await throws holding the mutex again (the ScopedLock's unlock
// would abort otherwise), and the mutex is free once the fibers are done.
TEST_P(ConditionVariableFiberTest, AFibersTokenCancelsItsWait) {
  Watchdog watchdog(60s, "ConditionVariableFiberTest.AFibersTokenCancelsItsWait");
  ThreadPool pool(GetParam());
  Mutex mutex;
  ConditionVariable cv;
  test::expectFiberWaitCancelled(pool, [&] {
    ScopedLock lock = await(mutex.scopedLock());
    await(cv.wait(mutex));
  });
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

INSTANTIATE_TEST_SUITE_P(Threads, ConditionVariableFiberTest, test::oneAndTwoPoolThreads(),
                         test::poolThreadsName);

TEST(ConditionVariableDeathTest, MisuseAborts) {
  EXPECT_DEATH(
      {
        Mutex mutex;
        ConditionVariable cv;
        syncAwait([](ConditionVariable& c, Mutex& m) -> Lazy<> { co_await c.wait(m); }(cv, mutex));
      },
      "ConditionVariable::wait\\(\\) called without holding the Mutex");
  EXPECT_DEATH(
      {
        Mutex mutex;
        auto* cv = new ConditionVariable;
        std::atomic<int> done{0};
        startDetached(
            [](ConditionVariable& c, Mutex& m) -> Lazy<> {
              co_await m.lock();
              co_await c.wait(m);
            }(*cv, mutex),
            done);
        delete cv;
      },
      "ConditionVariable destroyed while coroutines are waiting");
}

}  // namespace
}  // namespace weft
