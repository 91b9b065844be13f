#pragma once

#include <atomic>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft::detail {

// OneShotResult<T, Owner>: the one-shot result shared by work started concurrently (a
// spawned task, a spawned fiber) and the single handle that may await it (JoinHandle,
// FiberFuture). It holds the result (a value or an exception), the state machine
//
//   kRunning --await_suspend--> kAwaiting --publish--> kDone  (the awaiter is resumed)
//   kRunning --publish--> kDone --await--> the awaiter takes the result and frees it
//   kRunning --detach--> kDetached --publish--> freed by the producer
//   kDone --detach--> freed by the handle
//
// and its one awaiter. The state is freed by whichever side is done with it last: the
// producer, which publishes once, or the consumer (the handle, then its awaiter), which
// awaits or detaches once.
//
// `Owner` is the concrete state (CRTP: `final`, derived from OneShotResult<T, Owner>); it
// holds what its producer needs besides the result, and declares:
//   static constexpr const char* kHandleName;  // "JoinHandle": named by the awaited-twice abort
//   static constexpr const char* kAwaitName;   // "co_await of a JoinHandle"
//   static constexpr const char* kClaimedBy;   // the destroyed-while-resuming note, or nullptr
//   void onLostResult() noexcept;  // done and detached: report an exception nobody awaits
// It is a CompletionSink, so that the producer's Lazy or driver completes into it.
//
// Thread safety: publish() and the consumer's detach() or await may run concurrently on
// any threads; each side acts once. Exposed to other modules as weft::runtime::OneShotResult
// (coro/runtime_hooks.h).
template <class T, class Owner>
class OneShotResult : public CompletionSink {
 public:
  using ValueType = T;
  enum : int { kRunning, kAwaiting, kDone, kDetached };

  // True once the result is published. noexcept: one atomic load.
  bool done() const noexcept {
    // acquire: pairs with publish(); a true answer lets the caller read the result.
    return state_.load(std::memory_order_acquire) == kDone;
  }

  // The handle is dropped unawaited: frees the state if the result is published (after
  // onLostResult()), else lets the producer free it. noexcept: called from destructors.
  void detach() noexcept {
    // acq_rel: acquire the result if it is published; release nothing in particular but
    // pairs with publish()'s exchange so that exactly one side frees.
    if (state_.exchange(kDetached, std::memory_order_acq_rel) == kDone) finishDetached();
  }

  // The result: the producer stores it before publish(); the awaiter takes it after.
  Try<T> result_;

 protected:
  explicit OneShotResult(OnComplete onComplete, const char* traceLabel = nullptr) noexcept
      : CompletionSink(onComplete, traceLabel) {}
  ~OneShotResult() = default;

  // The producer's end, from its final suspend: marks the result published and returns
  // the coroutine to transfer to: the awaiter (through its executor), or
  // std::noop_coroutine(). Frees the state if the handle was detached. May free the
  // state: touch nothing of it afterwards. noexcept: a final-suspend path.
  std::coroutine_handle<> publish() noexcept {
    // acq_rel: release publishes the result; acquire sees the awaiter's handle (written
    // before its kAwaiting exchange) or the detach.
    const int previous = state_.exchange(kDone, std::memory_order_acq_rel);
    if (previous == kAwaiting) {
      // The awaiter may free the state as soon as it runs: read what we need first.
      std::coroutine_handle<> awaiter = awaiter_;
      Executor* executor = awaiterExecutor_;
      if (executor == nullptr) return awaiter;
      return resumeOnExecutor(executor, awaiter);
    }
    if (previous == kDetached) finishDetached();
    return std::noop_coroutine();
  }

  // publish() from outside any coroutine's resumption (a destructor's path): the awaiter
  // is scheduled on its executor, never transferred to (inline only when it has none).
  // noexcept: as publish(); an executor that refuses is fatal (abortExecutorGone).
  void publishAndResume() noexcept {
    // acq_rel: as in publish().
    const int previous = state_.exchange(kDone, std::memory_order_acq_rel);
    if (previous == kAwaiting) {
      resumeWaiterOn(awaiterExecutor_, awaiter_);
      return;
    }
    if (previous == kDetached) finishDetached();
  }

 private:
  template <class State>
  friend class OneShotAwaiter;

  void finishDetached() noexcept {
    Owner* owner = static_cast<Owner*>(this);
    owner->onLostResult();
    delete owner;
  }

  std::coroutine_handle<> awaiter_;      // written before kRunning -> kAwaiting
  Executor* awaiterExecutor_ = nullptr;  // idem
  std::atomic<int> state_{kRunning};
};

