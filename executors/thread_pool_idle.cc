// ThreadPool's idle workers: how a worker out of work searches the other queues, announces
// itself idle, parks (in its event loop or on its futex) and is woken, and why no wake-up
// is lost (the rest of the pool: thread_pool.cc).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

#include "weft/executors/detail/futex.h"
#include "weft/executors/detail/stall_watchdog.h"
#include "weft/executors/detail/thread_pool_worker.h"
#include "weft/executors/detail/work_stealing_queue.h"
#include "weft/executors/detail/worker_counters.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/thread_pool.h"

// Sleeping and waking (no lost wake-ups, no herd). A worker is in one of three states:
//   running   - executing items from its own queue;
//   searching - its queue is empty; it sweeps the other queues and the injection queue
//               a few rounds (counted in searching_);
//   sleeping  - it announced itself in idle_ (counted in sleeping_) and waits on its
//               wakeToken.
// Every counter update and every publication of work (a queue's tail_ store, the
// injection size store) is seq_cst, so they are all in one total order S. The rules:
//  (1) After publishing work, a thread calls wakeWorkerIfNeeded(): if searching_ != 0 it
//      does nothing (a searcher will see the work, see below); else if sleeping_ != 0 it
//      pops one sleeper, counts it in searching_ (so that a burst of pushes wakes one
//      worker, not all), and wakes it.
//  (2) A searcher that gives up first joins idle_ (sleeping_++), then leaves searching_
//      (searching_--), then sweeps every queue once more, and only then waits.
//  (3) A searcher that finds work leaves searching_; if it was the last searcher it runs
//      rule (1) itself, because pushers that saw it searching relied on it.
// Why nothing is lost: a pusher P publishes W, then loads searching_. If it reads 0 and
// then reads sleeping_ == 0, every worker that later goes to sleep joins idle_ after P's
// loads in S, so its final sweep (2) sees W. If P reads a searcher's count, that
// searcher's decrement comes after P's load in S; if it gives up, its final sweep comes
// after that decrement and sees W; if it found other work and was the last searcher, it
// re-runs (1) after P's publication, and the argument repeats with a later point in S.
// If P wakes a sleeper, the sleeper sweeps after being woken, after W was published.
// A sleeper whose final sweep finds work leaves idle_ (or, if it was popped meanwhile,
// gives back the searching count it was handed) and also re-runs (1).
// A local push needs rule (1) only so that idle workers can help: the pushing worker is
// awake and will reach the item itself. ThreadPool(1) has nobody to help, so its local
// pushes skip it.

