#include "weft/io/blocking.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/file.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/io_support.h"
#include "test/support/manual_executor.h"
#include "test/support/manual_timer_executor.h"
#include "test/support/thread_states.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

// Death tests use the default "fast" style (a fork): the "threadsafe" style re-executes
// the binary, which fails under qemu-user. Everything with a thread is made inside the
// death statement; death test suites run first, before any pool has a thread.

using namespace std::chrono_literals;
using test::Counted;
using test::Watchdog;

// pthread_self() is __attribute__((const)): asked through an opaque call each time.
[[gnu::noinline]] std::thread::id threadId() {
  asm volatile("");
  return std::this_thread::get_id();
}
[[gnu::noinline]] ThreadPool* currentPool() {
  asm volatile("");
  return ThreadPool::current();
}

// Spins (yielding) until `done()`: a hand-shake with the pool's threads. False after a
// minute (a bound for a hang, not a timing claim), for an ASSERT_TRUE.
template <class Done>
bool eventually(Done done) {
  return test::yieldUntil(done);
}

// Resumes a Lazy's frame once (it runs until its first suspension), bound to `executor`
// and `token`, keeping it owned by `lazy`: for tests that destroy it while suspended.
template <class T>
void startSuspended(Lazy<T>& lazy, Executor* executor = nullptr,
                    const CancellationToken* token = nullptr) {
  auto handle = detail::LazyAccess::handle(lazy);
  handle.promise().setExecutor(executor);
  if (token != nullptr) handle.promise().setCancellationToken(token);
  handle.resume();
  ASSERT_FALSE(handle.done()) << "the coroutine was expected to suspend";
}

// --- results --------------------------------------------------------------------------

// The name names the threads (a C string): a NUL would cut it silently.
TEST(BlockingTest, APoolNameWithANulByteIsRejected) {
  EXPECT_THROW(BlockingPool(1, std::chrono::seconds(1), std::string("io\0x", 4)),
               std::invalid_argument);
}

TEST(BlockingTest, ReturnsTheValue) {
  EXPECT_EQ(syncAwait(blocking([] { return 6 * 7; })), 42);
}

TEST(BlockingTest, RunsVoidFunctions) {
  std::atomic<bool> ran{false};
  syncAwait(blocking([&] { ran = true; }));
  EXPECT_TRUE(ran.load());
}

TEST(BlockingTest, ReturnsMoveOnlyResults) {
  auto body = []() -> Lazy<int> {
    std::unique_ptr<int> p = co_await blocking([] { return std::make_unique<int>(5); });
    co_return *p;
  };
  EXPECT_EQ(syncAwait(body()), 5);
}

TEST(BlockingTest, AcceptsMoveOnlyFunctions) {
  auto owned = std::make_unique<std::string>("moved in");
  EXPECT_EQ(syncAwait(blocking([s = std::move(owned)] { return *s; })), "moved in");
}

TEST(BlockingTest, RethrowsTheException) {
  auto body = []() -> Lazy<int> {
    co_return co_await blocking([]() -> int { throw std::invalid_argument("from fn"); });
  };
  try {
    syncAwait(body());
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "from fn");
  }
}

TEST(BlockingTest, RunsOffTheAwaitingThread) {
  const std::thread::id self = threadId();
  const std::thread::id ran = syncAwait(blocking([] { return threadId(); }));
  EXPECT_NE(ran, self);
}

TEST(BlockingTest, DestroysTheFunctionWithTheAwait) {
  Counted::reset();
  syncAwait(blocking([c = Counted()] { return 1; }));
  EXPECT_EQ(Counted::alive(), 0);
}

// --- where the coroutine resumes -------------------------------------------------------

TEST(BlockingTest, TaskResumesOnItsPool) {
  ThreadPool pool(2, "tasks");
  auto body = [&]() -> Lazy<bool> {
    ThreadPool* during = co_await blocking([] { return currentPool(); });
    EXPECT_EQ(during, nullptr);  // fn ran on the blocking pool, not on a worker
    co_return currentPool() == &pool;
  };
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(syncAwait(body().via(&pool)));
}