// OneShotRef<State>: the handle's share of a OneShotResult (what JoinHandle and
// FiberFuture hold): owning, move-only; dropping it detaches.
// Thread safety: a single-owner value.
template <class State>
class OneShotRef {
 public:
  OneShotRef() noexcept = default;
  explicit OneShotRef(State* state) noexcept : state_(state) {}

  bool valid() const noexcept { return state_ != nullptr; }
  bool ready() const noexcept { return state_ != nullptr && state_->done(); }
  State* get() const noexcept { return state_.get(); }

  // Detaches (frees the state if the result is published). noexcept: a destructor's path.
  void reset() noexcept { state_.reset(); }

  // Hands the state to an awaiter, leaving this empty: a second await finds it empty and
  // aborts, naming the handle, instead of reading a result already moved out.
  State* takeForAwait() noexcept {
    if (state_ == nullptr) [[unlikely]] abortAwaitedTwice();
    return state_.release();
  }

 private:
  // What dropping the handle's share does: the owner's deleter.
  struct Detach {
    void operator()(State* state) const noexcept { state->detach(); }
  };

  [[noreturn]] static void abortAwaitedTwice() noexcept {
    std::fprintf(stderr,
                 "weft: co_await on an empty %s (already awaited, detached or moved-from; a "
                 "%s is awaited once)\n",
                 State::kHandleName, State::kHandleName);
    std::abort();
  }

  std::unique_ptr<State, Detach> state_;
};

// OneShotAwaiter<State>: the await of a OneShotResult, owning the state from the co_await
// on. A handle's Awaiter derives from it and adds what is its own (cancellation, async
// backtraces) before calling these.
// Errors: await_resume rethrows the producer's exception. A coroutine destroyed while it
// waits here detaches (the producer frees the state); once the result was published and
// its resumption is under way, that is reported and fatal (abortDestroyedWhileResuming).
// Thread safety: one awaiting coroutine; the producer may publish on any thread.
template <class State>
class OneShotAwaiter {
  using Result = typename State::OneShotResult;

 public:
  OneShotAwaiter(State* state, Executor* executor) noexcept : state_(state), executor_(executor) {}
  // Only before the await starts (getAwaiter, ViaAwaiter and fiber await() move it).
  OneShotAwaiter(OneShotAwaiter&& other) noexcept
      : state_(std::exchange(other.state_, nullptr)), executor_(other.executor_) {}
  OneShotAwaiter& operator=(OneShotAwaiter&&) = delete;
  // Lets go of the state as the handle's destructor would (detach), or, destroyed while
  // waiting, detaches so that the producer resumes nobody.
  ~OneShotAwaiter() {
    if (state_ == nullptr) return;
    if (suspended_) [[unlikely]] {
      // Destroyed while waiting: detach. If the result was published first, publish() has
      // claimed us and our resumption is under way (the caller's race).
      // acq_rel: as in detach().
      if (state_->state_.exchange(Result::kDetached, std::memory_order_acq_rel) ==
          Result::kDone) {
        abortDestroyedWhileResuming(State::kAwaitName, State::kClaimedBy);
      }
      return;  // the producer frees the state
    }
    state_->detach();
  }

  // noexcept: one atomic load.
  bool await_ready() const noexcept { return state_->done(); }
  // noexcept: three stores and a compare-exchange.
  bool await_suspend(std::coroutine_handle<> awaiting) noexcept {
    state_->awaiter_ = awaiting;
    state_->awaiterExecutor_ = executor_;
    // Set before the exchange: once it succeeds we may be resumed on another thread, and
    // nothing of the awaiter may be written here afterwards.
    suspended_ = true;
    int expected = Result::kRunning;
    // acq_rel: release publishes the handle to publish(); on failure (the result was just
    // published) acquire makes it visible, and we continue without suspending.
    if (state_->state_.compare_exchange_strong(expected, Result::kAwaiting,
                                               std::memory_order_acq_rel,
                                               std::memory_order_acquire)) {
      return true;
    }
    suspended_ = false;
    return false;
  }
  // Takes the result and frees the state.
  typename State::ValueType await_resume() {
    using T = typename State::ValueType;
    suspended_ = false;
    struct Free {
      State* state;
      ~Free() { delete state; }
    } free{std::exchange(state_, nullptr)};
    if constexpr (std::is_void_v<T>) {
      free.state->result_.value();
    } else if constexpr (std::is_reference_v<T>) {
      return free.state->result_.value();
    } else {
      return std::move(free.state->result_).value();
    }
  }

 protected:
  State* state() const noexcept { return state_; }
  bool suspended() const noexcept { return suspended_; }

 private:
  State* state_;
  Executor* executor_;
  bool suspended_ = false;  // between a successful await_suspend and await_resume
};

}  // namespace weft::detail
