#include "weft/coro/spawn.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_timeout.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/in_fiber.h"
#include "test/support/timer_probe_executor.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::TimerProbeExecutor;
using test::Watchdog;

// A wait that only a cancellation ends: if one is not delivered, the test hangs until
// ctest's timeout instead of passing (no timing is judged).
constexpr auto kForever = std::chrono::hours(1);

Lazy<int> valueAfterYield(int v) {
  co_await yield();
  co_return v;
}

TEST(SpawnTest, TheHandleDeliversTheValueOrTheException) {
  ThreadPool pool(2);
  auto body = []() -> Lazy<int> {
    Executor* executor = co_await currentExecutor();
    JoinHandle<int> a = spawn(executor, valueAfterYield(40));
    JoinHandle<void> b = spawn(executor, []() -> Lazy<void> {
      co_await yield();
      throw std::runtime_error("spawned failure");
    }());
    EXPECT_THROW(co_await std::move(b), std::runtime_error);
    co_return co_await std::move(a) + 2;
  };
  EXPECT_EQ(syncAwait(body(), &pool), 42);
}

TEST(SpawnTest, TheTaskRunsWhileTheSpawnerDoesOtherWork) {
  ThreadPool pool(2);
  Channel<int> channel;
  auto body = [&]() -> Lazy<int> {
    // The spawned task sends; the spawner receives before it ever awaits the handle, so
    // this completes only if the task runs on its own.
    // (A Lazy that owns the value: channel.send(7) would borrow a temporary that dies with
    // this statement, while the task runs on.)
    JoinHandle<void> sender = spawn(co_await currentExecutor(), [](Channel<int>& ch) -> Lazy<void> {
      co_await ch.send(7);
    }(channel));
    const int v = *co_await channel.receive();
    co_await std::move(sender);
    co_return v;
  };
  Watchdog watchdog(60s, "SpawnTest.TheTaskRunsWhileTheSpawnerDoesOtherWork");
  EXPECT_EQ(syncAwait(body(), &pool), 7);
}

TEST(SpawnTest, HandlesAwaitedInAnyOrderAndNever) {
  std::atomic<int> finished{0};  // outlives the pool: a task's notify_all may come late
  ThreadPool pool(2);
  auto work = [&](int v) -> Lazy<int> {
    co_await sleep(std::chrono::milliseconds(v % 3));
    finished.fetch_add(1);
    finished.notify_all();
    co_return v;
  };
  auto body = [&]() -> Lazy<int> {
    Executor* executor = co_await currentExecutor();
    std::vector<JoinHandle<int>> handles;
    for (int i = 0; i < 100; ++i) handles.push_back(spawn(executor, work(i)));
    int sum = 0;
    for (int i = 99; i >= 0; i -= 2) sum += co_await std::move(handles[i]);  // odd, backwards
    co_return sum;  // the even ones are dropped: detached, they still run to their end
  };
  EXPECT_EQ(syncAwait(body(), &pool), 2500);
  Watchdog watchdog(60s, "SpawnTest.HandlesAwaitedInAnyOrderAndNever");
  // The dropped (even) ones run on: wait for them, woken by each task's notify_all.
  for (int n = finished.load(); n != 100; n = finished.load()) finished.wait(n);
}

TEST(SpawnTest, CancelEndsTheTaskAndTheAwaitReportsIt) {
  ThreadPool pool(2);
  auto body = []() -> Lazy<void> {
    JoinHandle<void> handle = spawn(co_await currentExecutor(), sleep(kForever));
    co_await yield();
    handle.cancel();
    co_await std::move(handle);
  };
  EXPECT_THROW(syncAwait(body(), &pool), OperationCancelled);
}

TEST(SpawnTest, CancellingTheAwaiterCancelsTheTaskAndWaitsForIt) {
  ThreadPool pool(2);
  std::atomic<bool> taskEnded{false};
  auto task = [&]() -> Lazy<void> {
    try {
      co_await sleep(kForever);
    } catch (const OperationCancelled&) {
      taskEnded = true;
      throw;
    }
  };
  auto awaiter = [&]() -> Lazy<void> {
    co_await spawn(co_await currentExecutor(), task());
  };
  EXPECT_THROW(syncAwait(withTimeout(awaiter(), 10ms), &pool), TimeoutError);
  EXPECT_TRUE(taskEnded.load());  // ended before the await returned: never abandoned
}

