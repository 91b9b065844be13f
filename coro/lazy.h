#pragma once

#include <concepts>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/take_result.h"
#include "weft/coro/detail/task_registry.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft {

template <class T>
class Task;

namespace detail {

// Gives weft's own algorithms (syncAwait, collectAll, Task) the frame of a Lazy.
struct LazyAccess {
  template <class T>
  static std::coroutine_handle<LazyPromise<T>> handle(const Lazy<T>& lazy) noexcept {
    return lazy.handle_;
  }
  template <class T>
  static std::coroutine_handle<LazyPromise<T>> release(Lazy<T>& lazy) noexcept {
    return std::exchange(lazy.handle_, nullptr);
  }
  // The Lazy a Task wraps (its promise holds the task's executor).
  template <class T>
  static Lazy<T>& lazyOf(Task<T>& task) noexcept {
    return task.lazy_;
  }
};

[[noreturn]] inline void abortInvalidLazy(const char* operation) noexcept {
  std::fprintf(stderr, "weft: %s on an empty Lazy (default-constructed or moved-from)\n",
               operation);
  std::abort();
}

// The awaiter of `co_await std::move(lazy)`. It owns the awaited frame: `operator
// co_await` moves the handle out of the Lazy (which is then empty, so awaiting it again
// aborts with a message instead of resuming a finished coroutine), and the awaiter's
// destructor frees the frame at the end of the co_await's full expression, which is
// exactly where the temporary Lazy of `co_await f()` freed it before. Owning it here
// rather than in the Lazy costs one store (the Lazy's null) per await; the Lazy's
// destructor then finds its handle null: no more instructions per await
// (docs/performance.md).
//
// Not movable: it is only ever initialised from a prvalue (operator co_await, getAwaiter,
// fiber await()), so the handle is never null here and the destructor needs no test.
template <class T>
class LazyAwaiter {
 public:
  explicit LazyAwaiter(std::coroutine_handle<LazyPromise<T>> handle) noexcept
      : handle_(handle) {}
  LazyAwaiter(LazyAwaiter&&) = delete;
  LazyAwaiter& operator=(LazyAwaiter&&) = delete;
  // Frees the frame: finished once the await has resumed, or suspended (or never started)
  // when the awaiting coroutine is destroyed while it waits here, which destroys the
  // awaited chain with it. Nothing published leads here: a task dump reaches a chain's
  // coroutines only upwards, from the innermost one's published wait, which is withdrawn
  // before that coroutine goes on (NotedAwaiter), or from the root, whose record is
  // released before its frame is destroyed.
  ~LazyAwaiter() { handle_.destroy(); }

  bool await_ready() const noexcept { return false; }

  // Starts the awaited Lazy by symmetric transfer; it transfers back when it finishes.
  // A Lazy awaited inside a weft coroutine inherits that coroutine's executor,
  // cancellation token and root task (whose record its own waits are published in,
  // for task dumps); it records who awaits it (for async backtraces). Where the
  // awaiting coroutine waits on it (the co_await's address) is not recorded: that would
  // cost two instructions per await (docs/design/2026-11-task-tracking-registry.md);
  // async backtraces show such a coroutine by its definition. noexcept: only stores.
  template <class Promise>
  [[gnu::always_inline]] std::coroutine_handle<> await_suspend(
      std::coroutine_handle<Promise> awaiting) noexcept {
    LazyPromiseBase& promise = handle_.promise();
    promise.setContinuation(awaiting);
    promise.setAsyncParent(asyncParentOf(awaiting));
    if constexpr (std::is_base_of_v<LazyPromiseBase, Promise>) {
      promise.setExecutor(awaiting.promise().executor());
      promise.setCancellationToken(awaiting.promise().cancellationTokenPointer());
      promise.setRootRecord(awaiting.promise().rootRecord());
    }
    return handle_;
  }

  T await_resume() { return takeResult(handle_.promise()); }