TEST(BlockingTest, PlainLazyOnAPoolWorkerResumesOnThatPool) {
  ThreadPool pool(2, "plain");
  std::atomic<int> done{0};
  std::atomic<bool> onPool{false};
  // fn waits until the Lazy has suspended (start() returned on the worker): a fn that
  // finished first would have the Lazy continue on the worker without suspending, and
  // the test would prove nothing.
  std::latch suspended(1);
  auto body = [&]() -> Lazy<void> {
    co_await blocking([&] { suspended.wait(); });
    onPool = currentPool() == &pool;
  };
  pool.schedule([&] {
    body().start([&](Try<void> result) {
      EXPECT_TRUE(result.hasValue());
      done = 1;
    });
    suspended.count_down();
  });
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  EXPECT_TRUE(onPool.load());
}

TEST(BlockingTest, PlainLazyElsewhereResumesOnTheBlockingThread) {
  // fn waits until the Lazy has suspended (start() returned): a fn that finished first
  // would have the Lazy continue on this thread, without suspending.
  std::latch suspended(1);
  std::atomic<int> done{0};
  std::atomic<bool> sameThread{false};
  auto body = [&]() -> Lazy<void> {
    const std::thread::id ran = co_await blocking([&] {
      suspended.wait();
      return threadId();
    });
    sameThread = ran == threadId();
  };
  body().start([&](Try<void> result) {
    EXPECT_TRUE(result.hasValue());
    done = 1;
  });
  suspended.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  EXPECT_TRUE(sameThread.load());
}

TEST(BlockingTest, FiberResumesOnItsPool) {
  ThreadPool pool(2, "fibers");
  auto future = spawnFiber(&pool, [&] {
    const int v = weft::await(blocking([] { return 7; }));
    return v == 7 && currentPool() == &pool;
  });
  EXPECT_TRUE(syncAwait(std::move(future)));
}

// An executor that refuses everything, as one shut down while fn ran does.
class RefusingExecutor final : public Executor {
 public:
  RefusingExecutor() : Executor("refusing") {}
  using Executor::schedule;
  void schedule(std::coroutine_handle<>) override { throw ExecutorShutDown(name()); }
  bool currentThreadInExecutor() const noexcept override { return false; }

 private:
  void scheduleJob(detail::Job* job) override {
    job->complete(job, false);
    throw ExecutorShutDown(name());
  }
};

TEST(BlockingTest, RefusedResumptionContinuesOnTheBlockingThreadWithTheValue) {
  RefusingExecutor refusing;
  std::latch suspended(1);
  std::atomic<int> value{0}, done{0};
  std::atomic<bool> onBlockingThread{false};
  auto body = [&]() -> Lazy<void> {
    value = co_await blocking([&] {
      suspended.wait();
      return 9;
    });
    onBlockingThread = BlockingPool::current() == &BlockingPool::defaultPool();
  };
  Lazy<void> lazy = body();
  detail::LazyAccess::handle(lazy).promise().setExecutor(&refusing);
  std::move(lazy).start([&](Try<void> result) {
    EXPECT_TRUE(result.hasValue());
    done = 1;
  });
  suspended.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  EXPECT_EQ(value.load(), 9);
  EXPECT_TRUE(onBlockingThread.load());
}

// --- the ThreadPool the coroutine resumes on is destroyed --------------------------------

// Once per I/O backend: the shutdown of a pool whose workers have io_uring loops parks
// them there, and such a pool must wait for the hold of a running call too.
class BlockingShutdownTest : public test::IoBackendTest {};
INSTANTIATE_TEST_SUITE_P(Backends, BlockingShutdownTest, test::kIoBackends, test::ioBackendName);

// Sleeps on its Task's pool until the pool's shutdown ends the sleep (it stops the pool's
// timers first), then sets `begun`: a witness that the shutdown has begun.
Lazy<void> setWhenShutDownBegins(std::atomic<bool>& begun) {
  try {
    co_await sleep(std::chrono::hours(1));
  } catch (const ExecutorShutDown&) {
  }
  begun = true;
}

// What a coroutine's co_await of blocking() ended with.
enum Outcome : int { kPending, kShutDown, kValue, kOther };

