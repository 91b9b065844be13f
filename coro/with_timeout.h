#pragma once

#include <chrono>
#include <coroutine>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/await_result.h"
#include "weft/coro/detail/await_in_lazy.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/timeout_race.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft {

// What withTimeout throws when the time ran out before the work finished.
class TimeoutError : public std::runtime_error {
 public:
  TimeoutError() : std::runtime_error("weft: operation timed out") {}
  explicit TimeoutError(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

// True if `error` is an OperationCancelled (or a type derived from it). Out of the way of
// the common path: only an exception comes here.
inline bool isOperationCancelled(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const OperationCancelled&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The awaiter of withTimeout's one co_await: the race (coro/detail/timeout_race.h) over
// the work's frame, and the reading of its outcome.
template <class T, class Duration>
class TimeoutAwaiter final : public TimeoutRace {
 public:
  // Errors: std::bad_alloc (the work's token); the work's frame is freed then.
  TimeoutAwaiter(std::coroutine_handle<LazyPromise<T>> work, Duration timeout, Executor* executor,
                 const CancellationToken& parent)
      : TimeoutRace(work, work.promise(), executor, parent, &TimeoutAwaiter::deadlineOf),
        work_(work),
        timeout_(timeout) {}

  // The work's outcome is the answer, unless the timer cancelled the work first and the
  // work then ended with the OperationCancelled that this caused. A value (or another
  // exception) that arrived despite the cancellation is never discarded.
  T await_resume() {
    resumed();
    Try<T>& result = work_.promise().result_;
    if (cancelledByTimer()) [[unlikely]] {
      if (result.hasException() && isOperationCancelled(result.exception())) throwTimerOutcome();
    }
    if constexpr (std::is_void_v<T>) {
      result.value();
    } else {
      return std::move(result).value();
    }
  }

  // For task dumps (coro/detail/wait_note.h): "withTimeout of 0.200 s".
  void describeWait(std::string& out) const {
    char text[64];
    std::snprintf(text, sizeof(text), "withTimeout of %.3f s",
                  std::chrono::duration<double>(timeout_).count());
    out += text;
  }

 private:
  static SleepClock::time_point deadlineOf(const TimeoutRace& self, SleepClock::time_point now) {
    return deadlineAfter(static_cast<const TimeoutAwaiter&>(self).timeout_, now);
  }

  // The time ran out (TimeoutError), or the timer ended by its executor's shutdown
  // (ExecutorShutDown), or arming it failed (what that threw).
  [[noreturn]] void throwTimerOutcome() const {
    if (timerError()) std::rethrow_exception(timerError());
    if (timerShutDown()) {
      throw ExecutorShutDown(executor() != nullptr ? std::string(executor()->name())
                                                   : std::string("weft-timer"));
    }
    throw TimeoutError();
  }

  std::coroutine_handle<LazyPromise<T>> work_;  // not owned: TimeoutRace owns the frame
  Duration timeout_;
};

template <class T, class Duration>
struct TimeoutAwaitable {
  std::coroutine_handle<LazyPromise<T>> work;
  Duration timeout;
  TimeoutAwaiter<T, Duration> coAwait(Executor* executor, const CancellationToken& token) const {
    return TimeoutAwaiter<T, Duration>(work, timeout, executor, token);
  }
};

// One coroutine frame: the work's frame is awaited by the race in this frame.
template <class T, class Rep, class Period>
Lazy<T> withTimeoutImpl(Lazy<T> lazy, std::chrono::duration<Rep, Period> timeout) {
  using Awaitable = TimeoutAwaitable<T, std::chrono::duration<Rep, Period>>;
  if constexpr (std::is_void_v<T>) {
    co_await Awaitable{LazyAccess::release(lazy), timeout};
  } else {
    co_return co_await Awaitable{LazyAccess::release(lazy), timeout};
  }
}

}  // namespace detail

// withTimeout(lazy, duration): runs `lazy`, but gives up after `duration`: the work is
// then cancelled and awaited, and withTimeout throws TimeoutError unless the work
// finished anyway.
//
// Semantics: `lazy` starts at once, on the awaiting thread, with a cancellation token of
// its own (linked to the awaiter's). If it finishes without suspending, its value is
// returned (or its exception rethrown) and no timer is ever armed: the clock is not even
// read. Once it suspends, a timer is armed for `duration` from then. If `lazy` finishes
// first, the timer is cancelled (its entry leaves the timer heap at once) and its value
// is returned or its exception rethrown. If the timer fires first, `lazy`'s token is cancelled, its
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
// cancelled; ExecutorShutDown from the timer if the executor shuts down; what arming the
// timer throws (std::invalid_argument for a NaN duration, std::bad_alloc...), in place of
// the OperationCancelled that its failure causes, like a timeout. (Each of these timer
// outcomes replaces only an OperationCancelled that the work ended with.)
// Thread safety: `lazy` may finish on another thread, concurrently with the timer firing
// and with the awaiter's cancellation; the awaiting coroutine resumes once, where the
// work finished (or on the executor, from the timer, when the timer fired as the work
// finished).
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
Lazy<AwaitResult<A>> withTimeout(A&& awaitable,
                                 std::chrono::duration<Rep, Period> timeout) {
  return detail::withTimeoutImpl(detail::asLazy(std::forward<A>(awaitable)), timeout);
}

}  // namespace weft
