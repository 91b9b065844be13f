#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <optional>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/sleep.h"
#include "weft/executors/executor.h"
#include "weft/executors/timer_entry.h"

namespace weft::detail {

// The race behind withTimeout (coro/with_timeout.h): runs the work with a cancellation
// token of its own and arms a timer only if the work suspends. It is the awaiter of the
// one co_await in withTimeout's coroutine and lives in that frame, with the timer entry,
// the link to the awaiter's token and the work's completion sink (it is the sink): the
// only allocation is the work's CancellationState, from the frame allocator. Work that
// finishes without suspending never reads the clock, never touches a timer heap, and
// costs one atomic read-modify-write (its arrival) beyond making and dropping its token.
//
// Arrivals, one bit each in `arrivals_` (acq_rel read-modify-writes, so whoever completes
// the set sees what the others wrote: the work's result, the timer's outcome):
//  - kWork: the work finished (its sink, in its final suspend, on any thread);
//  - kStarter: await_suspend is done with the timer (armed it, or decided not to);
//  - kTimer: the timer is out of the race: its fire function has finished (after
//    cancelling the work's token), or it was never armed (the work's token was already
//    cancelled, the deadline had passed, arming failed), or it was disarmed;
//  - kDisarmTried: see below.
// The second of kWork and kStarter to arrive disarms the timer (the first cannot: the
// timer may not be armed yet, or the work still runs). If the timer is gone (disarmed, or
// its fire function already arrived), that party resumes the awaiting coroutine (the
// work's sink by symmetric transfer, await_suspend by not suspending). If disarming fails,
// the fire function is running: the disarmer then arrives once more (kDisarmTried, after
// its last touch of the timer entry), and whichever of it and the fire function arrives
// second resumes the coroutine. So the coroutine resumes exactly once, after every party
// has finished with this object, and the fire function resumes it (on the executor, as a
// sleep's does) only when the timer fired while the work was finishing.
//
// Parent cancellation: a callback on the awaiting coroutine's token cancels the work's
// token; it resumes nothing (the work ends, and its sink arrives). Registered before the
// work starts, only when that token can be cancelled. Its destructor waits for a running
// callback, so nothing refers to this object after it.
//
// Destroying the awaiting coroutine while it is suspended here (withdraw) disarms the
// timer and deregisters the link, then frees the work's frame (which withdraws its own
// wait). If the timer had fired and its fire function has not finished, or the
// coroutine's resumption is under way, that is a use error: a message, then abort (as for
// a sleep).
//
// Thread safety: the work, the timer and the awaiter's cancellation may finish on any
// threads concurrently.
class TimeoutRace : public CompletionSink {
 public:
  // The deadline of the timer given the clock's reading `now` (deadlineAfter of the
  // caller's duration: it saturates; std::invalid_argument for a NaN duration).
  using DeadlineOf = SleepClock::time_point (*)(const TimeoutRace& self,
                                                SleepClock::time_point now);

  // `work`: the work's frame, owned from here on (freed with this object); `parent`: the
  // awaiting coroutine's token (outlives the await). Errors: std::bad_alloc (the token).
  TimeoutRace(std::coroutine_handle<> work, LazyPromiseBase& workPromise, Executor* executor,
              const CancellationToken& parent, DeadlineOf deadlineOf)
      : CompletionSink(&TimeoutRace::workFinished, "withTimeout"),
        work_{work},
        workPromise_(workPromise),
        executor_(executor),
        parent_(parent),
        deadlineOf_(deadlineOf) {}
  TimeoutRace(const TimeoutRace&) = delete;
  TimeoutRace& operator=(const TimeoutRace&) = delete;

  // noexcept (implicitly): withdrawing is a heap removal and a deregistration; misuse
  // aborts. One branch on the normal path.
  ~TimeoutRace() {
    if (suspended_) [[unlikely]] withdraw();
    std::exchange(work_.handle, nullptr).destroy();  // before the token it points at
  }

  bool await_ready() const noexcept { return false; }