TEST_P(BlockingShutdownTest, AQueuedCallEndsWithExecutorShutDownAndItsFnNeverRuns) {
  Watchdog watchdog(60s,
                    "BlockingShutdownTest.AQueuedCallEndsWithExecutorShutDownAndItsFnNeverRuns");
  BlockingPool blockingPool(1, 10s, "queued");
  std::latch started(1), release(1);
  std::atomic<bool> occupied{true};
  auto occupy = [&]() -> Lazy<void> {
    co_await blocking(blockingPool, [&] {
      started.count_down();
      release.wait();
    });
  };
  occupy().start([&](Try<void>) { occupied = false; });  // no executor: not on the pool
  started.wait();
  std::atomic<bool> fnRan{false}, resumedOnPool{false};
  std::atomic<int> outcome{kPending};
  ThreadPool* doomed = nullptr;
  // Declared before the pool, which runs the coroutine until its destructor returns.
  auto body = [&]() -> Lazy<void> {
    try {
      co_await blocking(blockingPool, [&] { fnRan = true; });
      outcome = kValue;
    } catch (const ExecutorShutDown&) {
      outcome = kShutDown;
    } catch (...) {
      outcome = kOther;
    }
    resumedOnPool = currentPool() == doomed;
  };
  auto pool = std::make_unique<ThreadPool>(options(1, "doomed"));
  doomed = pool.get();
  body().via(doomed).start([](Try<void>) {});
  EXPECT_TRUE(eventually([&] { return blockingPool.queuedCount() == 1; }));
  pool.reset();  // withdraws the queued call; does not wait for the unrelated one
  EXPECT_EQ(outcome.load(), kShutDown);
  EXPECT_TRUE(resumedOnPool.load());  // during the pool's drain, on its worker
  EXPECT_EQ(blockingPool.queuedCount(), 0u);
  EXPECT_TRUE(occupied.load());
  release.count_down();
  blockingPool.shutdown();  // runs whatever is still queued
  EXPECT_FALSE(occupied.load());
  EXPECT_FALSE(fnRan.load());
}

TEST_P(BlockingShutdownTest, ARunningCallIsWaitedForAndResumesOnThePoolWithItsValue) {
  Watchdog watchdog(60s,
                    "BlockingShutdownTest.ARunningCallIsWaitedForAndResumesOnThePoolWithItsValue");
  BlockingPool blockingPool(1, 10s, "running");
  std::latch started(1), release(1);
  std::atomic<bool> shutdownBegun{false}, resumedOnPool{false}, finished{false};
  std::atomic<int> value{0};
  ThreadPool* doomed = nullptr;
  // Declared before the pool, which runs the coroutine until its destructor returns.
  auto body = [&]() -> Lazy<void> {
    value = co_await blocking(blockingPool, [&] {
      started.count_down();
      release.wait();
      return 7;
    });
    resumedOnPool = currentPool() == doomed;
  };
  auto pool = std::make_unique<ThreadPool>(options(1, "doomed"));
  doomed = pool.get();
  setWhenShutDownBegins(shutdownBegun).via(doomed).start([](Try<void>) {});
  body().via(doomed).start([&](Try<void> result) {
    EXPECT_TRUE(result.hasValue());
    finished = true;
  });
  started.wait();
  std::thread destroyer([&] { pool.reset(); });  // waits for fn
  // fn finishes once the shutdown has begun, so that its completion meets it.
  EXPECT_TRUE(eventually([&] { return shutdownBegun.load(); }));
  release.count_down();
  destroyer.join();
  EXPECT_TRUE(finished.load());  // the destructor returned after the coroutine had finished
  EXPECT_EQ(value.load(), 7);
  EXPECT_TRUE(resumedOnPool.load());
}

