#pragma once

#include <concepts>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/stackful/spawn_fiber.h"

namespace weft {

namespace detail {

[[noreturn]] inline void throwInFiberWithoutExecutor() {
  throw std::logic_error(
      "weft: inFiber needs an executor to run the fiber on: await it from a Lazy bound to "
      "one (.via(executor), syncAwait(lazy, executor)), a Task, or a fiber");
}

}  // namespace detail

// InFiber<F>: what inFiber returns: a fiber not started yet. Awaiting it starts it.
// Move-only; awaited at most once (an rvalue co_await).
template <class F>
class [[nodiscard]] InFiber {
 public:
  using ValueType = std::invoke_result_t<F&&>;

  InFiber(F fn, SpawnFiberOptions options) : fn_(std::move(fn)), options_(std::move(options)) {}
  InFiber(InFiber&&) = default;
  InFiber& operator=(InFiber&&) = delete;

  // Used by weft coroutines' await_transform and by fibers' await(): starts the fiber on
  // `executor` carrying `token` (unless the options bring a cancellable token of their
  // own), and waits for it as `co_await spawnFiber(...)` does.
  typename FiberFuture<ValueType>::Awaiter coAwait(Executor* executor,
                                                   const CancellationToken& token) && {
    if (executor == nullptr) detail::throwInFiberWithoutExecutor();
    if (!options_.cancellationToken.canBeCancelled()) options_.cancellationToken = token;
    return spawnFiber(executor, std::move(fn_), std::move(options_)).coAwait(executor);
  }
  // A coroutine that is not weft's has neither executor nor token.
  typename FiberFuture<ValueType>::Awaiter operator co_await() && {
    detail::throwInFiberWithoutExecutor();
  }

 private:
  F fn_;
  SpawnFiberOptions options_;
};

// inFiber(fn, options): runs `fn` in a new fiber when awaited, on the awaiting coroutine's
// executor and under its cancellation token, and returns fn's value (or rethrows its
// exception): blocking-style code (a legacy callback library, a deep recursive parser)
// called from a Lazy or Task as if it were one more await.
//
// Semantics: lazily started, like a Lazy: nothing runs until `co_await weft::inFiber(fn)`
// (or `weft::await(weft::inFiber(fn))` in a fiber), and dropping it unawaited runs
// nothing. Awaited, the fiber is spawned on the awaiter's executor and carries the
// awaiter's token: cancelling the awaiting task (withTimeout, withCancellation, a
// Task's token, a group) cancels every cancellable await inside the fiber, at once if it
// is waiting, and the OperationCancelled that ends fn reaches the awaiter. A cancellable
// `options.cancellationToken` replaces the inherited token (as withCancellation does);
// `options.name` and `options.stackPool` are as for spawnFiber (the name is copied when
// the fiber starts: the string it views must live until the co_await, as it does in
// `co_await weft::inFiber(fn, options)`). The awaiter resumes on its own executor when
// the fiber has finished. Compare spawnFiber, which starts at once on the executor it is
// given, under the token in its options, and detaches when its future is dropped.
//
// Preconditions: awaited from a coroutine bound to an executor (a Lazy started with
// via(), a Task, syncAwait(lazy, executor)) or from a fiber.
// Errors: fn's exception; OperationCancelled if fn lets the cancellation propagate;
// std::logic_error from the co_await when the awaiter has no executor (nothing ran);
// what spawnFiber throws (ExecutorShutDown, stack allocation), from the co_await.
// Thread safety: as spawnFiber; fn runs on the executor's threads.
//
// Example:
//   weft::Lazy<Row> lookup(Key key) {
//     // legacyGet blocks in weft::await(...) calls; a timeout on lookup reaches them
//     co_return co_await weft::inFiber([key] { return legacyGet(key); });
//   }
template <class F>
  requires std::invocable<std::decay_t<F>&&>
InFiber<std::decay_t<F>> inFiber(F&& fn, SpawnFiberOptions options = {}) {
  return InFiber<std::decay_t<F>>(std::forward<F>(fn), std::move(options));
}

}  // namespace weft
