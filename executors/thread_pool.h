#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "weft/executors/detail/job.h"
#include "weft/executors/detail/ring_buffer.h"
#include "weft/executors/detail/timer_queue.h"
#include "weft/executors/detail/worker_counters.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/pool_metrics.h"
#include "weft/executors/stall_report.h"
#include "weft/executors/thread_run_queue.h"

namespace weft {

namespace detail {
struct ThreadPoolWorker;
class StallWatchdog;
}  // namespace detail

// How to build a ThreadPool (the constructor taking a thread count and a name covers the
// common case).
struct ThreadPoolOptions {
  // Worker threads; 0 (the default) means one per hardware thread (defaultThreadCount()),
  // as for the ThreadPool(threads, name) constructor.
  std::size_t threads = 0;
  // Names the pool in error messages and its threads ("<name>-<index>").
  std::string name = "weft-pool";
  // The workers' event loops: io_uring, epoll, or kAuto (WEFT_IO_BACKEND if set, else
  // epoll; see IoLoop::resolveBackend).
  IoBackendChoice ioBackend = IoBackendChoice::kAuto;

  // The stall detector: a worker that has been running one item (a coroutine between two
  // suspensions, a callable, an I/O completion's resumption) for at least this long
  // (stall time: running or blocked in a call, not waiting for a CPU while the kernel
  // runs other threads) is reported to onStall, once per stall, with its native
  // backtrace and the function its item entered; so is a pool whose every worker is
  // stalled at once (StallReport; docs/debugging.md, "In production"). The pool then has
  // one more thread, "<name>-stall", which wakes every stallThreshold/2 and reads
  // counters the workers keep anyway (no cost on them beyond the metrics'); a worker is
  // signalled only when it is stalled. 0 turns the detector off (no thread).
  // Precondition: >= 0 (else the constructor throws std::invalid_argument).
  std::chrono::milliseconds stallThreshold{100};
  // Receives each StallReport, on the pool's stall thread (so a slow callback delays the
  // next look, and it must not shut the pool down: weft prints a message and aborts). An
  // exception it throws is reported on stderr and dropped. Empty (the default): the
  // report's toString() goes to stderr, a "weft: ..." line and its details.
  std::function<void(const StallReport&)> onStall{};
  // The real-time signal that takes a stalled worker's native backtrace (its handler runs
  // on the worker, async-signal-safe, and is installed once per process; SA_RESTART): 0
  // (the default) for SIGRTMAX - 3, a negative value for none (reports then have no
  // native backtrace). A signal the program has a handler of its own for is never taken
  // over: the reports say so instead. Each worker unblocks it (a thread that blocked
  // every signal before making the pool passes that mask on to the workers; the signal
  // is sent to a stalled worker alone). A worker is sent one signal per stall; if it is
  // blocked in a system call that a signal interrupts even with SA_RESTART (poll,
  // epoll_wait, nanosleep, a futex wait...), that call returns EINTR, as it would for
  // any signal.
  int stallSignal = 0;
};

// ThreadPool: a work-stealing pool of worker threads; the default executor for Task.
//
// Semantics:
//  - Each worker owns a FIFO run queue. Work scheduled from one of the pool's own
//    workers goes to that worker's queue (no lock: one atomic store); work scheduled
//    from any other thread goes to a shared injection queue (a mutex). A worker runs its
//    own queue oldest-first, so a coroutine that reschedules itself (`co_await yield()`)
//    lets everything queued before it run first. Before queueing local work, a worker
//    first moves its share of the injection queue into its own queue, so outside work is
//    not starved by busy workers.
//  - A worker whose queue is empty steals the older half of another worker's queue, then
//    takes a share of the injection queue, spins a few rounds doing so, then sleeps (no
//    CPU is used by an idle pool). Scheduling wakes a sleeping worker when no awake
//    worker is already looking for work, so no scheduled work is ever left unnoticed.
//  - ThreadPool(1) is a single-threaded event loop: everything runs on its one thread, in
//    the order it was scheduled (when one schedule call happens before another, its work
//    runs first).
//  - Timers (scheduleTimer, what weft::sleep uses) live in the event loop of the worker
//    that arms them: each worker has a deadline heap of its own, fires its due timers
//    itself before its next item (timers jump the queue; FIFO order holds among scheduled
//    work, not between it and timers), and when it has nothing to run it sleeps until its
//    earliest deadline (in its event loop, or on its futex). A timer armed and fired on
//    one worker involves no other thread. Timers armed from outside the pool (and entries
//    that never expire, deadline time_point::max()) go to the pool's timer thread, which
//    puts them on the pool's due list when they expire; workers take due timers before
//    anything in their own queues. The same thread is the backstop for a worker stuck in
//    a long item: a worker's timer that is still armed 0.5 ms after its deadline is moved
//    to the due list, where any other worker takes it, so a busy worker delays its timers
//    by about 1 ms (plus the time another worker needs to get there), not by the length
//    of its item (docs/design/2026-11-timers-in-workers.md has the measurements). The
//    timer thread starts with the pool's first timer (a pool that never sleeps has none),
//    and sleeps while no timer can be overdue.
//  - shutdown() (also run by the destructor) first stops the pool's timers: every timer
//    still pending fires at once with `shutDown` set (a weft::sleep then throws
//    ExecutorShutDown instead of waiting; nothing hangs on a long sleep), and later
//    timers are refused (ExecutorShutDown). Then it lets the pool finish every task it
//    has accepted, including tasks they schedule while it drains, keeps accepting work
//    while a hold (holdOpen()) is outstanding, and joins the workers. From then on
//    schedule() throws ExecutorShutDown. Awaitables whose completion comes from outside
//    the pool learn of the shutdown from a timer entry that never expires
//    (scheduleShutdownTimer: it fires with `shutDown` set) and, when that completion
//    cannot be withdrawn, hold the pool open until it has come (weft::blocking(fn) with
//    fn running, io/blocking.h).
//  - Lifetime: the pool may be destroyed as soon as the last work it accepted has
//    completed, even while the thread whose schedule() call handed it that work (a
//    callback thread resuming a Task, say) is still returning from schedule(): the
//    destructor waits for such a call to be done with the pool.
//
// Preconditions: shutdown() and the destructor must not run on one of the pool's own
// worker threads, nor in its onStall callback (it would wait for itself): weft prints a
// message naming the pool and aborts. A scheduled coroutine handle must be non-null and suspended.
//
// Errors: the constructor throws std::system_error if a thread cannot be started, and
// std::invalid_argument for a name with a NUL byte (it names the threads, a C string) or a
// negative stallThreshold.
// schedule() throws ExecutorShutDown after shutdown (a refused callable is destroyed
// without running), std::bad_alloc if a queue cannot grow. A callable that throws is
// reported with the pool's name and the process aborts (detail::reportEscapedException).
//
// Thread safety: every member function may be called concurrently from any thread
// (subject to the precondition above); concurrent shutdown() calls all return once the
// pool has stopped.
//
// Example:
//   weft::ThreadPool pool(4, "compute");
//   pool.schedule([] { std::puts("runs on a worker"); });
//   pool.shutdown();  // after the line above has run
class ThreadPool final : public Executor {
 public:
  // Starts `threads` workers; 0 means defaultThreadCount() (one per hardware thread, at
  // least one), as ThreadPoolOptions::threads == 0 does, so ThreadPool(0) and
  // ThreadPool(ThreadPoolOptions{}) make pools of the same size. Worker threads are named
  // "<name>-<index>" where the platform allows (truncated to 15 characters on Linux).
  explicit ThreadPool(std::size_t threads = defaultThreadCount(), std::string name = "weft-pool");
  // The same with every option (threads == 0 there means defaultThreadCount() too).
  // Errors: as above; std::system_error when the I/O backend probe fails for lack of
  // resources; std::invalid_argument for a WEFT_IO_BACKEND that names no backend.
  explicit ThreadPool(ThreadPoolOptions options);
  // Runs shutdown().
  ~ThreadPool() override;

