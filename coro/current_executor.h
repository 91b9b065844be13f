#pragma once

#include <coroutine>

#include "weft/executors/executor.h"

namespace weft {

namespace detail {
struct CurrentExecutorAwaiter {
  Executor* executor;
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  Executor* await_resume() const noexcept { return executor; }
};
struct CurrentExecutorAwaitable {
  CurrentExecutorAwaiter coAwait(Executor* executor) const noexcept { return {executor}; }
  // Outside a weft coroutine there is no executor.
  CurrentExecutorAwaiter operator co_await() const noexcept { return {nullptr}; }
};
}  // namespace detail

// What currentExecutor() returns: an awaitable that resumes with an Executor*.
using CurrentExecutorOperation = detail::CurrentExecutorAwaitable;

// `co_await currentExecutor()`: the executor the current Lazy/Task is bound to, or
// nullptr for a Lazy that is not running inside a Task. Never suspends.
//
// Errors: none. Thread safety: reads the coroutine's own state.
//
// Example:
//   weft::Executor* ex = co_await weft::currentExecutor();
//   if (ex != nullptr) ex->schedule([] { /* ... */ });
inline CurrentExecutorOperation currentExecutor() noexcept { return {}; }

}  // namespace weft