  // Starts the work on this thread, bound to the race (its sink), the executor and the
  // work's token; arms the timer if it suspends. False (do not suspend) when the work has
  // finished and the timer is out of the race. noexcept: arming's errors are the timer's
  // outcome (timerError()), reported when the work ends by the cancellation they cause.
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> awaiting) noexcept {
    // Async backtraces from inside the work lead to whoever awaits withTimeout (its own
    // frame is not shown, as a collect's is not).
    traceParent_ = asyncParentAbove(awaiting);
    waiter_ = awaiting;
    if (parent_.canBeCancelled()) {
      // Captures one pointer: stored inline, so this does not throw. Runs at once if the
      // awaiter is cancelled already: the work then starts cancelled.
      link_.emplace(parent_, [this] { source_.requestCancellation(); });
    }
    workPromise_.setCompletionSink(this);
    workPromise_.setExecutor(executor_);
    workPromise_.setCancellationToken(&source_.token());
    work_.handle.resume();
    // Acquire: pairs with the sink's arrival (the work's result). The work finished before
    // suspending, or on another thread already: no timer, nothing to wait for.
    if (arrivals_.load(std::memory_order_acquire) & kWork) return false;
    return armAndArrive();
  }

  // True when the timer (its expiry, its executor's shutdown, or a failure to arm it)
  // cancelled the work's token first: then an OperationCancelled from the work is the
  // timer's doing. Valid once resumed.
  bool cancelledByTimer() const noexcept { return cancelledByTimer_; }
  // What arming the timer threw (ExecutorShutDown, std::bad_alloc, std::invalid_argument
  // for a NaN duration...), or null.
  const std::exception_ptr& timerError() const noexcept { return timerError_; }
  // The timer ended by its executor's shutdown rather than by its deadline.
  bool timerShutDown() const noexcept { return timer_.shutDown; }
  Executor* executor() const noexcept { return executor_; }

 protected:
  // Once resumed (await_resume): nothing left to withdraw.
  void resumed() noexcept { suspended_ = false; }

 private:
  static constexpr std::uint8_t kWork = 1;
  static constexpr std::uint8_t kStarter = 2;
  static constexpr std::uint8_t kTimer = 4;
  static constexpr std::uint8_t kDisarmTried = 8;

  struct Timer : TimerEntry {
    TimeoutRace* owner;
  };

  // The timer's side of await_suspend, once the work has suspended. Out of line: the work
  // that completes at once never comes here.
  [[gnu::noinline]] bool armAndArrive() noexcept {
    std::uint8_t arrival = kStarter;
    if (source_.isCancellationRequested()) {
      arrival |= kTimer;  // cancelled already (the awaiter was): no timer to race
    } else {
      try {
        const SleepClock::time_point now = SleepClock::now();
        timer_.deadline = deadlineOf_(*this, now);
        if (timer_.deadline <= now) {
          timeUp();  // a duration <= 0: the time is up at once
          arrival |= kTimer;
        } else {
          timer_.complete = &TimeoutRace::timerFired;
          timer_.owner = this;
          armTimer(executor_, timer_);
          armed_ = true;
        }
      } catch (...) {
        timerError_ = std::current_exception();
        timeUp();
        arrival |= kTimer;
      }
    }
    // Set before arriving: once arrived, the coroutine may be resumed (and this object
    // destroyed) by another party at any moment.
    suspended_ = true;
    // acq_rel: release publishes the timer and waiter_ to the party that resumes; acquire
    // sees the work's result if it arrived first.
    const std::uint8_t seen = arrivals_.fetch_or(arrival, std::memory_order_acq_rel) | arrival;
    if ((seen & kWork) == 0) return true;  // the work's sink or the timer resumes us
    // The work finished while the timer was being armed.
    if (timerGone(seen)) {
      suspended_ = false;
      return false;
    }
    return true;  // the fire function (or, after it, our kDisarmTried) resumes us
  }

  // For the second of kWork and kStarter to arrive (`seen`: the bits after its arrival):
  // true when the timer is out of the race, so that the caller resumes the coroutine.
  // Otherwise disarming failed and the fire function, which runs now, or this arrival of
  // kDisarmTried, whichever is second, resumes it; the caller must not touch this object
  // again.
  bool timerGone(std::uint8_t seen) noexcept {
    if ((seen & kTimer) != 0) return true;
    if (disarmTimer(executor_, timer_)) return true;  // it will never fire
    // acq_rel: after our last touch of the timer entry; acquire as in armAndArrive.
    const std::uint8_t before = arrivals_.fetch_or(kDisarmTried, std::memory_order_acq_rel);
    return (before & kTimer) != 0;  // the fire function has finished meanwhile
  }

