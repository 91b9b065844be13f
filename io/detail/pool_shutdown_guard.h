#pragma once

#include <atomic>
#include <coroutine>

#include "weft/executors/executor.h"
#include "weft/executors/timer_entry.h"

namespace weft::detail {

// PoolShutdownGuard: keeps an awaiter whose wake-up comes from a thread outside the
// executor it resumes on (blocking(): the blocking pool's thread; signal(): the
// dispatcher; either: a canceller) from outliving that executor (a ThreadPool, or any
// executor implementing Executor's shutdown support). Without it, a pool destroyed
// while the coroutine waits returns at once (a suspended coroutine is no queued work), and
// the wake-up later calls schedule() on freed memory.
//
// How: arm() arms a shutdown timer on the pool (Executor::scheduleShutdownTimer).
// ThreadPool::shutdown() fires it, on one of its workers while the pool drains, and the
// guard asks its Owner to take the wait back:
//  - kTakenBack: withdrawn (the call was still queued, the waiter still linked); nobody
//    else will resume the coroutine. The guard then has the owner resume it, inline on
//    that worker, to throw ExecutorShutDown: it unwinds while the pool drains, as a sleep
//    does.
//  - kBarred: the wait has not begun (await_suspend is between arm() and starting it); the
//    owner marks it so that it never begins, and await_suspend ends with ExecutorShutDown.
//  - kClaimed: another party has claimed the wake-up (fn has started, a signal was
//    delivered, the cancellation took it) and will resume the coroutine; the guard holds
//    the pool open (Executor::holdOpen) until it has.
// Whoever resumes the coroutine through the pool (the wake-up's thread) calls schedule()
// here, never the pool's own, and passes the gate, so that its pool->schedule() is done
// either before the fire function returns (which waits for it, so the pool cannot have
// closed) or under the hold (released after it).
//
// The gate, gate_: the resumer takes kOpen -> kScheduling -> kResumed, or, after the fire
// function took kOpen -> kHolding -> kHeld, kHeld -> kScheduling -> kResumed and then
// releases the hold. A hold that no resumer used (the coroutine continued without
// suspending, its wake-up having come first) is released by settle().
//
// Lifetime: the guard lives in the awaiter. settle() (in await_resume, in the destructor
// of a suspended awaiter, on await_suspend's error paths) cancels the timer or waits until
// its fire function is done, waits for a resumer still returning from schedule(), and
// releases an unused hold; after it nothing refers to the guard. The pool must outlive the
// armed guard up to settle(), as it does: the coroutine resumes on it.
//
// Only an executor whose scheduleShutdownTimer() arms the entry is guarded (a ThreadPool):
// the others keep the default, having no shutdown that fires timers, and without an
// executor nothing is scheduled. On a ThreadPool the entry starts no timer thread (it
// never expires), and costs a heap insertion and removal under the timer queue's mutex.
//
// Thread safety: arm(), settle() by the awaiting side; schedule() by the one party that
// resumes the coroutine; the fire function on a worker: concurrently, as described.
class PoolShutdownGuard {
 public:
  enum class Claim { kTakenBack, kBarred, kClaimed };

  // The awaiter owning the guard. Both are called on a worker of the pool, during its
  // shutdown. noexcept: they unlink under a mutex and resume a weft coroutine.
  class Owner {
   public:
    // Takes the wait back, or says why it cannot (see above). Must not resume the
    // coroutine; records what the await must throw.
    virtual Claim takeBackForShutdown() noexcept = 0;
    // After kTakenBack: resumes the coroutine (inline: this is a worker of the pool it
    // resumes on), or lets await_suspend continue.
    virtual void resumeShutDown() noexcept = 0;

   protected:
    Owner() = default;
    ~Owner() = default;
    Owner(const Owner&) = default;
    Owner& operator=(const Owner&) = default;
  };

  PoolShutdownGuard() noexcept = default;
  PoolShutdownGuard(const PoolShutdownGuard&) = delete;
  PoolShutdownGuard& operator=(const PoolShutdownGuard&) = delete;

  // Arms the guard for `owner` if `executor` takes a shutdown timer
  // (Executor::scheduleShutdownTimer; a ThreadPool does); does nothing otherwise (nullptr
  // too). Once per guard; `owner` and the guard stay where they are until
  // settle(). Errors: ExecutorShutDown once the pool's shutdown has begun, std::bad_alloc;
  // nothing is armed then.
  void arm(Executor* executor, Owner& owner);

  // Resumes `h` on `executor` (the one given to arm()) through schedule(): through the
  // gate when the guard is armed. False when there is no executor or it refused `h` (not
  // resumed: the caller resumes it inline). Called once, by the party that resumes the
  // coroutine. noexcept: a refusal is the result.
  bool schedule(Executor* executor, std::coroutine_handle<> h) noexcept;

  // See "Lifetime" above. Idempotent; nothing when not armed. noexcept: a cancelTimer
  // loop and short waits for parties finishing on other threads.
  void settle() noexcept;

 private:
  struct Timer : TimerEntry {
    PoolShutdownGuard* guard = nullptr;
    Owner* owner = nullptr;
  };

  // The timer's fire function, on a worker of the pool during its shutdown.
  static void onFire(Job* job, bool run) noexcept;
  void holdForResumer() noexcept;

  Timer timer_;
  // Set by arm() before the timer is armed (the timer queue's mutex publishes it to the
  // fire function); read by the awaiting side and the resumer.
  // The executor the shutdown timer is armed on; nullptr when not armed.
  Executor* executor_ = nullptr;
  std::atomic<int> gate_{0};  // kOpen
  // The fire function is done with the guard (its last write).
  std::atomic<bool> fired_{false};
};

}  // namespace weft::detail
