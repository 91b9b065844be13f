#pragma once

#include <atomic>
#include <coroutine>
#include <mutex>

#include "coro/detail/spin_lock.h"
#include "coro/detail/sync_waiter.h"
#include "executors/executor.h"

namespace weft {

class Event;

namespace detail {

// The awaiter of `co_await event.wait()`.
class EventWaitAwaiter : public CancellableSyncWaiter {
 public:
  EventWaitAwaiter(Event& event, Executor* waiterExecutor,
                   const CancellationToken* token) noexcept
      : CancellableSyncWaiter(waiterExecutor, token), event_(event) {}
  // Resumed only through resumeWaiter (see CancellableSyncWaiter).
  static constexpr bool kResumesOnlyThroughExecutor = true;
  EventWaitAwaiter(const EventWaitAwaiter&) = delete;
  EventWaitAwaiter& operator=(const EventWaitAwaiter&) = delete;
  // Destroyed while suspended (its coroutine destroyed while waiting): leaves the queue.
  inline ~EventWaitAwaiter();

  // Already set: one atomic load, no suspension.
  inline bool await_ready() const noexcept;
  // Registers for cancellation, then queues (see CancellableSyncWaiter).
  inline bool await_suspend(std::coroutine_handle<> awaiting);
  // Throws OperationCancelled if the wait was cancelled before the event was set.
  void await_resume() {
    finishWait();
  }

  // For task dumps (coro/detail/wait_note.h).
  void describeWait(std::string& out) const { appendWait(out, "Event::wait", &event_); }

 private:
  Event& event_;
};

}  // namespace detail

// Event: a manual-reset event. Coroutines and fibers wait until it is set; set() wakes
// every waiter, and it stays set (later waits complete at once) until reset().
//
// Semantics:
//  - set() resumes every waiter in the order they started waiting; a waiter that belongs
//    to an executor is scheduled on it, one with no executor is resumed inline on the
//    thread calling set() (through a per-thread trampoline: a long list of waiters never
//    nests on the stack). set() on a set Event does nothing.
//  - reset() makes it unset again; it does not affect waiters already woken.
//  - Everything written before set() is visible to a waiter after its wait.
//
// Preconditions: the Event outlives its waiters.
// Errors: a wait is cancellable: when the waiter's CancellationToken is cancelled before
// the event is set, it leaves the queue and the co_await throws OperationCancelled (a
// set Event completes the wait even if cancellation was requested). Destroying an Event
// that coroutines wait on prints a message and aborts.
// Thread safety: every member may be called concurrently from any thread.
//
// Example:
//   weft::Event ready;
//   weft::Lazy<> consumer() { co_await ready.wait(); use(data); }
//   // elsewhere: data = load(); ready.set();
class Event {
 public:
  explicit Event(bool initiallySet = false) noexcept : set_(initiallySet) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (hasWaiters()) {
      detail::abortSyncMisuse("Event destroyed while coroutines are waiting on it");
    }
  }

  // Awaitable: completes once the event is set (at once if it is set now).
  detail::SyncOperation<detail::EventWaitAwaiter, Event&> wait() noexcept {
    return detail::SyncOperation<detail::EventWaitAwaiter, Event&>(*this);
  }

  // acquire: a caller that sees `true` also sees what was written before set().
  bool isSet() const noexcept { return set_.load(std::memory_order_acquire); }

  // Sets the event and resumes every waiter (see the class comment for where).
  // noexcept: resumption cannot fail (see detail::resumeWaiter).
  void set() noexcept {
    detail::WaiterQueue woken;
    {
      std::lock_guard guard(queueLock_);
      // release: publishes what the setter wrote to waiters that check isSet() without
      // the lock. (Queued waiters are published by queueLock_ and their resumption.)
      set_.store(true, std::memory_order_release);
      woken.append(std::move(waiters_));
      for (detail::SyncWaiter* w = woken.front(); w != nullptr; w = w->next) {
        w->phase = detail::WaitPhase::kDone;
      }
    }
    detail::resumeAll(woken);
  }

  // Unsets the event: later waits suspend until the next set().
  void reset() noexcept {
    // relaxed: unsetting publishes nothing; waiters decide under queueLock_ whether to
    // queue, and set() happens-before or after this on the same atomic either way.
    set_.store(false, std::memory_order_relaxed);
  }

 private:
  friend class detail::EventWaitAwaiter;
  friend class Latch;

  bool hasWaiters() noexcept {
    std::lock_guard guard(queueLock_);
    return !waiters_.empty();
  }

  // Queues `waiter` unless the event is set (then returns false: do not suspend).
  // A waiter already cancelled is not queued either (returns false).
  bool enqueue(detail::SyncWaiter* waiter) noexcept {
    std::lock_guard guard(queueLock_);
    if (waiter->cancelled) return false;
    // relaxed: set_ is written under queueLock_, which we hold.
    if (set_.load(std::memory_order_relaxed)) {
      waiter->phase = detail::WaitPhase::kDone;  // completed: too late to cancel
      return false;
    }
    waiter->phase = detail::WaitPhase::kQueued;
    waiters_.pushBack(waiter);
    return true;
  }

  // Takes a queued waiter out (cancellation, or its coroutine destroyed while waiting).
  // True if it was queued: the caller then owns its resumption. A waiter not yet queued
  // is marked cancelled, so that it does not queue at all.
  bool cancelWaiter(detail::SyncWaiter* waiter) noexcept {
    std::lock_guard guard(queueLock_);
    if (waiter->phase == detail::WaitPhase::kDone) return false;
    waiter->cancelled = true;
    if (waiter->phase == detail::WaitPhase::kNotQueued) return false;
    waiter->phase = detail::WaitPhase::kDone;
    waiters_.remove(waiter);
    return true;
  }

  std::atomic<bool> set_;
  detail::SpinLock queueLock_;
  detail::WaiterQueue waiters_;  // guarded by queueLock_
};

namespace detail {

EventWaitAwaiter::~EventWaitAwaiter() {
  disarmCancellation();
  // Still queued: leaves the queue. Granted (or cancelled) but not yet resumed: the
  // resumption is under way, and this destruction is the caller's race.
  if (handle && !event_.cancelWaiter(this)) {
    abortDestroyedWhileResuming("Event::wait()/Latch::wait()");
  }
}
bool EventWaitAwaiter::await_ready() const noexcept { return event_.isSet(); }
bool EventWaitAwaiter::await_suspend(std::coroutine_handle<> awaiting) {
  handle = awaiting;
  armCancellation([this] {
    if (event_.cancelWaiter(this)) resumeWaiter(this);
  });
  return event_.enqueue(this);
}

}  // namespace detail
}  // namespace weft
