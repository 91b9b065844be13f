#pragma once

#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <tuple>
#include <utility>

#include "coro/cancellation.h"
#include "coro/detail/via_awaiter.h"
#include "executors/executor.h"

namespace weft::detail {

// Where a waiter of a sync primitive is in its wait. Guarded by the primitive's queue
// lock.
enum class WaitPhase : unsigned char {
  kNotQueued,  // not yet in the queue (await_suspend has not enqueued it)
  kQueued,     // in the primitive's waiter queue
  kDone,       // taken out of the queue: granted, or cancelled; about to be resumed
};

// One suspended waiter of Mutex, SharedMutex, Semaphore, Event, Latch or
// ConditionVariable. It is the awaiter itself, so it lives in the waiting coroutine's
// frame (or on the waiting fiber's stack): waiting never allocates.
struct SyncWaiter {
  SyncWaiter* prev = nullptr;
  SyncWaiter* next = nullptr;
  // What to resume, and the executor to resume it through (nullptr: resumed inline).
  std::coroutine_handle<> handle;
  Executor* executor = nullptr;
  WaitPhase phase = WaitPhase::kNotQueued;
  // The wait ended by cancellation: await_resume throws OperationCancelled.
  bool cancelled = false;
  // Free for the primitive (SharedMutex: exclusive or shared).
  unsigned char kind = 0;
};

// A SyncWaiter whose wait can be cancelled through the awaiting coroutine's (or fiber's)
// CancellationToken.
//
// The protocol, shared by every primitive (each supplies cancelWaiter(), which takes a
// waiter out of its queue under the queue lock):
//  1. await_suspend registers a CancellationCallback (only if the token can be
//     cancelled: no cost otherwise) BEFORE queueing. If cancellation was already
//     requested the callback runs right there.
//  2. The callback calls cancelWaiter(): under the queue lock, a queued waiter is removed
//     and marked cancelled (the callback then resumes it); a waiter not queued yet is
//     only marked cancelled, and the queueing step, under the same lock, sees the mark
//     and does not suspend; a waiter already granted (phase kDone) is left alone: the
//     wait completed before the request and completes normally.
//  3. await_resume first deregisters the callback (waiting for it if it is running on
//     another thread), so the cancelled mark is stable when it is read, then throws
//     OperationCancelled if it is set.
// Whoever takes the waiter out of the queue (a granter or the canceller) owns its single
// resumption: no lost wake-up, no double resume.
// That resumption goes through resumeWaiter, which schedules the waiter on its executor
// when it has one, and await_suspend only queues (or declines): so each primitive's
// awaiter declares kResumesOnlyThroughExecutor, and a fiber on ThreadPool(1) may act on
// its park before it switches out (stackful/detail/fiber_park.h).
class CancellableSyncWaiter : public SyncWaiter {
 protected:
  CancellableSyncWaiter(Executor* waiterExecutor, const CancellationToken* token) noexcept
      : token_(token) {
    executor = waiterExecutor;
  }

  // Step 1. Throws what CancellationCallback's constructor throws (std::bad_alloc only
  // for callables over 32 bytes; weft's callbacks capture one pointer), before anything
  // is queued.
  template <class OnCancel>
  void armCancellation(OnCancel&& onCancel) {
    if (token_ != nullptr && token_->canBeCancelled()) {
      callback_.emplace(*token_, std::forward<OnCancel>(onCancel));
    }
  }
  // Step 3, first half. noexcept: deregistration only unlinks (or waits).
  void disarmCancellation() noexcept { callback_.reset(); }
  void throwIfCancelled() const {
    if (cancelled) throw OperationCancelled();
  }
  // The end of a wait, in await_resume: disarms cancellation, forgets the handle (resumed:
  // nothing is left to withdraw in the destructor), and throws OperationCancelled if the
  // wait was cancelled.
  void finishWait() {
    disarmCancellation();
    handle = {};
    throwIfCancelled();
  }

 private:
  const CancellationToken* token_;
  std::optional<CancellationCallback> callback_;
};

// An intrusive FIFO of waiters (doubly linked, so a cancelled waiter leaves from the
// middle in O(1)). Not thread-safe: the owning primitive guards it with its SpinLock.
// Every member is noexcept: pointer writes only.
class WaiterQueue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  SyncWaiter* front() const noexcept { return head_; }

