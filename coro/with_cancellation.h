#pragma once

#include <coroutine>
#include <type_traits>
#include <utility>

#include "weft/coro/await_result.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/await_in_lazy.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/lazy.h"
#include "weft/coro/task.h"
#include "weft/executors/executor.h"

namespace weft {

namespace detail {

// `co_await BindCancellationToken{&token}` makes the awaiting Lazy carry `*token` from
// now on (so the Lazys it awaits next inherit it). Never suspends.
struct BindCancellationToken {
  const CancellationToken* token;

  struct Awaiter {
    const CancellationToken* token;
    bool await_ready() const noexcept { return false; }
    // Returns false: the coroutine continues at once. Only a weft coroutine has a token
    // to replace, so only LazyPromiseBase promises are accepted.
    template <class Promise>
      requires std::is_base_of_v<LazyPromiseBase, Promise>
    bool await_suspend(std::coroutine_handle<Promise> self) const noexcept {
      self.promise().setCancellationToken(token);
      return false;
    }
    void await_resume() const noexcept {}
  };
  // Cancellation-aware so the promise hands it over unwrapped.
  Awaiter coAwait(Executor*, const CancellationToken&) const noexcept { return {token}; }
};

template <class T>
Lazy<T> withCancellationImpl(CancellationToken token, Lazy<T> lazy) {
  // `token` lives in this frame until `lazy` (destroyed first: parameters are destroyed
  // in reverse order) is gone, so `lazy` may point at it.
  co_await BindCancellationToken{&token};
  co_return co_await std::move(lazy);
}

}  // namespace detail

// withCancellation(token, lazy): a Lazy that runs `lazy` carrying `token` instead of the
// token it would inherit from its awaiter. Every cancellable await inside `lazy` (and
// inside the Lazys and Tasks it awaits) throws OperationCancelled once `token` is
// cancelled.
//
// Semantics: the new token replaces the inherited one; it is not combined with it (the
// awaiter's cancellation does not reach `lazy`). To make `lazy` cancellable by both,
// request cancellation of `token`'s source from a CancellationCallback on the awaiter's
// token (withTimeout and collectAny do exactly that). The result keeps a copy of `token`
// alive as long as it exists. `withCancellation(token, task)` binds the token to a Task
// and keeps its executor.
//
// Preconditions: `lazy` is valid (else abort with a message when it is awaited).
// Errors: whatever `lazy` throws, unchanged; std::bad_alloc if the wrapper frame cannot
// be allocated.
// Thread safety: as Lazy; the token may be cancelled from any thread at any time.
//
// Example:
//   weft::CancellationSource source;
//   pool.schedule([&] { source.requestCancellation(); });
//   weft::syncAwait(weft::withCancellation(source.token(), pollForever()), &pool);
template <class T>
Lazy<T> withCancellation(CancellationToken token, Lazy<T> lazy) {
  if (!lazy.valid()) detail::abortInvalidLazy("withCancellation");
  return detail::withCancellationImpl(std::move(token), std::move(lazy));
}

template <class T>
Task<T> withCancellation(CancellationToken token, Task<T> task) {
  if (!task.valid()) detail::abortInvalidLazy("withCancellation of a Task holding");
  // The wrapper runs on the task's executor and awaits the task's own Lazy, which
  // inherits that executor and the bound token.
  Executor* executor = task.executor();
  return detail::withCancellationImpl(std::move(token), std::move(detail::LazyAccess::lazyOf(task)))
      .via(executor);
}

// withCancellation(token, awaitable): the same for anything else a Lazy can co_await (a
// FiberFuture, a weft awaitable, a user's): a Lazy that awaits it carrying `token`. It
// reaches the awaitable only if that is cancellation-aware (see withTimeout). An rvalue is
// moved into the returned Lazy; an lvalue is awaited in place and must outlive it.
template <class A>
  requires(!detail::kIsLazy<std::remove_cvref_t<A>> && !detail::kIsTask<std::remove_cvref_t<A>>)
Lazy<AwaitResult<A>> withCancellation(CancellationToken token, A&& awaitable) {
  return detail::withCancellationImpl(std::move(token), detail::asLazy(std::forward<A>(awaitable)));
}

}  // namespace weft