// Calls racing the shutdown: their functions finishing, their cancellation, the guard.
// Whatever wins, every coroutine has finished when the destructor returns, and a call
// whose fn ran returns its value.
TEST_P(BlockingShutdownTest, EveryCallEndsBeforeTheDestructorReturns) {
  Watchdog watchdog(120s, "BlockingShutdownTest.EveryCallEndsBeforeTheDestructorReturns");
  BlockingPool blockingPool(2, 10s, "race");
  const int rounds = test::reducedIoScale() ? 20 : 100;
  constexpr int kCalls = 8;
  for (int round = 0; round < rounds; ++round) {
    std::atomic<int> started{0}, ran{0}, values{0}, shutDowns{0}, cancels{0}, finished{0};
    CancellationSource source;
    // Before the pool: the coroutines refer to it until the pool's destructor returns.
    auto body = [&]() -> Lazy<void> {
      try {
        ++started;
        values += co_await blocking(blockingPool, [&] {
          ++ran;
          std::this_thread::yield();
          return 1;
        });
      } catch (const ExecutorShutDown&) {
        ++shutDowns;
      } catch (const OperationCancelled&) {
        ++cancels;
      }
    };
    {
      ThreadPool pool(options(2, "race"));
      for (int i = 0; i < kCalls; ++i) {
        Lazy<void> call = i % 2 == 0 ? body() : withCancellation(source.token(), body());
        std::move(call).via(&pool).start([&](Try<void> result) {
          EXPECT_TRUE(result.hasValue());
          ++finished;
        });
      }
      while (started.load() != kCalls) std::this_thread::yield();
      if (round % 2 == 0) source.requestCancellation();
    }  // destroys the pool while calls are queued, running, finishing or cancelled
    ASSERT_EQ(finished.load(), kCalls) << "round " << round;
    EXPECT_EQ(values.load() + shutDowns.load() + cancels.load(), kCalls);
    EXPECT_EQ(values.load(), ran.load());  // fn's effect is never lost
  }
  blockingPool.shutdown();
}

TEST(BlockingShutdownFileTest, AQueuedReadAtOnEpollEndsWithExecutorShutDown) {
  Watchdog watchdog(60s, "BlockingShutdownFileTest.AQueuedReadAtOnEpollEndsWithExecutorShutDown");
  // A procfs file: it takes offsets, and refuses RWF_NOWAIT reads (EOPNOTSUPP), so that
  // on epoll File's read goes to the default blocking pool (a regular file's cached data
  // would be read at once, docs/io.md "Files"): bound to one thread, held busy, so that
  // the read waits in its queue.
  const std::string path = "/proc/self/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const File file(fd, path);
  BlockingPool& defaultPool = BlockingPool::defaultPool();
  const std::size_t bound = defaultPool.maxThreads();
  defaultPool.setMaxThreads(1);
  struct RestoreBound {
    BlockingPool& pool;
    std::size_t bound;
    ~RestoreBound() { pool.setMaxThreads(bound); }
  } restore{defaultPool, bound};
  ASSERT_TRUE(eventually([&] { return defaultPool.threadCount() <= 1; }));
  std::latch started(1), release(1);
  std::atomic<bool> occupied{true};
  auto occupy = [&]() -> Lazy<void> {
    co_await blocking([&] {
      started.count_down();
      release.wait();
    });
  };
  occupy().start([&](Try<void>) { occupied = false; });
  started.wait();
  std::atomic<int> outcome{kPending};
  std::byte buffer[16];
  // Declared before the pool, which runs the coroutine until its destructor returns.
  auto body = [&]() -> Lazy<void> {
    try {
      (void)co_await file.readAt(buffer, 0);
      outcome = kValue;
    } catch (const ExecutorShutDown&) {
      outcome = kShutDown;
    } catch (...) {
      outcome = kOther;
    }
  };
  auto pool =
      std::make_unique<ThreadPool>(ThreadPoolOptions{1, "doomed", IoBackendChoice::kEpoll});
  body().via(pool.get()).start([](Try<void>) {});
  EXPECT_TRUE(eventually([&] { return defaultPool.queuedCount() == 1; }));
  pool.reset();
  EXPECT_EQ(outcome.load(), kShutDown);
  EXPECT_EQ(defaultPool.queuedCount(), 0u);
  release.count_down();
  EXPECT_TRUE(eventually([&] { return !occupied.load(); }));
}

// --- the pool ---------------------------------------------------------------------------

