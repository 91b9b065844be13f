#pragma once

#include <coroutine>
#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

#include "weft/executors/detail/job.h"
#include "weft/executors/executor.h"

namespace weft::test {

// An executor that only queues: nothing runs until the test calls runAll() (or runOne())
// on some thread, which then counts as "in" the executor. Lets a test observe that work
// was scheduled rather than run inline, and control when it runs.
class ManualExecutor final : public Executor {
 public:
  ManualExecutor() : Executor("manual") {}
  ~ManualExecutor() override {
    for (detail::WorkItem item : queue_) {
      if (item.isJob()) item.job()->complete(item.job(), false);
    }
  }

  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override {
    std::lock_guard lock(mutex_);
    queue_.push_back(detail::WorkItem::fromHandle(h));
  }
  bool currentThreadInExecutor() const noexcept override { return tRunning == this; }

  std::size_t pending() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }

  // Runs the oldest queued item; false if there was none.
  bool runOne() {
    detail::WorkItem item;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) return false;
      item = queue_.front();
      queue_.pop_front();
    }
    ManualExecutor* previous = std::exchange(tRunning, this);
    item.run();
    tRunning = previous;
    return true;
  }
  // Runs queued items (including those they queue) until none is left; returns how many.
  std::size_t runAll() {
    std::size_t count = 0;
    while (runOne()) ++count;
    return count;
  }

 private:
  void scheduleJob(detail::Job* job) override {
    std::lock_guard lock(mutex_);
    queue_.push_back(detail::WorkItem::fromJob(job));
  }

  static inline thread_local ManualExecutor* tRunning = nullptr;
  mutable std::mutex mutex_;
  std::deque<detail::WorkItem> queue_;  // guarded by mutex_
};

}  // namespace weft::test
