#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "weft/executors/detail/thread_pool_worker.h"
#include "weft/executors/stall_report.h"
#include "weft/executors/thread_run_queue.h"

namespace weft::detail {

// A worker's progress count: it moves whenever the worker starts something new, an item
// from its queue (the queue's head index: on ThreadPool(1) also the items fibers took
// from it; on a larger pool also the items thieves took, which only delays a report until
// a stalled worker's queue is empty) or from elsewhere (itemsTaken), or an I/O
// completion. The watchdog below, and the worker when it runs out of work
// (WorkerCounters::idleAt), read it the same way. `solo`: ThreadPool(1)'s queue, else
// nullptr. noexcept: relaxed loads.
inline std::uint64_t progressOf(const ThreadPoolWorker& worker,
                                const ThreadRunQueue* solo) noexcept {
  return (solo != nullptr ? solo->takenCount() : worker.queue.taken()) +
         read(worker.counters.itemsTaken) + read(worker.counters.io.completedAll);
}

// The stall time of a worker from two readings of its thread's
// /proc/self/task/<tid>/schedstat ("<on-CPU ns> <run-queue wait ns> <timeslices>"): the
// one taken when the watchdog first saw the worker without progress (`atStart`) and the
// one taken `wall` later (`now`). It is `wall` minus the run-queue wait accumulated
// between the two (the time the thread was runnable but given no CPU), at least zero: so
// an item that runs, or blocks in a call, counts; a thread that the scheduler preempts
// does not. When either text is empty or unreadable (kernels without CONFIG_SCHED_INFO
// have no such file; a thread that has ended neither), or the counts went back, it is
// `wall`. noexcept: parses two strings.
std::chrono::nanoseconds stallTime(std::chrono::nanoseconds wall, std::string_view atStart,
                                   std::string_view now) noexcept;

// ThreadPool's stall detector (ThreadPoolOptions::stallThreshold): a thread of the pool's
// that wakes every threshold/2 and looks at each worker's progress count. A worker that
// is not idle (its count differs from the one it stored when it last ran out of work)
// and whose count has not moved for at least the threshold of stall time (stallTime:
// wall time since the first look that saw it without progress, less the time its thread
// waited for a CPU meanwhile) is stalled in one item: it is
// reported once (with its native backtrace, taken by signal, and the function its item
// entered), and not again until its count moves or it goes idle. When every worker is
// stalled at once, the pool is reported too, once per such episode.
//
// No cost on the workers beyond the counters they keep for the metrics, the entry
// function they record per item, the count they store when they run out of work and
// their thread id, stored once: no clock read, no shared write. The watchdog reads a
// thread's schedstat only at looks that see that worker busy without progress.
//
// Thread safety: start and stop from the thread that owns the pool; reportsCount from
// any thread.
class StallWatchdog {
 public:
  struct Options {
    std::string pool;
    std::chrono::milliseconds threshold{0};
    std::function<void(const StallReport&)> onStall;  // empty: print to stderr
    // The installed capture signal (prepareStallSignal), or -1 with the reason in
    // nativeOff: the reports then say it instead of a native backtrace.
    int signal = -1;
    std::string nativeOff;
  };

  // `workers` and `solo` must outlive the watchdog (the pool owns all three).
  StallWatchdog(Options options, std::vector<ThreadPoolWorker*> workers,
                const ThreadRunQueue* solo);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // Starts the thread ("<pool>-stall"). Errors: std::system_error.
  void start();
  // Stops and joins it. Idempotent. noexcept: a flag, a notification and a join.
  // Precondition: not on the watchdog's own thread (onStall must not shut the pool down;
  // weft prints a message and aborts if it does).
  void stop() noexcept;
  // True on the watchdog's thread. noexcept: compares thread ids.
  bool onWatchdogThread() const noexcept;

  // Reports made so far: of single workers, and of the whole pool. noexcept: relaxed loads.
  std::uint64_t workerReports() const noexcept { return read(workerReports_); }
  std::uint64_t poolReports() const noexcept { return read(poolReports_); }

 private:
  struct View {
    std::uint64_t progress = ~std::uint64_t{0};
    // Whether a look has seen the worker busy without progress; `since` and `schedstat`
    // are from the first such look (the schedstat text read just before the clock).
    bool watching = false;
    std::chrono::steady_clock::time_point since{};
    std::string schedstat;
    // The stall time at the last look (stallTime), what stalledFor reports.
    std::chrono::nanoseconds stalledFor{0};
    bool stalled = false;
    bool reported = false;
  };

  void run();
  void look();
  StallReport describe(std::size_t worker, bool native);
  void deliver(const StallReport& report) noexcept;

  const Options options_;
  const std::vector<ThreadPoolWorker*> workers_;
  const ThreadRunQueue* const solo_;
  std::vector<View> views_;    // watchdog thread only
  bool poolReported_ = false;  // watchdog thread only
  Counter workerReports_{0};   // written by the watchdog thread only
  Counter poolReports_{0};

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;
  // The watchdog thread's id, stored by the thread itself (onWatchdogThread: the
  // std::thread object may still be being assigned when the thread first runs).
  std::atomic<std::thread::id> threadId_{};
};

}  // namespace weft::detail
