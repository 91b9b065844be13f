#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/await_in_lazy.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/one_shot.h"
#include "weft/coro/detail/task_registry.h"
#include "weft/coro/lazy.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft {

template <class T>
class JoinHandle;

namespace detail {

struct JoinHandleAccess;

// What a spawned task and its JoinHandle share: the one-shot result (coro/detail/one_shot.h),
// the task's cancellation source, and what runs it. Freed by whichever side is done with it
// last.
template <class T>
class SpawnedTask final : public OneShotResult<T, SpawnedTask<T>> {
 public:
  static constexpr const char* kHandleName = "JoinHandle";
  static constexpr const char* kAwaitName = "co_await of a JoinHandle";
  static constexpr const char* kClaimedBy = "the task's end";

  explicit SpawnedTask(std::coroutine_handle<LazyPromise<T>> handle)
      : OneShotResult<T, SpawnedTask>(&SpawnedTask::complete, "spawn()"),
        handle_(handle),
        token_(source_.token()) {}

  std::coroutine_handle<LazyPromise<T>> handle_;  // until the task completes
  CancellationSource source_;
  const CancellationToken token_;  // the task's promise points here
  [[no_unique_address]] RootTaskRecord record_;  // the task's, for task dumps
  [[no_unique_address]] RootTaskJob start_;      // what starts it on another thread

  // Done and detached: nobody will see the result, so a failure would be lost silently;
  // it is reported, as one escaping a detached fiber or a std::thread is. The
  // OperationCancelled of a task that was cancelled is its expected end, not a failure.
  void onLostResult() noexcept {
    if (this->result_.hasException() && !source_.isCancellationRequested()) {
      abortOnLostException(
          "a spawned task whose JoinHandle was dropped ended with an exception nobody awaited",
          this->result_.exception());
    }
  }

 private:
  // noexcept: runs inside the task's final suspend.
  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<SpawnedTask*>(sink);
    unregisterRootTask(self->record_);  // registered since spawn()
    self->result_ = std::move(self->handle_.promise().result_);
    std::exchange(self->handle_, nullptr).destroy();
    return self->publish();  // may free the state
  }
};

}  // namespace detail

// JoinHandle<T>: a task started by weft::spawn; await it (once) for its result.
//
// Semantics: `co_await std::move(handle)` waits for the task and returns its value or
// rethrows its exception; the awaiting coroutine resumes on its own executor. Awaiting is
// cancellation-aware: cancelling the awaiter cancels the task, and the await still waits
// for it to end (it is never abandoned), then returns what it ended with. cancel()
// requests the task's cancellation at any time, awaited or not. Dropping the handle
// unawaited detaches the task: it runs to its end, and a failure it ends with (other than
// the OperationCancelled of a cancelled task) is reported on stderr and aborts.
//
// Preconditions: awaited at most once; awaiting an empty (moved-from, awaited or detached)
// handle prints a message and aborts.
// Errors: the task's exception, rethrown by the await.
// Thread safety: a single-owner value; cancel() may race with the task's end; the task
// may finish on any thread.
template <class T>
class [[nodiscard]] JoinHandle {
 public:
  using ValueType = T;

  JoinHandle(JoinHandle&& other) noexcept
      : state_(std::move(other.state_)), executor_(std::exchange(other.executor_, nullptr)) {}
  JoinHandle& operator=(JoinHandle&& other) noexcept {
    if (this != &other) {
      state_ = std::move(other.state_);
      executor_ = std::exchange(other.executor_, nullptr);
    }
    return *this;
  }
  ~JoinHandle() = default;

  bool valid() const noexcept { return state_.valid(); }
  // True once the task has finished. noexcept: one atomic load.
  bool ready() const noexcept { return state_.ready(); }
  // Requests the task's cancellation (its cancellable awaits throw OperationCancelled).
  // No effect on an empty handle or a finished task. noexcept.
  void cancel() noexcept {
    if (state_.valid()) state_.get()->source_.requestCancellation();
  }
  // Lets the task run on without anyone waiting (what the destructor does).
  void detach() && { state_.reset(); }

  // The one-shot await (coro/detail/one_shot.h), made cancellation-aware.
  class Awaiter : public detail::OneShotAwaiter<detail::SpawnedTask<T>> {
    using Base = detail::OneShotAwaiter<detail::SpawnedTask<T>>;

    friend class JoinHandle;  // makes it: the constructor is not API
    Awaiter(detail::SpawnedTask<T>* state, Executor* executor,
            const CancellationToken* token) noexcept
        : Base(state, executor), token_(token) {}

   public:
    Awaiter(Awaiter&& other) noexcept : Base(std::move(other)), token_(other.token_) {}
    Awaiter& operator=(Awaiter&&) = delete;
    // The cancellation callback goes first (a member), then the base withdraws or frees.
    ~Awaiter() = default;

