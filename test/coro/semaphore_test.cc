#include "weft/coro/semaphore.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
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
#include "test/support/start_detached.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualExecutor;
using test::startDetached;
using test::Watchdog;

TEST(SemaphoreTest, TryAcquireTakesOnlyAvailablePermits) {
  Semaphore semaphore(2);
  EXPECT_EQ(semaphore.available(), 2);
  EXPECT_TRUE(semaphore.tryAcquire());
  EXPECT_TRUE(semaphore.tryAcquire());
  EXPECT_FALSE(semaphore.tryAcquire());
  EXPECT_EQ(semaphore.available(), 0);
  semaphore.release(2);
  EXPECT_EQ(semaphore.available(), 2);
}

TEST(SemaphoreTest, AcquireWithAFreePermitDoesNotSuspend) {
  Semaphore semaphore(1);
  std::thread::id ranOn;
  syncAwait([&]() -> Lazy<> {
    co_await semaphore.acquire();
    ranOn = std::this_thread::get_id();
  }());
  EXPECT_EQ(ranOn, std::this_thread::get_id());
  EXPECT_EQ(semaphore.available(), 0);
}

TEST(SemaphoreTest, ReleaseWakesWaitersInFifoOrder) {
  Semaphore semaphore(0);
  std::vector<int> order;
  std::atomic<int> done{0};
  auto waiter = [&](int id) -> Lazy<> {
    co_await semaphore.acquire();
    order.push_back(id);
  };
  for (int i = 0; i < 4; ++i) startDetached(waiter(i), done);
  EXPECT_EQ(done.load(), 0);
  semaphore.release();
  EXPECT_EQ(order, (std::vector<int>{0}));
  semaphore.release(2);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  semaphore.release(3);  // one waiter left: it takes one, two permits remain
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(semaphore.available(), 2);
}

TEST(SemaphoreTest, ReleasedPermitsGoToWaitersNotToNewcomers) {
  Semaphore semaphore(0);
  ManualExecutor executor;
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> { co_await semaphore.acquire(); };
  waiter().via(&executor).start([&](Try<void>) { done.fetch_add(1); });
  executor.runAll();
  semaphore.release();
  // Handed to the waiter, which is scheduled on its executor, not run inside release().
  EXPECT_EQ(executor.pending(), 1u);
  EXPECT_EQ(semaphore.available(), 0);
  EXPECT_FALSE(semaphore.tryAcquire());
  executor.runAll();
  EXPECT_EQ(done.load(), 1);
}

TEST(SemaphoreTest, TryAcquireFailsWhileOthersWait) {
  Semaphore semaphore(0);
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> { co_await semaphore.acquire(); };
  startDetached(waiter(), done);
  EXPECT_FALSE(semaphore.tryAcquire());
  semaphore.release();
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(semaphore.available(), 0);
}

