#pragma once

#include <concepts>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/take_result.h"
#include "weft/coro/lazy.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft {

namespace detail {

[[noreturn]] inline void abortNullExecutor() noexcept {
  std::fprintf(stderr, "weft: Lazy::via(nullptr): a Task needs an executor\n");
  std::abort();
}

// Starts the task's frame on its executor: inline (symmetric transfer) when the calling
// thread is already one of the executor's, otherwise by scheduling it. Throws
// ExecutorShutDown (nothing started) if the executor refuses it.
inline std::coroutine_handle<> startOnExecutor(Executor* executor,
                                               std::coroutine_handle<> frame) {
  if (executor->currentThreadInExecutor()) return frame;
  executor->schedule(frame);
  return std::noop_coroutine();
}

// The awaiter of `co_await std::move(task)` from a coroutine whose executor is
// `awaitingExecutor_` (nullptr when it has none, or is not a weft coroutine). Like
// LazyAwaiter it owns the task's frame (the Task is empty once awaited) and frees it in
// its destructor.
template <class T>
class TaskAwaiter final : public CompletionSink {
 public:
  TaskAwaiter(std::coroutine_handle<LazyPromise<T>> task, Executor* awaitingExecutor) noexcept
      : CompletionSink(&TaskAwaiter::complete),
        task_(task),
        awaitingExecutor_(awaitingExecutor) {}
  // Only before the await starts: once suspended, the task's promise points at this sink.
  TaskAwaiter(TaskAwaiter&& other) noexcept
      : CompletionSink(&TaskAwaiter::complete),
        task_(std::exchange(other.task_, nullptr)),
        awaitingExecutor_(other.awaitingExecutor_) {}
  TaskAwaiter& operator=(TaskAwaiter&&) = delete;
  ~TaskAwaiter() {
    if (task_) task_.destroy();
  }

  bool await_ready() const noexcept { return false; }

  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> awaiting) {
    LazyPromiseBase& promise = task_.promise();
    Executor* executor = promise.executor();
    traceParent_ = asyncParentOf(awaiting);  // the hop back is not shown
    if (awaitingExecutor_ == nullptr || awaitingExecutor_ == executor) {
      // The task finishes on our executor (or we have none): continue right there.
      promise.setContinuation(awaiting);
      promise.setAsyncParent(traceParent_);
    } else {
      // The task finishes on another executor: hop back to ours when it does.
      awaiting_ = awaiting;
      promise.setCompletionSink(this);
    }
    return startOnExecutor(executor, task_);
  }

  T await_resume() { return takeResult(task_.promise()); }

 private:
  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<TaskAwaiter*>(sink);
    return resumeOnExecutor(self->awaitingExecutor_, self->awaiting_);
  }

  std::coroutine_handle<LazyPromise<T>> task_;
  Executor* awaitingExecutor_;
  std::coroutine_handle<> awaiting_;
};

}  // namespace detail

// Task<T>: a Lazy<T> bound to an executor, made with `std::move(lazy).via(executor)`.
//
// A Task starts on its executor (inline when awaited from one of that executor's
// threads, else scheduled there) and, after every co_await of something that completed
// on another thread, resumes on its executor again. Lazys awaited inside it inherit the
// executor (`co_await currentExecutor()` returns it). Awaiting a Task from a coroutine
// bound to another executor brings that coroutine back to its own executor afterwards.
//
// Cancellation: a Task carries a cancellation token, which every await inside it sees
// (cancellable awaits throw OperationCancelled once it is cancelled). Awaited from a
// Lazy/Task, the task carries its awaiter's token; `withCancellation(token, lazy).via(ex)`
// (coro/with_cancellation.h) gives a task its own, for start() and syncAwait.
//
// Errors: an exception escaping the task reaches the awaiter (or start()'s callback as a
// Try). If the executor is shut down, co_await throws ExecutorShutDown before anything
// runs, and start() throws it (the callback is not called).
//
// Preconditions: awaited at most once (like a Lazy, an awaited Task is empty; awaiting,
// starting or syncAwait-ing an empty Task prints a message and aborts).
// Thread safety: a Task is a single-owner value, like Lazy.
//
// Example:
//   weft::ThreadPool pool(2);
//   weft::Task<int> t = compute().via(&pool);
//   int v = weft::syncAwait(std::move(t));
template <class T = void>
class [[nodiscard]] Task {
 public:
  using ValueType = T;
  // What coAwait() and `co_await std::move(task)` use: the awaiter that starts the task on
  // its executor and resumes the awaiter with its result.
  using Awaiter = detail::TaskAwaiter<T>;