  // The work's sink: runs in its final suspend, on the thread that finished it. Returns
  // the coroutine to transfer to. noexcept: runs in a final suspend.
  static std::coroutine_handle<> workFinished(CompletionSink* sink) noexcept {
    auto* self = static_cast<TimeoutRace*>(sink);
    // acq_rel: release publishes the work's result; acquire sees the starter's timer.
    const std::uint8_t seen = self->arrivals_.fetch_or(kWork, std::memory_order_acq_rel) | kWork;
    if ((seen & kStarter) == 0) return std::noop_coroutine();  // await_suspend goes on
    // Read before timerGone: if it fails, another party may resume the coroutine.
    const std::coroutine_handle<> waiter = self->waiter_;
    return self->timerGone(seen) ? waiter : std::noop_coroutine();
  }

  // The work's token is cancelled by the timer: remembered when this was the first request
  // (an earlier one was the awaiter's cancellation, which the work then reports itself).
  void timeUp() noexcept {
    if (source_.requestCancellation()) cancelledByTimer_ = true;
  }

  // The timer's fire function: on one of the executor's threads or a timer thread.
  // `run == false` (an executor refusing the job) counts as a shutdown. noexcept: resuming
  // a weft coroutine does not throw.
  static void timerFired(Job* job, bool run) noexcept {
    TimeoutRace* self = static_cast<Timer*>(job)->owner;
    if (!run) self->timer_.shutDown = true;
    self->timeUp();  // the work's cancellable awaits end (resumed through the executor)
    // acq_rel: release publishes cancelledByTimer_ and the shutdown; acquire sees waiter_
    // and the work's result when the others have arrived.
    const std::uint8_t seen = self->arrivals_.fetch_or(kTimer, std::memory_order_acq_rel);
    constexpr std::uint8_t kAllOthers = kWork | kStarter | kDisarmTried;
    if ((seen & kAllOthers) != kAllOthers) return;  // not the last: never touch self again
    // The work finished and its disarm failed: we resume the coroutine, as a sleep's timer
    // does (inline on the executor's thread; a refusal counts as a shutdown).
    resumeAfterTimer(self->waiter_, self->executor_, /*inlineOnExecutor=*/true,
                     &self->timer_.shutDown);
  }

  // Cold: only the destruction of a coroutine suspended in withTimeout comes here.
  [[gnu::cold, gnu::noinline]] void withdraw() noexcept {
    const std::uint8_t seen = arrivals_.load(std::memory_order_acquire);
    if ((seen & (kWork | kStarter)) == (kWork | kStarter)) {
      // The work finished and the race was decided: its resumption is under way.
      abortDestroyedWhileResuming("withTimeout()", "its work had finished");
    }
    if (armed_ && (seen & kTimer) == 0 && !disarmTimer(executor_, timer_) && !timer_.dropped &&
        (arrivals_.load(std::memory_order_acquire) & kTimer) == 0) {
      // Fired, and its fire function (which cancels the work and may resume us) is still
      // running. (Dropped by a stopped timer queue: it never fires, nothing to wait for.)
      abortDestroyedWhileResuming("withTimeout()", "its timer had fired");
    }
    // Waits for a running callback of the awaiter's token; the work's frame goes next.
    link_.reset();
  }

  // Owns the work's frame: freed by ~TimeoutRace's body (before the members: the work
  // points at the token), or here when the constructor failed.
  struct WorkFrame {
    std::coroutine_handle<> handle;
    ~WorkFrame() {
      if (handle) handle.destroy();
    }
  };

  WorkFrame work_;
  // Destroyed after link_, whose callback requests cancellation on it.
  OwnedCancellationSource source_;
  std::optional<CancellationCallback> link_;
  Timer timer_;
  LazyPromiseBase& workPromise_;
  Executor* const executor_;
  const CancellationToken& parent_;
  const DeadlineOf deadlineOf_;
  std::coroutine_handle<> waiter_;
  std::exception_ptr timerError_;
  std::atomic<std::uint8_t> arrivals_{0};
  bool armed_ = false;
  bool suspended_ = false;
  bool cancelledByTimer_ = false;
};

}  // namespace weft::detail
