#include "weft/coro/yield.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <thread>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/manual_executor.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::ManualExecutor;
using test::Watchdog;

// Yields up to `limit` times, cancelling its own token's source after `cancelAt` yields;
// returns how many yields completed. A yield that is not a cancellation point lets it run
// to the limit (async_simple's testYieldCancel, bounded so that it fails instead of
// hanging).
Lazy<int> yieldLoop(CancellationSource& source, int cancelAt, int limit) {
  int done = 0;
  while (done < limit) {
    co_await yield();
    if (++done == cancelAt) source.requestCancellation();
  }
  co_return done;
}

TEST(YieldTest, AYieldingLoopEndsWhenItsTokenIsCancelled) {
  ThreadPool pool(2);
  CancellationSource source;
  EXPECT_THROW(
      syncAwait(withCancellation(source.token(), yieldLoop(source, 100, 1'000'000)).via(&pool)),
      OperationCancelled);
}

TEST(YieldTest, AYieldingLoopEndsWhenCancelledFromAnotherThread) {
  ThreadPool pool(2);
  CancellationSource source;
  std::atomic<int> yields{0};
  auto loop = [&]() -> Lazy<void> {
    for (int i = 0; i < 10'000'000; ++i) {
      co_await yield();
      yields.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::thread canceller([&] {
    while (yields.load(std::memory_order_relaxed) < 100) std::this_thread::yield();
    source.requestCancellation();
  });
  Watchdog watchdog(120s, "YieldTest.AYieldingLoopEndsWhenCancelledFromAnotherThread");
  EXPECT_THROW(syncAwait(withCancellation(source.token(), loop()).via(&pool)), OperationCancelled);
  canceller.join();
  EXPECT_LT(yields.load(), 10'000'000);
}

// Runs `lazy` on `executor` with `token` until it first suspends or finishes.
template <class T>
void startWith(Lazy<T>& lazy, Executor* executor, const CancellationToken& token) {
  auto handle = detail::LazyAccess::handle(lazy);
  handle.promise().setExecutor(executor);
  handle.promise().setCancellationToken(&token);
  handle.promise().setContinuation(std::noop_coroutine());
  handle.resume();
}

Lazy<int> yieldOnce() {
  co_await yield();
  co_return 1;
}

TEST(YieldTest, CancelledBeforeTheYieldThrowsWithoutRescheduling) {
  ManualExecutor manual;
  CancellationSource source;
  CancellationToken token = source.token();
  source.requestCancellation();
  Lazy<int> lazy = yieldOnce();
  startWith(lazy, &manual, token);
  auto handle = detail::LazyAccess::handle(lazy);
  ASSERT_TRUE(handle.done());
  EXPECT_THROW(handle.promise().result_.value(), OperationCancelled);
  EXPECT_EQ(manual.pending(), 0u);  // nothing was queued
}

TEST(YieldTest, CancelledWhileQueuedThrowsWhenResumed) {
  ManualExecutor manual;
  CancellationSource source;
  CancellationToken token = source.token();
  Lazy<int> lazy = yieldOnce();
  startWith(lazy, &manual, token);
  auto handle = detail::LazyAccess::handle(lazy);
  ASSERT_FALSE(handle.done());
  ASSERT_EQ(manual.pending(), 1u);  // rescheduled
  source.requestCancellation();     // while it waits in the queue
  EXPECT_EQ(manual.runAll(), 1u);
  ASSERT_TRUE(handle.done());
  EXPECT_THROW(handle.promise().result_.value(), OperationCancelled);
}

TEST(YieldTest, AnUncancelledYieldReschedulesAndContinues) {
  ManualExecutor manual;
  CancellationSource source;  // could be cancelled, is not
  CancellationToken token = source.token();
  Lazy<int> lazy = yieldOnce();
  startWith(lazy, &manual, token);
  auto handle = detail::LazyAccess::handle(lazy);
  ASSERT_FALSE(handle.done());
  EXPECT_EQ(manual.runAll(), 1u);
  ASSERT_TRUE(handle.done());
  EXPECT_EQ(handle.promise().result_.value(), 1);
}

// A yield cannot be withdrawn: the coroutine is in its executor's queue, so destroying
// it there is reported (its resumption would run a freed frame).
TEST(YieldDeathTest, DestroyingACoroutineQueuedByYieldIsReported) {
  EXPECT_DEATH(
      {
        ManualExecutor manual;
        CancellationToken token;
        Lazy<int> lazy = yieldOnce();
        startWith(lazy, &manual, token);
        lazy = Lazy<int>();
      },
      "weft: a coroutine was destroyed while suspended in yield\\(\\)");
}

TEST(YieldTest, WithoutAnExecutorACancelledYieldThrows) {
  CancellationSource source;
  EXPECT_EQ(syncAwait(withCancellation(source.token(), yieldOnce())), 1);  // does not suspend
  source.requestCancellation();
  EXPECT_THROW(syncAwait(withCancellation(source.token(), yieldOnce())), OperationCancelled);
}

TEST(YieldTest, OutsideAWeftCoroutineItDoesNothing) {
  auto body = []() -> Lazy<int> {
    co_await yield();
    co_return 2;
  };
  EXPECT_EQ(syncAwait(body()), 2);
}

// From a fiber: `await(yield())` gets the fiber's token like any cancellation-aware
// awaitable.
TEST(YieldFiberTest, AFibersYieldLoopEndsWhenItsTokenIsCancelled) {
  ThreadPool pool(2);
  CancellationSource source;
  SpawnFiberOptions options;
  options.cancellationToken = source.token();
  auto future = spawnFiber(
      &pool,
      [&] {
        int done = 0;
        while (done < 1'000'000) {
          await(yield());
          if (++done == 100) source.requestCancellation();
        }
        return done;
      },
      std::move(options));
  EXPECT_THROW(syncAwait(std::move(future)), OperationCancelled);
}

}  // namespace
}  // namespace weft
