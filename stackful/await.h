#pragma once

#include <coroutine>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/runtime_hooks.h"
#include "weft/executors/executor.h"
#include "weft/stackful/detail/fiber_core.h"
#include "weft/stackful/detail/fiber_park.h"

namespace weft {

namespace detail {

// The awaiter `co_await a` uses inside a Lazy bound to `executor` and carrying `token`
// (bindAwaitable, then operator co_await applied). Returned by value, except a reference
// to `awaitable` itself when it is its own awaiter (it outlives the await). What
// bindAwaitable returns is a temporary: when it is its own awaiter it is returned as is,
// by value (not as a reference to the temporary).
template <class A>
decltype(auto) fiberAwaiter(A&& awaitable, Executor* executor, const CancellationToken& token) {
  if constexpr (runtime::kIsLazy<std::remove_cvref_t<A>> ||
                !std::is_reference_v<AwaiterOf<runtime::BoundAwaitable<A>>>) {
    return getAwaiter(runtime::bindAwaitable(std::forward<A>(awaitable), executor, token));
  } else {
    return runtime::bindAwaitable(std::forward<A>(awaitable), executor, token);
  }
}

template <class A>
using FiberAwaiterOf = decltype(fiberAwaiter(std::declval<A>(), std::declval<Executor*>(),
                                             std::declval<const CancellationToken&>()));

// What await(a) returns: the type of `co_await a` in a Lazy, rvalue references decayed
// to values (the awaiter they would refer to dies when await returns).
template <class A>
using FiberAwaitResultRaw =
    decltype(std::declval<std::remove_reference_t<FiberAwaiterOf<A>>&>().await_resume());
template <class A>
using FiberAwaitResult =
    std::conditional_t<std::is_rvalue_reference_v<FiberAwaitResultRaw<A>>,
                       std::remove_cvref_t<FiberAwaitResultRaw<A>>, FiberAwaitResultRaw<A>>;

}  // namespace detail

// What await(a) returns for an `a` of type A: the type of `co_await a` in a Lazy
// (AwaitResult<A>, coro/await_result.h), rvalue references decayed to values (the awaiter
// they would refer to dies when await returns).
template <class A>
using FiberAwaitResult = detail::FiberAwaitResult<A>;

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
// While the fiber is being destroyed (its stack unwinds from where it was parked), an
// await in a destructor that the unwinding runs completes only if x is ready at once
// (await_ready() true); if it would suspend, weft prints a message ("weft: weft::await()
// would suspend a fiber that is being destroyed, ...") and aborts: the fiber will never
// be resumed, so the await cannot complete, and no exception may leave that destructor.
// (this_fiber::yield() returns at once there.)
// Errors: rethrows what awaiting x threw (OperationCancelled for a cancelled await, the
// exception of a Lazy or Task). Throws NotInFiber when called outside a fiber, or inside
// a plain Fiber (which has no executor to be resumed by). Throws detail::ForcedUnwind (do
// not catch) when the fiber is being destroyed and the await, which would suspend, is not
// in a destructor run by the unwinding (code that caught ForcedUnwind and went on).
// Thread safety: affects only the calling fiber.
//
// Forced inline, with the park itself a call (parkOn): the switch out of the fiber is
// then made in the fiber's own frame, where it continues after the switch back. Out of
// line, every fiber would switch inside the one await function and return from it to
// its own call site, and that return is mispredicted whenever the fiber that ran before
// parked at another site (docs/stackful.md, "Where the switch is made").
//
// Example:
//   weft::Lazy<int> fetch(int key);
//   auto future = weft::spawnFiber(&pool, [] {
//     int a = weft::await(fetch(1));     // suspends this fiber, not the thread
//     return a + weft::await(fetch(2));
//   });
template <class A>
[[gnu::always_inline]] inline FiberAwaitResult<A> await(A&& awaitable) {
  using T = FiberAwaitResult<A>;
  detail::FiberCore* core = detail::FiberCore::current();
  detail::ParkLink* link = core != nullptr ? core->parkLink() : nullptr;
  if (link == nullptr) [[unlikely]]
    detail::throwAwaitOutsideExecutorFiber(core != nullptr);
  // The awaiter lives here, on the fiber's stack, for the whole await: the fiber stays
  // parked until it is resumed, so the driver may use it from the thread's stack.
  auto&& awaiter = detail::fiberAwaiter(std::forward<A>(awaitable), link->executor, *link->token);
  // Ready (a channel with a value waiting, a free mutex, ...): no switch at all.
  if (!awaiter.await_ready()) {
    const detail::FiberCore::ParkSwitch park = detail::parkOn(core, *link, awaiter);
    if (park.fiber != nullptr) detail::FiberCore::switchOut(park);  // back when resumed
    // await_suspend called by the driver after the switch threw: the await failed.
    if (link->suspendError) [[unlikely]]
      detail::rethrowSuspendError(*link);
  }
  if constexpr (std::is_void_v<T>) {
    awaiter.await_resume();
  } else {
    return static_cast<T>(awaiter.await_resume());
  }
}

}  // namespace weft