  using Executor::schedule;
  // Queues `h` to be resumed on a worker. Never allocates except to grow a queue
  // (amortized). Throws ExecutorShutDown after shutdown.
  void schedule(std::coroutine_handle<> h) override;

  // True on this pool's worker threads. noexcept: reads a thread_local.
  bool currentThreadInExecutor() const noexcept override;

  // Arms `timer`: called on one of the pool's workers, in that worker's own heap (it
  // fires the timer itself, before its queued work); from anywhere else, or for a
  // deadline of time_point::max(), on the pool's timer thread (at its deadline, a worker
  // runs it before its queued work). See the class comment. Throws ExecutorShutDown once
  // shutdown() has begun; std::bad_alloc; std::system_error if the timer thread cannot
  // start.
  void scheduleTimer(TimerEntry& timer) override;
  // noexcept: a heap removal under the heap's mutex (or a search of the due list).
  bool cancelTimer(TimerEntry& timer) noexcept override;
  // Arms `timer` never to expire, on the pool's timer thread (which it does not start):
  // shutdown() fires it with `shutDown` set, on a worker, while the pool drains (see the
  // class comment and Executor::scheduleShutdownTimer). Returns true. Errors: as
  // scheduleTimer.
  bool scheduleShutdownTimer(TimerEntry& timer) override;

