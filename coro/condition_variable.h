#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <mutex>
#include <type_traits>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/spin_lock.h"
#include "weft/coro/detail/sync_waiter.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/executors/executor.h"

namespace weft {

class ConditionVariable;

namespace detail {

// The awaiter of `co_await cv.wait(mutex)`. It waits in two queues, one after the other:
// the condition variable's until notified, then the mutex's until it holds the lock
// again ("wait morphing": a notified waiter is moved straight into the mutex queue
// rather than woken only to block on the mutex).
//
// Cancellation (see CancellableSyncWaiter) applies to the first queue only: a waiter
// cancelled while waiting for a notification leaves the condition variable's queue and
// then, like a notified one, reacquires the mutex before it resumes (with
// OperationCancelled); once notified, it is no longer cancellable.
class ConditionVariableWaitAwaiter : public CancellableSyncWaiter {
 public:
  ConditionVariableWaitAwaiter(ConditionVariable& cv, Mutex& mutex, Executor* waiterExecutor,
                               const CancellationToken* token) noexcept
      : CancellableSyncWaiter(waiterExecutor, token), cv_(cv), mutex_(mutex) {}
  // Resumed only through resumeWaiter, also when the mutex is handed back to it (see
  // CancellableSyncWaiter); await_suspend's unlock may schedule other waiters.
  static constexpr bool kResumesOnlyThroughExecutor = true;
  ConditionVariableWaitAwaiter(const ConditionVariableWaitAwaiter&) = delete;
  ConditionVariableWaitAwaiter& operator=(const ConditionVariableWaitAwaiter&) = delete;
  // Destroyed while suspended (its coroutine destroyed while waiting): leaves whichever
  // queue it is in.
  inline ~ConditionVariableWaitAwaiter();

  bool await_ready() const noexcept { return false; }
  // Registers for cancellation, queues, then releases the mutex.
  inline bool await_suspend(std::coroutine_handle<> awaiting);
  // Throws OperationCancelled (with the mutex held) if the wait was cancelled.
  void await_resume() {
    disarmCancellation();
    handle = {};
    if (cvStatus_ == WaiterStatus::kCancelled) throw OperationCancelled();
  }

  // For task dumps (coro/detail/wait_note.h).
  void describeWait(std::string& out) const { appendWait(out, "ConditionVariable::wait", &cv_); }

 private:
  friend class weft::ConditionVariable;

  ConditionVariable& cv_;
  Mutex& mutex_;
  // Where the waiter is with respect to the condition variable's queue, kCancelled if its
  // wait there was cancelled (guarded by the condition variable's queue lock;
  // SyncWaiter::status belongs to the mutex queue).
  WaiterStatus cvStatus_ = WaiterStatus::kIdle;
};

// The awaiter of `co_await cv.wait(mutex, predicate)`: checks the predicate first (no
// frame, no suspension if it holds), else runs a small loop Lazy, created here rather
// than by the caller (a fiber may change threads at every await, so nothing it creates
// inline should depend on the thread it started on), that waits until the predicate
// holds. The Lazy gets the executor and token this await was given.
template <class Predicate>
class ConditionVariablePredicateAwaiter {
 public:
  ConditionVariablePredicateAwaiter(ConditionVariable& cv, Mutex& mutex, Predicate&& predicate,
                                    Executor* waiterExecutor,
                                    const CancellationToken* token) noexcept
      : cv_(cv),
        mutex_(mutex),
        predicate_(std::move(predicate)),
        executor_(waiterExecutor),
        token_(token != nullptr ? token : &kNoCancellationToken) {}

  // The predicate already holds: done. Rethrows what it throws.
  bool await_ready() { return static_cast<bool>(predicate_()); }
  // Throws std::bad_alloc if the loop's frame cannot be allocated (nothing is waiting).
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> awaiting);
  // Rethrows what the loop threw (OperationCancelled, the predicate's exception).
  void await_resume() {
    if (loop_.valid()) LazyAccess::handle(loop_).promise().result_.value();
  }

  // For task dumps (coro/detail/wait_note.h).
  void describeWait(std::string& out) const {
    appendWait(out, "ConditionVariable::wait(predicate)", &cv_);
  }

 private:
  ConditionVariable& cv_;
  Mutex& mutex_;
  Predicate predicate_;
  Executor* executor_;
  const CancellationToken* token_;
  Lazy<> loop_;
};

// The object `cv.wait(mutex, predicate)` returns; awaitable once, as an rvalue.
template <class Predicate>
class [[nodiscard]] ConditionVariablePredicateWait {
 public:
  ConditionVariablePredicateWait(ConditionVariable& cv, Mutex& mutex, Predicate predicate)
      : cv_(cv), mutex_(mutex), predicate_(std::move(predicate)) {}

