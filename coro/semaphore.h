#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "weft/coro/detail/held_lock.h"
#include "weft/coro/detail/spin_lock.h"
#include "weft/coro/detail/sync_waiter.h"
#include "weft/executors/executor.h"

namespace weft {

class Semaphore;

// SemaphorePermit: owns one permit of a Semaphore and releases it when destroyed. What
// `co_await semaphore.scopedAcquire()` returns.
//
// Move-only; an empty (default-constructed, moved-from, released or detached) permit owns
// nothing. Thread safety: a single-owner value; it may be destroyed on another thread than
// the one that acquired (permits are not tied to threads).
//
// Example:
//   weft::SemaphorePermit permit = co_await slots.scopedAcquire();
//   co_await send(request);  // the permit is returned at the end of the scope
class [[nodiscard]] SemaphorePermit
    : private detail::HeldLock<Semaphore, detail::HoldKind::kPermit> {
  using Hold = detail::HeldLock<Semaphore, detail::HoldKind::kPermit>;

 public:
  SemaphorePermit() noexcept = default;
  // Adopts a permit the caller already holds.
  SemaphorePermit(Semaphore& semaphore, std::adopt_lock_t) noexcept
      : Hold(semaphore, std::adopt_lock) {}

  bool ownsPermit() const noexcept { return ownsLock(); }
  explicit operator bool() const noexcept { return ownsLock(); }
  Semaphore* semaphore() const noexcept { return mutex(); }

  // Returns the permit now. Precondition: owns one (else a message and abort).
  void release() noexcept { unlock(); }
  // Gives the permit up without returning it: the caller must release it.
  Semaphore* detach() noexcept { return Hold::release(); }
};

namespace detail {

// `co_await semaphore.acquire()` and `co_await semaphore.scopedAcquire()`, for
// SyncWaitAwaiter.
struct SemaphoreAcquireOp {
  using Primitive = Semaphore;
  static constexpr unsigned char kKind = 0;
  static constexpr const char* kName = "Semaphore::acquire";
  static constexpr const char* kCall = "Semaphore::acquire()";
  static inline bool tryAcquire(Semaphore& semaphore) noexcept;
};

// The awaiter of `co_await semaphore.acquire()` (Result = void) and of `co_await
// semaphore.scopedAcquire()` (Result = SemaphorePermit). Throws OperationCancelled if the
// wait was cancelled (no permit is held then).
template <class Result>
using SemaphoreAcquireAwaiter = SyncWaitAwaiter<SemaphoreAcquireOp, Result>;

}  // namespace detail

// Semaphore: a counting semaphore for coroutines and fibers. acquire() takes one permit,
// suspending while none is free; release(n) returns n permits.
//
// Semantics:
//  - Fairness: FIFO. Waiters get permits in the order they started waiting, and a
//    newcomer never takes a permit ahead of a waiter (tryAcquire() fails while anyone
//    waits). release(n) hands permits directly to up to n waiters.
//  - A waiter that belongs to an executor is resumed by scheduling it there; one with no
//    executor is resumed inline on the releasing thread (through a per-thread
//    trampoline, so a long queue never nests on the stack).
//  - Uncontended, acquire and release are one atomic read-modify-write each, with no
//    allocation. What a thread wrote before release() is visible to the acquirer of the
//    permit it released.
//  - Permits are not owned: any coroutine or thread may release.
//
// Preconditions: the Semaphore outlives its waiters.
// Errors: a negative initial count or release(n) with n < 0 throws std::invalid_argument;
// a release that would take the count past max() throws std::overflow_error (nothing is
// released). acquire() is cancellable: cancelled while it waits, it leaves the queue and
// the co_await throws OperationCancelled, holding no permit (a free permit is taken even
// if cancellation was requested). Destroying a Semaphore that coroutines wait on prints
// a message and aborts.
// Thread safety: every member may be called concurrently from any thread.
//
// Example:
//   weft::Semaphore slots(4);  // at most 4 requests in flight
//   co_await slots.acquire();
//   co_await send(request);
//   slots.release();
//   // or, returned at the end of the scope, also when send() throws:
//   weft::SemaphorePermit permit = co_await slots.scopedAcquire();
class Semaphore {
 public:
  // What acquire() returns (an awaitable that resumes with a SemaphorePermit).
  using AcquireOperation =
      detail::SyncOperation<detail::SemaphoreAcquireAwaiter<void>, Semaphore&>;
  // What scopedAcquire() returns (an awaitable that resumes with a SemaphorePermit).
  using ScopedAcquireOperation =
      detail::SyncOperation<detail::SemaphoreAcquireAwaiter<SemaphorePermit>, Semaphore&>;

  explicit Semaphore(std::ptrdiff_t initialCount) : state_(checkedInitial(initialCount)) {}
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;
  ~Semaphore() {
    // relaxed: as in ~Mutex, a destructor racing with users is already a bug; this only
    // catches suspended waiters.
    if ((state_.load(std::memory_order_relaxed) & kWaitersBit) != 0) {
      detail::abortMisuse("Semaphore destroyed while coroutines are waiting on it");
    }
  }

  // The largest count a Semaphore can hold.
  static constexpr std::ptrdiff_t max() noexcept {
    return std::numeric_limits<std::ptrdiff_t>::max() / kPermit;
  }

  // Awaitable: takes one permit, waiting for one if none is free. Returns void.
  AcquireOperation acquire() noexcept {
    return detail::SyncOperation<detail::SemaphoreAcquireAwaiter<void>, Semaphore&>(*this);
  }
  // Awaitable: as acquire(), returning a SemaphorePermit that releases the permit at the
  // end of its scope. Cancelled, it throws OperationCancelled and no permit is held.
  ScopedAcquireOperation scopedAcquire() noexcept { return ScopedAcquireOperation(*this); }

