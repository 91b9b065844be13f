#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/try.h"
#include "weft/executors/blocking_pool.h"
#include "weft/executors/executor.h"
#include "weft/io/detail/pool_shutdown_guard.h"

namespace weft {

namespace detail {

// What blocking() returns: the awaitable, defined below the API with its awaiter.
template <class Fn>
class BlockingAwaitable;

// What blocking() accepts: a callable taking no arguments, movable into the awaiter.
template <class F>
concept BlockingCallable =
    std::invocable<std::decay_t<F>> && std::constructible_from<std::decay_t<F>, F&&> &&
    std::move_constructible<std::decay_t<F>>;

}  // namespace detail

// What blocking(fn) returns for a callable of type F: an awaitable that resumes with fn's
// result (BlockingOperation<std::decay_t<F>>).
template <class Fn>
using BlockingOperation = detail::BlockingAwaitable<Fn>;

// `co_await blocking(fn)`: runs `fn()` on a thread of BlockingPool::defaultPool() (or of
// `pool`), never on the awaiting coroutine's thread, and returns its value or rethrows
// its exception. For calls that block: legacy APIs, getaddrinfo, file I/O. Like tokio's
// spawn_blocking. From a fiber: `weft::await(weft::blocking(fn))`.
//
// Semantics:
//  - fn is moved (or copied) into the awaiter, invoked once as an rvalue on the pool's
//    thread, and destroyed with the awaiter (after the co_await, on the resuming thread).
//    Its result type may be void or move-only; a reference result is rejected at compile
//    time (return a value, a pointer or a std::reference_wrapper: a reference made on
//    another thread is too easy to leave dangling).
//  - Calls wait in the pool's FIFO queue while all of its threads are busy.
//  - Where the coroutine continues after fn: on its executor (a Task, a fiber: through
//    schedule()); else, if it was awaiting on a ThreadPool worker (a plain Lazy), on that
//    ThreadPool; else (a plain Lazy under syncAwait, say) inline on the pool's thread, as
//    a Lazy resumes where its awaitee completed: keep what follows short, or the thread
//    is not free for the next call. If that executor refuses (it was shut down while fn
//    ran), the coroutine continues inline on the pool's thread with fn's result, rather
//    than losing it. (A fn that finishes before the coroutine has finished suspending
//    lets it go on at once, on its own thread.)
//  - The ThreadPool the coroutine resumes on shuts down (or is destroyed) during the
//    call: a call still queued is withdrawn, fn never runs, and the co_await throws
//    ExecutorShutDown on one of the pool's workers while it drains (the shutdown does
//    not wait behind unrelated calls queued before it). A call whose fn has started is
//    waited for: the shutdown does not close the pool until fn has returned, and the
//    coroutine resumes there, while the pool drains, with fn's value or exception (so
//    fn's effect is never lost, and what follows runs on the pool, not on a pool's
//    thread after it is gone). A call awaited on a pool whose shutdown has begun throws
//    ExecutorShutDown at once (fn never runs), as a sleep does. Other executors are not
//    watched: they must outlive the call (below).
//  - Cancellation (the coroutine's token): a request before fn has started takes the call
//    out of the queue, fn never runs, and the co_await throws OperationCancelled
//    (resumed as above through the executor or ThreadPool, or else inline on the
//    canceller's thread, inside requestCancellation()). Once
//    fn has started it cannot be interrupted: the co_await returns its value (or
//    exception) when it finishes. Exactly one of the two happens.
//  - Destruction: destroying the coroutine while its call waits in the queue withdraws
//    it (fn never runs; its captures are destroyed with the frame). Destroying it once fn
//    has started, or after its cancellation was delivered, is a use error: weft prints
//    "weft: a coroutine was destroyed while suspended in blocking() ..." and aborts.
//
// Preconditions: awaited once, as the rvalue blocking() returns (awaiting a named one is
// a compile error). The BlockingPool outlives the await; so does the executor the
// coroutine resumes on unless it is a ThreadPool (whose shutdown ends or waits for the
// call, above).
// Errors: what fn throws, rethrown at the co_await (std::exception_ptr); OperationCancelled
// (above); ExecutorShutDown naming the BlockingPool after its shutdown() (fn never runs),
// or naming the ThreadPool the coroutine resumes on when its shutdown withdrew or refused
// the call (above; fn never runs); std::system_error if the pool has no thread and cannot
// start one.
// Thread safety: fn runs on another thread, concurrently with the rest of the program:
// what it touches must be safe to touch from there. The co_await's result is visible to
// the coroutine without further synchronisation.
//
// Example:
//   int fd = co_await weft::blocking([&] { return ::open(path, O_RDONLY); });
//   auto rows = co_await weft::blocking([&] { return legacyDb.query(sql); });
//   weft::await(weft::blocking([] { std::this_thread::sleep_for(1s); }));  // in a fiber
template <class F>
  requires detail::BlockingCallable<F>
BlockingOperation<std::decay_t<F>> blocking(BlockingPool& pool, F&& fn) {
  static_assert(!std::is_reference_v<std::invoke_result_t<std::decay_t<F>>>,
                "weft::blocking(fn): fn returns a reference; return a value, a pointer or a "
                "std::reference_wrapper instead");
  return BlockingOperation<std::decay_t<F>>(pool, std::forward<F>(fn));
}

template <class F>
  requires detail::BlockingCallable<F>
BlockingOperation<std::decay_t<F>> blocking(F&& fn) {
  return blocking(BlockingPool::defaultPool(), std::forward<F>(fn));
}

namespace detail {

// The awaiter of blocking(fn). Lives in the awaiting coroutine's frame (or on the fiber's
// stack) with fn, the result, the queue node and the shutdown guard: a call allocates
// nothing.
//
// Two parties may finish the call: the pool's thread (fn ran) and the cancellation (it
// took the job back from the queue). Which one is decided under the pool's mutex: a
// thread takes the job out of the queue to run it, the cancellation withdraws it, and
// only one of them finds it queued. The winner and await_suspend then both "arrive"; the
// second to arrive resumes the coroutine (or, if that is await_suspend, continues without
// suspending): never while await_suspend still runs, never twice.
//
// When the coroutine resumes on a ThreadPool, a PoolShutdownGuard makes the pool's
// shutdown a third party, under the same mutex: a job still queued is taken back (the
// guard's fire function arrives, and the await throws ExecutorShutDown), one not yet
// submitted is barred (await_suspend throws it), and for one taken by a thread (or by the
// cancellation) the pool is held open until the winner has scheduled the coroutine there.
// The winner always resumes the coroutine through the guard (see its header).
//
// Destroying the coroutine while it is suspended here makes the destructor a fourth party:
// it settles the guard, then withdraws the job like the cancellation does. If it wins, fn
// never runs and nothing refers to the awaiter any more. If it loses, fn has started (its
// thread will resume the coroutine), or the cancellation or the shutdown took it (its
// resumption is on its way): weft reports the misuse and aborts.
template <class Fn>
class BlockingAwaiter final : private BlockingPool::Job, private PoolShutdownGuard::Owner {
 public:
  using Result = std::invoke_result_t<Fn>;

