#pragma once

#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "weft/coro/detail/frame_allocator.h"
#include "weft/coro/detail/wait_note.h"
#include "weft/executors/executor.h"

// The awaitable author's kit: what an awaitable of one's own needs to take part in weft
// as weft's own awaitables do (docs/coro.md, "Writing an awaitable").
//
// How weft awaits a thing `a` (in a Lazy or Task with `co_await a`, in a fiber with
// `weft::await(a)`), first match wins:
//  - `a.coAwait(executor, token)` exists: the awaitable is cancellation-aware, and is
//    given the awaiting coroutine's executor and cancellation token (the token stays
//    valid until the await completes);
//  - `a.coAwait(executor)` exists: the awaitable is executor-aware, and is given the
//    executor;
//  - otherwise: `a`'s awaiter (getAwaiter) is wrapped in a ViaAwaiter, which makes the
//    awaiting coroutine resume on its executor wherever the awaitable resumes it.
// `executor` is null for a coroutine that has none (a bare Lazy under syncAwait without
// an executor): the awaitable then resumes its waiter inline.
//
// An executor-aware awaitable resumes its waiter with resumeWaiterOn (from a callback,
// any thread) or resumeOnExecutor (from an await_suspend or a final awaiter, by symmetric
// transfer). An awaitable whose wake-up can be claimed (a value delivered, a timer fired)
// before the waiter runs reports the destruction of a waiter in that window with
// abortDestroyedWhileResuming.
//
// Example (an awaitable over a callback API; docs/coro.md has it in full):
//   struct Fetch {
//     auto coAwait(weft::Executor* ex) { return Awaiter{key, ex}; }  // ...
//   };
//   // in the callback: weft::resumeWaiterOn(executor, waiter);

