#include "weft/coro/mutex.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/lazy.h"
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
#include "test/support/stack_address.h"
#include "test/support/start_detached.h"
#include "test/support/thread_states.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualExecutor;
using test::nativeStackAddress;
using test::startDetached;
using test::Watchdog;

TEST(MutexTest, TryLockSucceedsOnlyWhileUnlocked) {
  Mutex mutex;
  EXPECT_TRUE(mutex.tryLock());
  EXPECT_FALSE(mutex.tryLock());
  mutex.unlock();
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(MutexTest, LockOfAFreeMutexDoesNotSuspend) {
  Mutex mutex;
  std::thread::id ranOn;
  syncAwait([&]() -> Lazy<> {
    co_await mutex.lock();
    ranOn = std::this_thread::get_id();
  }());
  EXPECT_EQ(ranOn, std::this_thread::get_id());
  EXPECT_FALSE(mutex.tryLock());  // still held: lock() has no guard
  mutex.unlock();
}

TEST(MutexTest, ScopedLockUnlocksAtTheEndOfItsScope) {
  Mutex mutex;
  bool heldInside = false;
  syncAwait([&]() -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    EXPECT_TRUE(lock.ownsLock());
    EXPECT_EQ(lock.mutex(), &mutex);
    heldInside = !mutex.tryLock();
  }());
  EXPECT_TRUE(heldInside);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(MutexTest, ScopedLockMovesUnlocksEarlyAndReleases) {
  Mutex mutex;
  {
    ScopedLock<Mutex> a = mutex.tryScopedLock();
    ASSERT_TRUE(a);
    EXPECT_FALSE(mutex.tryScopedLock());
    ScopedLock<Mutex> b = std::move(a);
    EXPECT_FALSE(a.ownsLock());
    EXPECT_TRUE(b.ownsLock());
    b.unlock();
    EXPECT_FALSE(b.ownsLock());
    EXPECT_TRUE(mutex.tryLock());
    ScopedLock<Mutex> c(mutex, std::adopt_lock);
    Mutex* released = c.release();
    EXPECT_EQ(released, &mutex);
  }
  // c released without unlocking: still locked.
  EXPECT_FALSE(mutex.tryLock());
  mutex.unlock();
}

TEST(MutexTest, WaitersAcquireInFifoOrder) {
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  std::vector<int> order;
  std::atomic<int> done{0};
  // A named lambda: the coroutines refer to its captures after this statement.
  auto waiter = [&](int id) -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    order.push_back(id);
  };
  for (int i = 0; i < 5; ++i) startDetached(waiter(i), done);
  EXPECT_TRUE(order.empty());  // all suspended
  mutex.unlock();              // no executor: they run here, one after another
  EXPECT_EQ(done.load(), 5);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(MutexTest, UnlockHandsTheLockToTheWaiterWithoutBarging) {
  Mutex mutex;
  ManualExecutor executor;
  ASSERT_TRUE(mutex.tryLock());
  bool acquired = false;
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> {
    co_await mutex.lock();
    acquired = true;
    mutex.unlock();
  };
  waiter().via(&executor).start([&](Try<void>) { done.fetch_add(1); });
  executor.runAll();  // the task starts and suspends on the lock
  EXPECT_FALSE(acquired);
  mutex.unlock();
  // Handed over, and scheduled on the waiter's executor rather than run inside unlock():
  EXPECT_FALSE(acquired);
  EXPECT_EQ(executor.pending(), 1u);
  EXPECT_FALSE(mutex.tryLock());  // owned by the waiter: a newcomer cannot barge in
  executor.runAll();
  EXPECT_TRUE(acquired);
  EXPECT_EQ(done.load(), 1);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(MutexTest, WaiterOnAPoolResumesOnThePoolNotOnTheUnlockingThread) {
  Watchdog watchdog(60s, "MutexTest.WaiterOnAPoolResumesOnThePool");
  Mutex mutex;
  ThreadPool pool(1);
  ASSERT_TRUE(mutex.tryLock());
  std::atomic<bool> started{false};
  std::thread::id resumedOn;
  bool onPool = false;
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> {
    started = true;
    co_await mutex.lock();
    resumedOn = std::this_thread::get_id();
    onPool = pool.currentThreadInExecutor();
    mutex.unlock();
  };
  waiter().via(&pool).start([&](Try<void>) { done.fetch_add(1); });
  // Hand-shake: once the waiter has started and the pool's worker is asleep, the waiter
  // waits in lock(), so this unlock resumes it from outside the pool.
  while (!started) std::this_thread::yield();
  EXPECT_TRUE(test::waitUntilIdle(pool));
  mutex.unlock();
  while (done.load() == 0) std::this_thread::yield();
  EXPECT_NE(resumedOn, std::this_thread::get_id());
  EXPECT_TRUE(onPool);
}

TEST(MutexTest, ALongQueueOfInlineWaitersDoesNotGrowTheStack) {
  constexpr int kWaiters = 100'000;
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  std::uintptr_t lowest = UINTPTR_MAX, highest = 0;
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    std::uintptr_t sp = nativeStackAddress();
    lowest = std::min(lowest, sp);
    highest = std::max(highest, sp);
  };
  for (int i = 0; i < kWaiters; ++i) startDetached(waiter(), done);
  mutex.unlock();
  EXPECT_EQ(done.load(), kWaiters);
  // Nested resumption would use at least a few hundred bytes per waiter (tens of MB).
  EXPECT_LT(highest - lowest, 64u * 1024u);
}

TEST(MutexTest, ADestroyedWaiterLeavesTheQueue) {
  Counted::reset();
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  bool reachedBody = false;
  {
    auto body = [&]() -> Lazy<> {
      Counted local;
      co_await mutex.lock();
      reachedBody = true;
    };
    Lazy<> waiter = body();
    detail::LazyAccess::handle(waiter).resume();  // runs until it suspends on the lock
    EXPECT_EQ(Counted::alive(), 1);
  }  // destroys the suspended frame
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_FALSE(reachedBody);
  mutex.unlock();  // must not touch the destroyed waiter (ASan would tell)
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

// Adds `pairs` to `counter` under the lock, one lock/unlock pair at a time, alternating
// lock()/unlock(), scopedLock() and tryLock()-then-lock(); counts in `contended` the
// times tryLock() found the lock taken.
Lazy<> addUnderLock(Mutex& mutex, long& counter, int pairs, bool yieldInside,
                    std::atomic<int>* contended = nullptr) {
  for (int i = 0; i < pairs; ++i) {
    if (i % 3 == 2) {
      if (!mutex.tryLock()) {
        if (contended != nullptr) contended->fetch_add(1, std::memory_order_relaxed);
        co_await mutex.lock();
      }
      ++counter;
      mutex.unlock();
    } else if (i % 3 == 0) {
      co_await mutex.lock();
      long seen = counter;
      if (yieldInside) co_await yield();  // hold the lock across a reschedule
      counter = seen + 1;
      mutex.unlock();
    } else {
      ScopedLock lock = co_await mutex.scopedLock();
      ++counter;
    }
  }
}

TEST(MutexTest, StressOnTwoThreadsKeepsANonAtomicCounterExact) {
  Watchdog watchdog(120s, "MutexTest.StressOnTwoThreads");
  constexpr int kWaiters = 1000;
  constexpr int kPairs = 100;  // 100,000 lock/unlock pairs in all
  Mutex mutex;
  long counter = 0;
  ThreadPool pool(2);
  std::atomic<int> contended{0};
  std::vector<Lazy<>> branches;
  for (int i = 0; i < kWaiters; ++i) {
    branches.push_back(
        addUnderLock(mutex, counter, kPairs, /*yieldInside=*/i % 10 == 0, &contended));
  }
  auto results = syncAwait(collectAllPara(std::move(branches)), &pool);
  for (auto& r : results) EXPECT_TRUE(r.hasValue());
  EXPECT_EQ(counter, long{kWaiters} * kPairs);
  // Holders that yield go to the back of the pool's FIFO queues, behind branches that
  // then find the lock taken: the test did exercise the waiting path.
  EXPECT_GT(contended.load(), 0);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(MutexTest, StressWithExecutorAndInlineWaitersTogether) {
  // Pool tasks (resumed through the pool) and plain Lazys on two outside threads
  // (resumed inline by whoever unlocks) contend for one lock.
  Watchdog watchdog(120s, "MutexTest.StressWithExecutorAndInlineWaiters");
  constexpr int kPairs = 20'000;
  Mutex mutex;
  long counter = 0;
  ThreadPool pool(2);
  std::vector<std::thread> outside;
  for (int t = 0; t < 2; ++t) {
    outside.emplace_back([&] { syncAwait(addUnderLock(mutex, counter, kPairs, false)); });
  }
  std::vector<Lazy<>> branches;
  for (int i = 0; i < 4; ++i) branches.push_back(addUnderLock(mutex, counter, kPairs, i == 0));
  syncAwait(collectAllPara(std::move(branches)), &pool);
  for (auto& t : outside) t.join();
  EXPECT_EQ(counter, 6L * kPairs);
}

// Awaits mutex.lock() and reports whether it threw OperationCancelled; on success it
// keeps the lock (the test unlocks). `alive` lives in the frame for the leak checks.
Lazy<bool> lockOrCancelled(Mutex& mutex) {
  Counted alive;
  try {
    co_await mutex.lock();
  } catch (const OperationCancelled&) {
    co_return true;
  }
  co_return false;
}

TEST(MutexCancellationTest, CancelledBeforeTheWaitThrowsWithoutQueueing) {
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  CancellationSource source;
  source.requestCancellation();
  EXPECT_TRUE(syncAwait(withCancellation(source.token(), lockOrCancelled(mutex))));
  mutex.unlock();
  EXPECT_TRUE(mutex.tryLock());  // nobody was queued to receive it
  mutex.unlock();
}

TEST(MutexCancellationTest, AFreeLockIsAcquiredEvenIfCancellationWasRequested) {
  Mutex mutex;
  CancellationSource source;
  source.requestCancellation();
  EXPECT_FALSE(syncAwait(withCancellation(source.token(), lockOrCancelled(mutex))));
  EXPECT_FALSE(mutex.tryLock());
  mutex.unlock();
}

TEST(MutexCancellationTest, CancelledWhileWaitingLeavesTheQueueOthersStillGetTheLock) {
  Counted::reset();
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  CancellationSource source;
  std::optional<bool> cancelled;
  withCancellation(source.token(), lockOrCancelled(mutex)).start([&](Try<bool> r) {
    cancelled = r.value();
  });
  bool otherGotIt = false;
  std::atomic<int> done{0};
  auto other = [&]() -> Lazy<> {
    co_await mutex.lock();
    otherGotIt = true;
  };
  startDetached(other(), done);
  EXPECT_FALSE(cancelled.has_value());
  EXPECT_EQ(Counted::alive(), 1);
  source.requestCancellation();  // no executor: the waiter resumes here, with the error
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_TRUE(*cancelled);
  EXPECT_EQ(Counted::alive(), 0);  // its frame is gone
  mutex.unlock();                  // goes to the other waiter
  EXPECT_TRUE(otherGotIt);
  mutex.unlock();
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(MutexCancellationTest, ACancelledWaiterWithAnExecutorResumesThroughIt) {
  Mutex mutex;
  ManualExecutor executor;
  ASSERT_TRUE(mutex.tryLock());
  CancellationSource source;
  std::optional<bool> cancelled;
  withCancellation(source.token(), lockOrCancelled(mutex).via(&executor))
      .start([&](Try<bool> r) { cancelled = r.value(); });
  executor.runAll();
  source.requestCancellation();
  EXPECT_FALSE(cancelled.has_value());  // scheduled, not run inside requestCancellation()
  EXPECT_EQ(executor.pending(), 1u);
  executor.runAll();
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_TRUE(*cancelled);
  mutex.unlock();
}

TEST(MutexCancellationTest, CancellationAfterTheLockWasHandedOverHasNoEffect) {
  Mutex mutex;
  ManualExecutor executor;
  ASSERT_TRUE(mutex.tryLock());
  CancellationSource source;
  std::optional<bool> cancelled;
  withCancellation(source.token(), lockOrCancelled(mutex).via(&executor))
      .start([&](Try<bool> r) { cancelled = r.value(); });
  executor.runAll();
  mutex.unlock();                // handed to the waiter, which is scheduled
  source.requestCancellation();  // too late: the wait is complete
  executor.runAll();
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_FALSE(*cancelled);
  EXPECT_FALSE(mutex.tryLock());  // the waiter holds it
  mutex.unlock();
}

TEST(MutexCancellationTest, CancellationRacingWithHandOffOnTwoThreads) {
  // Waiters whose tokens are cancelled at random moments (before, during and after
  // their waits) contend with waiters that are never cancelled. Every wait must end
  // exactly once, either holding the lock or with OperationCancelled, and no frame may
  // leak.
  Watchdog watchdog(120s, "MutexCancellationTest.CancellationRacingWithHandOff");
  Counted::reset();
  constexpr int kWaiters = 400;
  constexpr int kRounds = 50;
  ThreadPool pool(2);
  Mutex mutex;
  long counter = 0;  // guarded by mutex
  std::atomic<long> acquired{0}, cancelled{0};
  std::vector<CancellationSource> sources(kWaiters);
  auto waiter = [&](int id) -> Lazy<> {
    Counted alive;
    for (int r = 0; r < kRounds; ++r) {
      try {
        ScopedLock lock = co_await mutex.scopedLock();
        ++counter;
        acquired.fetch_add(1);
        if ((id + r) % 5 == 0) {
          // Held across a reschedule. yield() is a cancellation point: a cancellation that
          // arrives now ends the yield early, and the round still counts as acquired.
          try {
            co_await yield();
          } catch (const OperationCancelled&) {
          }
        }
      } catch (const OperationCancelled&) {
        cancelled.fetch_add(1);
      }
    }
  };
  auto canceller = [&](int first) -> Lazy<> {
    for (int i = first; i < kWaiters; i += 4) {
      sources[i].requestCancellation();
      co_await yield();
    }
  };
  std::vector<Lazy<>> branches;
  for (int i = 0; i < kWaiters; ++i) {
    branches.push_back(i % 2 == 0 ? withCancellation(sources[i].token(), waiter(i)) : waiter(i));
    if (i % 100 == 50) branches.push_back(canceller(i % 4 == 2 ? 2 : 0));
  }
  syncAwait(collectAllPara(std::move(branches)), &pool);
  EXPECT_EQ(acquired.load() + cancelled.load(), long{kWaiters} * kRounds);
  EXPECT_EQ(counter, acquired.load());
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

// On ThreadPool(1) these fibers act on their parks before switching out.
static_assert(ResumesOnlyThroughExecutor<detail::MutexLockAwaiter<void>>);
class MutexFiberTest : public test::PoolThreadsTest {};

TEST_P(MutexFiberTest, FibersAndLazysShareOneMutex) {
  Watchdog watchdog(120s, "MutexFiberTest.FibersAndLazysShareOneMutex");
  constexpr int kEach = 50;
  constexpr int kPairs = 200;
  ThreadPool pool(GetParam());
  Mutex mutex;
  long counter = 0;
  std::vector<FiberFuture<void>> fibers;
  for (int i = 0; i < kEach; ++i) {
    fibers.push_back(spawnFiber(&pool, [&, i] {
      for (int r = 0; r < kPairs; ++r) {
        if (r % 2 == 0) {
          ScopedLock lock = await(mutex.scopedLock());
          long seen = counter;
          if ((i + r) % 8 == 0) this_fiber::yield();  // hold it across a reschedule
          counter = seen + 1;
        } else {
          await(mutex.lock());
          ++counter;
          mutex.unlock();
        }
      }
    }));
  }
  std::vector<Lazy<>> lazys;
  for (int i = 0; i < kEach; ++i) lazys.push_back(addUnderLock(mutex, counter, kPairs, i % 4 == 0));
  syncAwait(collectAllPara(std::move(lazys)), &pool);
  for (auto& fiber : fibers) syncAwait(std::move(fiber));
  EXPECT_EQ(counter, 2L * kEach * kPairs);
}

// A fiber's token cancels its wait for a held Mutex, before it queues and while it is
// queued; the lock is never handed to a cancelled fiber: the waiter left gets it.
TEST_P(MutexFiberTest, AFibersTokenCancelsItsWait) {
  Watchdog watchdog(60s, "MutexFiberTest.AFibersTokenCancelsItsWait");
  ThreadPool pool(GetParam());
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  auto bystander = spawnFiber(&pool, [&] {
    await(mutex.lock());
    mutex.unlock();
  });
  test::expectFiberWaitCancelled(pool, [&] { await(mutex.lock()); });
  mutex.unlock();  // to the bystander, the only waiter left
  syncAwait(std::move(bystander));
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

INSTANTIATE_TEST_SUITE_P(Threads, MutexFiberTest, test::oneAndTwoPoolThreads(),
                         test::poolThreadsName);

TEST(MutexDeathTest, UnlockOfAnUnlockedMutexAborts) {
  EXPECT_DEATH(
      {
        Mutex mutex;
        mutex.unlock();
      },
      "Mutex::unlock\\(\\) called on a Mutex that is not locked");
}

TEST(MutexDeathTest, UnlockOfAnEmptyScopedLockAborts) {
  EXPECT_DEATH(
      {
        ScopedLock<Mutex> empty;
        empty.unlock();
      },
      "ScopedLock::unlock\\(\\) on a ScopedLock that owns no lock");
}

TEST(MutexDeathTest, DestroyingAMutexWithWaitersAborts) {
  EXPECT_DEATH(
      {
        auto* mutex = new Mutex;
        ASSERT_TRUE(mutex->tryLock());
        std::atomic<int> done{0};
        startDetached([](Mutex& m) -> Lazy<> { co_await m.lock(); }(*mutex), done);
        delete mutex;
      },
      "Mutex destroyed while coroutines are waiting");
}

}  // namespace
}  // namespace weft
