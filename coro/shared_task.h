#pragma once

#include <coroutine>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/spin_lock.h"
#include "weft/coro/lazy.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft {

template <class T>
class SharedTask;

namespace detail {

// One coroutine waiting for a shared result.
struct SharedTaskWaiter {
  std::coroutine_handle<> handle;
  Executor* executor = nullptr;
  bool linked = false;     // guarded by the state's lock
  bool cancelled = false;  // guarded by the state's lock
};

// What every copy of a SharedTask shares: the work until it starts, its result, and the
// coroutines waiting for it.
template <class T>
struct SharedTaskState {
  explicit SharedTaskState(Task<T> task) : work(std::move(task)) {}
  explicit SharedTaskState(Lazy<T> lazy) : lazyWork(std::move(lazy)) {}

  SpinLock lock;
  bool started = false;                  // guarded by lock
  bool done = false;                     // guarded by lock; result is final once set
  std::vector<SharedTaskWaiter*> waiters;  // guarded by lock
  std::optional<Task<T>> work;           // a Task: runs on its executor
  std::optional<Lazy<T>> lazyWork;       // a Lazy: runs on the first awaiter's executor
  Try<T> result;

  // Starts the work (called once, by the first awaiter, outside the lock). `self` keeps
  // the state alive until the work has finished, whoever still holds a SharedTask.
  static void start(std::shared_ptr<SharedTaskState> self, Executor* firstAwaiterExecutor) {
    auto finish = [self](Try<T>&& r) mutable { self->finish(std::move(r)); };
    if (self->work) {
      Task<T> task = std::move(*self->work);
      self->work.reset();
      std::move(task).start(std::move(finish));
    } else {
      Lazy<T> lazy = std::move(*self->lazyWork);
      self->lazyWork.reset();
      if (firstAwaiterExecutor != nullptr) {
        std::move(lazy).via(firstAwaiterExecutor).start(std::move(finish));
      } else {
        std::move(lazy).start(std::move(finish));
      }
    }
  }

  void finish(Try<T>&& r) noexcept {
    std::vector<SharedTaskWaiter*> wake;
    {
      std::lock_guard guard(lock);
      result = std::move(r);
      done = true;
      wake.swap(waiters);
      for (SharedTaskWaiter* w : wake) w->linked = false;
    }
    for (SharedTaskWaiter* w : wake) resume(w);
  }

  static void resume(SharedTaskWaiter* w) noexcept { resumeWaiterOn(w->executor, w->handle); }

  bool unlink(SharedTaskWaiter* w) noexcept {  // under lock
    if (!w->linked) return false;
    for (auto it = waiters.begin(); it != waiters.end(); ++it) {
      if (*it == w) {
        waiters.erase(it);
        break;
      }
    }
    w->linked = false;
    return true;
  }
};

}  // namespace detail

// SharedTask<T>: one computation that many coroutines await (cppcoro's shared_task,
// folly's SharedPromise, a memoized future). Copies share it; the work starts when the
// first copy is awaited and runs once; every awaiter, before or after it finishes, gets a
// copy of its value or its exception.
//
// Semantics:
//  - Made with `weft::share(lazy)` (the Lazy runs on the first awaiter's executor, or
//    inline without one) or `weft::share(task)` (on the task's executor). It runs with no
//    cancellation token: one awaiter's cancellation does not cancel work others wait for.
//  - Awaiting is cancellable: a cancelled awaiter stops waiting (OperationCancelled) and
//    the work goes on for the others. Each awaiter resumes on its own executor.
//  - T must be copy-constructible (each awaiter gets a copy; share a std::shared_ptr for
//    large or move-only results). Awaiting as an lvalue (`co_await shared`) is the point.
//  - The work keeps its state alive until it finishes, even if every copy is dropped.
//
// Preconditions: the Lazy/Task given to share() is valid (else a message and abort).
// Errors: the work's exception, rethrown to every awaiter (std::exception_ptr copies of
// one object); OperationCancelled for a cancelled awaiter; ExecutorShutDown if the
// executor refuses the work when the first awaiter starts it.
// Thread safety: copies may be awaited from any number of threads at once.
//
// Example:
//   weft::SharedTask<Config> config = weft::share(loadConfig());
//   // in any number of request handlers:
//   const Config c = co_await config;  // loaded once, by the first to ask
template <class T>
class SharedTask {
 public:
  using ValueType = T;

  SharedTask() = default;

