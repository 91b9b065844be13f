#include "weft/coro/shared_task.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/event.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Watchdog;

TEST(SharedTaskTest, ManyAwaitersOneRunEveryoneGetsTheValue) {
  constexpr int kAwaiters = 200;
  ThreadPool pool(2);
  std::atomic<int> runs{0};
  // Hand-shake: the work finishes only once every awaiter has arrived (the last one sets
  // `allArrived` just before its own co_await), so the awaiters find it running and wait,
  // whatever the machine's speed (a few may still be on their way: they find it done).
  std::atomic<int> arrived{0};
  Event allArrived;
  auto work = [&]() -> Lazy<int> {
    runs.fetch_add(1);
    co_await allArrived.wait();
    co_return 42;
  };
  SharedTask<int> shared = share(work());
  auto awaiter = [&](SharedTask<int> s) -> Lazy<int> {
    if (arrived.fetch_add(1) + 1 == kAwaiters) allArrived.set();
    co_return co_await s;
  };
  std::vector<Lazy<int>> awaiters;
  for (int i = 0; i < kAwaiters; ++i) awaiters.push_back(awaiter(shared));
  Watchdog watchdog(60s, "SharedTaskTest.ManyAwaitersOneRunEveryoneGetsTheValue");
  for (auto& r : syncAwait(collectAllPara(std::move(awaiters)), &pool)) EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(runs.load(), 1);
  EXPECT_TRUE(shared.ready());
  EXPECT_EQ(syncAwait(awaiter(shared), &pool), 42);  // after the end: at once, same value
  EXPECT_EQ(runs.load(), 1);
}

TEST(SharedTaskTest, NothingRunsUntilTheFirstAwait) {
  ThreadPool pool(1);
  std::atomic<int> runs{0};
  auto work = [&]() -> Lazy<void> {
    runs.fetch_add(1);
    co_return;
  };
  SharedTask<void> shared = share(work().via(&pool));
  // Hand-shake: ThreadPool(1) runs its work in the order it was scheduled, so once a
  // marker scheduled now has run, anything share() might have scheduled has run too.
  std::atomic<bool> marker{false};
  pool.schedule([&] {
    marker.store(true);
    marker.notify_all();
  });
  marker.wait(false);
  EXPECT_EQ(runs.load(), 0);
  EXPECT_FALSE(shared.ready());
  syncAwait(shared);
  EXPECT_EQ(runs.load(), 1);
}

TEST(SharedTaskTest, TheExceptionReachesEveryAwaiter) {
  ThreadPool pool(2);
  auto work = []() -> Lazy<int> {
    co_await yield();
    throw std::runtime_error("shared failure");
  };
  SharedTask<int> shared = share(work());
  auto awaiter = [](SharedTask<int> s) -> Lazy<int> { co_return co_await s; };
  std::vector<Lazy<int>> awaiters;
  for (int i = 0; i < 20; ++i) awaiters.push_back(awaiter(shared));
  for (auto& r : syncAwait(collectAllPara(std::move(awaiters)), &pool)) {
    EXPECT_THROW(r.value(), std::runtime_error);
  }
}

TEST(SharedTaskTest, ACancelledAwaiterLeavesAndTheWorkGoesOnForTheOthers) {
  ThreadPool pool(2);
  Event release;
  auto work = [&]() -> Lazy<int> {
    co_await release.wait();  // the shared work's own token: the awaiters' cannot end it
    co_return 7;
  };
  SharedTask<int> shared = share(work());
  auto impatient = [](SharedTask<int> s) -> Lazy<int> { co_return co_await withTimeout(s, 5ms); };
  Watchdog watchdog(60s, "SharedTaskTest.ACancelledAwaiterLeaves");
  EXPECT_THROW(syncAwait(impatient(shared), &pool), TimeoutError);
  EXPECT_FALSE(shared.ready());
  auto patient = [](SharedTask<int> s) -> Lazy<int> { co_return co_await s; };
  // Hand-shake: collectAll starts the releaser only once patient() has suspended on the
  // shared work, so the work that outlived the impatient awaiter finishes for a waiter.
  auto releaser = [&]() -> Lazy<void> {
    release.set();
    co_return;
  };
  auto [value, released] = syncAwait(collectAll(patient(shared), releaser()), &pool);
  EXPECT_EQ(value.value(), 7);
  released.value();
}

TEST(SharedTaskTest, ATaskRunsOnItsExecutorAndFibersAwaitToo) {
  ThreadPool pool(1);
  ThreadPool other(1);
  auto work = [&]() -> Lazy<bool> { co_return other.currentThreadInExecutor(); };
  SharedTask<bool> shared = share(work().via(&other));
  auto fiber = spawnFiber(&pool, [shared] { return weft::await(shared); });
  EXPECT_TRUE(syncAwait(std::move(fiber)));
  EXPECT_TRUE(syncAwait(shared));
}

TEST(SharedTaskTest, TheWorkFinishesEvenIfEveryCopyIsDropped) {
  ThreadPool pool(2);
  auto finished = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> started{false};
  // The work waits until every copy is gone (not for a time: a loaded machine may run a
  // short sleep out before the awaiter's timeout fires).
  Event release;
  auto work = [finished, &started, &release]() -> Lazy<void> {
    started = true;
    co_await release.wait();
    finished->store(true);
    finished->notify_all();
  };
  {
    SharedTask<void> shared = share(work());
    auto impatient = [](SharedTask<void> s) -> Lazy<void> { co_await withTimeout(s, 1ms); };
    EXPECT_THROW(syncAwait(impatient(shared), &pool), TimeoutError);
  }  // every copy gone while the work waits
  EXPECT_FALSE(finished->load());
  release.set();
  Watchdog watchdog(60s, "SharedTaskTest.TheWorkFinishesEvenIfEveryCopyIsDropped");
  finished->wait(false);  // woken by the work's notify_all
  EXPECT_TRUE(started.load());
}

}  // namespace
}  // namespace weft
