#pragma once

#include <cstddef>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/coro/detail/await_in_lazy.h"
#include "weft/coro/detail/collect_all.h"
#include "weft/coro/lazy.h"
#include "weft/coro/try.h"

// collectAll and its forms: run several Lazys (or other awaitables) and wait for all of
// them. The machinery is in coro/detail/collect_all.h and coro/detail/collect_barrier.h;
// collectAny is in coro/collect_any.h.

namespace weft {

// collectAll(a, b, ...) / collectAll(std::vector<Lazy<T>>): runs every branch and
// completes when all have finished, with one Try per branch (a tuple of Try<A>, Try<B>,
// ... or a vector of Try<T>, in branch order).
//
// Branches start one after another on the awaiting thread; a branch that suspends lets
// the next one start, so branches that wait on I/O or timers overlap. Each branch
// inherits the awaiting coroutine's executor and cancellation token. The collect never
// completes before every branch has finished, whatever any of them throws: nothing is
// left running.
//
// Errors: a branch's exception is stored in its Try, never thrown by the collect itself.
// Preconditions: every Lazy is valid (else abort with a message).
// Thread safety: branches may finish on different threads; results are published to the
// awaiter with acquire/release ordering.
//
// Example:
//   auto [a, b] = co_await weft::collectAll(fetch("a"), fetch("b"));
//   if (a.hasValue()) use(a.value());
//   std::vector<weft::Try<int>> all = co_await weft::collectAll(std::move(lazies));
template <class... T>
Lazy<std::tuple<Try<T>...>> collectAll(Lazy<T>... branches) {
  detail::checkBranches("collectAll of", branches...);
  return detail::collectTuple<false>(std::move(branches)...);
}

template <class T>
Lazy<std::vector<Try<T>>> collectAll(std::vector<Lazy<T>> branches) {
  return detail::collectRange<false>(std::move(branches));
}

// collectAllPara: like collectAll, but every branch is scheduled on the awaiting
// coroutine's executor, so on a ThreadPool the branches run in parallel. In a coroutine
// without an executor it behaves exactly like collectAll.
//
// Errors: as collectAll; a branch the executor refuses (shut down) gets
// ExecutorShutDown in its Try.
// Preconditions, Thread safety: as collectAll.
//
// Example:
//   weft::ThreadPool pool(2);
//   auto results = weft::syncAwait(weft::collectAllPara(std::move(lazies)), &pool);
template <class... T>
Lazy<std::tuple<Try<T>...>> collectAllPara(Lazy<T>... branches) {
  detail::checkBranches("collectAllPara of", branches...);
  return detail::collectTuple<true>(std::move(branches)...);
}

template <class T>
Lazy<std::vector<Try<T>>> collectAllPara(std::vector<Lazy<T>> branches) {
  return detail::collectRange<true>(std::move(branches));
}

// collectAllFailFast(a, b, ...) / collectAllFailFast(std::vector<Lazy<T>>): collectAll
// that gives up early. When a branch finishes with an exception, every other branch is
// cancelled (its token is cancelled, so its cancellable awaits throw OperationCancelled,
// and branches not started yet are not started: their Try holds OperationCancelled). The
// result is collectAll's: one Try per branch, in order, the first failure among them.
// collectAllParaFailFast schedules the branches on the executor, like collectAllPara.
//
// Semantics: as collectAll otherwise. Branches carry a token of the collect's own, also
// cancelled when the awaiting coroutine's token is. The collect completes only after
// every started branch has finished.
// Errors: never thrown by the collect itself; each branch's outcome is in its Try.
// Preconditions: every Lazy is valid (else abort with a message).
// Thread safety: as collectAll.
//
// Example:
//   auto [user, orders] = co_await weft::collectAllFailFast(loadUser(id), loadOrders(id));
//   // if loadUser threw, loadOrders was cancelled: orders holds OperationCancelled
template <class... T>
Lazy<std::tuple<Try<T>...>> collectAllFailFast(Lazy<T>... branches) {
  detail::checkBranches("collectAllFailFast of", branches...);
  return detail::collectFailFastTuple<false>(std::move(branches)...);
}

template <class T>
Lazy<std::vector<Try<T>>> collectAllFailFast(std::vector<Lazy<T>> branches) {
  return detail::collectFailFastRange<false>(std::move(branches));
}

template <class... T>
Lazy<std::tuple<Try<T>...>> collectAllParaFailFast(Lazy<T>... branches) {
  detail::checkBranches("collectAllParaFailFast of", branches...);
  return detail::collectFailFastTuple<true>(std::move(branches)...);
}

template <class T>
Lazy<std::vector<Try<T>>> collectAllParaFailFast(std::vector<Lazy<T>> branches) {
  return detail::collectFailFastRange<true>(std::move(branches));
}

// collectAllWindowed(maxInFlight, std::vector<Lazy<T>>): collectAll that runs at most
// `maxInFlight` branches at a time, starting them in order; each time one finishes, the
// next one starts in its place. One Try per branch, in order.
//
// Semantics: collectAllWindowed starts the first window on the awaiting thread and each
// later branch on the thread that finished the previous one (by symmetric transfer: no
// stack growth); branches overlap only while they are suspended (I/O, timers, locks).
// collectAllParaWindowed schedules each branch on the awaiting coroutine's executor, so
// on a ThreadPool up to `maxInFlight` run in parallel (without an executor it is
// collectAllWindowed). Branches inherit the executor and the cancellation token.
//
// Errors: std::invalid_argument (thrown by the call) when maxInFlight is 0. Branch
// exceptions are in their Trys. A branch the executor refuses holds ExecutorShutDown.
// Preconditions: every Lazy is valid (else abort with a message).
// Thread safety: as collectAll.
//
// Example:
//   std::vector<weft::Lazy<Page>> fetches = ...;  // 10,000 of them
//   auto pages = co_await weft::collectAllParaWindowed(64, std::move(fetches));
template <class T>
Lazy<std::vector<Try<T>>> collectAllWindowed(std::size_t maxInFlight,
                                             std::vector<Lazy<T>> branches) {
  detail::checkWindowed(maxInFlight, branches);
  return detail::collectWindowed<false>(maxInFlight, std::move(branches));
}

template <class T>
Lazy<std::vector<Try<T>>> collectAllParaWindowed(std::size_t maxInFlight,
                                                 std::vector<Lazy<T>> branches) {
  detail::checkWindowed(maxInFlight, branches);
  return detail::collectWindowed<true>(maxInFlight, std::move(branches));
}

// The collects above also take other awaitables: Tasks, fibers (inFiber, FiberFuture),
// weft's awaitables (channel operations, locks, I/O) or a user's, mixed freely with Lazys
// in the variadic forms, or a std::vector of one awaitable type. Each runs in a Lazy that
// awaits it (moved into it), exactly as a Lazy branch would, with the same results.
template <class... A>
  requires(sizeof...(A) > 0 && detail::NotAllLazys<A...>)
auto collectAll(A&&... branches) {
  return collectAll(detail::asLazy(std::forward<A>(branches))...);
}

template <class A>
  requires(!detail::kIsLazy<A>)
auto collectAll(std::vector<A> branches) {
  return collectAll(detail::asLazies(std::move(branches)));
}

template <class... A>
  requires(sizeof...(A) > 0 && detail::NotAllLazys<A...>)
auto collectAllPara(A&&... branches) {
  return collectAllPara(detail::asLazy(std::forward<A>(branches))...);
}

template <class A>
  requires(!detail::kIsLazy<A>)
auto collectAllPara(std::vector<A> branches) {
  return collectAllPara(detail::asLazies(std::move(branches)));
}

template <class... A>
  requires(sizeof...(A) > 0 && detail::NotAllLazys<A...>)
auto collectAllFailFast(A&&... branches) {
  return collectAllFailFast(detail::asLazy(std::forward<A>(branches))...);
}

template <class A>
  requires(!detail::kIsLazy<A>)
auto collectAllFailFast(std::vector<A> branches) {
  return collectAllFailFast(detail::asLazies(std::move(branches)));
}

template <class... A>
  requires(sizeof...(A) > 0 && detail::NotAllLazys<A...>)
auto collectAllParaFailFast(A&&... branches) {
  return collectAllParaFailFast(detail::asLazy(std::forward<A>(branches))...);
}

template <class A>
  requires(!detail::kIsLazy<A>)
auto collectAllParaFailFast(std::vector<A> branches) {
  return collectAllParaFailFast(detail::asLazies(std::move(branches)));
}

template <class A>
  requires(!detail::kIsLazy<A>)
auto collectAllWindowed(std::size_t maxInFlight, std::vector<A> branches) {
  return collectAllWindowed(maxInFlight, detail::asLazies(std::move(branches)));
}

template <class A>
  requires(!detail::kIsLazy<A>)
auto collectAllParaWindowed(std::size_t maxInFlight, std::vector<A> branches) {
  return collectAllParaWindowed(maxInFlight, detail::asLazies(std::move(branches)));
}

// The name collectAllParaWindowed had before 1.0 (the family puts Para first, as in
// collectAllParaFailFast).
template <class A>
[[deprecated("weft: collectAllWindowedPara is now collectAllParaWindowed")]] auto
collectAllWindowedPara(std::size_t maxInFlight, std::vector<A> branches) {
  return collectAllParaWindowed(maxInFlight, std::move(branches));
}

}  // namespace weft
