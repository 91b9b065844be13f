#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/detail/pool_shutdown_guard.h"

namespace weft {

class BlockingPool;

namespace detail {

// One call of blocking(fn) as the pool sees it: a node of the pool's intrusive FIFO,
// embedded in the awaiter (so in the awaiting coroutine's frame, or on the fiber's stack).
// `prev`, `next` and `state` are guarded by the pool's mutex.
struct BlockingJob {
  enum class State : unsigned char {
    kNew,        // not submitted (or submit() failed)
    kQueued,     // in the pool's queue
    kTaken,      // a thread of the pool took it: fn runs, or ran
    kWithdrawn,  // taken back from the queue (cancellation, destruction, shutdown guard)
    kBarred,     // its ThreadPool's shutdown came before submit(): never queued
  };
  BlockingJob* prev = nullptr;
  BlockingJob* next = nullptr;
  State state = State::kNew;
  // Runs fn on the pool's thread, stores its outcome, and hands the coroutine on. The
  // job may be freed by its coroutine as soon as this returns (or earlier, from inside).
  // noexcept: fn's exception is stored for the co_await, not thrown here.
  void (*run)(BlockingJob* job) noexcept = nullptr;
};

template <class Fn>
class BlockingAwaiter;

}  // namespace detail

// BlockingPool: a bounded set of threads kept for calls that block (legacy APIs,
// getaddrinfo, file I/O with no event-loop support), so that they never block an
// executor's workers. What `co_await weft::blocking(fn)` runs fn on.
//
// Semantics:
//  - Threads are started lazily, one when a call arrives and no thread of the pool is free,
//    up to maxThreads(); further calls wait in a FIFO queue. A thread idle for
//    idleTimeout() exits (threadCount() drops), so a quiet pool holds no threads.
//  - The default bound is 64 threads (tokio allows 512, Go is unbounded): a blocking call
//    holds a thread and its stack, and a few dozen in flight are enough for what the event
//    loop cannot do. setMaxThreads() changes the bound at run time (a lowered bound is
//    reached as threads finish their current calls).
//  - shutdown() (also run by the destructor) refuses new calls (their co_await throws
//    ExecutorShutDown naming the pool), lets the threads finish every call already
//    queued, then joins them.
//  - defaultPool(), the process-wide pool that blocking(fn) uses, is created on first use
//    and never destroyed (deliberately leaked, so that no static destructor can run while
//    a thread still uses it, or destroy it under a call made during exit). At exit (an
//    std::atexit handler registered when it is created) its threads that are not inside
//    a call end and are joined, so that their thread-local state (weft's frame caches) is
//    released before leak checkers look; a thread inside a call is never waited for (it
//    detaches itself if the call ends, or is cut off with the process, as any thread is).
//    Calls made during exit still run.
//
// Preconditions: shutdown() and the destructor must not run on one of the pool's own
// threads (inside fn, or in a coroutine that continued there): weft prints a message
// naming the pool and aborts. No call may be awaited on a pool being destroyed. A child
// forked while a pool had threads must not use that pool (it has none of its threads).
// Errors: the constructor throws std::invalid_argument for maxThreads == 0 and for a name
// with a NUL byte (it names the threads, a C string). A call that
// cannot start a thread when the pool has none throws std::system_error from its
// co_await (with at least one thread, the call waits in the queue instead).
// Thread safety: every member may be called concurrently from any thread.
//
// Example:
//   weft::BlockingPool files(4, std::chrono::seconds(30), "files");
//   std::string text = co_await weft::blocking(files, [&] { return readWholeFile(path); });
//   files.shutdown();  // after the last call
class BlockingPool {
 public:
  static constexpr std::size_t kDefaultMaxThreads = 64;
  static constexpr std::chrono::seconds kDefaultIdleTimeout{10};

  // Threads are named "<name>" where the platform allows (truncated to 15 characters).
  explicit BlockingPool(std::size_t maxThreads = kDefaultMaxThreads,
                        std::chrono::steady_clock::duration idleTimeout = kDefaultIdleTimeout,
                        std::string name = "weft-blocking");
  // Runs shutdown().
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // The process-wide pool ("weft-blocking", 64 threads, 10 s idle timeout), created on
  // first use, never destroyed (see the class comment). Errors: std::bad_alloc.
  static BlockingPool& defaultPool();

