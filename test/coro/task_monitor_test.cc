#include "weft/coro/task_monitor.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test/support/manual_event.h"
#include "test/support/wait_until.h"
#include "test/support/watchdog.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/spawn.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task_prometheus_text.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::ManualEvent;
using test::waitUntil;
using test::Watchdog;

// Polls, slow polls and idle times are measured only with task tracking
// (coro/task_metrics.h): without it they are 0.
constexpr bool kPollsMeasured = WEFT_TASK_TRACKING != 0;
std::uint64_t ifMeasured(std::uint64_t n) { return kPollsMeasured ? n : 0; }

constexpr auto kLimit = 120s;

// Waits on each event in turn: events.size() suspensions.
template <std::size_t N>
Lazy<int> waitOnEach(std::array<ManualEvent, N>& events) {
  int waited = 0;
  for (ManualEvent& event : events) {
    co_await event;
    ++waited;
  }
  co_return waited;
}

// Releases each event once the task waits on it (a hand-shake: the wait is certain to
// suspend).
template <std::size_t N>
void releaseInTurn(std::array<ManualEvent, N>& events) {
  for (ManualEvent& event : events) {
    waitUntil([&] { return event.waiting() == 1; });
    event.release();
  }
}

Lazy<> yieldTimes(int n) {
  for (int i = 0; i < n; ++i) co_await yield();
}

TEST(TaskMonitorTest, StartsWithZeroes) {
  TaskMonitor monitor(TaskMonitorOptions{.slowPollThreshold = 3ms});
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.instrumentedCount, 0u);
  EXPECT_EQ(m.droppedCount, 0u);
  EXPECT_EQ(m.firstPollCount, 0u);
  EXPECT_EQ(m.totalPollCount, 0u);
  EXPECT_EQ(m.slowPollThresholdNanos, 3000000u);
  EXPECT_EQ(monitor.slowPollThreshold(), 3ms);
}

TEST(TaskMonitorTest, RejectsANegativeThreshold) {
  EXPECT_THROW(TaskMonitor(TaskMonitorOptions{.slowPollThreshold = -1ns}), std::invalid_argument);
}

TEST(TaskMonitorTest, CountsOnePollPerWaitAndOneMore) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.CountsOnePollPerWaitAndOneMore");
  constexpr std::size_t kWaits = 5;
  ThreadPool pool(1);
  TaskMonitor monitor(TaskMonitorOptions{.slowPollThreshold = 0ns});  // every poll is slow
  std::array<ManualEvent, kWaits> events;
  JoinHandle<int> handle = spawn(&pool, monitor.instrument(waitOnEach(events)));
  EXPECT_EQ(monitor.cumulative().instrumentedCount, 1u);
  releaseInTurn(events);
  EXPECT_EQ(syncAwait(std::move(handle)), static_cast<int>(kWaits));

  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.instrumentedCount, 1u);
  EXPECT_EQ(m.droppedCount, 1u);
  EXPECT_EQ(m.firstPollCount, 1u);
  EXPECT_EQ(m.maxFirstPollDelayNanos, m.totalFirstPollDelayNanos);
  EXPECT_EQ(m.totalScheduledCount, 1u);
  EXPECT_EQ(m.totalScheduledDurationNanos, m.totalFirstPollDelayNanos);
  EXPECT_EQ(m.totalPollCount, ifMeasured(kWaits + 1));
  EXPECT_EQ(m.totalSlowPollCount, ifMeasured(kWaits + 1));
  EXPECT_EQ(m.totalSlowPollDurationNanos, m.totalPollDurationNanos);
  EXPECT_EQ(m.totalIdledCount, ifMeasured(kWaits));
}

TEST(TaskMonitorTest, PollsUnderTheThresholdAreNotSlow) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.PollsUnderTheThresholdAreNotSlow");
  constexpr std::size_t kWaits = 3;
  ThreadPool pool(2);
  TaskMonitor monitor(TaskMonitorOptions{.slowPollThreshold = 1h});
  std::array<ManualEvent, kWaits> events;
  JoinHandle<int> handle = spawn(&pool, monitor.instrument(waitOnEach(events)));
  releaseInTurn(events);
  EXPECT_EQ(syncAwait(std::move(handle)), static_cast<int>(kWaits));
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.totalPollCount, ifMeasured(kWaits + 1));
  EXPECT_EQ(m.totalSlowPollCount, 0u);
  EXPECT_EQ(m.totalSlowPollDurationNanos, 0u);
}

TEST(TaskMonitorTest, CountsEveryYieldAsAPoll) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.CountsEveryYieldAsAPoll");
  ThreadPool pool(1);
  TaskMonitor monitor;
  syncAwait(spawn(&pool, monitor.instrument(yieldTimes(4))));
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.firstPollCount, 1u);
  EXPECT_EQ(m.droppedCount, 1u);
  EXPECT_EQ(m.totalPollCount, ifMeasured(5));
  EXPECT_EQ(m.totalIdledCount, ifMeasured(4));
}

