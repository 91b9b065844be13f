#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>

#include "coro/detail/held_lock.h"
#include "coro/detail/spin_lock.h"
#include "coro/detail/sync_waiter.h"
#include "coro/mutex.h"
#include "executors/executor.h"

namespace weft {

class SharedMutex;

// SharedLock<M>: owns a shared lock of M (a SharedMutex) and releases it with
// unlockShared() when destroyed: ScopedLock's shared counterpart, with the same members
// (coro/detail/held_lock.h), which release the lock with unlockShared(). What
// `co_await m.scopedLockShared()` returns.
// Thread safety: a single-owner value.
//
// Example:
//   weft::SharedLock lock = co_await rw.scopedLockShared();
//   read(shared);  // released at the end of the scope
template <class M = SharedMutex>
class [[nodiscard]] SharedLock : public detail::HeldLock<M, true> {
 public:
  SharedLock() noexcept = default;
  // Adopts a shared lock the caller already holds.
  SharedLock(M& mutex, std::adopt_lock_t) noexcept
      : detail::HeldLock<M, true>(mutex, std::adopt_lock) {}
};

namespace detail {

enum SharedMutexWaiterKind : unsigned char { kWantsShared = 0, kWantsExclusive = 1 };

// The awaiter of the four lock operations of SharedMutex. Result: void, ScopedLock or
// SharedLock.
template <bool kExclusive, class Result>
class SharedMutexLockAwaiter : public CancellableSyncWaiter {
 public:
  SharedMutexLockAwaiter(SharedMutex& mutex, Executor* waiterExecutor,
                         const CancellationToken* token) noexcept
      : CancellableSyncWaiter(waiterExecutor, token), mutex_(mutex) {
    kind = kExclusive ? kWantsExclusive : kWantsShared;
  }
  // Resumed only through resumeWaiter (see CancellableSyncWaiter).
  static constexpr bool kResumesOnlyThroughExecutor = true;
  SharedMutexLockAwaiter(const SharedMutexLockAwaiter&) = delete;
  SharedMutexLockAwaiter& operator=(const SharedMutexLockAwaiter&) = delete;
  // Destroyed while suspended (its coroutine destroyed while waiting): leaves the queue.
  ~SharedMutexLockAwaiter();

  // Uncontended: one compare-exchange, no suspension.
  bool await_ready() noexcept;
  // Registers for cancellation, then queues (see CancellableSyncWaiter).
  bool await_suspend(std::coroutine_handle<> awaiting);
  // Throws OperationCancelled if the wait was cancelled (nothing is held then).
  Result await_resume() {
    finishWait();
    if constexpr (std::is_void_v<Result>) {
      return;
    } else {
      return Result(mutex_, std::adopt_lock);
    }
  }

  // For task dumps (coro/detail/wait_note.h).
  void describeWait(std::string& out) const {
    appendWait(out, kExclusive ? "SharedMutex::lock" : "SharedMutex::lockShared", &mutex_);
  }

 private:
  SharedMutex& mutex_;
};

}  // namespace detail

// SharedMutex: an asynchronous reader-writer lock. Any number of shared holders, or one
// exclusive holder. Waiting suspends the coroutine or fiber, never the thread.
//
// Semantics:
//  - lock()/scopedLock()/tryLock()/unlock(): exclusive. lockShared()/scopedLockShared()/
//    tryLockShared()/unlockShared(): shared. The scoped forms return ScopedLock<SharedMutex>
//    and SharedLock<SharedMutex>.
//  - Fairness: FIFO, with batching of readers. Requests are granted in arrival order; a
//    release grants the oldest waiter and, if it wants shared access, every shared waiter
//    queued directly behind it. A reader arriving while anyone waits queues too (even if
//    readers hold the lock), so a stream of readers cannot starve a writer, and a writer
//    cannot starve the readers queued before the next writer.
//  - Uncontended, each lock and unlock is one atomic read-modify-write, with no
//    allocation.
//  - A waiter that belongs to an executor is resumed by scheduling it there; one with no
//    executor is resumed inline on the releasing thread (through a per-thread trampoline,
//    so a long queue never nests on the stack).
//
// Preconditions: unlock() only while held exclusively; unlockShared() only while held
// shared; the SharedMutex outlives its waiters and holders.
// Errors: lock waits are cancellable as Mutex's are: the co_await throws
// OperationCancelled, holding nothing, and a cancelled writer no longer blocks the
// readers queued behind it. unlock() without an exclusive holder,
// unlockShared() without a shared holder, and destroying a SharedMutex that coroutines
// wait on print a message naming the misuse and abort.
// Thread safety: every member may be called concurrently from any thread.
//
// Example:
//   weft::SharedMutex rw;
//   { weft::SharedLock r = co_await rw.scopedLockShared(); read(table); }
//   { weft::ScopedLock w = co_await rw.scopedLock(); write(table); }
class SharedMutex {
  template <bool kExclusive, class Result>
  using Operation =
      detail::SyncOperation<detail::SharedMutexLockAwaiter<kExclusive, Result>, SharedMutex&>;