namespace weft {

namespace {

using TimerClock = detail::TimerEntry::Clock;
using TimerRep = TimerClock::rep;

// A searcher sweeps this many rounds (yielding the CPU between them) before it goes to
// sleep: long enough to catch the next item of a steady stream without a futex round
// trip, short enough that an idle pool goes quiet within microseconds.
constexpr int kSearchRounds = 4;

}  // namespace

detail::WorkItem ThreadPool::searchOnce(Worker& self) {
  // seq_cst: a final sweep (rule 2) must not read this before its searching_ decrement.
  if (timerDueSize_.load(std::memory_order_seq_cst) != 0) {
    detail::WorkItem item = takeDueTimer(self);
    if (!item.empty()) return item;
  }
  const std::size_t n = workers_.size();
  if (n > 1) {
    const std::size_t start = self.random(n);
    for (std::size_t i = 0; i < n; ++i) {
      Worker& victim = *workers_[(start + i) % n];
      if (&victim == &self) continue;
      std::uint64_t stolen = 0;
      detail::WorkItem item =
          victim.queue.stealHalfInto(self.queue, &stolen, &self.stolenFrom[victim.index]);
      if (!item.empty()) {
        detail::bump(self.counters.steals);
        detail::bump(self.counters.stolenItems, stolen);
        detail::bump(self.counters.itemsTaken);  // the first, returned; the rest are queued
        return item;
      }
    }
  }
  return takeFromInjection(self, /*returnFirst=*/true);
}

void ThreadPool::stopSearching() noexcept {
  // seq_cst: rule 3 of the wake-up protocol.
  if (searching_.fetch_sub(1, std::memory_order_seq_cst) == 1) wakeWorkerIfNeeded();
}

bool ThreadPool::leaveIdle(Worker& self, bool tookWork, bool slept) noexcept {
  bool handedSearchCount = false;
  {
    std::lock_guard<std::mutex> lock(idleMutex_);
    // Relaxed: closed_ is written under idleMutex_, which we hold. Only a worker that was
    // parked (its timer woke it) can find the pool closed: the close wakes it too.
    if (closed_.load(std::memory_order_relaxed)) return false;
    self.parkedInLoop = false;  // back from its loop, if it waited there (wakers read it)
    if (self.inIdle) {
      idle_.erase(std::find(idle_.begin(), idle_.end(), &self));
      self.inIdle = false;
      if (self.parked) {
        self.parked = false;
        --parked_;
      }
      sleeping_.fetch_sub(1, std::memory_order_seq_cst);
    } else {
      // A waker popped us meanwhile, counted us in searching_ and set our token.
      handedSearchCount = true;
      // Relaxed: the token is only read by this thread and written under this lock.
      self.wakeToken.store(0, std::memory_order_relaxed);
    }
  }
  if (handedSearchCount) {
    // A waker ended the sleep.
    if (slept) detail::bump(self.counters.wakeUps);
    stopSearching();  // rule (3)
  } else if (tookWork) {
    // We may have taken the work that a pusher, seeing us searching, left to us.
    wakeWorkerIfNeeded();
  }
  // A worker that took no work (its timer or its event loop woke it) has nothing to hand
  // on: a pusher that counted it in sleeping_ either popped it (the count it handed is
  // given back above) or found it gone from idle_, and then woke another sleeper or found
  // none (every other worker running; the work is seen by the next final sweep of rule
  // (2), or by a running worker). Waking a sleeper here would wake one for nothing on
  // every timer.
  return true;
}

detail::WorkItem ThreadPool::findWork(Worker& self) {
  // Out of work: idle until the progress count moves (the stall watchdog's test). Relaxed:
  // a diagnostic; the watchdog needs two looks to call a worker stalled.
  self.counters.idleAt.store(detail::progressOf(self, solo_ ? &soloRun_ : nullptr),
                             std::memory_order_relaxed);
  // seq_cst: ordered before this worker's sweeps (rule 1 relies on it).
  searching_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    // Searching: we hold one count in searching_.
    for (int round = 0; round < kSearchRounds; ++round) {
      detail::WorkItem item = searchOnce(self);
      // The precise clock here: a worker about to sleep must not miss a due timer.
      if (item.empty() && self.hasTimers) item = takeOwnTimer(self, /*cheapClock=*/false);
      if (!item.empty()) {
        stopSearching();
        return item;
      }
      // With I/O in flight, waiting in the event loop beats spinning: a completion or a
      // waker's eventfd write ends the wait at once.
      if (self.loop != nullptr && self.loop->hasWork()) break;
      // Not with a timer of its own: Linux (EEVDF) charges a thread for sched_yield, and
      // one that yielded just before it parked is then slow to get a CPU back when its
      // timeout expires on a busy machine (measured with 1 ms sleeps while other
      // processes kept both CPUs busy: about half the timers 1-3 ms late, against a p99
      // of about 60 us without the yields; docs/design/2026-11-timers-in-workers.md).
      if (!self.hasTimers) std::this_thread::yield();
    }

    // Rule 2: announce, stop searching, sweep once more, then wait.
    {
      std::lock_guard<std::mutex> lock(idleMutex_);
      // Relaxed: closed_ is written under idleMutex_, which we hold. (Only reachable
      // here when the constructor failed; a normal close wakes parked workers.)
      if (closed_.load(std::memory_order_relaxed)) return {};
      idle_.push_back(&self);
      self.inIdle = true;
      sleeping_.fetch_add(1, std::memory_order_seq_cst);
    }
    searching_.fetch_sub(1, std::memory_order_seq_cst);

    detail::WorkItem item = searchOnce(self);
    if (!item.empty()) {
      // true: the pool cannot close while this worker is not parked.
      (void)leaveIdle(self, /*tookWork=*/true);
      return item;
    }

    // The worker's own timers: it wakes for the earliest by itself (nobody else adds to
    // its heap, so nobody needs to wake it for a new one). One due already: it leaves
    // idle_ as above and fires it from its loop.
    TimerRep wakeAt = detail::kNoTimer;
    if (self.hasTimers) {
      wakeAt = self.earliestTimer.load(std::memory_order_relaxed);  // as in takeOwnTimer
      if (wakeAt != detail::kNoTimer && wakeAt <= TimerClock::now().time_since_epoch().count()) {
        (void)leaveIdle(self, /*tookWork=*/false);  // true, as above
        return detail::kLookAgain;
      }
    }

    // A worker with I/O in flight sleeps in its event loop, so that a completion wakes it
    // as well as a waker (wakeSleeper writes the loop's eventfd) or its earliest timer.
    // It does not count as parked: the pool cannot close while it has I/O in flight. Once
    // shutdown() has begun, it first cancels that I/O (each operation completes with
    // loopShutDown set, and its awaiter throws ExecutorShutDown), so that the coroutines
    // unwind and close their sockets, and the pool can drain.
    bool parkInLoop = false;
    bool stopIo = false;
    {
      std::lock_guard<std::mutex> lock(idleMutex_);
      if (self.inIdle) {
        if (self.loop != nullptr && self.loop->hasWork()) {
          parkInLoop = true;
          self.parkedInLoop = true;
          stopIo = closing_;
        } else {
          self.parked = true;
          ++parked_;
          if (closing_ && parked_ == workers_.size()) closeIfQuiescentLocked();
        }
      }
    }
    if (parkInLoop) {
      detail::bump(self.counters.parks);
      if (stopIo) self.loop->shutdown();
      std::int64_t timeoutNs = -1;  // no timer: until a completion or a waker
      if (wakeAt != detail::kNoTimer) {
        const auto left = std::chrono::ceil<std::chrono::nanoseconds>(
            TimerClock::time_point(TimerClock::duration(wakeAt)) - TimerClock::now());
        timeoutNs = std::max<std::int64_t>(left.count(), 0);
      }
      const std::size_t ran = self.loop->runFor(timeoutNs);
      // See workerMain's peek. epoll only: there a peek is a system call even when it
      // finds nothing, while io_uring's is not (and it also hands the kernel what the
      // completions just queued, which must not wait behind work stolen meanwhile).
      self.quietAfterWait = ran <= 1 && self.loop->backend() == IoBackend::kEpoll;
      // true: not parked, so the pool cannot have closed.
      (void)leaveIdle(self, /*tookWork=*/false, /*slept=*/true);
      return detail::kLookAgain;
    }
    // Acquire: pairs with the waker's release store, so what it published (work, or
    // closed_) is visible once we see the token. With a timer, the wait ends at its
    // deadline too.
    bool timedOut = false;
    detail::bump(self.counters.parks);
    while (self.wakeToken.load(std::memory_order_acquire) == 0) {
      if (wakeAt != detail::kNoTimer && TimerClock::now().time_since_epoch().count() >= wakeAt) {
        timedOut = true;
        break;
      }
      detail::futexWait(self.wakeToken, 0, wakeAt);
    }
    if (timedOut) {
      // Our earliest timer is due: we leave idle_ by ourselves, as when the final sweep
      // finds work (a waker may have popped us meanwhile, or the pool closed), and fire it
      // from the loop.
      if (!leaveIdle(self, /*tookWork=*/false, /*slept=*/true)) return {};
      return detail::kLookAgain;
    }
    // Relaxed: only this thread reads the token; the next waker sets it under idleMutex_
    // after popping us, which cannot happen before we re-announce.
    self.wakeToken.store(0, std::memory_order_relaxed);
    // Acquire: closed_ was stored before our token was set.
    if (closed_.load(std::memory_order_acquire)) return {};
    // Woken by rule 1: the waker counted us in searching_. Search again.
    detail::bump(self.counters.wakeUps);
  }
}

void ThreadPool::wakeWorkerIfNeeded() noexcept {
  if (wakeNeeded()) wakeSleeper();
}

void ThreadPool::wakeSleeper() noexcept {
  Worker* worker = nullptr;
  {
    std::lock_guard<std::mutex> lock(idleMutex_);
    if (idle_.empty()) return;
    worker = idle_.back();
    idle_.pop_back();
    worker->inIdle = false;
    if (worker->parked) {
      worker->parked = false;
      --parked_;
    }
    sleeping_.fetch_sub(1, std::memory_order_seq_cst);
    searching_.fetch_add(1, std::memory_order_seq_cst);
    // Release: see the acquire loop in findWork().
    worker->wakeToken.store(1, std::memory_order_release);
    if (worker->parkedInLoop) {
      // Under the lock: the worker clears parkedInLoop under it before it may destroy
      // its loop. One write(2) to the loop's eventfd.
      worker->loop->wake();
      return;
    }
  }
  // Outside the lock so the woken worker does not immediately block on it. `worker`
  // outlives this call: workers are destroyed only with the pool.
  detail::futexWake(worker->wakeToken);
}

}  // namespace weft
