// ThreadPool's timers: each worker's own heap, the due list that the timer thread and the
// backstop for busy workers fill, and the shutdown flush (the rest of the pool:
// thread_pool.cc; the wake-up protocol's rules (1)-(3) named below: thread_pool_idle.cc).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <ratio>
#include <type_traits>
#include <vector>

#include "weft/executors/detail/thread_pool_worker.h"
#include "weft/executors/detail/timer_heap.h"
#include "weft/executors/detail/worker_counters.h"
#include "weft/executors/thread_pool.h"

// Timers. A timer armed on one of the pool's workers goes into that worker's own heap
// (a TimerHeap under a small mutex of its own: cancelTimer may come from any thread;
// TimerEntry::holder names the worker, so cancelTimer finds the heap). The worker fires it
// itself: while its heap is not empty (an owner-only flag, set when it arms one; the
// worker's `attention` word then makes workerMain's per-item branch run, so a pool that never
// arms a timer pays nothing), it reads its earliest deadline (one relaxed load) and the
// clock before each item, and when a timer is due it pops that ONE timer under the lock
// and runs its fire function outside the lock, as an item. One at a time: a fire function
// may cancel another timer of the same heap, and select's disarm waits for a timer that
// cancelTimer reports fired, so no timer is ever held popped-but-not-started. Only the
// owner adds to its heap, so nobody needs to wake it for a new timer: with nothing to run
// it parks with a timeout, its earliest deadline (IoLoop::runFor in its event loop, or a
// futex wait on its wake token with an absolute CLOCK_MONOTONIC deadline), and a worker
// woken by that timeout leaves idle_ as one whose final sweep found work does (leaveIdle:
// rule (2)'s announcement undone, or rule (3)'s count given back; rule (1) is not re-run,
// as it took no work: see leaveIdle), then fires the timer from its loop. No other thread
// takes part. A worker that holds timers does not yield while it searches (see findWork).
//
// Timers armed outside the pool, and entries that never expire (deadline max(): the
// shutdown guards of io/), go to the pool's TimerQueue thread, which delivers an expired
// timer to the due list (under injectionMutex_), publishes timerDueSize_ with a seq_cst
// store, and applies rule (1), exactly like an outside push; sweeps check the due list
// first, with a seq_cst load, so the final sweep of rule (2) sees it too. Running workers
// check timerDueSize_ (relaxed) before each item and run due timers first.
//
// Busy workers. A worker stuck in a long item cannot fire its timers. The TimerQueue
// thread is the backstop: its poll (pollWorkerTimers) moves every worker timer that is
// overdue by more than kTimerGrace to the due list (under the worker's timer mutex, then
// injectionMutex_, so that cancelTimer, which looks in the heap and then in the due list,
// never misses one in between), where any other worker takes it. It polls only when a
// worker timer could be overdue: at the earliest deadline of all the workers' heaps plus
// kTimerGrace, at most once per kTimerPollInterval, and not at all while no worker has a
// timer. A worker that arms a timer earlier than every timer of its heap publishes the
// deadline (a seq_cst store of earliestTimer) and asks for a poll by then
// (TimerQueue::pollBy: one seq_cst load when the poll planned is early enough, as it is
// for a withTimeout re-armed after each operation, whose deadline only moves later; see
// the ordering argument in timer_queue.cc). A busy worker's timers are thus late by
// about kTimerGrace plus kTimerPollInterval at most (plus the time another worker needs
// to get to the due list), instead of the length of the item.
//
// Timers never reach a closed pool: shutdown() stops the timer queue (flushing its timers
// to the due list) and flushes every worker's heap the same way (refusing later timers
// under each worker's lock) before it sets closing_, and the quiescence check requires
// the due list to be empty.

