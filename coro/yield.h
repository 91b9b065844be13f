#pragma once

#include <coroutine>

#include "executors/executor.h"

namespace weft {

namespace detail {
class YieldAwaiter {
 public:
  explicit YieldAwaiter(Executor* executor) noexcept : executor_(executor) {}
  // With no executor there is nowhere to reschedule to: continue at once.
  bool await_ready() const noexcept { return executor_ == nullptr; }
  // Throws ExecutorShutDown (the coroutine then continues with that exception).
  void await_suspend(std::coroutine_handle<> self) const { executor_->schedule(self); }
  void await_resume() const noexcept {}

 private:
  Executor* executor_;
};
struct YieldAwaitable {
  YieldAwaiter coAwait(Executor* executor) const noexcept { return YieldAwaiter(executor); }
  YieldAwaiter operator co_await() const noexcept { return YieldAwaiter(nullptr); }
};
}  // namespace detail

// `co_await yield()`: reschedules the current Lazy/Task at the back of its executor's
// queue, letting other queued work run first (on a ThreadPool, work is FIFO per worker).
// In a coroutine without an executor it does nothing.
//
// Errors: throws ExecutorShutDown from the co_await if the executor is shut down.
// Thread safety: the coroutine may continue on another thread of the same executor.
//
// Example:
//   for (auto& item : batch) {
//     process(item);
//     co_await weft::yield();
//   }
inline detail::YieldAwaitable yield() noexcept { return {}; }

}  // namespace weft