    bool await_suspend(std::coroutine_handle<> awaiting) {
      // The awaiter's cancellation becomes the task's; registered first (it only
      // requests, it never resumes us).
      if (token_ != nullptr && token_->canBeCancelled()) {
        onCancel_.emplace(*token_,
                          [state = this->state()] { state->source_.requestCancellation(); });
      }
      return Base::await_suspend(awaiting);
    }
    T await_resume() {
      onCancel_.reset();
      return Base::await_resume();
    }

   private:
    const CancellationToken* token_;
    std::optional<CancellationCallback> onCancel_;
  };

  // Used by weft coroutines' await_transform and fibers' await().
  Awaiter coAwait(Executor* executor, const CancellationToken& token) && noexcept {
    return Awaiter(state_.takeForAwait(), executor, &token);
  }
  // For other coroutines: resumes on the thread that finishes the task.
  Awaiter operator co_await() && noexcept {
    return Awaiter(state_.takeForAwait(), nullptr, nullptr);
  }
  void operator co_await() & = delete;

  // The task's executor: syncAwait refuses to block one of its threads on the handle.
  Executor* syncAwaitExecutor() const noexcept { return executor_; }

 private:
  friend struct detail::JoinHandleAccess;

  JoinHandle(detail::SpawnedTask<T>* state, Executor* executor) noexcept
      : state_(state), executor_(executor) {}

  detail::OneShotRef<detail::SpawnedTask<T>> state_;
  Executor* executor_ = nullptr;
};

namespace detail {
struct JoinHandleAccess {
  template <class T>
  static JoinHandle<T> make(SpawnedTask<T>* state, Executor* executor) noexcept {
    return JoinHandle<T>(state, executor);
  }
};
}  // namespace detail

// spawn(executor, work): starts `work` now on `executor` and returns a JoinHandle to
// await its result later (tokio's spawn, Go's go with a result). `work` is a Lazy (run on
// `executor`), a Task (run on its own executor) or any awaitable (a Lazy awaiting it runs
// on `executor`: weft::inFiber for a fiber).
//
// Semantics: the task runs concurrently with the caller: inline until its first suspension
// when called on one of the executor's threads, else scheduled there. It carries a token
// of its own: JoinHandle::cancel(), or cancelling the coroutine that awaits the handle,
// cancels it. For many tasks joined together, TaskGroup is the structured alternative.
//
// Preconditions: `executor` is not null (else std::invalid_argument); a Lazy/Task is valid
// (else a message and abort). What `work` refers to outlives the task: an awaitable that
// borrows its argument (`channel.send(value)` borrows `value`) must not borrow a temporary
// of the spawning statement; put such an await in a Lazy that owns its data.
// Errors: ExecutorShutDown if the executor refuses the task (nothing ran); std::bad_alloc.
// Thread safety: may be called from any thread.
//
// Example:
//   weft::JoinHandle<Reply> reply = weft::spawn(co_await weft::currentExecutor(), call(a));
//   Other other = co_await callOther(b);  // meanwhile
//   Reply r = co_await std::move(reply);
template <class W>
auto spawn(Executor* executor, W&& work) {
  using Work = std::remove_cvref_t<W>;
  if (executor == nullptr) throw std::invalid_argument("weft: spawn needs an executor");
  auto task = [&] {
    if constexpr (detail::kIsLazy<Work>) {
      if (!work.valid()) detail::abortInvalidLazy("spawn");
      return Work(std::forward<W>(work)).via(executor);
    } else if constexpr (detail::kIsTask<Work>) {
      if (!work.valid()) detail::abortInvalidLazy("spawn");
      return Work(std::forward<W>(work));
    } else {
      return detail::asLazy(std::forward<W>(work)).via(executor);
    }
  }();
  using T = typename decltype(task)::ValueType;
  Lazy<T>& lazy = detail::LazyAccess::lazyOf(task);
  auto handle = detail::LazyAccess::handle(lazy);
  Executor* taskExecutor = handle.promise().executor();
  auto* state = new detail::SpawnedTask<T>(handle);
  handle.promise().setCancellationToken(&state->token_);
  handle.promise().setCompletionSink(state);
  detail::registerRootTask(handle.promise(), state->record_);
  if (taskExecutor->currentThreadInExecutor()) {
    detail::LazyAccess::release(lazy);
    detail::runRootTask(handle, state->record_);  // may finish it: the state records that
  } else {
    try {
      detail::scheduleRootTask(taskExecutor, handle, state->record_, state->start_);
    } catch (...) {
      // Never ran, so never listed: nothing to unregister (task_registry.h).
      delete state;  // not started: the task still owns (and frees) the frame
      throw;
    }
    detail::LazyAccess::release(lazy);
  }
  return detail::JoinHandleAccess::make(state, taskExecutor);
}

}  // namespace weft