 private:
  std::coroutine_handle<LazyPromise<T>> handle_;
};

// Runs a detached Lazy's callback when it finishes, then frees the frame and itself.
template <class T, class Callback>
class StartSink final : public CompletionSink {
 public:
  StartSink(std::coroutine_handle<LazyPromise<T>> handle, Callback&& callback)
      : CompletionSink(&StartSink::complete, "start()"),
        handle_(handle),
        callback_(std::move(callback)) {}

  // Sets the root's completion sink to this one and lists the task in task dumps, until it
  // finishes (or abandon()). noexcept: stores.
  void attach() noexcept {
    handle_.promise().setCompletionSink(this);
    registerRootTask(handle_.promise(), record_);
  }
  // Starts the task on the calling thread (Lazy::start(), Task::start() on one of its
  // executor's threads). The sink may be freed before this returns. noexcept: see
  // runRootTask.
  void runHere() noexcept { runRootTask(handle_, record_); }
  // Starts the task on `executor` (Task::start() from another thread). Errors: as
  // scheduleRootTask's; the caller then abandon()s the sink.
  void scheduleOn(Executor* executor) { scheduleRootTask(executor, handle_, record_, start_); }
  // The task was never run (its executor refused it): frees the sink, not the frame.
  void abandon() noexcept {
    // Never ran, so never listed: nothing to unregister (task_registry.h).
    delete this;
  }

 private:
  // noexcept: runs inside the final suspend. A callback that throws has nobody to
  // report to, so weft says so and aborts.
  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<StartSink*>(sink);
    unregisterRootTask(self->record_);
    Try<T> result = std::move(self->handle_.promise().result_);
    self->handle_.destroy();
    Callback callback = std::move(self->callback_);
    delete self;
    try {
      callback(std::move(result));
    } catch (...) {
      std::fprintf(stderr, "weft: the callback passed to start() threw; aborting\n");
      std::abort();
    }
    return std::noop_coroutine();
  }

  std::coroutine_handle<LazyPromise<T>> handle_;
  Callback callback_;
  [[no_unique_address]] RootTaskRecord record_;  // the task's, for task dumps
  [[no_unique_address]] RootTaskJob start_;      // scheduleOn()'s
};

}  // namespace detail

// Lazy<T>: a lazily started coroutine producing a T (an object type, a reference, or
// void).
//
// Nothing runs until the Lazy is awaited (`co_await std::move(lazy)`), started
// (`std::move(lazy).start(callback)`), or waited for (`syncAwait(std::move(lazy))`). An
// awaited Lazy runs on the awaiting thread and resumes its awaiter by symmetric transfer,
// so chains of any depth use constant native stack. It resumes wherever the thing it
// awaited completed; bind it to an executor with `.via(executor)` (see Task) for
// executor affinity. Awaited inside a Task, it inherits the task's executor. Awaited
// inside any Lazy/Task, it inherits that coroutine's cancellation token (see
// coro/cancellation.h; withCancellation binds one): cancellable awaits inside it throw
// OperationCancelled once that token is cancelled.
//
// Lazy is move-only and single-shot: awaiting it consumes it (the Lazy is empty
// afterwards; awaiting it again prints a message and aborts). Destroying a Lazy that was
// never started, or that is suspended and will not be resumed by anyone, frees its frame
// and every local in it. Frames come from a thread-local recycling allocator.
//
// Errors: an exception escaping the coroutine body is stored and rethrown from the
// `co_await` (or from syncAwait; collectAll hands it over in a Try). Awaiting, starting or
// binding an empty (moved-from or default-constructed) Lazy prints a message and aborts.
//
// Thread safety: a Lazy is one value owned by one coroutine at a time; it may be
// resumed on a different thread from the one it started on.
//
// Example:
//   weft::Lazy<int> answer() { co_return 42; }
//   weft::Lazy<int> twice() { co_return 2 * co_await answer(); }
//   int v = weft::syncAwait(twice());  // 84
template <class T = void>
class [[nodiscard]] Lazy {
 public:
  using promise_type = detail::LazyPromise<T>;
  using ValueType = T;
  // What `co_await std::move(lazy)` uses: the awaiter that runs the Lazy and resumes with
  // its result.
  using Awaiter = detail::LazyAwaiter<T>;

