#pragma once

#include "weft/coro/detail/await_in_lazy.h"

namespace weft {

// AwaitResult<A>: the type `co_await a` yields inside a Lazy or Task for an `a` of type
// A (rvalue references decayed to values: what they refer to dies with the awaiter).
// What syncAwait(a), withTimeout(a, d) and withCancellation(token, a) return, or wrap in
// a Lazy, for an awaitable that is not a Lazy: `Lazy<AwaitResult<A>>`.
//
// Preconditions: A is awaitable in a Lazy (else the alias is ill-formed, in the
// substitution of the function that names it). No errors, no run-time behaviour.
//
// Example:
//   static_assert(std::is_same_v<weft::AwaitResult<weft::Lazy<int>>, int>);
//   static_assert(std::is_same_v<weft::AwaitResult<weft::Mutex::ScopedLockOperation>,
//                                weft::ScopedLock<weft::Mutex>>);
template <class A>
using AwaitResult = detail::AwaitResult<A>;

}  // namespace weft
