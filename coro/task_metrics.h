#pragma once

#include <cstdint>

namespace weft {

// TaskMetrics: what the tasks started under one TaskMonitor (coro/task_monitor.h) did, in
// all, since the monitor was made: tokio-metrics' TaskMonitor::cumulative(). A plain value:
// TaskMonitor::cumulative() fills it. Durations in nanoseconds of std::chrono::steady_clock.
//
// A *poll* is a stretch of the task running on a thread: from its first run, or from a
// resumption after a wait of one of its coroutines, to its next wait (a co_await that
// suspends, or whose awaiter's await_suspend is called and declines to) or its end.
// Between two polls the task is *idle* (it waits on something, and then on a thread to
// resume it). docs/debugging.md ("In production") defines each field.
//
// Which fields are counted depends on the build:
//  - always: instrumentedCount, droppedCount, firstPollCount, the first-poll delays and
//    the scheduled count and duration (see below);
//  - with WEFT_TASK_TRACKING (coro/detail/config.h), for a task started as a root task
//    (spawn, start, TaskGroup::spawn, syncAwait of a Lazy
//    without an executor): the polls, slow polls and idle times.
//    Without it, or for an instrumented Lazy awaited inside another task, they stay 0:
//    weft sees a task's suspensions only where its wait notes are published.
struct TaskMetrics {
  // Lazys that TaskMonitor::instrument() wrapped (started or not).
  std::uint64_t instrumentedCount = 0;
  // Of those, how many are gone: finished (with a value or an exception), or destroyed
  // before they finished or started (a cancelled TaskGroup's, a spawn the executor
  // refused). instrumentedCount - droppedCount are alive now.
  std::uint64_t droppedCount = 0;

  // Tasks that have started running, and the time from instrument() to their first run:
  // in all and the longest.
  std::uint64_t firstPollCount = 0;
  std::uint64_t totalFirstPollDelayNanos = 0;
  std::uint64_t maxFirstPollDelayNanos = 0;

  // Polls, and the time the tasks spent in them (the time they ran).
  std::uint64_t totalPollCount = 0;
  std::uint64_t totalPollDurationNanos = 0;
  // Of those, the slow ones: a poll that took slowPollThresholdNanos or more.
  std::uint64_t totalSlowPollCount = 0;
  std::uint64_t totalSlowPollDurationNanos = 0;
  // The monitor's threshold (TaskMonitorOptions::slowPollThreshold).
  std::uint64_t slowPollThresholdNanos = 0;

  // Times a task waited to run after it was handed to an executor, and how long in all.
  // weft sees that hand-off only when a task is started (spawn() schedules its first run):
  // later wake-ups are made by each awaitable (an Event, a channel, a socket), which knows
  // nothing of tasks, so the time a woken task then waits in a run queue is part of its
  // idle time. Hence one scheduled wait per first poll, the same length as its first-poll
  // delay.
  std::uint64_t totalScheduledCount = 0;
  std::uint64_t totalScheduledDurationNanos = 0;

  // Times the tasks were idle (from the end of a poll that was not the last to the start
  // of the next), and how long in all: waiting on something, then for a thread.
  std::uint64_t totalIdledCount = 0;
  std::uint64_t totalIdleDurationNanos = 0;
};

}  // namespace weft