  // Takes a permit if one is free and nobody waits; never suspends.
  bool tryAcquire() noexcept {
    // relaxed: a first guess for the compare-exchange.
    std::ptrdiff_t state = state_.load(std::memory_order_relaxed);
    while ((state & kWaitersBit) == 0 && state >= kPermit) {
      // acquire: see what the releaser of this permit wrote (pairs with release()).
      if (state_.compare_exchange_weak(state, state - kPermit, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }
  // tryAcquire() as a permit: owns one if it was taken, else empty.
  SemaphorePermit tryScopedAcquire() noexcept {
    return tryAcquire() ? SemaphorePermit(*this, std::adopt_lock) : SemaphorePermit();
  }

  // Returns `n` permits (default 1), handing them to waiters first, oldest first.
  void release(std::ptrdiff_t n = 1) {
    if (n < 0) throw std::invalid_argument("weft: Semaphore::release() of a negative count");
    if (n == 0) return;
    if (!releaseUnlessWaiters(n)) releaseSlow(n);
  }

  // The number of free permits right now (a snapshot; for diagnostics and tests).
  std::ptrdiff_t available() const noexcept {
    // relaxed: a snapshot that synchronizes with nothing.
    return state_.load(std::memory_order_relaxed) / kPermit;
  }

 private:
  template <class, class>
  friend class detail::SyncWaitAwaiter;

  // state_ = permits * kPermit + (kWaitersBit if waiters_ is not empty). While waiters
  // are queued no permit is free, and the word changes only under queueLock_.
  static constexpr std::ptrdiff_t kWaitersBit = 1;
  static constexpr std::ptrdiff_t kPermit = 2;

  static std::ptrdiff_t checkedInitial(std::ptrdiff_t count) {
    if (count < 0) throw std::invalid_argument("weft: Semaphore constructed with a negative count");
    if (count > max()) throw std::overflow_error("weft: Semaphore count above Semaphore::max()");
    return count * kPermit;
  }
  static void checkOverflow(std::ptrdiff_t permits, std::ptrdiff_t n) {
    if (n > max() - permits) {
      throw std::overflow_error("weft: Semaphore::release() past Semaphore::max() permits");
    }
  }

  // Adds `n` permits unless waiters are queued (then returns false: they are to be handed
  // the permits). Throws std::overflow_error past max() (nothing released).
  bool releaseUnlessWaiters(std::ptrdiff_t n) {
    // relaxed: a first guess for the compare-exchange.
    std::ptrdiff_t state = state_.load(std::memory_order_relaxed);
    while ((state & kWaitersBit) == 0) {
      checkOverflow(state / kPermit, n);
      // release: publishes our writes to whoever acquires these permits.
      if (state_.compare_exchange_weak(state, state + n * kPermit, std::memory_order_release,
                                       std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  // await_suspend's queueing step (detail::enqueueSyncWaiter): takes a permit for
  // `waiter` if one is free (returns false) or queues it (true). A waiter already
  // cancelled is not queued either (returns false, no permit taken).
  bool enqueueWaiter(detail::SyncWaiter* waiter) noexcept {
    return detail::enqueueSyncWaiter(queueLock_, waiters_, waiter, [this] {
      std::ptrdiff_t state = state_.load(std::memory_order_relaxed);
      for (;;) {
        if ((state & kWaitersBit) != 0) return true;
        if (state >= kPermit) {
          // acquire: as in tryAcquire().
          if (state_.compare_exchange_weak(state, state - kPermit, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
            return false;
          }
        } else if (state_.compare_exchange_weak(state, kWaitersBit,
                                                // relaxed: the queue is published by
                                                // queueLock_; permits reach the waiter
                                                // through releaseSlow (under queueLock_)
                                                // and its resumption.
                                                std::memory_order_relaxed,
                                                std::memory_order_relaxed)) {
          return true;
        }
      }
    });
  }

  void releaseSlow(std::ptrdiff_t n) {
    detail::WaiterQueue granted;
    {
      std::lock_guard guard(queueLock_);
      // Under queueLock_: if waiters are queued the word is ours; if they left meanwhile
      // (granted or cancelled), a plain release after all.
      if (releaseUnlessWaiters(n)) return;
      // Waiters are queued, so no permit is free: the first n waiters get one each.
      std::ptrdiff_t left = n;
      while (left > 0 && !waiters_.empty()) {
        detail::SyncWaiter* waiter = waiters_.popFront();
        waiter->status = detail::WaiterStatus::kDone;
        granted.pushBack(waiter);
        --left;
      }
      // release: publishes our writes to later tryAcquire() callers that take the
      // remaining permits without the lock.
      state_.store(left * kPermit + (waiters_.empty() ? 0 : kWaitersBit),
                   std::memory_order_release);
    }
    detail::resumeAll(granted);
  }

  // Takes a queued waiter out (detail::cancelSyncWaiter: cancellation, or its coroutine
  // destroyed while waiting). True if it was queued: the caller then owns its resumption.
  bool cancelWaiter(detail::SyncWaiter* waiter) noexcept {
    return detail::cancelSyncWaiter(queueLock_, waiters_, waiter, [this](detail::WaiterQueue&) {
      // relaxed: no permit is free while waiters are queued; the queue is published by
      // queueLock_.
      if (waiters_.empty()) state_.store(0, std::memory_order_relaxed);
    });
  }

  std::atomic<std::ptrdiff_t> state_;
  detail::SpinLock queueLock_;
  detail::WaiterQueue waiters_;  // guarded by queueLock_
};

bool detail::SemaphoreAcquireOp::tryAcquire(Semaphore& semaphore) noexcept {
  return semaphore.tryAcquire();
}

}  // namespace weft