  ConditionVariablePredicateAwaiter<Predicate> coAwait(Executor* executor,
                                                       const CancellationToken& token) && {
    return {cv_, mutex_, std::move(predicate_), executor, &token};
  }
  ConditionVariablePredicateAwaiter<Predicate> coAwait(Executor* executor) && {
    return {cv_, mutex_, std::move(predicate_), executor, nullptr};
  }
  ConditionVariablePredicateAwaiter<Predicate> operator co_await() && {
    return {cv_, mutex_, std::move(predicate_), nullptr, nullptr};
  }

 private:
  ConditionVariable& cv_;
  Mutex& mutex_;
  Predicate predicate_;
};

}  // namespace detail

// ConditionVariable: waits for a condition guarded by a weft::Mutex, for coroutines and
// fibers.
//
// Semantics:
//  - `co_await cv.wait(mutex)`: atomically releases `mutex` (which the caller holds) and
//    suspends until notified; it returns holding `mutex` again. Like std's, it may
//    return without the condition being true (another waiter got there first): test it
//    in a loop, or use the predicate form.
//  - `co_await cv.wait(mutex, predicate)`: `while (!predicate()) co_await cv.wait(mutex);`
//    `predicate` runs with the mutex held, on the waiting coroutine or fiber. If it
//    holds at once nothing is allocated; otherwise the loop runs in one coroutine frame
//    from the recycling allocator, with the awaiter's executor and cancellation token.
//  - notifyOne() wakes the oldest waiter, notifyAll() every waiter (FIFO). A notified
//    waiter is moved straight into the mutex's queue (or handed the mutex if it is free)
//    and is resumed once it holds the mutex: a waiter that belongs to an executor is
//    scheduled on it, one with no executor is resumed inline on the thread that grants
//    it the mutex (through a per-thread trampoline, so nothing nests deeply).
//  - Notifying does not require holding the mutex; a notification with no waiter is lost
//    (as with std::condition_variable): change the state under the mutex, then notify.
//
// Preconditions: the caller of wait() holds `mutex` (a wait on an unlocked Mutex prints a
// message and aborts; holding it from another coroutine cannot be detected); the
// ConditionVariable and the Mutex outlive the waiters.
// Errors: a wait is cancellable until it is notified: when the waiter's
// CancellationToken is cancelled, it leaves the queue, reacquires the mutex and the
// co_await throws OperationCancelled, with the mutex held (as on every return). The
// predicate form rethrows what the predicate throws (with the mutex held). Destroying a
// ConditionVariable that coroutines wait on prints a message and aborts. Destroying a
// coroutine suspended in wait() withdraws it and counts the wait as having reacquired
// the mutex (taken if free, else its release owed: see Mutex::takeForAbandonedWaiter), so
// a ScopedLock in its frame releases what it believes it holds and no other owner loses
// the mutex.
// Thread safety: every member may be called concurrently from any thread.
//
// Example:
//   weft::ScopedLock lock = co_await mutex.scopedLock();
//   co_await cv.wait(mutex, [&] { return !queue.empty(); });
//   auto item = queue.pop();
class ConditionVariable {
 public:
  // What the two wait()s return (awaitables).
  using WaitOperation =
      detail::SyncOperation<detail::ConditionVariableWaitAwaiter, ConditionVariable&, Mutex&>;
  template <class Predicate>
  using PredicateWaitOperation = detail::ConditionVariablePredicateWait<Predicate>;

  ConditionVariable() noexcept = default;
  ConditionVariable(const ConditionVariable&) = delete;
  ConditionVariable& operator=(const ConditionVariable&) = delete;
  ~ConditionVariable() {
    std::lock_guard guard(queueLock_);
    if (!waiters_.empty()) {
      detail::abortMisuse("ConditionVariable destroyed while coroutines are waiting on it");
    }
  }

  // Awaitable: releases `mutex`, waits for a notification, reacquires `mutex`.
  WaitOperation wait(Mutex& mutex) noexcept { return WaitOperation(*this, mutex); }

  // Awaitable: waits until `predicate()` is true (checked first, then after every
  // wake-up), with `mutex` held whenever it is checked and on return. Await it as an
  // rvalue, once.
  template <class Predicate>
    requires std::predicate<Predicate&>
  PredicateWaitOperation<Predicate> wait(Mutex& mutex, Predicate predicate) {
    return detail::ConditionVariablePredicateWait<Predicate>(*this, mutex, std::move(predicate));
  }

  // Wakes the oldest waiter, if any (it resumes once it holds its mutex).
  // noexcept (both notifies): see detail::resumeWaiter.
  void notifyOne() noexcept {
    detail::SyncWaiter* waiter;
    {
      std::lock_guard guard(queueLock_);
      waiter = waiters_.popFront();
      if (waiter == nullptr) return;
      static_cast<detail::ConditionVariableWaitAwaiter*>(waiter)->cvStatus_ =
          detail::WaiterStatus::kDone;
    }
    reacquire(waiter);
  }

  // Wakes every waiter, oldest first.
  void notifyAll() noexcept {
    detail::WaiterQueue woken;
    {
      std::lock_guard guard(queueLock_);
      woken.append(std::move(waiters_));
      woken.forEach([](detail::SyncWaiter* w) {
        static_cast<detail::ConditionVariableWaitAwaiter*>(w)->cvStatus_ =
            detail::WaiterStatus::kDone;
      });
    }
    while (detail::SyncWaiter* waiter = woken.popFront()) reacquire(waiter);
  }

