#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "weft/coro/detail/config.h"
#include "weft/coro/detail/registry_slot.h"
#include "weft/coro/detail/running_root.h"
#include "weft/coro/task_metrics.h"

namespace weft::detail {

class LazyPromiseBase;

// A TaskMonitor's counters (coro/task_monitor.h), shared by the monitor's copies and the
// records of the tasks started under it (so that either may outlive the other). Each
// field is a TaskMetrics field; every update is a relaxed atomic add (or a CAS loop for
// the maximum): readers want each number, not a snapshot consistent across them.
struct TaskMonitorState {
  explicit TaskMonitorState(std::uint64_t threshold) noexcept
      : slowPollThresholdNanos(threshold) {}

  // The counters as of now. noexcept: relaxed loads.
  TaskMetrics read() const noexcept;

  const std::uint64_t slowPollThresholdNanos;
  std::atomic<std::uint64_t> instrumentedCount{0};
  std::atomic<std::uint64_t> droppedCount{0};
  std::atomic<std::uint64_t> firstPollCount{0};
  std::atomic<std::uint64_t> totalFirstPollDelayNanos{0};
  std::atomic<std::uint64_t> maxFirstPollDelayNanos{0};
  std::atomic<std::uint64_t> totalPollCount{0};
  std::atomic<std::uint64_t> totalPollDurationNanos{0};
  std::atomic<std::uint64_t> totalSlowPollCount{0};
  std::atomic<std::uint64_t> totalSlowPollDurationNanos{0};
  std::atomic<std::uint64_t> totalIdledCount{0};
  std::atomic<std::uint64_t> totalIdleDurationNanos{0};
};

// One task started under a TaskMonitor: what TaskMonitor::instrument() makes, owned by the
// Lazy it returns (a coroutine, monitoredBody in coro/task_monitor.h, that awaits the
// user's Lazy), freed with it.
//
// How polls are seen (with WEFT_TASK_TRACKING, when that Lazy is a root task): the task's
// first poll starts in monitoredBody; every later one where a coroutine of the task
// resumes from a published wait (NotedAwaiter::await_resume, coro/detail/lazy_promise.h);
// each ends where a coroutine of the task publishes its next wait (NotedAwaiter::
// await_suspend), or where monitoredBody ends. While a poll runs, the thread's word
// tMonitoredRun names the record, and the record the one it replaced (runs nest: a task's
// poll may resume another task inline, whose poll ends first). A wait that ends a poll
// marks the NotedAwaiter's pointer to the task's TaskRecord (its low bit, kMonitoredWait:
// records are 8-byte aligned), so that its resumption, on any thread, finds this record
// again through the task's: TaskRecord::root is monitoredBody's promise, whose parent word
// holds this record (LazyPromiseBase::monitorRecord).
//
// Clock: std::chrono::steady_clock (CLOCK_MONOTONIC, read through the vDSO, some 20-25 ns),
// read once per poll boundary of a monitored task and never for other tasks. The coarse
// clock (CLOCK_MONOTONIC_COARSE, a few ns) moves once per scheduler tick (1-4 ms), far
// coarser than the polls it would measure (microseconds), so every poll would read 0 or a
// tick, and slow polls could not be told from fast ones.
class MonitoredTask {
 public:
  explicit MonitoredTask(std::shared_ptr<TaskMonitorState> monitor) noexcept;
  // The task is gone (finished, or destroyed): counted as dropped. noexcept: an atomic add.
  ~MonitoredTask();
  MonitoredTask(const MonitoredTask&) = delete;
  MonitoredTask& operator=(const MonitoredTask&) = delete;

  // Records the promise of the Lazy that owns this record (monitoredBody's). Called by
  // instrument() before the Lazy is started.
  void attach(LazyPromiseBase& promise) noexcept;
  // The task's first run starts (in monitoredBody): counts it, and if the Lazy is a root
  // task (with WEFT_TASK_TRACKING) starts its first poll. noexcept: a clock read, adds.
  void firstPoll() noexcept;
  // monitoredBody ends (returns, throws, or is destroyed): ends the poll that runs, if
  // one does. noexcept: a clock read and adds.
  void lastPoll() noexcept;