  template <class F>
  BlockingAwaiter(BlockingPool& pool, F&& fn, Executor* executor, const CancellationToken& token)
      : fn_(std::forward<F>(fn)), pool_(pool), executor_(executor), token_(token) {
    run = &BlockingAwaiter::runOnPool;
  }
  BlockingAwaiter(const BlockingAwaiter&) = delete;
  BlockingAwaiter& operator=(const BlockingAwaiter&) = delete;
  // noexcept (implicitly): an unlink and a deregistration; misuse aborts. One branch on
  // the normal path: waiter_ is null once await_resume has run or if nothing was queued.
  ~BlockingAwaiter() {
    if (waiter_) [[unlikely]] withdrawOnDestruction();
  }

  // Cancelled before: throws at once (fn never runs).
  bool await_ready() const {
    token_.throwIfCancellationRequested();
    return false;
  }

  bool await_suspend(std::coroutine_handle<> waiter) {
    // Where fn's completion resumes the coroutine: its executor; else the executor whose
    // thread awaits (Executor::current(): a ThreadPool's worker, where a plain Lazy
    // stays); else the pool's thread.
    resumeOn_ = executor_ != nullptr ? executor_ : Executor::current();
    // A ThreadPool's shutdown takes the call back or waits for it (see the class comment).
    // Throws ExecutorShutDown once that shutdown has begun: nothing armed or queued.
    guard_.arm(resumeOn_, *this);
    bool submitted;
    try {
      submitted = pool_.submit(*this);  // throws (ExecutorShutDown, system_error)
    } catch (...) {
      guard_.settle();  // nothing queued: the guard can have barred nothing
      throw;
    }
    if (!submitted) {
      // Barred: resumeOn_'s shutdown fired the guard first. fn never runs. (On resumeOn_'s
      // worker, or in its Task: the pool is alive while this runs.)
      guard_.settle();
      throw ExecutorShutDown(resumeOn_->name());
    }
    // Set only once queued (the destructor's sign that there is a job to withdraw). A
    // winner that already arrived does not read it: only the second arrival does.
    waiter_ = waiter;
    if (token_.canBeCancelled()) {
      // Captures one pointer: stored inline, so this does not throw.
      onCancel_.emplace(token_, [this] {
        if (pool_.withdraw(*this)) {
          cancelled_ = true;
          arrive();
        }
      });
    }
    // acq_rel: release publishes waiter_ and the registration to the winner; acquire
    // sees what the winner wrote (the result, cancelled_, shutDown_) if we continue inline.
    return arrivals_.fetch_add(1, std::memory_order_acq_rel) == 0;
  }

