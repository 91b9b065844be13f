#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "weft/coro/detail/cancellation_state.h"
#include "weft/coro/detail/frame_allocator.h"
#include "weft/coro/detail/spin_lock.h"
#include "weft/executors/executor.h"

// Cooperative cancellation: a CancellationSource requests, CancellationTokens observe,
// CancellationCallbacks react.
//
// The model (docs/concurrency.md, "Cancellation"):
//  - Cancellation is a request, never a forced stop. Work that is cancelled finishes by
//    itself, usually by letting OperationCancelled propagate from the await that noticed.
//  - Every Lazy/Task carries a token (by default one that can never be cancelled). A Lazy
//    awaited inside another inherits the awaiter's token, exactly as it inherits the
//    executor; `withCancellation(token, lazy)` (coro/with_cancellation.h) binds another;
//    `co_await currentCancellationToken()` reads it.
//  - Cancellable awaitables (sleep, lock waits, channel operations, select...) expose
//    `coAwait(Executor*, const CancellationToken&)`; the promise hands them its token. They
//    register a CancellationCallback while suspended and, when it fires, resume their
//    waiter with OperationCancelled. An awaitable that completed before the request
//    completes normally: cancellation never undoes work that is done.

namespace weft {

// What a cancelled operation throws from its co_await (or await() in a fiber).
//
// Example:
//   try { co_await weft::sleep(1s); } catch (const weft::OperationCancelled&) { ... }
class OperationCancelled : public std::runtime_error {
 public:
  OperationCancelled() : std::runtime_error("weft: operation cancelled") {}
  explicit OperationCancelled(const std::string& what) : std::runtime_error(what) {}
};

class CancellationToken;
class CancellationSource;
class CancellationCallback;

// CancellationToken: observes whether cancellation was requested on its source.
//
// A cheap copyable handle (one pointer; copying adds a reference). A default-constructed
// token has no source and can never be cancelled; checking it costs a null test.
//
// Errors: throwIfCancellationRequested() throws OperationCancelled.
// Thread safety: every member may be called concurrently from any thread; distinct
// copies may be used and destroyed independently.
//
// Example:
//   weft::CancellationSource source;
//   weft::CancellationToken token = source.token();
//   source.requestCancellation();
//   assert(token.isCancellationRequested());
class CancellationToken {
 public:
  // A token that can never be cancelled.
  constexpr CancellationToken() noexcept = default;

  // True once requestCancellation() was called on the source. Lock-free: one atomic load
  // (none for a token without a source).
  bool isCancellationRequested() const noexcept { return state_ && state_->requested(); }

  // False when cancellation can never be requested: no source, or every source was
  // destroyed without requesting it. Awaitables use this to skip registering callbacks.
  bool canBeCancelled() const noexcept { return state_ && state_->canBeCancelled(); }

  // Throws OperationCancelled if cancellation was requested.
  void throwIfCancellationRequested() const {
    if (isCancellationRequested()) throw OperationCancelled();
  }

  // True when both tokens observe the same source (or both have none).
  friend bool operator==(const CancellationToken& a, const CancellationToken& b) noexcept {
    return a.state_.get() == b.state_.get();
  }

 private:
  friend class CancellationSource;
  friend class CancellationCallback;
  friend class detail::OwnedCancellationSource;

  // Adopts one reference the caller already took.
  explicit CancellationToken(detail::CancellationState* state) noexcept : state_(state) {}

  detail::CancellationStateRef<detail::TokenHold> state_;
};

// CancellationSource: requests cancellation of every token made from it.
//
// Copies share one state (copying adds a reference): cancelling any copy cancels all.
// When the last copy is destroyed without a request, its tokens report
// canBeCancelled() == false and their callbacks never run. A moved-from source is empty:
// its token() can never be cancelled and requestCancellation() returns false.
//
// Errors: the constructor throws std::bad_alloc if it cannot allocate the state.
// Thread safety: every member may be called concurrently from any thread. Callbacks run
// on the thread that calls requestCancellation(), one after another, before it returns.
//
// Example:
//   weft::CancellationSource source;
//   auto work = weft::withCancellation(source.token(), fetchForever());
//   // ... later, from any thread:
//   source.requestCancellation();  // fetchForever's pending await throws OperationCancelled
class CancellationSource {
 public:
  CancellationSource() : state_(detail::CancellationState::create()) {}

