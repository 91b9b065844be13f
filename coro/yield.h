#pragma once

#include <coroutine>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"

namespace weft {

namespace detail {
class YieldAwaiter {
 public:
  YieldAwaiter(Executor* executor, const CancellationToken& token) noexcept
      : executor_(executor), token_(&token) {}
  YieldAwaiter(const YieldAwaiter&) = delete;
  YieldAwaiter& operator=(const YieldAwaiter&) = delete;
  // A yield cannot be withdrawn: once await_suspend has queued the coroutine, its
  // resumption is under way, so destroying it while it waits in the queue is the
  // caller's race (reported, fatal: docs/concurrency.md, "Destroying a suspended
  // coroutine").
  ~YieldAwaiter() {
    if (queued_) [[unlikely]]
      abortDestroyedWhileResuming("yield()");
  }
  // With no executor there is nowhere to reschedule to: continue at once (await_resume
  // still checks the token). Cancelled already: throws without a round trip through the
  // queue. The token check is a null test for a token that can never be cancelled.
  bool await_ready() const {
    if (executor_ == nullptr) return true;
    token_->throwIfCancellationRequested();
    return false;
  }
  // Throws ExecutorShutDown (the coroutine then continues with that exception). queued_
  // is set first: once scheduled, the coroutine may run on another thread at once.
  void await_suspend(std::coroutine_handle<> self) {
    queued_ = true;
    try {
      executor_->schedule(self);
    } catch (...) {
      queued_ = false;
      throw;
    }
  }
  // Cancelled while queued (or, without an executor, at all): throws.
  void await_resume() {
    queued_ = false;
    token_->throwIfCancellationRequested();
  }

 private:
  Executor* executor_;
  bool queued_ = false;  // between a successful schedule and the resumption
  // The awaiting coroutine's (or fiber's) token: outlives the await (see
  // CancellationAwareAwaitable).
  const CancellationToken* token_;
};
struct YieldAwaitable {
  // Cancellation-aware, so that a Lazy/Task and a fiber's await() hand it their token.
  YieldAwaiter coAwait(Executor* executor, const CancellationToken& token) const noexcept {
    return YieldAwaiter(executor, token);
  }
  YieldAwaiter operator co_await() const noexcept {
    return YieldAwaiter(nullptr, kNoCancellationToken);
  }
};
}  // namespace detail

// What yield() returns: an awaitable that reschedules the coroutine, resuming with void.
using YieldOperation = detail::YieldAwaitable;

// `co_await yield()`: reschedules the current Lazy/Task at the back of its executor's
// queue, letting other queued work run first (on a ThreadPool, work is FIFO per worker).
// In a coroutine without an executor it does not suspend. `weft::await(yield())` does the
// same in a fiber.
//
// Cancellation: a yield is a cancellation point. It throws OperationCancelled when the
// coroutine's (or fiber's) token is cancelled: before rescheduling if the cancellation
// came first (nothing is queued then), or when the coroutine is resumed from the queue if
// it came meanwhile. A loop that yields therefore ends once cancelled. A coroutine whose
// token can never be cancelled pays one null test per check.
//
// Errors: OperationCancelled (above); ExecutorShutDown from the co_await if the executor
// is shut down.
// Thread safety: the coroutine may continue on another thread of the same executor.
//
// Example:
//   for (auto& item : batch) {
//     process(item);
//     co_await weft::yield();  // also where a cancelled batch stops
//   }
inline YieldOperation yield() noexcept { return {}; }

}  // namespace weft
