#pragma once

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect_any.h"
#include "weft/coro/detail/await_in_lazy.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/try.h"

namespace weft {

// What withTimeout throws when the time ran out before the work finished.
class TimeoutError : public std::runtime_error {
 public:
  TimeoutError() : std::runtime_error("weft: operation timed out") {}
  explicit TimeoutError(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

// True when the time ran out, false when the timer was cancelled (the work finished
// first, or the awaiter was cancelled): no exception on the common path.
template <class Rep, class Period>
Lazy<bool> timeoutTimer(std::chrono::duration<Rep, Period> timeout) {
  co_return co_await SleepOrCancelAwaitable<Rep, Period>(timeout);
}

// True if `result` holds an OperationCancelled (or a type derived from it).
template <class T>
bool endedByCancellation(const Try<T>& result) {
  if (!result.hasException()) return false;
  try {
    std::rethrow_exception(result.exception());
  } catch (const OperationCancelled&) {
    return true;
  } catch (...) {
    return false;
  }
}

template <class T, class Rep, class Period>
Lazy<T> withTimeoutImpl(Lazy<T> lazy, std::chrono::duration<Rep, Period> timeout) {
  auto outcome = co_await collectAnyNoDiscard(std::move(lazy), timeoutTimer(timeout));
  Try<T>& work = std::get<0>(outcome.results);
  // The work's outcome is the answer, unless the timer finished first and the work then
  // ended with the OperationCancelled that this caused. A value (or another exception)
  // that arrived despite the cancellation is never discarded.
  if (outcome.index == 1 && endedByCancellation(work)) {
    // The timer fired (a timeout), or was itself cancelled (the awaiter was) or ended by
    // its executor's shutdown (ExecutorShutDown, rethrown by value()).
    if (!std::get<1>(outcome.results).value()) throw OperationCancelled();
    throw TimeoutError();
  }
  co_return std::move(work).value();
}

}  // namespace detail

// withTimeout(lazy, duration): runs `lazy`, but gives up after `duration`: the work is
// then cancelled and awaited, and withTimeout throws TimeoutError unless the work
// finished anyway.
//
// Semantics: `lazy` and a timer race as in collectAny. If `lazy` finishes first, the
// timer is cancelled (its entry leaves the timer heap at once) and its value is returned
// or its exception rethrown. If the timer fires first, `lazy`'s token is cancelled, its
// cancellable awaits throw OperationCancelled, and withTimeout waits for it to finish:
//  - if it ended with that OperationCancelled, withTimeout throws TimeoutError;
//  - if it finished with a value anyway (cancellation never undoes work that is done: a
//    receive that got its value, a lock or a permit granted as the timer fired), that
//    value is returned; if it failed with another exception, that exception propagates.
// So nothing the work obtained is ever discarded: TimeoutError means the work ended by
// the timeout's cancellation and obtained nothing. Composed I/O that the timeout stops
// part-way (TcpStream::readExactly, writeAll, File::readExactlyAt, writeAllAt) throws
// IncompleteTransfer (io/incomplete_transfer.h), which says how many bytes it
// transferred, and withTimeout passes it through as another exception. `lazy` inherits
// the executor and sees the awaiter's cancellation too (then OperationCancelled
// propagates, not TimeoutError, unless the work returned a value regardless). The timer
// runs on the executor's timers (see sleep()). A duration <= 0 times out at once if
// `lazy` suspends.
//
// Preconditions: `lazy` is valid (else abort). It must react to cancellation (cancellable
// awaits or polling its token) to end promptly after the timeout: weft never abandons
// running work, so withTimeout returns only once `lazy` has finished.
// Errors: TimeoutError; what `lazy` throws; OperationCancelled when the awaiter is
// cancelled; ExecutorShutDown from the timer if the executor shuts down.
// Thread safety: as collectAny.
//
// Example:
//   try {
//     Reply r = co_await weft::withTimeout(call(server), 200ms);
//   } catch (const weft::TimeoutError&) { /* retry elsewhere */ }
template <class T, class Rep, class Period>
Lazy<T> withTimeout(Lazy<T> lazy, std::chrono::duration<Rep, Period> timeout) {
  if (!lazy.valid()) detail::abortInvalidLazy("withTimeout");
  return detail::withTimeoutImpl(std::move(lazy), timeout);
}

// withTimeout(awaitable, duration): the same for anything a Lazy can co_await: a Task, a
// fiber started by weft::inFiber (its awaits see the cancellation), a weft awaitable (a
// channel receive, a lock, an I/O operation) or a user's. Returns a Lazy; from a fiber,
// `weft::await(weft::withTimeout(x, d))`.
//
// The timeout reaches the work as cancellation, so it ends early only if the awaitable
// is cancellation-aware (it exposes `coAwait(Executor*, const CancellationToken&)`, as
// every weft awaitable, a Task and inFiber do). Any other awaitable, including the
// FiberFuture of a fiber already running under its own token, is awaited to its end, and
// its value is returned even if the time ran out (nothing it obtained is discarded). An rvalue is moved into the returned Lazy; an
// lvalue is awaited in place and must outlive it.
// Errors: as above; an empty Task or FiberFuture aborts with a message when awaited.
template <class A, class Rep, class Period>
  requires(!detail::kIsLazy<std::remove_cvref_t<A>>)
Lazy<detail::AwaitResult<A>> withTimeout(A&& awaitable,
                                         std::chrono::duration<Rep, Period> timeout) {
  return detail::withTimeoutImpl(detail::asLazy(std::forward<A>(awaitable)), timeout);
}

}  // namespace weft
