#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/await_in_lazy.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/misuse.h"
#include "weft/coro/detail/spin_lock.h"
#include "weft/coro/detail/task_group_waiter.h"
#include "weft/coro/detail/task_registry.h"
#include "weft/coro/lazy.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft {

// Options of a TaskGroup.
struct TaskGroupOptions {
  // When true, the first task that fails (ends with an exception) cancels the others, as
  // Go's errgroup.WithContext does; join() then rethrows that first failure. When false
  // (the default) the others run on and join() still rethrows the first failure.
  bool cancelOnFirstFailure = false;
  // Cancelling this token cancels the group (and so everything in it), as the group's own
  // requestCancellation() does. Typically the token of the coroutine that owns the group:
  // `options.cancellationToken = co_await weft::currentCancellationToken();`.
  CancellationToken cancellationToken{};
};

template <class T>
class TaskGroup;

// TaskGroup<T>: structured concurrency for a dynamic number of tasks (in the spirit of
// Go's errgroup, tokio's JoinSet, folly's AsyncScope and Trio's nurseries). Spawn Lazys,
// Tasks, fibers (weft::inFiber) or any awaitable producing a T into the group; they start
// at once on the group's executor and run concurrently; `co_await group.join()` waits for
// all of them. A group of T (not void) also hands its results out as they complete:
// `co_await group.next()`.
//
// Semantics:
//  - Cancellation: the group owns a cancellation source; everything spawned into it
//    carries the group's token (a Task's own token is replaced by it). requestCancellation(),
//    a failure under options.cancelOnFirstFailure, the options' parent token, or the
//    cancellation of a coroutine waiting in join() cancels the group: every cancellable
//    await inside its tasks (and inside fibers started with inFiber) throws
//    OperationCancelled. Work spawned after that starts cancelled.
//  - join() waits until no task of the group is running, then rethrows the group's first
//    failure, if any (a failure that next() handed out does not count). It is not itself
//    cancellable: cancelling the joiner cancels the group and join() goes on waiting
//    until every task has finished (nothing is abandoned), then rethrows the first
//    failure (OperationCancelled when the tasks ended by that cancellation). Results that
//    next() did not take are discarded by join(). join() may be awaited again after
//    more spawns.
//  - next() (T not void): the next result in completion order, as a Try<T> (a failure
//    is a Try holding the exception, and is then not rethrown by join()); std::nullopt
//    when no task is running and no result is waiting. Cancellable: a cancelled next()
//    throws OperationCancelled and leaves the results where they are.
//  - Lifetime: destroying a group while a task of it is running, or while a failure
//    that nobody joined is stored, prints what was lost and aborts (as a std::thread
//    that was not joined does): join it first. A group is therefore a local of the
//    coroutine that joins it.
//
// Preconditions: `executor` is not null (else std::invalid_argument); a spawned Lazy/Task
// is valid (else a message and abort). What a spawned task refers to outlives it: an
// awaitable that borrows its argument (`channel.send(value)` borrows `value`) must not
// borrow a temporary of the spawning statement; put such an await in a Lazy that owns it.
// Errors: spawn throws ExecutorShutDown if the executor refuses the task (the task did
// not run and is not counted) and std::bad_alloc; join() rethrows the first failure.
// Thread safety: spawn, requestCancellation, join and next may be called concurrently from
// any thread; tasks finish on the executor's threads.
//
// Example:
//   weft::Lazy<void> fetchAll(std::vector<Url> urls) {
//     weft::TaskGroup<Page> group(co_await weft::currentExecutor(),
//                                 {.cancelOnFirstFailure = true});
//     for (const Url& url : urls) group.spawn(fetch(url));
//     while (std::optional<weft::Try<Page>> page = co_await group.next()) store(page->value());
//     co_await group.join();
//   }
template <class T = void>
class TaskGroup {
 public:
  explicit TaskGroup(Executor* executor, TaskGroupOptions options = {})
      : executor_(checkedExecutor(executor)),
        cancelOnFirstFailure_(options.cancelOnFirstFailure),
        token_(source_.token()) {
    if (options.cancellationToken.canBeCancelled()) {
      parentLink_.emplace(options.cancellationToken,
                          [source = source_]() mutable { source.requestCancellation(); });
    }
  }
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;

  ~TaskGroup() {
    std::lock_guard guard(mutex_);
    if (running_ != 0 || !joiners_.empty() || !nextWaiters_.empty()) {
      detail::abortMisuse(
          "TaskGroup destroyed while tasks of it are still running (or a coroutine waits in "
          "join()/next()): co_await group.join() before the group goes out of scope");
    }
    if (const std::exception_ptr failure = firstUnreportedFailure()) reportLostFailure(failure);
  }

