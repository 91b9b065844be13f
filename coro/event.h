#pragma once

#include <atomic>
#include <coroutine>
#include <mutex>

#include "weft/coro/detail/spin_lock.h"
#include "weft/coro/detail/sync_waiter.h"
#include "weft/executors/executor.h"

namespace weft {

class Event;

namespace detail {

// `co_await event.wait()` (and `co_await latch.wait()`), for SyncWaitAwaiter.
struct EventWaitOp {
  using Primitive = Event;
  static constexpr unsigned char kKind = 0;
  static constexpr const char* kName = "Event::wait";
  static constexpr const char* kCall = "Event::wait()/Latch::wait()";
  static inline bool tryAcquire(Event& event) noexcept;
};

// The awaiter of `co_await event.wait()`. Throws OperationCancelled if the wait was
// cancelled before the event was set.
using EventWaitAwaiter = SyncWaitAwaiter<EventWaitOp, void>;

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
  // What wait() returns (an awaitable).
  using WaitOperation = detail::SyncOperation<detail::EventWaitAwaiter, Event&>;

  explicit Event(bool initiallySet = false) noexcept : set_(initiallySet) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (hasWaiters()) {
      detail::abortMisuse("Event destroyed while coroutines are waiting on it");
    }
  }

  // Awaitable: completes once the event is set (at once if it is set now).
  WaitOperation wait() noexcept {
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
      woken.forEach([](detail::SyncWaiter* w) { w->status = detail::WaiterStatus::kDone; });
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
  template <class, class>
  friend class detail::SyncWaitAwaiter;
  friend class Latch;

  bool hasWaiters() noexcept {
    std::lock_guard guard(queueLock_);
    return !waiters_.empty();
  }

  // await_suspend's queueing step (detail::enqueueSyncWaiter): queues `waiter` unless
  // the event is set (then returns false: do not suspend). A waiter already cancelled is
  // not queued either (returns false).
  bool enqueueWaiter(detail::SyncWaiter* waiter) noexcept {
    return detail::enqueueSyncWaiter(queueLock_, waiters_, waiter, [this] {
      // relaxed: set_ is written under queueLock_, which we hold.
      return !set_.load(std::memory_order_relaxed);
    });
  }

  // Takes a queued waiter out (detail::cancelSyncWaiter: cancellation, or its coroutine
  // destroyed while waiting). True if it was queued: the caller then owns its resumption.
  bool cancelWaiter(detail::SyncWaiter* waiter) noexcept {
    return detail::cancelSyncWaiter(queueLock_, waiters_, waiter, [](detail::WaiterQueue&) {});
  }

  std::atomic<bool> set_;
  detail::SpinLock queueLock_;
  detail::WaiterQueue waiters_;  // guarded by queueLock_
};

bool detail::EventWaitOp::tryAcquire(Event& event) noexcept { return event.isSet(); }

}  // namespace weft
