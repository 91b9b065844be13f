#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weft/executors/io_loop.h"

namespace weft {

// The number of IoOpcode values (the size of the per-opcode arrays below).
inline constexpr std::size_t kIoOpcodeCount = static_cast<std::size_t>(IoOpcode::kWait) + 1;

// The opcode's name in snake case, as the Prometheus text labels it ("receive",
// "send_message", "receive_multishot"...); "unknown" for a value out of range. noexcept: a
// table lookup.
std::string_view ioOpcodeName(IoOpcode opcode) noexcept;

// A histogram of how late timers fired, in fixed log2 buckets of microseconds: bucket i
// counts the timers whose lateness L (the time from their deadline to the moment their
// fire function was taken to run) was at most upperBoundMicros(i) and more than bucket
// i-1's bound (bucket 0: L <= 1 us), the last one everything above 2^21 us (about 2.1 s).
// Counts are per bucket (not cumulative: toPrometheusText adds them up).
struct LatenessHistogram {
  static constexpr std::size_t kBuckets = 23;
  // The upper bound of bucket `i` < kBuckets - 1, in microseconds: 2^i.
  static constexpr std::uint64_t upperBoundMicros(std::size_t i) noexcept {
    return std::uint64_t{1} << i;
  }
  // The bucket a lateness of `nanos` (>= 0) falls in. noexcept: arithmetic.
  static std::size_t bucketOf(std::uint64_t nanos) noexcept;

  std::array<std::uint64_t, kBuckets> buckets{};
  std::uint64_t count = 0;     // the sum of `buckets`
  std::uint64_t sumNanos = 0;  // the sum of the latenesses, in nanoseconds
};

// What one ThreadPool worker did since the pool was made (counters), and what it holds now
// (gauges). A plain value: ThreadPool::metrics() fills it.
struct WorkerMetrics {
  // Work items the worker ran: coroutine resumptions, callables (Executor::schedule(F)),
  // and fire functions of timers. On ThreadPool(1), also the items fibers took straight
  // from its queue (executors/thread_run_queue.h), which the worker would have run.
  // Coroutines resumed by an I/O completion inside the event loop are counted by
  // ioCompleted, not here.
  std::uint64_t itemsRun = 0;
  // Successful steals (each takes the older half of another worker's queue, at most 128
  // items), and the items they took in all.
  std::uint64_t steals = 0;
  std::uint64_t stolenItems = 0;
  // Times the worker ran out of work, searched, found nothing and went to sleep (on its
  // futex, or in its event loop while it has I/O in flight).
  std::uint64_t parks = 0;
  // Of those sleeps, how many another thread ended by handing the worker work (the
  // others end at the worker's own timer, an I/O completion, or the pool's shutdown).
  std::uint64_t wakeUps = 0;
  // The worker's own run queue: its length now, and the longest it has been. ThreadPool(1)
  // publishes both before each item it takes (its queue has no atomics), so they are as
  // of the worker's latest item. Work queued from outside the pool waits in the injection
  // queue (PoolMetrics::injectionQueueDepth) until a worker takes it.
  std::uint64_t queueDepth = 0;
  std::uint64_t queueHighWater = 0;
  // I/O operations of the worker's event loop, by opcode (index: the IoOpcode's value):
  // submitted, and completed (those that completed at once when submitted, cancelled,
  // timed out and withdrawn included; a multishot receive completes once, at its end).
  // submitted - completed is what is in flight now.
  std::array<std::uint64_t, kIoOpcodeCount> ioSubmitted{};
  std::array<std::uint64_t, kIoOpcodeCount> ioCompleted{};
  // Timers armed in this worker's heap (scheduleTimer called on the worker).
  std::uint64_t timersArmed = 0;
  // Timers whose fire function this worker took to run at or after their deadline (its
  // own, and the pool's due timers, wherever they were armed); `timerLateness` says how
  // late. Fired at shutdown instead (shutDown set): timersShutDown.
  std::uint64_t timersFired = 0;
  std::uint64_t timersShutDown = 0;
  // Timers of this worker's heap that were cancelled before they fired.
  std::uint64_t timersCancelled = 0;
  LatenessHistogram timerLateness;
};

// A snapshot of a ThreadPool's runtime metrics (ThreadPool::metrics(); as Prometheus
// text: executors/prometheus_text.h). Counters count
// from the pool's construction and never go down; gauges say what holds at the moment
// they were read. Each field is read on its own (relaxed loads of values their threads
// publish), so the fields need not add up at any one instant; each counter, read twice,
// never goes back.
struct PoolMetrics {
  std::string name;  // the pool's name
  IoBackend ioBackend = IoBackend::kEpoll;
  // One per worker, in worker order (index i is the thread "<name>-<i>").
  std::vector<WorkerMetrics> workers;
  // The pool's totals: the workers' counters and gauges added up (queueHighWater: the
  // largest), plus the timers of the pool's timer thread (timerThreadArmed and
  // timerThreadCancelled in timersArmed and timersCancelled).
  WorkerMetrics total;
  // Work scheduled from outside the pool that no worker has taken yet.
  std::uint64_t injectionQueueDepth = 0;
  // The pool's timer thread: timers armed outside the pool (and entries that never
  // expire: the shutdown guards of io/), and those cancelled before they fired (there, or
  // while they waited for a worker on the due list).
  std::uint64_t timerThreadArmed = 0;
  std::uint64_t timerThreadCancelled = 0;
  // Worker timers the timer thread took from a worker busy in a long item, 0.5 ms after
  // their deadline, so that another worker fires them (ThreadPool::TimerCounts).
  std::uint64_t timersTakenFromBusyWorkers = 0;
  // The process's default BlockingPool (io/blocking.h: what weft::blocking(fn) runs on):
  // its threads now and the calls waiting for one. 0 when the program has not used it
  // (or does not link weft::io).
  std::uint64_t blockingThreads = 0;
  std::uint64_t blockingQueued = 0;
  // Stall reports made (ThreadPoolOptions::stallThreshold): of single workers, and of the
  // whole pool (every worker stalled at once). 0 while the detector is off.
  std::uint64_t stalls = 0;
  std::uint64_t wholePoolStalls = 0;
};

// Where ThreadPool::metrics() reads the blocking-pool gauges: weft::io's default
// BlockingPool registers a function here when it is created (executors/ cannot name it).
// `read` fills threads and queued, must be callable from any thread, and must not throw;
// nullptr clears it. noexcept: an atomic store. Thread safety: any thread.
using BlockingGaugesReader = void (*)(std::uint64_t& threads, std::uint64_t& queued) noexcept;
void setBlockingGaugesReader(BlockingGaugesReader read) noexcept;

}  // namespace weft
