#pragma once

#include <concepts>
#include <coroutine>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "executors/detail/job.h"

namespace weft {

// Thrown by Executor::schedule when the executor no longer accepts work (it has been
// shut down). Work scheduled before that is never dropped.
class ExecutorShutDown : public std::runtime_error {
 public:
  explicit ExecutorShutDown(std::string_view executorName)
      : std::runtime_error("weft: executor '" + std::string(executorName) +
                           "' is shut down and accepts no more work") {}
};

// Executor: where coroutines and callables run. The one interface that stackless
// coroutines (Lazy/Task) and stackful fibers share.
//
// Two ways in:
//  - schedule(std::coroutine_handle<>): the fast path used by awaitables; it must not
//    allocate. The handle is resumed exactly once, on one of the executor's threads.
//  - schedule(F&&): any move-only callable taking no arguments; it is moved into one
//    heap-allocated job.
//
// Errors: schedule throws ExecutorShutDown once the executor is shut down (a handle or
// callable that was not accepted is not run and, for a callable, is destroyed). A
// callable that throws has nobody to report to: weft prints the exception with the
// executor's name and aborts (as std::thread does).
//
// Thread safety: schedule and currentThreadInExecutor may be called from any thread
// concurrently.
//
// Implementing one: override schedule(std::coroutine_handle<>), currentThreadInExecutor
// and scheduleJob, and write `using Executor::schedule;` in the derived class (the
// override otherwise hides the callable overload). Run items inside
// `try { item.run(); } catch (...) { detail::reportEscapedException(name()); }`.
//
// Example:
//   weft::ThreadPool pool(2);
//   pool.schedule([] { std::puts("on a worker"); });
class Executor {
 public:
  explicit Executor(std::string name) : name_(std::move(name)) {}
  virtual ~Executor() = default;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Resumes `h` later on one of this executor's threads.
  virtual void schedule(std::coroutine_handle<> h) = 0;

  // Runs `f()` later on one of this executor's threads. Not chosen for coroutine
  // handles (they take the allocation-free overload above).
  template <class F>
    requires(!std::convertible_to<F, std::coroutine_handle<>>) &&
            std::invocable<std::decay_t<F>&> && std::move_constructible<std::decay_t<F>>
  void schedule(F&& f) {
    scheduleJob(new detail::CallableJob<std::decay_t<F>>(std::forward<F>(f)));
  }

  // True when the calling thread is one of this executor's own threads. An executor
  // that owns no threads (InlineExecutor) answers false. noexcept: it is asked on paths
  // that must not fail (deciding whether to run inline); implementations only read state.
  virtual bool currentThreadInExecutor() const noexcept = 0;

  // For diagnostics: names the executor in error messages. noexcept: a view of a member.
  std::string_view name() const noexcept { return name_; }

 protected:
  // Takes ownership of `job`. If the executor refuses it, the implementation frees it
  // with job->complete(job, false) and throws ExecutorShutDown.
  virtual void scheduleJob(detail::Job* job) = 0;

 private:
  std::string name_;
};

}  // namespace weft
