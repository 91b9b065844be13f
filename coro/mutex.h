#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>

#include "weft/coro/detail/held_lock.h"
#include "weft/coro/detail/spin_lock.h"
#include "weft/coro/detail/sync_waiter.h"
#include "weft/executors/executor.h"

namespace weft {

class Mutex;
class ConditionVariable;

// ScopedLock<M>: owns an exclusive lock of M (Mutex or SharedMutex) and unlocks it when
// destroyed. What `co_await mutex.scopedLock()` returns. Move-only; its members
// (ownsLock(), mutex(), unlock() now, release() without unlocking) are described in
// coro/detail/held_lock.h.
//
// Thread safety: a single-owner value; it may be destroyed on another thread than the one
// that locked (coroutine locks are not tied to threads).
//
// Example:
//   weft::ScopedLock lock = co_await mutex.scopedLock();
//   ++shared;  // unlocked at the end of the scope
template <class M = Mutex>
class [[nodiscard]] ScopedLock : public detail::HeldLock<M, detail::HoldKind::kExclusive> {
 public:
  ScopedLock() noexcept = default;
  // Adopts a lock the caller already holds.
  ScopedLock(M& mutex, std::adopt_lock_t) noexcept
      : detail::HeldLock<M, detail::HoldKind::kExclusive>(mutex, std::adopt_lock) {}
};

namespace detail {

// `co_await mutex.lock()` and `co_await mutex.scopedLock()`, for SyncWaitAwaiter.
struct MutexLockOp {
  using Primitive = Mutex;
  static constexpr unsigned char kKind = 0;
  static constexpr const char* kName = "Mutex::lock";
  static constexpr const char* kCall = "Mutex::lock()";
  static inline bool tryAcquire(Mutex& mutex) noexcept;
};

// The awaiter of `co_await mutex.lock()` (Result = void) and of `co_await
// mutex.scopedLock()` (Result = ScopedLock<Mutex>). Throws OperationCancelled if the
// wait was cancelled (the lock is not held then).
template <class Result>
using MutexLockAwaiter = SyncWaitAwaiter<MutexLockOp, Result>;

}  // namespace detail

// Mutex: an asynchronous mutual-exclusion lock. Waiting for it suspends the coroutine
// or fiber, never the thread.
//
// Semantics:
//  - `co_await m.lock()` / `weft::await(m.lock())` acquires it; `co_await m.scopedLock()`
//    acquires it and returns a ScopedLock that unlocks at the end of its scope.
//    tryLock() acquires it only if that needs no wait. unlock() releases it.
//  - Uncontended, lock and unlock are one atomic read-modify-write each and never
//    allocate: a waiter's queue node is its awaiter, in the coroutine frame.
//  - Fairness: strict FIFO hand-off. unlock() with waiters passes ownership to the
//    oldest waiter directly; a newcomer cannot barge in ahead of it (tryLock fails while
//    anyone waits). Under constant contention this trades throughput for fairness: each
//    hand-off costs a resumption on the waiter's executor.
//  - Resumption: a waiter that belongs to an executor (a Task, a Lazy inside one, a fiber
//    on an executor) is resumed by scheduling it on that executor; unlock() never runs
//    it on the unlocking thread's stack. A waiter with no executor (a plain Lazy, e.g.
//    under syncAwait, or a foreign coroutine) is resumed inline on the unlocking thread,
//    as cppcoro and async_simple do; a per-thread trampoline queues resumptions requested
//    while one is running, so a long queue of such waiters never nests on the stack.
//  - The lock is not owned by a thread: it may be unlocked on another thread than the
//    one that locked it (a coroutine may move between threads while holding it).
//
// Preconditions: unlock() only while locked; the Mutex outlives its waiters and lock
// holders.
// Errors: a lock wait is cancellable: when the awaiting coroutine's (or fiber's)
// CancellationToken is cancelled while it waits, it leaves the queue and the co_await
// throws OperationCancelled, holding nothing. Only waiting is cancellable: a free lock is
// acquired even if cancellation was already requested, and a wait granted before the
// request completes normally. unlock() of an unlocked Mutex, and destroying a Mutex that
// coroutines are waiting on, print a message naming the misuse and abort. Destroying a
// coroutine suspended in lock() takes it out of the queue; once the lock was handed to it
// (its resumption under way), destroying it prints a message and aborts.
// Thread safety: every member may be called concurrently from any thread.
//
// Example:
//   weft::Mutex mutex;
//   weft::Lazy<> add(int& total, int n) {
//     weft::ScopedLock lock = co_await mutex.scopedLock();
//     total += n;
//   }
class Mutex {
 public:
  // What lock() returns (an awaitable that resumes with a ScopedLock<Mutex>).
  using LockOperation = detail::SyncOperation<detail::MutexLockAwaiter<void>, Mutex&>;
  // What scopedLock() returns (an awaitable that resumes with a ScopedLock<Mutex>).
  using ScopedLockOperation =
      detail::SyncOperation<detail::MutexLockAwaiter<ScopedLock<Mutex>>, Mutex&>;