TEST(TaskMonitorTest, CountsTheLastPollOfATaskThatThrows) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.CountsTheLastPollOfATaskThatThrows");
  ThreadPool pool(1);
  TaskMonitor monitor;
  auto failing = []() -> Lazy<int> {
    co_await yield();
    throw std::runtime_error("boom");
  };
  EXPECT_THROW(syncAwait(spawn(&pool, monitor.instrument(failing()))), std::runtime_error);
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.droppedCount, 1u);
  EXPECT_EQ(m.totalPollCount, ifMeasured(2));
}

TEST(TaskMonitorTest, CountsATaskDestroyedBeforeItStarts) {
  TaskMonitor monitor;
  { Lazy<> never = monitor.instrument(yieldTimes(1)); }
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.instrumentedCount, 1u);
  EXPECT_EQ(m.droppedCount, 1u);
  EXPECT_EQ(m.firstPollCount, 0u);
  EXPECT_EQ(m.totalPollCount, 0u);
}

TEST(TaskMonitorTest, CountsATaskDestroyedWhileItWaits) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.CountsATaskDestroyedWhileItWaits");
  TaskMonitor monitor;
  ManualEvent never;
  {
    // No executor: runs inline until it waits, then is destroyed there.
    Lazy<> lazy = monitor.instrument([](ManualEvent& event) -> Lazy<> { co_await event; }(never));
    auto handle = detail::LazyAccess::handle(lazy);
    handle.resume();  // as an awaited Lazy would start: not a root, so no polls
    EXPECT_EQ(never.waiting(), 1u);
  }
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.instrumentedCount, 1u);
  EXPECT_EQ(m.droppedCount, 1u);
  EXPECT_EQ(m.firstPollCount, 1u);
  EXPECT_EQ(m.totalPollCount, 0u);
}

// syncAwait(lazy, executor) awaits the Lazy from a root of its own (a Task awaited by
// another coroutine): the same.
TEST(TaskMonitorTest, SyncAwaitOnAnExecutorCountsOnlyItsStartAndEnd) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.SyncAwaitOnAnExecutorCountsOnlyItsStartAndEnd");
  ThreadPool pool(1);
  TaskMonitor monitor;
  syncAwait(monitor.instrument(yieldTimes(3)), &pool);
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.firstPollCount, 1u);
  EXPECT_EQ(m.droppedCount, 1u);
  EXPECT_EQ(m.totalPollCount, 0u);
}

TEST(TaskMonitorTest, AwaitedInsideAnotherTaskCountsOnlyItsStartAndEnd) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.AwaitedInsideAnotherTaskCountsOnlyItsStartAndEnd");
  ThreadPool pool(1);
  TaskMonitor monitor;
  syncAwait(
      [&]() -> Lazy<> {
        co_await monitor.instrument(yieldTimes(3));
        co_await yield();
      }(),
      &pool);
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.instrumentedCount, 1u);
  EXPECT_EQ(m.droppedCount, 1u);
  EXPECT_EQ(m.firstPollCount, 1u);
  EXPECT_EQ(m.totalPollCount, 0u);
  EXPECT_EQ(m.totalIdledCount, 0u);
}

// A monitored task whose poll resumes another monitored task inline: each counts its own
// polls (the inner one's run nests in the outer one's).
TEST(TaskMonitorTest, NestedRunsCountTheirOwnPolls) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.NestedRunsCountTheirOwnPolls");
  ThreadPool pool(1);
  TaskMonitor outerMonitor;
  TaskMonitor innerMonitor;
  ManualEvent innerWait;
  std::array<ManualEvent, 2> outerWaits;
  // The inner task: a root without an executor (syncAwait on a thread of its own), so
  // that the release below resumes it inline, inside the outer task's poll.
  std::thread inner([&] {
    syncAwait(innerMonitor.instrument([](ManualEvent& event) -> Lazy<> {
      co_await event;
      co_await event;  // released: does not suspend
    }(innerWait)));
  });
  waitUntil([&] { return innerWait.waiting() == 1; });
  JoinHandle<void> outer =
      spawn(&pool, outerMonitor.instrument(
                       [](ManualEvent& release, std::array<ManualEvent, 2>& waits) -> Lazy<> {
                         co_await waits[0];
                         release.release();  // the inner task's second poll runs here, and it ends
                         co_await waits[1];
                       }(innerWait, outerWaits)));
  releaseInTurn(outerWaits);
  syncAwait(std::move(outer));
  inner.join();
  EXPECT_EQ(outerMonitor.cumulative().totalPollCount, ifMeasured(3));
  EXPECT_EQ(innerMonitor.cumulative().totalPollCount, ifMeasured(2));
  EXPECT_EQ(outerMonitor.cumulative().droppedCount, 1u);
  EXPECT_EQ(innerMonitor.cumulative().droppedCount, 1u);
}