 private:
  friend class detail::ConditionVariableWaitAwaiter;
  template <class>
  friend class detail::ConditionVariablePredicateAwaiter;

  // The loop of the predicate wait; `predicate` lives in the awaiter, which outlives it.
  template <class Predicate>
  Lazy<> waitLoop(Mutex& mutex, Predicate& predicate) {
    do {
      co_await wait(mutex);
    } while (!predicate());
  }

  // Moves a waiter that left our queue into its mutex's queue (or hands it the mutex).
  static void reacquire(detail::SyncWaiter* waiter) noexcept {
    static_cast<detail::ConditionVariableWaitAwaiter*>(waiter)->mutex_.lockForWaiter(waiter);
  }

  // await_suspend: queue `waiter`, then release its mutex. Returns false (mutex still
  // held, nothing queued) if the wait was cancelled before it was queued.
  bool enqueueAndUnlock(detail::ConditionVariableWaitAwaiter* waiter) noexcept {
    Mutex& mutex = waiter->mutex_;
    // relaxed: a diagnostic read; the caller holds the mutex, so the word is stable
    // enough to tell "locked" from "unlocked".
    if (mutex.state_.load(std::memory_order_relaxed) == Mutex::kUnlocked) {
      detail::abortMisuse("ConditionVariable::wait() called without holding the Mutex");
    }
    {
      std::lock_guard guard(queueLock_);
      if (waiter->cvStatus_ == detail::WaiterStatus::kCancelled) return false;
      waiter->cvStatus_ = detail::WaiterStatus::kQueued;
      waiters_.pushBack(waiter);
    }
    // From here a notifier may move the waiter into the mutex queue; our unlock then
    // hands the mutex to the oldest mutex waiter, possibly this one. Nothing touches
    // `waiter` after this call.
    mutex.unlock();
    return true;
  }

  // The waiter's cancellation callback: a waiter still waiting for a notification
  // leaves our queue and goes to reacquire its mutex; one not queued yet is marked so it
  // does not queue; a notified one is left alone.
  void cancelWait(detail::ConditionVariableWaitAwaiter* waiter) noexcept {
    {
      std::lock_guard guard(queueLock_);
      if (!detail::cancelWaitLocked<detail::SyncWaiter>(waiters_, waiter, waiter->cvStatus_)) {
        return;
      }
    }
    reacquire(waiter);
  }

  // The waiter's coroutine is destroyed while suspended: take it out of whichever queue
  // holds it (ours, or its mutex's after a notification), then count the wait as having
  // reacquired the mutex (Mutex::takeForAbandonedWaiter), since the code around the wait
  // believes it holds the mutex (its ScopedLock unlocks it next). A waiter in neither
  // queue has been handed the mutex, or is being moved to it by a notifier: its
  // resumption is under way, and destroying it is the caller's race (reported, fatal).
  void abandon(detail::ConditionVariableWaitAwaiter* waiter) noexcept {
    bool leftOurQueue = false;
    {
      std::lock_guard guard(queueLock_);
      if (waiter->cvStatus_ == detail::WaiterStatus::kQueued) {
        waiters_.remove(waiter);
        waiter->cvStatus_ = detail::WaiterStatus::kDone;
        leftOurQueue = true;
      }
    }
    if (!leftOurQueue && !waiter->mutex_.cancelWaiter(waiter)) {
      weft::abortDestroyedWhileResuming("ConditionVariable::wait()");
    }
    waiter->mutex_.takeForAbandonedWaiter();
  }

  detail::SpinLock queueLock_;
  detail::WaiterQueue waiters_;  // guarded by queueLock_
};

namespace detail {

ConditionVariableWaitAwaiter::~ConditionVariableWaitAwaiter() {
  disarmCancellation();
  if (handle) cv_.abandon(this);
}
bool ConditionVariableWaitAwaiter::await_suspend(std::coroutine_handle<> awaiting) {
  // The handle after the registration, which may throw: as in SyncWaitAwaiter.
  armCancellation([this] { cv_.cancelWait(this); });
  handle = awaiting;
  return cv_.enqueueAndUnlock(this);
}

template <class Predicate>
template <class Promise>
std::coroutine_handle<> ConditionVariablePredicateAwaiter<Predicate>::await_suspend(
    std::coroutine_handle<Promise> awaiting) {
  loop_ = cv_.waitLoop(mutex_, predicate_);
  std::coroutine_handle<LazyPromise<void>> loop = LazyAccess::handle(loop_);
  loop.promise().setContinuation(awaiting);
  loop.promise().setAsyncParent(asyncParentOf(awaiting));
  loop.promise().setExecutor(executor_);
  loop.promise().setCancellationToken(token_);
  // Symmetric transfer into the loop; it transfers back to `awaiting` when it finishes.
  return loop;
}

}  // namespace detail
}  // namespace weft