  // Refuses new calls, waits until every queued call has run, joins the threads.
  // Idempotent; concurrent calls all return once the pool has stopped.
  void shutdown();

  // The threads alive now (running a call or idle). Errors: none (a locked read).
  std::size_t threadCount() const;
  // Calls waiting for a thread (started ones are not counted).
  std::size_t queuedCount() const;
  std::size_t maxThreads() const;
  // Changes the bound. Throws std::invalid_argument for 0.
  void setMaxThreads(std::size_t maxThreads);
  std::chrono::steady_clock::duration idleTimeout() const noexcept { return idleTimeout_; }
  std::string_view name() const noexcept { return name_; }

  // The pool whose thread is the calling thread, or nullptr. noexcept: a thread_local.
  static BlockingPool* current() noexcept;

 private:
  template <class Fn>
  friend class detail::BlockingAwaiter;

  // Queues `job` and makes sure a thread will run it; false (nothing queued) if the job
  // was barred by withdrawForShutdown(). Throws ExecutorShutDown after shutdown(),
  // std::system_error when no thread exists and none can start; nothing is queued then.
  bool submit(detail::BlockingJob& job);
  // Takes `job` back if no thread has taken it yet (then true: it will never run).
  // noexcept: an unlink under a mutex.
  bool withdraw(detail::BlockingJob& job) noexcept;
  // For the shutdown guard of the ThreadPool the call resumes on: takes a queued `job`
  // back (kTakenBack), bars one not yet submitted (kBarred), or says that a thread took
  // it or the cancellation withdrew it (kClaimed). noexcept: under a mutex.
  detail::PoolShutdownGuard::Claim withdrawForShutdown(detail::BlockingJob& job) noexcept;

  // defaultPool()'s exit handler: ends the threads not inside a call and joins them;
  // the others detach when they next find the queue empty. noexcept: a lock and joins.
  void retireIdleThreadsAtExit() noexcept;

  using ThreadList = std::list<std::thread>;
  void startThreadLocked();
  void threadMain(ThreadList::iterator self);
  void unlinkLocked(detail::BlockingJob& job, detail::BlockingJob::State next) noexcept;

  const std::chrono::steady_clock::duration idleTimeout_;
  const std::string name_;

  mutable std::mutex mutex_;
  std::condition_variable workOrStop_;  // a call queued, shutdown, bound lowered
  std::condition_variable threadExited_;  // for shutdown() and the exit handler
  detail::BlockingJob* head_ = nullptr;  // guarded by mutex_, as is everything below
  detail::BlockingJob* tail_ = nullptr;
  std::size_t queued_ = 0;
  std::size_t maxThreads_;
  std::size_t threads_ = 0;   // alive
  std::size_t idle_ = 0;      // waiting for a call
  std::size_t starting_ = 0;  // started, not yet looked at the queue
  std::size_t running_ = 0;   // inside a call
  bool closing_ = false;
  bool exiting_ = false;      // the process is exiting: idle threads end (defaultPool only)
  bool exitJoined_ = false;   // ... and the exit handler has joined those that ended
  bool joinStarted_ = false;  // a shutdown() is joining the threads
  bool joined_ = false;       // ... and has joined them
  ThreadList handles_;        // the threads alive
  std::thread lastExited_;    // joined by the next thread to exit, or by shutdown()
};

namespace detail {

// The awaiter of blocking(fn). Lives in the awaiting coroutine's frame (or on the fiber's
// stack) with fn, the result, the queue node and the shutdown guard: a call allocates
// nothing.
//
// Two parties may finish the call: the pool's thread (fn ran) and the cancellation (it
// took the job back from the queue). Which one is decided under the pool's mutex: a
// thread takes the job out of the queue to run it, the cancellation withdraws it, and
// only one of them finds it queued. The winner and await_suspend then both "arrive"; the
// second to arrive resumes the coroutine (or, if that is await_suspend, continues without
// suspending): never while await_suspend still runs, never twice.
//
// When the coroutine resumes on a ThreadPool, a PoolShutdownGuard makes the pool's
// shutdown a third party, under the same mutex: a job still queued is taken back (the
// guard's fire function arrives, and the await throws ExecutorShutDown), one not yet
// submitted is barred (await_suspend throws it), and for one taken by a thread (or by the
// cancellation) the pool is held open until the winner has scheduled the coroutine there.
// The winner always resumes the coroutine through the guard (see its header).
//
// Destroying the coroutine while it is suspended here makes the destructor a fourth party:
// it settles the guard, then withdraws the job like the cancellation does. If it wins, fn
// never runs and nothing refers to the awaiter any more. If it loses, fn has started (its
// thread will resume the coroutine), or the cancellation or the shutdown took it (its
// resumption is on its way): weft reports the misuse and aborts.
template <class Fn>
class BlockingAwaiter final : private BlockingJob, private PoolShutdownGuard::Owner {
 public:
  using Result = std::invoke_result_t<Fn>;

