#pragma once

#include <coroutine>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/misuse.h"
#include "weft/coro/detail/spin_lock.h"
#include "weft/coro/detail/wait_note.h"
#include "weft/coro/detail/waiter_queue.h"
#include "weft/executors/executor.h"

namespace weft::detail {

// One suspended waiter of Mutex, SharedMutex, Semaphore, Event, Latch or
// ConditionVariable. It is the awaiter itself, so it lives in the waiting coroutine's
// frame (or on the waiting fiber's stack): waiting never allocates.
struct SyncWaiter : WaiterNode {
  // Where it is in its primitive's queue; kCancelled: await_resume throws
  // OperationCancelled. Guarded by the primitive's queue lock.
  WaiterStatus status = WaiterStatus::kIdle;
  // Free for the primitive (SharedMutex: exclusive or shared).
  unsigned char kind = 0;
};

// The queue of a sync primitive's waiters. Not thread-safe: the primitive guards it with
// its SpinLock.
using WaiterQueue = WaiterList<SyncWaiter>;

// A SyncWaiter whose wait can be cancelled through the awaiting coroutine's (or fiber's)
// CancellationToken, by the protocol of every waiter (coro/detail/waiter_queue.h): step 1
// in await_suspend, after the lock-free fast path and before queueing (only waiting is
// cancellable); step 2 in the primitive's cancelWaiter (cancelSyncWaiter below); step 3
// in await_resume (finishWait).
// The resumption goes through resumeWaiter, which schedules the waiter on its executor
// when it has one, and await_suspend only queues (or declines): so each primitive's
// awaiter declares kResumesOnlyThroughExecutor (coro/awaitable_support.h).
class CancellableSyncWaiter : public SyncWaiter {
 protected:
  CancellableSyncWaiter(Executor* waiterExecutor, const CancellationToken* token) noexcept
      : token_(token) {
    executor = waiterExecutor;
  }

  // Step 1. Throws std::bad_alloc (the callback's block; CancellationCallback's
  // constructor throws nothing else for weft's callbacks, which capture one pointer),
  // before anything is queued.
  template <class OnCancel>
  void armCancellation(OnCancel&& onCancel) {
    if (token_ != nullptr && token_->canBeCancelled()) {
      callback_.emplace(*token_, std::forward<OnCancel>(onCancel));
    }
  }
  // Step 3, first half. noexcept: deregistration only unlinks (or waits).
  void disarmCancellation() noexcept { callback_.reset(); }
  // The end of a wait, in await_resume: disarms cancellation, forgets the handle (resumed:
  // nothing is left to withdraw in the destructor), and throws OperationCancelled if the
  // wait was cancelled.
  void finishWait() {
    disarmCancellation();
    handle = {};
    if (status == WaiterStatus::kCancelled) throw OperationCancelled();
  }

 private:
  const CancellationToken* token_;
  OutOfLineCancellationCallback callback_;
};

// The queueing step of await_suspend, under `lock` (the lock guarding `queue`): a waiter
// already cancelled (step 2 ran before it was queued) is declined; otherwise
// `mustWaitLocked()`, the primitive's own test (it may take what the waiter waits for, or
// mark the primitive as having waiters), says whether it waits. Returns true if the
// waiter was queued (kQueued: it will be resumed by a granter or its cancellation);
// false if it must not suspend (granted: kDone, too late to cancel; or cancelled).
// noexcept: `mustWaitLocked` must be (atomic operations on the primitive's word).
template <class MustWait>
bool enqueueSyncWaiter(SpinLock& lock, WaiterQueue& queue, SyncWaiter* waiter,
                       MustWait&& mustWaitLocked) noexcept {
  std::lock_guard guard(lock);
  if (waiter->status == WaiterStatus::kCancelled) return false;
  if (!mustWaitLocked()) {
    waiter->status = WaiterStatus::kDone;
    return false;
  }
  waiter->status = WaiterStatus::kQueued;
  queue.pushBack(waiter);
  return true;
}

// A primitive's cancelWaiter: step 2 of the protocol, also used to withdraw a waiter
// whose coroutine is destroyed while it waits. Under `lock`: a queued waiter leaves
// `queue` (cancelWaitLocked) and `afterRemovalLocked(granted)` updates the primitive's
// state (a waiters bit; waiters the removed one was blocking, moved into `granted`, which
// are resumed once the lock is released). True if the waiter was queued: the caller then
// owns its resumption. A waiter not yet queued is marked cancelled, so that it does not
// queue at all; a granted one is left alone. noexcept: called from cancellation
// callbacks and destructors; `afterRemovalLocked` must be (state updates), and resuming
// is (resumeWaiter).
template <class AfterRemoval>
bool cancelSyncWaiter(SpinLock& lock, WaiterQueue& queue, SyncWaiter* waiter,
                      AfterRemoval&& afterRemovalLocked) noexcept {
  WaiterQueue granted;
  {
    std::lock_guard guard(lock);
    if (!cancelWaitLocked(queue, waiter, waiter->status)) return false;
    afterRemovalLocked(granted);
  }
  resumeAll(granted);
  return true;
}

// The awaiter of every wait on Mutex, SharedMutex, Semaphore and Event (and, through
// Event, Latch): it tries the primitive without waiting, else registers for cancellation
// and queues; it withdraws itself if its coroutine is destroyed while it waits.
//
// `Op` names the operation: `Op::Primitive`; `Op::kKind` (stored in SyncWaiter::kind
// for the primitive); `Op::tryAcquire(primitive)`, the lock-free fast path; `Op::kName`,
// how task dumps name the wait, and `Op::kCall`, how a misuse report names it. The
// primitive supplies, to this awaiter (a friend), `enqueueWaiter(SyncWaiter*)` (its
// enqueueSyncWaiter) and `cancelWaiter(SyncWaiter*)` (its cancelSyncWaiter). `Result` is
// void, or a guard built with (primitive, std::adopt_lock) (ScopedLock, SharedLock,
// SemaphorePermit).
template <class Op, class Result>
class SyncWaitAwaiter : public CancellableSyncWaiter {
  using Primitive = typename Op::Primitive;

