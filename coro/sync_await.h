#pragma once

#include <atomic>
#include <concepts>
#include <condition_variable>
#include <coroutine>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/await_result.h"
#include "weft/coro/detail/await_in_lazy.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/take_result.h"
#include "weft/coro/detail/task_registry.h"
#include "weft/coro/lazy.h"
#include "weft/coro/task.h"
#include "weft/executors/executor.h"

namespace weft {

// Thrown by syncAwait when called on a thread of the executor it would wait on: the
// thread would block waiting for work that needs that very thread.
class SyncAwaitDeadlock : public std::logic_error {
 public:
  explicit SyncAwaitDeadlock(std::string_view executorName)
      : std::logic_error("weft: syncAwait called on a thread of executor '" +
                         std::string(executorName) +
                         "', which it waits on; this would deadlock (co_await instead)") {}
};

namespace detail {

// Blocks a thread until a Lazy finishes. The finishing thread touches the sink only as
// long as the waiter may still be looking at it: on the fast path (already finished
// when the waiter checks) it only stores `kDone`; when the waiter sleeps, the wake-up
// happens under the mutex, which the waiter must reacquire before it returns.
class SyncWaitSink final : public CompletionSink {
 public:
  // Sets `root`'s completion sink to this one and lists the task in task dumps while the
  // waiter waits.
  explicit SyncWaitSink(LazyPromiseBase& root) noexcept
      : CompletionSink(&SyncWaitSink::complete, "syncAwait") {
    root.setCompletionSink(this);
    registerRootTask(root, record_);
  }
  SyncWaitSink(const SyncWaitSink&) = delete;
  SyncWaitSink& operator=(const SyncWaitSink&) = delete;
  // Before the root's frame is destroyed (syncAwait's Lazy outlives its sink).
  ~SyncWaitSink() { unregisterEndedRootTask(record_); }

  // Starts the task (`root`, whose sink this is) on the calling thread. noexcept: see
  // runRootTask.
  template <class Promise>
  void run(std::coroutine_handle<Promise> root) noexcept {
    runRootTask(root, record_);
  }

  void wait() {
    // acquire: pairs with the release in complete(), so the result stored in the frame
    // before completion is visible here.
    if (state_.load(std::memory_order_acquire) == kDone) return;
    std::unique_lock lock(mutex_);
    if (state_.exchange(kWaiting, std::memory_order_acq_rel) == kDone) return;
    woken_.wait(lock, [this] { return wakeUp_; });
  }

 private:
  static constexpr int kRunning = 0, kWaiting = 1, kDone = 2;

  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<SyncWaitSink*>(sink);
#if WEFT_TASK_TRACKING
    // The task ends its run here (it is unregistered later, by the waiter). For stall
    // reports (running_root.h).
    endRootRun();
#endif
    // acq_rel: release publishes the result; acquire orders the wake-up below after the
    // waiter's registration.
    if (self->state_.exchange(kDone, std::memory_order_acq_rel) == kWaiting) {
      std::lock_guard lock(self->mutex_);
      self->wakeUp_ = true;
      self->woken_.notify_one();
    }
    return std::noop_coroutine();
  }

  std::atomic<int> state_{kRunning};
  std::mutex mutex_;
  std::condition_variable woken_;
  bool wakeUp_ = false;
  [[no_unique_address]] RootTaskRecord record_;  // the root task's, for task dumps
};

// An awaitable that can complete only by running on an executor's threads names it
// with `Executor* syncAwaitExecutor() const noexcept` (nullptr: none); stackful's
// FiberFuture does. syncAwait refuses to block one of those threads on it.
template <class A>
concept NamesSyncAwaitExecutor = requires(const std::remove_cvref_t<A>& a) {
  { a.syncAwaitExecutor() } -> std::convertible_to<Executor*>;
};

}  // namespace detail

// syncAwait(x): blocks the calling thread until `x` completes; returns its value or
// rethrows its exception.
//
// `x` may be a Lazy (it runs on the calling thread until it first suspends, then
// wherever it is resumed), a Task (it runs on its executor), or any C++20 awaitable.
// `syncAwait(lazy, executor)` is `syncAwait(std::move(lazy).via(executor))`; any other
// awaitable given with an executor is awaited in a Lazy bound to it
// (`syncAwait(stream.writeAll(bytes), &pool)`).
//
// Preconditions: not called from a thread of the executor it waits on.
// Errors: rethrows what the awaited work threw. Throws SyncAwaitDeadlock if called on a
// thread of the Task's executor (or of the executor an awaitable names with
// syncAwaitExecutor(), such as a FiberFuture's fiber), and ExecutorShutDown if that
// executor is shut down. Awaiting an empty Lazy or Task prints a message and aborts.
// Thread safety: any thread that is not one of the awaited executor's may call it.
//
// Example:
//   weft::ThreadPool pool(2);
//   int v = weft::syncAwait(compute(), &pool);
//   weft::syncAwait(doWork());
template <class T>
T syncAwait(Lazy<T> lazy) {
  auto handle = detail::LazyAccess::handle(lazy);
  if (!handle) detail::abortInvalidLazy("syncAwait");
  detail::SyncWaitSink sink(handle.promise());
  sink.run(handle);
  sink.wait();
  return detail::takeResult(handle.promise());
}

template <class T>
T syncAwait(Task<T> task) {
  if (!task.valid()) detail::abortInvalidLazy("syncAwait");
  Executor* executor = task.executor();
  if (executor->currentThreadInExecutor()) throw SyncAwaitDeadlock(executor->name());
  // Awaited from a coroutine with no executor, the task starts by being scheduled on its
  // own executor (we are not on one of its threads).
  return syncAwait(detail::awaitInLazy<T>(std::move(task)));
}

template <class T>
T syncAwait(Lazy<T> lazy, Executor* executor) {
  return syncAwait(std::move(lazy).via(executor));
}

template <class A>
  requires(!detail::kIsLazy<std::remove_cvref_t<A>> && !detail::kIsTask<std::remove_cvref_t<A>>)
AwaitResult<A> syncAwait(A&& awaitable) {
  if constexpr (detail::NamesSyncAwaitExecutor<A>) {
    Executor* executor = awaitable.syncAwaitExecutor();
    // Thrown whether or not the work has finished yet, as for a Task: the answer must not
    // depend on a race. The awaitable is left untouched.
    if (executor != nullptr && executor->currentThreadInExecutor()) {
      throw SyncAwaitDeadlock(executor->name());
    }
  }
  return syncAwait(detail::awaitInLazy<detail::AwaitResult<A>, A>(std::forward<A>(awaitable)));
}

template <class A>
  requires(!detail::kIsLazy<std::remove_cvref_t<A>> && !detail::kIsTask<std::remove_cvref_t<A>>)
AwaitResult<A> syncAwait(A&& awaitable, Executor* executor) {
  return syncAwait(
      detail::awaitInLazy<detail::AwaitResult<A>, A>(std::forward<A>(awaitable)).via(executor));
}

}  // namespace weft
