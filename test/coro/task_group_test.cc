#include "weft/coro/task_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/in_fiber.h"
#include "test/support/timer_probe_executor.h"
#include "test/support/wait_until.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::TimerProbeExecutor;
using test::Watchdog;

// A wait that only a cancellation ends: if one is not delivered, the test hangs until
// ctest's timeout instead of passing (no timing is judged).
constexpr auto kForever = std::chrono::hours(1);

TEST(TaskGroupTest, JoinWaitsForTenThousandLazysAndFibersEachCountedOnce) {
  ThreadPool pool(2);
  constexpr int kTasks = 10000;
  std::vector<std::atomic<int>> runs(kTasks);
  auto body = [&]() -> Lazy<void> {
    TaskGroup<> group(co_await currentExecutor());
    for (int i = 0; i < kTasks; ++i) {
      if (i % 2 == 0) {
        group.spawn([](std::atomic<int>& r) -> Lazy<void> {
          co_await yield();
          r.fetch_add(1);
        }(runs[i]));
      } else {
        group.spawn(inFiber([&r = runs[i]] {
          weft::await(yield());
          r.fetch_add(1);
        }));
      }
    }
    co_await group.join();
    EXPECT_EQ(group.running(), 0u);
  };
  Watchdog watchdog(120s, "TaskGroupTest.JoinWaitsForTenThousandLazysAndFibers");
  syncAwait(body(), &pool);
  for (int i = 0; i < kTasks; ++i) ASSERT_EQ(runs[i].load(), 1) << "task " << i;
}

TEST(TaskGroupTest, NextHandsOutEveryResultOnceInCompletionOrder) {
  ThreadPool pool(2);
  Channel<int> go;  // unbuffered: releases one waiting task per send
  auto body = [&]() -> Lazy<std::vector<int>> {
    TaskGroup<int> group(co_await currentExecutor());
    for (int i = 0; i < 3; ++i) {
      group.spawn([](Channel<int>& ch) -> Lazy<int> { co_return *co_await ch.receive(); }(go));
    }
    std::vector<int> order;
    for (int v : {20, 0, 10}) {
      co_await go.send(v);
      std::optional<Try<int>> result = co_await group.next();
      EXPECT_TRUE(result.has_value());
      order.push_back(result->value());
    }
    EXPECT_FALSE((co_await group.next()).has_value());  // none running, none waiting
    co_await group.join();
    co_return order;
  };
  Watchdog watchdog(60s, "TaskGroupTest.NextHandsOutEveryResultOnce");
  EXPECT_EQ(syncAwait(body(), &pool), (std::vector<int>{20, 0, 10}));
}

TEST(TaskGroupTest, ConcurrentNextCallersShareTheResultsWithoutLoss) {
  ThreadPool pool(2);
  constexpr int kTasks = 2000;
  std::atomic<long> sum{0};
  std::atomic<int> taken{0};
  auto body = [&]() -> Lazy<void> {
    TaskGroup<int> group(co_await currentExecutor());
    for (int i = 1; i <= kTasks; ++i) {
      group.spawn([](int v) -> Lazy<int> {
        co_await yield();
        co_return v;
      }(i));
    }
    auto consumer = [&]() -> Lazy<void> {
      while (std::optional<Try<int>> r = co_await group.next()) {
        sum.fetch_add(r->value());
        taken.fetch_add(1);
      }
    };
    TaskGroup<> consumers(co_await currentExecutor());
    for (int c = 0; c < 3; ++c) consumers.spawn(consumer());
    co_await consumers.join();
    co_await group.join();
  };
  Watchdog watchdog(60s, "TaskGroupTest.ConcurrentNextCallersShareTheResults");
  syncAwait(body(), &pool);
  EXPECT_EQ(taken.load(), kTasks);
  EXPECT_EQ(sum.load(), long{kTasks} * (kTasks + 1) / 2);
}