// A collect's branches run outside the task's polls (they are not the task's run): the
// task's collect waits once, whether or not the branches suspend, so the task runs two
// polls, on whichever worker the last branch resumes it.
TEST(TaskMonitorTest, CollectBranchesAreNotPollsOfTheTask) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.CollectBranchesAreNotPollsOfTheTask");
  ThreadPool pool(2);
  TaskMonitor monitor;
  constexpr int kTasks = 200;
  std::vector<JoinHandle<void>> handles;
  for (int i = 0; i < kTasks; ++i) {
    handles.push_back(spawn(&pool, monitor.instrument([]() -> Lazy<> {
      co_await collectAllPara(yieldTimes(2), yieldTimes(3));
    }())));
  }
  for (JoinHandle<void>& handle : handles) syncAwait(std::move(handle));
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.droppedCount, static_cast<std::uint64_t>(kTasks));
  EXPECT_EQ(m.totalPollCount, ifMeasured(2 * kTasks));
  EXPECT_EQ(m.totalIdledCount, ifMeasured(kTasks));
}

// Tasks that are not monitored count nowhere, also when they run inside a monitored
// task's poll or beside monitored tasks.
TEST(TaskMonitorTest, UnmonitoredTasksAreNotCounted) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.UnmonitoredTasksAreNotCounted");
  ThreadPool pool(1);
  TaskMonitor monitor;
  JoinHandle<void> plain = spawn(&pool, yieldTimes(3));
  syncAwait(spawn(&pool, monitor.instrument([&]() -> Lazy<> {
    JoinHandle<void> inside = spawn(&pool, yieldTimes(2));  // runs inline first
    co_await std::move(inside);
  }())));
  syncAwait(std::move(plain));
  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.instrumentedCount, 1u);
  // The monitored task: its start, its wait for `inside`, its end.
  EXPECT_EQ(m.totalPollCount, ifMeasured(2));
}

// Readers on other threads while many monitored tasks start, wait and end on two
// workers (run under TSan by the tsan step): the totals come out exact.
TEST(TaskMonitorTest, ConcurrentReadersDuringChurn) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.ConcurrentReadersDuringChurn");
  constexpr int kTasks = 2000;
  constexpr int kYields = 3;
  ThreadPool pool(2);
  TaskMonitor monitor(TaskMonitorOptions{.slowPollThreshold = 0ns});
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load(std::memory_order_acquire)) {
        const TaskMetrics m = monitor.cumulative();
        EXPECT_LE(m.firstPollCount, m.instrumentedCount);
        if (toPrometheusText(m, "churn").empty()) ADD_FAILURE();
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::vector<JoinHandle<void>> handles;
  handles.reserve(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    handles.push_back(spawn(&pool, monitor.instrument(yieldTimes(kYields))));
    // A copy of the monitor, made and dropped while tasks run.
    if (i % 100 == 0) TaskMonitor copy = monitor;
  }
  for (JoinHandle<void>& handle : handles) syncAwait(std::move(handle));
  waitUntil([&] { return reads.load(std::memory_order_relaxed) > 0; });
  done.store(true, std::memory_order_release);
  for (std::thread& reader : readers) reader.join();

  const TaskMetrics m = monitor.cumulative();
  EXPECT_EQ(m.instrumentedCount, static_cast<std::uint64_t>(kTasks));
  EXPECT_EQ(m.droppedCount, static_cast<std::uint64_t>(kTasks));
  EXPECT_EQ(m.firstPollCount, static_cast<std::uint64_t>(kTasks));
  EXPECT_EQ(m.totalPollCount, ifMeasured(kTasks * (kYields + 1)));
  EXPECT_EQ(m.totalSlowPollCount, ifMeasured(kTasks * (kYields + 1)));
  EXPECT_EQ(m.totalIdledCount, ifMeasured(kTasks * kYields));
  EXPECT_GE(m.totalFirstPollDelayNanos, m.maxFirstPollDelayNanos);
}

// The monitor's counters outlive it while a task started under it runs.
TEST(TaskMonitorTest, ATaskMayOutliveItsMonitor) {
  Watchdog watchdog(kLimit, "TaskMonitorTest.ATaskMayOutliveItsMonitor");
  ThreadPool pool(1);
  std::array<ManualEvent, 1> events;
  JoinHandle<int> handle = [&] {
    TaskMonitor monitor;
    return spawn(&pool, monitor.instrument(waitOnEach(events)));
  }();
  releaseInTurn(events);
  EXPECT_EQ(syncAwait(std::move(handle)), 1);
}

}  // namespace
}  // namespace weft
