#pragma once

#include <atomic>
#include <coroutine>

#include "weft/executors/detail/job.h"
#include "weft/executors/detail/timer_queue.h"
#include "weft/executors/executor.h"
#include "weft/executors/thread_pool.h"

namespace weft::test {

// An executor that forwards everything to a ThreadPool and counts timer traffic: how many
// timers were armed, and how many cancelTimer calls removed one (or found it fired).
// Lets a test cancel a sleep that is known to be armed, and check that a finished or
// cancelled sleep left the timer heap.
class TimerProbeExecutor final : public Executor {
 public:
  explicit TimerProbeExecutor(ThreadPool& pool) : Executor("probe"), pool_(pool) {}

  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override { pool_.schedule(h); }
  bool currentThreadInExecutor() const noexcept override { return pool_.currentThreadInExecutor(); }
  void scheduleTimer(detail::TimerEntry& timer) override {
    pool_.scheduleTimer(timer);
    armed.fetch_add(1);
  }
  bool cancelTimer(detail::TimerEntry& timer) noexcept override {
    const bool removed = pool_.cancelTimer(timer);
    (removed ? disarmed : disarmFailed).fetch_add(1);
    return removed;
  }

  std::atomic<int> armed{0};
  std::atomic<int> disarmed{0};
  std::atomic<int> disarmFailed{0};

 private:
  void scheduleJob(detail::Job* job) override {
    pool_.schedule([job] { job->complete(job, true); });
  }
  ThreadPool& pool_;
};

}  // namespace weft::test