TEST(TaskGroupTest, TheFirstFailureCancelsTheOthersAndJoinRethrowsIt) {
  ThreadPool pool(2);
  TimerProbeExecutor probe(pool);  // counts the sleeps as they are armed
  std::atomic<int> cancelled{0};
  auto sleeper = [&]() -> Lazy<void> {
    try {
      co_await sleep(kForever);
    } catch (const OperationCancelled&) {
      cancelled.fetch_add(1);
      throw;
    }
  };
  // Hand-shake: the failure comes once the five sleeps (four Lazys, one fiber) are
  // armed, so the cancellation it causes ends waits under way by disarming their timers
  // (not tasks that would start cancelled).
  auto failing = [&]() -> Lazy<void> {
    while (probe.armed.load() < 5) co_await yield();
    throw std::runtime_error("first failure");
  };
  auto body = [&]() -> Lazy<void> {
    TaskGroup<> group(co_await currentExecutor(), {.cancelOnFirstFailure = true});
    for (int i = 0; i < 4; ++i) group.spawn(sleeper());
    group.spawn(inFiber([] { weft::await(sleep(kForever)); }));
    group.spawn(failing());
    co_await group.join();
  };
  try {
    syncAwait(body(), &probe);
    ADD_FAILURE() << "join did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first failure");
  }
  EXPECT_EQ(cancelled.load(), 4);
}

TEST(TaskGroupTest, WithoutCancelOnFirstFailureTheOthersFinish) {
  ThreadPool pool(2);
  std::atomic<int> finished{0};
  auto body = [&]() -> Lazy<void> {
    TaskGroup<> group(co_await currentExecutor());
    group.spawn([]() -> Lazy<void> {
      throw std::logic_error("early");
      co_return;  // a coroutine: the exception ends the task, not the spawn call
    }());
    for (int i = 0; i < 3; ++i) {
      group.spawn([](std::atomic<int>& f) -> Lazy<void> {
        co_await sleep(20ms);
        f.fetch_add(1);
      }(finished));
    }
    co_await group.join();
  };
  EXPECT_THROW(syncAwait(body(), &pool), std::logic_error);
  EXPECT_EQ(finished.load(), 3);
}

TEST(TaskGroupTest, CancelledFromOutsideEveryTaskEndsAndJoinReportsIt) {
  ThreadPool pool(2);
  TimerProbeExecutor probe(pool);  // counts the tasks' sleeps as they are armed
  std::atomic<TaskGroup<>*> shared{nullptr};
  auto body = [&]() -> Lazy<void> {
    TaskGroup<> group(co_await currentExecutor());
    for (int i = 0; i < 8; ++i) {
      group.spawn([]() -> Lazy<void> { co_await sleep(kForever); }());
    }
    shared = &group;
    co_await group.join();
  };
  // Hand-shake: the cancellation comes once all eight sleeps are armed, so it ends waits
  // under way by disarming their timers (not sleeps that would find it on their way in).
  std::thread canceller([&] {
    while (probe.armed.load() < 8 || shared.load() == nullptr) std::this_thread::yield();
    shared.load()->requestCancellation();
  });
  EXPECT_THROW(syncAwait(body(), &probe), OperationCancelled);
  canceller.join();
}

TEST(TaskGroupTest, TheParentTokenAndTheJoinersCancellationReachTheTasks) {
  ThreadPool pool(2);
  for (bool viaJoiner : {false, true}) {
    TimerProbeExecutor probe(pool);  // counts the tasks' sleeps as they are armed
    CancellationSource parent;
    std::atomic<int> cancelled{0};
    auto body = [&]() -> Lazy<void> {
      TaskGroupOptions options;
      if (!viaJoiner) options.cancellationToken = parent.token();
      TaskGroup<> group(co_await currentExecutor(), options);
      for (int i = 0; i < 3; ++i) {
        group.spawn([](std::atomic<int>& c) -> Lazy<void> {
          try {
            co_await sleep(kForever);
          } catch (const OperationCancelled&) {
            c.fetch_add(1);
            throw;
          }
        }(cancelled));
      }
      co_await group.join();
    };
    // Hand-shake: collectAll starts `cancel` only once the first branch waits in join(),
    // and `cancel` requests the cancellation only once the three tasks' sleeps are armed.
    // So it ends waits under way (disarming their timers), through a joiner that waits.
    auto cancel = [&]() -> Lazy<void> {
      while (probe.armed.load() < 3) co_await yield();
      parent.requestCancellation();
    };
    // viaJoiner: the token reaches only the coroutine waiting in join().
    Lazy<void> run = viaJoiner ? withCancellation(parent.token(), body()) : body();
    auto [joined, cancelling] = syncAwait(collectAll(std::move(run), cancel()), &probe);
    EXPECT_THROW(joined.value(), OperationCancelled) << viaJoiner;
    cancelling.value();
    EXPECT_EQ(cancelled.load(), 3) << "join returned before every task had ended";
  }
}

