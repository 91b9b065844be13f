#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <coroutine>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/executor_clock.h"
#include "weft/executors/timer_entry.h"

namespace weft {

namespace detail {

// steady_clock, or the virtual time of a simulation running on this thread
// (executors/executor_clock.h). Its time_point is steady_clock's, as TimerEntry's.
using SleepClock = ExecutorClock;

// A NaN duration or time point has no place in time: rejected (std::invalid_argument
// with `message`) rather than turned into some deadline by an undefined float-to-integer
// conversion.
template <class Rep, class Period>
void rejectNaN(std::chrono::duration<Rep, Period> d, const char* message) {
  if constexpr (std::chrono::treat_as_floating_point_v<Rep>) {
    if (d.count() != d.count()) throw std::invalid_argument(message);
  }
}

// now + d, saturating at time_point::max() (a sleep that never ends unless cancelled).
// Throws std::invalid_argument for a NaN d.
template <class Rep, class Period>
SleepClock::time_point deadlineAfter(std::chrono::duration<Rep, Period> d,
                                     SleepClock::time_point now) {
  rejectNaN(d, "weft: sleep of a NaN duration");
  if (d <= d.zero()) return now;  // also -infinity
  // Compared in floating point, so no unit conversion can overflow: anything longer than
  // half the clock's remaining range (about 146 years) is "forever" (so is +infinity).
  using Seconds = std::chrono::duration<double>;
  const auto room = SleepClock::time_point::max() - now;
  if (Seconds(d) >= Seconds(room) / 2) return SleepClock::time_point::max();
  return now + std::chrono::ceil<SleepClock::duration>(d);
}
template <class Rep, class Period>
SleepClock::time_point deadlineAfter(std::chrono::duration<Rep, Period> d) {
  return deadlineAfter(d, SleepClock::now());
}

// `d` as a SleepClock::duration, for a deadlineAfter(result, now) to come that saturates
// as deadlineAfter(d, now) would: zero for d <= 0 (also -infinity), duration::max() for
// anything at least half of what the clock's durations can count (+infinity: "forever"),
// otherwise d rounded up. Throws std::invalid_argument with `nanMessage` for a NaN d.
template <class Rep, class Period>
SleepClock::duration clampedDuration(std::chrono::duration<Rep, Period> d,
                                     const char* nanMessage) {
  rejectNaN(d, nanMessage);
  if (d <= d.zero()) return SleepClock::duration::zero();
  using Seconds = std::chrono::duration<double>;
  if (Seconds(d) >= Seconds(SleepClock::duration::max()) / 2) return SleepClock::duration::max();
  return std::chrono::ceil<SleepClock::duration>(d);
}

// The steady_clock deadline of `at`, a time point of any clock and duration, where `now`
// is SleepClock's reading: exactly deadlineAfter(at - Clock::now(), now) (so it
// saturates exactly as sleep() does), with the difference computed without overflow. A
// steady_clock (or ExecutorClock) time point is taken as a time of SleepClock (in a
// simulation, a virtual time) and needs no other reading. Throws std::invalid_argument
// for a NaN `at`.
template <class Clock, class Duration>
SleepClock::time_point deadlineAt(std::chrono::time_point<Clock, Duration> at,
                                  SleepClock::time_point now) {
  rejectNaN(at.time_since_epoch(), "weft: sleepUntil of a NaN time point");
  using Seconds = std::chrono::duration<double>;
  if constexpr (std::is_same_v<Clock, std::chrono::steady_clock> ||
                std::is_same_v<Clock, ExecutorClock>) {
    // Used as is (no second reading of the clock moves it), once it is known to be
    // representable: within half the clock's remaining range of now (as deadlineAfter
    // saturates), and not so far in the past that nanoseconds overflow.
    const Seconds gap = Seconds(at.time_since_epoch()) - Seconds(now.time_since_epoch());
    const Seconds halfRoom = Seconds(SleepClock::time_point::max() - now) / 2;
    if (gap >= halfRoom) return SleepClock::time_point::max();  // also +infinity
    if (gap <= -halfRoom) return now;                            // long past; also -infinity
    return SleepClock::time_point(std::chrono::ceil<SleepClock::duration>(at.time_since_epoch()));
  } else {
    // `at - now` in their common duration overflows if either is not representable in
    // it, or if they are more than its range apart. Within half its range both are, and
    // the difference is exact. Otherwise they are far apart (at least decades for
    // nanoseconds), and the gap computed in floating point is precise enough to saturate
    // or to sleep that long.
    const typename Clock::time_point clockNow = Clock::now();
    using Common = std::common_type_t<Duration, typename Clock::duration>;
    const double limit = Seconds(Common::max()).count() / 2;
    const double atSeconds = Seconds(at.time_since_epoch()).count();
    const double nowSeconds = Seconds(clockNow.time_since_epoch()).count();
    if (std::fabs(atSeconds) < limit && std::fabs(nowSeconds) < limit) {
      return deadlineAfter(at - clockNow, now);
    }
    return deadlineAfter(Seconds(atSeconds - nowSeconds), now);
  }
}

// Arms `timer` (its deadline and fire function set) on `executor`'s timers, or on the
// process-wide timer queue when there is no executor: what a sleep and withTimeout's
// timer do. Errors: as Executor::scheduleTimer (ExecutorShutDown once the queue is
// stopped); nothing is armed then.
inline void armTimer(Executor* executor, TimerEntry& timer) {
  if (executor != nullptr) {
    executor->scheduleTimer(timer);
  } else {
    Executor::scheduleProcessTimer(timer);
  }
}

// Disarms a timer armed by armTimer: true if its fire function will never run.
// noexcept: a heap removal.
inline bool disarmTimer(Executor* executor, TimerEntry& timer) noexcept {
  return executor != nullptr ? executor->cancelTimer(timer) : Executor::cancelProcessTimer(timer);
}

// Resumes `waiter`, whose wait a timer's fire function or a cancellation has just ended,
// on its executor: inline when there is none, or when `inlineOnExecutor` (a fire
// function, never a cancellation callback, which runs on the canceller's stack) and this
// thread is one of its own; otherwise through schedule(). If the executor refuses (it
// shut down under the waiter), `*refused` is set (when not null) and the waiter resumes
// inline here rather than being lost. noexcept: resuming a weft coroutine does not throw
// (its promise catches).
inline void resumeAfterTimer(std::coroutine_handle<> waiter, Executor* executor,
                             bool inlineOnExecutor, bool* refused) noexcept {
  if (executor == nullptr || (inlineOnExecutor && executor->currentThreadInExecutor())) {
    waiter.resume();
    return;
  }
  try {
    executor->schedule(waiter);
  } catch (...) {
    if (refused != nullptr) *refused = true;
    waiter.resume();
  }
}

// The awaiter of a sleep. Lives in the sleeping coroutine's frame, and so does its timer
// entry and its cancellation registration: arming allocates nothing.
//
// Three parties may finish a sleep: the timer firing, the token's cancellation, and (when
// the timer fires or is cancelled before await_suspend is done) await_suspend itself.
// Exactly one of the first two wins, decided by who disarms the timer (the timer queue's
// heap removal is the arbiter: cancel() returns true only if the timer had not fired).
// The winner and await_suspend then both "arrive"; the second to arrive resumes the
// coroutine (or, if that is await_suspend, continues without suspending), so the
// coroutine is never resumed while await_suspend still runs and never twice.
//
// Destroying the coroutine while it is suspended here (waiter_ set, await_resume not yet
// run) makes the destructor a fourth party: it tries to disarm the timer like the
// cancellation does. If it wins, neither the timer nor the cancellation will ever resume
// the coroutine, and deregistering the callback leaves nothing that refers to this
// awaiter. If it loses, the timer fired or a cancellation claimed the sleep, and a
// resumption of the coroutine being destroyed is under way: weft reports the misuse and
// aborts.
class SleepAwaiter {
 public:
  // `now`: the clock's reading that `deadline` was computed from (one reading serves
  // both: whether the deadline has passed is decided by it).
  SleepAwaiter(SleepClock::time_point deadline, SleepClock::time_point now, Executor* executor,
               const CancellationToken& token) noexcept
      : deadline_(deadline), now_(now), executor_(executor), token_(token) {}
  SleepAwaiter(const SleepAwaiter&) = delete;
  SleepAwaiter& operator=(const SleepAwaiter&) = delete;
  // noexcept (implicitly): a heap removal and a deregistration; misuse aborts. One branch
  // on the normal path: waiter_ is null once await_resume has run, or if the sleep never
  // suspended.
  ~SleepAwaiter() {
    if (waiter_) [[unlikely]] withdraw();
  }

