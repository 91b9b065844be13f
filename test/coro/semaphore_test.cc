#include "coro/semaphore.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "coro/collect.h"
#include "coro/lazy.h"
#include "coro/sync_await.h"
#include "coro/task.h"
#include "coro/yield.h"
#include "executors/thread_pool.h"
#include "test/support/counted.h"
#include "test/support/manual_executor.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualExecutor;
using test::Watchdog;

void startDetached(Lazy<> lazy, std::atomic<int>& done) {
  std::move(lazy).start([&done](Try<void> result) {
    EXPECT_TRUE(result.hasValue());
    done.fetch_add(1);
  });
}

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