  template <class F>
  BlockingAwaiter(BlockingPool& pool, F&& fn, Executor* executor, const CancellationToken& token)
      : fn_(std::forward<F>(fn)), pool_(pool), executor_(executor), token_(token) {
    run = &BlockingAwaiter::runOnPool;
  }
  BlockingAwaiter(const BlockingAwaiter&) = delete;
  BlockingAwaiter& operator=(const BlockingAwaiter&) = delete;
  // noexcept (implicitly): an unlink and a deregistration; misuse aborts. One branch on
  // the normal path: waiter_ is null once await_resume has run or if nothing was queued.
  ~BlockingAwaiter() {
    if (waiter_) [[unlikely]] withdrawOnDestruction();
  }

  // Cancelled before: throws at once (fn never runs).
  bool await_ready() const {
    token_.throwIfCancellationRequested();
    return false;
  }

  bool await_suspend(std::coroutine_handle<> waiter) {
    // Where fn's completion resumes the coroutine: its executor; else the ThreadPool whose
    // worker awaits (a plain Lazy there stays there); else the pool's thread.
    resumeOn_ = executor_ != nullptr ? executor_ : ThreadPool::current();
    // A ThreadPool's shutdown takes the call back or waits for it (see the class comment).
    // Throws ExecutorShutDown once that shutdown has begun: nothing armed or queued.
    guard_.arm(resumeOn_, *this);
    bool submitted;
    try {
      submitted = pool_.submit(*this);  // throws (ExecutorShutDown, system_error)
    } catch (...) {
      guard_.settle();  // nothing queued: the guard can have barred nothing
      throw;
    }
    if (!submitted) {
      // Barred: resumeOn_'s shutdown fired the guard first. fn never runs. (On resumeOn_'s
      // worker, or in its Task: the pool is alive while this runs.)
      guard_.settle();
      throw ExecutorShutDown(resumeOn_->name());
    }
    // Set only once queued (the destructor's sign that there is a job to withdraw). A
    // winner that already arrived does not read it: only the second arrival does.
    waiter_ = waiter;
    if (token_.canBeCancelled()) {
      // Captures one pointer: stored inline, so this does not throw.
      onCancel_.emplace(token_, [this] {
        if (pool_.withdraw(*this)) {
          cancelled_ = true;
          arrive();
        }
      });
    }
    // acq_rel: release publishes waiter_ and the registration to the winner; acquire
    // sees what the winner wrote (the result, cancelled_, shutDown_) if we continue inline.
    return arrivals_.fetch_add(1, std::memory_order_acq_rel) == 0;
  }

  Result await_resume() {
    // Waits if the callback still runs on another thread (it lost the race); after this
    // nothing refers to this awaiter but the guard, which settle() lets go.
    onCancel_.reset();
    guard_.settle();
    waiter_ = nullptr;  // resumed: nothing for the destructor to withdraw
    if (shutDown_) {
      // Resumed by the guard, on resumeOn_'s worker while it drains.
      throw ExecutorShutDown(resumeOn_->name());
    }
    if (cancelled_) throw OperationCancelled("weft: blocking() cancelled before its function ran");
    if constexpr (std::is_void_v<Result>) {
      result_.value();
    } else {
      return std::move(result_).value();
    }
  }

 private:
  // On one of the pool's threads. noexcept: fn's exception is captured.
  static void runOnPool(BlockingJob* job) noexcept {
    auto* self = static_cast<BlockingAwaiter*>(job);
    try {
      if constexpr (std::is_void_v<Result>) {
        std::invoke(std::move(self->fn_));
        self->result_.emplace();
      } else {
        self->result_.emplace(std::invoke(std::move(self->fn_)));
      }
    } catch (...) {
      self->result_.setException(std::current_exception());
    }
    self->arrive();
  }

