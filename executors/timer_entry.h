#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "weft/executors/work_item.h"

namespace weft {

// TimerEntry: one armed timer, what Executor::scheduleTimer/cancelTimer take. Intrusive,
// owned by whoever armed it (typically a sleep awaiter in a suspended coroutine frame),
// so arming allocates nothing per timer.
//
// It is a Job so that an executor can queue a fired timer like any other work item:
// `complete(this, true)` is the timer's "fire" function. It runs exactly once per
// arming, unless the timer is cancelled first (cancel returned true); `shutDown` is set
// before it runs when the timer did not expire but its executor stopped its timers.
// `complete(this, false)` (an executor refusing the job) must be treated like a fire with
// `shutDown` set. The owner must keep the entry alive until it fired or was cancelled.
struct TimerEntry : Job {
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kNotQueued = std::numeric_limits<std::size_t>::max();

  Clock::time_point deadline{};
  bool shutDown = false;
  // Set by TimerQueue::stop(false), under the queue's lock, when it drops the entry: it
  // will never fire. Its owner (a sleep destroyed after the process-wide queue stopped at
  // exit, say) may read it once cancel() has returned false, to tell "dropped" from
  // "fired".
  bool dropped = false;
  // Owned by the heap that holds the entry (TimerQueue's, or a ThreadPool worker's),
  // guarded by that heap's mutex.
  std::size_t heapIndex = kNotQueued;
  std::uint64_t sequence = 0;
  // The executor's note of which of its heaps the entry was armed in (ThreadPool: the
  // worker whose heap holds it, or nullptr for its timer thread's), so that cancelTimer
  // finds it. Written by scheduleTimer before the entry can fire; not for the owner.
  void* holder = nullptr;
};

}  // namespace weft
