#pragma once

#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <type_traits>
#include <utility>

#include "weft/coro/detail/frame_allocator.h"
#include "weft/coro/detail/wait_note.h"
#include "weft/executors/executor.h"

namespace weft::detail {

// getAwaiter(a): the awaiter `co_await a` would use (member or free operator co_await,
// else `a` itself). Returns a reference when the awaitable is its own awaiter, so the
// awaiter keeps its identity.
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

template <class A>
using AwaiterOf = decltype(getAwaiter(std::declval<A>()));

[[noreturn]] inline void abortExecutorGone(Executor* executor) noexcept {
  std::fprintf(stderr,
               "weft: cannot resume a coroutine on executor '%.*s': it is shut down while "
               "the coroutine was still suspended (shut executors down after their work)\n",
               static_cast<int>(executor->name().size()), executor->name().data());
  std::abort();
}

// A coroutine (or fiber) destroyed while suspended in `awaitable` after its wake-up had
// been claimed (a value delivered, a lock or permit granted, a timer fired, a
// cancellation taken): its resumption is already on its way and would run a freed frame.
// Destroying a suspended coroutine is sound only while nothing is about to resume it (its
// awaiter then withdraws the wait); work that others may wake is stopped by cancelling it.
// `claimedBy`, when given, says what claimed the wake-up (it heads the parenthesis).
// noexcept: there is nobody to report to, and going on would be a use-after-free.
[[noreturn]] inline void abortDestroyedWhileResuming(const char* awaitable,
                                                     const char* claimedBy = nullptr) noexcept {
  std::fprintf(stderr,
               "weft: a coroutine was destroyed while suspended in %s after its wake-up had "
               "been claimed (%s%sits resumption was already under way); destroy only "
               "coroutines that nothing is about to resume, and cancel the others instead\n",
               awaitable, claimedBy != nullptr ? claimedBy : "", claimedBy != nullptr ? ": " : "");
  std::abort();
}

// Resumes `handle` of a waiter taken out of a wait list: scheduled on `executor`, or
// inline on this thread when it has none. noexcept: an executor that refuses (shut down
// under a suspended coroutine) is reported and fatal (abortExecutorGone).
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

// Resumes `target` on `executor`: inline (by symmetric transfer) when the calling thread
// already belongs to the executor, otherwise by scheduling it there.
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

// Wraps the awaiter of a foreign awaitable (one that knows nothing of executors) awaited
// inside a Lazy/Task that has an executor, so the coroutine resumes on that executor.
// With no executor it is a plain pass-through. `Awaiter` may be a reference type.
template <class Awaiter>
class ViaAwaiter {
 public:
  ViaAwaiter(Awaiter&& awaiter, Executor* executor)
      : awaiter_(std::forward<Awaiter>(awaiter)), executor_(executor) {}

  bool await_ready() { return awaiter_.await_ready(); }

  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> awaiting) {
    if (executor_ == nullptr) return suspendOn(awaiting, awaiting);
    ExecutorHop hop = makeExecutorHop(executor_, awaiting);
    try {
      return suspendOn(std::coroutine_handle<>(hop.handle), awaiting);
    } catch (...) {
      hop.handle.destroy();  // the awaitable did not keep it: it threw
      throw;
    }
  }

  decltype(auto) await_resume() { return awaiter_.await_resume(); }

  // For task dumps (coro/detail/lazy_promise.h, DescribeWait): the wrapped awaiter.
  void describeWait(std::string& out) const {
    describeAwaiter<std::remove_cvref_t<Awaiter>>(std::addressof(awaiter_), out);
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

}  // namespace weft::detail
