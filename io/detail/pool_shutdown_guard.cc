#include "weft/io/detail/pool_shutdown_guard.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace weft::detail {

namespace {

// The gate's states (see the header).
enum Gate : int {
  kOpen,        // nobody has passed
  kHolding,     // the fire function is taking a hold for the resumer
  kHeld,        // ... and has it: the resumer schedules under it, then releases it
  kScheduling,  // the resumer is in schedule()
  kResumed,     // the resumer is done with the guard
};

}  // namespace

void PoolShutdownGuard::arm(Executor* executor, Owner& owner) {
  if (executor == nullptr) return;
  timer_.guard = this;
  timer_.owner = &owner;
  timer_.complete = &PoolShutdownGuard::onFire;
  // Before arming: the fire function may run as soon as the entry is in the queue.
  executor_ = executor;
  bool armed = false;
  try {
    armed = executor->scheduleShutdownTimer(timer_);
  } catch (...) {
    executor_ = nullptr;
    throw;
  }
  if (!armed) executor_ = nullptr;  // no shutdown to guard against: plain schedule()
}

bool PoolShutdownGuard::schedule(Executor* executor, std::coroutine_handle<> h) noexcept {
  Executor* const pool = executor_;
  if (pool == nullptr) {
    if (executor == nullptr) return false;
    try {
      executor->schedule(h);
      return true;
    } catch (...) {
      return false;
    }
  }
  bool held = false;
  for (;;) {
    // Acquire: the hold (kHeld) was taken before; acq_rel on the CAS likewise, and it
    // orders our schedule() after it in the fire function's view.
    int gate = gate_.load(std::memory_order_acquire);
    if (gate == kOpen) {
      if (gate_.compare_exchange_weak(gate, kScheduling, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        break;
      }
      continue;
    }
    if (gate == kHeld) {
      // The fire function is done with the gate: nobody else writes it now. Relaxed: only
      // settle() reads it, after our kResumed store.
      gate_.store(kScheduling, std::memory_order_relaxed);
      held = true;
      break;
    }
    std::this_thread::yield();  // kHolding: the fire function is taking the hold
  }
  // Accepted: without a hold, the fire function has not returned (it waits for kResumed,
  // and the pool cannot close while it runs); with one, the hold keeps the pool open. Only
  // std::bad_alloc (a queue that cannot grow) refuses.
  bool accepted = true;
  try {
    pool->schedule(h);
  } catch (...) {
    accepted = false;
  }
  // Release: the last touch of the guard, which may be destroyed once settle() sees it.
  gate_.store(kResumed, std::memory_order_release);
  if (held) pool->releaseHold();  // the pool outlives this call (see releaseHold)
  return accepted;
}

void PoolShutdownGuard::onFire(Job* job, bool /*run*/) noexcept {
  // `run == false` (an executor refusing the entry as a job) would be a shutdown too; a
  // ThreadPool runs its fired timers on its workers while it drains (and an executor's
  // shutdown timer fires on one of its threads: Executor::scheduleShutdownTimer).
  auto* timer = static_cast<Timer*>(job);
  PoolShutdownGuard& self = *timer->guard;
  Owner& owner = *timer->owner;
  switch (owner.takeBackForShutdown()) {
    case Claim::kTakenBack:
      // Release, and before the resumption: the coroutine's settle() runs inside
      // resumeShutDown() below and must not wait for this function to return.
      self.fired_.store(true, std::memory_order_release);
      owner.resumeShutDown();
      return;
    case Claim::kBarred:
      break;
    case Claim::kClaimed:
      self.holdForResumer();
      break;
  }
  // Release: the fire function's last touch of the guard; settle() acquires it.
  self.fired_.store(true, std::memory_order_release);
}

void PoolShutdownGuard::holdForResumer() noexcept {
  int gate = kOpen;
  if (gate_.compare_exchange_strong(gate, kHolding, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
    if (!executor_->holdOpen()) {
      // The pool runs this on one of its workers, before it can close.
      std::fprintf(stderr, "weft: a shutdown guard fired on executor '%.*s' already closed\n",
                   static_cast<int>(executor_->name().size()), executor_->name().data());
      std::abort();
    }
    // Release: publishes the hold to the resumer (and to settle()).
    gate_.store(kHeld, std::memory_order_release);
    return;
  }
  // A resumer passed first: its schedule() must be done before this returns (then the
  // work it queued keeps the pool open). A few instructions, unless it is preempted.
  while (gate_.load(std::memory_order_acquire) == kScheduling) std::this_thread::yield();
}

void PoolShutdownGuard::settle() noexcept {
  Executor* const pool = executor_;
  if (pool == nullptr) return;
  // Acquire: what the fire function wrote (the owner's outcome, the gate) is visible.
  while (!fired_.load(std::memory_order_acquire)) {
    // Disarmed: it will never fire. Otherwise it fired: it is on its way to the pool's due
    // list (retried: then cancelTimer takes it back, as this may be the only worker that
    // would run it), or running on another worker.
    if (pool->cancelTimer(timer_)) break;
    std::this_thread::yield();
  }
  int gate;
  // A resumer still returning from schedule() (it stores kResumed last).
  while ((gate = gate_.load(std::memory_order_acquire)) == kScheduling) std::this_thread::yield();
  // A hold taken for a resumer that never came through here: the wake-up came before the
  // coroutine had suspended, and it continued without one.
  if (gate == kHeld) pool->releaseHold();
  executor_ = nullptr;
}

}  // namespace weft::detail
