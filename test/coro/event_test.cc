#include "weft/coro/event.h"

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
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualExecutor;
using test::nativeStackAddress;
using test::startDetached;
using test::Watchdog;

TEST(EventTest, StartsUnsetUnlessAskedAndWaitOnASetEventDoesNotSuspend) {
  Event unset;
  EXPECT_FALSE(unset.isSet());
  Event set(true);
  EXPECT_TRUE(set.isSet());
  std::thread::id ranOn;
  syncAwait([&]() -> Lazy<> {
    co_await set.wait();
    ranOn = std::this_thread::get_id();
  }());
  EXPECT_EQ(ranOn, std::this_thread::get_id());
}

TEST(EventTest, SetWakesEveryWaiterInOrder) {
  Event event;
  std::vector<int> order;
  std::atomic<int> done{0};
  auto waiter = [&](int id) -> Lazy<> {
    co_await event.wait();
    order.push_back(id);
  };
  for (int i = 0; i < 5; ++i) startDetached(waiter(i), done);
  EXPECT_TRUE(order.empty());
  event.set();
  EXPECT_TRUE(event.isSet());
  EXPECT_EQ(done.load(), 5);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  event.set();  // already set: nobody is resumed twice
  EXPECT_EQ(done.load(), 5);
}

TEST(EventTest, ResetMakesLaterWaitsSuspendUntilTheNextSet) {
  Event event(true);
  event.reset();
  EXPECT_FALSE(event.isSet());
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> { co_await event.wait(); };
  startDetached(waiter(), done);
  EXPECT_EQ(done.load(), 0);
  event.set();
  EXPECT_EQ(done.load(), 1);
}

TEST(EventTest, WaitersWithAnExecutorAreScheduledOnItNotRunInsideSet) {
  Event event;
  ManualExecutor executor;
  std::atomic<int> resumed{0};
  auto waiter = [&]() -> Lazy<> {
    co_await event.wait();
    if (executor.currentThreadInExecutor()) resumed.fetch_add(1);
  };
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    waiter().via(&executor).start([&](Try<void>) { done.fetch_add(1); });
  }
  executor.runAll();  // they start and wait
  event.set();
  EXPECT_EQ(resumed.load(), 0);
  EXPECT_EQ(executor.pending(), 3u);
  executor.runAll();
  EXPECT_EQ(resumed.load(), 3);
  EXPECT_EQ(done.load(), 3);
}

TEST(EventTest, ALongListOfInlineWaitersDoesNotGrowTheStack) {
  constexpr int kWaiters = 100'000;
  Event event;
  std::uintptr_t lowest = UINTPTR_MAX, highest = 0;
  std::atomic<int> done{0};
  auto waiter = [&]() -> Lazy<> {
    co_await event.wait();
    std::uintptr_t sp = nativeStackAddress();
    lowest = std::min(lowest, sp);
    highest = std::max(highest, sp);
  };
  for (int i = 0; i < kWaiters; ++i) startDetached(waiter(), done);
  event.set();
  EXPECT_EQ(done.load(), kWaiters);
  EXPECT_LT(highest - lowest, 64u * 1024u);
}

TEST(EventTest, ADestroyedWaiterLeavesTheQueue) {
  Counted::reset();
  Event event;
  std::atomic<int> done{0};
  auto keeper = [&]() -> Lazy<> { co_await event.wait(); };
  startDetached(keeper(), done);
  {
    auto body = [&]() -> Lazy<> {
      Counted local;
      co_await event.wait();
    };
    Lazy<> doomed = body();
    detail::LazyAccess::handle(doomed).resume();
    EXPECT_EQ(Counted::alive(), 1);
  }
  EXPECT_EQ(Counted::alive(), 0);
  event.set();  // must not touch the destroyed waiter (ASan would tell)
  EXPECT_EQ(done.load(), 1);
}

TEST(EventTest, SetWakesEveryWaiterOnTwoThreads) {
  Watchdog watchdog(120s, "EventTest.SetWakesEveryWaiterOnTwoThreads");
  constexpr int kWaiters = 1000;
  ThreadPool pool(2);
  Event event;
  std::atomic<int> woken{0};
  std::vector<Lazy<>> branches;
  for (int i = 0; i < kWaiters; ++i) {
    branches.push_back([](Event& e, std::atomic<int>& w) -> Lazy<> {
      co_await e.wait();
      w.fetch_add(1);
    }(event, woken));
  }
  // The setter is one more branch, so it races with the waiters' arrival.
  branches.push_back([](Event& e) -> Lazy<> {
    e.set();
    co_return;
  }(event));
  syncAwait(collectAllPara(std::move(branches)), &pool);
  EXPECT_EQ(woken.load(), kWaiters);
}

TEST(EventTest, SetRacingWithWaitNeverLosesTheWakeUp) {
  Watchdog watchdog(120s, "EventTest.SetRacingWithWaitNeverLosesTheWakeUp");
  ThreadPool pool(2);
  for (int round = 0; round < 2000; ++round) {
    Event event;
    int seen = 0;
    std::vector<Lazy<>> branches;
    branches.push_back([](Event& e, int& s) -> Lazy<> {
      co_await e.wait();
      s = 1;
    }(event, seen));
    branches.push_back([](Event& e) -> Lazy<> {
      e.set();
      co_return;
    }(event));
    syncAwait(collectAllPara(std::move(branches)), &pool);
    ASSERT_EQ(seen, 1) << "round " << round;
  }
}

