#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "coro/collect_any.h"
#include "coro/lazy.h"
#include "coro/sleep.h"
#include "coro/try.h"

namespace weft {

// What withTimeout throws when the time ran out before the work finished.
class TimeoutError : public std::runtime_error {
 public:
  TimeoutError() : std::runtime_error("weft: operation timed out") {}
  explicit TimeoutError(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

template <class Rep, class Period>
Lazy<void> timeoutTimer(std::chrono::duration<Rep, Period> timeout) {
  co_await sleep(timeout);
}

template <class T, class Rep, class Period>
Lazy<T> withTimeoutImpl(Lazy<T> lazy, std::chrono::duration<Rep, Period> timeout) {
  auto outcome = co_await collectAny(std::move(lazy), timeoutTimer(timeout));
  if (outcome.index() == 0) co_return std::move(std::get<0>(outcome)).value();
  // The timer finished first. If it was cancelled (the awaiter was), say so; otherwise
  // the time ran out and the work has been cancelled and has finished.
  std::get<1>(outcome).value();
  throw TimeoutError();
}

}  // namespace detail

// withTimeout(lazy, duration): runs `lazy`, but gives up after `duration`: the work is
// then cancelled, awaited, and withTimeout throws TimeoutError.
//
// Semantics: `lazy` and a timer race as in collectAny. If `lazy` finishes first, the
// timer is cancelled (its entry leaves the timer heap at once) and its value is returned
// or its exception rethrown. If the timer fires first, `lazy`'s token is cancelled, its
// cancellable awaits throw OperationCancelled, and once it has finished (its result is
// discarded) TimeoutError is thrown. `lazy` inherits the executor and sees the
// awaiter's cancellation too (then OperationCancelled propagates, not TimeoutError). The
// timer runs on the executor's timers (see sleep()).
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

}  // namespace weft