 public:
  SyncWaitAwaiter(Primitive& primitive, Executor* waiterExecutor,
                  const CancellationToken* token) noexcept
      : CancellableSyncWaiter(waiterExecutor, token), primitive_(primitive) {
    kind = Op::kKind;
  }
  // Resumed only through resumeWaiter (see CancellableSyncWaiter).
  static constexpr bool kResumesOnlyThroughExecutor = true;
  SyncWaitAwaiter(const SyncWaitAwaiter&) = delete;
  SyncWaitAwaiter& operator=(const SyncWaitAwaiter&) = delete;
  // Destroyed while suspended (its coroutine destroyed while waiting): leaves the queue.
  // Granted (or cancelled) but not yet resumed: the resumption is under way, and this
  // destruction is the caller's race (a message, then abort).
  ~SyncWaitAwaiter() {
    disarmCancellation();
    if (handle && !primitive_.cancelWaiter(this)) abortDestroyedWhileResuming(Op::kCall);
  }

  // Uncontended (free, or set): one atomic operation, and no suspension. noexcept: so is
  // every Op::tryAcquire (a compare-exchange or a load).
  bool await_ready() noexcept { return Op::tryAcquire(primitive_); }
  // Registers for cancellation, then queues (see CancellableSyncWaiter). Throws
  // std::bad_alloc from the registration, with nothing queued. The handle is stored
  // after the registration, so that the destructor of an await that threw has nothing
  // to withdraw; a callback running meanwhile finds the waiter not queued and only marks
  // it (it reads the handle only to resume a queued waiter).
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> awaiting) {
    armCancellation([this] {
      if (primitive_.cancelWaiter(this)) resumeWaiter(this);
    });
    setAwaiting(awaiting);
    return primitive_.enqueueWaiter(this);
  }
  // Throws OperationCancelled if the wait was cancelled (nothing is held then).
  Result await_resume() {
    finishWait();
    if constexpr (!std::is_void_v<Result>) return Result(primitive_, std::adopt_lock);
  }

  // For task dumps (coro/detail/wait_note.h).
  void describeWait(std::string& out) const { appendWait(out, Op::kName, &primitive_); }

 protected:
  Primitive& primitive_;
};

// The object `mutex.lock()`, `event.wait()`... return: an executor- and
// cancellation-aware awaitable. A weft coroutine (or a fiber's await) calls coAwait with
// its executor and cancellation token; any other coroutine gets operator co_await, with
// no executor (resumed inline) and no token. `Args` are what the awaiter is built from
// (the primitive, and for some an argument), followed by the executor and a pointer to
// the token (valid until the await completes; null for none).
template <class Awaiter, class... Args>
class [[nodiscard]] SyncOperation {
 public:
  explicit SyncOperation(Args... args) noexcept : args_(args...) {}

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const noexcept {
    return std::apply(
        [executor, &token](Args... args) { return Awaiter(args..., executor, &token); }, args_);
  }
  Awaiter coAwait(Executor* executor) const noexcept {
    return std::apply(
        [executor](Args... args) { return Awaiter(args..., executor, nullptr); }, args_);
  }
  Awaiter operator co_await() const noexcept { return coAwait(nullptr); }

 private:
  std::tuple<Args...> args_;
};

}  // namespace weft::detail