  Mutex() noexcept = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  ~Mutex() {
    // relaxed: a destructor racing with a waiter is already a use-after-free; this only
    // catches the case where the waiter is suspended.
    if ((state_.load(std::memory_order_relaxed) & kWaitersBit) != 0) {
      detail::abortMisuse("Mutex destroyed while coroutines are waiting to lock it");
    }
  }

  // Awaitable: acquires the lock (suspending while it is held). Returns void.
  LockOperation lock() noexcept {
    return detail::SyncOperation<detail::MutexLockAwaiter<void>, Mutex&>(*this);
  }
  // Awaitable: acquires the lock; returns a ScopedLock<Mutex> owning it.
  ScopedLockOperation scopedLock() noexcept { return ScopedLockOperation(*this); }

  // Acquires the lock if it is free and nobody waits; never suspends.
  bool tryLock() noexcept {
    std::uint32_t expected = kUnlocked;
    // acquire: the critical section must see what the previous holder wrote (pairs with
    // the release in unlock()). relaxed on failure: nothing was acquired.
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  // tryLock() as a guard: owns the lock if it was acquired, else empty.
  ScopedLock<Mutex> tryScopedLock() noexcept {
    return tryLock() ? ScopedLock<Mutex>(*this, std::adopt_lock) : ScopedLock<Mutex>();
  }

  // Releases the lock, handing it to the oldest waiter if there is one (see the class
  // comment for where that waiter resumes).
  // noexcept: hand-off cannot fail (see detail::resumeWaiter).
  void unlock() noexcept {
    std::uint32_t expected = kLocked;
    // release: publishes the critical section to the next acquirer. relaxed on failure:
    // the slow path synchronizes through the queue lock.
    if (state_.compare_exchange_strong(expected, kUnlocked, std::memory_order_release,
                                       std::memory_order_relaxed)) {
      return;
    }
    unlockSlow(expected);
  }

 private:
  template <class, class>
  friend class detail::SyncWaitAwaiter;
  friend class ConditionVariable;

  static constexpr std::uint32_t kUnlocked = 0;
  static constexpr std::uint32_t kLocked = 1;
  // Added to kLocked while waiters_ is not empty. Set and cleared only under queueLock_.
  static constexpr std::uint32_t kWaitersBit = 2;
  // Added to kLocked while owedUnlocks_ is not zero (see takeForAbandonedWaiter). Set and
  // cleared only under queueLock_. Either bit makes unlock() take its slow path.
  static constexpr std::uint32_t kOwedBit = 4;

  // await_suspend's queueing step (detail::enqueueSyncWaiter): acquires the lock for
  // `waiter` if it is free (returns false) or queues it (returns true: the waiter will be
  // handed the lock by unlock(), or cancelled). A waiter already cancelled is not queued
  // either (returns false, lock not taken).
  bool enqueueWaiter(detail::SyncWaiter* waiter) noexcept {
    return detail::enqueueSyncWaiter(queueLock_, waiters_, waiter, [this] {
      std::uint32_t state = state_.load(std::memory_order_relaxed);
      for (;;) {
        if (state == kUnlocked) {
          // acquire: as in tryLock().
          if (state_.compare_exchange_weak(state, kLocked, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
            return false;
          }
        } else if ((state & kWaitersBit) != 0 ||
                   // relaxed: the waiter queue is published by queueLock_, and the lock
                   // itself reaches the waiter through the hand-off (queueLock_, then the
                   // executor's queue), not through this word.
                   state_.compare_exchange_weak(state, state | kWaitersBit,
                                                std::memory_order_relaxed,
                                                std::memory_order_relaxed)) {
          return true;
        }
      }
    });
  }

  // For ConditionVariable: acquires the lock on behalf of a suspended waiter; it is
  // resumed once it holds the lock (now, if the lock is free).
  void lockForWaiter(detail::SyncWaiter* waiter) noexcept {
    if (!tryLock() && enqueueWaiter(waiter)) return;
    waiter->status = detail::WaiterStatus::kDone;
    detail::resumeWaiter(waiter);
  }

  // Takes a queued waiter out of the queue (detail::cancelSyncWaiter: cancellation, or
  // its coroutine destroyed while waiting). True if it was queued: the caller then owns
  // its resumption.
  bool cancelWaiter(detail::SyncWaiter* waiter) noexcept {
    return detail::cancelSyncWaiter(queueLock_, waiters_, waiter, [this](detail::WaiterQueue&) {
      // relaxed: only waiters_ changed, and it is published by queueLock_.
      if (waiters_.empty()) state_.store(lockedStateLocked(), std::memory_order_relaxed);
    });
  }

  // The held state with no waiter queued, keeping kOwedBit. Under queueLock_.
  std::uint32_t lockedStateLocked() const noexcept {
    return owedUnlocks_ != 0 ? kLocked | kOwedBit : kLocked;
  }

  // For ConditionVariable: a coroutine destroyed while it waited to be notified, or to
  // reacquire the mutex after a notification, does not hold the mutex, yet the code
  // around its wait believes it does (a ScopedLock in its frame unlocks it as the frame
  // is destroyed, right after the awaiter). So its destroyed wait counts as having
  // reacquired the mutex: taken now if it is free, else owed: the next unlock() (the
  // frame's own, or the holder's, whichever comes first) is absorbed, and the other one
  // releases it. Either order ends with the mutex held by whoever holds it without the
  // destroyed coroutine. A frame that held the mutex without a guard leaks it, as it
  // would if destroyed while holding it anywhere else. noexcept: lock-word updates.
  void takeForAbandonedWaiter() noexcept {
    if (tryLock()) return;
    std::lock_guard guard(queueLock_);
    std::uint32_t state = state_.load(std::memory_order_relaxed);
    for (;;) {
      if (state == kUnlocked) {
        // acquire: as in tryLock().
        if (state_.compare_exchange_weak(state, kLocked, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
          return;
        }
      } else if (state_.compare_exchange_weak(state, state | kOwedBit,
                                              // relaxed: owedUnlocks_ is guarded by
                                              // queueLock_; the bit only diverts unlock()
                                              // to the slow path, which takes that lock.
                                              std::memory_order_relaxed,
                                              std::memory_order_relaxed)) {
        ++owedUnlocks_;
        return;
      }
    }
  }

  void unlockSlow(std::uint32_t observed) noexcept {
    if (observed == kUnlocked) {
      detail::abortMisuse("Mutex::unlock() called on a Mutex that is not locked");
    }
    detail::SyncWaiter* next;
    {
      std::lock_guard guard(queueLock_);
      if (owedUnlocks_ != 0) {
        // This unlock pays a destroyed waiter's debt (see takeForAbandonedWaiter): the
        // mutex stays held until the other of the two unlocks. What the caller wrote
        // reaches the next holder through queueLock_, which that unlock takes too.
        // relaxed: as in takeForAbandonedWaiter.
        if (--owedUnlocks_ == 0) state_.fetch_and(~kOwedBit, std::memory_order_relaxed);
        return;
      }
      next = waiters_.popFront();
      if (next == nullptr) {
        // The last waiter left (cancelled, or its coroutine destroyed) between our
        // compare-exchange and the queue lock: a plain unlock after all.
        // release: publishes the critical section, as in unlock().
        state_.store(kUnlocked, std::memory_order_release);
        return;
      }
      next->status = detail::WaiterStatus::kDone;
      // The lock stays held: ownership passes to `next`. relaxed: nobody acquires the
      // lock through this store (tryLock fails either way); `next` is synchronized by
      // queueLock_ and its resumption.
      if (waiters_.empty()) state_.store(kLocked, std::memory_order_relaxed);
    }
    detail::resumeWaiter(next);
  }

  std::atomic<std::uint32_t> state_{kUnlocked};
  detail::SpinLock queueLock_;
  detail::WaiterQueue waiters_;      // guarded by queueLock_
  std::uint32_t owedUnlocks_ = 0;    // guarded by queueLock_
};

bool detail::MutexLockOp::tryAcquire(Mutex& mutex) noexcept { return mutex.tryLock(); }

}  // namespace weft