  Result await_resume() {
    // Waits if the callback still runs on another thread (it lost the race); after this
    // nothing refers to this awaiter but the guard, which settle() lets go.
    onCancel_.reset();
    guard_.settle();
    waiter_ = nullptr;  // resumed: nothing for the destructor to withdraw
    if (shutDown_) {
      // Resumed by the guard, on resumeOn_'s worker while it drains.
      throw ExecutorShutDown(resumeOn_->name());
    }
    if (cancelled_) throw OperationCancelled("weft: blocking() cancelled before its function ran");
    if constexpr (std::is_void_v<Result>) {
      result_.value();
    } else {
      return std::move(result_).value();
    }
  }

 private:
  // On one of the pool's threads. noexcept: fn's exception is captured.
  static void runOnPool(BlockingPool::Job* job) noexcept {
    auto* self = static_cast<BlockingAwaiter*>(job);
    try {
      if constexpr (std::is_void_v<Result>) {
        std::invoke(std::move(self->fn_));
        self->result_.emplace();
      } else {
        self->result_.emplace(std::invoke(std::move(self->fn_)));
      }
    } catch (...) {
      self->result_.setException(std::current_exception());
    }
    self->arrive();
  }

  // PoolShutdownGuard::Owner, on a worker of resumeOn_ during its shutdown.
  PoolShutdownGuard::Claim takeBackForShutdown() noexcept override {
    using Claim = PoolShutdownGuard::Claim;
    const BlockingPool::Job::State found = pool_.withdrawForShutdown(*this);
    const Claim claim = found == BlockingPool::Job::State::kQueued ? Claim::kTakenBack
                        : found == BlockingPool::Job::State::kNew  ? Claim::kBarred
                                                             : Claim::kClaimed;
    // Written before the guard's arrival (and before its release store of `fired`).
    if (claim == PoolShutdownGuard::Claim::kTakenBack) shutDown_ = true;
    return claim;
  }
  void resumeShutDown() noexcept override { arrive(/*onResumeOnWorker=*/true); }

  // The second arrival resumes the coroutine: on resumeOn_ through schedule() (via the
  // guard) when there is one (never inline inside requestCancellation() there), else
  // inline on this thread (the pool's thread after fn, the canceller's after a
  // cancellation). The guard's own arrival is on a worker of resumeOn_: inline. When
  // resumeOn_ refuses (not a ThreadPool, shut down meanwhile), the coroutine continues
  // inline here rather than being lost, with fn's value: what fn did is never discarded.
  // noexcept: resuming a weft coroutine does not throw (its promise catches).
  void arrive(bool onResumeOnWorker = false) noexcept {
    // acq_rel: see await_suspend.
    if (arrivals_.fetch_add(1, std::memory_order_acq_rel) == 0) return;
    std::coroutine_handle<> waiter = waiter_;
    if (onResumeOnWorker || !guard_.schedule(resumeOn_, waiter)) waiter.resume();
  }

  // The destructor's path for a coroutine destroyed while suspended here. Cold.
  [[gnu::cold, gnu::noinline]] void withdrawOnDestruction() noexcept {
    // First: once settled, the shutdown can neither take the job nor hold for it.
    guard_.settle();
    const bool withdrawn = pool_.withdraw(*this);
    // Waits for a callback running on another thread (so that cancelled_ can be read); a
    // callback that runs later finds the job gone.
    onCancel_.reset();
    if (withdrawn) return;  // fn never runs; its captures go with the frame
    const char* claimedBy = shutDown_    ? "its executor's shutdown had ended it"
                            : cancelled_ ? "its cancellation had been delivered"
                                         : "its function had started on the pool";
    abortDestroyedWhileResuming("blocking()", claimedBy);
  }

  Fn fn_;
  Try<Result> result_;
  BlockingPool& pool_;
  Executor* executor_;
  Executor* resumeOn_ = nullptr;
  const CancellationToken& token_;
  std::coroutine_handle<> waiter_;
  std::atomic<int> arrivals_{0};
  bool cancelled_ = false;  // written before the canceller's arrival
  bool shutDown_ = false;   // written before the guard's arrival
  std::optional<CancellationCallback> onCancel_;
  PoolShutdownGuard guard_;
};

template <class Fn>
class BlockingAwaitable {
 public:
  template <class F>
  BlockingAwaitable(BlockingPool& pool, F&& fn) : pool_(&pool), fn_(std::forward<F>(fn)) {}

  BlockingAwaiter<Fn> coAwait(Executor* executor, const CancellationToken& token) && {
    return BlockingAwaiter<Fn>(*pool_, std::move(fn_), executor, token);
  }
  // Outside a weft coroutine: no executor, no token.
  BlockingAwaiter<Fn> operator co_await() && {
    return BlockingAwaiter<Fn>(*pool_, std::move(fn_), nullptr, kNoCancellationToken);
  }
  // An lvalue would have fn moved out of a named object behind the caller's back.
  template <class E = Executor>
  void coAwait(E*, const CancellationToken&) & {
    static_assert(sizeof(E) == 0,
                  "co_await weft::blocking(fn) as the expression itself (an rvalue): a "
                  "blocking() awaitable is awaited once");
  }

 private:
  BlockingPool* pool_;
  Fn fn_;
};

}  // namespace detail

}  // namespace weft