  // Where the pool's timers are: a snapshot for diagnostics and tests (each count is read
  // under its own lock, so they need not add up at any one instant).
  struct TimerCounts {
    // Armed in the workers' own heaps (scheduleTimer called on a worker).
    std::size_t onWorkers = 0;
    // Armed on the pool's timer thread (scheduleTimer called outside the pool, and the
    // entries that never expire).
    std::size_t onTimerThread = 0;
    // Since the pool was made: worker timers that the timer thread took to the due list
    // because their worker had not fired them 0.5 ms after their deadline (it was busy in a
    // long item, or not given a CPU). Many of these say a worker blocks or computes for
    // long stretches.
    std::size_t takenFromBusyWorkers = 0;
  };
  // noexcept: reads counters under their mutexes. Thread safety: any thread.
  TimerCounts timerCounts() const noexcept;

  // A snapshot of the pool's runtime metrics: per worker and in total, items run, steals,
  // parks and wake-ups, queue lengths, I/O operations by opcode, timers armed, fired and
  // cancelled with a histogram of their lateness, and the blocking pool's gauges
  // (executors/pool_metrics.h defines each; executors/prometheus_text.h formats them), and the
  // stall reports made so far. Cheap: relaxed loads of counters the workers keep without locks or
  // read-modify-writes, no lock taken (except the blocking pool's, once), so it may be called
  // often, from any thread, while the pool runs or after it has shut down. Each value is read on
  // its own (see PoolMetrics). Errors: std::bad_alloc (the snapshot's vector and name). Thread
  // safety: any thread.
  //
  // Example:
  //   weft::PoolMetrics m = pool.metrics();
  //   std::printf("%llu items, %llu steals\n", (unsigned long long)m.total.itemsRun,
  //               (unsigned long long)m.total.steals);
  PoolMetrics metrics() const;

  // Stops accepting outside work once everything accepted has run, then joins the
  // workers. Idempotent. See the class comment for the precise semantics.
  void shutdown();

  // Holds the pool open: until releaseHold(), a shutdown() under way does not close the
  // pool (it goes on accepting and running work, its idle workers asleep), so that a
  // completion that comes from outside the pool after the shutdown has begun can still
  // schedule() its coroutine here. For awaitable authors: taken from a shutdown timer's
  // fire function (see the class comment) when the operation it guards can no longer be
  // withdrawn, released by whoever then schedules the coroutine, after schedule().
  // Returns false (nothing held) once the pool is closed (never when called from one of
  // its workers: the pool cannot close while a worker runs). noexcept: a counter under a
  // mutex.
  // Thread safety: any thread.
  //
  // Example (a shutdown timer's fire function, on a worker):
  //   if (!operationWithdrawn) pool.holdOpen();   // the completion will come
  //   ... later, on the completing thread: pool.schedule(h); pool.releaseHold();
  bool holdOpen() noexcept override;
  // Releases one hold taken with holdOpen(); the last one lets a shutdown under way close
  // the pool once it has drained (the pool may be destroyed as soon as this returns).
  // Precondition: a hold is outstanding. noexcept: a counter under a mutex, and the
  // closing check.
  void releaseHold() noexcept override;

  // The backend of the workers' event loops, fixed at construction. noexcept: a member.
  IoBackend ioBackend() const noexcept;

  // The number of worker threads. noexcept: a constant after construction.
  std::size_t threadCount() const noexcept;

  // The pool whose worker is the calling thread, or nullptr. noexcept: reads a
  // thread_local.
  static ThreadPool* current() noexcept;

  // std::thread::hardware_concurrency(), or 1 if it is unknown. noexcept: the standard
  // function is noexcept.
  static std::size_t defaultThreadCount() noexcept;

 private:
  using Worker = detail::ThreadPoolWorker;