namespace weft {

namespace {

using TimerClock = detail::TimerEntry::Clock;
using TimerRep = TimerClock::rep;

// The backstop for busy workers (see "Busy workers" above): the timer thread takes a
// worker's timer once it is this overdue, and looks at the workers at most this often.
// Together they bound how late a busy worker's timer fires (about 1 ms); a shorter grace
// would take more timers from workers that are merely slow to wake (each taken timer costs
// a thread hop), a shorter interval would wake the timer thread more often (at most 2,000
// times a second here, and only while worker timers keep coming due). Measured in
// docs/design/2026-11-timers-in-workers.md.
constexpr std::chrono::microseconds kTimerGrace{500};
constexpr std::chrono::microseconds kTimerPollInterval{500};

// A time no earlier than steady_clock::now(), read cheaply: CLOCK_MONOTONIC_COARSE (the
// same clock as steady_clock's CLOCK_MONOTONIC, as of the last scheduler tick: a few ns to
// read, against some 25 ns for the precise clock on the machines of docs/performance.md)
// plus four times its resolution (the tick): a tick may come late (measured on a VM: the
// coarse clock up to 4.7 ms behind with a 4 ms tick). A running worker with a timer far
// ahead (withTimeout's limit) then reads the precise clock only when the timer may be due.
// If the coarse clock lagged by more than the margin, a due timer would wait for the
// worker's next idle moment (which reads the precise clock) or for the backstop, never
// longer. noexcept: a vDSO read.
TimerRep coarseNowUpperBound() noexcept {
  static const TimerRep margin = [] {
    timespec r{};
    if (::clock_getres(CLOCK_MONOTONIC_COARSE, &r) != 0) return detail::kNoTimer;
    return 4 * (static_cast<TimerRep>(r.tv_sec) * 1000000000 + r.tv_nsec);
  }();
  timespec t{};
  if (margin == detail::kNoTimer || ::clock_gettime(CLOCK_MONOTONIC_COARSE, &t) != 0) {
    return detail::kNoTimer;  // unknown: the caller reads the precise clock
  }
  return static_cast<TimerRep>(t.tv_sec) * 1000000000 + t.tv_nsec + margin;
}
static_assert(std::is_same_v<TimerClock::period, std::nano>);

// `t + d` for a non-negative d, saturating at time_point::max().
TimerClock::time_point addSaturating(TimerClock::time_point t, TimerClock::duration d) noexcept {
  return t > TimerClock::time_point::max() - d ? TimerClock::time_point::max() : t + d;
}

// Publishes the earliest deadline of `worker`'s heap after a removal (it can only have
// moved later). Requires worker.timerMutex held. Relaxed: the readers that need to see a
// deadline on time see the seq_cst store that armed it (armOnWorker); a later one read
// late only makes the owner or the timer thread look at the heap for nothing.
void publishEarliestLocked(detail::ThreadPoolWorker& worker) noexcept {
  const detail::TimerEntry* first = worker.timers.top();
  worker.earliestTimer.store(
      first != nullptr ? first->deadline.time_since_epoch().count() : detail::kNoTimer,
      std::memory_order_relaxed);
}

}  // namespace

void ThreadPool::scheduleTimer(detail::TimerEntry& timer) {
  Worker* self = detail::tlWorker;
  if (self != nullptr && self->pool == this &&
      timer.deadline != detail::TimerEntry::Clock::time_point::max()) {
    armOnWorker(*self, timer);
    return;
  }
  timer.holder = nullptr;  // before it can fire: cancelTimer reads it
  if (!timers_.add(timer)) throw ExecutorShutDown(name());
}

bool ThreadPool::scheduleShutdownTimer(detail::TimerEntry& timer) {
  // Never expires: it goes to the timer thread's queue (starting no thread, as nothing is
  // due), whose stop(deliverPending) at shutdown() fires it with shutDown set onto the due
  // list, which the workers run while the pool drains.
  timer.deadline = detail::TimerEntry::Clock::time_point::max();
  scheduleTimer(timer);
  return true;
}

void ThreadPool::armOnWorker(Worker& self, detail::TimerEntry& timer) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(self.timerMutex);
    // Set under the lock that shutdown() takes to flush the heap: a timer is either
    // flushed or refused.
    if (self.timersStopped) throw ExecutorShutDown(name());
    timer.holder = &self;  // before it can fire (or be cancelled): cancelTimer reads it
    timer.shutDown = false;
    timer.dropped = false;
    self.timers.push(timer);  // may throw std::bad_alloc: nothing armed
    first = self.timers.top() == &timer;
    // seq_cst: the store that pollBy's ordering rule asks for (the timer thread's poll
    // must see this deadline when it runs by the time asked for below).
    if (first) {
      self.earliestTimer.store(timer.deadline.time_since_epoch().count(),
                               std::memory_order_seq_cst);
    }
  }
  if (!self.hasTimers) {
    // From now on the worker looks at its heap before each item (see workerMain).
    // (ThreadPool(1)'s fibers that switch straight to the next fiber through the
    // ThreadRunQueue do not look at the heap: a chain of such switches that never comes
    // back to this loop is a long item like any other, and the backstop takes the timers
    // that come due meanwhile to the due list, which stops those switches.)
    self.hasTimers = true;
    self.attention = &self.alwaysAttend;
  }
  if (!first) {
    detail::bump(self.counters.timersArmed);
    return;  // the backstop already looks at this heap by an earlier deadline
  }
  try {
    timers_.pollBy(addSaturating(timer.deadline, kTimerGrace));
  } catch (...) {  // std::system_error: the timer thread cannot start; nothing armed
    std::lock_guard<std::mutex> lock(self.timerMutex);
    if (detail::TimerHeap::contains(timer)) {
      self.timers.remove(timer);
      publishEarliestLocked(self);
    }
    throw;
  }
  detail::bump(self.counters.timersArmed);
}