namespace weft {

// getAwaiter(a): the awaiter `co_await a` would use (member or free operator co_await,
// else `a` itself). Returns a reference when the awaitable is its own awaiter, so the
// awaiter keeps its identity.
// Errors: what the operator co_await throws. Thread safety: as the awaitable's.
// Example:
//   auto&& awaiter = weft::getAwaiter(std::move(awaitable));
//   if (!awaiter.await_ready()) { /* ... */ }
template <class A>
decltype(auto) getAwaiter(A&& awaitable) {
  if constexpr (requires { std::forward<A>(awaitable).operator co_await(); }) {
    return std::forward<A>(awaitable).operator co_await();
  } else if constexpr (requires { operator co_await(std::forward<A>(awaitable)); }) {
    return operator co_await(std::forward<A>(awaitable));
  } else {
    return std::forward<A>(awaitable);
  }
}

// AwaiterOf<A>: the type getAwaiter returns for an A.
template <class A>
using AwaiterOf = decltype(getAwaiter(std::declval<A>()));

// Reports that `executor` refused a coroutine that had to resume there (it was shut down
// while the coroutine was suspended), then aborts. For awaitables that resume their waiter
// by Executor::schedule and cannot hand the failure to anyone: the waiter would otherwise
// be lost, suspended forever.
// noexcept, [[noreturn]]: there is nobody to report to. Thread safety: any thread.
// Example:
//   try { executor->schedule(waiter); } catch (...) { weft::abortExecutorGone(executor); }
[[noreturn]] inline void abortExecutorGone(Executor* executor) noexcept {
  std::fprintf(stderr,
               "weft: cannot resume a coroutine on executor '%.*s': it is shut down while "
               "the coroutine was still suspended (shut executors down after their work)\n",
               static_cast<int>(executor->name().size()), executor->name().data());
  std::abort();
}

// The destroyed-while-resuming diagnostic. A coroutine (or fiber) destroyed while
// suspended in `awaitable` after its wake-up had been claimed (a value delivered, a lock
// or permit granted, a timer fired, a cancellation taken): its resumption is already on
// its way and would run a freed frame. Destroying a suspended coroutine is sound only
// while nothing is about to resume it (its awaiter then withdraws the wait, in its
// destructor); work that others may wake is stopped by cancelling it. An awaiter's
// destructor that finds its wake-up already claimed calls this.
// `awaitable` names the awaitable ("co_await of a FiberFuture"); `claimedBy`, when given,
// says what claimed the wake-up (it heads the parenthesis).
// noexcept, [[noreturn]]: there is nobody to report to, and going on would be a
// use-after-free. Thread safety: any thread.
// Example:
//   ~Awaiter() { if (claimed_) weft::abortDestroyedWhileResuming("Fetch", "the reply came"); }
[[noreturn]] inline void abortDestroyedWhileResuming(const char* awaitable,
                                                     const char* claimedBy = nullptr) noexcept {
  std::fprintf(stderr,
               "weft: a coroutine was destroyed while suspended in %s after its wake-up had "
               "been claimed (%s%sits resumption was already under way); destroy only "
               "coroutines that nothing is about to resume, and cancel the others instead\n",
               awaitable, claimedBy != nullptr ? claimedBy : "", claimedBy != nullptr ? ": " : "");
  std::abort();
}

// Resumes `handle`, a waiter whose wait has ended (taken out of a wait list, called back
// by a foreign API): scheduled on `executor`, or inline on this thread when `executor` is
// null (the waiter has none). Use it from callbacks and from code that is not itself a
// coroutine's await_suspend.
// noexcept: an executor that refuses (shut down under a suspended coroutine) is reported
// and fatal (abortExecutorGone). Thread safety: any thread; `handle` must be resumed once.
// Example:
//   legacyFetch(key, [this](Reply r) { reply_ = r; weft::resumeWaiterOn(executor_, waiter_); });
inline void resumeWaiterOn(Executor* executor, std::coroutine_handle<> handle) noexcept {
  if (executor == nullptr) {
    handle.resume();
    return;
  }
  try {
    executor->schedule(handle);
  } catch (...) {
    abortExecutorGone(executor);
  }
}

// The coroutine to transfer to so that `target` resumes on `executor` (not null):
// `target` itself (inline, by symmetric transfer) when the calling thread already belongs
// to the executor, otherwise std::noop_coroutine() after scheduling `target` there. For an
// await_suspend or a final awaiter that returns a handle.
// noexcept: an executor that refuses is reported and fatal (abortExecutorGone).
// Thread safety: any thread.
// Example:
//   std::coroutine_handle<> await_suspend(std::coroutine_handle<>) noexcept {
//     return weft::resumeOnExecutor(executor_, next_);
//   }
inline std::coroutine_handle<> resumeOnExecutor(Executor* executor,
                                                std::coroutine_handle<> target) noexcept {
  if (executor->currentThreadInExecutor()) return target;
  try {
    executor->schedule(target);
  } catch (...) {
    abortExecutorGone(executor);
  }
  return std::noop_coroutine();
}

// ResumesOnlyThroughExecutor<Awaiter>: the awaiter declares
// `static constexpr bool kResumesOnlyThroughExecutor = true`, a promise about how it
// resumes its waiter when it was made with an executor (coAwait(executor, ...)): its
// await_suspend(h) returns void or bool and never resumes h itself, and h is resumed later
// only by scheduling it on that executor (Executor::schedule, resumeWaiterOn), from
// whichever thread completes or cancels the operation. A scheduler that runs several
// waiters on one thread may then act on the wait before it gives up the thread (weft's
// fibers switch straight to the next fiber in the thread's run queue,
// executors/thread_run_queue.h); an awaiter that does not declare it loses nothing but
// that shortcut. Declaring it falsely (resuming inline from await_suspend) lets the
// waiter run twice: undefined behaviour.
// Example:
//   struct Awaiter { static constexpr bool kResumesOnlyThroughExecutor = true; /* ... */ };
template <class Awaiter>
concept ResumesOnlyThroughExecutor =
    requires { requires bool(std::remove_cvref_t<Awaiter>::kResumesOnlyThroughExecutor); };

namespace detail {

// A one-shot coroutine handed to a foreign awaitable in place of the awaiting coroutine:
// when the awaitable resumes it, it frees itself and brings the awaiting coroutine back
// to its executor. This is how a Task "resumes on its executor" after awaiting something
// that completed on another thread, for any C++20 awaitable.
class ExecutorHop {
 public:
  struct promise_type : FrameAllocated {
    promise_type(Executor* executor, std::coroutine_handle<> target) noexcept
        : executor_(executor), target_(target) {}

