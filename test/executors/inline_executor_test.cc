#include "weft/executors/inline_executor.h"

#include <gtest/gtest.h>

#include <coroutine>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/executors/executor.h"
#include "test/support/eager_coroutine.h"

namespace weft {
namespace {

// An eager coroutine that destroys itself at the end: enough to test the handle path.
using Detached = test::EagerCoroutine;

struct ResumeOn {
  Executor& executor;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const { executor.schedule(h); }
  void await_resume() const noexcept {}
};

TEST(InlineExecutorTest, RunsCallableBeforeScheduleReturns) {
  InlineExecutor ex;
  std::thread::id ranOn;
  bool ran = false;
  ex.schedule([&] {
    ran = true;
    ranOn = std::this_thread::get_id();
  });
  EXPECT_TRUE(ran);
  EXPECT_EQ(ranOn, std::this_thread::get_id());
}

TEST(InlineExecutorTest, DestroysCallableAfterRunningIt) {
  InlineExecutor ex;
  auto token = std::make_shared<int>(0);
  ex.schedule([token] {});
  EXPECT_EQ(token.use_count(), 1);
}

TEST(InlineExecutorTest, ResumesCoroutineHandleBeforeScheduleReturns) {
  InlineExecutor ex;
  std::vector<int> steps;
  std::thread::id resumedOn;
  [](Executor& ex, std::vector<int>& steps, std::thread::id& resumedOn) -> Detached {
    steps.push_back(1);
    co_await ResumeOn{ex};
    steps.push_back(2);
    resumedOn = std::this_thread::get_id();
  }(ex, steps, resumedOn);
  steps.push_back(3);
  EXPECT_EQ(steps, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(resumedOn, std::this_thread::get_id());
}

TEST(InlineExecutorTest, WorkScheduledByWorkRunsNested) {
  InlineExecutor ex;
  std::vector<int> order;
  ex.schedule([&] {
    order.push_back(1);
    ex.schedule([&] { order.push_back(2); });
    order.push_back(3);
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(InlineExecutorTest, IsNeverCurrentThreadAndIsNamedInline) {
  InlineExecutor ex;
  EXPECT_FALSE(ex.currentThreadInExecutor());
  bool insideSays = true;
  ex.schedule([&] { insideSays = ex.currentThreadInExecutor(); });
  EXPECT_FALSE(insideSays);
  EXPECT_EQ(ex.name(), "inline");
}

TEST(InlineExecutorTest, RunsWorkFromManyThreadsEachOnItsOwnThread) {
  InlineExecutor ex;
  constexpr int kThreads = 4;
  std::vector<int> wrongThread(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto self = std::this_thread::get_id();
      for (int i = 0; i < 10'000; ++i) {
        ex.schedule([&, self, t] {
          if (std::this_thread::get_id() != self) ++wrongThread[t];
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrongThread[t], 0);
}

// Executor's shutdown support keeps its defaults: no shutdown timer (nothing armed), and
// a hold that holds nothing.
TEST(InlineExecutorTest, HasNoShutdownTimerAndHoldsNothing) {
  InlineExecutor ex;
  TimerEntry timer;
  timer.complete = [](Job*, bool) noexcept { std::abort(); };  // must never run
  EXPECT_FALSE(ex.scheduleShutdownTimer(timer));
  EXPECT_EQ(timer.heapIndex, TimerEntry::kNotQueued);
  EXPECT_TRUE(ex.holdOpen());
  ex.releaseHold();
}

TEST(InlineExecutorDeathTest, ExceptionEscapingACallableAbortsNamingInline) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  InlineExecutor ex;
  EXPECT_DEATH(ex.schedule([] { throw std::runtime_error("kaboom"); }),
               "executor 'inline' threw: kaboom");
}

}  // namespace
}  // namespace weft
