#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "weft/coro/detail/config.h"
#include "weft/coro/detail/registry_slot.h"
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

// The record whose poll runs on the calling thread now (innermost), or null. Only its
// thread reads or writes it.
#if WEFT_INLINE_TLS_ADDRESS
[[gnu::used, gnu::tls_model("initial-exec")]] inline constinit thread_local MonitoredTask*
    tMonitoredRun asm("weft_detail_monitored_run"){nullptr};
#else
inline constinit thread_local MonitoredTask* tMonitoredRun{nullptr};
#endif

// The calling thread's tMonitoredRun. Read in a coroutine's body, which can continue on
// another thread after a co_await: the address is computed afresh at each call, as
// localRunningRoot() does (running_root.h).
#if WEFT_INLINE_TLS_ADDRESS
inline MonitoredTask* localMonitoredRun() noexcept {
  MonitoredTask** word;
#if defined(__x86_64__)
  asm volatile(
      "movq %%fs:0, %0\n\t"
      "addq weft_detail_monitored_run@gottpoff(%%rip), %0"
      : "=r"(word));
#else  // aarch64
  void* offset;
  asm volatile(
      "mrs %0, tpidr_el0\n\t"
      "adrp %1, :gottprel:weft_detail_monitored_run\n\t"
      "ldr %1, [%1, #:gottprel_lo12:weft_detail_monitored_run]\n\t"
      "add %0, %0, %1"
      : "=r"(word), "=r"(offset));
#endif
  return *word;
}
#else
WEFT_OPAQUE_CALL inline MonitoredTask* localMonitoredRun() noexcept { return tMonitoredRun; }
#endif

// The slow halves of the hooks below (monitored_task.cc), out of line and cold.
[[gnu::cold]] WEFT_NOINLINE TaskRecord* suspendMonitored(MonitoredTask* run,
                                                           TaskRecord* root) noexcept;
[[gnu::cold]] WEFT_NOINLINE TaskRecord* resumeMonitored(TaskRecord* marked) noexcept;

// The hooks NotedAwaiter calls (coro/detail/lazy_promise.h), on the paths that publish
// and withdraw a root task's wait; both noexcept.
//
// A coroutine of the root task of `record` publishes a wait: if a monitored poll runs on
// this thread and is that task's, it ends, and `record` is marked. For a task that is not
// monitored: a thread-local load and a test (null unless a monitored task runs here).
[[gnu::always_inline]] inline void noteMonitoredSuspend(TaskRecord*& record) noexcept {
  if (MonitoredTask* run = localMonitoredRun(); run != nullptr) [[unlikely]]
    record = suspendMonitored(run, record);
}
// That wait is withdrawn (the coroutine resumes): if `record` is marked, a poll of the
// monitored task starts, and `record` is unmarked. For a task that is not monitored: a test
// of a bit of the pointer, which the caller has loaded anyway.
[[gnu::always_inline]] inline void noteMonitoredResume(TaskRecord*& record) noexcept {
  if ((reinterpret_cast<std::uintptr_t>(record) & kMonitoredWait) != 0) [[unlikely]]
    record = resumeMonitored(record);
}

}  // namespace weft::detail
