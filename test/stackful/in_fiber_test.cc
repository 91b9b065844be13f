#include "weft/stackful/in_fiber.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
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

TEST(InFiberTest, RunsOnTheAwaitersExecutorAndReturnsTheValue) {
  ThreadPool pool(2);
  auto lazy = [&]() -> Lazy<int> {
    Executor* executor = co_await currentExecutor();
    co_return co_await inFiber([&] {
      EXPECT_TRUE(pool.currentThreadInExecutor());
      weft::await(sleep(1ms));  // parks: only a fiber can do this in plain code
      return executor == &pool ? 42 : -1;
    });
  };
  EXPECT_EQ(syncAwait(lazy(), &pool), 42);
}

TEST(InFiberTest, TheFibersExceptionReachesTheAwaiter) {
  ThreadPool pool(1);
  auto lazy = []() -> Lazy<void> {
    co_await inFiber([]() -> int { throw std::runtime_error("from the fiber"); });
  };
  EXPECT_THROW(syncAwait(lazy(), &pool), std::runtime_error);
}

TEST(InFiberTest, NothingRunsUntilAwaited) {
  ThreadPool pool(1);
  std::atomic<int> runs{0};
  {
    auto dropped = inFiber([&] { runs.fetch_add(1); });
  }
  auto started = inFiber([&] { runs.fetch_add(1); });
  // Hand-shake: ThreadPool(1) runs its work in the order it was scheduled, so once a
  // marker scheduled now has run, a fiber started on the pool by inFiber() (it must not
  // be) would have run too.
  std::atomic<bool> marker{false};
  pool.schedule([&] {
    marker.store(true);
    marker.notify_all();
  });
  marker.wait(false);
  EXPECT_EQ(runs.load(), 0);
  syncAwait([&]() -> Lazy<void> { co_await std::move(started); }(), &pool);
  EXPECT_EQ(runs.load(), 1);
}

TEST(InFiberTest, WithoutAnExecutorTheAwaitFailsAndNothingRuns) {
  std::atomic<int> runs{0};
  EXPECT_THROW(syncAwait(inFiber([&] { runs.fetch_add(1); })), std::logic_error);
  EXPECT_THROW(syncAwait([&]() -> Lazy<void> { co_await inFiber([&] { runs.fetch_add(1); }); }()),
               std::logic_error);
  EXPECT_EQ(runs.load(), 0);
}

TEST(InFiberTest, TheOptionsNameTheFiberAndTheirTokenReplacesTheInherited) {
  ThreadPool pool(1);
  CancellationSource own;
  own.requestCancellation();
  SpawnFiberOptions options;
  std::string name = "worker";
  options.name = name;
  options.cancellationToken = own.token();
  auto work = inFiber([] { weft::await(sleep(kForever)); }, options);
  auto lazy = [&]() -> Lazy<void> { co_await std::move(work); };
  Watchdog watchdog(60s, "InFiberTest.TheOptionsNameTheFiberAndTheirTokenReplacesTheInherited");
  EXPECT_THROW(syncAwait(lazy(), &pool), OperationCancelled);
}

// The case: withTimeout around a Lazy that runs blocking-style code in a fiber.
// Each wait the fiber can be in must see the timeout's cancellation at once.
class InFiberTimeoutTest : public ::testing::Test {
 protected:
  template <class Body>
  void expectTimeoutReachesFiber(Body body) {
    ThreadPool pool(2);
    std::atomic<bool> sawCancellation{false};
    auto lazy = [&]() -> Lazy<void> {
      co_await inFiber([&] {
        try {
          body();
        } catch (const OperationCancelled&) {
          sawCancellation = true;
          throw;
        }
      });
    };
    EXPECT_THROW(syncAwait(withTimeout(lazy(), 50ms), &pool), TimeoutError);
    EXPECT_TRUE(sawCancellation.load());
  }
};

TEST_F(InFiberTimeoutTest, ASleepingFiber) {
  expectTimeoutReachesFiber([] { weft::await(sleep(kForever)); });
}

TEST_F(InFiberTimeoutTest, AFiberWaitingOnAChannel) {
  Channel<int> channel;
  expectTimeoutReachesFiber([&] { (void)weft::await(channel.receive()); });
}

