#pragma once

#include <coroutine>
#include <cstdio>
#include <cstdlib>

#include "weft/coro/awaitable_support.h"
#include "weft/executors/executor.h"

// What TaskGroup<T> (coro/task_group.h) keeps of a coroutine waiting in join() or next(),
// and how it reports misuse.

namespace weft {

namespace detail {

// A coroutine waiting in join() or next(): resumed when the group has what it waits for.
struct TaskGroupWaiter {
  std::coroutine_handle<> handle;
  Executor* executor = nullptr;
  bool cancelled = false;  // next() only: its token fired before it was served
};

[[noreturn]] inline void abortTaskGroupMisuse(const char* message) noexcept {
  std::fprintf(stderr, "weft: %s\n", message);
  std::abort();
}

// Resumes a waiter taken out of the group's lists: on its executor, else inline.
inline void resumeTaskGroupWaiter(TaskGroupWaiter* waiter) noexcept {
  resumeWaiterOn(waiter->executor, waiter->handle);
}

}  // namespace detail

}  // namespace weft