  Task() noexcept = default;
  Task(Task&&) noexcept = default;
  Task& operator=(Task&&) noexcept = default;

  bool valid() const noexcept { return lazy_.valid(); }

  // The executor this task runs on. Precondition: valid() (else a message and abort).
  Executor* executor() const noexcept {
    if (!lazy_.valid()) detail::abortInvalidLazy("Task::executor()");
    return detail::LazyAccess::handle(lazy_).promise().executor();
  }

  // Starts the task detached on its executor; `callback(Try<T>)` runs on the thread that
  // finishes it. Throws ExecutorShutDown if the executor refuses it.
  template <class Callback>
    requires std::invocable<std::decay_t<Callback>&, Try<T>&&>
  void start(Callback&& callback) && {
    if (!lazy_.valid()) detail::abortInvalidLazy("Task::start()");
    auto handle = detail::LazyAccess::handle(lazy_);
    Executor* executor = handle.promise().executor();
    auto* sink = new detail::StartSink<T, std::decay_t<Callback>>(
        handle, std::decay_t<Callback>(std::forward<Callback>(callback)));
    sink->attach();
    if (executor->currentThreadInExecutor()) {
      detail::LazyAccess::release(lazy_);  // the sink frees the frame
      sink->runHere();
      return;
    }
    try {
      sink->scheduleOn(executor);
    } catch (...) {
      sink->abandon();  // not started: lazy_ still owns (and frees) the frame
      throw;
    }
    detail::LazyAccess::release(lazy_);
  }

  // Used by weft coroutines' await_transform and fibers' await(): `awaitingExecutor` is
  // the awaiter's executor, `token` its cancellation token, which the task carries from
  // now on (the awaiter keeps it alive until the task has finished).
  // The awaiter takes the frame: the Task is empty afterwards, and awaiting it again
  // aborts with "weft: co_await Task on an empty Lazy".
  Awaiter coAwait(Executor* awaitingExecutor, const CancellationToken& token) && noexcept {
    if (!lazy_.valid()) detail::abortInvalidLazy("co_await Task");
    auto handle = detail::LazyAccess::release(lazy_);
    handle.promise().setCancellationToken(&token);
    return Awaiter(handle, awaitingExecutor);
  }
  Awaiter coAwait(Executor* awaitingExecutor) && noexcept {
    if (!lazy_.valid()) detail::abortInvalidLazy("co_await Task");
    return Awaiter(detail::LazyAccess::release(lazy_), awaitingExecutor);
  }
  // For coroutines that are not weft's (no executor to return to).
  Awaiter operator co_await() && noexcept {
    return std::move(*this).coAwait(nullptr);
  }
  void operator co_await() & = delete;
  void operator co_await() const& = delete;

 private:
  friend class Lazy<T>;
  friend struct detail::LazyAccess;
  explicit Task(Lazy<T>&& lazy) noexcept : lazy_(std::move(lazy)) {}

  Lazy<T> lazy_;
};

template <class T>
Task<T> Lazy<T>::via(Executor* executor) && {
  if (executor == nullptr) detail::abortNullExecutor();
  if (!handle_) detail::abortInvalidLazy("via()");
  handle_.promise().setExecutor(executor);
  return Task<T>(std::move(*this));
}

}  // namespace weft