TEST_F(InFiberTimeoutTest, AFiberWaitingForAMutex) {
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  expectTimeoutReachesFiber([&] { weft::await(mutex.lock()); });
  mutex.unlock();
}

// A fiber waiting for a socket: test/io/io_cancellation_test.cc (InFiberReadTimeout), on
// both I/O backends; the stackful tests also run under valgrind, which does not follow
// io_uring.

TEST(InFiberTest, WithTimeoutTakesAnInFiberDirectly) {
  ThreadPool pool(1);
  auto body = []() -> Lazy<int> {
    co_return co_await withTimeout(inFiber([] {
                                     weft::await(sleep(kForever));
                                     return 1;
                                   }),
                                   20ms);
  };
  EXPECT_THROW(syncAwait(body(), &pool), TimeoutError);
  auto quick = []() -> Lazy<int> { co_return co_await withTimeout(inFiber([] { return 3; }), 1h); };
  EXPECT_EQ(syncAwait(quick(), &pool), 3);
}

TEST(InFiberTest, ATasksTokenReachesTheFiber) {
  ThreadPool pool(2);
  TimerProbeExecutor probe(pool);  // counts the fiber's sleep when it is armed
  CancellationSource source;
  auto body = [&]() -> Lazy<void> {  // named: the coroutine refers to its captures
    co_await inFiber([&] { weft::await(sleep(kForever)); });
  };
  Task<void> task = withCancellation(source.token(), body().via(&probe));
  // Hand-shake: the cancellation comes once the fiber's sleep is armed, so it ends a wait
  // under way by disarming its timer (not a sleep that would find it on its way in).
  std::thread canceller([&] {
    while (probe.armed.load() < 1) std::this_thread::yield();
    source.requestCancellation();
  });
  EXPECT_THROW(syncAwait(std::move(task)), OperationCancelled);
  canceller.join();
}

// The other way round: a Lazy awaited inside a fiber carries the fiber's token.
TEST(InFiberTest, ALazyAwaitedInAFiberInheritsTheFibersToken) {
  ThreadPool pool(2);
  CancellationSource source;
  SpawnFiberOptions options;
  options.cancellationToken = source.token();
  TimerProbeExecutor probe(pool);  // counts the Lazy's sleep when it is armed
  auto sleeper = [&]() -> Lazy<void> { co_await sleep(kForever); };
  auto future = spawnFiber(&probe, [&] { weft::await(sleeper()); }, options);
  // Hand-shake: the cancellation comes once the sleep is armed, so it ends the Lazy's
  // wait under way (through the fiber's token, which the Lazy inherited).
  while (probe.armed.load() < 1) std::this_thread::yield();
  source.requestCancellation();
  EXPECT_THROW(syncAwait(std::move(future)), OperationCancelled);
}

TEST(InFiberTest, AFiberCanStartAnotherWithItsOwnToken) {
  ThreadPool pool(2);
  CancellationSource source;
  SpawnFiberOptions options;
  options.cancellationToken = source.token();
  TimerProbeExecutor probe(pool);  // counts the inner fiber's sleep when it is armed
  auto outer = spawnFiber(&probe, [&] {
    return weft::await(inFiber([&] {
      weft::await(sleep(kForever));
      return 1;
    }));
  }, options);
  // Hand-shake: the cancellation comes once the inner fiber's sleep is armed, so it ends
  // the inner fiber's wait under way (disarming its timer).
  while (probe.armed.load() < 1) std::this_thread::yield();
  source.requestCancellation();
  EXPECT_THROW(syncAwait(std::move(outer)), OperationCancelled);
}

TEST(InFiberTest, ManyFibersFromManyTasks) {
  ThreadPool pool(2);
  constexpr int kTasks = 200;
  std::atomic<int> sum{0};
  auto one = [&](int i) -> Lazy<void> {
    const int v = co_await inFiber([i] {
      weft::await(sleep(std::chrono::microseconds(i % 7)));
      return i;
    });
    sum.fetch_add(v);
  };
  std::vector<Lazy<void>> tasks;
  for (int i = 0; i < kTasks; ++i) tasks.push_back(one(i));
  for (auto& t : tasks) syncAwait(std::move(t), &pool);
  EXPECT_EQ(sum.load(), kTasks * (kTasks - 1) / 2);
}

}  // namespace
}  // namespace weft
