#pragma once

// Driving a ThreadPool with one worker step by step from the test thread: start a Lazy on
// it and record how it ended (Outcome), run a function on the worker, wait until the
// worker has handed everything scheduled so far to its event loop (quiesce), and start a
// Lazy by hand until it first suspends (to destroy it while suspended). Hand-shakes only:
// no sleep, no timing.

#include <atomic>
#include <chrono>
#include <coroutine>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "weft/coro/lazy.h"
#include "weft/coro/try.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/thread_pool.h"

namespace weft::test {

// How a Lazy started with startOn ended: its Try, and a counter of ends (exactly one is
// right).
template <class T>
struct Outcome {
  std::atomic<int> ends{0};
  Try<T> result;

  void wait() const {
    while (ends.load() == 0) ends.wait(0);
  }
  // Waits at most `limit` (a hang guard far above any scheduling delay, not a timing
  // assertion); false if it has not ended by then.
  bool waitFor(std::chrono::seconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (ends.load() == 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }
  template <class E>
  bool endedWith() const {
    if (!result.hasException()) return false;
    try {
      std::rethrow_exception(result.exception());
    } catch (const E&) {
      return true;
    } catch (...) {
      return false;
    }
  }
  std::string what() const {
    if (!result.hasException()) return "(a value)";
    try {
      std::rethrow_exception(result.exception());
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "(not a std::exception)";
    }
  }
};

// A start() callback that records the end in `outcome`.
template <class T>
auto recordInto(Outcome<T>& outcome) {
  return [&outcome](Try<T> result) {
    outcome.result = std::move(result);
    outcome.ends.fetch_add(1);
    outcome.ends.notify_all();
  };
}

// Starts `lazy` on `executor` (a pool, or a test's own executor); `outcome` records how it
// ends. T comes from `outcome` alone, so that an awaitable that converts to Lazy<T>
// (TcpStream::writeAll's) is taken too.
template <class T>
void startOn(Executor& executor, std::type_identity_t<Lazy<T>> lazy, Outcome<T>& outcome) {
  std::move(lazy).via(&executor).start(recordInto(outcome));
}

// Runs `f` on the pool's one worker and waits for it.
template <class F>
void onWorker(ThreadPool& pool, F f) {
  std::atomic<bool> ran{false};
  pool.schedule([&] {
    f();
    ran.store(true);
    ran.notify_all();
  });
  ran.wait(false);
}

// Returns once the pool's one worker has run what was scheduled before and handed its
// queued I/O to the kernel: two round trips through its queue, the second after a loop
// turn that submitted what the first found.
inline void quiesce(ThreadPool& pool) {
  for (int i = 0; i < 2; ++i) onWorker(pool, [] {});
}

// Holds the pool's one worker in a scheduled function until release(): what arrives
// meanwhile (data, a connection, a cancellation, a close) waits for its loop's next turn.
class WorkerHold {
 public:
  explicit WorkerHold(ThreadPool& pool) {
    pool.schedule([this] {
      held_.store(true);
      held_.notify_all();
      go_.wait(false);
      then_();
      done_.store(true);
      done_.notify_all();
    });
    held_.wait(false);
  }
  WorkerHold(const WorkerHold&) = delete;
  WorkerHold& operator=(const WorkerHold&) = delete;
  // Runs `then` on the worker, still before its loop's next turn, and waits for it.
  template <class F>
  void release(F then) {
    then_ = std::move(then);
    go_.store(true);
    go_.notify_all();
    done_.wait(false);
  }

 private:
  std::atomic<bool> held_{false};
  std::atomic<bool> go_{false};
  std::atomic<bool> done_{false};
  std::function<void()> then_;
};

// Resumes `lazy` by hand on the calling thread (a pool worker) until it first suspends;
// false if it did not suspend. Its executor is `pool`, and finishing returns to nobody.
template <class T>
bool startSuspended(ThreadPool& pool, Lazy<T>& lazy) {
  auto handle = detail::LazyAccess::handle(lazy);
  handle.promise().setExecutor(&pool);
  handle.promise().setContinuation(std::noop_coroutine());
  handle.resume();
  return !handle.done();
}

// The buffers the pool's one worker's event loop has lent (receive()) and not had back,
// after a loop turn that took in those given back on other threads.
inline std::size_t lentBuffers(ThreadPool& pool) {
  std::size_t lent = 0;
  quiesce(pool);
  onWorker(pool, [&] { lent = IoLoop::current()->lentBuffers(); });
  return lent;
}

}  // namespace weft::test
