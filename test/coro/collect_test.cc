#include "weft/coro/collect.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "test/support/counted.h"
#include "test/support/manual_event.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using test::Counted;
using test::ManualEvent;

Lazy<int> value(int v) { co_return v; }

Lazy<int> failing(const char* message) {
  throw std::runtime_error(message);
  co_return 0;
}

TEST(CollectAllTest, CollectsHeterogeneousResults) {
  int target = 0;
  auto [a, b, c, d] = syncAwait(collectAll(
      value(1), []() -> Lazy<std::string> { co_return "two"; }(),
      []() -> Lazy<void> { co_return; }(), [&]() -> Lazy<int&> { co_return target; }()));
  EXPECT_EQ(a.value(), 1);
  EXPECT_EQ(b.value(), "two");
  EXPECT_TRUE(c.hasValue());
  EXPECT_EQ(&d.value(), &target);
}

TEST(CollectAllTest, EveryBranchGetsItsOwnTry) {
  auto [a, b, c] = syncAwait(collectAll(value(1), failing("second"), failing("third")));
  EXPECT_EQ(a.value(), 1);
  ASSERT_TRUE(b.hasException());
  ASSERT_TRUE(c.hasException());
  try {
    b.value();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "second");
  }
  try {
    c.value();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "third");
  }
}

TEST(CollectAllTest, VectorKeepsBranchOrder) {
  std::vector<Lazy<int>> branches;
  for (int i = 0; i < 100; ++i) branches.push_back(i % 7 == 3 ? failing("x") : value(i));
  std::vector<Try<int>> results = syncAwait(collectAll(std::move(branches)));
  ASSERT_EQ(results.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    if (i % 7 == 3) {
      EXPECT_TRUE(results[i].hasException()) << i;
    } else {
      EXPECT_EQ(results[i].value(), i);
    }
  }
}

TEST(CollectAllTest, EmptyVectorCompletesAtOnce) {
  EXPECT_TRUE(syncAwait(collectAll(std::vector<Lazy<int>>{})).empty());
  EXPECT_TRUE(syncAwait(collectAllPara(std::vector<Lazy<int>>{})).empty());
}

TEST(CollectAllTest, RunsBranchesInOrderOnTheAwaitingThread) {
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  auto branch = [&](int i) -> Lazy<void> {
    order.push_back(i);
    threads.push_back(std::this_thread::get_id());
    co_return;
  };
  syncAwait(collectAll(branch(0), branch(1), branch(2)));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  for (auto id : threads) EXPECT_EQ(id, std::this_thread::get_id());
}

TEST(CollectAllTest, SuspendedBranchLetsTheNextStartAndCollectWaitsForAll) {
  ManualEvent first, second;
  std::vector<std::string> log;
  auto branch = [&](ManualEvent& e, std::string name) -> Lazy<std::string> {
    log.push_back(name + " started");
    co_await e;
    log.push_back(name + " finished");
    co_return name;
  };
  Try<std::tuple<Try<std::string>, Try<std::string>>> outcome;
  collectAll(branch(first, "a"), branch(second, "b")).start([&](auto r) {
    outcome = std::move(r);
  });
  EXPECT_EQ(log, (std::vector<std::string>{"a started", "b started"}));
  second.release();
  EXPECT_FALSE(outcome.available());  // one branch still running: nothing dangles
  first.release();
  ASSERT_TRUE(outcome.hasValue());
  EXPECT_EQ(std::get<0>(outcome.value()).value(), "a");
  EXPECT_EQ(std::get<1>(outcome.value()).value(), "b");
}

TEST(CollectAllTest, WaitsForEveryBranchEvenWhenOneThrowsEarly) {
  ManualEvent slow;
  bool slowFinished = false;
  auto slowBranch = [&]() -> Lazy<int> {
    co_await slow;
    slowFinished = true;
    co_return 2;
  };
  bool collected = false;
  collectAll(failing("early"), slowBranch()).start([&](auto r) {
    EXPECT_TRUE(slowFinished);
    EXPECT_TRUE(std::get<0>(r.value()).hasException());
    EXPECT_EQ(std::get<1>(r.value()).value(), 2);
    collected = true;
  });
  EXPECT_FALSE(collected);
  slow.release();
  EXPECT_TRUE(collected);
}

