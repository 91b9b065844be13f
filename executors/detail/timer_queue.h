#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/executors/detail/job.h"
#include "weft/executors/detail/timer_heap.h"
#include "weft/executors/detail/worker_counters.h"
#include "weft/executors/timer_entry.h"

namespace weft::detail {

using weft::TimerEntry;

// A deadline-ordered set of TimerEntries served by one thread of its own, started by the
// first add() of an entry with a deadline, or by the first pollBy() (a queue that is never
// used, or holds only entries that never expire, deadline time_point::max(), costs no
// thread).
//
// What it is for: the timers that no event loop owns. ThreadPool arms a timer in the heap
// of the worker that arms it (the worker fires it itself: no thread hop); this queue holds
// the timers armed from outside the pool and the guards that never expire, and its thread
// is the pool's backstop for busy workers: the optional `poll` function, which the thread
// runs when asked (pollBy) and when poll itself asked to be run again, takes the timers of
// a worker that is stuck in a long item (executors/thread_pool_timers.cc, "Timers"). The
// process-wide queue (globalTimerQueue) serves sleeps without an executor and executors
// that keep the default timers.
//
// The thread sleeps in a condition variable until the earliest deadline (or poll time),
// with 1 ns of timer slack. What it does when a timer expires is tiny (`deliver`:
// ThreadPool queues the entry on a priority list its workers check before their own
// queues), so one thread serves many timers without adding lateness. Entries are kept in
// a TimerHeap: cancel removes one in O(log n) at once; equal deadlines fire in arming
// order.
//
// Thread safety: every member may be called from any thread, including from `deliver` and
// `poll` (which run without the lock) and from the timer thread.
class TimerQueue {
 public:
  using Clock = TimerEntry::Clock;

  // Called on the timer thread (or by stop()) for each entry that expired (or that stop()
  // flushes, with `shutDown` set), without the queue's lock held. noexcept: it runs on
  // the timer thread, where an exception would have nowhere to go.
  using Deliver = void (*)(void* context, TimerEntry& entry) noexcept;
  // Called on the timer thread, without the queue's lock held, at or after the time last
  // asked for (by pollBy, or by poll's own result); `now` is the clock read just before.
  // Returns when it wants to run again (time_point::max(): only when pollBy asks).
  // noexcept: as Deliver.
  using Poll = Clock::time_point (*)(void* context, Clock::time_point now) noexcept;

  // `threadName`: the timer thread's name (truncated to 15 characters on Linux). `poll`
  // may be null (the queue then never polls; pollBy must not be called).
  TimerQueue(std::string threadName, Deliver deliver, void* context, Poll poll = nullptr);
  // Stops the thread. Entries still armed are dropped without being delivered (stop(true)
  // first to deliver them).
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // Arms `entry` (its deadline and complete function set by the caller); starts the
  // thread unless it runs or the deadline is time_point::max(). Returns false,
  // arming nothing, once the queue is stopped. Throws std::bad_alloc (heap growth) or
  // std::system_error (starting the thread); nothing is armed then.
  bool add(TimerEntry& entry);

  // Disarms `entry`: true if it was armed and has not been delivered (it never will be);
  // false if it was already handed to `deliver`, dropped by stop(false) (then
  // entry.dropped is set), or never armed. noexcept: a heap removal, no allocation.
  bool cancel(TimerEntry& entry) noexcept;

  // Makes sure that `poll` runs at `when` or earlier (starting the thread if it has not
  // started). Nothing once the queue is stopped.
  // Ordering: a caller that stored, with a seq_cst store, something that poll reads with
  // seq_cst loads, and then calls pollBy(when), is seen by a poll that runs no later than
  // `when` (the fast path is one seq_cst load of the time of the next poll; see run()).
  // Errors: std::system_error if the thread cannot be started (nothing changed then).
  void pollBy(Clock::time_point when);

  // Refuses every later add(), stops and joins the thread. With `deliverPending`, every
  // entry still armed is then delivered, with `shutDown` set, on the calling thread;
  // otherwise they are dropped (with `dropped` set). Idempotent; concurrent calls all
  // return after the thread has stopped (called from code running on the timer thread
  // itself, it returns at once and the thread ends when that code returns). poll never
  // runs once stop() has returned.
  // noexcept: see ThreadPool's noexcept notes; only a system error on the mutex could
  // fail here.
  void stop(bool deliverPending) noexcept;

  // The number of armed entries (for tests and diagnostics).
  std::size_t size() const;
  // Since the queue was made: the entries add() armed, and those cancel() disarmed (for
  // metrics: ThreadPool's timer thread). noexcept: relaxed loads, no lock.
  std::uint64_t armedCount() const noexcept { return read(armed_); }
  std::uint64_t cancelledCount() const noexcept { return read(cancelled_); }
  // Whether the timer thread has been started (for tests: unused queues start none).
  bool threadStarted() const;

 private:
  void run();
  // Starts the thread unless it runs. Requires mutex_ held. Throws std::system_error.
  void startThreadLocked();

  const std::string threadName_;
  const Deliver deliver_;
  void* const context_;
  const Poll poll_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  TimerHeap heap_;  // guarded by mutex_
  // The time the thread waits for (max(): none, it waits for a notification), or min()
  // while it is not waiting (it looks at the heap and the poll time before it waits
  // again). add() and pollBy() notify only for an earlier time. Guarded by mutex_.
  Clock::time_point waitingUntil_ = Clock::time_point::min();
  // When poll runs next (max(): when asked). Guarded by mutex_.
  Clock::time_point nextPoll_ = Clock::time_point::max();
  // True while poll runs (without the lock). Guarded by mutex_.
  bool polling_ = false;
  // nextPoll_, readable without the lock (pollBy's fast path): max() while poll runs, while
  // none is planned and before the thread has started (every pollBy then takes the lock).
  std::atomic<Clock::rep> pollAt_{std::numeric_limits<Clock::rep>::max()};
  bool stopped_ = false;            // guarded by mutex_
  std::thread thread_;              // started under mutex_; joined by stop()
  std::mutex stopMutex_;            // serialises stop() calls
  bool joined_ = false;             // guarded by stopMutex_
  // armedCount() and cancelledCount(): written under mutex_, so one writer at a time.
  Counter armed_{0};
  Counter cancelled_{0};
};

// The process-wide timer queue behind Executor's default timers and sleeps in coroutines
// without an executor. Its thread ("weft-timer") starts with the first timer; it delivers
// by running the entry's complete function on the timer thread. At process exit it is
// stopped (pending timers are dropped: their coroutines never resume), and later add()s
// are refused. The queue itself is never destroyed, so late users never touch a dead
// object.
TimerQueue& globalTimerQueue();

}  // namespace weft::detail
