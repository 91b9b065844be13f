#include "weft/coro/latch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/fiber.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/manual_executor.h"
#include "test/support/pool_threads.h"
#include "test/support/start_detached.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::ManualExecutor;
using test::startDetached;
using test::Watchdog;

TEST(LatchTest, ALatchOfZeroIsReleasedAtOnce) {
  Latch latch(0);
  EXPECT_TRUE(latch.tryWait());
  bool passed = false;
  syncAwait([&]() -> Lazy<> {
    co_await latch.wait();
    passed = true;
  }());
  EXPECT_TRUE(passed);
}

TEST(LatchTest, CountingDownToZeroReleasesEveryWaiterInOrder) {
  Latch latch(3);
  std::vector<int> order;
  std::atomic<int> done{0};
  auto waiter = [&](int id) -> Lazy<> {
    co_await latch.wait();
    order.push_back(id);
  };
  for (int i = 0; i < 4; ++i) startDetached(waiter(i), done);
  latch.countDown();
  latch.countDown();
  EXPECT_FALSE(latch.tryWait());
  EXPECT_EQ(done.load(), 0);
  latch.countDown();
  EXPECT_TRUE(latch.tryWait());
  EXPECT_EQ(done.load(), 4);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(LatchTest, CountDownByNAndByZero) {
  Latch latch(5);
  latch.countDown(0);
  EXPECT_FALSE(latch.tryWait());
  latch.countDown(4);
  EXPECT_FALSE(latch.tryWait());
  latch.countDown(1);
  EXPECT_TRUE(latch.tryWait());
  latch.countDown(0);  // legal on a released latch
  EXPECT_TRUE(latch.tryWait());
}

TEST(LatchTest, CountingBelowZeroThrowsAndLeavesTheCountUnchanged) {
  Latch latch(2);
  EXPECT_THROW(latch.countDown(3), LatchUnderflow);
  EXPECT_THROW(latch.countDown(-1), LatchUnderflow);
  EXPECT_FALSE(latch.tryWait());
  latch.countDown(2);
  EXPECT_TRUE(latch.tryWait());
  try {
    latch.countDown();
    FAIL() << "no exception";
  } catch (const LatchUnderflow& e) {
    EXPECT_NE(std::string(e.what()).find("cannot count below zero"), std::string::npos);
  }
}

TEST(LatchTest, ANegativeInitialCountThrows) {
  EXPECT_THROW(Latch(-1), std::invalid_argument);
}

TEST(LatchTest, ArriveAndWaitReleasesEveryoneWhenTheLastArrives) {
  Latch latch(3);
  std::atomic<int> done{0};
  auto arriver = [&]() -> Lazy<> { co_await latch.arriveAndWait(); };
  startDetached(arriver(), done);
  startDetached(arriver(), done);
  EXPECT_EQ(done.load(), 0);
  startDetached(arriver(), done);  // the last arrival does not suspend, and releases all
  EXPECT_EQ(done.load(), 3);
}

TEST(LatchTest, ArriveAndWaitBelowZeroThrowsFromTheAwait) {
  Latch latch(1);
  bool threw = syncAwait([&]() -> Lazy<bool> {
    try {
      co_await latch.arriveAndWait(2);
    } catch (const LatchUnderflow&) {
      co_return true;
    }
    co_return false;
  }());
  EXPECT_TRUE(threw);
  EXPECT_FALSE(latch.tryWait());
}

TEST(LatchTest, WaitersWithAnExecutorAreScheduledOnIt) {
  Latch latch(1);
  ManualExecutor executor;
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> { co_await latch.wait(); };
  waiter().via(&executor).start([&](Try<void>) { done.fetch_add(1); });
  executor.runAll();
  latch.countDown();
  EXPECT_EQ(done.load(), 0);
  EXPECT_EQ(executor.pending(), 1u);
  executor.runAll();
  EXPECT_EQ(done.load(), 1);
}

TEST(LatchTest, ReleasesExactlyOnceOnTwoThreads) {
  Watchdog watchdog(120s, "LatchTest.ReleasesExactlyOnceOnTwoThreads");
  constexpr int kArrivers = 1000;
  constexpr int kWaiters = 200;
  ThreadPool pool(2);
  for (int round = 0; round < 20; ++round) {
    Latch latch(kArrivers);
    std::atomic<int> arrived{0};
    std::atomic<int> released{0};
    std::atomic<int> early{0};
    std::vector<Lazy<>> branches;
    for (int i = 0; i < kArrivers + kWaiters; ++i) {
      if (i % 6 == 0 && i / 6 < kWaiters) {
        branches.push_back([](Latch& l, std::atomic<int>& a, std::atomic<int>& r,
                              std::atomic<int>& e) -> Lazy<> {
          co_await l.wait();
          if (a.load() != kArrivers) e.fetch_add(1);  // released before the last arrival
          r.fetch_add(1);
        }(latch, arrived, released, early));
      } else {
        branches.push_back([](Latch& l, std::atomic<int>& a) -> Lazy<> {
          a.fetch_add(1);
          l.countDown();
          co_return;
        }(latch, arrived));
      }
    }
    syncAwait(collectAllPara(std::move(branches)), &pool);
    ASSERT_EQ(arrived.load(), kArrivers);
    ASSERT_EQ(released.load(), kWaiters);  // each waiter resumed once: no more, no fewer
    ASSERT_EQ(early.load(), 0);
    ASSERT_TRUE(latch.tryWait());
  }
}

TEST(LatchCancellationTest, ACancelledWaitThrowsAndTheOthersAreStillReleased) {
  Latch latch(1);
  CancellationSource source;
  std::optional<bool> cancelled;
  auto waitOrCancelled = [&]() -> Lazy<bool> {
    try {
      co_await latch.wait();
    } catch (const OperationCancelled&) {
      co_return true;
    }
    co_return false;
  };
  withCancellation(source.token(), waitOrCancelled()).start([&](Try<bool> r) {
    cancelled = r.value();
  });
  std::atomic<int> done{0};
  auto other = [&]() -> Lazy<> { co_await latch.wait(); };
  startDetached(other(), done);
  source.requestCancellation();
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_TRUE(*cancelled);
  EXPECT_EQ(done.load(), 0);
  latch.countDown();
  EXPECT_EQ(done.load(), 1);
}

TEST(LatchCancellationTest, ArriveAndWaitCountsDownEvenWhenCancelled) {
  Latch latch(2);
  CancellationSource source;
  source.requestCancellation();
  bool threw = syncAwait(withCancellation(source.token(), [](Latch& l) -> Lazy<bool> {
    try {
      co_await l.arriveAndWait();
    } catch (const OperationCancelled&) {
      co_return true;
    }
    co_return false;
  }(latch)));
  EXPECT_TRUE(threw);
  EXPECT_FALSE(latch.tryWait());
  latch.countDown();  // the cancelled arrival counted: this is the last one
  EXPECT_TRUE(latch.tryWait());
}

// On ThreadPool(1) these fibers act on their parks before switching out.
static_assert(ResumesOnlyThroughExecutor<detail::LatchArriveAwaiter>);
class LatchFiberTest : public test::PoolThreadsTest {};

TEST_P(LatchFiberTest, FibersAndLazysArriveAndWaitOnOneLatch) {
  Watchdog watchdog(120s, "LatchFiberTest.FibersAndLazysArriveAndWaitOnOneLatch");
  constexpr int kEach = 100;
  ThreadPool pool(GetParam());
  Latch latch(2 * kEach);
  std::atomic<int> arrived{0}, early{0}, released{0};
  std::vector<FiberFuture<void>> fibers;
  for (int i = 0; i < kEach; ++i) {
    fibers.push_back(spawnFiber(&pool, [&] {
      arrived.fetch_add(1);
      await(latch.arriveAndWait());
      if (arrived.load() != 2 * kEach) early.fetch_add(1);
      released.fetch_add(1);
    }));
  }
  std::vector<Lazy<>> lazys;
  for (int i = 0; i < kEach; ++i) {
    lazys.push_back([](Latch& l, std::atomic<int>& a, std::atomic<int>& e,
                       std::atomic<int>& r) -> Lazy<> {
      a.fetch_add(1);
      co_await l.arriveAndWait();
      if (a.load() != 2 * kEach) e.fetch_add(1);
      r.fetch_add(1);
    }(latch, arrived, early, released));
  }
  syncAwait(collectAllPara(std::move(lazys)), &pool);
  for (auto& fiber : fibers) syncAwait(std::move(fiber));
  EXPECT_EQ(released.load(), 2 * kEach);
  EXPECT_EQ(early.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, LatchFiberTest, test::oneAndTwoPoolThreads(),
                         test::poolThreadsName);

TEST(LatchDeathTest, DestroyingALatchWithWaitersAborts) {
  EXPECT_DEATH(
      {
        auto* latch = new Latch(1);
        std::atomic<int> done{0};
        startDetached([](Latch& l) -> Lazy<> { co_await l.wait(); }(*latch), done);
        delete latch;
      },
      "Latch destroyed while coroutines are waiting");
}

}  // namespace
}  // namespace weft
