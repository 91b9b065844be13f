#include "weft/executors/thread_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <ratio>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "weft/executors/detail/io_loop_base.h"
#include "weft/executors/detail/stall_capture.h"
#include "weft/executors/detail/stall_watchdog.h"
#include "weft/executors/detail/thread_pool_worker.h"
#include "weft/executors/detail/timer_heap.h"
#include "weft/executors/detail/work_stealing_queue.h"
#include "weft/executors/detail/worker_counters.h"
#include "weft/executors/io_loop.h"

// How the pool works
// ==================
// Queues. Each worker owns a WorkStealingQueue (FIFO, lock-free; see its header for why
// FIFO and why not Chase-Lev's LIFO end). Only the owner pushes to it; the owner pops
// the oldest item, thieves take the older half. Threads outside the pool push to the
// injection queue (a RingBuffer under a mutex: outside pushes are the slow path, and a
// coroutine handle has no link field for an intrusive lock-free list).
//
// Order. A worker about to push local work first moves its share of the injection queue
// into its own queue (a relaxed size check when it is empty). This keeps outside work
// from starving behind a worker that keeps itself busy, and it makes ThreadPool(1)
// strictly FIFO: if an outside push happens before a worker push, the worker sees it
// (coherence) and queues it first.
//
// ThreadPool(1). With one worker nobody steals and nobody needs waking by a local push,
// so its queue is a plain RingBuffer: a local push/pop is two plain stores instead of a
// seq_cst store, a CAS and the wake-up check (docs/design/2026-11-worker-queues.md has the
// measurements).
// It is kept in a ThreadRunQueue, which the worker binds, so that fibers may take from it
// (executors/thread_run_queue.h).
//
// Measured alternative: per-worker mutex-protected rings with the same policy, slower
// on every workload measured (docs/design/2026-11-worker-queues.md), so the lock-free
// queue was kept.
//
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
//
// Timers. A timer armed on one of the pool's workers goes into that worker's own heap
// (a TimerHeap under a small mutex of its own: cancelTimer may come from any thread;
// TimerEntry::holder names the worker, so cancelTimer finds the heap). The worker fires it
// itself: while its heap is not empty (an owner-only flag, set when it arms one; the
// worker's `attention` word then makes the per-item branch below run, so a pool that never
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
//
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
//
// Metrics (executors/pool_metrics.h, read by metrics() in pool_metrics.cc). Nothing is
// written per item or per push: the items a worker pops from its own queue are counted
// by the queue's head index (which the pop moves anyway), minus what thieves took from it
// (each thief counts what it takes from each victim), and the queues keep their
// high-water marks where they compare with their capacity anyway (detail::RingBuffer,
// WorkStealingQueue::reserve). Every other counter has one writer at a time and is bumped
// with a relaxed load and store, never a read-modify-write (executors/detail/
// worker_counters.h), on a path that locks, steals, makes a system call or reads the
// clock anyway: a worker's own counters (Worker::counters: the items it takes from
// elsewhere, steals, parks, wake-ups, timers it armed and fired, its loop's I/O), and the
// few written under a mutex by whichever thread holds it (the cancellations of a
// worker's timers under its timerMutex, those of the due list under injectionMutex_, the
// timer thread's in TimerQueue). Timer lateness is measured where the clock is read
// already: a worker's own timer in takeOwnTimer, a due timer in takeDueTimer (which locks
// the due list; the clock read there is the only one added).

namespace weft {

namespace {

// The worker running on this thread, if any.
thread_local detail::ThreadPoolWorker* tlWorker = nullptr;

// What findWork returns after it ran I/O completions while parked in the worker's loop,
// or when one of the worker's own timers is due: no item, but the worker is not out of
// work (the completions may have queued some; the loop fires the timer).
// 2 is no frame address and not a job (bit 0 clear).
const detail::WorkItem kLookAgain = detail::WorkItem::fromBits(2);

using TimerClock = detail::TimerEntry::Clock;
using TimerRep = TimerClock::rep;

// Worker::earliestTimer of an empty heap (time_point::max(), which no worker timer has).
constexpr TimerRep kNoTimer = std::numeric_limits<TimerRep>::max();

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
    if (::clock_getres(CLOCK_MONOTONIC_COARSE, &r) != 0) return kNoTimer;
    return 4 * (static_cast<TimerRep>(r.tv_sec) * 1000000000 + r.tv_nsec);
  }();
  timespec t{};
  if (margin == kNoTimer || ::clock_gettime(CLOCK_MONOTONIC_COARSE, &t) != 0) {
    return kNoTimer;  // unknown: the caller reads the precise clock
  }
  return static_cast<TimerRep>(t.tv_sec) * 1000000000 + t.tv_nsec + margin;
}
static_assert(std::is_same_v<TimerClock::period, std::nano>);