  // A token observing this source.
  CancellationToken token() const noexcept {
    if (!state_) return CancellationToken();
    state_->addRef();
    return CancellationToken(state_.get());
  }

  // Requests cancellation: from now on every token reports it, and every registered
  // callback runs, on this thread, before this returns. True only for the first request
  // (of all copies of this source); later calls return false at once, possibly before
  // the first call's callbacks have finished.
  // noexcept: see detail::CancellationState::requestCancellation.
  bool requestCancellation() noexcept { return state_ && state_->requestCancellation(); }

  bool isCancellationRequested() const noexcept { return state_ && state_->requested(); }

 private:
  detail::CancellationStateRef<detail::SourceHold> state_;
};

// CancellationCallback: runs `onCancel()` once when cancellation is requested on a token,
// for as long as the registration lives. RAII: not copyable, not movable.
//
// Semantics:
//  - If cancellation was already requested, onCancel runs immediately, inside the
//    constructor, on the constructing thread.
//  - Otherwise it runs on the thread that calls requestCancellation(), unless the
//    registration is destroyed first (then it never runs).
//  - If the token can never be cancelled, nothing is registered and onCancel is dropped.
//  - The destructor deregisters. If onCancel is running on another thread right then, it
//    waits for it to finish, so after the destructor nothing of the registration is in
//    use. onCancel may destroy its own registration (the destructor then returns at once;
//    onCancel must not touch its captures afterwards), destroy other registrations, or
//    register new ones, without deadlock.
//
// Preconditions: onCancel must not throw (weft prints a message and aborts if it does);
// it should be short (it runs inside requestCancellation()). Do not destroy, from inside
// a callback of token A, a registration on token B whose callback is, at that moment,
// destroying a registration on A from another thread: they would wait for each other.
// Errors: the constructor throws std::bad_alloc, or what copying/moving onCancel throws,
// if it must store a callable of more than 32 bytes (then nothing was registered).
// Thread safety: construction and destruction of distinct registrations, and
// requestCancellation(), may run concurrently on any threads.
//
// Example:
//   weft::CancellationCallback onCancel(token, [&] { socket.close(); });
//   co_await socket.read(buffer);  // close() makes the read fail promptly
class CancellationCallback {
 public:
  template <class F>
    requires std::invocable<std::decay_t<F>&> && std::constructible_from<std::decay_t<F>, F&&>
  CancellationCallback(const CancellationToken& token, F&& onCancel) {
    using Fn = std::decay_t<F>;
    detail::CancellationState* state = token.state_.get();
    if (state == nullptr || !state->canBeCancelled()) return;
    if (state->requested()) {
      runNow(onCancel);
      return;
    }
    if constexpr (kStoredInline<Fn>) {
      ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(onCancel));
      invoke_ = &invokeStored<Fn, true>;
      if constexpr (!std::is_trivially_destructible_v<Fn>) destroy_ = &destroyStored<Fn, true>;
    } else {
      *reinterpret_cast<Fn**>(storage_) = new Fn(std::forward<F>(onCancel));
      invoke_ = &invokeStored<Fn, false>;
      destroy_ = &destroyStored<Fn, false>;
    }
    if (state->tryAdd(this)) {
      state_ = state;
    } else {
      invoke_(this);  // cancellation was requested meanwhile: run it here, once
    }
  }

  CancellationCallback(const CancellationCallback&) = delete;
  CancellationCallback& operator=(const CancellationCallback&) = delete;

  ~CancellationCallback() {
    if (state_ != nullptr) {
      state_->remove(this);
      state_->release();
    }
    if (destroy_ != nullptr) destroy_(this);
  }