  // The poll of the task of `root` (its TaskRecord) ends here, on the thread whose run this record is, if
  // the task is this record's: returns `root` marked (kMonitoredWait), else `root`.
  // noexcept: a clock read and adds.
  TaskRecord* suspend(TaskRecord* root) noexcept;
  // A poll of this record's task starts on the calling thread. noexcept: as above.
  void resume() noexcept;

 private:
  void endPoll(std::int64_t now) noexcept;
  void startPoll(std::int64_t now) noexcept;

  std::shared_ptr<TaskMonitorState> monitor_;
  LazyPromiseBase* promise_ = nullptr;
  // The task's TaskRecord (registry_slot.h), when its polls are measured; else null.
  TaskRecord* taskRecord_ = nullptr;
  // While a poll runs: the thread's previous tMonitoredRun.
  MonitoredTask* outer_ = nullptr;
  std::int64_t instrumentedAt_;
  // While a poll runs, when it started; between polls, when the last one ended.
  std::int64_t mark_ = 0;
  bool running_ = false;
};

// The bit of a NotedAwaiter's record pointer that says its wait ended a monitored poll.
inline constexpr std::uintptr_t kMonitoredWait = 1;
// The marked record is what the running-root word holds while the poll runs.
static_assert(kMonitoredWait == kMonitoredRun);

// The record whose poll runs on the calling thread now (innermost), or null. Only its
// thread reads or writes it.
WEFT_FIXED_TLS inline constinit thread_local MonitoredTask* tMonitoredRun
    WEFT_TLS_SYMBOL("weft_detail_monitored_run"){nullptr};

// The slow halves of the hooks below (monitored_task.cc), out of line and cold.
[[gnu::cold]] WEFT_NOINLINE TaskRecord* publishWaitSlow(TaskRecord* record,
                                                        const void* note) noexcept;
// The resumption of a wait that ended a monitored poll (`marked`: its record, marked): a
// poll of the task starts, the wait is withdrawn (as TaskRecord::withdrawWait), and the
// thread's running-root word names the task, marked.
[[gnu::cold]] WEFT_NOINLINE void resumeMonitored(TaskRecord* marked) noexcept;

// The hooks NotedAwaiter calls (coro/detail/lazy_promise.h), on the paths that publish
// and withdraw a root task's wait; all noexcept.
//
// A coroutine of the root task of `record` publishes a wait on `note` (TaskRecord::
// publishWait), and the task's run on this thread ends (running_root.h); if the run is a
// monitored poll of that task, so does the poll, and `record` is marked. The common case,
// the running-root word naming the task's record unmarked (so the task has waited before:
// only a resumption from a published wait stores that), is the note's store and the
// word's load, compare and store. Else the cold path: the task's first run (the word
// names its root, kFirstRun: this wait lists the task), the word names the task marked
// (its run is a monitored poll: TaskMonitor's hook runs), or the task runs inside
// another's run or outside any (the word names another task, or none: the thread's
// monitored poll, if there is one, is asked whether it is this task's, a poll that the
// nested runs hid from the word); it publishes the wait as publishWait does.
// `record` is the NotedAwaiter's, `root` its value (in a register).
[[gnu::always_inline]] inline void publishWaitAndLeaveRun(TaskRecord* root, const void* note,
                                                          TaskRecord*& record) noexcept {
  if (loadRunningRoot() == reinterpret_cast<std::uintptr_t>(root)) [[likely]] {
    root->publishNextWait(note);
    storeRunningRoot(0);
  } else {
    record = publishWaitSlow(root, note);
  }
}
// Whether the wait published in `record` (a NotedAwaiter's) ended a monitored poll: then
// its resumption is resumeMonitored's. For a task that is not monitored: a test of a bit
// of the pointer, which the caller has loaded anyway.
[[gnu::always_inline]] inline bool monitoredWait(const TaskRecord* record) noexcept {
  return (reinterpret_cast<std::uintptr_t>(record) & kMonitoredWait) != 0;
}

}  // namespace weft::detail
