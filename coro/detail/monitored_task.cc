#include "weft/coro/detail/monitored_task.h"

#include <chrono>
#include <utility>

#include "weft/coro/detail/lazy_promise.h"

namespace weft::detail {

namespace {

// steady_clock in nanoseconds (monitored_task.h says why not the coarse clock).
std::int64_t nowNanos() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint64_t elapsed(std::int64_t from, std::int64_t to) noexcept {
  return to > from ? static_cast<std::uint64_t>(to - from) : 0;
}

// Relaxed adds and loads throughout: each counter is a number on its own, read by
// cumulative() without ordering against anything else.
void add(std::atomic<std::uint64_t>& counter, std::uint64_t value) noexcept {
  counter.fetch_add(value, std::memory_order_relaxed);
}

void raise(std::atomic<std::uint64_t>& maximum, std::uint64_t value) noexcept {
  std::uint64_t seen = maximum.load(std::memory_order_relaxed);
  while (value > seen && !maximum.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

TaskMetrics TaskMonitorState::read() const noexcept {
  TaskMetrics m;
  constexpr auto r = std::memory_order_relaxed;
  m.instrumentedCount = instrumentedCount.load(r);
  m.droppedCount = droppedCount.load(r);
  m.firstPollCount = firstPollCount.load(r);
  m.totalFirstPollDelayNanos = totalFirstPollDelayNanos.load(r);
  m.maxFirstPollDelayNanos = maxFirstPollDelayNanos.load(r);
  m.totalPollCount = totalPollCount.load(r);
  m.totalPollDurationNanos = totalPollDurationNanos.load(r);
  m.totalSlowPollCount = totalSlowPollCount.load(r);
  m.totalSlowPollDurationNanos = totalSlowPollDurationNanos.load(r);
  m.slowPollThresholdNanos = slowPollThresholdNanos;
  // One scheduled wait per first run (task_metrics.h says why).
  m.totalScheduledCount = m.firstPollCount;
  m.totalScheduledDurationNanos = m.totalFirstPollDelayNanos;
  m.totalIdledCount = totalIdledCount.load(r);
  m.totalIdleDurationNanos = totalIdleDurationNanos.load(r);
  return m;
}

MonitoredTask::MonitoredTask(std::shared_ptr<TaskMonitorState> monitor) noexcept
    : monitor_(std::move(monitor)), instrumentedAt_(nowNanos()) {
  add(monitor_->instrumentedCount, 1);
}

MonitoredTask::~MonitoredTask() {
  // monitoredBody's end has ended the last poll (lastPoll); a frame destroyed while it
  // waits has no poll running.
  add(monitor_->droppedCount, 1);
}

void MonitoredTask::attach(LazyPromiseBase& promise) noexcept {
  promise_ = &promise;
  promise.setMonitorRecord(this);
}

void MonitoredTask::firstPoll() noexcept {
  const std::int64_t now = nowNanos();
  const std::uint64_t delay = elapsed(instrumentedAt_, now);
  add(monitor_->firstPollCount, 1);
  add(monitor_->totalFirstPollDelayNanos, delay);
  raise(monitor_->maxFirstPollDelayNanos, delay);
#if WEFT_TASK_TRACKING
  // Polls are measured when monitoredBody's Lazy is the root of its task: this is the
  // task's first run, whose running-root word names it as the root (stored where the
  // task was started, just before this: running_root.h), and its parent word still holds
  // this record (an await of it would have replaced both).
  TaskRecord* record = promise_ != nullptr ? promise_->rootRecord() : nullptr;
  const auto named = reinterpret_cast<std::uintptr_t>(promise_) | kFirstRun;
  if (record != nullptr && loadRunningRoot() == named && promise_->monitorRecord() == this) {
    taskRecord_ = record;
    startPoll(now);
    // The task's run is a poll from here: the running-root word names it marked, so that
    // its next wait takes the hook's cold path (publishWaitAndLeaveRun, monitored_task.h).
    storeRunningRoot(named | kMonitoredRun);
  }
#endif
}

void MonitoredTask::lastPoll() noexcept {
  if (running_) endPoll(nowNanos());
}

void MonitoredTask::startPoll(std::int64_t now) noexcept {
  mark_ = now;
  running_ = true;
  outer_ = std::exchange(tMonitoredRun, this);
}

void MonitoredTask::endPoll(std::int64_t now) noexcept {
  const std::uint64_t duration = elapsed(mark_, now);
  add(monitor_->totalPollCount, 1);
  add(monitor_->totalPollDurationNanos, duration);
  if (duration >= monitor_->slowPollThresholdNanos) {
    add(monitor_->totalSlowPollCount, 1);
    add(monitor_->totalSlowPollDurationNanos, duration);
  }
  mark_ = now;
  running_ = false;
  // Runs nest (monitored_task.h): this one is the thread's innermost. Every wait of a
  // root task's coroutines is published, so its run cannot move to another thread
  // unseen; should one ever (an await that bypasses await_transform), the word of the
  // thread it moved to is left alone rather than set to the first thread's.
  MonitoredTask* outer = std::exchange(outer_, nullptr);
  if (tMonitoredRun == this) [[likely]]
    tMonitoredRun = outer;
}

TaskRecord* MonitoredTask::suspend(TaskRecord* root) noexcept {
  if (root != taskRecord_) return root;  // another task's wait, inside this one's poll
  endPoll(nowNanos());
  return reinterpret_cast<TaskRecord*>(reinterpret_cast<std::uintptr_t>(root) | kMonitoredWait);
}

void MonitoredTask::resume() noexcept {
  const std::int64_t now = nowNanos();
  add(monitor_->totalIdledCount, 1);
  add(monitor_->totalIdleDurationNanos, elapsed(mark_, now));
  startPoll(now);
}

TaskRecord* publishWaitSlow(TaskRecord* record, const void* note) noexcept {
  // Its first wait lists the task (the word may not tell: a run nested in its first
  // run cleared it).
  record->publishWait(note);
  // The word names the task, by its root in its first run, or marked: its run ends here.
  // (A promise it names is alive: the word never names a finished task's.)
  const std::uintptr_t word = loadRunningRoot();
  const std::uintptr_t named = word & ~kRunTags;
  if ((word & kFirstRun) != 0
          ? reinterpret_cast<const LazyPromiseBase*>(named)->rootRecord() == record
          : named == reinterpret_cast<std::uintptr_t>(record)) {
    storeRunningRoot(0);
  }
  if (MonitoredTask* run = tMonitoredRun; run != nullptr) return run->suspend(record);
  return record;
}

void resumeMonitored(TaskRecord* marked) noexcept {
  auto* record =
      reinterpret_cast<TaskRecord*>(reinterpret_cast<std::uintptr_t>(marked) & ~kMonitoredWait);
  // The record is the task's until it ends; its root was set where the task was started,
  // which happened before this resumption.
  const auto* root = static_cast<const LazyPromiseBase*>(record->root);
  root->monitorRecord()->resume();
  record->withdrawWait();
  // Its run is a poll again (running_root.h): marked, as the wait's record.
  enterRootRun(marked);
}

}  // namespace weft::detail
