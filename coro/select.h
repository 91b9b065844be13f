#pragma once

#include <chrono>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "weft/coro/channel.h"
#include "weft/coro/detail/select_awaiter.h"
#include "weft/coro/sleep.h"

namespace weft {

// The public names of select()'s case and result types (their definitions are in
// coro/detail/): what defaultCase() and timeoutCase() return (channels' own cases are
// Channel<T>::ReceiveCase and Channel<T>::SendCase), and what select(cases...) returns:
// an awaitable that resumes with a std::variant of the cases' results (see select()).
using SelectDefaultCase = detail::SelectDefaultCase;
using SelectTimeoutCase = detail::SelectTimeoutCase;
template <class... Cases>
using SelectOperation = detail::SelectAwaitable<Cases...>;

// defaultCase(): the `default:` of a Go select, making it a non-blocking poll: chosen
// (its result is std::monostate) when no other case can complete at once.
inline SelectDefaultCase defaultCase() noexcept { return {}; }

// timeoutCase(duration): the `case <-time.After(d):` of a Go select: chosen (its result
// is std::monostate) when no other case has completed `duration` after the select began
// (measured on ExecutorClock, like sleep(): steady_clock, or a simulation's virtual
// time). A duration <= 0 makes it ready at once, though a ready channel case still wins.
// The clock is read, and the timer armed, only if no case is ready: on the select's
// executor (or the process-wide timer thread, without one: see sleep()); the timer is
// disarmed as soon as the select completes. A duration longer than about 146 years waits
// until cancelled, as sleep() does.
// Errors: std::invalid_argument if `duration` is NaN.
template <class Rep, class Period>
SelectTimeoutCase timeoutCase(std::chrono::duration<Rep, Period> duration) {
  return {detail::clampedDuration(duration, "weft: timeoutCase of a NaN duration")};
}

// select(cases...): waits until one of several channel operations can complete,
// completes exactly that one, and returns which it was, like Go's `select`.
//
//   auto r = co_await weft::select(in.receiveCase(), out.sendCase(v), weft::defaultCase());
//   switch (r.index()) {
//     case 0: if (std::optional<int>& v = std::get<0>(r)) use(*v); else /* in closed */;
//             break;
//     case 1: /* v was sent on out */ break;
//     case 2: /* nothing was ready */ break;
//   }
//
// Cases: ch.receiveCase() (Go `case v, ok := <-ch`), ch.sendCase(v) (Go `case ch <- v`),
// defaultCase() (Go `default`) and timeoutCase(d) (Go `case <-time.After(d)`), in any
// order and mix of element types. `.when(condition)` on a channel case switches it off for
// this select when false (Go's nil-channel idiom): it is never polled, linked or chosen,
// and a disabled send case sends nothing; a select whose channel cases are all disabled
// and that has no default or timeout waits until it is cancelled; the result is a std::variant whose index() is the
// position of the chosen case and whose alternative holds its result: std::optional<T>
// for a receive (empty when the channel is closed and drained), std::monostate for a
// send, the default or the timeout.
//
// Semantics (Go's):
//  - If one or more channel cases can complete at once, one of them is chosen uniformly
//    at random (so no channel starves another), and the select does not suspend.
//  - Otherwise, with a default case, the default is chosen at once; with a timeout case
//    whose time is up, the timeout. Else the select waits until some case can complete
//    (or the timeout expires), completes that one, and abandons the others. Its cases
//    are linked into their channels in a random order, so several waiting cases on one
//    channel are completed equally often.
//  - Exactly one case completes. A receive case that is not chosen takes no value from
//    its channel; a send case that is not chosen sends nothing (an rvalue given to
//    sendCase() is then not moved from).
//  - A receive case on a closed, drained channel is always ready (with an empty
//    optional), as in Go. A chosen send case on a closed channel throws ChannelClosed
//    (Go panics).
//  - The same channel may appear in several cases, in either direction. A select never
//    pairs with itself (its own send and receive on one unbuffered channel do not meet).
//  - A waiting select that belongs to an executor is resumed through it, like every
//    channel operation (coro/channel.h).
//  - Cancellation (Go's `case <-ctx.Done()`): the coroutine's (or fiber's) cancellation
//    token. Requested before the select, or while it waits, the select throws
//    OperationCancelled and no case completes; a case that completed first wins.
//  - Destroying a coroutine suspended in a select (or unwinding a fiber parked in one)
//    withdraws every case and disarms the timeout: no case completes. Once a case, the
//    cancellation or the timeout has claimed it, its resumption is under way: destroying
//    it then prints a message and aborts.
//
// Preconditions: every channel outlives the co_await; the cases are made inside the
// select(...) expression (they refer to the values given to sendCase()). At most one
// defaultCase() and one timeoutCase().
// Errors: ChannelClosed as above; OperationCancelled; std::bad_alloc if a chosen send
// case's unbounded channel cannot grow; ExecutorShutDown if the executor refuses the
// timeout's timer or stops its timers (shutdown) while the select waits. When the
// select throws, no case completed.
// Thread safety: channels in a select may be used by any number of other threads and
// selects at the same time.
template <class... Cases>
  requires(detail::kIsSelectCase<std::remove_cvref_t<Cases>> && ...)
SelectOperation<std::remove_cvref_t<Cases>...> select(Cases&&... cases) {
  return SelectOperation<std::remove_cvref_t<Cases>...>(
      std::remove_cvref_t<Cases>(std::forward<Cases>(cases))...);
}

// exchangeSelectRandomState(state): sets the state of the calling thread's generator that
// select() draws its fair choice among ready cases from, and returns the previous state.
// For reproducible runs: weft::testing::Simulation sets a state derived from its seed
// while it runs on a thread, and puts the previous one back when it stops, so that the
// same seed makes the same choices. 0 means "not seeded": the next choice seeds the
// generator from the thread and the clock (what every thread starts with).
// noexcept: a thread_local exchange. Thread safety: the calling thread's generator only.
//
// Example:
//   const std::uint64_t saved = weft::exchangeSelectRandomState(42);
//   ...  // selects on this thread choose as every run with 42 does
//   weft::exchangeSelectRandomState(saved);
inline std::uint64_t exchangeSelectRandomState(std::uint64_t state) noexcept {
  return std::exchange(detail::tlSelectRandomState, state);
}

}  // namespace weft