TEST(CollectAllTest, BranchesCompletingOnOtherThreadsAreAllCollected) {
  constexpr int kBranches = 64;
  std::vector<ManualEvent> events(kBranches);
  std::vector<Lazy<int>> branches;
  for (int i = 0; i < kBranches; ++i) {
    branches.push_back([](ManualEvent& e, int v) -> Lazy<int> {
      co_await e;
      co_return v;
    }(events[i], i));
  }
  std::atomic<bool> done{false};
  std::vector<Try<int>> results;
  collectAll(std::move(branches)).start([&](auto r) {
    results = std::move(r).value();
    done = true;
  });
  std::vector<std::thread> releasers;
  for (int t = 0; t < 4; ++t) {
    releasers.emplace_back([&, t] {
      for (int i = t; i < kBranches; i += 4) events[i].release();
    });
  }
  for (auto& r : releasers) r.join();
  ASSERT_TRUE(done);
  for (int i = 0; i < kBranches; ++i) EXPECT_EQ(results[i].value(), i);
}

TEST(CollectAllTest, FreesEveryBranchFrame) {
  Counted::reset();
  {
    std::vector<Lazy<int>> branches;
    for (int i = 0; i < 10; ++i) {
      branches.push_back([](Counted c) -> Lazy<int> {
        Counted local = c;
        co_return 1;
      }(Counted{}));
    }
    auto results = syncAwait(collectAll(std::move(branches)));
    EXPECT_EQ(results.size(), 10u);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(CollectAllParaTest, WithoutExecutorBehavesLikeCollectAll) {
  std::vector<std::thread::id> threads;
  auto branch = [&](int v) -> Lazy<int> {
    threads.push_back(std::this_thread::get_id());
    co_return v;
  };
  auto [a, b] = syncAwait(collectAllPara(branch(1), branch(2)));
  EXPECT_EQ(a.value() + b.value(), 3);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0], std::this_thread::get_id());
  EXPECT_EQ(threads[1], std::this_thread::get_id());
}

// Two branches that each wait for the other to have started: they can only both
// finish if they really run at the same time. The wait is bounded so a serialised
// implementation fails the test instead of hanging it.
TEST(CollectAllParaTest, RunsBranchesInParallelOnAThreadPool) {
  ThreadPool pool(2);
  std::atomic<int> started{0};
  auto branch = [&]() -> Lazy<bool> {
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) co_return false;
      std::this_thread::yield();
    }
    co_return true;
  };
  auto [a, b] = syncAwait(collectAllPara(branch(), branch()), &pool);
  EXPECT_TRUE(a.value());
  EXPECT_TRUE(b.value());
}

TEST(CollectAllParaTest, BranchesRunOnTheExecutorAndInheritIt) {
  ThreadPool pool(2);
  std::vector<Lazy<bool>> branches;
  for (int i = 0; i < 50; ++i) {
    branches.push_back([](Executor* expected) -> Lazy<bool> {
      co_return expected->currentThreadInExecutor() && co_await currentExecutor() == expected;
    }(&pool));
  }
  auto results = syncAwait(collectAllPara(std::move(branches)), &pool);
  for (auto& r : results) EXPECT_TRUE(r.value());
}

TEST(CollectAllParaTest, CollectsExceptionsFromParallelBranches) {
  ThreadPool pool(2);
  std::vector<Lazy<int>> branches;
  for (int i = 0; i < 1000; ++i) branches.push_back(i % 2 ? failing("odd") : value(i));
  auto results = syncAwait(collectAllPara(std::move(branches)), &pool);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(results[i].hasException(), i % 2 == 1) << i;
    if (i % 2 == 0) {
      EXPECT_EQ(results[i].value(), i);
    }
  }
}

// --- collectAllFailFast -----------------------------------------------------------------

// Sleeps (cancellably) for an hour; reports whether it started and was cancelled.
Lazy<int> sleepsForever(std::atomic<int>& cancelled, std::atomic<int>* started = nullptr) {
  Counted alive;
  if (started != nullptr) started->fetch_add(1);
  try {
    co_await sleep(std::chrono::hours(1));
  } catch (const OperationCancelled&) {
    cancelled.fetch_add(1);
    throw;
  }
  co_return 0;
}

Lazy<int> failsAfter(std::chrono::microseconds delay) {
  co_await sleep(delay);
  throw std::runtime_error("first failure");
}