TEST(SemaphoreTest, ScopedAcquireReturnsThePermitAtTheEndOfItsScope) {
  Semaphore semaphore(2);
  syncAwait([&]() -> Lazy<> {
    {
      SemaphorePermit permit = co_await semaphore.scopedAcquire();
      EXPECT_TRUE(permit.ownsPermit());
      EXPECT_EQ(permit.semaphore(), &semaphore);
      EXPECT_EQ(semaphore.available(), 1);
    }
    EXPECT_EQ(semaphore.available(), 2);
    try {
      SemaphorePermit permit = co_await semaphore.scopedAcquire();
      throw std::runtime_error("request failed");
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(semaphore.available(), 2);  // returned by the unwinding too
  }());
}

TEST(SemaphoreTest, PermitsMoveReleaseEarlyAndDetach) {
  Semaphore semaphore(1);
  SemaphorePermit a = semaphore.tryScopedAcquire();
  EXPECT_TRUE(a);
  EXPECT_FALSE(semaphore.tryScopedAcquire());
  SemaphorePermit b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_TRUE(b);
  EXPECT_EQ(semaphore.available(), 0);
  b.release();
  EXPECT_FALSE(b);
  EXPECT_EQ(semaphore.available(), 1);
  SemaphorePermit c = semaphore.tryScopedAcquire();
  EXPECT_EQ(c.detach(), &semaphore);
  EXPECT_FALSE(c);
  EXPECT_EQ(semaphore.available(), 0);  // detached: still taken
  SemaphorePermit d(semaphore, std::adopt_lock);
  d = SemaphorePermit();  // assigning releases what was owned
  EXPECT_EQ(semaphore.available(), 1);
}

TEST(SemaphoreTest, ADroppedPermitGoesToTheOldestWaiter) {
  Semaphore semaphore(1);
  std::vector<int> order;
  std::atomic<int> done{0};
  auto held = std::make_unique<SemaphorePermit>(semaphore.tryScopedAcquire());
  auto waiter = [&](int id) -> Lazy<> {
    SemaphorePermit permit = co_await semaphore.scopedAcquire();
    order.push_back(id);
  };
  startDetached(waiter(0), done);
  startDetached(waiter(1), done);
  EXPECT_TRUE(order.empty());
  held.reset();  // handed to waiter 0, whose permit then goes to waiter 1
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  EXPECT_EQ(done.load(), 2);
  EXPECT_EQ(semaphore.available(), 1);
}

TEST(SemaphoreTest, ACancelledScopedAcquireHoldsNoPermit) {
  Semaphore semaphore(0);
  CancellationSource source;
  std::atomic<int> outcome{0};  // 1: cancelled, 2: got a permit
  auto body = [&]() -> Lazy<> {  // named: it outlives this statement's suspension
    SemaphorePermit permit = co_await semaphore.scopedAcquire();
    outcome = 2;
  };
  withCancellation(source.token(), body()).start([&](Try<void> result) {
    if (result.hasException()) {
      try {
        std::rethrow_exception(result.exception());
      } catch (const OperationCancelled&) {
        outcome = 1;
      } catch (...) {
      }
    }
  });
  EXPECT_EQ(outcome.load(), 0);
  source.requestCancellation();
  EXPECT_EQ(outcome.load(), 1);
  semaphore.release();
  EXPECT_EQ(semaphore.available(), 1);  // nobody kept or lost it
}

TEST(SemaphoreTest, AFiberHoldsAScopedPermit) {
  ThreadPool pool(2);
  Semaphore semaphore(1);
  std::atomic<int> inside{0};
  std::atomic<int> maxInside{0};
  auto body = [&] {
    for (int i = 0; i < 100; ++i) {
      SemaphorePermit permit = await(semaphore.scopedAcquire());
      const int now = inside.fetch_add(1) + 1;
      int seen = maxInside.load();
      while (now > seen && !maxInside.compare_exchange_weak(seen, now)) {
      }
      this_fiber::yield();
      inside.fetch_sub(1);
    }
  };
  auto a = spawnFiber(&pool, body);
  auto b = spawnFiber(&pool, body);
  syncAwait(std::move(a));
  syncAwait(std::move(b));
  EXPECT_EQ(maxInside.load(), 1);
  EXPECT_EQ(semaphore.available(), 1);
}

TEST(SemaphoreTest, BadCountsThrow) {
  EXPECT_THROW(Semaphore(-1), std::invalid_argument);
  EXPECT_THROW(Semaphore(Semaphore::max() + 1), std::overflow_error);
  Semaphore semaphore(Semaphore::max() - 1);
  EXPECT_THROW(semaphore.release(-1), std::invalid_argument);
  EXPECT_THROW(semaphore.release(2), std::overflow_error);
  EXPECT_EQ(semaphore.available(), Semaphore::max() - 1);  // nothing was released
  semaphore.release(1);
  EXPECT_EQ(semaphore.available(), Semaphore::max());
}

TEST(SemaphoreTest, ADestroyedWaiterLeavesTheQueue) {
  Counted::reset();
  Semaphore semaphore(0);
  std::atomic<int> done{0};
  {
    auto body = [&]() -> Lazy<> {
      Counted local;
      co_await semaphore.acquire();
    };
    Lazy<> doomed = body();
    detail::LazyAccess::handle(doomed).resume();
    EXPECT_EQ(Counted::alive(), 1);
  }
  EXPECT_EQ(Counted::alive(), 0);
  auto keeper = [&]() -> Lazy<> { co_await semaphore.acquire(); };
  startDetached(keeper(), done);
  semaphore.release();  // goes to the live waiter, not the destroyed one
  EXPECT_EQ(done.load(), 1);
  semaphore.release();
  EXPECT_EQ(semaphore.available(), 1);
}

TEST(SemaphoreTest, NeverAdmitsMoreHoldersThanPermitsOnTwoThreads) {
  Watchdog watchdog(120s, "SemaphoreTest.NeverAdmitsMoreHoldersThanPermits");
  constexpr int kPermits = 3;
  constexpr int kTasks = 1000;
  constexpr int kRounds = 100;
  ThreadPool pool(2);
  Semaphore semaphore(kPermits);
  std::atomic<int> holders{0};
  std::atomic<int> maxHolders{0};
  std::atomic<long> entries{0};
  std::vector<Lazy<>> branches;
  for (int i = 0; i < kTasks; ++i) {
    branches.push_back([](Semaphore& s, std::atomic<int>& h, std::atomic<int>& m,
                          std::atomic<long>& n, int id) -> Lazy<> {
      for (int r = 0; r < kRounds; ++r) {
        if (r % 2 == 0 || !s.tryAcquire()) co_await s.acquire();
        int now = h.fetch_add(1) + 1;
        int seen = m.load();
        while (now > seen && !m.compare_exchange_weak(seen, now)) {
        }
        n.fetch_add(1);
        if ((id + r) % 7 == 0) co_await yield();  // hold the permit across a reschedule
        h.fetch_sub(1);
        s.release();
      }
    }(semaphore, holders, maxHolders, entries, i));
  }
  syncAwait(collectAllPara(std::move(branches)), &pool);
  EXPECT_EQ(entries.load(), long{kTasks} * kRounds);
  EXPECT_LE(maxHolders.load(), kPermits);
  EXPECT_GE(maxHolders.load(), 1);
  EXPECT_EQ(semaphore.available(), kPermits);
}

Lazy<bool> acquireOrCancelled(Semaphore& semaphore) {
  Counted alive;
  try {
    co_await semaphore.acquire();
  } catch (const OperationCancelled&) {
    co_return true;
  }
  co_return false;
}

TEST(SemaphoreCancellationTest, ACancelledWaiterTakesNoPermitAndTheNextOneGetsIt) {
  Counted::reset();
  Semaphore semaphore(0);
  CancellationSource source;
  std::optional<bool> cancelled;
  withCancellation(source.token(), acquireOrCancelled(semaphore)).start([&](Try<bool> r) {
    cancelled = r.value();
  });
  std::atomic<int> done{0};
  auto other = [&]() -> Lazy<> { co_await semaphore.acquire(); };
  startDetached(other(), done);
  source.requestCancellation();
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_TRUE(*cancelled);
  EXPECT_EQ(Counted::alive(), 0);
  semaphore.release();
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(semaphore.available(), 0);
  // Cancelled before waiting: throws at once; with a free permit: takes it.
  CancellationSource early;
  early.requestCancellation();
  EXPECT_TRUE(syncAwait(withCancellation(early.token(), acquireOrCancelled(semaphore))));
  semaphore.release();
  EXPECT_FALSE(syncAwait(withCancellation(early.token(), acquireOrCancelled(semaphore))));
  EXPECT_EQ(semaphore.available(), 0);
}

TEST(SemaphoreCancellationTest, CancellationRacingWithReleaseNeverLosesAPermit) {
  Watchdog watchdog(120s, "SemaphoreCancellationTest.CancellationRacingWithRelease");
  Counted::reset();
  constexpr int kPermits = 2;
  constexpr int kWaiters = 400;
  constexpr int kRounds = 50;
  ThreadPool pool(2);
  Semaphore semaphore(kPermits);
  std::atomic<int> holders{0}, maxHolders{0};
  std::atomic<long> acquired{0}, cancelled{0};
  std::vector<CancellationSource> sources(kWaiters);
  auto waiter = [&](int id) -> Lazy<> {
    Counted alive;
    for (int r = 0; r < kRounds; ++r) {
      try {
        co_await semaphore.acquire();
      } catch (const OperationCancelled&) {
        cancelled.fetch_add(1);
        continue;
      }
      int now = holders.fetch_add(1) + 1;
      int seen = maxHolders.load();
      while (now > seen && !maxHolders.compare_exchange_weak(seen, now)) {
      }
      acquired.fetch_add(1);
      if ((id + r) % 5 == 0) {
        // Held across a reschedule. yield() is a cancellation point: a cancellation that
        // arrives now ends the yield early, and the round still counts as acquired.
        try {
          co_await yield();
        } catch (const OperationCancelled&) {
        }
      }
      holders.fetch_sub(1);
      semaphore.release();
    }
  };
  auto canceller = [&]() -> Lazy<> {
    for (int i = 0; i < kWaiters; i += 2) {
      sources[i].requestCancellation();
      co_await yield();
    }
  };
  std::vector<Lazy<>> branches;
  for (int i = 0; i < kWaiters; ++i) {
    branches.push_back(withCancellation(sources[i].token(), waiter(i)));
    if (i == kWaiters / 4) branches.push_back(canceller());
  }
  syncAwait(collectAllPara(std::move(branches)), &pool);
  EXPECT_EQ(acquired.load() + cancelled.load(), long{kWaiters} * kRounds);
  EXPECT_LE(maxHolders.load(), kPermits);
  EXPECT_EQ(semaphore.available(), kPermits);  // no permit lost to a cancelled waiter
  EXPECT_EQ(Counted::alive(), 0);
}

// On ThreadPool(1) these fibers act on their parks before switching out.
static_assert(ResumesOnlyThroughExecutor<detail::SemaphoreAcquireAwaiter<void>>);
static_assert(ResumesOnlyThroughExecutor<detail::SemaphoreAcquireAwaiter<SemaphorePermit>>);
class SemaphoreFiberTest : public test::PoolThreadsTest {};

TEST_P(SemaphoreFiberTest, FibersAndLazysShareThePermits) {
  Watchdog watchdog(120s, "SemaphoreFiberTest.FibersAndLazysShareThePermits");
  constexpr int kEach = 50;
  constexpr int kRounds = 100;
  constexpr int kPermits = 2;
  ThreadPool pool(GetParam());
  Semaphore semaphore(kPermits);
  std::atomic<int> holders{0}, maxHolders{0};
  std::atomic<long> entries{0};
  auto enter = [&] {
    int now = holders.fetch_add(1) + 1;
    int seen = maxHolders.load();
    while (now > seen && !maxHolders.compare_exchange_weak(seen, now)) {
    }
    entries.fetch_add(1);
  };
  std::vector<FiberFuture<void>> fibers;
  for (int i = 0; i < kEach; ++i) {
    fibers.push_back(spawnFiber(&pool, [&, i] {
      for (int r = 0; r < kRounds; ++r) {
        await(semaphore.acquire());
        enter();
        if ((i + r) % 5 == 0) this_fiber::yield();
        holders.fetch_sub(1);
        semaphore.release();
      }
    }));
  }
  auto lazyBody = [&](int i) -> Lazy<> {
    for (int r = 0; r < kRounds; ++r) {
      co_await semaphore.acquire();
      enter();
      if ((i + r) % 5 == 0) co_await yield();
      holders.fetch_sub(1);
      semaphore.release();
    }
  };
  std::vector<Lazy<>> lazys;
  for (int i = 0; i < kEach; ++i) lazys.push_back(lazyBody(i));
  syncAwait(collectAllPara(std::move(lazys)), &pool);
  for (auto& fiber : fibers) syncAwait(std::move(fiber));
  EXPECT_EQ(entries.load(), 2L * kEach * kRounds);
  EXPECT_LE(maxHolders.load(), kPermits);
  EXPECT_EQ(semaphore.available(), kPermits);
}

// A fiber's token cancels its wait for a permit, before it queues and while it is
// queued; a released permit goes to the waiter left, not to a cancelled one.
TEST_P(SemaphoreFiberTest, AFibersTokenCancelsItsWait) {
  Watchdog watchdog(60s, "SemaphoreFiberTest.AFibersTokenCancelsItsWait");
  ThreadPool pool(GetParam());
  Semaphore semaphore(0);
  auto bystander = spawnFiber(&pool, [&] { await(semaphore.acquire()); });
  test::expectFiberWaitCancelled(pool, [&] { await(semaphore.acquire()); });
  semaphore.release();
  syncAwait(std::move(bystander));
  EXPECT_EQ(semaphore.available(), 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, SemaphoreFiberTest, test::oneAndTwoPoolThreads(),
                         test::poolThreadsName);

TEST(SemaphoreDeathTest, DestroyingASemaphoreWithWaitersAborts) {
  EXPECT_DEATH(
      {
        auto* semaphore = new Semaphore(0);
        std::atomic<int> done{0};
        startDetached([](Semaphore& s) -> Lazy<> { co_await s.acquire(); }(*semaphore), done);
        delete semaphore;
      },
      "Semaphore destroyed while coroutines are waiting");
}

}  // namespace
}  // namespace weft