Lazy<bool> waitOrCancelled(Event& event) {
  Counted alive;
  try {
    co_await event.wait();
  } catch (const OperationCancelled&) {
    co_return true;
  }
  co_return false;
}

TEST(EventCancellationTest, BeforeDuringAndAfterTheWait) {
  Counted::reset();
  Event event;
  {  // before: the wait throws at once
    CancellationSource source;
    source.requestCancellation();
    EXPECT_TRUE(syncAwait(withCancellation(source.token(), waitOrCancelled(event))));
  }
  {  // during: the waiter leaves the queue and resumes with the error
    CancellationSource source;
    std::optional<bool> cancelled;
    withCancellation(source.token(), waitOrCancelled(event)).start([&](Try<bool> r) {
      cancelled = r.value();
    });
    EXPECT_FALSE(cancelled.has_value());
    source.requestCancellation();
    ASSERT_TRUE(cancelled.has_value());
    EXPECT_TRUE(*cancelled);
  }
  EXPECT_EQ(Counted::alive(), 0);
  {  // after the event was set: the wait completes normally
    ManualExecutor executor;
    CancellationSource source;
    std::optional<bool> cancelled;
    withCancellation(source.token(), waitOrCancelled(event).via(&executor))
        .start([&](Try<bool> r) { cancelled = r.value(); });
    executor.runAll();
    event.set();
    source.requestCancellation();
    executor.runAll();
    ASSERT_TRUE(cancelled.has_value());
    EXPECT_FALSE(*cancelled);
  }
  {  // a set event completes the wait even if cancellation was requested first
    CancellationSource source;
    source.requestCancellation();
    EXPECT_FALSE(syncAwait(withCancellation(source.token(), waitOrCancelled(event))));
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(EventCancellationTest, CancellationRacingWithSetOnTwoThreads) {
  Watchdog watchdog(120s, "EventCancellationTest.CancellationRacingWithSet");
  Counted::reset();
  ThreadPool pool(2);
  long woken = 0, cancelled = 0;
  for (int round = 0; round < 500; ++round) {
    Event event;
    CancellationSource source;
    std::vector<Lazy<bool>> branches;
    for (int i = 0; i < 4; ++i) {
      branches.push_back(withCancellation(source.token(), waitOrCancelled(event)));
    }
    branches.push_back([](Event& e) -> Lazy<bool> {
      e.set();
      co_return false;
    }(event));
    branches.push_back([](CancellationSource& s) -> Lazy<bool> {
      s.requestCancellation();
      co_return false;
    }(source));
    auto results = syncAwait(collectAllPara(std::move(branches)), &pool);
    for (int i = 0; i < 4; ++i) (results[i].value() ? cancelled : woken) += 1;
  }
  EXPECT_EQ(woken + cancelled, 500 * 4);
  EXPECT_EQ(Counted::alive(), 0);
}

// On ThreadPool(1) these fibers act on their parks before switching out.
static_assert(ResumesOnlyThroughExecutor<detail::EventWaitAwaiter>);
class EventFiberTest : public test::PoolThreadsTest {};

TEST_P(EventFiberTest, SetWakesFibersAndLazysAlike) {
  Watchdog watchdog(120s, "EventFiberTest.SetWakesFibersAndLazysAlike");
  constexpr int kEach = 100;
  ThreadPool pool(GetParam());
  Event event;
  std::atomic<int> fibersWoken{0}, lazysWoken{0};
  std::vector<FiberFuture<void>> fibers;
  for (int i = 0; i < kEach; ++i) {
    fibers.push_back(spawnFiber(&pool, [&] {
      await(event.wait());
      fibersWoken.fetch_add(1);
    }));
  }
  std::vector<Lazy<>> lazys;
  for (int i = 0; i < kEach; ++i) {
    lazys.push_back([](Event& e, std::atomic<int>& w) -> Lazy<> {
      co_await e.wait();
      w.fetch_add(1);
    }(event, lazysWoken));
  }
  lazys.push_back([](Event& e) -> Lazy<> {
    e.set();
    co_return;
  }(event));
  syncAwait(collectAllPara(std::move(lazys)), &pool);
  for (auto& fiber : fibers) syncAwait(std::move(fiber));
  EXPECT_EQ(fibersWoken.load(), kEach);
  EXPECT_EQ(lazysWoken.load(), kEach);
}

// A fiber's token cancels its wait for an Event that is not set, before it queues and
// while it is queued; set() later wakes the waiter left.
TEST_P(EventFiberTest, AFibersTokenCancelsItsWait) {
  Watchdog watchdog(60s, "EventFiberTest.AFibersTokenCancelsItsWait");
  ThreadPool pool(GetParam());
  Event event;
  auto bystander = spawnFiber(&pool, [&] { await(event.wait()); });
  test::expectFiberWaitCancelled(pool, [&] { await(event.wait()); });
  EXPECT_FALSE(event.isSet());
  event.set();
  syncAwait(std::move(bystander));
}

INSTANTIATE_TEST_SUITE_P(Threads, EventFiberTest, test::oneAndTwoPoolThreads(),
                         test::poolThreadsName);

TEST(EventDeathTest, DestroyingAnEventWithWaitersAborts) {
  EXPECT_DEATH(
      {
        auto* event = new Event;
        std::atomic<int> done{0};
        startDetached([](Event& e) -> Lazy<> { co_await e.wait(); }(*event), done);
        delete event;
      },
      "Event destroyed while coroutines are waiting");
}

}  // namespace
}  // namespace weft
