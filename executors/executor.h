#pragma once

#include <concepts>
#include <coroutine>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "weft/executors/timer_entry.h"
#include "weft/executors/work_item.h"

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
// Timers: scheduleTimer/cancelTimer arm and disarm an intrusive TimerEntry (what
// weft::sleep uses). The default implementation shares one process-wide timer thread,
// started by the first timer, which runs each expired entry's fire function there; the
// fire function brings its coroutine to the executor with schedule(). So timers work on
// every executor, InlineExecutor and user executors included. ThreadPool overrides them:
// a timer armed on one of its workers lives in that worker's event loop, which fires it
// before its queued work; one armed from outside goes to a timer thread of the pool's own
// (see thread_pool.h).
//
// Implementing one (everything needed is public: Job, WorkItem, reportEscapedException in
// executors/work_item.h and TimerEntry in executors/timer_entry.h, included by this
// header; IoLoop in executors/io_loop.h, to include for I/O): override
// schedule(std::coroutine_handle<>), currentThreadInExecutor and scheduleJob, and write
// `using Executor::schedule;` in the derived class (the override otherwise hides the
// callable overload). Queue handles and jobs as WorkItems if convenient; run items inside
// `try { item.run(); } catch (...) { reportEscapedException(name()); }`.
// Override scheduleTimer/cancelTimer only to drive timers from the executor's own event
// loop (e.g. an epoll timeout). An executor with a shutdown after which it refuses work
// implements scheduleShutdownTimer/holdOpen/releaseHold ("Shutdown support" below), so
// that waits whose wake-up comes from another thread (blocking(fn), signal()) end cleanly. Call setCurrent(this) on each of the executor's threads
// (and setCurrent(nullptr) before it ends) so that Executor::current() names it there. A thread whose queue only it takes from may offer it to
// schedulers that switch straight to the next item (fibers): executors/thread_run_queue.h.
// I/O: weft's I/O awaitables (io/) run on the event loop of the thread that awaits them
// (IoLoop::current()). To serve them, give each of the executor's threads an IoLoop
// (IoLoop::create, IoLoop::CurrentScope) and run it when the thread is idle (see
// executors/io_loop.h); an executor that binds none refuses them: the await throws
// std::logic_error saying the thread has no event loop.
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
    scheduleJob(new CallableJob<std::decay_t<F>>(std::forward<F>(f)));
  }

  // Runs `job` later on one of this executor's threads: job->complete(job, true), once.
  // What schedule(F&&) queues, and the allocation-free way in for work kept in the
  // caller's own memory (weft keeps the job that starts a root task in the task's state,
  // coro/detail/task_registry.h): `complete` decides what "free" means.
  // Takes ownership of `job` (until its complete runs). Errors: if the executor refuses
  // it, the implementation calls job->complete(job, false) and throws ExecutorShutDown;
  // std::bad_alloc likewise. Thread safety: any thread.
  virtual void scheduleJob(Job* job) = 0;

  // True when the calling thread is one of this executor's own threads. An executor
  // that owns no threads (InlineExecutor) answers false. noexcept: it is asked on paths
  // that must not fail (deciding whether to run inline); implementations only read state.
  virtual bool currentThreadInExecutor() const noexcept = 0;

  // For diagnostics: names the executor in error messages. noexcept: a view of a member.
  std::string_view name() const noexcept { return name_; }

  // Arms `timer` (its deadline and fire function, `complete`, set by the caller): once
  // its deadline has passed, `timer.complete(&timer, true)` runs exactly once, on one of
  // this executor's threads or on a timer thread (so the fire function must reach the
  // executor itself, e.g. with schedule()), unless cancelTimer(timer) returns true first.
  // If the executor stops its timers before the deadline (ThreadPool::shutdown), the fire
  // function runs early with `timer.shutDown` set.
  // Preconditions: `timer` is not armed, and stays alive until it fired or was cancelled.
  // Errors: ExecutorShutDown if the executor accepts no more timers; std::bad_alloc;
  // std::system_error if the timer thread cannot be started. Nothing is armed then.
  // Thread safety: any thread.
  virtual void scheduleTimer(TimerEntry& timer);

  // Disarms `timer`: true if its fire function will never run (not yet due, or due but
  // not yet started: an implementation that queues fired timers for its own threads must
  // take them back here, since the canceller may be one of those threads), false if it
  // has run or is running, exactly once. A caller that then waits for the fire function
  // to finish should keep retrying cancelTimer while it waits (a fired timer may be on
  // its way to such a queue). noexcept: a removal
  // from a heap, which allocates nothing. Thread safety: any thread, concurrently with
  // the firing.
  virtual bool cancelTimer(TimerEntry& timer) noexcept;

  // The process-wide timers: what the default scheduleTimer/cancelTimer use, and what an
  // awaitable uses for a timer when its coroutine has no executor (a bare Lazy under
  // syncAwait). One timer thread, started by the first timer with a deadline, runs each
  // expired entry's fire function there; it stops at process exit, dropping the entries
  // still armed (TimerEntry::dropped).
  // Preconditions, errors, thread safety: as scheduleTimer and cancelTimer above
  // (ExecutorShutDown "weft-timer" once the timer thread has stopped at exit).
  // Example:
  //   if (executor != nullptr) executor->scheduleTimer(timer);
  //   else weft::Executor::scheduleProcessTimer(timer);
  static void scheduleProcessTimer(TimerEntry& timer);
  static bool cancelProcessTimer(TimerEntry& timer) noexcept;

  // Shutdown support, for awaitables whose completion comes from a thread outside the
  // executor (a blocking call, a signal, a canceller): without it, an executor destroyed
  // while the coroutine waits would be scheduled on by that thread after it is gone. The
  // three below are optional; an executor with no shutdown that stops accepting work (or
  // one that does not take part) keeps the defaults, and such awaitables then simply
  // resume through schedule(). weft's own users: io/blocking.h and io/signal.h (through
  // io/detail/pool_shutdown_guard.h). ThreadPool implements all three.
  //
  // scheduleShutdownTimer: arms `timer` (its fire function, `complete`, set by the caller;
  // its deadline is set here) so that it never expires but fires, with `timer.shutDown`
  // set, on one of this executor's threads when the executor shuts down, before it stops
  // accepting work; disarmed with cancelTimer() like any timer. Returns false, arming
  // nothing, when the executor has no such shutdown (the default). Preconditions: as
  // scheduleTimer. Errors: ExecutorShutDown once the executor's shutdown has begun;
  // std::bad_alloc; nothing is armed then. Thread safety: any thread.
  //
  // Example (an awaiter of one's own):
  //   timer_.complete = &MyAwaiter::onShutdown;           // takes the wait back, or holds
  //   armed_ = executor->scheduleShutdownTimer(timer_);  // false: nothing to guard
  virtual bool scheduleShutdownTimer(TimerEntry& timer);

  // Holds the executor open: until releaseHold(), a shutdown under way goes on accepting
  // and running work, so that a completion arriving from outside after the shutdown has
  // begun can still schedule() its coroutine here. Taken in a shutdown timer's fire
  // function (above) when the operation it guards can no longer be withdrawn; released by
  // whoever then schedules the coroutine, after schedule(). Returns false (nothing held)
  // once the executor has stopped accepting work. The default holds nothing and returns
  // true: an executor without a shutdown timer has no shutdown to delay. noexcept: a
  // counter update. Thread safety: any thread.
  virtual bool holdOpen() noexcept { return true; }
  // Releases one hold taken with holdOpen(); the last one lets a shutdown under way finish
  // (the executor may be destroyed as soon as this returns). Precondition: a hold taken by
  // the caller is outstanding. The default does nothing. noexcept: as holdOpen. Thread
  // safety: any thread.
  virtual void releaseHold() noexcept {}

  // The executor whose thread is the calling thread: set by the executor on each of its
  // threads (setCurrent; a ThreadPool's workers do), nullptr on any other thread. Not the
  // coroutine's executor (currentExecutor(), coro/current_executor.h): a plain Lazy
  // running on a ThreadPool worker has none, but Executor::current() is that pool, which
  // is where an awaitable can resume it. noexcept: reads a thread_local.
  // Thread safety: any thread (each sees its own).
  //
  // Example:
  //   Executor* here = weft::Executor::current();   // on a worker of `pool`: &pool
  static Executor* current() noexcept;

 protected:
  // Makes `executor` what current() returns on the calling thread: an executor calls it
  // with itself on each of its threads before it runs anything there, and with nullptr
  // before the thread ends. noexcept: writes a thread_local.
  static void setCurrent(Executor* executor) noexcept;

 private:
  std::string name_;
};

}  // namespace weft
