#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include "weft/executors/detail/stall_capture.h"
#include "weft/executors/detail/timer_heap.h"
#include "weft/executors/detail/work_stealing_queue.h"
#include "weft/executors/detail/worker_counters.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/timer_entry.h"
#include "weft/executors/work_item.h"

namespace weft {
class ThreadPool;
}  // namespace weft

namespace weft::detail {

// One ThreadPool worker (executors/thread_pool*.cc say how the pool uses each field; the
// metrics in executors/pool_metrics.cc and the stall watchdog read its counters).
// alignas(64) (the common cache line size) keeps one worker's hot queue indices off its
// neighbours' lines.
struct alignas(64) ThreadPoolWorker {
  ThreadPoolWorker(ThreadPool* p, std::size_t i) : pool(p), index(i), rng(i + 1) {}

  // xorshift64: picks the first victim to steal from, so thieves spread out.
  std::size_t random(std::size_t bound) noexcept {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return static_cast<std::size_t>(rng % bound);
  }

  ThreadPool* const pool;
  const std::size_t index;
  WorkStealingQueue queue;  // used when the pool has several workers
  // 1 when the worker has been woken (or told to exit); it waits while it is 0.
  std::atomic<std::uint32_t> wakeToken{0};
  bool inIdle = false;        // guarded by ThreadPool::idleMutex_
  bool parked = false;        // guarded by ThreadPool::idleMutex_
  bool parkedInLoop = false;  // guarded by ThreadPool::idleMutex_: sleeps in loop->run()
  std::uint64_t rng;          // owner only
  // The worker's event loop, created by its first I/O (IoLoop::current()); written by
  // the worker only, read under idleMutex_ by wakers when parkedInLoop is set.
  std::unique_ptr<IoLoop> loop;
  std::uint32_t itemsSincePoll = 0;  // owner only
  // Back from a wait in its event loop that ran at most one completion, with no item
  // taken since (owner only): the worker waits there again without peeking first.
  bool quietAfterWait = false;
  // The word workerMain tests before each item (owner only): the pool's timerDueSize_
  // while the worker has no event loop, then alwaysAttend. So one load and one test
  // cover both timers and I/O, and a pool that never does I/O pays nothing for it.
  const std::atomic<std::size_t>* attention = nullptr;
  const std::atomic<std::size_t> alwaysAttend{1};
  std::thread thread;

  // The worker's timers (see "Timers" in thread_pool_timers.cc). On a cache line of their own:
  // cancellers and the timer thread's poll lock the mutex from other threads.
  alignas(64) std::mutex timerMutex;
  TimerHeap timers;            // guarded by timerMutex
  bool timersStopped = false;  // guarded by timerMutex: shutdown() flushed the heap
  // The earliest deadline in `timers` (steady_clock ticks), max() when it is empty.
  // Written under timerMutex; read without it by the owner and by the timer thread.
  std::atomic<TimerEntry::Clock::rep> earliestTimer{
      std::numeric_limits<TimerEntry::Clock::rep>::max()};
  // Timers of `timers` cancelled before they fired (WorkerMetrics::timersCancelled):
  // written under timerMutex by whichever thread cancels.
  Counter timersCancelled{0};
  // Owner only: it armed a timer since it last saw its heap empty (only the owner adds
  // to it, so a false here means the heap is empty).
  bool hasTimers = false;

  // What the worker counts for ThreadPool::metrics(), each counter written by the worker
  // alone (its event loop's I/O counts too: the loop runs on the worker's thread).
  WorkerCounters counters;
  // Per other worker (by index): the items this worker stole from that one's queue,
  // written by this worker alone (counted before each steal's claim: see
  // WorkStealingQueue::stealHalfInto). metrics() subtracts them from the victim's head
  // index to count the items the victim popped itself. Set up before the threads start.
  std::unique_ptr<Counter[]> stolenFrom;
  // The items-run count metrics() last reported for this worker: a snapshot's count may
  // lag (a steal counted before its claim), and readers never report less than a reader
  // did before (raised with a compare-exchange by readers only).
  mutable Counter reportedItemsRun{0};

  // The stall watchdog's native backtrace of this worker (executors/detail/
  // stall_capture.h), and what keeps it from signalling a thread that has ended: the
  // watchdog sends the signal under signalMutex, after checking `exited`, which the
  // worker sets under it before it returns from workerMain.
  StallCapture capture;
  std::mutex signalMutex;
  bool exited = false;  // guarded by signalMutex
  // The worker thread's kernel id (gettid), stored by the worker as it starts (0
  // before): the stall watchdog reads the thread's /proc/self/task/<tid>/schedstat to
  // leave out of a stall the time the thread waited for a CPU.
  std::atomic<pid_t> tid{0};
};

// Shared by the files of ThreadPool (executors/thread_pool*.cc).

// The worker running on this thread, if any: set by ThreadPool::workerMain (defined in
// thread_pool.cc). constinit: constant-initialised, so that the other files read it
// without calling a TLS wrapper.
extern constinit thread_local ThreadPoolWorker* tlWorker;

// ThreadPoolWorker::earliestTimer of an empty heap (time_point::max(), which no worker
// timer has).
inline constexpr TimerEntry::Clock::rep kNoTimer =
    std::numeric_limits<TimerEntry::Clock::rep>::max();

// What ThreadPool::findWork returns after it ran I/O completions while parked in the
// worker's loop, or when one of the worker's own timers is due: no item, but the worker is
// not out of work (the completions may have queued some; the loop fires the timer).
// 2 is no frame address and not a job (bit 0 clear).
inline constexpr WorkItem kLookAgain = WorkItem::fromBits(2);

}  // namespace weft::detail
