#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace weft {

namespace detail {

// The awaiter of weft::blocking(fn) (io/blocking.h): the one user of BlockingPool's
// submission interface.
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

  // One call of blocking(fn) as the pool sees it: a node of the pool's intrusive FIFO,
  // embedded in the awaiter (so in the awaiting coroutine's frame, or on the fiber's stack).
  // `prev`, `next` and `state` are guarded by the pool's mutex.
  struct Job {
    enum class State : unsigned char {
      kNew,        // not submitted (or submit() failed)
      kQueued,     // in the pool's queue
      kTaken,      // a thread of the pool took it: fn runs, or ran
      kWithdrawn,  // taken back from the queue (cancellation, destruction, shutdown guard)
      kBarred,     // its ThreadPool's shutdown came before submit(): never queued
    };
    Job* prev = nullptr;
    Job* next = nullptr;
    State state = State::kNew;
    // Runs fn on the pool's thread, stores its outcome, and hands the coroutine on. The
    // job may be freed by its coroutine as soon as this returns (or earlier, from inside).
    // noexcept: fn's exception is stored for the co_await, not thrown here.
    void (*run)(Job* job) noexcept = nullptr;
  };

  // Queues `job` and makes sure a thread will run it; false (nothing queued) if the job
  // was barred by withdrawForShutdown(). Throws ExecutorShutDown after shutdown(),
  // std::system_error when no thread exists and none can start; nothing is queued then.
  bool submit(Job& job);
  // Takes `job` back if no thread has taken it yet (then true: it will never run).
  // noexcept: an unlink under a mutex.
  bool withdraw(Job& job) noexcept;
  // For the shutdown guard of the ThreadPool the call resumes on: takes a queued `job`
  // back (it becomes kWithdrawn), bars one not yet submitted (kBarred: submit() refuses
  // it), and leaves one that a thread took or the cancellation withdrew. Returns the
  // state it found: kQueued (taken back), kNew (barred), or another (left). noexcept:
  // under a mutex.
  Job::State withdrawForShutdown(Job& job) noexcept;

  // defaultPool()'s exit handler: ends the threads not inside a call and joins them;
  // the others detach when they next find the queue empty. noexcept: a lock and joins.
  void retireIdleThreadsAtExit() noexcept;

  using ThreadList = std::list<std::thread>;
  void startThreadLocked();
  void threadMain(ThreadList::iterator self);
  void unlinkLocked(Job& job, Job::State next) noexcept;

  const std::chrono::steady_clock::duration idleTimeout_;
  const std::string name_;

  mutable std::mutex mutex_;
  std::condition_variable workOrStop_;  // a call queued, shutdown, bound lowered
  std::condition_variable threadExited_;  // for shutdown() and the exit handler
  Job* head_ = nullptr;  // guarded by mutex_, as is everything below
  Job* tail_ = nullptr;
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

}  // namespace weft
