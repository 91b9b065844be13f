#include "coro/with_timeout.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "coro/cancellation.h"
#include "coro/lazy.h"
#include "coro/sleep.h"
#include "coro/sync_await.h"
#include "coro/with_cancellation.h"
#include "executors/thread_pool.h"
#include "test/support/counted.h"
#include "test/support/timer_probe_executor.h"
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
  auto work = []() -> Lazy<int> {
    co_await sleep(20ms);  // long enough to be armed however slow the machine
    co_return 42;
  };
  auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
  EXPECT_EQ(syncAwait(body().via(&probe)), 42);
  EXPECT_EQ(probe.armed.load(), 2);     // the work's sleep and the timeout
  EXPECT_EQ(probe.disarmed.load(), 1);  // the timeout left the heap at once
}

TEST(WithTimeoutTest, SynchronousWorkArmsNoTimer) {
  ThreadPool pool(1);
  TimerProbeExecutor probe(pool);
  auto work = []() -> Lazy<int> { co_return 5; };
  auto body = [&]() -> Lazy<int> { co_return co_await withTimeout(work(), 1h); };
  EXPECT_EQ(syncAwait(body().via(&probe)), 5);
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
  std::thread canceller([&] {
    std::this_thread::sleep_for(2ms);
    source.requestCancellation();
  });
  Watchdog watchdog(60s, "WithTimeoutTest.CancellingTheAwaiter");
  EXPECT_THROW(syncAwait(withCancellation(source.token(), withTimeout(never(), 1h)).via(&pool)),
               OperationCancelled);
  canceller.join();
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

}  // namespace
}  // namespace weft
