#pragma once

#include <atomic>
#include <coroutine>
#include <mutex>
#include <vector>

namespace weft::test {

// An awaitable that parks every coroutine awaiting it until release() resumes them (on
// the thread that calls release()). It knows nothing of executors: to weft it is a
// "foreign" awaitable, like a third-party library's.
class ManualEvent {
 public:
  bool await_ready() const noexcept { return released_.load(std::memory_order_acquire); }
  bool await_suspend(std::coroutine_handle<> waiter) {
    std::lock_guard lock(mutex_);
    if (released_.load(std::memory_order_relaxed)) return false;
    waiters_.push_back(waiter);
    return true;
  }
  void await_resume() const noexcept {}

  // Resumes every parked coroutine on the calling thread; later awaits do not suspend.
  void release() {
    std::vector<std::coroutine_handle<>> waiters;
    {
      std::lock_guard lock(mutex_);
      released_.store(true, std::memory_order_release);
      waiters.swap(waiters_);
    }
    for (auto waiter : waiters) waiter.resume();
  }

  std::size_t waiting() const {
    std::lock_guard lock(mutex_);
    return waiters_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> released_{false};
  std::vector<std::coroutine_handle<>> waiters_;
};

}  // namespace weft::test