  void pushBack(SyncWaiter* waiter) noexcept {
    waiter->next = nullptr;
    waiter->prev = tail_;
    if (tail_ != nullptr) {
      tail_->next = waiter;
    } else {
      head_ = waiter;
    }
    tail_ = waiter;
  }

  SyncWaiter* popFront() noexcept {
    SyncWaiter* waiter = head_;
    if (waiter != nullptr) remove(waiter);
    return waiter;
  }

  // Precondition: `waiter` is in this queue.
  void remove(SyncWaiter* waiter) noexcept {
    if (waiter->prev != nullptr) {
      waiter->prev->next = waiter->next;
    } else {
      head_ = waiter->next;
    }
    if (waiter->next != nullptr) {
      waiter->next->prev = waiter->prev;
    } else {
      tail_ = waiter->prev;
    }
    waiter->prev = waiter->next = nullptr;
  }

  // Moves every waiter of `other` to the back of this queue, in order.
  void append(WaiterQueue&& other) noexcept {
    if (other.head_ == nullptr) return;
    if (tail_ != nullptr) {
      tail_->next = other.head_;
      other.head_->prev = tail_;
    } else {
      head_ = other.head_;
    }
    tail_ = other.tail_;
    other.head_ = other.tail_ = nullptr;
  }

 private:
  SyncWaiter* head_ = nullptr;
  SyncWaiter* tail_ = nullptr;
};

// The per-thread trampoline for waiters resumed inline (they have no executor).
//
// A notifier (unlock, set, release...) resumes an executor-less waiter on its own
// thread. Done naively this recurses: the resumed coroutine unlocks, which resumes the
// next waiter inside that call, and so on; a queue of 100,000 waiters would need 100,000
// nested frames of native stack. Instead, a resumption requested while this thread is
// already running one is queued here, and the outermost one runs them in turn: the stack
// stays one resumption deep, and FIFO order is kept.
struct InlineResumer {
  SyncWaiter* head = nullptr;
  SyncWaiter* tail = nullptr;
  bool running = false;
};
// constinit: zero-initialised, so access needs no TLS initialisation guard.
inline constinit thread_local InlineResumer tInlineResumer{};

// noexcept: a resumed coroutine reports its exceptions through its own promise; one that
// lets an exception escape resume() (no weft coroutine does) ends the process, as an
// exception escaping a thread would.
inline void resumeInline(SyncWaiter* waiter) noexcept {
  InlineResumer& resumer = tInlineResumer;
  waiter->next = nullptr;  // it has left its primitive's queue: the link is ours now
  if (resumer.running) {
    if (resumer.tail != nullptr) {
      resumer.tail->next = waiter;
    } else {
      resumer.head = waiter;
    }
    resumer.tail = waiter;
    return;
  }
  resumer.running = true;
  // Read the handle before resuming: the waiter lives in the frame being resumed.
  waiter->handle.resume();
  while (resumer.head != nullptr) {
    SyncWaiter* next = resumer.head;
    resumer.head = next->next;
    if (resumer.head == nullptr) resumer.tail = nullptr;
    next->handle.resume();
  }
  resumer.running = false;
}

// Resumes a waiter that has been taken out of its queue (granted or cancelled): through
// its executor when it has one (never inline, even when the calling thread belongs to
// that executor, so a notifier's stack never grows and it never runs the waiter's code
// inside unlock()), else inline on the calling thread through the trampoline above.
// The waiter may be destroyed as soon as this starts: callers must not touch it again.
// noexcept: called from unlock()/set()/release(), which cannot fail half-way; an executor
// that refuses the resumption (shut down under a suspended waiter) is a fatal misuse
// reported by abortExecutorGone.
inline void resumeWaiter(SyncWaiter* waiter) noexcept {
  if (Executor* executor = waiter->executor) {
    std::coroutine_handle<> handle = waiter->handle;
    try {
      executor->schedule(handle);
    } catch (...) {
      abortExecutorGone(executor);
    }
    return;
  }
  resumeInline(waiter);
}

// Resumes every waiter of `queue`, in order (the queue is consumed).
inline void resumeAll(WaiterQueue& queue) noexcept {
  while (SyncWaiter* waiter = queue.popFront()) resumeWaiter(waiter);
}

// Misuse of a sync primitive that cannot be reported to anyone (unlock of an unlocked
// mutex, destruction with waiters): a message naming it, then abort.
[[noreturn]] inline void abortSyncMisuse(const char* message) noexcept {
  std::fprintf(stderr, "weft: %s\n", message);
  std::abort();
}

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