  // Starts `work` in the group: a Lazy<T> (bound to the group's executor), a Task<T> (on
  // its own executor), or any other awaitable whose co_await yields a T (weft::inFiber,
  // a FiberFuture, a channel operation...), run in a Lazy on the group's executor. Every
  // task carries the group's token. Runs inline until its first suspension when called
  // on one of the executor's threads, else it is scheduled there.
  template <class W>
  void spawn(W&& work) {
    using Work = std::remove_cvref_t<W>;
    if constexpr (detail::kIsLazy<Work>) {
      static_assert(std::is_convertible_v<typename Work::ValueType, T> || std::is_void_v<T>,
                    "TaskGroup<T>::spawn: the Lazy's value must convert to T");
      if (!work.valid()) detail::abortInvalidLazy("TaskGroup::spawn");
      startTask(std::move(work).via(executor_));
    } else if constexpr (detail::kIsTask<Work>) {
      if (!work.valid()) detail::abortInvalidLazy("TaskGroup::spawn");
      startTask(std::move(work));
    } else {
      startTask(detail::asLazy(std::forward<W>(work)).via(executor_));
    }
  }

  // Cancels the group: every task in it, and every task spawned later. Idempotent.
  void requestCancellation() noexcept { source_.requestCancellation(); }
  bool isCancellationRequested() const noexcept { return source_.isCancellationRequested(); }
  // The token every task of the group carries.
  const CancellationToken& token() const noexcept { return token_; }
  Executor* executor() const noexcept { return executor_; }
  // How many tasks are running now (a snapshot).
  std::size_t running() const {
    std::lock_guard guard(mutex_);
    return running_;
  }

  class JoinAwaiter;
  class NextAwaiter;

  // Awaitable: waits until no task of the group is running; rethrows the first failure.
  // Returns void.
  struct JoinOperation {
    TaskGroup* group;
    JoinAwaiter coAwait(Executor* executor, const CancellationToken& token) const noexcept {
      return JoinAwaiter(*group, executor, &token);
    }
    JoinAwaiter operator co_await() const noexcept { return JoinAwaiter(*group, nullptr, nullptr); }
  };
  JoinOperation join() noexcept { return JoinOperation{this}; }

  // Awaitable (T not void): the next finished task's result, std::nullopt when none is
  // running or waiting to be taken.
  struct NextOperation {
    TaskGroup* group;
    NextAwaiter coAwait(Executor* executor, const CancellationToken& token) const noexcept {
      return NextAwaiter(*group, executor, &token);
    }
    NextAwaiter operator co_await() const noexcept { return NextAwaiter(*group, nullptr, nullptr); }
  };
  NextOperation next() noexcept
    requires(!std::is_void_v<T>)
  {
    return NextOperation{this};
  }

  class JoinAwaiter {
   public:
    JoinAwaiter(TaskGroup& group, Executor* executor, const CancellationToken* token) noexcept
        : group_(group), token_(token) {
      waiter_.executor = executor;
    }
    JoinAwaiter(const JoinAwaiter&) = delete;
    JoinAwaiter& operator=(const JoinAwaiter&) = delete;
    ~JoinAwaiter() {
      onCancel_.reset();
      if (!suspended_) return;
      // Destroyed while waiting: leave the list, unless the group has already taken us out
      // to resume us (then this destruction races with that resumption).
      std::lock_guard guard(group_.mutex_);
      if (!eraseWaiter(group_.joiners_, &waiter_)) abortDestroyedWhileResuming();
    }

    bool await_ready() const {
      std::lock_guard guard(group_.mutex_);
      return group_.running_ == 0;
    }
    bool await_suspend(std::coroutine_handle<> awaiting) {
      waiter_.handle = awaiting;
      // Registered before we are queued: once queued, the last task may resume us at any
      // moment. Cancelling the joiner cancels the group; join still waits for the tasks.
      if (token_ != nullptr && token_->canBeCancelled()) {
        onCancel_.emplace(*token_, [&group = group_] { group.requestCancellation(); });
      }
      std::lock_guard guard(group_.mutex_);
      if (group_.running_ == 0) return false;
      group_.joiners_.push_back(&waiter_);
      suspended_ = true;
      return true;
    }
    void await_resume() {
      suspended_ = false;
      onCancel_.reset();
      std::exception_ptr failure;
      {
        std::lock_guard guard(group_.mutex_);
        failure = group_.takeJoinFailure();
      }
      if (failure) std::rethrow_exception(failure);
    }

   private:
    [[noreturn]] static void abortDestroyedWhileResuming() noexcept {
      weft::abortDestroyedWhileResuming("TaskGroup::join()", "the group's last task");
    }

    TaskGroup& group_;
    const CancellationToken* token_;
    detail::TaskGroupWaiter waiter_;
    std::optional<CancellationCallback> onCancel_;
    bool suspended_ = false;
  };

