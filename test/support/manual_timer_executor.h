#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "weft/executors/executor.h"
#include "weft/executors/thread_pool.h"

namespace weft::test {

// An executor that forwards everything to a ThreadPool except its timers: a timer armed
// on it (a weft::sleep, withTimeout's timer) does not fire when its deadline passes but
// when the test calls fireAll(). So a test can say "the timeout fires once the work has
// started" (or "before the value arrives") as a hand-shake rather than a race between a
// short timeout and the machine's speed.
//
// fireAll() runs the fire functions on a worker of the pool and returns once they have
// returned. A sleep's fire function resumes its coroutine right there (it is on its
// executor's thread), so by then that coroutine has run up to its next suspension: for
// withTimeout, the timer's end has been recorded and the work's token cancelled.
//
// Preconditions: every timer armed on it has fired or been cancelled (its sleep ended or
// was destroyed) before it is destroyed (else: a message and abort); fireAll() is not
// called on one of the pool's workers (it waits for one).
// Thread safety: every member may be called from any thread.
//
// Example:
//   ManualTimerExecutor timers(pool);
//   std::thread firer([&] { timers.waitUntilArmed(1); timers.fireAll(); });
//   EXPECT_THROW(syncAwait(withTimeout(work(), 1ms).via(&timers)), TimeoutError);
class ManualTimerExecutor final : public Executor {
 public:
  explicit ManualTimerExecutor(ThreadPool& pool) : Executor("manual-timers"), pool_(pool) {}
  ~ManualTimerExecutor() override {
    std::lock_guard lock(mutex_);
    if (!armed_.empty()) {
      std::fprintf(stderr, "ManualTimerExecutor destroyed with %zu timer(s) armed\n", armed_.size());
      std::abort();
    }
  }

  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override { pool_.schedule(h); }
  bool currentThreadInExecutor() const noexcept override { return pool_.currentThreadInExecutor(); }

  void scheduleTimer(TimerEntry& timer) override {
    std::lock_guard lock(mutex_);
    armed_.emplace_back(&timer, nextSequence_++);
    changed_.notify_all();
  }
  // True while the timer is armed here: fireAll() takes each entry out under the lock
  // just before it runs the fire function, so there is no "fired but not started" state.
  bool cancelTimer(TimerEntry& timer) noexcept override {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(armed_.begin(), armed_.end(),
                           [&](const auto& armed) { return armed.first == &timer; });
    if (it == armed_.end()) return false;
    armed_.erase(it);
    changed_.notify_all();
    return true;
  }

  // The number of timers armed and neither fired nor cancelled.
  std::size_t armed() const {
    std::lock_guard lock(mutex_);
    return armed_.size();
  }

  // Waits until at least `count` timers are armed; false after a minute (a hang).
  [[nodiscard]] bool waitUntilArmed(std::size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::minutes(1), [&] { return armed_.size() >= count; });
  }

  // Fires every timer armed now (not those their fire functions arm), in arming order,
  // on a worker of the pool; returns once every fire function has returned.
  void fireAll() {
    std::uint64_t limit;
    {
      std::lock_guard lock(mutex_);
      limit = nextSequence_;
    }
    std::atomic<bool> done{false};
    pool_.schedule([this, limit, &done] {
      for (;;) {
        TimerEntry* timer = nullptr;
        {
          std::lock_guard lock(mutex_);
          auto it = std::find_if(armed_.begin(), armed_.end(),
                                 [&](const auto& armed) { return armed.second < limit; });
          if (it == armed_.end()) break;
          timer = it->first;
          armed_.erase(it);
          changed_.notify_all();
        }
        timer->complete(timer, true);
      }
      done.store(true);
      done.notify_all();
    });
    done.wait(false);
  }

 private:
  void scheduleJob(Job* job) override {
    try {
      pool_.schedule([job] { job->complete(job, true); });
    } catch (...) {
      job->complete(job, false);
      throw;
    }
  }

  ThreadPool& pool_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<TimerEntry*, std::uint64_t>> armed_;  // guarded by mutex_
  std::uint64_t nextSequence_ = 0;                            // guarded by mutex_
};

}  // namespace weft::test