bool ThreadPool::cancelTimer(detail::TimerEntry& timer) noexcept {
  if (timer.holder != nullptr) {
    Worker& worker = *static_cast<Worker*>(timer.holder);
    std::lock_guard<std::mutex> lock(worker.timerMutex);
    if (detail::TimerHeap::contains(timer)) {
      const bool first = worker.timers.top() == &timer;
      worker.timers.remove(timer);
      if (first) publishEarliestLocked(worker);
      detail::bump(worker.timersCancelled);  // under its timerMutex: one writer at a time
      return true;
    }
    // Not in the heap: its worker popped it (it runs, or is about to, on that worker), or
    // the timer thread or shutdown() moved it to the due list -- under this lock, so it is
    // there now, and the search below finds it.
  } else if (timers_.cancel(timer)) {
    return true;
  }
  // Fired, but its fire function may still wait on the due list for a worker: take it
  // off. Then a canceller that must wait for a fire function (select's disarm) only ever
  // waits for one already running on another thread -- never for a worker, which it may
  // itself be (the only free one, or the pool's only thread).
  std::lock_guard<std::mutex> lock(injectionMutex_);
  detail::Job* previous = nullptr;
  for (detail::Job* job = timerDueHead_; job != nullptr; previous = job, job = job->next) {
    if (job != &timer) continue;
    (previous == nullptr ? timerDueHead_ : previous->next) = job->next;
    if (timerDueTail_ == job) timerDueTail_ = previous;
    job->next = nullptr;
    // seq_cst: keeps every timerDueSize_ store in the total order S (as takeDueTimer).
    timerDueSize_.store(--timerDueCount_, std::memory_order_seq_cst);
    detail::bump(dueCancelled_);  // under injectionMutex_: one writer at a time
    return true;
  }
  return false;
}

ThreadPool::TimerCounts ThreadPool::timerCounts() const noexcept {
  TimerCounts counts;
  for (const auto& worker : workers_) {
    std::lock_guard<std::mutex> lock(worker->timerMutex);
    counts.onWorkers += worker->timers.size();
  }
  counts.onTimerThread = timers_.size();
  counts.takenFromBusyWorkers = timersTakenFromWorkers_.load(std::memory_order_relaxed);
  return counts;
}

void ThreadPool::appendDueLocked(detail::TimerEntry& timer) noexcept {
  timer.next = nullptr;
  if (timerDueTail_ == nullptr) {
    timerDueHead_ = &timer;
  } else {
    timerDueTail_->next = &timer;
  }
  timerDueTail_ = &timer;
  // seq_cst: this store publishes the work for the wake-up protocol (rule 1).
  timerDueSize_.store(++timerDueCount_, std::memory_order_seq_cst);
}

void ThreadPool::deliverTimer(void* context, detail::TimerEntry& timer) noexcept {
  auto* pool = static_cast<ThreadPool*>(context);
  {
    std::lock_guard<std::mutex> lock(pool->injectionMutex_);
    // Never closed here: shutdown() stops the timer queue (the only caller) before the
    // pool can close.
    pool->appendDueLocked(timer);
  }
  pool->wakeWorkerIfNeeded();
}