  // Cancelled before: throws at once. A deadline already passed (when it was computed):
  // does not suspend.
  bool await_ready() const {
    token_.throwIfCancellationRequested();
    return deadline_ <= now_;
  }

  bool await_suspend(std::coroutine_handle<> waiter) {
    timer_.deadline = deadline_;
    timer_.complete = &SleepAwaiter::onFire;
    timer_.owner = this;
    arm();  // throws (ExecutorShutDown, bad_alloc, system_error) with nothing armed
    // Set only once armed (the destructor's sign that there is a timer to withdraw). A
    // winner that already arrived does not read it: only the second arrival does, after
    // the fetch_add below.
    waiter_ = waiter;
    if (token_.canBeCancelled()) {
      // Captures one pointer: stored inline, so this does not throw.
      onCancel_.emplace(token_, [this] {
        if (disarm()) {
          cancelled_ = true;
          arrive(/*byCancellation=*/true);
        }
      });
    }
    // acq_rel: release publishes waiter_ and the registration to the winner; acquire
    // sees what the winner wrote (cancelled_, timer_.shutDown) if we continue inline.
    return arrivals_.fetch_add(1, std::memory_order_acq_rel) == 0;
  }

  void await_resume() {
    if (!resumeWithoutThrowing()) throw OperationCancelled("weft: sleep cancelled");
  }

