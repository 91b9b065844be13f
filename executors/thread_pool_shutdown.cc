// ThreadPool's shutdown: closing once the pool has drained, holds that keep it open, and
// how long the pool must outlive the threads that push to it (the rest of the pool:
// thread_pool.cc; the wake-up protocol's rules named below: thread_pool_idle.cc).
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "weft/executors/detail/futex.h"
#include "weft/executors/detail/stall_watchdog.h"
#include "weft/executors/detail/thread_pool_worker.h"
#include "weft/executors/thread_pool.h"

// Shutdown. shutdown() sets closing_. The pool is quiescent when every worker is parked
// (past its final sweep, so none is running or holding stolen work) and the injection
// queue is empty; whoever observes that (the last worker to park, or shutdown() itself)
// sets closed_ under both locks and wakes everyone; workers exit on waking. Outside
// pushes check closed_ under the injection lock, so they either land before the close
// (and prevent it) or are refused. Workers never push after the close: nothing runs.
// A hold (holdOpen()) also prevents the close: while one is outstanding, the pool stays
// open with its workers parked, and the releaseHold() of the last one makes the check
// the last worker to park would have made (both under idleMutex_, with holds_ read and
// written under the injection lock, so one of the two sees the other).
//
// Lifetime. A pool may be destroyed as soon as the last work it accepted has completed,
// even while the outside thread that scheduled that work is still returning from
// schedule(). So an outside push reads nothing of the pool once its item can run, that
// is once it releases the injection lock: it makes rule 1's decision (two loads) under
// that lock. Only when a sleeper must be woken does it touch the pool after the unlock;
// it counts itself in wakesInFlight_ (under the lock) until the wake-up is done, and
// shutdown() waits for that count to reach zero after joining the workers. The count is
// seen there: the item was taken under the injection lock before the pool could close,
// and the close and the joins follow that take. releaseHold() does the same for its
// closing check: it counts itself under the injection lock while its hold still keeps
// the pool open. Workers and the timer thread need none of this: shutdown() joins them.

namespace weft {

void ThreadPool::closeIfQuiescentLocked() noexcept {
  {
    std::lock_guard<std::mutex> lock(injectionMutex_);
    // Its pusher (or the timer delivery) is waking a worker (rule 1); or a hold is
    // outstanding (its releaseHold() checks again).
    if (!injection_.empty() || timerDueHead_ != nullptr || holds_ != 0) return;
    closed_.store(true, std::memory_order_seq_cst);
  }
  wakeIdleWorkersToExitLocked();
  sleeping_.store(0, std::memory_order_seq_cst);
}

void ThreadPool::wakeIdleWorkersToExitLocked() noexcept {
  for (Worker* worker : idle_) {
    worker->inIdle = false;
    worker->parked = false;
    // Release: makes closed_ visible to the woken worker.
    worker->wakeToken.store(1, std::memory_order_release);
    detail::futexWake(worker->wakeToken);
  }
  idle_.clear();
  parked_ = 0;
}

void ThreadPool::shutdown() {
  if (watchdog_ != nullptr && watchdog_->onWatchdogThread()) {
    std::fprintf(stderr,
                 "weft: ThreadPool '%.*s': shutdown() or the destructor was called from the "
                 "pool's onStall callback (its stall thread), which shutdown() stops and waits "
                 "for. Call it from another thread.\n",
                 static_cast<int>(name().size()), name().data());
    std::abort();
  }
  if (currentThreadInExecutor()) {
    std::fprintf(stderr,
                 "weft: ThreadPool '%.*s': shutdown() or the destructor was called from one "
                 "of the pool's own worker threads; it would wait for itself forever. Call "
                 "it from a thread outside the pool.\n",
                 static_cast<int>(name().size()), name().data());
    std::abort();
  }
  std::lock_guard<std::mutex> shutdownLock(shutdownMutex_);
  if (joined_) return;
  // Pending timers fire now, with shutDown set, onto the due list: the pool still accepts
  // them and runs them while it drains. Later timers are refused.
  timers_.stop(/*deliverPending=*/true);
  stopWorkerTimers();
  {
    std::lock_guard<std::mutex> lock(idleMutex_);
    closing_ = true;
    if (parked_ == workers_.size()) closeIfQuiescentLocked();
    // Otherwise the last worker to park closes the pool. Workers asleep in their event
    // loops wait for I/O that may never come: wake them, so that they see closing_ and
    // cancel it (findWork).
    for (Worker* worker : idle_) {
      if (worker->parkedInLoop) worker->loop->wake();
    }
  }
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
  // An outside thread whose work was accepted (and has run) may still be waking a worker
  // (pushOutside): the pool must outlive that. A few instructions at most; spun.
  // Acquire: pairs with pushOutside's release decrement.
  while (wakesInFlight_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  // After the joins, so that a worker stalled while the pool drains is still reported.
  if (watchdog_ != nullptr) watchdog_->stop();
  joined_ = true;
}

bool ThreadPool::holdOpen() noexcept {
  std::lock_guard<std::mutex> lock(injectionMutex_);
  // Relaxed: closed_ is written under injectionMutex_, which we hold.
  if (closed_.load(std::memory_order_relaxed)) return false;
  ++holds_;
  return true;
}

void ThreadPool::releaseHold() noexcept {
  {
    std::lock_guard<std::mutex> lock(injectionMutex_);
    if (--holds_ != 0) return;
    // The last hold: a shutdown whose workers all parked while it was outstanding waits
    // for the check below, and may destroy the pool once it has closed: until this thread
    // is done with the pool, it counts in wakesInFlight_ (see "Lifetime"). Relaxed as in
    // pushOutside.
    wakesInFlight_.fetch_add(1, std::memory_order_relaxed);
  }
  {
    std::lock_guard<std::mutex> lock(idleMutex_);
    // Otherwise a worker is still running (the last to park checks) or no shutdown has
    // begun.
    if (closing_ && parked_ == workers_.size()) closeIfQuiescentLocked();
  }
  // Release: the last touch of the pool by this thread (see pushOutside).
  wakesInFlight_.fetch_sub(1, std::memory_order_release);
}

void ThreadPool::abandonStart() noexcept {
  {
    std::lock_guard<std::mutex> idleLock(idleMutex_);
    {
      std::lock_guard<std::mutex> injectionLock(injectionMutex_);
      closed_.store(true, std::memory_order_seq_cst);
    }
    closing_ = true;
    wakeIdleWorkersToExitLocked();
  }
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
  if (watchdog_ != nullptr) watchdog_->stop();
  std::lock_guard<std::mutex> shutdownLock(shutdownMutex_);
  joined_ = true;
}

}  // namespace weft