// `t + d` for a non-negative d, saturating at time_point::max().
TimerClock::time_point addSaturating(TimerClock::time_point t, TimerClock::duration d) noexcept {
  return t > TimerClock::time_point::max() - d ? TimerClock::time_point::max() : t + d;
}

// The wake token's futex. std::atomic::wait has no timeout, and libstdc++'s notify makes
// no system call unless a waiter registered through std::atomic::wait: a worker that waits
// with a raw futex must be woken by one too, so every wait and wake of a token is here.
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
              std::atomic<std::uint32_t>::is_always_lock_free);

// Waits while `word` holds `expected`, until `deadline` (steady_clock ticks, absolute;
// kNoTimer: no limit). Returns on a wake, a timeout, a signal or a changed word: the
// caller checks. noexcept: a system call whose failures are all "returned".
void futexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               TimerRep deadline) noexcept {
  timespec at{};
  const timespec* timeout = nullptr;
  if (deadline != kNoTimer) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(TimerClock::duration(deadline))
            .count();
    at.tv_sec = static_cast<time_t>(ns / 1000000000);
    at.tv_nsec = static_cast<long>(ns % 1000000000);
    timeout = &at;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time (steady_clock's clock), so a
  // retry waits for the same deadline.
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_BITSET_PRIVATE,
                  expected, timeout, nullptr, FUTEX_BITSET_MATCH_ANY);
}

// Wakes the thread waiting on `word` (one at most waits: its worker). noexcept: as above.
void futexWake(std::atomic<std::uint32_t>& word) noexcept {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1,
                  nullptr, nullptr, 0);
}

std::size_t effectiveThreads(std::size_t threads) noexcept {
  return threads == 0 ? ThreadPool::defaultThreadCount() : threads;
}

// A worker with I/O in flight polls its loop (without waiting) after this many items, so
// that completions and queued submissions are not held back by a long queue. Prime, as
// tokio's, so that it does not beat in step with periodic work.
constexpr std::uint32_t kItemsPerIoPoll = 61;

// A searcher sweeps this many rounds (yielding the CPU between them) before it goes to
// sleep: long enough to catch the next item of a steady stream without a futex round
// trip, short enough that an idle pool goes quiet within microseconds.
constexpr int kSearchRounds = 4;

// The pool's name names its threads too (pthread_setname_np takes a C string): a NUL
// would cut it silently.
std::string checkedName(std::string name) {
  if (std::find(name.begin(), name.end(), '\0') != name.end()) {
    throw std::invalid_argument("weft: ThreadPool: the name contains a NUL byte");
  }
  return name;
}

// ThreadPool(threads, name)'s options (member by member: the aggregate has more fields).
ThreadPoolOptions optionsFor(std::size_t threads, std::string name) {
  ThreadPoolOptions options;
  options.threads = threads;
  options.name = std::move(name);
  return options;
}

}  // namespace

ThreadPool::ThreadPool(std::size_t threads, std::string name)
    : ThreadPool(optionsFor(threads, std::move(name))) {}