 private:
  friend class detail::CancellationState;

  // A callback of up to four pointers' size and a pointer's alignment is kept here (an
  // awaiter's `[this]` is one pointer); a larger or more aligned one on the heap. The
  // pointer alignment keeps the registration at 72 bytes, where max_align_t's would pad
  // it to 80, in every awaiter that holds one.
  static constexpr std::size_t kInlineBytes = 4 * sizeof(void*);
  template <class Fn>
  static constexpr bool kStoredInline =
      sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(void*);

  template <class Fn>
  static Fn& stored(CancellationCallback* self) noexcept {
    if constexpr (kStoredInline<Fn>) {
      return *std::launder(reinterpret_cast<Fn*>(self->storage_));
    } else {
      return **reinterpret_cast<Fn**>(self->storage_);
    }
  }

  // noexcept: onCancel must not throw; misuse is reported, then the process aborts.
  template <class Fn>
  static void runNow(Fn& onCancel) noexcept {
    try {
      onCancel();
    } catch (...) {
      detail::abortThrowingCancellationCallback();
    }
  }

  // `self` may be destroyed by the callback itself: nothing here touches it afterwards.
  template <class Fn, bool kInline>
  static void invokeStored(CancellationCallback* self) noexcept {
    runNow(stored<Fn>(self));
  }

  template <class Fn, bool kInline>
  static void destroyStored(CancellationCallback* self) noexcept {
    if constexpr (kInline) {
      stored<Fn>(self).~Fn();
    } else {
      delete &stored<Fn>(self);
    }
  }

  // Non-null while this registration is (or was, until its callback ran) linked in a
  // state; holds one reference to it.
  detail::CancellationState* state_ = nullptr;
  // The intrusive list, guarded by the state's mutex. `prevNext_` points at the pointer
  // that points at this node; null when not linked.
  CancellationCallback* next_ = nullptr;
  CancellationCallback** prevNext_ = nullptr;
  void (*invoke_)(CancellationCallback*) noexcept = nullptr;
  void (*destroy_)(CancellationCallback*) noexcept = nullptr;
  alignas(void*) unsigned char storage_[kInlineBytes];
};

namespace detail {

inline void CancellationState::unlink(CancellationCallback* callback) noexcept {
  *callback->prevNext_ = callback->next_;
  if (callback->next_ != nullptr) callback->next_->prevNext_ = callback->prevNext_;
  callback->next_ = nullptr;
  callback->prevNext_ = nullptr;
}

inline bool CancellationState::tryAdd(CancellationCallback* callback) noexcept {
  std::lock_guard<SpinLock> lock(lock_);
  // Relaxed: requested_ is written under lock_, which we hold.
  if (requested_.load(std::memory_order_relaxed)) return false;
  callback->next_ = head_;
  callback->prevNext_ = &head_;
  if (head_ != nullptr) head_->prevNext_ = &callback->next_;
  head_ = callback;
  addRef();
  return true;
}

inline void CancellationState::remove(CancellationCallback* callback) noexcept {
  std::unique_lock<SpinLock> lock(lock_);
  if (callback->prevNext_ != nullptr) {
    unlink(callback);  // never ran, never will
    return;
  }
  // Unlinked by the signaller: finished, or running now.
  if (running_ != callback) return;
  if (signaller_ == std::this_thread::get_id()) return;  // destroyed from inside onCancel
  ++waiters_;
  while (running_ == callback) {
    // Relaxed: read under the lock, which orders it with the signaller's bump; the wait
    // returns at once if the counter has moved since.
    const std::uint32_t seen = callbackDone_.load(std::memory_order_relaxed);
    lock.unlock();
    callbackDone_.wait(seen, std::memory_order_relaxed);
    lock.lock();  // acquires what the signaller did before it released the lock
  }
  --waiters_;
}

inline bool CancellationState::requestCancellation() noexcept {
  std::unique_lock<SpinLock> lock(lock_);
  // Relaxed: requested_ is written only under lock_, which we hold.
  if (requested_.load(std::memory_order_relaxed)) return false;
  // Release: pairs with the acquire in requested(), publishing what the requester did
  // before requesting.
  requested_.store(true, std::memory_order_release);
  signaller_ = std::this_thread::get_id();
  while (head_ != nullptr) {
    CancellationCallback* callback = head_;
    unlink(callback);
    running_ = callback;
    lock.unlock();
    // The callback may destroy its own registration: it is not touched after this call.
    callback->invoke_(callback);
    lock.lock();
    running_ = nullptr;
    if (waiters_ != 0) {
      // Relaxed: the waiters read it under the lock. Woken outside the lock, so that they
      // do not spin on it; the state stays alive (whoever requests holds a reference).
      callbackDone_.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      callbackDone_.notify_all();
      lock.lock();
    }
  }
  return true;
}

// A CancellationSource and the token its owner hands to the coroutines it runs (by
// address), in one object holding one reference: a CancellationSource plus a copy of its
// token() would take two, one of them an atomic increment. For weft's own algorithms
// (collectAny, collectAllFailFast, withTimeout), whose frame outlives every coroutine
// that points at the token. Tokens copied from it hold references of their own, as usual.
// Errors: the constructor throws std::bad_alloc. Thread safety: as CancellationSource.
class OwnedCancellationSource {
 public:
  OwnedCancellationSource() : token_(CancellationState::create()) {}
  OwnedCancellationSource(const OwnedCancellationSource&) = delete;
  OwnedCancellationSource& operator=(const OwnedCancellationSource&) = delete;
  ~OwnedCancellationSource() { token_.state_.release()->releaseSourceAndRef(); }