  bool valid() const noexcept { return state_ != nullptr; }
  // True once the work has finished. Thread-safe.
  bool ready() const noexcept {
    if (!state_) return false;
    std::lock_guard guard(state_->lock);
    return state_->done;
  }

  class Awaiter {
    friend class SharedTask;  // makes it: the constructor is not API
    Awaiter(std::shared_ptr<detail::SharedTaskState<T>> state, Executor* executor,
            const CancellationToken* token) noexcept
        : state_(std::move(state)), token_(token) {
      waiter_.executor = executor;
    }

   public:
    Awaiter(const Awaiter&) = delete;
    Awaiter& operator=(const Awaiter&) = delete;
    ~Awaiter() {
      onCancel_.reset();
      if (!suspended_) return;
      std::lock_guard guard(state_->lock);
      if (!state_->unlink(&waiter_)) {
        weft::abortDestroyedWhileResuming("co_await of a SharedTask", "the work's end");
      }
    }

    bool await_ready() const noexcept {
      std::lock_guard guard(state_->lock);
      return state_->done;
    }
    bool await_suspend(std::coroutine_handle<> awaiting) {
      waiter_.handle = awaiting;
      if (token_ != nullptr && token_->canBeCancelled()) {
        onCancel_.emplace(*token_, [this] {
          bool resume;
          {
            std::lock_guard guard(state_->lock);
            waiter_.cancelled = true;  // a waiter not linked yet will not be
            resume = state_->unlink(&waiter_);
          }
          if (resume) detail::SharedTaskState<T>::resume(&waiter_);
        });
      }
      // The first awaiter starts the work before linking itself (the work may finish
      // inline); then every awaiter links itself unless it is done by then.
      bool startIt;
      {
        std::lock_guard guard(state_->lock);
        startIt = !std::exchange(state_->started, true);
      }
      if (startIt) {
        try {
          detail::SharedTaskState<T>::start(state_, waiter_.executor);
        } catch (...) {
          // Refused by its executor: nothing ran. Everyone gets the refusal.
          state_->finish(Try<T>(std::current_exception()));
          throw;
        }
      }
      std::lock_guard guard(state_->lock);
      if (state_->done || waiter_.cancelled) return false;
      state_->waiters.push_back(&waiter_);
      waiter_.linked = true;
      suspended_ = true;
      return true;
    }
    T await_resume() {
      onCancel_.reset();
      suspended_ = false;
      bool cancelled;
      {
        std::lock_guard guard(state_->lock);
        cancelled = waiter_.cancelled && !state_->done;
      }
      if (cancelled) throw OperationCancelled();
      if constexpr (std::is_void_v<T>) {
        state_->result.value();
      } else {
        return state_->result.value();  // a copy: the result stays for the others
      }
    }

   private:
    std::shared_ptr<detail::SharedTaskState<T>> state_;
    const CancellationToken* token_;
    detail::SharedTaskWaiter waiter_;
    std::optional<CancellationCallback> onCancel_;
    bool suspended_ = false;
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const noexcept {
    return Awaiter(checked(), executor, &token);
  }
  Awaiter operator co_await() const noexcept { return Awaiter(checked(), nullptr, nullptr); }

 private:
  template <class U>
  friend SharedTask<U> share(Lazy<U> lazy);
  template <class U>
  friend SharedTask<U> share(Task<U> task);

  explicit SharedTask(std::shared_ptr<detail::SharedTaskState<T>> state) noexcept
      : state_(std::move(state)) {}

  // share()'s body, for a Lazy or a Task.
  template <class Work>
  static SharedTask fromWork(Work work) {
    static_assert(std::is_void_v<T> || std::is_copy_constructible_v<T>,
                  "weft::share: every awaiter gets a copy of the value: T must be copyable");
    if (!work.valid()) detail::abortInvalidLazy("share");
    return SharedTask(std::make_shared<detail::SharedTaskState<T>>(std::move(work)));
  }

  const std::shared_ptr<detail::SharedTaskState<T>>& checked() const noexcept {
    if (!state_) detail::abortInvalidLazy("co_await of an empty SharedTask holding");
    return state_;
  }

  std::shared_ptr<detail::SharedTaskState<T>> state_;
};

// share(lazy) / share(task): a SharedTask for the work (see SharedTask).
// Errors: std::bad_alloc. Preconditions: valid (else a message and abort).
template <class T>
SharedTask<T> share(Lazy<T> lazy) {
  return SharedTask<T>::fromWork(std::move(lazy));
}

template <class T>
SharedTask<T> share(Task<T> task) {
  return SharedTask<T>::fromWork(std::move(task));
}

}  // namespace weft
