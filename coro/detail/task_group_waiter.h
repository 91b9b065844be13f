#pragma once

#include <coroutine>

#include "weft/coro/awaitable_support.h"
#include "weft/executors/executor.h"

// What TaskGroup<T> (coro/task_group.h) keeps of a coroutine waiting in join() or next(),
// and how it is resumed.

namespace weft {

namespace detail {

// A coroutine waiting in join() or next(): resumed when the group has what it waits for.
struct TaskGroupWaiter {
  std::coroutine_handle<> handle;
  Executor* executor = nullptr;
  bool cancelled = false;  // next() only: its token fired before it was served
};

// Resumes a waiter taken out of the group's lists: on its executor, else inline.
inline void resumeTaskGroupWaiter(TaskGroupWaiter* waiter) noexcept {
  resumeWaiterOn(waiter->executor, waiter->handle);
}

}  // namespace detail

}  // namespace weft