TEST(BlockingPoolTest, RunsAtMostItsBoundAtOnce) {
  Watchdog watchdog(60s, "BlockingPoolTest.RunsAtMostItsBoundAtOnce");
  constexpr int kBound = 4;
  BlockingPool pool(kBound, 10s, "bounded");
  std::latch gate(1);
  std::atomic<int> running{0}, most{0}, done{0};
  auto call = [&]() -> Lazy<void> {
    co_await blocking(pool, [&] {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      gate.wait();
      --running;
    });
  };
  for (int i = 0; i < 2 * kBound; ++i) {
    call().start([&](Try<void> result) {
      EXPECT_TRUE(result.hasValue());
      ++done;
    });
  }
  ASSERT_TRUE(eventually([&] { return running.load() == kBound; }));
  EXPECT_EQ(pool.queuedCount(), std::size_t{kBound});  // the others wait in the queue
  EXPECT_EQ(pool.threadCount(), std::size_t{kBound});
  EXPECT_EQ(running.load(), kBound);
  gate.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 2 * kBound; }));
  EXPECT_EQ(most.load(), kBound);
}

TEST(BlockingPoolTest, RunsQueuedCallsInOrder) {
  BlockingPool pool(1, 10s, "fifo");
  std::latch gate(1);
  std::vector<int> order;  // written by the pool's one thread only
  std::atomic<int> done{0};
  auto call = [&](int i) -> Lazy<void> {
    co_await blocking(pool, [&, i] {
      if (i == 0) gate.wait();
      order.push_back(i);
    });
  };
  for (int i = 0; i < 5; ++i) call(i).start([&](Try<void>) { ++done; });
  gate.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 5; }));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(BlockingPoolTest, IdleThreadsRetire) {
  BlockingPool pool(3, 50ms, "retiring");
  std::latch started(3), gate(1);
  std::atomic<int> done{0};
  auto call = [&]() -> Lazy<void> {
    co_await blocking(pool, [&] {
      started.count_down();
      gate.wait();
    });
  };
  for (int i = 0; i < 3; ++i) call().start([&](Try<void>) { ++done; });
  started.wait();
  EXPECT_EQ(pool.threadCount(), 3u);
  gate.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 3; }));
  EXPECT_TRUE(eventually([&] { return pool.threadCount() == 0; }));
  // Started again on demand.
  EXPECT_EQ(syncAwait(blocking(pool, [] { return 4; })), 4);
}

TEST(BlockingPoolTest, ShutdownRunsQueuedCallsThenRefuses) {
  BlockingPool pool(1, 10s, "closing");
  std::latch started(1), gate(1);
  std::atomic<int> ran{0}, done{0};
  auto call = [&](int i) -> Lazy<void> {
    const int v = co_await blocking(pool, [&, i] {
      if (i == 0) {
        started.count_down();
        gate.wait();
      }
      ++ran;
      return i;
    });
    EXPECT_EQ(v, i);
  };
  for (int i = 0; i < 3; ++i) {
    call(i).start([&](Try<void> result) {
      EXPECT_TRUE(result.hasValue());
      ++done;
    });
  }
  started.wait();
  EXPECT_EQ(pool.queuedCount(), 2u);
  std::atomic<pid_t> closerId{0};
  std::thread closer([&] {
    closerId = test::currentThreadId();
    pool.shutdown();
  });
  // Hand-shake: the closer sleeps in the kernel, in shutdown() waiting for the running
  // call (or on a lock on its way there: the probes below then go on until it has begun).
  ASSERT_TRUE(test::yieldUntil([&] { return closerId.load() != 0; }));
  ASSERT_TRUE(test::waitUntilBlocked(closerId.load()));
  // A call made once shutdown() has begun is refused (synchronously: the callback runs
  // inside start()); the ones made before it are queued, and run.
  std::atomic<int> probesRan{0};
  std::string refusal;
  while (refusal.empty()) {
    auto probe = [&]() -> Lazy<void> { co_await blocking(pool, [] {}); };
    probe().start([&](Try<void> result) {
      if (!result.hasException()) {
        ++probesRan;
        return;
      }
      try {
        std::rethrow_exception(result.exception());
      } catch (const ExecutorShutDown& e) {
        refusal = e.what();
      } catch (...) {
        ADD_FAILURE() << "another exception";
      }
    });
    if (refusal.empty()) std::this_thread::yield();
  }
  EXPECT_NE(refusal.find("'closing'"), std::string::npos) << refusal;
  gate.count_down();
  closer.join();
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(pool.threadCount(), 0u);
}

