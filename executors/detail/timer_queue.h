#pragma once

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
#include "weft/executors/timer_entry.h"

namespace weft::detail {

using weft::TimerEntry;

// A deadline-ordered set of TimerEntries served by one thread of its own, started by the
// first add() of an entry with a deadline (a queue that is never used, or holds only
// entries that never expire, deadline time_point::max(), costs no thread).
//
// Why one timer thread (rather than per-worker timer heaps): a fired timer must be noticed
// on time even when every worker is busy in a long task, and a dedicated thread sleeping
// in a condition variable until the earliest deadline does that with no polling and no
// cost for pools that never use timers. What it does when a timer expires is tiny
// (`deliver`: ThreadPool queues the entry on a priority list its workers check before
// their own queues), so one thread serves many timers without adding lateness.
//
// The heap is a binary heap of entry pointers (each entry knows its index, so cancel
// removes it in O(log n) at once, freeing nothing but its slot). Equal deadlines fire in
// arming order.
//
// Thread safety: every member may be called from any thread, including from `deliver`
// (which runs without the lock) and from the timer thread.
class TimerQueue {
 public:
  // Called on the timer thread (or by stop()) for each entry that expired (or that stop()
  // flushes, with `shutDown` set), without the queue's lock held. noexcept: it runs on
  // the timer thread, where an exception would have nowhere to go.
  using Deliver = void (*)(void* context, TimerEntry& entry) noexcept;

  // `threadName`: the timer thread's name (truncated to 15 characters on Linux).
  TimerQueue(std::string threadName, Deliver deliver, void* context);
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

  // Refuses every later add(), stops and joins the thread. With `deliverPending`, every
  // entry still armed is then delivered, with `shutDown` set, on the calling thread;
  // otherwise they are dropped (with `dropped` set). Idempotent; concurrent calls all
  // return after the thread has stopped (called from code running on the timer thread
  // itself, it returns at once and the thread ends when that code returns).
  // noexcept: see ThreadPool's noexcept notes; only a system error on the mutex could
  // fail here.
  void stop(bool deliverPending) noexcept;

  // The number of armed entries (for tests and diagnostics).
  std::size_t size() const;
  // Whether the timer thread has been started (for tests: unused queues start none).
  bool threadStarted() const;

 private:
  void run();
  bool earlier(const TimerEntry* a, const TimerEntry* b) const noexcept;
  void siftUp(std::size_t index) noexcept;
  void siftDown(std::size_t index) noexcept;
  void place(std::size_t index, TimerEntry* entry) noexcept;
  void removeAt(std::size_t index) noexcept;

  const std::string threadName_;
  const Deliver deliver_;
  void* const context_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<TimerEntry*> heap_;   // guarded by mutex_
  std::uint64_t nextSequence_ = 0;  // guarded by mutex_
  // The deadline the thread waits for (max(): none, it waits for a notification), or
  // min() while it is not waiting (it looks at the heap before it waits again). add()
  // notifies only for an earlier deadline. Guarded by mutex_.
  TimerEntry::Clock::time_point waitingUntil_ = TimerEntry::Clock::time_point::min();
  bool stopped_ = false;            // guarded by mutex_
  std::thread thread_;              // started under mutex_; joined by stop()
  std::mutex stopMutex_;            // serialises stop() calls
  bool joined_ = false;             // guarded by stopMutex_
};

// The process-wide timer queue behind Executor's default timers and sleeps in coroutines
// without an executor. Its thread ("weft-timer") starts with the first timer; it delivers
// by running the entry's complete function on the timer thread. At process exit it is
// stopped (pending timers are dropped: their coroutines never resume), and later add()s
// are refused. The queue itself is never destroyed, so late users never touch a dead
// object.
TimerQueue& globalTimerQueue();

}  // namespace weft::detail