  Lazy() noexcept = default;
  Lazy(Lazy&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Lazy& operator=(Lazy&& other) noexcept {
    if (this != &other) {
      destroy();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  // Not through destroy(): the handle dies with the Lazy, so it need not be cleared.
  ~Lazy() {
    if (handle_) handle_.destroy();
  }

  // False for a default-constructed or moved-from Lazy.
  bool valid() const noexcept { return handle_ != nullptr; }

  // Binds this Lazy to `executor`: the result starts there and resumes there after every
  // await that completes elsewhere. Precondition: `executor` is not null (else abort).
  Task<T> via(Executor* executor) &&;

  // Starts the Lazy now, on the calling thread, detached: it runs until its first
  // suspension, and `callback(Try<T>)` runs on whatever thread finishes it. The frame
  // is freed before the callback runs. The callback must not throw (weft aborts if it
  // does).
  template <class Callback>
    requires std::invocable<std::decay_t<Callback>&, Try<T>&&>
  void start(Callback&& callback) && {
    if (!handle_) detail::abortInvalidLazy("start()");
    auto* sink = new detail::StartSink<T, std::decay_t<Callback>>(
        handle_, std::decay_t<Callback>(std::forward<Callback>(callback)));
    sink->attach();
    handle_ = nullptr;  // the sink frees the frame
    sink->runHere();
  }

  // `co_await std::move(lazy)`: the awaiter takes the frame, and this Lazy is empty from
  // here on (valid() is false), so a second `co_await std::move(lazy)` aborts with
  // "weft: co_await on an empty Lazy" rather than resuming a finished coroutine.
  Awaiter operator co_await() && noexcept {
    if (!handle_) detail::abortInvalidLazy("co_await");
    return Awaiter(std::exchange(handle_, nullptr));
  }
  // A Lazy runs once: await it as an rvalue, `co_await std::move(lazy)` (awaiting an
  // lvalue is a compile error).
  void operator co_await() & = delete;
  void operator co_await() const& = delete;

 private:
  friend promise_type;
  friend struct detail::LazyAccess;

  explicit Lazy(std::coroutine_handle<promise_type> handle) noexcept : handle_(handle) {}
  void destroy() noexcept {
    if (handle_) std::exchange(handle_, nullptr).destroy();
  }

  std::coroutine_handle<promise_type> handle_;
};

namespace detail {

template <class T>
Lazy<T> LazyPromise<T>::get_return_object() noexcept {
  return Lazy<T>(std::coroutine_handle<LazyPromise<T>>::from_promise(*this));
}
template <class T>
Lazy<T&> LazyPromise<T&>::get_return_object() noexcept {
  return Lazy<T&>(std::coroutine_handle<LazyPromise<T&>>::from_promise(*this));
}
inline Lazy<void> LazyPromise<void>::get_return_object() noexcept {
  return Lazy<void>(std::coroutine_handle<LazyPromise<void>>::from_promise(*this));
}

// The precondition of the algorithms that take Lazys (collectAll, collectAny, ...):
// every branch is valid. Aborts with a message naming `algorithm` otherwise.
template <class... T>
void checkBranches(const char* algorithm, const Lazy<T>&... branches) {
  if (!(branches.valid() && ...)) abortInvalidLazy(algorithm);
}
template <class T>
void checkBranchRange(const char* algorithm, const std::vector<Lazy<T>>& branches) {
  for (const Lazy<T>& branch : branches) {
    if (!branch.valid()) abortInvalidLazy(algorithm);
  }
}

}  // namespace detail
}  // namespace weft

// Task<T> completes Lazy<T>::via(); it includes this header first.
#include "weft/coro/task.h"
