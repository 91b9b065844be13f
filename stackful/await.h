#pragma once

#include <coroutine>
#include <exception>
#include <type_traits>
#include <utility>

#include "coro/cancellation.h"
#include "coro/detail/lazy_promise.h"
#include "coro/detail/via_awaiter.h"
#include "coro/lazy.h"
#include "coro/try.h"
#include "executors/executor.h"
#include "stackful/detail/await_link.h"
#include "stackful/detail/fiber_core.h"

namespace weft {

namespace detail {

// The awaiter `co_await a` uses inside a Lazy with an executor and a token, chosen as
// LazyPromiseBase::await_transform chooses it.
template <class A>
decltype(auto) transformedAwaiter(A&& awaitable) {
  if constexpr (kIsLazy<std::remove_cvref_t<A>>) {
    return getAwaiter(std::forward<A>(awaitable));
  } else if constexpr (CancellationAwareAwaitable<A>) {
    return getAwaiter(
        std::forward<A>(awaitable).coAwait(static_cast<Executor*>(nullptr), kNoCancellationToken));
  } else if constexpr (ExecutorAwareAwaitable<A>) {
    return getAwaiter(std::forward<A>(awaitable).coAwait(static_cast<Executor*>(nullptr)));
  } else {
    return getAwaiter(std::forward<A>(awaitable));
  }
}

// What await(a) returns: the type of `co_await a` in a Lazy, rvalue references decayed
// to values (the result is moved out of a slot on the fiber's stack).
template <class A>
using FiberAwaitResultRaw =
    decltype(std::declval<decltype(transformedAwaiter(std::declval<A>()))&>().await_resume());
template <class A>
using FiberAwaitResult =
    std::conditional_t<std::is_rvalue_reference_v<FiberAwaitResultRaw<A>>,
                       std::remove_cvref_t<FiberAwaitResultRaw<A>>, FiberAwaitResultRaw<A>>;

// The Lazy a fiber hands to its driver: awaits `awaitable` (in the driver's coroutine
// world: with the fiber's executor and token) and stores the outcome in `*out`, a slot on
// the waiting fiber's stack. `A` is a reference type for an lvalue awaitable (the fiber
// is parked until this finishes, so the lvalue outlives it), a value type for an rvalue.
template <class T, class A>
Lazy<void> awaitInto(A awaitable, Try<T>* out) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await static_cast<A&&>(awaitable);
      out->emplace();
    } else {
      out->emplace(co_await static_cast<A&&>(awaitable));
    }
  } catch (...) {
    out->setException(std::current_exception());
  }
}

}  // namespace detail

// await(x): inside a fiber started by spawnFiber, suspends the fiber until the awaitable
// `x` completes and returns its value (or throws its exception). The thread is not
// blocked: it runs other work meanwhile.
//
// `x` is anything a Lazy can co_await: a Lazy, a Task, weft's awaitables (mutexes,
// channels, sleeps, ...) or any C++20 awaitable. It is awaited exactly as a Lazy running
// on the fiber's executor would await it: executor-aware awaitables get the fiber's
// executor (`coAwait(executor)`) and, when they accept one, its cancellation token
// (`coAwait(executor, token)`); a Lazy inherits both; anything else is resumed on the
// executor. So one awaitable works from both worlds, `co_await x` and `await(x)`.
//
// The fiber resumes through its executor and may continue on another of its worker
// threads: a thread_local read before the await may differ after it (see
// docs/stackful.md, "Threads").
//
// Preconditions: called inside a fiber started by spawnFiber. An lvalue awaitable must
// stay alive until await returns (it does: the fiber waits).
// Errors: rethrows what awaiting x threw (OperationCancelled for a cancelled await, the
// exception of a Lazy or Task). Throws NotInFiber when called outside a fiber, or inside
// a plain Fiber (which has no executor to be resumed by). Throws detail::ForcedUnwind (do
// not catch) when the fiber is being destroyed.
// Thread safety: affects only the calling fiber.
//
// Example:
//   weft::Lazy<int> fetch(int key);
//   auto future = weft::spawnFiber(&pool, [] {
//     int a = weft::await(fetch(1));     // suspends this fiber, not the thread
//     return a + weft::await(fetch(2));
//   });
template <class A>
decltype(auto) await(A&& awaitable) {
  using T = detail::FiberAwaitResult<A>;
  detail::FiberCore* core = detail::FiberCore::current();
  if (core == nullptr) throw NotInFiber("weft::await() called outside a fiber");
  detail::AwaitLink* link = core->awaitLink();
  if (link == nullptr) {
    throw NotInFiber(
        "weft::await() called in a plain Fiber, which has no executor to resume it: start "
        "the fiber with weft::spawnFiber to await");
  }
  Try<T> result;
  link->pending = detail::awaitInto<T, A>(std::forward<A>(awaitable), &result);
  core->suspend();  // the driver awaits `pending`, then resumes us
  if constexpr (std::is_void_v<T>) {
    result.value();
  } else if constexpr (std::is_reference_v<T>) {
    return result.value();
  } else {
    return T(std::move(result).value());
  }
}

}  // namespace weft
