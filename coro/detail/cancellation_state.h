#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "weft/coro/detail/frame_allocator.h"
#include "weft/coro/detail/spin_lock.h"

// The state behind weft's cancellation (coro/cancellation.h): what a CancellationSource,
// its tokens and the callbacks registered on them share.

namespace weft {

class CancellationCallback;

namespace detail {

// The shared state behind one CancellationSource, its copies, its tokens and the
// callbacks registered on them. Reference counted; freed with the last handle.
//
// Cheap to make and to drop, because every collectAny, withTimeout, TaskGroup and spawn
// makes one: it comes from the thread-local frame allocator (coro/detail/frame_allocator.h,
// no malloc; it may be freed on any thread), it holds no mutex or condition variable to
// construct and destroy (a one-byte SpinLock, and a futex wait on a counter for the rare
// destructor that must wait for a callback running on another thread), and the last
// holder frees it without an atomic read-modify-write when it sees it is the only one.
//
// Registration protocol (why the callback runs exactly once or never, and why a
// destructor never returns while its callback runs on another thread):
//  - A spin lock guards the intrusive list of registered callbacks, `running_`,
//    `signaller_` and `waiters_`. It is held only to link, unlink and hand over one
//    callback, never while a callback runs.
//  - requestCancellation() sets `requested_` under the lock, then repeatedly unlinks the
//    first callback, records it in `running_`, unlocks, runs it, relocks and clears
//    `running_`. A callback is therefore run by whoever unlinks it, and only once.
//  - A registration that finds `requested_` already set (under the lock) is not linked;
//    its constructor runs the callback itself.
//  - ~CancellationCallback locks: if still linked it unlinks itself (its callback will
//    never run). Otherwise its callback has run or is running; if it is `running_` on
//    another thread, it waits (on `callbackDone_`, which the signaller bumps and notifies
//    when a callback returns while someone waits) until `running_` changes. If it is
//    `running_` on this very thread, the destructor was called from inside the callback
//    (or from something the callback called): it returns at once, and the signaller never
//    touches a callback after running it, so that is safe.
class CancellationState {
 public:
  // A new state held by one source (and one reference).
  // Errors: std::bad_alloc.
  static CancellationState* create() {
    return ::new (allocateFrame(sizeof(CancellationState))) CancellationState();
  }

  // Relaxed: the caller already holds a reference, so the count cannot reach zero
  // concurrently; nothing is published by taking one more.
  void addRef() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // acq_rel: release publishes this holder's uses of the state; the last holder acquires
  // all of them before freeing it. The acquire load first: a holder that reads 1 is the
  // only one (only a holder can take another reference), so it frees the state without a
  // read-modify-write; it synchronises with every earlier release (their fetch_subs).
  void release() noexcept {
    if (refs_.load(std::memory_order_acquire) == 1 ||
        refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      destroy();
    }
  }
  // Relaxed: as addRef (the caller holds a source).
  void addSource() noexcept { sources_.fetch_add(1, std::memory_order_relaxed); }
  // Release: pairs with the acquire in canBeCancelled().
  void releaseSource() noexcept { sources_.fetch_sub(1, std::memory_order_release); }
  // A source's end: releaseSource() then release(), or, when this is the only reference
  // left (acquire, as in release()), nobody can ask canBeCancelled() any more: freed at once.
  void releaseSourceAndRef() noexcept {
    if (refs_.load(std::memory_order_acquire) == 1) {
      destroy();
      return;
    }
    releaseSource();
    release();
  }

  // Acquire: pairs with the release store in requestCancellation(), so what the
  // requester wrote before requesting is visible to whoever sees the request.
  bool requested() const noexcept { return requested_.load(std::memory_order_acquire); }

  // Once no source is left and none requested cancellation, none ever will.
  bool canBeCancelled() const noexcept {
    // Acquire: pairs with releaseSource().
    return requested() || sources_.load(std::memory_order_acquire) != 0;
  }

  // noexcept: callbacks must not throw (a throwing one aborts the process with a message
  // naming the misuse); the lock and the futex wake cannot fail.
  bool requestCancellation() noexcept;

  // Links `callback` unless cancellation was already requested (then returns false and
  // the caller runs it). On success the callback holds a reference to the state.
  bool tryAdd(CancellationCallback* callback) noexcept;
  // Unlinks `callback`, or waits until it has finished running on another thread.
  void remove(CancellationCallback* callback) noexcept;

 private:
  CancellationState() = default;
  ~CancellationState() = default;

  void destroy() noexcept {
    this->~CancellationState();
    deallocateFrame(this, sizeof(CancellationState));
  }

  void unlink(CancellationCallback* callback) noexcept;

  std::atomic<std::size_t> refs_{1};
  std::atomic<std::size_t> sources_{1};
  std::atomic<bool> requested_{false};
  SpinLock lock_;
  // Bumped (under lock_) each time a callback returns while a destructor waits for one;
  // what those destructors wait on (std::atomic::wait: a futex, nothing to construct).
  std::atomic<std::uint32_t> callbackDone_{0};
  std::uint32_t waiters_ = 0;                // guarded by lock_
  CancellationCallback* head_ = nullptr;     // guarded by lock_
  CancellationCallback* running_ = nullptr;  // guarded by lock_
  std::thread::id signaller_;                // guarded by lock_
};

class OwnedCancellationSource;

// What a token's reference to a CancellationState takes and gives back.
struct TokenHold {
  static void take(CancellationState& state) noexcept { state.addRef(); }
  static void giveBack(CancellationState& state) noexcept { state.release(); }
};
// What a source's does: a reference, and the source count that canBeCancelled() reads.
struct SourceHold {
  static void take(CancellationState& state) noexcept {
    state.addRef();
    state.addSource();
  }
  static void giveBack(CancellationState& state) noexcept { state.releaseSourceAndRef(); }
};

// A counted hold on a CancellationState (Hold: TokenHold or SourceHold), what
// CancellationToken and CancellationSource hold: copying takes another, destroying or
// assigning over gives it back, moving hands it over (leaving the moved-from empty).
// Thread safety: a single-owner value; copies may be used on any threads.
template <class Hold>
class CancellationStateRef {
 public:
  constexpr CancellationStateRef() noexcept = default;
  // Adopts a hold the caller already took.
  explicit CancellationStateRef(CancellationState* state) noexcept : state_(state) {}
  CancellationStateRef(const CancellationStateRef& other) noexcept : state_(other.state_) {
    if (state_ != nullptr) Hold::take(*state_);
  }
  CancellationStateRef(CancellationStateRef&& other) noexcept
      : state_(std::exchange(other.state_, nullptr)) {}
  CancellationStateRef& operator=(CancellationStateRef other) noexcept {
    std::swap(state_, other.state_);
    return *this;
  }
  ~CancellationStateRef() {
    if (state_ != nullptr) Hold::giveBack(*state_);
  }

  explicit operator bool() const noexcept { return state_ != nullptr; }
  CancellationState* get() const noexcept { return state_; }
  CancellationState* operator->() const noexcept { return state_; }
  // Gives the hold up without giving it back: the caller must.
  CancellationState* release() noexcept { return std::exchange(state_, nullptr); }

 private:
  CancellationState* state_ = nullptr;
};

// noexcept: reports the misuse and aborts (a callback has nobody to throw to).
[[noreturn]] inline void abortThrowingCancellationCallback() noexcept {
  std::fprintf(stderr,
               "weft: a CancellationCallback's onCancel threw; cancellation callbacks must "
               "not throw (they run inside requestCancellation())\n");
  std::abort();
}

}  // namespace detail

}  // namespace weft