  // await_resume without the exception: false when cancelled, true when the time has
  // passed. Errors: ExecutorShutDown as await_resume.
  bool resumeWithoutThrowing() {
    // Waits if the callback still runs on another thread (it lost the race, or is
    // finishing its arrival); after this, nothing refers to this awaiter.
    onCancel_.reset();
    waiter_ = nullptr;  // resumed: nothing for the destructor to withdraw
    if (cancelled_) return false;
    if (timer_.shutDown) {
      throw ExecutorShutDown(executor_ != nullptr ? std::string(executor_->name())
                                                  : std::string("weft-timer"));
    }
    return true;
  }

  const CancellationToken& token() const noexcept { return token_; }

  // For task dumps (coro/detail/wait_note.h): "sleep, due in 1.200 s".
  void describeWait(std::string& out) const {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - SleepClock::now()).count();
    char text[64];
    std::snprintf(text, sizeof(text), "sleep, due in %s%lld.%03lld s", left < 0 ? "-" : "",
                  static_cast<long long>((left < 0 ? -left : left) / 1000),
                  static_cast<long long>((left < 0 ? -left : left) % 1000));
    out += text;
  }

 private:
  void arm() { armTimer(executor_, timer_); }
  bool disarm() noexcept { return disarmTimer(executor_, timer_); }

  // The destructor's path for a coroutine destroyed while suspended here. Cold: only
  // destruction of a suspended coroutine comes here.
  [[gnu::cold, gnu::noinline]] void withdraw() noexcept {
    if (!disarm()) {
      // Waits for a callback still running on another thread (so that cancelled_ can be
      // read); a callback that runs later finds the timer gone.
      onCancel_.reset();
      // Dropped by a stopped timer queue (the process-wide one at exit): nothing will
      // ever resume the coroutine, so destroying it is what should happen.
      if (timer_.dropped) return;
      // The timer fired or the cancellation won: the coroutine's resumption is on its way
      // (queued on its executor, or running).
      abortDestroyedWhileResuming(
          "sleep()", cancelled_ ? "its cancellation had been delivered"
                                : "its timer had fired, or its executor had ended it");
    }
    // Disarmed: the cancellation callback, if it runs now on another thread, finds the
    // timer gone and does nothing; reset() waits for it and deregisters it.
    onCancel_.reset();
  }

  // The timer's fire function: on one of the executor's threads (ThreadPool) or on a
  // timer thread. `run == false` (an executor refusing the job) counts as a shutdown.
  // noexcept: resuming a weft coroutine does not throw (its promise catches).
  static void onFire(Job* job, bool run) noexcept {
    auto* timer = static_cast<Timer*>(job);
    if (!run) timer->shutDown = true;
    timer->owner->arrive(/*byCancellation=*/false);
  }

  // The second arrival resumes the coroutine on its executor: inline when already on one
  // of its threads after a timer fired; always through schedule() after a cancellation
  // (never inside requestCancellation() on the canceller's stack); inline on this thread
  // when there is no executor, or when the executor refuses (then the sleep reports
  // ExecutorShutDown rather than losing the coroutine).
  void arrive(bool byCancellation) noexcept {
    // acq_rel: see await_suspend.
    if (arrivals_.fetch_add(1, std::memory_order_acq_rel) == 0) return;
    resumeAfterTimer(waiter_, executor_, /*inlineOnExecutor=*/!byCancellation,
                     cancelled_ ? nullptr : &timer_.shutDown);
  }

  struct Timer : TimerEntry {
    SleepAwaiter* owner;
  };

  Timer timer_;
  SleepClock::time_point deadline_;
  SleepClock::time_point now_;
  Executor* executor_;
  const CancellationToken& token_;
  std::coroutine_handle<> waiter_;
  std::atomic<int> arrivals_{0};
  bool cancelled_ = false;
  std::optional<CancellationCallback> onCancel_;
};

template <class Deadline>
class SleepAwaitable {
 public:
  explicit SleepAwaitable(Deadline deadline) noexcept : deadline_(deadline) {}