TEST(BlockingPoolTest, RaisingTheBoundStartsThreadsForQueuedCalls) {
  BlockingPool pool(1, 10s, "raised");
  std::latch gate(1), bothRunning(2);
  std::atomic<int> done{0};
  auto call = [&]() -> Lazy<void> {
    co_await blocking(pool, [&] {
      bothRunning.count_down();
      gate.wait();
    });
  };
  for (int i = 0; i < 2; ++i) call().start([&](Try<void>) { ++done; });
  ASSERT_TRUE(eventually([&] { return pool.queuedCount() == 1; }));
  pool.setMaxThreads(2);
  bothRunning.wait();  // hangs (watchdog: the test timeout) if the second never starts
  gate.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 2; }));
  EXPECT_THROW(pool.setMaxThreads(0), std::invalid_argument);
}

// --- cancellation -----------------------------------------------------------------------

TEST(BlockingCancelTest, BeforeStartFnNeverRuns) {
  BlockingPool pool(1, 10s, "cancel");
  std::latch started(1), gate(1);
  std::atomic<bool> secondRan{false};
  std::atomic<int> done{0};
  auto occupy = [&]() -> Lazy<void> {
    co_await blocking(pool, [&] {
      started.count_down();
      gate.wait();
    });
  };
  occupy().start([&](Try<void>) { ++done; });
  started.wait();
  CancellationSource source;
  Try<int> outcome;
  bool finished = false;
  auto second = [&]() -> Lazy<int> {
    co_return co_await blocking(pool, [&] {
      secondRan = true;
      return 1;
    });
  };
  withCancellation(source.token(), second()).start([&](Try<int> result) {
    outcome = std::move(result);
    finished = true;
  });
  EXPECT_EQ(pool.queuedCount(), 1u);
  EXPECT_FALSE(finished);
  source.requestCancellation();  // no executor: resumed inline, here
  EXPECT_TRUE(finished);
  EXPECT_EQ(pool.queuedCount(), 0u);
  EXPECT_THROW(outcome.value(), OperationCancelled);
  gate.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  EXPECT_FALSE(secondRan.load());
}

TEST(BlockingCancelTest, AlreadyCancelledNeverQueues) {
  CancellationSource source;
  source.requestCancellation();
  std::atomic<bool> ran{false};
  auto body = [&]() -> Lazy<void> { co_await blocking([&] { ran = true; }); };
  EXPECT_THROW(syncAwait(withCancellation(source.token(), body())), OperationCancelled);
  EXPECT_FALSE(ran.load());
}

TEST(BlockingCancelTest, AfterStartTheValueIsReturned) {
  ThreadPool tasks(1, "after-start");
  BlockingPool pool(1, 10s, "after-start");
  std::latch started(1), gate(1);
  CancellationSource source;
  auto body = [&]() -> Lazy<int> {
    co_return co_await blocking(pool, [&] {
      started.count_down();
      gate.wait();
      return 11;
    });
  };
  std::thread canceller([&] {
    started.wait();
    source.requestCancellation();  // too late: fn runs on
    gate.count_down();
  });
  EXPECT_EQ(syncAwait(withCancellation(source.token(), body()).via(&tasks)), 11);
  canceller.join();
}

TEST(BlockingCancelTest, RacesResumeExactlyOnce) {
  Watchdog watchdog(120s, "BlockingCancelTest.RacesResumeExactlyOnce");
  ThreadPool tasks(2, "race");
  BlockingPool pool(2, 10s, "race");
  std::atomic<int> ran{0}, values{0}, cancelled{0};
  constexpr int kRounds = 2000;
  for (int i = 0; i < kRounds; ++i) {
    CancellationSource source;
    std::atomic<bool> cancelDone{false};
    auto body = [&]() -> Lazy<void> {
      try {
        const int v = co_await blocking(pool, [&] {
          ++ran;
          return 1;
        });
        values += v;
      } catch (const OperationCancelled&) {
        ++cancelled;
      }
    };
    tasks.schedule([&] {
      source.requestCancellation();
      cancelDone = true;
    });
    syncAwait(withCancellation(source.token(), body()).via(&tasks));
    while (!cancelDone.load()) std::this_thread::yield();
  }
  EXPECT_EQ(values.load() + cancelled.load(), kRounds);  // one outcome per call
  EXPECT_EQ(ran.load(), values.load());                  // fn ran iff its value came back
  EXPECT_EQ(pool.queuedCount(), 0u);
}