    ExecutorHop get_return_object() noexcept {
      return ExecutorHop{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      // noexcept: a final awaiter must not throw; resumeOnExecutor aborts with a message
      // when the executor refuses the coroutine.
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) noexcept {
        Executor* executor = self.promise().executor_;
        std::coroutine_handle<> target = self.promise().target_;
        self.destroy();  // legal: the frame is suspended; nothing below touches it
        return resumeOnExecutor(executor, target);
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the body is empty

    Executor* executor_;
    std::coroutine_handle<> target_;
  };

  std::coroutine_handle<promise_type> handle;
};

inline ExecutorHop makeExecutorHop(Executor* /*executor*/, std::coroutine_handle<> /*target*/) {
  co_return;
}

}  // namespace detail

// ViaAwaiter: the awaiter of a foreign awaitable (one that knows nothing of executors),
// wrapped so that the awaiting coroutine resumes on `executor` wherever the awaitable
// resumes it (through a one-shot hop that schedules it there, or inline when the thread
// already belongs to the executor). With a null executor it is a plain pass-through.
// `Awaiter` may be a reference type (the wrapper then refers to the awaiter).
//
// weft wraps every awaitable that has no coAwait this way; an awaitable of one's own
// rarely needs it, except to resume on a given executor whatever its caller's is.
// Errors: what the inner awaiter throws (nothing is left allocated then).
// Thread safety: as the inner awaiter's.
// Example:
//   co_await weft::ViaAwaiter<ForeignAwaiter>(ForeignAwaiter{...}, &pool);
template <class Awaiter>
class ViaAwaiter {
 public:
  ViaAwaiter(Awaiter&& awaiter, Executor* executor)
      : awaiter_(std::forward<Awaiter>(awaiter)), executor_(executor) {}

  bool await_ready() { return awaiter_.await_ready(); }

  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> awaiting) {
    if (executor_ == nullptr) return suspendOn(awaiting, awaiting);
    detail::ExecutorHop hop = detail::makeExecutorHop(executor_, awaiting);
    try {
      return suspendOn(std::coroutine_handle<>(hop.handle), awaiting);
    } catch (...) {
      hop.handle.destroy();  // the awaitable did not keep it: it threw
      throw;
    }
  }

  decltype(auto) await_resume() { return awaiter_.await_resume(); }

  // For task dumps (coro/detail/wait_note.h, DescribeWait): the wrapped awaiter.
  void describeWait(std::string& out) const {
    detail::describeAwaiter<std::remove_cvref_t<Awaiter>>(std::addressof(awaiter_), out);
  }

 private:
  // Calls the inner await_suspend with `resumer` and maps its three return forms to a
  // handle for symmetric transfer. Touches no member after the call: the awaitable may
  // already have resumed (and finished) the awaiting coroutine on another thread.
  template <class Resumer>
  std::coroutine_handle<> suspendOn(Resumer resumer, std::coroutine_handle<> awaiting) {
    using Result = decltype(awaiter_.await_suspend(resumer));
    if constexpr (std::is_void_v<Result>) {
      awaiter_.await_suspend(resumer);
      return std::noop_coroutine();
    } else if constexpr (std::is_same_v<Result, bool>) {
      if (awaiter_.await_suspend(resumer)) return std::noop_coroutine();
      // Not suspended after all: the resumer was never used.
      if (resumer.address() != awaiting.address()) resumer.destroy();
      return awaiting;
    } else {
      return awaiter_.await_suspend(resumer);
    }
  }

  Awaiter awaiter_;
  Executor* executor_;
};

}  // namespace weft
