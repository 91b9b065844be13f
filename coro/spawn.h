#pragma once

#include <atomic>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
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

// What a spawned task and its JoinHandle share: the result, the task's cancellation
// source, and who waits. Freed by whichever side is done with it last.
template <class T>
class SpawnedTask final : public CompletionSink {
 public:
  enum : int { kRunning, kAwaiting, kDone, kDetached };

  explicit SpawnedTask(std::coroutine_handle<LazyPromise<T>> handle)
      : CompletionSink(&SpawnedTask::complete, "spawn()"),
        handle_(handle),
        token_(source_.token()) {}

  std::coroutine_handle<LazyPromise<T>> handle_;  // until the task completes
  CancellationSource source_;
  const CancellationToken token_;  // the task's promise points here
  Try<T> result_;
  [[no_unique_address]] RootTaskRecord record_;  // the task's, for task dumps
  [[no_unique_address]] RootTaskJob start_;      // what starts it on another thread
  std::coroutine_handle<> awaiter_;      // written before kRunning -> kAwaiting
  Executor* awaiterExecutor_ = nullptr;  // idem
  std::atomic<int> state_{kRunning};

  // The handle is dropped: frees the state if the task has finished, else lets it run on.
  void detach() noexcept {
    // acq_rel: acquire the result if the task finished; pairs with complete()'s exchange
    // so that exactly one side frees.
    if (state_.exchange(kDetached, std::memory_order_acq_rel) == kDone) finishDetached(this);
  }

 private:
  static void finishDetached(SpawnedTask* self) noexcept {
    // Nobody will see the result: a failure would be lost silently, so it is reported, as
    // one escaping a detached fiber or a std::thread is; the OperationCancelled of a task
    // that was cancelled is its expected end, not a failure.
    if (self->result_.hasException() && !self->source_.isCancellationRequested()) {
      abortOnLostException(
          "a spawned task whose JoinHandle was dropped ended with an exception nobody awaited",
          self->result_.exception());
    }
    delete self;
  }

  // noexcept: runs inside the task's final suspend.
  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<SpawnedTask*>(sink);
    unregisterRootTask(self->record_);  // registered since spawn()
    self->result_ = std::move(self->handle_.promise().result_);
    std::exchange(self->handle_, nullptr).destroy();
    // acq_rel: release publishes the result; acquire sees the awaiter's handle (written
    // before its kAwaiting exchange) or the detach.
    const int previous = self->state_.exchange(kDone, std::memory_order_acq_rel);
    if (previous == kAwaiting) {
      std::coroutine_handle<> awaiter = self->awaiter_;
      Executor* executor = self->awaiterExecutor_;
      if (executor == nullptr) return awaiter;
      return resumeOnExecutor(executor, awaiter);
    }
    if (previous == kDetached) finishDetached(self);
    return std::noop_coroutine();
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
      : state_(std::exchange(other.state_, nullptr)),
        executor_(std::exchange(other.executor_, nullptr)) {}
  JoinHandle& operator=(JoinHandle&& other) noexcept {
    if (this != &other) {
      release();
      state_ = std::exchange(other.state_, nullptr);
      executor_ = std::exchange(other.executor_, nullptr);
    }
    return *this;
  }
  ~JoinHandle() { release(); }

  bool valid() const noexcept { return state_ != nullptr; }
  // True once the task has finished. noexcept: one atomic load.
  bool ready() const noexcept {
    // acquire: pairs with complete(); a true answer lets the caller await without waiting.
    return state_ != nullptr &&
           state_->state_.load(std::memory_order_acquire) == detail::SpawnedTask<T>::kDone;
  }
  // Requests the task's cancellation (its cancellable awaits throw OperationCancelled).
  // No effect on an empty handle or a finished task. noexcept.
  void cancel() noexcept {
    if (state_ != nullptr) state_->source_.requestCancellation();
  }
  // Lets the task run on without anyone waiting (what the destructor does).
  void detach() && { release(); }

