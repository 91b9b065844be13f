#include "weft/executors/blocking_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <unistd.h>

#if defined(__linux__)
#include <pthread.h>
#endif

#include "weft/executors/executor.h"
#include "weft/executors/pool_metrics.h"

namespace weft {

// How the threads come and go (everything below is guarded by mutex_):
//  - A call is queued, then a thread is made to see it: an idle one is notified, and a
//    new one is started when the queued calls outnumber the threads about to look at the
//    queue (idle_ + starting_) and the bound allows. A running thread looks at the queue
//    again after each call, so a queued call is always seen by some thread.
//  - A thread with nothing to do waits up to idleTimeout_ for a call, then exits. It also
//    exits at shutdown once the queue is empty, and when the bound was lowered below the
//    number of threads.
//  - Joining: an exiting thread leaves its own std::thread in lastExited_ and joins the
//    one it found there (so at most one exited thread is ever unjoined, and nobody joins
//    on the call path). shutdown() waits for threads_ to reach 0, then joins lastExited_,
//    which joined its predecessor before it ended, and so on: every thread is joined.
//    The default pool's exit handler does the same for the threads not inside a call;
//    a thread that ends after it detaches itself.
//  - No thread ever holds mutex_ while taking another lock, or the other way round.

namespace {

thread_local BlockingPool* tlCurrentPool = nullptr;

// The process that created the default pool (see defaultPool()'s exit handler).
pid_t gDefaultPoolProcess = 0;

[[noreturn]] void abortShutdownFromOwnThread(std::string_view name) noexcept {
  std::fprintf(stderr,
               "weft: BlockingPool '%.*s' shut down (or destroyed) from one of its own "
               "threads; it would wait for itself\n",
               static_cast<int>(name.size()), name.data());
  std::abort();
}

}  // namespace

BlockingPool::BlockingPool(std::size_t maxThreads, std::chrono::steady_clock::duration idleTimeout,
                           std::string name)
    : idleTimeout_(idleTimeout), name_(std::move(name)), maxThreads_(maxThreads) {
  if (maxThreads == 0) throw std::invalid_argument("weft: BlockingPool with 0 threads");
  // The name names the threads (pthread_setname_np takes a C string): a NUL would cut it.
  if (std::find(name_.begin(), name_.end(), '\0') != name_.end()) {
    throw std::invalid_argument("weft: BlockingPool: the name contains a NUL byte");
  }
}

BlockingPool::~BlockingPool() { shutdown(); }

BlockingPool& BlockingPool::defaultPool() {
  // Leaked on purpose (see the class comment): never destroyed at exit, so a call or a
  // thread still using it then finds it intact. Reachable from this static, so leak
  // checkers do not report it.
  static BlockingPool* const pool = [] {
    auto* created = new BlockingPool();
    gDefaultPoolProcess = ::getpid();
    // Failing to register only leaves the idle threads running at exit.
    static_cast<void>(std::atexit([] {
      // A child forked after the pool had threads has none of them: nothing to end (and
      // waiting for them would hang its exit()).
      if (::getpid() == gDefaultPoolProcess) defaultPool().retireIdleThreadsAtExit();
    }));
    // Every ThreadPool's metrics() reports this pool's gauges from now on (the pool is
    // never destroyed, so the function may read it at any time).
    setBlockingGaugesReader([](std::uint64_t& threads, std::uint64_t& queued) noexcept {
      try {
        threads = defaultPool().threadCount();
        queued = defaultPool().queuedCount();
      } catch (...) {  // std::system_error locking the mutex: the gauges stay 0
      }
    });
    return created;
  }();
  return *pool;
}

BlockingPool* BlockingPool::current() noexcept { return tlCurrentPool; }

std::size_t BlockingPool::threadCount() const {
  std::lock_guard lock(mutex_);
  return threads_;
}

std::size_t BlockingPool::queuedCount() const {
  std::lock_guard lock(mutex_);
  return queued_;
}

std::size_t BlockingPool::maxThreads() const {
  std::lock_guard lock(mutex_);
  return maxThreads_;
}

void BlockingPool::setMaxThreads(std::size_t maxThreads) {
  if (maxThreads == 0) throw std::invalid_argument("weft: BlockingPool with 0 threads");
  std::lock_guard lock(mutex_);
  maxThreads_ = maxThreads;
  // Raised: start threads for the calls that waited for room. Lowered: the surplus
  // threads exit when they next find the queue empty (woken here if idle).
  while (!closing_ && queued_ > idle_ + starting_ && threads_ < maxThreads_) {
    try {
      startThreadLocked();
    } catch (...) {
      break;  // the threads there are take the calls
    }
  }
  workOrStop_.notify_all();
}

void BlockingPool::unlinkLocked(Job& job,
                                Job::State next) noexcept {
  (job.prev != nullptr ? job.prev->next : head_) = job.next;
  (job.next != nullptr ? job.next->prev : tail_) = job.prev;
  job.prev = job.next = nullptr;
  job.state = next;
  --queued_;
}

bool BlockingPool::submit(Job& job) {
  using State = Job::State;
  std::lock_guard lock(mutex_);
  if (job.state == State::kBarred) return false;
  if (closing_) throw ExecutorShutDown(name_);
  job.prev = tail_;
  job.next = nullptr;
  (tail_ != nullptr ? tail_->next : head_) = &job;
  tail_ = &job;
  job.state = State::kQueued;
  ++queued_;
  if (idle_ != 0) workOrStop_.notify_one();
  if (queued_ > idle_ + starting_ && threads_ < maxThreads_) {
    try {
      startThreadLocked();
    } catch (...) {
      if (threads_ == 0) {
        unlinkLocked(job, State::kNew);  // nobody would ever run it
        throw;
      }
      // Otherwise a thread of the pool takes it after its current call.
    }
  }
  return true;
}

bool BlockingPool::withdraw(Job& job) noexcept {
  std::lock_guard lock(mutex_);
  if (job.state != Job::State::kQueued) return false;
  unlinkLocked(job, Job::State::kWithdrawn);
  return true;
}

BlockingPool::Job::State BlockingPool::withdrawForShutdown(
    Job& job) noexcept {
  using State = Job::State;
  std::lock_guard lock(mutex_);
  const State found = job.state;
  switch (found) {
    case State::kQueued:
      unlinkLocked(job, State::kWithdrawn);
      break;
    case State::kNew:
      job.state = State::kBarred;  // submit() refuses it
      break;
    case State::kTaken:      // fn runs (or ran): its thread resumes the coroutine
    case State::kWithdrawn:  // the cancellation took it and resumes the coroutine
    case State::kBarred:     // (not reached: the guard fires once)
      break;
  }
  return found;
}

void BlockingPool::startThreadLocked() {
  handles_.emplace_back();
  const ThreadList::iterator self = std::prev(handles_.end());
  try {
    // The new thread blocks on mutex_ (held here) before it reads *self.
    *self = std::thread([this, self] { threadMain(self); });
  } catch (...) {
    handles_.erase(self);
    throw;
  }
  ++threads_;
  ++starting_;
}

void BlockingPool::threadMain(ThreadList::iterator self) {
  tlCurrentPool = this;
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
#endif
  std::unique_lock lock(mutex_);
  --starting_;
  for (;;) {
    if (head_ != nullptr) {
      Job& job = *head_;
      unlinkLocked(job, Job::State::kTaken);  // only this thread finishes it
      ++running_;
      lock.unlock();
      job.run(&job);  // may free the job (its coroutine resumed and went on)
      lock.lock();
      --running_;
      continue;
    }
    if (closing_ || exiting_ || threads_ > maxThreads_) break;
    ++idle_;
    const bool woken = workOrStop_.wait_for(lock, idleTimeout_, [this] {
      return head_ != nullptr || closing_ || exiting_ || threads_ > maxThreads_;
    });
    --idle_;
    if (!woken) break;  // idle for idleTimeout_: retire
  }
  --threads_;
  std::thread previous;
  if (exitJoined_) {
    self->detach();  // the process is exiting and nobody joins any more
  } else {
    previous = std::exchange(lastExited_, std::move(*self));
  }
  handles_.erase(self);
  threadExited_.notify_all();
  lock.unlock();
  // Nothing of the pool is touched from here on: shutdown() may be destroying it, once it
  // has joined this thread (through lastExited_).
  if (previous.joinable()) previous.join();
}

void BlockingPool::retireIdleThreadsAtExit() noexcept {
  std::thread last;
  {
    std::unique_lock lock(mutex_);
    exiting_ = true;
    workOrStop_.notify_all();
    // Every thread not inside a call finds the queue empty and leaves (one that finishes
    // a call meanwhile too); those inside a call are not waited for.
    threadExited_.wait(lock, [this] { return threads_ == running_; });
    last = std::move(lastExited_);
    exitJoined_ = true;  // threads that end later detach themselves
  }
  // Joins the last thread to have exited, which joined the one before it, and so on: all
  // of them have ended, so this cannot wait for a running call.
  if (last.joinable()) last.join();
}

void BlockingPool::shutdown() {
  if (tlCurrentPool == this) abortShutdownFromOwnThread(name_);
  std::unique_lock lock(mutex_);
  closing_ = true;
  workOrStop_.notify_all();
  // The threads drain the queue (a call cancelled meanwhile leaves it), then exit.
  threadExited_.wait(lock, [this] { return threads_ == 0; });
  if (joinStarted_) {
    // Another shutdown() joins: return once it has (the pool may be destroyed then).
    threadExited_.wait(lock, [this] { return joined_; });
    return;
  }
  joinStarted_ = true;
  std::thread last = std::move(lastExited_);
  lock.unlock();
  // Only one mutex is ever held at a time, here and in the threads.
  if (last.joinable()) last.join();
  lock.lock();
  joined_ = true;
  threadExited_.notify_all();
}

}  // namespace weft