  void scheduleJob(detail::Job* job) override;
  // IoLoop's factory on a worker thread: creates the worker's loop on its first I/O.
  static IoLoop* makeWorkerLoop(void* worker);
  // Queues `item`; false if the pool is shut down (nothing was queued).
  bool push(detail::WorkItem item);
  // push() from a thread outside the pool: the injection queue.
  [[gnu::noinline]] bool pushOutside(detail::WorkItem item);
  // The calling worker's own queue.
  void pushLocal(Worker& self, detail::WorkItem item);
  // pushLocal's path for a pool of several workers.
  [[gnu::noinline]] void pushShared(Worker& self, detail::WorkItem item);
  // The calling worker's next own item into `item`; false (item untouched or empty) when
  // its queue is empty.
  bool popLocal(Worker& self, detail::WorkItem& item) noexcept;
  void workerMain(Worker& self);
  // The next item for an out-of-work worker, or an empty item once the pool is closed.
  detail::WorkItem findWork(Worker& self);
  // One sweep over the due timers, the other workers' queues (stealing) and the
  // injection queue.
  detail::WorkItem searchOnce(Worker& self);
  // The oldest due timer, or an empty item; counted as fired (or shut down) by the
  // calling worker `self`. noexcept: a list pop under a mutex, and a clock read.
  detail::WorkItem takeDueTimer(Worker& self) noexcept;
  // The timer queue's delivery: appends an expired (or flushed) timer to the due list and
  // wakes a worker. noexcept: runs on the timer thread; allocates nothing.
  static void deliverTimer(void* pool, TimerEntry& timer) noexcept;
  // Appends `timer` to the due list. Requires injectionMutex_ held. noexcept: links.
  void appendDueLocked(TimerEntry& timer) noexcept;
  // The timer thread's backstop for busy workers (TimerQueue's poll): moves every worker
  // timer overdue by more than the grace period to the due list; returns when to look
  // again. noexcept: locks and links.
  static TimerEntry::Clock::time_point pollWorkerTimers(
      void* pool, TimerEntry::Clock::time_point now) noexcept;
  // scheduleTimer on the calling worker `self`: its own heap.
  void armOnWorker(Worker& self, TimerEntry& timer);
  // The calling worker's earliest timer if it is due (removed from its heap), or the due
  // list's first timer if the backstop moved some meanwhile, or an empty item. With
  // `cheapClock`, a coarse clock read first rules out timers that are not due yet (before
  // each item); without, the precise clock decides (before the worker sleeps). noexcept: a
  // clock read and a heap pop under the worker's timer mutex.
  detail::WorkItem takeOwnTimer(Worker& self, bool cheapClock) noexcept;
  // shutdown(): every worker's timers go to the due list with shutDown set, and the
  // workers refuse later ones. noexcept: as the other shutdown steps.
  void stopWorkerTimers() noexcept;
  // Called by a worker leaving idle_ by itself (its final sweep found work, or a timer or
  // its event loop woke it): undoes its announcement, or gives back the searching count a
  // waker handed it meanwhile (rule (3)); re-runs rule (1) when it `tookWork`. False when
  // the pool closed meanwhile (the worker must exit). `slept`: it had parked (then a
  // count handed meanwhile is a wake-up, WorkerMetrics::wakeUps). noexcept: see below.
  bool leaveIdle(Worker& self, bool tookWork, bool slept = false) noexcept;
  // Moves a share of the injection queue into `self`'s queue; returns the first item
  // when `returnFirst` (otherwise queues everything).
  detail::WorkItem takeFromInjection(Worker& self, bool returnFirst);
  // Called after making work visible: wakes a sleeping worker if nobody is searching.
  // It is wakeNeeded() (rule 1's two loads), then wakeSleeper() (pops and wakes a
  // sleeper, if one is still idle).
  // These six are noexcept: they run after work was accepted or while stopping, where
  // failing half-way would lose work or threads; the only possible failure is a
  // std::mutex or futex system error, and terminating is the honest answer to that.
  void wakeWorkerIfNeeded() noexcept;
  bool wakeNeeded() const noexcept {
    // seq_cst loads: rule 1 of the wake-up protocol (after a seq_cst publication).
    return searching_.load(std::memory_order_seq_cst) == 0 &&
           sleeping_.load(std::memory_order_seq_cst) != 0;
  }
  void wakeSleeper() noexcept;
  // Called by a searching worker that found work.
  void stopSearching() noexcept;
  // Requires idleMutex_ held and every worker parked: closes the pool if nothing is
  // queued, and wakes every worker so that it exits.
  void closeIfQuiescentLocked() noexcept;
  // Requires idleMutex_ held and closed_ set: wakes every idle worker (it exits on
  // waking) and empties the idle list. noexcept: stores and futex wake-ups.
  void wakeIdleWorkersToExitLocked() noexcept;
  // Constructor failure: stops and joins the workers started so far.
  void abandonStart() noexcept;
  // metrics(): the items worker `index` has run (pool_metrics.cc). noexcept: loads, and a
  // compare-exchange that keeps the count from going back between snapshots.
  std::uint64_t itemsRunBy(std::size_t index) const noexcept;

