#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "weft/coro/detail/sync_waiter.h"
#include "weft/coro/event.h"
#include "weft/executors/executor.h"

namespace weft {

class Latch;

// Thrown by Latch::countDown (and arriveAndWait) when it would take the count below zero:
// the latch is left unchanged.
class LatchUnderflow : public std::logic_error {
 public:
  LatchUnderflow(std::ptrdiff_t count, std::ptrdiff_t n)
      : std::logic_error("weft: Latch::countDown(" + std::to_string(n) +
                         ") on a Latch whose count is " + std::to_string(count) +
                         " (a latch cannot count below zero)") {}
};

namespace detail {

// The awaiter of `co_await latch.arriveAndWait(n)`: counts down when the await starts,
// then waits like `latch.wait()`.
class LatchArriveAwaiter : public EventWaitAwaiter {
 public:
  inline LatchArriveAwaiter(Latch& latch, std::ptrdiff_t n, Executor* waiterExecutor,
                            const CancellationToken* token) noexcept;
  // Counts down first (so that it counts down exactly once, when awaited). Throws
  // LatchUnderflow from the co_await.
  inline bool await_ready();

  // For task dumps (coro/detail/wait_note.h).
  void describeWait(std::string& out) const { appendWait(out, "Latch::arriveAndWait", &latch_); }

 private:
  Latch& latch_;
  std::ptrdiff_t n_;
};

}  // namespace detail

// Latch: a single-use countdown. Coroutines and fibers wait until the count reaches
// zero; then every waiter is released, once, and later waits complete at once.
//
// Semantics:
//  - countDown(n) subtracts n; the call that reaches zero releases every waiter (in the
//    order they started waiting; a waiter that belongs to an executor is scheduled on
//    it, one with no executor is resumed inline on that thread, through a per-thread
//    trampoline). A latch constructed with 0 is already released.
//  - `co_await latch.wait()` waits for zero; tryWait() tests for it without waiting;
//    `co_await latch.arriveAndWait(n)` is countDown(n) then wait().
//  - What each thread wrote before its countDown is visible to every waiter after its
//    wait.
//
// Preconditions: the Latch outlives its waiters.
// Errors: constructing with a negative count throws std::invalid_argument; counting down
// below zero (or by a negative n) throws LatchUnderflow and leaves the count unchanged
// (from arriveAndWait, the co_await throws it). A wait is cancellable: cancelled before
// the release, the co_await throws OperationCancelled (arriveAndWait has counted down
// all the same). Destroying a Latch that coroutines wait on prints a message and aborts.
// Thread safety: every member may be called concurrently from any thread.
//
// Example:
//   weft::Latch done(3);
//   for (int i = 0; i < 3; ++i) spawnWorker([&] { work(); done.countDown(); });
//   co_await done.wait();
class Latch {
 public:
  // What wait() and arriveAndWait() return (awaitables).
  using WaitOperation = Event::WaitOperation;
  using ArriveAndWaitOperation =
      detail::SyncOperation<detail::LatchArriveAwaiter, Latch&, std::ptrdiff_t>;

  explicit Latch(std::ptrdiff_t count) : count_(checkedInitial(count)), released_(count == 0) {}
  Latch(const Latch&) = delete;
  Latch& operator=(const Latch&) = delete;
  ~Latch() {
    if (released_.hasWaiters()) {
      detail::abortMisuse("Latch destroyed while coroutines are waiting on it");
    }
  }

  // Subtracts `n` (default 1); releases the waiters when the count reaches zero.
  void countDown(std::ptrdiff_t n = 1) {
    // relaxed: only a first guess for the compare-exchange below.
    std::ptrdiff_t count = count_.load(std::memory_order_relaxed);
    do {
      if (n < 0 || n > count) throw LatchUnderflow(count, n);
      // acq_rel: release publishes this thread's writes; the decrement that reaches zero
      // acquires all earlier ones (they form one release sequence) before it sets the
      // event, which then publishes them all to the waiters. relaxed on failure: retried.
    } while (!count_.compare_exchange_weak(count, count - n, std::memory_order_acq_rel,
                                           std::memory_order_relaxed));
    if (count == n && n != 0) released_.set();
  }

  // True once the count has reached zero and the waiters are released. acquire (inside
  // isSet): a caller that sees true sees every thread's writes before its countDown.
  bool tryWait() const noexcept { return released_.isSet(); }

  // Awaitable: completes once the count is zero (at once if it is).
  WaitOperation wait() noexcept {
    return released_.wait();
  }

  // Awaitable: countDown(n), then wait().
  ArriveAndWaitOperation arriveAndWait(std::ptrdiff_t n = 1) noexcept {
    return ArriveAndWaitOperation(*this, n);
  }

 private:
  friend class detail::LatchArriveAwaiter;

  static std::ptrdiff_t checkedInitial(std::ptrdiff_t count) {
    if (count < 0) throw std::invalid_argument("weft: Latch constructed with a negative count");
    return count;
  }

  std::atomic<std::ptrdiff_t> count_;
  Event released_;  // set when count_ reaches zero; its waiters are the latch's
};

namespace detail {

LatchArriveAwaiter::LatchArriveAwaiter(Latch& latch, std::ptrdiff_t n,
                                       Executor* waiterExecutor,
                                       const CancellationToken* token) noexcept
    : EventWaitAwaiter(latch.released_, waiterExecutor, token), latch_(latch), n_(n) {}

bool LatchArriveAwaiter::await_ready() {
  latch_.countDown(n_);
  return EventWaitAwaiter::await_ready();
}

}  // namespace detail
}  // namespace weft