  class NextAwaiter {
   public:
    NextAwaiter(TaskGroup& group, Executor* executor, const CancellationToken* token) noexcept
        : group_(group), token_(token) {
      waiter_.executor = executor;
    }
    NextAwaiter(const NextAwaiter&) = delete;
    NextAwaiter& operator=(const NextAwaiter&) = delete;
    ~NextAwaiter() {
      onCancel_.reset();
      if (!suspended_) return;
      std::lock_guard guard(group_.mutex_);
      if (!eraseWaiter(group_.nextWaiters_, this)) {
        weft::abortDestroyedWhileResuming("TaskGroup::next()", "a finished task");
      }
    }

    bool await_ready() const {
      std::lock_guard guard(group_.mutex_);
      return !group_.results_.empty() || group_.running_ == 0;
    }
    bool await_suspend(std::coroutine_handle<> awaiting) {
      waiter_.handle = awaiting;
      // Registered before we are queued. The callback decides under the lock: a queued
      // waiter it takes out and resumes (no result came first); one not yet queued it
      // marks, and we then do not suspend at all.
      if (token_ != nullptr && token_->canBeCancelled()) {
        onCancel_.emplace(*token_, [this] {
          bool resume = false;
          {
            std::lock_guard guard(group_.mutex_);
            if (!queued_) {
              waiter_.cancelled = true;
            } else if (eraseWaiter(group_.nextWaiters_, this)) {
              waiter_.cancelled = true;
              resume = true;
            }
          }
          if (resume) detail::resumeTaskGroupWaiter(&waiter_);
        });
      }
      std::lock_guard guard(group_.mutex_);
      if (waiter_.cancelled || !group_.results_.empty() || group_.running_ == 0) return false;
      group_.nextWaiters_.push_back(this);
      queued_ = true;
      suspended_ = true;
      return true;
    }
    std::optional<Try<T>> await_resume() {
      onCancel_.reset();  // waits for a callback that is running right now
      // Resumed: nothing is left for the destructor to withdraw, also when the wait was
      // cancelled (the callback took it out of the list).
      const bool wasSuspended = std::exchange(suspended_, false);
      if (waiter_.cancelled) throw OperationCancelled();
      if (wasSuspended) return std::move(delivered_);  // handed over by the task that woke us
      std::lock_guard guard(group_.mutex_);
      if (group_.results_.empty()) return std::nullopt;
      Try<T> result = std::move(group_.results_.front());
      group_.results_.pop_front();
      return std::optional<Try<T>>(std::move(result));
    }

   private:
    TaskGroup& group_;
    const CancellationToken* token_;
    detail::TaskGroupWaiter waiter_;
    std::optional<CancellationCallback> onCancel_;
    std::optional<Try<T>> delivered_;  // written by finished() before it resumes us
    bool queued_ = false;              // guarded by the group's mutex_
    bool suspended_ = false;
    friend class TaskGroup;
  };

 private:
  static Executor* checkedExecutor(Executor* executor) {
    if (executor == nullptr) throw std::invalid_argument("weft: TaskGroup needs an executor");
    return executor;
  }

