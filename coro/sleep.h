#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <optional>
#include <string>

#include "coro/cancellation.h"
#include "executors/detail/timer_queue.h"
#include "executors/executor.h"

namespace weft {

namespace detail {

using SleepClock = std::chrono::steady_clock;

// now + d, saturating at time_point::max() (a sleep that never ends unless cancelled).
template <class Rep, class Period>
SleepClock::time_point deadlineAfter(std::chrono::duration<Rep, Period> d) {
  const SleepClock::time_point now = SleepClock::now();
  if (d <= d.zero()) return now;
  // Compared in floating point, so no unit conversion can overflow: anything longer than
  // half the clock's remaining range (about 146 years) is "forever".
  using Seconds = std::chrono::duration<double>;
  const auto room = SleepClock::time_point::max() - now;
  if (Seconds(d) >= Seconds(room) / 2) return SleepClock::time_point::max();
  return now + std::chrono::ceil<SleepClock::duration>(d);
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
class SleepAwaiter {
 public:
  SleepAwaiter(SleepClock::time_point deadline, Executor* executor,
               const CancellationToken& token) noexcept
      : deadline_(deadline), executor_(executor), token_(token) {}
  SleepAwaiter(const SleepAwaiter&) = delete;
  SleepAwaiter& operator=(const SleepAwaiter&) = delete;

  // Cancelled before: throws at once. A deadline already passed: does not suspend.
  bool await_ready() const {
    token_.throwIfCancellationRequested();
    return deadline_ <= SleepClock::now();
  }

  bool await_suspend(std::coroutine_handle<> waiter) {
    waiter_ = waiter;
    timer_.deadline = deadline_;
    timer_.complete = &SleepAwaiter::onFire;
    timer_.owner = this;
    arm();  // throws (ExecutorShutDown, bad_alloc, system_error) with nothing armed
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
    // Waits if the callback still runs on another thread (it lost the race, or is
    // finishing its arrival); after this, nothing refers to this awaiter.
    onCancel_.reset();
    if (cancelled_) throw OperationCancelled("weft: sleep cancelled");
    if (timer_.shutDown) {
      throw ExecutorShutDown(executor_ != nullptr ? std::string(executor_->name())
                                                  : std::string("weft-timer"));
    }
  }

 private:
  void arm() {
    if (executor_ != nullptr) {
      executor_->scheduleTimer(timer_);
    } else if (!globalTimerQueue().add(timer_)) {
      throw ExecutorShutDown("weft-timer");
    }
  }
  // noexcept: a heap removal.
  bool disarm() noexcept {
    return executor_ != nullptr ? executor_->cancelTimer(timer_)
                                : globalTimerQueue().cancel(timer_);
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
    std::coroutine_handle<> waiter = waiter_;
    Executor* executor = executor_;
    if (executor == nullptr || (!byCancellation && executor->currentThreadInExecutor())) {
      waiter.resume();
      return;
    }
    try {
      executor->schedule(waiter);
    } catch (...) {
      if (!cancelled_) timer_.shutDown = true;
      waiter.resume();
    }
  }

  struct Timer : TimerEntry {
    SleepAwaiter* owner;
  };

  Timer timer_;
  SleepClock::time_point deadline_;
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

  SleepAwaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return SleepAwaiter(deadline_(), executor, token);
  }
  // Outside a weft coroutine: no executor (resumes on the timer thread), no token.
  SleepAwaiter operator co_await() const {
    return SleepAwaiter(deadline_(), nullptr, kNoCancellationToken);
  }

 private:
  Deadline deadline_;
};

}  // namespace detail

// `co_await sleep(duration)`: suspends the current Lazy/Task (or fiber, with
// `weft::await`) for at least `duration`, measured on std::chrono::steady_clock from the
// co_await. A duration <= 0 does not suspend.
//
// Semantics: the timer is armed on the coroutine's executor (Executor::scheduleTimer). On
// a ThreadPool, the pool's timer thread hands the expired timer to a worker ahead of its
// queued work, and the coroutine resumes on that worker. On another executor, the shared
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
// Errors: OperationCancelled (above). ExecutorShutDown if the executor accepts no more
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
  auto deadline = [duration] { return detail::deadlineAfter(duration); };
  return detail::SleepAwaitable<decltype(deadline)>(deadline);
}

// `co_await sleepUntil(timePoint)`: sleep until `timePoint` of any clock. A steady_clock
// time point is used as is; another clock's is converted to steady_clock when awaited
// (so a later change of the system clock does not move it). A time in the past does not
// suspend. Otherwise exactly as sleep().
//
// Example:
//   auto next = std::chrono::steady_clock::now();
//   for (;;) { next += 100ms; co_await weft::sleepUntil(next); tick(); }
template <class Clock, class Duration>
auto sleepUntil(std::chrono::time_point<Clock, Duration> timePoint) noexcept {
  auto deadline = [timePoint] {
    if constexpr (std::is_same_v<Clock, detail::SleepClock>) {
      return std::chrono::time_point_cast<detail::SleepClock::duration>(timePoint);
    } else {
      return detail::deadlineAfter(timePoint - Clock::now());
    }
  };
  return detail::SleepAwaitable<decltype(deadline)>(deadline);
}

}  // namespace weft
