#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>

#include "weft/coro/detail/monitored_task.h"
#include "weft/coro/lazy.h"
#include "weft/coro/task_metrics.h"

namespace weft {

// How a TaskMonitor counts.
struct TaskMonitorOptions {
  // A poll that runs this long or longer is slow (TaskMetrics::totalSlowPollCount).
  // tokio-metrics' default. 0: every poll is slow. Must not be negative.
  std::chrono::nanoseconds slowPollThreshold = std::chrono::microseconds(50);
};

namespace detail {

// The coroutine instrument() returns: runs `work` as its own body, between the first
// poll and the last (monitored_task.h). The record lives in this frame's parameters and
// dies with it.
template <class T>
Lazy<T> monitoredBody(std::unique_ptr<MonitoredTask> task, Lazy<T> work) {
  task->firstPoll();
  // Ends the running poll however the body ends: a return, an exception, or the frame's
  // destruction while it waits (nothing runs then; lastPoll does nothing).
  struct LastPoll {
    MonitoredTask* task;
    ~LastPoll() { task->lastPoll(); }
  } last{task.get()};
  co_return co_await std::move(work);
}

}  // namespace detail

// TaskMonitor: per-task runtime metrics for the tasks started under it, in all (tokio-
// metrics' TaskMonitor): how many were started and are gone, how long they waited for
// their first run, how often and how long they ran (polls), how many polls were slow,
// how long they were idle. Wrap a Lazy with instrument() and start the result as a task;
// read cumulative() at any time, from any thread, or its Prometheus text
// (coro/task_prometheus_text.h).
//
// Semantics: instrument(lazy) returns a Lazy that runs `lazy` and counts it. Its polls
// (runs from a resumption to the next suspension, TaskMetrics says what is counted) are
// measured with WEFT_TASK_TRACKING and when it is started as a root task: spawn(),
// start(), TaskGroup::spawn(), syncAwait(lazy) (syncAwait(lazy, executor) awaits it from a
// root of its own: spawn it and syncAwait the handle). Awaited inside another coroutine, or without
// tracking, it counts only the task's start and end and its first-poll delay (the polls
// stay 0): weft sees a task's suspensions where the task registry's wait notes are
// published (coro/detail/monitored_task.h). One monitor serves any number of tasks on any
// executors; copies of a monitor share its counters (as tokio's clones do), which live
// until the last copy and the last task started under it are gone.
//
// Cost: tasks that are not monitored pay a thread-local load and a test per published wait
// and a bit test per resumption (docs/debugging.md, "What it costs"). A monitored task
// pays an allocation and a coroutine frame when instrumented, a steady_clock read and a
// few relaxed atomic adds on the monitor per poll boundary.
//
// Preconditions: `lazy` is valid (else a message and abort); slowPollThreshold >= 0 (else
// std::invalid_argument).
// Errors: instrument() throws std::bad_alloc. The task's own exceptions pass through the
// returned Lazy unchanged.
// Thread safety: instrument() and cumulative() may be called concurrently from any
// thread, with tasks running. cumulative() reads each counter atomically but not all of
// them at one instant: while tasks run, e.g. totalPollCount may already count a poll whose
// duration totalPollDurationNanos does not yet.
//
// Example:
//   weft::TaskMonitor monitor;
//   auto handle = weft::spawn(&pool, monitor.instrument(handleRequest(conn)));
//   weft::TaskMetrics m = monitor.cumulative();  // e.g. m.totalSlowPollCount
class TaskMonitor {
 public:
  explicit TaskMonitor(TaskMonitorOptions options = {})
      : state_(std::make_shared<detail::TaskMonitorState>(thresholdNanos(options))) {}

  // A Lazy that runs `lazy` under this monitor (see the class comment).
  template <class T>
  Lazy<T> instrument(Lazy<T> lazy) const {
    if (!lazy.valid()) detail::abortInvalidLazy("TaskMonitor::instrument");
    auto task = std::make_unique<detail::MonitoredTask>(state_);
    detail::MonitoredTask* record = task.get();
    Lazy<T> monitored = detail::monitoredBody<T>(std::move(task), std::move(lazy));
    record->attach(detail::LazyAccess::handle(monitored).promise());
    return monitored;
  }

  // The counters as of now. noexcept: relaxed loads.
  TaskMetrics cumulative() const noexcept { return state_->read(); }

  // The threshold of slow polls.
  std::chrono::nanoseconds slowPollThreshold() const noexcept {
    return std::chrono::nanoseconds(state_->slowPollThresholdNanos);
  }

 private:
  static std::uint64_t thresholdNanos(const TaskMonitorOptions& options) {
    if (options.slowPollThreshold.count() < 0)
      throw std::invalid_argument("weft: TaskMonitorOptions::slowPollThreshold is negative");
    return static_cast<std::uint64_t>(options.slowPollThreshold.count());
  }

  std::shared_ptr<detail::TaskMonitorState> state_;
};

}  // namespace weft