  template <class W>
  static bool eraseWaiter(std::vector<W*>& list, W* waiter) noexcept {
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (*it == waiter) {
        list.erase(it);
        return true;
      }
    }
    return false;
  }

  // Where a task of the group goes when it finishes: hands its result to the group and
  // frees its frame. On the frame allocator (recycled per thread), like the frames.
  template <class U>
  struct ChildSink final : detail::CompletionSink, detail::FrameAllocated {
    ChildSink(TaskGroup* g, std::coroutine_handle<detail::LazyPromise<U>> h) noexcept
        : CompletionSink(&ChildSink::complete, "TaskGroup::spawn()"), group(g), handle(h) {}
    TaskGroup* group;
    std::coroutine_handle<detail::LazyPromise<U>> handle;
    [[no_unique_address]] detail::RootTaskRecord record;  // the task's, for task dumps
    [[no_unique_address]] detail::RootTaskJob start;      // what starts it on another thread

    // noexcept: runs inside the task's final suspend.
    static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
      auto* self = static_cast<ChildSink*>(sink);
      detail::unregisterRootTask(self->record);  // registered since startTask()
      Try<U> result = std::move(self->handle.promise().result_);
      self->handle.destroy();
      TaskGroup* group = self->group;
      delete self;
      group->finished(std::move(result));
      return std::noop_coroutine();
    }
  };

  // Starts `task` as Task::start does (inline on one of its executor's threads, else
  // scheduled there), counted in running_ and carrying the group's token.
  template <class U>
  void startTask(Task<U> task) {
    Lazy<U>& lazy = detail::LazyAccess::lazyOf(task);
    auto handle = detail::LazyAccess::handle(lazy);
    Executor* executor = handle.promise().executor();
    handle.promise().setCancellationToken(&token_);
    auto* sink = new ChildSink<U>(this, handle);
    handle.promise().setCompletionSink(sink);
    detail::registerRootTask(handle.promise(), sink->record);
    {
      std::lock_guard guard(mutex_);
      ++running_;
    }
    if (executor->currentThreadInExecutor()) {
      detail::LazyAccess::release(lazy);
      detail::runRootTask(handle, sink->record);
      return;
    }
    try {
      detail::scheduleRootTask(executor, handle, sink->record, sink->start);
    } catch (...) {
      // Never ran, so never listed: nothing to unregister (task_registry.h).
      delete sink;  // not started: the task still owns (and frees) the frame
      std::lock_guard guard(mutex_);
      --running_;  // refused by its executor: it never ran
      throw;
    }
    detail::LazyAccess::release(lazy);
  }

  // A task of the group has finished (on the thread that finished it). The group may be
  // destroyed as soon as running_ reaches 0, so that decrement, under mutex_, is the last
  // touch of it (SpinLock::unlock touches nothing after its store).
  template <class U>
  void finished(Try<U>&& result) noexcept {
    std::vector<detail::TaskGroupWaiter*> wake;
    std::unique_lock guard(mutex_);
    if (result.hasException() && !anyFailure_) {
      anyFailure_ = true;
      if (cancelOnFirstFailure_) {
        // Not under mutex_: the callbacks it runs may take it (a task waiting in next());
        // running_ is not decremented yet, so the group stays alive.
        guard.unlock();
        source_.requestCancellation();
        guard.lock();
      }
      if constexpr (std::is_void_v<T>) failure_ = result.exception();
    }
    if constexpr (!std::is_void_v<T>) results_.push_back(convert(std::move(result)));
    --running_;
    if constexpr (!std::is_void_v<T>) {
      // Each waiting result goes straight to a waiter (oldest first); once no task runs,
      // the waiters left over get std::nullopt.
      while (!nextWaiters_.empty() && (!results_.empty() || running_ == 0)) {
        NextAwaiter* next = nextWaiters_.front();
        nextWaiters_.erase(nextWaiters_.begin());
        if (!results_.empty()) {
          next->delivered_.emplace(std::move(results_.front()));
          results_.pop_front();
        }
        wake.push_back(&next->waiter_);
      }
    }
    if (running_ == 0 && !joiners_.empty()) {
      wake.insert(wake.end(), joiners_.begin(), joiners_.end());
      joiners_.clear();
    }
    guard.unlock();
    for (detail::TaskGroupWaiter* waiter : wake) detail::resumeTaskGroupWaiter(waiter);
  }

  template <class U>
  static Try<T> convert(Try<U>&& result) noexcept {
    if constexpr (std::is_same_v<U, T>) {
      return std::move(result);
    } else {
      Try<T> converted;
      if (result.hasException()) {
        converted.setException(result.exception());
      } else {
        try {
          converted.emplace(std::move(result).value());
        } catch (...) {
          converted.setException(std::current_exception());
        }
      }
      return converted;
    }
  }

  // Under mutex_: what join() rethrows, and forgets (results that next() did not take
  // are discarded).
  std::exception_ptr takeJoinFailure() {
    if constexpr (std::is_void_v<T>) {
      return std::exchange(failure_, nullptr);
    } else {
      std::exception_ptr failure;
      for (Try<T>& result : results_) {
        if (result.hasException()) {
          failure = result.exception();
          break;
        }
      }
      results_.clear();
      return failure;
    }
  }
  // Under mutex_: a failure that neither join() nor next() reported.
  std::exception_ptr firstUnreportedFailure() const {
    if constexpr (std::is_void_v<T>) {
      return failure_;
    } else {
      for (const Try<T>& result : results_) {
        if (result.hasException()) return result.exception();
      }
      return nullptr;
    }
  }
  [[noreturn]] static void reportLostFailure(std::exception_ptr failure) noexcept {
    detail::abortOnLostException("TaskGroup destroyed holding a failure nobody joined", failure,
                                 " (co_await group.join() before the group goes out of scope)");
  }

  Executor* const executor_;
  const bool cancelOnFirstFailure_;
  CancellationSource source_;
  const CancellationToken token_;  // every task's promise points here
  std::optional<CancellationCallback> parentLink_;

  mutable detail::SpinLock mutex_;
  std::size_t running_ = 0;                               // guarded by mutex_
  bool anyFailure_ = false;                               // guarded by mutex_
  std::exception_ptr failure_;                            // void groups; guarded by mutex_
  std::deque<Try<std::conditional_t<std::is_void_v<T>, int, T>>> results_;  // guarded
  std::vector<detail::TaskGroupWaiter*> joiners_;         // guarded by mutex_
  std::vector<NextAwaiter*> nextWaiters_;                 // guarded by mutex_
};

}  // namespace weft