 public:
  SharedMutex() noexcept = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;
  ~SharedMutex() {
    // relaxed: as in ~Mutex, this only catches waiters that are suspended.
    if ((state_.load(std::memory_order_relaxed) & kWaitersBit) != 0) {
      detail::abortSyncMisuse("SharedMutex destroyed while coroutines are waiting to lock it");
    }
  }

  // Awaitables: exclusive access (void / ScopedLock<SharedMutex>).
  Operation<true, void> lock() noexcept { return Operation<true, void>(*this); }
  Operation<true, ScopedLock<SharedMutex>> scopedLock() noexcept {
    return Operation<true, ScopedLock<SharedMutex>>(*this);
  }
  // Awaitables: shared access (void / SharedLock<SharedMutex>).
  Operation<false, void> lockShared() noexcept { return Operation<false, void>(*this); }
  Operation<false, SharedLock<SharedMutex>> scopedLockShared() noexcept {
    return Operation<false, SharedLock<SharedMutex>>(*this);
  }

  // Exclusive access if nobody holds or waits; never suspends.
  bool tryLock() noexcept {
    std::uint64_t expected = 0;
    // acquire: see what earlier holders wrote (pairs with the releases in the unlocks).
    return state_.compare_exchange_strong(expected, kWriter, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  // Shared access if no writer holds and nobody waits; never suspends.
  bool tryLockShared() noexcept {
    // relaxed: a first guess for the compare-exchange.
    std::uint64_t state = state_.load(std::memory_order_relaxed);
    while ((state & (kWriter | kWaitersBit)) == 0) {
      // acquire: as in tryLock().
      if (state_.compare_exchange_weak(state, state + kReader, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  // noexcept (both unlocks): granting cannot fail (see detail::resumeWaiter).
  void unlock() noexcept {
    std::uint64_t expected = kWriter;
    // release: publishes the critical section. relaxed on failure: slow path.
    if (state_.compare_exchange_strong(expected, 0, std::memory_order_release,
                                       std::memory_order_relaxed)) {
      return;
    }
    if ((expected & kWriter) == 0) {
      detail::abortSyncMisuse("SharedMutex::unlock() called without an exclusive holder");
    }
    releaseSlow(kWriter);
  }

  void unlockShared() noexcept {
    // relaxed: a first guess for the compare-exchange.
    std::uint64_t state = state_.load(std::memory_order_relaxed);
    while ((state & kWaitersBit) == 0) {
      if (state < kReader) {
        detail::abortSyncMisuse("SharedMutex::unlockShared() called without a shared holder");
      }
      // release: publishes the reader's writes (if any) to the next writer.
      if (state_.compare_exchange_weak(state, state - kReader, std::memory_order_release,
                                       std::memory_order_relaxed)) {
        return;
      }
    }
    releaseSlow(kReader);
  }

 private:
  template <bool, class>
  friend class detail::SharedMutexLockAwaiter;

  // state_ = readers * kReader + kWriter (held exclusively) + kWaitersBit (waiters_ is
  // not empty). While kWaitersBit is set, the word changes only under queueLock_.
  static constexpr std::uint64_t kWriter = 1;
  static constexpr std::uint64_t kWaitersBit = 2;
  static constexpr std::uint64_t kReader = 4;

  bool tryAcquire(bool exclusive) noexcept { return exclusive ? tryLock() : tryLockShared(); }

  // Grants `waiter` access if it can have it now (returns false) or queues it (true).
  // A waiter already cancelled is not queued either (returns false, nothing taken).
  bool acquireOrEnqueue(detail::SyncWaiter* waiter) noexcept {
    const bool exclusive = waiter->kind == detail::kWantsExclusive;
    std::lock_guard guard(queueLock_);
    if (waiter->cancelled) return false;
    std::uint64_t state = state_.load(std::memory_order_relaxed);
    for (;;) {
      if ((state & kWaitersBit) == 0 && (exclusive ? state == 0 : (state & kWriter) == 0)) {
        // acquire: as in tryLock().
        if (state_.compare_exchange_weak(state, exclusive ? kWriter : state + kReader,
                                         std::memory_order_acquire, std::memory_order_relaxed)) {
          waiter->phase = detail::WaitPhase::kDone;  // granted: too late to cancel
          return false;
        }
      } else if ((state & kWaitersBit) != 0 ||
                 // relaxed: the queue is published by queueLock_, and access reaches the
                 // waiter through grantLocked (under queueLock_) and its resumption.
                 state_.compare_exchange_weak(state, state | kWaitersBit,
                                              std::memory_order_relaxed,
                                              std::memory_order_relaxed)) {
        waiter->phase = detail::WaitPhase::kQueued;
        waiters_.pushBack(waiter);
        return true;
      }
    }
  }

  // The slow path of unlock() (`held` = kWriter) and unlockShared() (`held` = kReader):
  // waiters were queued when we looked.
  void releaseSlow(std::uint64_t held) noexcept {
    detail::WaiterQueue granted;
    {
      std::lock_guard guard(queueLock_);
      // acquire: readers that left by the lock-free path (release compare-exchanges)
      // must happen before whatever we grant; grantLocked's plain store would end their
      // release sequences, so the granted waiter would not synchronize with them.
      std::uint64_t state = state_.load(std::memory_order_acquire);
      if (held == kReader && state < kReader) {
        detail::abortSyncMisuse("SharedMutex::unlockShared() called without a shared holder");
      }
      if ((state & kWaitersBit) == 0) {
        // The waiters left meanwhile (granted, cancelled): a plain release after all.
        // release: publishes the critical section.
        state_.fetch_sub(held, std::memory_order_release);
        return;
      }
      grantLocked(state - held, granted);
    }
    detail::resumeAll(granted);
  }

  // Under queueLock_, with kWaitersBit set in `state` (the word is ours): grants access
  // to waiters at the front of the queue that can have it, moving them to `granted`, and
  // stores the new state.
  void grantLocked(std::uint64_t state, detail::WaiterQueue& granted) noexcept {
    while (detail::SyncWaiter* front = waiters_.front()) {
      if (front->kind == detail::kWantsExclusive) {
        if ((state & ~kWaitersBit) != 0) break;  // held: the writer waits
        state |= kWriter;
      } else {
        if ((state & kWriter) != 0) break;
        state += kReader;
      }
      waiters_.popFront();
      front->phase = detail::WaitPhase::kDone;
      granted.pushBack(front);
      if (front->kind == detail::kWantsExclusive) break;
    }
    if (waiters_.empty()) state &= ~kWaitersBit;
    // release: the granted waiters are synchronized by queueLock_ and their resumption;
    // this publishes the releasing holder's writes to later lock-free acquirers.
    state_.store(state, std::memory_order_release);
  }

  // Takes a queued waiter out (cancellation, or its coroutine destroyed while waiting),
  // granting those behind it that it was blocking. True if it was queued: the caller
  // then owns its resumption. A waiter not yet queued is marked cancelled.
  bool cancelWaiter(detail::SyncWaiter* waiter) noexcept {
    detail::WaiterQueue granted;
    {
      std::lock_guard guard(queueLock_);
      if (waiter->phase == detail::WaitPhase::kDone) return false;
      waiter->cancelled = true;
      if (waiter->phase == detail::WaitPhase::kNotQueued) return false;
      waiter->phase = detail::WaitPhase::kDone;
      waiters_.remove(waiter);
      // acquire: as in releaseSlow.
      grantLocked(state_.load(std::memory_order_acquire), granted);
    }
    detail::resumeAll(granted);
    return true;
  }

  std::atomic<std::uint64_t> state_{0};
  detail::SpinLock queueLock_;
  detail::WaiterQueue waiters_;  // guarded by queueLock_
};

namespace detail {

template <bool kExclusive, class Result>
SharedMutexLockAwaiter<kExclusive, Result>::~SharedMutexLockAwaiter() {
  disarmCancellation();
  // Still queued: leaves the queue. Granted (or cancelled) but not yet resumed: the
  // resumption is under way, and this destruction is the caller's race.
  if (handle && !mutex_.cancelWaiter(this)) {
    abortDestroyedWhileResuming("SharedMutex::lock()/lockShared()");
  }
}

template <bool kExclusive, class Result>
bool SharedMutexLockAwaiter<kExclusive, Result>::await_ready() noexcept {
  return mutex_.tryAcquire(kExclusive);
}

template <bool kExclusive, class Result>
bool SharedMutexLockAwaiter<kExclusive, Result>::await_suspend(
    std::coroutine_handle<> awaiting) {
  handle = awaiting;
  armCancellation([this] {
    if (mutex_.cancelWaiter(this)) resumeWaiter(this);
  });
  return mutex_.acquireOrEnqueue(this);
}

}  // namespace detail
}  // namespace weft