  // PoolShutdownGuard::Owner, on a worker of resumeOn_ during its shutdown.
  PoolShutdownGuard::Claim takeBackForShutdown() noexcept override {
    const PoolShutdownGuard::Claim claim = pool_.withdrawForShutdown(*this);
    // Written before the guard's arrival (and before its release store of `fired`).
    if (claim == PoolShutdownGuard::Claim::kTakenBack) shutDown_ = true;
    return claim;
  }
  void resumeShutDown() noexcept override { arrive(/*onResumeOnWorker=*/true); }

  // The second arrival resumes the coroutine: on resumeOn_ through schedule() (via the
  // guard) when there is one (never inline inside requestCancellation() there), else
  // inline on this thread (the pool's thread after fn, the canceller's after a
  // cancellation). The guard's own arrival is on a worker of resumeOn_: inline. When
  // resumeOn_ refuses (not a ThreadPool, shut down meanwhile), the coroutine continues
  // inline here rather than being lost, with fn's value: what fn did is never discarded.
  // noexcept: resuming a weft coroutine does not throw (its promise catches).
  void arrive(bool onResumeOnWorker = false) noexcept {
    // acq_rel: see await_suspend.
    if (arrivals_.fetch_add(1, std::memory_order_acq_rel) == 0) return;
    std::coroutine_handle<> waiter = waiter_;
    if (onResumeOnWorker || !guard_.schedule(resumeOn_, waiter)) waiter.resume();
  }

  // The destructor's path for a coroutine destroyed while suspended here. Cold.
  [[gnu::cold, gnu::noinline]] void withdrawOnDestruction() noexcept {
    // First: once settled, the shutdown can neither take the job nor hold for it.
    guard_.settle();
    const bool withdrawn = pool_.withdraw(*this);
    // Waits for a callback running on another thread (so that cancelled_ can be read); a
    // callback that runs later finds the job gone.
    onCancel_.reset();
    if (withdrawn) return;  // fn never runs; its captures go with the frame
    const char* claimedBy = shutDown_    ? "its executor's shutdown had ended it"
                            : cancelled_ ? "its cancellation had been delivered"
                                         : "its function had started on the pool";
    abortDestroyedWhileResuming("blocking()", claimedBy);
  }

  Fn fn_;
  Try<Result> result_;
  BlockingPool& pool_;
  Executor* executor_;
  Executor* resumeOn_ = nullptr;
  const CancellationToken& token_;
  std::coroutine_handle<> waiter_;
  std::atomic<int> arrivals_{0};
  bool cancelled_ = false;  // written before the canceller's arrival
  bool shutDown_ = false;   // written before the guard's arrival
  std::optional<CancellationCallback> onCancel_;
  PoolShutdownGuard guard_;
};

template <class Fn>
class BlockingAwaitable {
 public:
  template <class F>
  BlockingAwaitable(BlockingPool& pool, F&& fn) : pool_(&pool), fn_(std::forward<F>(fn)) {}

  BlockingAwaiter<Fn> coAwait(Executor* executor, const CancellationToken& token) && {
    return BlockingAwaiter<Fn>(*pool_, std::move(fn_), executor, token);
  }
  // Outside a weft coroutine: no executor, no token.
  BlockingAwaiter<Fn> operator co_await() && {
    return BlockingAwaiter<Fn>(*pool_, std::move(fn_), nullptr, kNoCancellationToken);
  }
  // An lvalue would have fn moved out of a named object behind the caller's back.
  template <class E = Executor>
  void coAwait(E*, const CancellationToken&) & {
    static_assert(sizeof(E) == 0,
                  "co_await weft::blocking(fn) as the expression itself (an rvalue): a "
                  "blocking() awaitable is awaited once");
  }