  const CancellationToken& token() const noexcept { return token_; }
  // As CancellationSource::requestCancellation: true for the first request only.
  bool requestCancellation() noexcept { return token_.state_->requestCancellation(); }
  bool isCancellationRequested() const noexcept { return token_.state_->requested(); }

 private:
  CancellationToken token_;
};

// The token of a Lazy that nobody gave one: never cancelled. Every promise points here
// until a token is bound or inherited (constinit: no initialisation guard on access).
inline constinit const CancellationToken kNoCancellationToken{};

struct CurrentCancellationTokenAwaiter {
  CancellationToken token;
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  CancellationToken await_resume() noexcept { return std::move(token); }
};
struct CurrentCancellationTokenAwaitable {
  CurrentCancellationTokenAwaiter coAwait(Executor*,
                                          const CancellationToken& token) const noexcept {
    return {token};
  }
  // Outside a weft coroutine there is no token.
  CurrentCancellationTokenAwaiter operator co_await() const noexcept { return {}; }
};

}  // namespace detail

// kNoCancellationToken: a token that is never cancelled, alive for the whole program: the
// token of a Lazy that nobody gave one, and what a cancellation-aware awaitable's
// `operator co_await` (awaited outside a weft coroutine) hands its awaiter.
// Example:
//   Awaiter operator co_await() const {
//     return Awaiter(*this, nullptr, weft::kNoCancellationToken);
//   }
using detail::kNoCancellationToken;

// What currentCancellationToken() returns: an awaitable that resumes with a
// CancellationToken.
using CurrentCancellationTokenOperation = detail::CurrentCancellationTokenAwaitable;

// `co_await currentCancellationToken()`: a copy of the token the current Lazy/Task
// carries (bound with withCancellation, inherited from its awaiter, or, by default, one
// that can never be cancelled). Never suspends. From a fiber, `await()` gives the
// fiber's token.
//
// Errors: none. Thread safety: reads the coroutine's own state.
//
// Example:
//   weft::CancellationToken token = co_await weft::currentCancellationToken();
//   for (auto& item : batch) { token.throwIfCancellationRequested(); process(item); }
inline CurrentCancellationTokenOperation currentCancellationToken() noexcept { return {}; }

}  // namespace weft