ThreadPool::ThreadPool(ThreadPoolOptions options)
    : Executor(checkedName(std::move(options.name))),
      solo_(effectiveThreads(options.threads) == 1),
      ioBackend_(IoLoop::resolveBackend(options.ioBackend)),
      timers_(std::string(this->name()) + "-timer", &ThreadPool::deliverTimer, this,
              &ThreadPool::pollWorkerTimers) {
  if (options.stallThreshold < std::chrono::milliseconds::zero()) {
    throw std::invalid_argument("weft: ThreadPool: a negative stallThreshold");
  }
  // The stall signal is installed before the workers start: each unblocks it.
  std::string nativeOff;
  if (options.stallThreshold > std::chrono::milliseconds::zero()) {
    stallSignal_ = detail::prepareStallSignal(options.stallSignal, nativeOff);
  }
  const std::size_t threads = effectiveThreads(options.threads);
  workers_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) {
    workers_.push_back(std::make_unique<Worker>(this, i));
    workers_.back()->stolenFrom = std::make_unique<detail::Counter[]>(threads);
  }
  idle_.reserve(threads);
  try {
    for (auto& worker : workers_) {
      Worker* w = worker.get();
      w->thread = std::thread([this, w] { workerMain(*w); });
    }
    if (options.stallThreshold > std::chrono::milliseconds::zero()) {
      std::vector<Worker*> workers;
      for (auto& worker : workers_) workers.push_back(worker.get());
      watchdog_ = std::make_unique<detail::StallWatchdog>(
          detail::StallWatchdog::Options{std::string(this->name()), options.stallThreshold,
                                         std::move(options.onStall), stallSignal_,
                                         std::move(nativeOff)},
          std::move(workers), solo_ ? &soloRun_ : nullptr);
      watchdog_->start();
    }
  } catch (...) {
    abandonStart();
    throw;
  }
}

ThreadPool::~ThreadPool() { shutdown(); }

std::size_t ThreadPool::defaultThreadCount() noexcept {
  return std::max<std::size_t>(1, std::thread::hardware_concurrency());
}

std::size_t ThreadPool::threadCount() const noexcept { return workers_.size(); }

ThreadPool* ThreadPool::current() noexcept {
  return tlWorker != nullptr ? tlWorker->pool : nullptr;
}

bool ThreadPool::currentThreadInExecutor() const noexcept {
  return tlWorker != nullptr && tlWorker->pool == this;
}

IoBackend ThreadPool::ioBackend() const noexcept { return ioBackend_; }

IoLoop* ThreadPool::makeWorkerLoop(void* worker) {
  auto* self = static_cast<Worker*>(worker);
  self->loop = IoLoop::create(self->pool->ioBackend_ == IoBackend::kIoUring
                                  ? IoBackendChoice::kIoUring
                                  : IoBackendChoice::kEpoll);
  self->attention = &self->alwaysAttend;  // from now on, every item checks the loop too
  // IoLoop::create makes weft's own loops only, which are IoLoopBases: they count the
  // worker's I/O into its counters (the loop runs on this thread, their one writer).
  static_cast<detail::IoLoopBase&>(*self->loop).countInto(&self->counters.io);
  return self->loop.get();
}

namespace {

// Publishes the earliest deadline of `worker`'s heap after a removal (it can only have
// moved later). Requires worker.timerMutex held. Relaxed: the readers that need to see a
// deadline on time see the seq_cst store that armed it (armOnWorker); a later one read
// late only makes the owner or the timer thread look at the heap for nothing.
void publishEarliestLocked(detail::ThreadPoolWorker& worker) noexcept {
  const detail::TimerEntry* first = worker.timers.top();
  worker.earliestTimer.store(
      first != nullptr ? first->deadline.time_since_epoch().count() : kNoTimer,
      std::memory_order_relaxed);
}

}  // namespace