  // The clock is read once per sleep: the deadline is computed from that reading, and
  // await_ready compares with it.
  SleepAwaiter coAwait(Executor* executor, const CancellationToken& token) const {
    const SleepClock::time_point now = SleepClock::now();
    return SleepAwaiter(deadline_(now), now, executor, token);
  }
  // Outside a weft coroutine: no executor (resumes on the timer thread), no token.
  SleepAwaiter operator co_await() const {
    const SleepClock::time_point now = SleepClock::now();
    return SleepAwaiter(deadline_(now), now, nullptr, kNoCancellationToken);
  }

 private:
  Deadline deadline_;
};

}  // namespace detail

// `co_await sleep(duration)`: suspends the current Lazy/Task (or fiber, with
// `weft::await`) for at least `duration`, measured on ExecutorClock from the co_await:
// std::chrono::steady_clock, or the virtual time of a simulation (weft::testing, where a
// sleep of an hour ends as soon as nothing else can run). A duration <= 0 (or -infinity)
// does not suspend. A duration longer than about 146 years (half of what steady_clock can
// still count; +infinity, hours::max()...) sleeps forever: only a cancellation or the
// executor's shutdown ends it.
//
// Semantics: the timer is armed on the coroutine's executor (Executor::scheduleTimer). On
// a ThreadPool, the worker running the coroutine keeps the timer in its own heap and, at
// the deadline, resumes the coroutine itself, ahead of its queued work, with no other
// thread involved (if that worker is stuck in a long item, the pool's timer thread hands
// the timer to another worker within about 1 ms of the deadline). On another executor, the shared
// "weft-timer" thread schedules the coroutine on its executor (an InlineExecutor thus
// resumes it on the timer thread). In a coroutine without an executor, it resumes ON THE
// "weft-timer" THREAD: keep what follows short, or bind the coroutine to an executor, or
// every other timer of the process waits behind it. No thread is started until the first
// sleep.
//
// Cancellation: if the coroutine's token is cancelled before or during the sleep, the
// sleep throws OperationCancelled promptly (through the executor) and its timer entry is
// removed at once. A sleep that already ended completes normally.
//
// Destruction: destroying a coroutine suspended in a sleep (its Lazy, a collectAny it is
// a branch of, or a withTimeout it is the work of) withdraws the sleep: its timer leaves the timer heap and
// its cancellation callback is deregistered. Destroying it after its timer fired or its
// cancellation was delivered (its resumption is then on its way: queued on its executor
// or running) is a use error: weft prints a "weft: ..." message naming it and aborts.
// Destroy only coroutines that nothing will resume; to stop one, cancel it. (A sleep
// whose timer was dropped, never to fire, when the process-wide timer thread stopped at
// exit is one that nothing will resume: destroying it is fine.)
//
// Errors: std::invalid_argument from the co_await if `duration` is NaN. OperationCancelled
// (above). ExecutorShutDown if the executor accepts no more
// timers, or shuts down during the sleep (ThreadPool::shutdown ends pending sleeps early
// with it, so shutting a pool down never waits for its sleepers' deadlines).
// std::bad_alloc / std::system_error if the timer heap cannot grow or the timer thread
// cannot start.
// Thread safety: the coroutine may resume on another thread of its executor.
//
// Example:
//   using namespace std::chrono_literals;
//   co_await weft::sleep(10ms);
//   weft::await(weft::sleep(10ms));  // from a fiber
template <class Rep, class Period>
auto sleep(std::chrono::duration<Rep, Period> duration) noexcept {
  auto deadline = [duration](detail::SleepClock::time_point now) {
    return detail::deadlineAfter(duration, now);
  };
  return detail::SleepAwaitable<decltype(deadline)>(deadline);
}

// `co_await sleepUntil(timePoint)`: sleep until `timePoint` of any clock. A steady_clock
// time point is used as is (as a time of ExecutorClock: in a simulation, a virtual time;
// compute it from ExecutorClock::now()); another clock's is converted to steady_clock when
// awaited (so a later change of the system clock does not move it). A time in the past
// does not suspend. Otherwise exactly as sleep(timePoint - Clock::now()), the difference
// computed without overflow for any clock and duration: a time point before the clock's
// epoch range (system_clock::time_point::min()) does not suspend, one beyond what
// steady_clock can count (time_point<Clock, hours>::max(), +infinity) sleeps until
// cancelled.
// Errors: as sleep(); std::invalid_argument from the co_await if `timePoint` is NaN.
//
// Example:
//   auto next = weft::ExecutorClock::now();
//   for (;;) { next += 100ms; co_await weft::sleepUntil(next); tick(); }
template <class Clock, class Duration>
auto sleepUntil(std::chrono::time_point<Clock, Duration> timePoint) noexcept {
  auto deadline = [timePoint](detail::SleepClock::time_point now) {
    return detail::deadlineAt(timePoint, now);
  };
  return detail::SleepAwaitable<decltype(deadline)>(deadline);
}

}  // namespace weft