  // ThreadPool(1): nobody steals, so the worker's queue needs no atomics (see .cc).
  const bool solo_;
  const IoBackend ioBackend_;
  std::vector<std::unique_ptr<Worker>> workers_;

  // The injection queue: work scheduled from threads outside the pool. 64: the common
  // cache line size; keeps the outside threads' writes off the workers' hot counters.
  alignas(64) std::mutex injectionMutex_;
  detail::RingBuffer<detail::WorkItem> injection_;  // guarded by injectionMutex_
  // injection_.size(), readable without the lock. Written under injectionMutex_.
  std::atomic<std::size_t> injectionSize_{0};
  // Outside threads whose push was accepted and that are still waking a worker, or that
  // released the last hold and are still checking whether the pool may close; the pool
  // must outlive them (see "Lifetime" in thread_pool_shutdown.cc). Incremented under
  // injectionMutex_, on its cache line, which the pusher holds at that moment.
  std::atomic<std::uint32_t> wakesInFlight_{0};
  // Set (under injectionMutex_ and idleMutex_) once the pool has drained during
  // shutdown; from then on every schedule is refused.
  std::atomic<bool> closed_{false};
  // Outstanding holdOpen()s: the pool does not close while any is. Guarded by
  // injectionMutex_ (so the quiescence check sees it with the injection queue).
  std::size_t holds_ = 0;
  // Expired timers waiting for a worker: an intrusive FIFO through Job::next, guarded by
  // injectionMutex_ (so the shutdown's quiescence check sees it with the injection
  // queue).
  detail::Job* timerDueHead_ = nullptr;
  detail::Job* timerDueTail_ = nullptr;
  std::size_t timerDueCount_ = 0;

  // timerDueCount_, readable without the lock; written under injectionMutex_. Read by
  // every worker before each item, so it has a cache line of its own that is written
  // only when timers fire.
  alignas(64) std::atomic<std::size_t> timerDueSize_{0};

  // ThreadPool(1)'s worker queue (nobody steals from it: no atomics), offered to fibers
  // (see executors/thread_run_queue.h). After the two counters it reads: the due timers
  // run first, the injection queue's work goes in front of the worker's next push. Unused
  // by a pool of several workers.
  ThreadRunQueue soloRun_{*this, timerDueSize_, injectionSize_};

  // Wake-up protocol (see thread_pool_idle.cc): how many workers are awake and looking for
  // work, and how many are in idle_.
  alignas(64) std::atomic<std::uint32_t> searching_{0};
  std::atomic<std::uint32_t> sleeping_{0};

  alignas(64) std::mutex idleMutex_;
  std::vector<Worker*> idle_;  // guarded by idleMutex_: workers that announced sleep
  std::size_t parked_ = 0;     // guarded by idleMutex_: of those, how many wait
  bool closing_ = false;       // guarded by idleMutex_: shutdown() has been called

  std::mutex shutdownMutex_;
  bool joined_ = false;  // guarded by shutdownMutex_

  // Worker timers the backstop took (TimerCounts::takenFromBusyWorkers). Relaxed: a
  // statistic.
  std::atomic<std::size_t> timersTakenFromWorkers_{0};
  // Timers cancelled while they waited on the due list (PoolMetrics::timerThreadCancelled).
  // Written under injectionMutex_ (one writer at a time: detail::bump).
  detail::Counter dueCancelled_{0};

  // The stall detector's signal, installed (detail::prepareStallSignal), or -1: none.
  // Set before the workers start (each unblocks it), then constant.
  int stallSignal_ = -1;
  // The stall detector (ThreadPoolOptions::stallThreshold), or null when it is off.
  // Started once the workers run; stopped by shutdown() after they have been joined.
  std::unique_ptr<detail::StallWatchdog> watchdog_;

  // Last: its thread calls deliverTimer and pollWorkerTimers, which use the members above.
  // (It is stopped by shutdown(), before any of them is destroyed.)
  detail::TimerQueue timers_;
};

}  // namespace weft