TEST(BlockingCancelTest, WithTimeoutReturnsTheValueWhenFnFinishesFirst) {
  ThreadPool tasks(2, "timeout");
  auto call = []() -> Lazy<int> { co_return co_await blocking([] { return 5; }); };
  EXPECT_EQ(syncAwait(withTimeout(call(), 10s).via(&tasks)), 5);
}

TEST(BlockingCancelTest, WithTimeoutKeepsTheValueOfAStartedFn) {
  ThreadPool tasks(2, "timeout");
  test::ManualTimerExecutor timers(tasks);  // the timeout fires when the test says
  BlockingPool pool(1, 10s, "timeout");
  syncAwait(blocking(pool, [] {}));  // a thread is ready: fn starts at once
  std::atomic<bool> ran{false};
  auto call = [&]() -> Lazy<int> {
    const CancellationToken token = co_await currentCancellationToken();
    // HACK(gcc-12): a lambda temporary written in a co_await's operand is destroyed twice
    // by g++ 12.2 when its captures are copied rather than moved into the awaitable (a
    // const capture, as `token` is here): the token's reference was released twice, and
    // its state freed while withTimeout still held it. Named, the lambda is moved once
    // and destroyed once.
    auto fn = [&ran, token] {
      ran = true;
      // Runs on until the timeout has fired (and cancelled the call): too late to stop it.
      // Woken by a callback on the token (the watchdog bounds a timeout that never fires).
      std::atomic<bool> cancelled{false};
      CancellationCallback onCancel(token, [&cancelled] {
        cancelled.store(true);
        cancelled.notify_all();
      });
      cancelled.wait(false);
      return 6;
    };
    co_return co_await blocking(pool, std::move(fn));
  };
  // Hand-shake: the timeout's timer is held until fn has started, then fired. So the
  // timeout always comes while fn runs, whatever the machine's speed, and fn's value
  // must come back rather than TimeoutError.
  std::thread firer([&] {
    while (!ran) std::this_thread::yield();
    ASSERT_TRUE(timers.waitUntilArmed(1));
    timers.fireAll();
  });
  Watchdog watchdog(60s, "BlockingCancelTest.WithTimeoutKeepsTheValueOfAStartedFn");
  EXPECT_EQ(syncAwait(withTimeout(call(), 20ms).via(&timers)), 6);
  firer.join();
}

TEST(BlockingCancelTest, WithTimeoutOfAQueuedCallTimesOut) {
  ThreadPool tasks(2, "timeout");
  BlockingPool pool(1, 10s, "timeout");
  std::latch started(1), gate(1);
  std::atomic<bool> secondRan{false};
  std::atomic<int> done{0};
  auto occupy = [&]() -> Lazy<void> {
    co_await blocking(pool, [&] {
      started.count_down();
      gate.wait();
    });
  };
  occupy().start([&](Try<void>) { ++done; });
  started.wait();
  auto call = [&]() -> Lazy<int> {
    co_return co_await blocking(pool, [&] {
      secondRan = true;
      return 1;
    });
  };
  EXPECT_THROW(syncAwait(withTimeout(call(), 5ms).via(&tasks)), TimeoutError);
  gate.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  EXPECT_FALSE(secondRan.load());
}

// --- destruction while suspended ---------------------------------------------------------