 private:
  BlockingPool* pool_;
  Fn fn_;
};

template <class F>
concept BlockingCallable =
    std::invocable<std::decay_t<F>> && std::constructible_from<std::decay_t<F>, F&&> &&
    std::move_constructible<std::decay_t<F>>;

}  // namespace detail

// `co_await blocking(fn)`: runs `fn()` on a thread of BlockingPool::defaultPool() (or of
// `pool`), never on the awaiting coroutine's thread, and returns its value or rethrows
// its exception. For calls that block: legacy APIs, getaddrinfo, file I/O. Like tokio's
// spawn_blocking. From a fiber: `weft::await(weft::blocking(fn))`.
//
// Semantics:
//  - fn is moved (or copied) into the awaiter, invoked once as an rvalue on the pool's
//    thread, and destroyed with the awaiter (after the co_await, on the resuming thread).
//    Its result type may be void or move-only; a reference result is rejected at compile
//    time (return a value, a pointer or a std::reference_wrapper: a reference made on
//    another thread is too easy to leave dangling).
//  - Calls wait in the pool's FIFO queue while all of its threads are busy.
//  - Where the coroutine continues after fn: on its executor (a Task, a fiber: through
//    schedule()); else, if it was awaiting on a ThreadPool worker (a plain Lazy), on that
//    ThreadPool; else (a plain Lazy under syncAwait, say) inline on the pool's thread, as
//    a Lazy resumes where its awaitee completed: keep what follows short, or the thread
//    is not free for the next call. If that executor refuses (it was shut down while fn
//    ran), the coroutine continues inline on the pool's thread with fn's result, rather
//    than losing it. (A fn that finishes before the coroutine has finished suspending
//    lets it go on at once, on its own thread.)
//  - The ThreadPool the coroutine resumes on shuts down (or is destroyed) during the
//    call: a call still queued is withdrawn, fn never runs, and the co_await throws
//    ExecutorShutDown on one of the pool's workers while it drains (the shutdown does
//    not wait behind unrelated calls queued before it). A call whose fn has started is
//    waited for: the shutdown does not close the pool until fn has returned, and the
//    coroutine resumes there, while the pool drains, with fn's value or exception (so
//    fn's effect is never lost, and what follows runs on the pool, not on a pool's
//    thread after it is gone). A call awaited on a pool whose shutdown has begun throws
//    ExecutorShutDown at once (fn never runs), as a sleep does. Other executors are not
//    watched: they must outlive the call (below).
//  - Cancellation (the coroutine's token): a request before fn has started takes the call
//    out of the queue, fn never runs, and the co_await throws OperationCancelled
//    (resumed as above through the executor or ThreadPool, or else inline on the
//    canceller's thread, inside requestCancellation()). Once
//    fn has started it cannot be interrupted: the co_await returns its value (or
//    exception) when it finishes. Exactly one of the two happens.
//  - Destruction: destroying the coroutine while its call waits in the queue withdraws
//    it (fn never runs; its captures are destroyed with the frame). Destroying it once fn
//    has started, or after its cancellation was delivered, is a use error: weft prints
//    "weft: a coroutine was destroyed while suspended in blocking() ..." and aborts.
//
// Preconditions: awaited once, as the rvalue blocking() returns (awaiting a named one is
// a compile error). The BlockingPool outlives the await; so does the executor the
// coroutine resumes on unless it is a ThreadPool (whose shutdown ends or waits for the
// call, above).
// Errors: what fn throws, rethrown at the co_await (std::exception_ptr); OperationCancelled
// (above); ExecutorShutDown naming the BlockingPool after its shutdown() (fn never runs),
// or naming the ThreadPool the coroutine resumes on when its shutdown withdrew or refused
// the call (above; fn never runs); std::system_error if the pool has no thread and cannot
// start one.
// Thread safety: fn runs on another thread, concurrently with the rest of the program:
// what it touches must be safe to touch from there. The co_await's result is visible to
// the coroutine without further synchronisation.
//
// Example:
//   int fd = co_await weft::blocking([&] { return ::open(path, O_RDONLY); });
//   auto rows = co_await weft::blocking([&] { return legacyDb.query(sql); });
//   weft::await(weft::blocking([] { std::this_thread::sleep_for(1s); }));  // in a fiber
template <class F>
  requires detail::BlockingCallable<F>
auto blocking(BlockingPool& pool, F&& fn) {
  static_assert(!std::is_reference_v<std::invoke_result_t<std::decay_t<F>>>,
                "weft::blocking(fn): fn returns a reference; return a value, a pointer or a "
                "std::reference_wrapper instead");
  return detail::BlockingAwaitable<std::decay_t<F>>(pool, std::forward<F>(fn));
}

template <class F>
  requires detail::BlockingCallable<F>
auto blocking(F&& fn) {
  return blocking(BlockingPool::defaultPool(), std::forward<F>(fn));
}

}  // namespace weft