TEST(CollectAllFailFastTest, FirstFailureCancelsTheOthersAndEveryTryIsReported) {
  Counted::reset();
  std::atomic<int> cancelled{0};
  std::atomic<int> started{0};
  test::Watchdog watchdog(std::chrono::seconds(60), "CollectAllFailFastTest.FirstFailure");
  // Hand-shake: the second branch fails once both others have started (the third starts
  // only after the second suspends), so the failure finds two waits to cancel, on any
  // machine. (Branches not started by the first failure are never started: see below.)
  test::ManualEvent failNow;
  auto failsWhenReleased = [&]() -> Lazy<int> {
    co_await failNow;
    throw std::runtime_error("first failure");
  };
  std::thread releaser([&] {
    while (started.load() < 2) std::this_thread::yield();  // the watchdog bounds it
    failNow.release();  // the failure runs here, and cancels the others from here
  });
  auto [a, b, c] = syncAwait(collectAllFailFast(
      sleepsForever(cancelled, &started), failsWhenReleased(), sleepsForever(cancelled, &started)));
  releaser.join();
  EXPECT_THROW(a.value(), OperationCancelled);
  EXPECT_THROW(b.value(), std::runtime_error);
  EXPECT_THROW(c.value(), OperationCancelled);
  EXPECT_EQ(started.load(), 2);
  EXPECT_EQ(cancelled.load(), 2);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(CollectAllFailFastTest, WithoutFailureItIsCollectAll) {
  auto [a, b] = syncAwait(collectAllFailFast(value(1), value(2)));
  EXPECT_EQ(a.value(), 1);
  EXPECT_EQ(b.value(), 2);
  std::vector<Lazy<int>> range;
  for (int i = 0; i < 10; ++i) range.push_back(value(i));
  std::vector<Try<int>> results = syncAwait(collectAllFailFast(std::move(range)));
  ASSERT_EQ(results.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(results[i].value(), i);
}

TEST(CollectAllFailFastTest, BranchesAfterASynchronousFailureAreNotStarted) {
  Counted::reset();
  bool laterRan = false;
  auto later = [&]() -> Lazy<int> {
    Counted alive;
    laterRan = true;
    co_return 1;
  };
  std::vector<Lazy<int>> range;
  range.push_back(value(0));
  range.push_back(failing("now"));
  range.push_back(later());
  std::vector<Try<int>> results = syncAwait(collectAllFailFast(std::move(range)));
  EXPECT_EQ(results[0].value(), 0);
  EXPECT_THROW(results[1].value(), std::runtime_error);
  EXPECT_THROW(results[2].value(), OperationCancelled);
  EXPECT_FALSE(laterRan);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(CollectAllFailFastTest, ParallelBranchesOnAPoolAreCancelledToo) {
  ThreadPool pool(2);
  Counted::reset();
  std::atomic<int> cancelled{0};
  test::Watchdog watchdog(std::chrono::seconds(60), "CollectAllFailFastTest.Parallel");
  std::vector<Lazy<int>> range;
  for (int i = 0; i < 8; ++i) range.push_back(sleepsForever(cancelled));
  range.push_back(failsAfter(std::chrono::microseconds(500)));
  std::vector<Try<int>> results =
      syncAwait(collectAllParaFailFast(std::move(range)), &pool);
  for (int i = 0; i < 8; ++i) EXPECT_THROW(results[i].value(), OperationCancelled);
  EXPECT_THROW(results[8].value(), std::runtime_error);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(CollectAllFailFastTest, CancellingTheAwaiterCancelsEveryBranch) {
  CancellationSource source;
  std::atomic<int> cancelled{0};
  source.requestCancellation();
  auto [a, b] = syncAwait(withCancellation(
      source.token(), collectAllFailFast(sleepsForever(cancelled), sleepsForever(cancelled))));
  EXPECT_THROW(a.value(), OperationCancelled);
  EXPECT_THROW(b.value(), OperationCancelled);
}

// --- collectAllWindowed ------------------------------------------------------------------

// Tracks how many branches run at once.
struct InFlight {
  std::atomic<int> now{0}, peak{0};
  void enter() {
    const int n = now.fetch_add(1) + 1;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
  }
  void leave() { now.fetch_sub(1); }
};

Lazy<int> tracked(InFlight& inFlight, int v, std::chrono::microseconds hold) {
  inFlight.enter();
  co_await sleep(hold);
  inFlight.leave();
  co_return v;
}

// Holds its slot until `open` is released, then lets it go.
Lazy<int> heldUntil(InFlight& inFlight, test::ManualEvent& open, int v) {
  inFlight.enter();
  co_await open;
  inFlight.leave();
  co_return v;
}

TEST(CollectAllWindowedTest, NeverRunsMoreThanTheWindowAndKeepsOrder) {
  InFlight inFlight;
  test::ManualEvent open;
  std::vector<Lazy<int>> range;
  for (int i = 0; i < 12; ++i) range.push_back(heldUntil(inFlight, open, i));
  // Hand-shake: the branches hold their slots until the window is full (three are
  // waiting); then each finishes, the next starts, and (the event released) it finishes at
  // once, so the window never holds more than three.
  test::Watchdog watchdog(std::chrono::seconds(60), "CollectAllWindowedTest.NeverRunsMore");
  std::thread opener([&] {
    while (open.waiting() < 3) std::this_thread::yield();
    open.release();
  });
  std::vector<Try<int>> results = syncAwait(collectAllWindowed(3, std::move(range)));
  opener.join();
  ASSERT_EQ(results.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(results[i].value(), i);
  EXPECT_EQ(inFlight.peak.load(), 3);
}

TEST(CollectAllWindowedTest, ParallelOnAPoolNeverExceedsTheWindow) {
  ThreadPool pool(2);
  InFlight inFlight;
  std::vector<Lazy<int>> range;
  for (int i = 0; i < 200; ++i) {
    range.push_back(tracked(inFlight, i, std::chrono::microseconds(i % 7 * 30)));
  }
  std::vector<Try<int>> results = syncAwait(collectAllParaWindowed(4, std::move(range)), &pool);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(results[i].value(), i);
  EXPECT_LE(inFlight.peak.load(), 4);
  EXPECT_GE(inFlight.peak.load(), 1);
}

TEST(CollectAllWindowedTest, ExceptionsStayInTheirTrys) {
  std::vector<Lazy<int>> range;
  range.push_back(value(1));
  range.push_back(failing("x"));
  range.push_back(value(3));
  std::vector<Try<int>> results = syncAwait(collectAllWindowed(2, std::move(range)));
  EXPECT_EQ(results[0].value(), 1);
  EXPECT_THROW(results[1].value(), std::runtime_error);
  EXPECT_EQ(results[2].value(), 3);
}

TEST(CollectAllWindowedTest, ZeroWindowThrowsAndEmptyRangeCompletes) {
  EXPECT_THROW((void)collectAllWindowed(0, std::vector<Lazy<int>>()), std::invalid_argument);
  EXPECT_TRUE(syncAwait(collectAllWindowed(5, std::vector<Lazy<int>>())).empty());
}

TEST(CollectAllWindowedTest, FreesEveryBranchFrame) {
  Counted::reset();
  auto counted = [](int v) -> Lazy<int> {
    Counted alive;
    co_await sleep(std::chrono::microseconds(10));
    co_return v;
  };
  std::vector<Lazy<int>> range;
  for (int i = 0; i < 50; ++i) range.push_back(counted(i));
  EXPECT_EQ(syncAwait(collectAllWindowed(8, std::move(range))).size(), 50u);
  EXPECT_EQ(Counted::alive(), 0);
}

// Each branch that finishes synchronously starts the next by symmetric transfer: a
// window of 1 over many synchronous branches must not grow the native stack.
TEST(CollectAllWindowedTest, SynchronousBranchesDoNotGrowTheStack) {
#if !WEFT_TAIL_CALLS_GUARANTEED
  GTEST_SKIP() << "needs guaranteed tail calls (symmetric transfer)";
#endif
  constexpr int kBranches = 200'000;
  std::vector<Lazy<int>> range;
  range.reserve(kBranches);
  for (int i = 0; i < kBranches; ++i) range.push_back(value(1));
  std::vector<Try<int>> results = syncAwait(collectAllWindowed(1, std::move(range)));
  long sum = 0;
  for (auto& r : results) sum += r.value();
  EXPECT_EQ(sum, kBranches);
}

}  // namespace
}  // namespace weft