void ThreadPool::scheduleTimer(detail::TimerEntry& timer) {
  Worker* self = tlWorker;
  if (self != nullptr && self->pool == this &&
      timer.deadline != detail::TimerEntry::Clock::time_point::max()) {
    armOnWorker(*self, timer);
    return;
  }
  timer.holder = nullptr;  // before it can fire: cancelTimer reads it
  if (!timers_.add(timer)) throw ExecutorShutDown(name());
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
  TimerRep next = kNoTimer;
  bool delivered = false;
  for (auto& worker : pool->workers_) {
    // seq_cst: pairs with armOnWorker's store through TimerQueue::pollBy's ordering rule.
    TimerRep earliest = worker->earliestTimer.load(std::memory_order_seq_cst);
    if (earliest != kNoTimer && earliest <= overdue) {
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
  if (next == kNoTimer) return TimerClock::time_point::max();  // until a worker asks
  return std::max(addSaturating(TimerClock::time_point(TimerClock::duration(next)), kTimerGrace),
                  now + kTimerPollInterval);
}

detail::WorkItem ThreadPool::takeOwnTimer(Worker& self, bool cheapClock) noexcept {
  // Relaxed: only this thread adds to its heap, so it sees every deadline it armed; a
  // removal by another thread read late only costs a look at the heap.
  const TimerRep earliest = self.earliestTimer.load(std::memory_order_relaxed);
  if (earliest == kNoTimer) {
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
    worker->earliestTimer.store(kNoTimer, std::memory_order_relaxed);
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

inline bool ThreadPool::wakeNeeded() const noexcept {
  // seq_cst loads: rule 1 of the wake-up protocol (after a seq_cst publication).
  return searching_.load(std::memory_order_seq_cst) == 0 &&
         sleeping_.load(std::memory_order_seq_cst) != 0;
}

// pushLocal and popLocal are the hot path of every hop (a yield, a channel hand-off, a
// fiber's requeue): inline, with ThreadPool(1)'s plain ring first, and the shared queue's
// push (which also runs the wake-up check) out of line, so that the ring's path is a few
// instructions with no register saves.
inline void ThreadPool::pushLocal(Worker& self, detail::WorkItem item) {
  if (solo_) {
    soloRun_.push(item);  // the only worker is this one, and it is awake
    return;
  }
  pushShared(self, item);
}

void ThreadPool::pushShared(Worker& self, detail::WorkItem item) {
  self.queue.push(item);
  wakeWorkerIfNeeded();  // an idle worker may steal it
}

inline bool ThreadPool::popLocal(Worker& self, detail::WorkItem& item) noexcept {
  // noexcept: both pops are noexcept.
  if (solo_) return soloRun_.tryPop(item);
  item = self.queue.pop();
  return !item.empty();
}

inline bool ThreadPool::push(detail::WorkItem item) {
  Worker* self = tlWorker;
  if (self != nullptr && self->pool == this) {
    // Relaxed: a stale zero only defers the move to the next push or to when this
    // worker runs dry. An outside push that happens-before this call is seen anyway
    // (write-read coherence), which is what ThreadPool(1)'s FIFO order needs.
    if (injectionSize_.load(std::memory_order_relaxed) != 0) {
      takeFromInjection(*self, /*returnFirst=*/false);
    }
    pushLocal(*self, item);
    return true;
  }
  return pushOutside(item);
}

bool ThreadPool::pushOutside(detail::WorkItem item) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(injectionMutex_);
    // Relaxed: closed_ is written under injectionMutex_, which we hold.
    if (closed_.load(std::memory_order_relaxed)) return false;
    injection_.push(item);
    // seq_cst: this store publishes the work for the wake-up protocol (rule 1).
    injectionSize_.store(injection_.size(), std::memory_order_seq_cst);
    // Rule 1's decision is made before the lock is released: from then on a worker may
    // run the item, the work it completes may let the pool's owner destroy the pool, and
    // this thread must not read the pool any more ("Lifetime" above). Only a wake-up
    // goes on after the unlock, and it keeps the pool alive.
    wake = wakeNeeded();
    // Relaxed: ordered before the unlock; shutdown() reads it after the item was taken
    // under this lock (see "Lifetime").
    if (wake) wakesInFlight_.fetch_add(1, std::memory_order_relaxed);
  }
  if (wake) {
    wakeSleeper();
    // Release: the last touch of the pool by this thread; shutdown()'s acquire load of
    // zero orders every access of the wake-up above before the pool's destruction.
    wakesInFlight_.fetch_sub(1, std::memory_order_release);
  }
  return true;
}

void ThreadPool::schedule(std::coroutine_handle<> h) {
  if (!push(detail::WorkItem::fromHandle(h))) throw ExecutorShutDown(name());
}

void ThreadPool::scheduleJob(detail::Job* job) {
  bool accepted = false;
  try {
    accepted = push(detail::WorkItem::fromJob(job));
  } catch (...) {  // std::bad_alloc growing a queue: the job was not queued
    job->complete(job, false);
    throw;
  }
  if (!accepted) {
    job->complete(job, false);
    throw ExecutorShutDown(name());
  }
}

detail::WorkItem ThreadPool::takeFromInjection(Worker& self, bool returnFirst) {
  // seq_cst: a final sweep (rule 2) must not read this before its searching_ decrement.
  if (injectionSize_.load(std::memory_order_seq_cst) == 0) return {};
  std::lock_guard<std::mutex> lock(injectionMutex_);
  const std::size_t size = injection_.size();
  if (size == 0) return {};
  // This worker's share, rounded up: all of it on ThreadPool(1), which keeps its order.
  const std::size_t take = (size + workers_.size() - 1) / workers_.size();
  const std::size_t queued = returnFirst ? take - 1 : take;
  // Items leave injection_ only once the local queue has room (reserving may throw):
  // read in place, then dropped at once.
  detail::WorkItem first;
  std::size_t taken = 0;
  auto next = [&] {
    if (returnFirst && first.empty()) first = injection_.at(taken++);  // the oldest: returned
    return injection_.at(taken++);
  };
  if (solo_) {
    soloRun_.pushBatch(queued, next);
  } else {
    self.queue.pushBatch(queued, next);
  }
  if (returnFirst && first.empty()) first = injection_.at(taken++);
  injection_.drop(taken);
  // seq_cst: keeps every injectionSize_ store in the total order S.
  injectionSize_.store(injection_.size(), std::memory_order_seq_cst);
  if (returnFirst) detail::bump(self.counters.itemsTaken);  // not through its queue
  return first;
}

void ThreadPool::workerMain(Worker& self) {
  tlWorker = &self;
  // Relaxed: the stall watchdog reads the id alone, and takes a zero for "not yet".
  self.tid.store(static_cast<pid_t>(::syscall(SYS_gettid)), std::memory_order_relaxed);
  detail::bindStallCapture(&self.capture);
  if (stallSignal_ > 0) detail::unblockStallSignal(stallSignal_);
  if (solo_) soloRun_.bind();
#if defined(__linux__)
  {
    std::string threadName = std::string(name()) + "-" + std::to_string(self.index);
    threadName.resize(std::min<std::size_t>(threadName.size(), 15));
    pthread_setname_np(pthread_self(), threadName.c_str());
  }
#endif
  // Linux lets a sleeping thread wake up to 50 us late ("timer slack") to batch wake-ups;
  // a worker parked until its earliest timer exists to wake on time, so it asks for 1 ns
  // (as the timer thread does). Only timed waits are affected. Failure costs accuracy.
  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  IoLoop::setCurrentFactory(&ThreadPool::makeWorkerLoop, &self);
  self.attention = &timerDueSize_;
  for (;;) {
    detail::WorkItem item;
    // Whether `item` holds one: from popLocal's own test on the plain path (so the item is
    // not tested again: two instructions per item on ThreadPool(1)).
    bool found;
    // Relaxed: a stale zero only lets one more queued item run before a due timer; the
    // delivery's wake-up (rule 1) covers the workers that are not running. A worker with
    // an event loop, or with timers of its own, always takes this branch (attention is
    // then alwaysAttend).
    if (self.attention->load(std::memory_order_relaxed) != 0) [[unlikely]] {
      if (timerDueSize_.load(std::memory_order_relaxed) != 0) item = takeDueTimer(self);
      if (item.empty() && self.hasTimers) item = takeOwnTimer(self, /*cheapClock=*/true);
      if (item.empty()) (void)popLocal(self, item);
      // I/O: out of queued work, or every kItemsPerIoPoll items, hand the queued
      // submissions to the kernel and run the completions that are there (no waiting).
      if (self.loop != nullptr &&
          (item.empty() || ++self.itemsSincePoll == kItemsPerIoPoll) && self.loop->hasWork()) {
        self.itemsSincePoll = 0;
        const std::size_t ran = self.loop->run(0);
        if (item.empty() && ran != 0) continue;
      }
      found = !item.empty();
    } else {
      found = popLocal(self, item);
    }
    if (!found) {
      item = findWork(self);
      if (item.empty()) break;  // the pool is closed
      if (item.bits() == kLookAgain.bits()) continue;
    }
    // For the stall task hook (executors/stall_task_hook.h), read by this thread's stall
    // signal handler. Relaxed: nothing else reads it.
    self.capture.item.store(item.bits(), std::memory_order_relaxed);
    try {
      item.run();
    } catch (...) {
      detail::reportEscapedException(name());
    }
  }
  IoLoop::setCurrentFactory(nullptr, nullptr);
  self.loop.reset();  // nothing in flight: the pool closed with every worker parked idle
  {
    // From now on the stall watchdog signals this thread no more (see ThreadPoolWorker).
    std::lock_guard<std::mutex> lock(self.signalMutex);
    self.exited = true;
  }
  detail::bindStallCapture(nullptr);
  tlWorker = nullptr;
  ThreadRunQueue::unbind();
}

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
    TimerRep wakeAt = kNoTimer;
    if (self.hasTimers) {
      wakeAt = self.earliestTimer.load(std::memory_order_relaxed);  // as in takeOwnTimer
      if (wakeAt != kNoTimer && wakeAt <= TimerClock::now().time_since_epoch().count()) {
        (void)leaveIdle(self, /*tookWork=*/false);  // true, as above
        return kLookAgain;
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
      if (wakeAt != kNoTimer) {
        const auto left = std::chrono::ceil<std::chrono::nanoseconds>(
            TimerClock::time_point(TimerClock::duration(wakeAt)) - TimerClock::now());
        timeoutNs = std::max<std::int64_t>(left.count(), 0);
      }
      self.loop->runFor(timeoutNs);
      // true: not parked, so the pool cannot have closed.
      (void)leaveIdle(self, /*tookWork=*/false, /*slept=*/true);
      return kLookAgain;
    }
    // Acquire: pairs with the waker's release store, so what it published (work, or
    // closed_) is visible once we see the token. With a timer, the wait ends at its
    // deadline too.
    bool timedOut = false;
    detail::bump(self.counters.parks);
    while (self.wakeToken.load(std::memory_order_acquire) == 0) {
      if (wakeAt != kNoTimer && TimerClock::now().time_since_epoch().count() >= wakeAt) {
        timedOut = true;
        break;
      }
      futexWait(self.wakeToken, 0, wakeAt);
    }
    if (timedOut) {
      // Our earliest timer is due: we leave idle_ by ourselves, as when the final sweep
      // finds work (a waker may have popped us meanwhile, or the pool closed), and fire it
      // from the loop.
      if (!leaveIdle(self, /*tookWork=*/false, /*slept=*/true)) return {};
      return kLookAgain;
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
  futexWake(worker->wakeToken);
}

void ThreadPool::closeIfQuiescentLocked() noexcept {
  {
    std::lock_guard<std::mutex> lock(injectionMutex_);
    // Its pusher (or the timer delivery) is waking a worker (rule 1); or a hold is
    // outstanding (its releaseHold() checks again).
    if (!injection_.empty() || timerDueHead_ != nullptr || holds_ != 0) return;
    closed_.store(true, std::memory_order_seq_cst);
  }
  for (Worker* worker : idle_) {
    worker->inIdle = false;
    worker->parked = false;
    // Release: makes closed_ visible to the woken worker.
    worker->wakeToken.store(1, std::memory_order_release);
    futexWake(worker->wakeToken);
  }
  idle_.clear();
  parked_ = 0;
  sleeping_.store(0, std::memory_order_seq_cst);
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
    for (Worker* worker : idle_) {
      worker->inIdle = false;
      worker->parked = false;
      // Release: makes closed_ visible to the woken worker.
      worker->wakeToken.store(1, std::memory_order_release);
      futexWake(worker->wakeToken);
    }
    idle_.clear();
    parked_ = 0;
  }
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
  if (watchdog_ != nullptr) watchdog_->stop();
  std::lock_guard<std::mutex> shutdownLock(shutdownMutex_);
  joined_ = true;
}

}  // namespace weft
