#include "weft/executors/thread_pool.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "weft/executors/detail/io_loop_base.h"
#include "weft/executors/detail/stall_capture.h"
#include "weft/executors/detail/stall_watchdog.h"
#include "weft/executors/detail/thread_pool_worker.h"
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
// The rest of the pool, by concern:
//   thread_pool_idle.cc      how a worker out of work searches, sleeps and is woken: the
//                            wake-up protocol, why no wake-up is lost, and parking;
//   thread_pool_timers.cc    timers: the workers' own heaps, the due list, the backstop
//                            for busy workers;
//   thread_pool_shutdown.cc  shutdown, holds, and how long the pool must outlive a pusher;
//   pool_metrics.cc          metrics(), over the counters described below.
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

namespace detail {

// The worker running on this thread, if any (executors/detail/thread_pool_worker.h).
constinit thread_local ThreadPoolWorker* tlWorker = nullptr;

}  // namespace detail

namespace {

std::size_t effectiveThreads(std::size_t threads) noexcept {
  return threads == 0 ? ThreadPool::defaultThreadCount() : threads;
}

// A worker with I/O in flight polls its loop (without waiting) after this many items, so
// that completions and queued submissions are not held back by a long queue. Prime, as
// tokio's, so that it does not beat in step with periodic work.
constexpr std::uint32_t kItemsPerIoPoll = 61;

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
  return detail::tlWorker != nullptr ? detail::tlWorker->pool : nullptr;
}

bool ThreadPool::currentThreadInExecutor() const noexcept {
  return detail::tlWorker != nullptr && detail::tlWorker->pool == this;
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
  Worker* self = detail::tlWorker;
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
    // this thread must not read the pool any more ("Lifetime" in thread_pool_shutdown.cc).
    // Only a wake-up goes on after the unlock, and it keeps the pool alive.
    wake = wakeNeeded();
    // Relaxed: ordered before the unlock; shutdown() reads it after the item was taken
    // under this lock (see "Lifetime" in thread_pool_shutdown.cc).
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
  detail::tlWorker = &self;
  setCurrent(this);
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
      // But not when out of work right after an epoll wait that ran one completion or
      // none (quietAfterWait, set in findWork): on a lightly loaded loop such a peek
      // finds nothing and costs a system call per request, and findWork's wait in the
      // loop harvests whatever it would have found (it returns at once when something
      // is there), so skipping it delays no completion.
      if (self.loop != nullptr) {
        const bool peek = item.empty() ? !self.quietAfterWait
                                       : ++self.itemsSincePoll == kItemsPerIoPoll;
        self.quietAfterWait = false;
        if (peek && self.loop->hasWork()) {
          self.itemsSincePoll = 0;
          const std::size_t ran = self.loop->run(0);
          if (item.empty() && ran != 0) continue;
        }
      }
      found = !item.empty();
    } else {
      found = popLocal(self, item);
    }
    if (!found) {
      item = findWork(self);
      if (item.empty()) break;  // the pool is closed
      if (item.bits() == detail::kLookAgain.bits()) continue;
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
  detail::tlWorker = nullptr;
  setCurrent(nullptr);
  ThreadRunQueue::unbind();
}

}  // namespace weft