  class Awaiter {
    friend class JoinHandle;  // makes it: the constructor is not API
    Awaiter(detail::SpawnedTask<T>* state, Executor* executor,
            const CancellationToken* token) noexcept
        : state_(state), executor_(executor), token_(token) {}

   public:
    Awaiter(Awaiter&& other) noexcept
        : state_(std::exchange(other.state_, nullptr)),
          executor_(other.executor_),
          token_(other.token_) {}
    Awaiter& operator=(Awaiter&&) = delete;
    ~Awaiter() {
      onCancel_.reset();
      if (state_ == nullptr) return;
      if (suspended_) [[unlikely]] {
        // Destroyed while waiting: detach; if the task finished first, its completion has
        // claimed us and our resumption is under way (the caller's race).
        if (state_->state_.exchange(detail::SpawnedTask<T>::kDetached,
                                    std::memory_order_acq_rel) ==
            detail::SpawnedTask<T>::kDone) {
          weft::abortDestroyedWhileResuming("co_await of a JoinHandle", "the task's end");
        }
        return;
      }
      state_->detach();
    }

    bool await_ready() const noexcept {
      // acquire: see ready().
      return state_->state_.load(std::memory_order_acquire) == detail::SpawnedTask<T>::kDone;
    }
    bool await_suspend(std::coroutine_handle<> awaiting) {
      // The awaiter's cancellation becomes the task's; registered first (it only
      // requests, it never resumes us).
      if (token_ != nullptr && token_->canBeCancelled()) {
        onCancel_.emplace(*token_, [state = state_] { state->source_.requestCancellation(); });
      }
      state_->awaiter_ = awaiting;
      state_->awaiterExecutor_ = executor_;
      suspended_ = true;
      int expected = detail::SpawnedTask<T>::kRunning;
      // acq_rel: release publishes the handle to complete(); on failure (the task just
      // finished) acquire makes its result visible.
      if (state_->state_.compare_exchange_strong(expected, detail::SpawnedTask<T>::kAwaiting,
                                                 std::memory_order_acq_rel,
                                                 std::memory_order_acquire)) {
        return true;
      }
      suspended_ = false;
      return false;
    }
    T await_resume() {
      suspended_ = false;
      onCancel_.reset();
      detail::SpawnedTask<T>* state = std::exchange(state_, nullptr);
      struct Free {
        detail::SpawnedTask<T>* state;
        ~Free() { delete state; }
      } free{state};
      if constexpr (std::is_void_v<T>) {
        state->result_.value();
      } else {
        return std::move(state->result_).value();
      }
    }

   private:
    detail::SpawnedTask<T>* state_;
    Executor* executor_;
    const CancellationToken* token_;
    std::optional<CancellationCallback> onCancel_;
    bool suspended_ = false;
  };

  // Used by weft coroutines' await_transform and fibers' await().
  Awaiter coAwait(Executor* executor, const CancellationToken& token) && noexcept {
    if (state_ == nullptr) abortEmpty();
    return Awaiter(std::exchange(state_, nullptr), executor, &token);
  }
  // For other coroutines: resumes on the thread that finishes the task.
  Awaiter operator co_await() && noexcept {
    if (state_ == nullptr) abortEmpty();
    return Awaiter(std::exchange(state_, nullptr), nullptr, nullptr);
  }
  void operator co_await() & = delete;

  // The task's executor: syncAwait refuses to block one of its threads on the handle.
  Executor* syncAwaitExecutor() const noexcept { return executor_; }

 private:
  friend struct detail::JoinHandleAccess;

  JoinHandle(detail::SpawnedTask<T>* state, Executor* executor) noexcept
      : state_(state), executor_(executor) {}

  [[noreturn]] static void abortEmpty() noexcept {
    std::fprintf(stderr,
                 "weft: co_await on an empty JoinHandle (already awaited, detached or "
                 "moved-from; a JoinHandle is awaited once)\n");
    std::abort();
  }
  void release() noexcept {
    if (detail::SpawnedTask<T>* state = std::exchange(state_, nullptr)) state->detach();
  }

  detail::SpawnedTask<T>* state_ = nullptr;
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