TEST(TaskGroupTest, ACancelledNextThrowsAndLeavesTheResults) {
  ThreadPool pool(2);
  CancellationSource source;
  Channel<int> go;
  auto body = [&]() -> Lazy<int> {
    TaskGroup<int> group(co_await currentExecutor());
    group.spawn([](Channel<int>& ch) -> Lazy<int> { co_return *co_await ch.receive(); }(go));
    source.requestCancellation();
    EXPECT_THROW((void)co_await withCancellation(source.token(), group.next()),
                 OperationCancelled);
    co_await go.send(5);
    std::optional<Try<int>> r = co_await group.next();
    co_await group.join();
    co_return r ? r->value() : -1;
  };
  EXPECT_EQ(syncAwait(body(), &pool), 5);
}

// The cancellation comes while next() waits (before, it throws without waiting: above).
// collectAll starts its second branch once the first has suspended in next(), on the one
// worker: a hand-shake. (A next() cancelled while it waited used to abort in its
// awaiter's destructor: found by test/testing/cancellation_contracts_test.cc.)
TEST(TaskGroupTest, ANextCancelledWhileItWaitsThrowsAndLeavesTheResults) {
  ThreadPool pool(1);
  CancellationSource source;
  Channel<int> go;
  auto body = [&]() -> Lazy<int> {
    TaskGroup<int> group(co_await currentExecutor());
    group.spawn([](Channel<int>& ch) -> Lazy<int> { co_return *co_await ch.receive(); }(go));
    auto waitForNext = [&]() -> Lazy<void> {
      EXPECT_THROW((void)co_await withCancellation(source.token(), group.next()),
                   OperationCancelled);
    };
    auto cancel = [&]() -> Lazy<void> {
      source.requestCancellation();
      co_return;
    };
    co_await collectAll(waitForNext(), cancel());
    co_await go.send(5);
    std::optional<Try<int>> r = co_await group.next();
    co_await group.join();
    co_return r ? r->value() : -1;
  };
  EXPECT_EQ(syncAwait(body(), &pool), 5);
}

TEST(TaskGroupTest, JoinWithNothingRunningAndAgainAfterMoreSpawns) {
  ThreadPool pool(1);
  std::atomic<int> runs{0};
  auto body = [&]() -> Lazy<void> {
    TaskGroup<> group(co_await currentExecutor());
    co_await group.join();  // nothing spawned: returns at once
    group.spawn([](std::atomic<int>& r) -> Lazy<void> {
      r.fetch_add(1);
      co_return;
    }(runs));
    co_await group.join();
    group.spawn([](std::atomic<int>& r) -> Lazy<void> {
      co_await yield();
      r.fetch_add(1);
    }(runs));
    co_await group.join();
  };
  syncAwait(body(), &pool);
  EXPECT_EQ(runs.load(), 2);
}

TEST(TaskGroupTest, ATaskKeepsItsExecutorAndTakesTheGroupsToken) {
  ThreadPool pool(1);
  ThreadPool other(1);
  std::atomic<bool> ranOnOther{false};
  std::atomic<bool> sawGroupToken{false};
  auto body = [&]() -> Lazy<void> {
    TaskGroup<> group(co_await currentExecutor());
    auto work = [&]() -> Lazy<void> {
      ranOnOther = other.currentThreadInExecutor();
      CancellationToken token = co_await currentCancellationToken();
      sawGroupToken = token == group.token();
    };
    group.spawn(work().via(&other));
    co_await group.join();
  };
  syncAwait(body(), &pool);
  EXPECT_TRUE(ranOnOther.load());
  EXPECT_TRUE(sawGroupToken.load());
}

TEST(TaskGroupTest, ANullExecutorIsRejected) {
  EXPECT_THROW(TaskGroup<>(nullptr), std::invalid_argument);
}

TEST(TaskGroupDeathTest, DestroyingAGroupWithRunningTasksAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ThreadPool pool(1);
        Channel<int> never;
        TaskGroup<> group(&pool);
        group.spawn([](Channel<int>& ch) -> Lazy<void> { (void)co_await ch.receive(); }(never));
      },
      "TaskGroup destroyed while tasks of it are still running");
}

TEST(TaskGroupDeathTest, DestroyingAGroupWithAFailureNobodyJoinedAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ThreadPool pool(1);
        TaskGroup<> group(&pool);
        group.spawn([]() -> Lazy<void> {
          throw std::runtime_error("lost unless joined");
          co_return;
        }());
        test::waitUntil([&] { return group.running() == 0; });  // the failure is stored
      },
      "failure nobody joined: lost unless joined");
}

}  // namespace
}  // namespace weft