detail::TimerEntry::Clock::time_point ThreadPool::pollWorkerTimers(
    void* context, detail::TimerEntry::Clock::time_point now) noexcept {
  auto* pool = static_cast<ThreadPool*>(context);
  const TimerRep overdue = (now - kTimerGrace).time_since_epoch().count();
  TimerRep next = detail::kNoTimer;
  bool delivered = false;
  for (auto& worker : pool->workers_) {
    // seq_cst: pairs with armOnWorker's store through TimerQueue::pollBy's ordering rule.
    TimerRep earliest = worker->earliestTimer.load(std::memory_order_seq_cst);
    if (earliest != detail::kNoTimer && earliest <= overdue) {
      // The worker has not fired it kTimerGrace after its deadline: it is busy (or has no
      // CPU). Its due timers go where any worker takes them.
      std::size_t taken = 0;
      {
        std::lock_guard<std::mutex> lock(worker->timerMutex);
        {
          std::lock_guard<std::mutex> due(pool->injectionMutex_);
          while (!worker->timers.empty() &&
                 worker->timers.top()->deadline.time_since_epoch().count() <= overdue) {
            pool->appendDueLocked(*worker->timers.pop());
            ++taken;
          }
        }
        publishEarliestLocked(*worker);
        earliest = worker->earliestTimer.load(std::memory_order_relaxed);
      }
      if (taken != 0) {
        delivered = true;
        pool->timersTakenFromWorkers_.fetch_add(taken, std::memory_order_relaxed);
      }
    }
    next = std::min(next, earliest);
  }
  if (delivered) pool->wakeWorkerIfNeeded();
  if (next == detail::kNoTimer) return TimerClock::time_point::max();  // until a worker asks
  return std::max(addSaturating(TimerClock::time_point(TimerClock::duration(next)), kTimerGrace),
                  now + kTimerPollInterval);
}

detail::WorkItem ThreadPool::takeOwnTimer(Worker& self, bool cheapClock) noexcept {
  // Relaxed: only this thread adds to its heap, so it sees every deadline it armed; a
  // removal by another thread read late only costs a look at the heap.
  const TimerRep earliest = self.earliestTimer.load(std::memory_order_relaxed);
  if (earliest == detail::kNoTimer) {
    // Empty, and only this thread adds to it: stop looking before each item.
    self.hasTimers = false;
    if (self.loop == nullptr) self.attention = &timerDueSize_;
    return {};
  }
  if (cheapClock && earliest > coarseNowUpperBound()) return {};  // not due yet
  const TimerRep now = TimerClock::now().time_since_epoch().count();
  if (earliest > now) return {};
  std::unique_lock<std::mutex> lock(self.timerMutex);
  // The backstop may have moved earlier timers of this heap to the due list since the
  // caller looked at it (it moves them under this lock, so this relaxed load sees them):
  // they go first, so that one worker's timers fire in deadline order.
  if (timerDueSize_.load(std::memory_order_relaxed) != 0) {
    lock.unlock();
    return takeDueTimer(self);
  }
  detail::TimerEntry* first = self.timers.top();
  if (first == nullptr || first->deadline.time_since_epoch().count() > now) return {};
  self.timers.pop();  // one at a time (see "Timers")
  publishEarliestLocked(self);
  lock.unlock();
  detail::bump(self.counters.itemsTaken);
  detail::bump(self.counters.timersFired);
  self.counters.timerLateness.record(now - first->deadline.time_since_epoch().count());
  return detail::WorkItem::fromJob(first);
}

void ThreadPool::stopWorkerTimers() noexcept {
  bool delivered = false;
  for (auto& worker : workers_) {
    std::lock_guard<std::mutex> lock(worker->timerMutex);
    worker->timersStopped = true;
    // In deadline order, as TimerQueue::stop flushes.
    std::vector<detail::TimerEntry*> pending = worker->timers.takeAll();
    worker->earliestTimer.store(detail::kNoTimer, std::memory_order_relaxed);
    if (pending.empty()) continue;
    std::lock_guard<std::mutex> due(injectionMutex_);
    for (detail::TimerEntry* timer : pending) {
      timer->shutDown = true;
      appendDueLocked(*timer);
    }
    delivered = true;
  }
  if (delivered) wakeWorkerIfNeeded();
}

detail::WorkItem ThreadPool::takeDueTimer(Worker& self) noexcept {
  detail::TimerEntry* timer;
  {
    std::lock_guard<std::mutex> lock(injectionMutex_);
    // Every entry of the due list is a TimerEntry (appendDueLocked).
    timer = static_cast<detail::TimerEntry*>(timerDueHead_);
    if (timer == nullptr) return {};
    timerDueHead_ = timer->next;
    if (timerDueHead_ == nullptr) timerDueTail_ = nullptr;
    timer->next = nullptr;
    // seq_cst: keeps every timerDueSize_ store in the total order S.
    timerDueSize_.store(--timerDueCount_, std::memory_order_seq_cst);
  }
  // The entry is ours to run: nobody else reads or frees it before its fire function.
  detail::bump(self.counters.itemsTaken);
  if (timer->shutDown) {
    detail::bump(self.counters.timersShutDown);
  } else {
    detail::bump(self.counters.timersFired);
    self.counters.timerLateness.record(TimerClock::now().time_since_epoch().count() -
                                       timer->deadline.time_since_epoch().count());
  }
  return detail::WorkItem::fromJob(timer);
}

}  // namespace weft
