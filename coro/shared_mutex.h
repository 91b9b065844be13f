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
#include "weft/coro/mutex.h"
#include "weft/executors/executor.h"

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
class [[nodiscard]] SharedLock : public detail::HeldLock<M, detail::HoldKind::kShared> {
 public:
  SharedLock() noexcept = default;
  // Adopts a shared lock the caller already holds.
  SharedLock(M& mutex, std::adopt_lock_t) noexcept
      : detail::HeldLock<M, detail::HoldKind::kShared>(mutex, std::adopt_lock) {}
};

namespace detail {

enum SharedMutexWaiterKind : unsigned char { kWantsShared = 0, kWantsExclusive = 1 };

// The lock operations of SharedMutex (exclusive or shared), for SyncWaitAwaiter.
template <bool kExclusive>
struct SharedMutexLockOp {
  using Primitive = SharedMutex;
  static constexpr unsigned char kKind = kExclusive ? kWantsExclusive : kWantsShared;
  static constexpr const char* kName =
      kExclusive ? "SharedMutex::lock" : "SharedMutex::lockShared";
  static constexpr const char* kCall = "SharedMutex::lock()/lockShared()";
  static inline bool tryAcquire(SharedMutex& mutex) noexcept;
};

// The awaiter of the four lock operations of SharedMutex. Result: void, ScopedLock or
// SharedLock. Throws OperationCancelled if the wait was cancelled (nothing is held then).
template <bool kExclusive, class Result>
using SharedMutexLockAwaiter = SyncWaitAwaiter<SharedMutexLockOp<kExclusive>, Result>;

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
      detail::abortMisuse("SharedMutex destroyed while coroutines are waiting to lock it");
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
      detail::abortMisuse("SharedMutex::unlock() called without an exclusive holder");
    }
    releaseSlow(kWriter);
  }

  void unlockShared() noexcept {
    // relaxed: a first guess for the compare-exchange.
    std::uint64_t state = state_.load(std::memory_order_relaxed);
    while ((state & kWaitersBit) == 0) {
      if (state < kReader) {
        detail::abortMisuse("SharedMutex::unlockShared() called without a shared holder");
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
  template <class, class>
  friend class detail::SyncWaitAwaiter;

  // state_ = readers * kReader + kWriter (held exclusively) + kWaitersBit (waiters_ is
  // not empty). While kWaitersBit is set, the word changes only under queueLock_.
  static constexpr std::uint64_t kWriter = 1;
  static constexpr std::uint64_t kWaitersBit = 2;
  static constexpr std::uint64_t kReader = 4;

  // await_suspend's queueing step (detail::enqueueSyncWaiter): grants `waiter` access if
  // it can have it now (returns false) or queues it (true). A waiter already cancelled is
  // not queued either (returns false, nothing taken).
  bool enqueueWaiter(detail::SyncWaiter* waiter) noexcept {
    const bool exclusive = waiter->kind == detail::kWantsExclusive;
    return detail::enqueueSyncWaiter(queueLock_, waiters_, waiter, [this, exclusive] {
      std::uint64_t state = state_.load(std::memory_order_relaxed);
      for (;;) {
        if ((state & kWaitersBit) == 0 && (exclusive ? state == 0 : (state & kWriter) == 0)) {
          // acquire: as in tryLock().
          if (state_.compare_exchange_weak(state, exclusive ? kWriter : state + kReader,
                                           std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
            return false;
          }
        } else if ((state & kWaitersBit) != 0 ||
                   // relaxed: the queue is published by queueLock_, and access reaches the
                   // waiter through grantLocked (under queueLock_) and its resumption.
                   state_.compare_exchange_weak(state, state | kWaitersBit,
                                                std::memory_order_relaxed,
                                                std::memory_order_relaxed)) {
          return true;
        }
      }
    });
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
        detail::abortMisuse("SharedMutex::unlockShared() called without a shared holder");
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
      front->status = detail::WaiterStatus::kDone;
      granted.pushBack(front);
      if (front->kind == detail::kWantsExclusive) break;
    }
    if (waiters_.empty()) state &= ~kWaitersBit;
    // release: the granted waiters are synchronized by queueLock_ and their resumption;
    // this publishes the releasing holder's writes to later lock-free acquirers.
    state_.store(state, std::memory_order_release);
  }

  // Takes a queued waiter out (detail::cancelSyncWaiter: cancellation, or its coroutine
  // destroyed while waiting), granting those behind it that it was blocking. True if it
  // was queued: the caller then owns its resumption.
  bool cancelWaiter(detail::SyncWaiter* waiter) noexcept {
    return detail::cancelSyncWaiter(queueLock_, waiters_, waiter,
                                    [this](detail::WaiterQueue& granted) {
                                      // acquire: as in releaseSlow.
                                      grantLocked(state_.load(std::memory_order_acquire),
                                                  granted);
                                    });
  }

  std::atomic<std::uint64_t> state_{0};
  detail::SpinLock queueLock_;
  detail::WaiterQueue waiters_;  // guarded by queueLock_
};

template <bool kExclusive>
bool detail::SharedMutexLockOp<kExclusive>::tryAcquire(SharedMutex& mutex) noexcept {
  return kExclusive ? mutex.tryLock() : mutex.tryLockShared();
}

}  // namespace weft