TEST(BlockingDestroyTest, DestroyingAQueuedCallWithdrawsIt) {
  Counted::reset();
  BlockingPool pool(1, 10s, "withdraw");
  std::latch started(1), gate(1);
  std::atomic<int> done{0};
  std::atomic<bool> secondRan{false};
  auto occupy = [&]() -> Lazy<void> {
    co_await blocking(pool, [&] {
      started.count_down();
      gate.wait();
    });
  };
  occupy().start([&](Try<void>) { ++done; });
  started.wait();
  {
    auto queued = [&]() -> Lazy<void> {
      // Named first: g++ 12 destroys a lambda temporary with an init-capture inside the
      // co_await expression twice when the suspended frame is destroyed.
      auto fn = [&, c = Counted()] { secondRan = true; };
      co_await blocking(pool, std::move(fn));
    };
    Lazy<void> lazy = queued();
    startSuspended(lazy);
    EXPECT_EQ(pool.queuedCount(), 1u);
    EXPECT_GE(Counted::alive(), 1);  // fn (and the moved-from copies it was made from)
  }  // destroys the suspended frame
  EXPECT_EQ(pool.queuedCount(), 0u);
  EXPECT_EQ(Counted::alive(), 0);  // fn's captures went with it
  gate.count_down();
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  EXPECT_FALSE(secondRan.load());
  EXPECT_EQ(syncAwait(blocking(pool, [] { return 2; })), 2);  // the pool goes on
}

TEST(BlockingDestroyDeathTest, DestroyingACallWhoseFnStartedAborts) {
  EXPECT_DEATH(
      {
        BlockingPool pool(1, 10s, "death");
        std::latch started(1);
        std::latch never(1);
        auto body = [&]() -> Lazy<void> {
          co_await blocking(pool, [&] {
            started.count_down();
            never.wait();
          });
        };
        Lazy<void> lazy = body();
        startSuspended(lazy);
        started.wait();
        lazy = Lazy<void>();
      },
      "weft: a coroutine was destroyed while suspended in blocking\\(\\) after its wake-up "
      "had been claimed \\(its function had started on the pool");
}

// The default pool at process exit: its idle threads end, a thread still in a call is not
// waited for, and nothing crashes. In a forked child whose default pool has no thread yet
// (death test suites run first); a child must not use threads it does not have, so with
// --gtest_repeat the later rounds skip.
#define WEFT_SKIP_IF_DEFAULT_POOL_HAS_THREADS()                                     \
  if (BlockingPool::defaultPool().threadCount() != 0) {                            \
    GTEST_SKIP() << "the default pool has threads: a forked child could not use it"; \
  }

TEST(BlockingExitDeathTest, ExitWithIdleDefaultPoolThreads) {
  WEFT_SKIP_IF_DEFAULT_POOL_HAS_THREADS();
  EXPECT_EXIT(
      {
        const int v = syncAwait(blocking([] { return 3; }));
        std::exit(v == 3 && BlockingPool::defaultPool().threadCount() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(BlockingExitDeathTest, ExitDoesNotWaitForARunningCall) {
  WEFT_SKIP_IF_DEFAULT_POOL_HAS_THREADS();
  EXPECT_EXIT(
      {
        static std::latch started(1);
        static std::latch never(1);
        auto body = []() -> Lazy<void> {
          co_await blocking([] {
            started.count_down();
            never.wait();
          });
        };
        body().start([](Try<void>) {});
        started.wait();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(BlockingDestroyDeathTest, DestroyingACallWhoseCancellationWasDeliveredAborts) {
  EXPECT_DEATH(
      {
        BlockingPool pool(1, 10s, "death");
        std::latch started(1);
        std::latch gate(1);
        auto occupy = [&]() -> Lazy<void> {
          co_await blocking(pool, [&] {
            started.count_down();
            gate.wait();
          });
        };
        occupy().start([](Try<void>) {});
        started.wait();
        test::ManualExecutor manual;
        CancellationSource source;
        CancellationToken token = source.token();
        auto body = [&]() -> Lazy<void> { co_await blocking(pool, [] {}); };
        Lazy<void> lazy = body();
        startSuspended(lazy, &manual, &token);  // queued behind `occupy`
        source.requestCancellation();  // claims the call; its resumption waits in `manual`
        lazy = Lazy<void>();
      },
      "weft: a coroutine was destroyed while suspended in blocking\\(\\) after its wake-up "
      "had been claimed \\(its cancellation had been delivered");
}

TEST(BlockingDestroyDeathTest, ShutdownFromOwnThreadAborts) {
  EXPECT_DEATH(
      {
        BlockingPool pool(1, 10s, "self");
        syncAwait(blocking(pool, [&] { pool.shutdown(); }));
      },
      "weft: BlockingPool 'self' shut down \\(or destroyed\\) from one of its own threads");
}

}  // namespace
}  // namespace weft
