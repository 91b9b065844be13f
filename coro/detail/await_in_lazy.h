#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/lazy.h"

namespace weft {

template <class T>
class Task;

namespace detail {

template <class T>
inline constexpr bool kIsTask = false;
template <class T>
inline constexpr bool kIsTask<Task<T>> = true;

// The awaiter a Lazy uses for `co_await a`: what its promise's await_transform makes of
// `a` (coAwait with the executor and token for weft's awaitables), then operator
// co_await if that has one.
template <class A>
using LazyAwaiterOf =
    AwaiterOf<decltype(std::declval<LazyPromiseBase&>().await_transform(std::declval<A>()))>;

// The value type `co_await a` produces inside a Lazy (rvalue references decay to values).
template <class A>
using AwaitResult = std::conditional_t<
    std::is_rvalue_reference_v<decltype(std::declval<LazyAwaiterOf<A>>().await_resume())>,
    std::remove_cvref_t<decltype(std::declval<LazyAwaiterOf<A>>().await_resume())>,
    decltype(std::declval<LazyAwaiterOf<A>>().await_resume())>;

// Wraps any awaitable in a Lazy that awaits it (inheriting the executor and the token, as
// every Lazy does). `A` is a reference type for an lvalue awaitable (awaited in place: the
// caller keeps it alive until the Lazy has finished) and a value type for an rvalue (moved
// into the frame).
template <class T, class A>
Lazy<T> awaitInLazy(A awaitable) {
  co_return co_await static_cast<A&&>(awaitable);
}

// awaitInLazy with the result type worked out: a Lazy stays as it is.
template <class A>
auto asLazy(A&& awaitable) {
  if constexpr (kIsLazy<std::remove_cvref_t<A>>) {
    return std::remove_cvref_t<A>(std::forward<A>(awaitable));
  } else {
    return awaitInLazy<AwaitResult<A>, A>(std::forward<A>(awaitable));
  }
}

// True unless every A is a Lazy: selects the collects' overloads for other awaitables.
template <class... A>
concept NotAllLazys = !(kIsLazy<std::remove_cvref_t<A>> && ...);

// A vector of awaitables as a vector of Lazys awaiting them (each moved into its Lazy).
template <class A>
std::vector<Lazy<AwaitResult<A>>> asLazies(std::vector<A> awaitables) {
  std::vector<Lazy<AwaitResult<A>>> lazies;
  lazies.reserve(awaitables.size());
  for (A& awaitable : awaitables) lazies.push_back(awaitInLazy<AwaitResult<A>, A>(std::move(awaitable)));
  return lazies;
}

}  // namespace detail
}  // namespace weft