TEST(SpawnTest, AFiberSpawnedWithInFiberIsCancelledThroughItsHandle) {
  ThreadPool pool(2);
  TimerProbeExecutor probe(pool);  // counts the fiber's sleep when it is armed
  std::atomic<bool> sawCancellation{false};
  auto body = [&]() -> Lazy<void> {
    JoinHandle<void> handle = spawn(co_await currentExecutor(), inFiber([&] {
                                      try {
                                        weft::await(sleep(kForever));
                                      } catch (const OperationCancelled&) {
                                        sawCancellation = true;
                                        throw;
                                      }
                                    }));
    // Hand-shake: cancel once the fiber's sleep is armed, so the cancellation ends a wait
    // under way by disarming its timer (not a sleep that would find it on its way in).
    while (probe.armed.load() < 1) co_await yield();
    handle.cancel();
    co_await std::move(handle);
  };
  Watchdog watchdog(60s, "SpawnTest.AFiberSpawnedWithInFiberIsCancelledThroughItsHandle");
  EXPECT_THROW(syncAwait(body(), &probe), OperationCancelled);
  EXPECT_TRUE(sawCancellation.load());
}

TEST(SpawnTest, ATaskKeepsItsExecutorAndSyncAwaitWorksFromOutside) {
  ThreadPool pool(1);
  ThreadPool other(1);
  auto where = [&]() -> Lazy<bool> { co_return other.currentThreadInExecutor(); };
  JoinHandle<bool> handle = spawn(&pool, where().via(&other));
  EXPECT_TRUE(syncAwait(std::move(handle)));
  JoinHandle<int> second = spawn(&pool, valueAfterYield(3));
  EXPECT_EQ(syncAwait(std::move(second)), 3);
}

TEST(SpawnTest, SyncAwaitOfAMovedHandleOnItsExecutorIsRefused) {
  ThreadPool pool(1);
  JoinHandle<int> first = spawn(&pool, valueAfterYield(5));
  JoinHandle<int> moved = std::move(first);  // the executor moves with the task
  auto onPool = [&]() -> Lazy<bool> {
    try {
      (void)syncAwait(std::move(moved));
    } catch (const SyncAwaitDeadlock&) {
      co_return true;
    }
    co_return false;
  };
  EXPECT_TRUE(syncAwait(onPool(), &pool));
  EXPECT_EQ(syncAwait(std::move(moved)), 5);  // refused calls leave the handle untouched
}

TEST(SpawnTest, ANullExecutorIsRejected) {
  EXPECT_THROW((void)spawn(nullptr, valueAfterYield(1)), std::invalid_argument);
}

TEST(SpawnTest, ADroppedHandleOfACancelledTaskEndsQuietly) {
  std::atomic<bool> ended{false};  // outlives the pool: the task's notify_all may come late
  ThreadPool pool(1);
  auto task = [&]() -> Lazy<void> {
    try {
      co_await sleep(kForever);
    } catch (const OperationCancelled&) {
      ended = true;
      ended.notify_all();
      throw;
    }
  };
  {
    JoinHandle<void> handle = spawn(&pool, task());
    handle.cancel();
  }  // dropped: its OperationCancelled is the expected end, not a lost failure
  Watchdog watchdog(60s, "SpawnTest.ADroppedHandleOfACancelledTaskEndsQuietly");
  ended.wait(false);  // woken by the task's notify_all
}

TEST(SpawnDeathTest, ADroppedHandleWhoseTaskFailsAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ThreadPool pool(1);
        {
          JoinHandle<void> handle = spawn(&pool, []() -> Lazy<void> {
            co_await yield();
            throw std::runtime_error("nobody awaits this");
          }());
        }
        // Stays a sleep: the statement must not end before the report aborts (a statement
        // that returns is "failed to die"); 10 s only bounds a report that never comes.
        std::this_thread::sleep_for(10s);
      },
      "JoinHandle was dropped ended with an exception nobody awaited: nobody awaits this");
}

}  // namespace
}  // namespace weft
