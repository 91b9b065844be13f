#include "weft/stackful/spawn_fiber.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/fiber.h"
#include "weft/stackful/fiber_local.h"
#include "test/support/counted.h"
#include "test/support/manual_event.h"
#include "test/support/wait_until.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

// kDeathTestStyleNote: death tests use the "fast" style (fork at the EXPECT_DEATH): the
// "threadsafe" style re-executes the test binary, which fails under qemu-user without
// binfmt_misc (the aarch64 CI step). No test leaves threads running, and death test
// suites run first, so forking here is safe.

using namespace std::chrono_literals;
using test::Counted;
using test::ManualEvent;
using test::Watchdog;

// pthread_self() is __attribute__((const)): ask through an opaque call each time (see
// fiber_test.cc).
[[gnu::noinline]] bool inPool(ThreadPool& pool) {
  asm volatile("");
  return pool.currentThreadInExecutor();
}

Lazy<int> answerLater(int v) { co_return v * 2; }

Lazy<int> throwLater() {
  throw std::runtime_error("from a Lazy");
  co_return 0;
}

TEST(SpawnFiberTest, ResultReachesSyncAwait) {
  ThreadPool pool(2);
  EXPECT_EQ(syncAwait(spawnFiber(&pool, [] { return 42; })), 42);
}

TEST(SpawnFiberTest, ExceptionReachesTheAwaiter) {
  ThreadPool pool(2);
  auto future = spawnFiber(&pool, []() -> int { throw std::invalid_argument("in the fiber"); });
  try {
    syncAwait(std::move(future));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "in the fiber");
  }
}

TEST(SpawnFiberTest, RunsOnTheExecutor) {
  ThreadPool pool(2);
  EXPECT_TRUE(syncAwait(spawnFiber(&pool, [&] { return inPool(pool); })));
}

TEST(SpawnFiberTest, CoAwaitedFromATaskResumesOnTheTasksExecutor) {
  ThreadPool a(1, "a"), b(1, "b");
  auto task = [&]() -> Lazy<bool> {
    int v = co_await spawnFiber(&b, [&] { return inPool(b) ? 5 : -1; });
    co_return v == 5 && inPool(a);
  };
  EXPECT_TRUE(syncAwait(task(), &a));
}

TEST(SpawnFiberTest, AwaitALazyReturnsItsValue) {
  ThreadPool pool(2);
  int v = syncAwait(spawnFiber(&pool, [] { return await(answerLater(21)); }));
  EXPECT_EQ(v, 42);
}

TEST(SpawnFiberTest, AwaitRethrowsTheAwaitedException) {
  ThreadPool pool(2);
  auto result = syncAwait(spawnFiber(&pool, [] {
    try {
      await(throwLater());
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  }));
  EXPECT_EQ(result, "from a Lazy");
}

TEST(SpawnFiberTest, AwaitDeepInsideOrdinaryCalls) {
  ThreadPool pool(2);
  struct Parser {
    static int depth(int n) {
      if (n == 0) return await(answerLater(1));  // suspends 200 plain frames deep
      return depth(n - 1) + 1;
    }
  };
  EXPECT_EQ(syncAwait(spawnFiber(&pool, [] { return Parser::depth(200); })), 202);
}

TEST(SpawnFiberTest, AwaitATaskOnAnotherExecutorComesBackToOurs) {
  ThreadPool mine(1, "mine"), other(1, "other");
  auto result = syncAwait(spawnFiber(&mine, [&] {
    auto onOther = [&]() -> Lazy<bool> { co_return inPool(other); };
    bool ranThere = await(onOther().via(&other));
    return ranThere && inPool(mine);
  }));
  EXPECT_TRUE(result);
}

// A foreign awaitable completes on a thread outside the pool: the fiber still resumes
// on its executor, not on that thread.
TEST(SpawnFiberTest, ForeignAwaitableResumesTheFiberOnItsExecutor) {
  Watchdog watchdog(60s, "ForeignAwaitableResumesTheFiberOnItsExecutor");
  ThreadPool pool(2);
  ManualEvent event;
  auto future = spawnFiber(&pool, [&] {
    await(event);
    return inPool(pool);
  });
  test::waitUntil([&] { return event.waiting() == 1; });  // the fiber waits on the event
  std::thread([&] { event.release(); }).join();
  EXPECT_TRUE(syncAwait(std::move(future)));
}

TEST(SpawnFiberTest, AwaitGivesTheFibersExecutorToExecutorAwareAwaitables) {
  ThreadPool pool(2);
  Executor* seen = syncAwait(spawnFiber(&pool, [] { return await(currentExecutor()); }));
  EXPECT_EQ(seen, &pool);
}

TEST(SpawnFiberTest, AwaitGivesTheFibersCancellationToken) {
  ThreadPool pool(2);
  CancellationSource source;
  SpawnFiberOptions options;
  options.cancellationToken = source.token();
  source.requestCancellation();
  bool cancelled = syncAwait(spawnFiber(
      &pool, [] { return await(currentCancellationToken()).isCancellationRequested(); },
      std::move(options)));
  EXPECT_TRUE(cancelled);
}

// An awaiter that records how await() drives it. `ready` and `suspendResult` choose the
// path; `throwOnSuspend` makes await_suspend throw. Resumes the awaiting coroutine inline.
struct ProbeAwaiter {
  bool ready = false;
  bool suspendResult = true;
  bool throwOnSuspend = false;
  int suspends = 0;
  bool resumedInFiber = false;

  bool await_ready() const noexcept { return ready; }
  bool await_suspend(std::coroutine_handle<> awaiting) {
    ++suspends;
    if (throwOnSuspend) throw std::runtime_error("from await_suspend");
    if (!suspendResult) return false;
    awaiting.resume();  // completes at once, from the driver's side
    return true;
  }
  int await_resume() noexcept {
    resumedInFiber = this_fiber::inFiber();
    return 7;
  }
};

TEST(SpawnFiberTest, AwaitOfAReadyAwaitableDoesNotSuspend) {
  ThreadPool pool(1);
  ProbeAwaiter probe{.ready = true};
  EXPECT_EQ(syncAwait(spawnFiber(&pool, [&] { return await(probe); })), 7);
  EXPECT_EQ(probe.suspends, 0);
  EXPECT_TRUE(probe.resumedInFiber);
}

TEST(SpawnFiberTest, AwaitResumesOnTheFibersStackAfterSuspending) {
  ThreadPool pool(1);
  ProbeAwaiter probe;
  EXPECT_EQ(syncAwait(spawnFiber(&pool, [&] { return await(probe); })), 7);
  EXPECT_EQ(probe.suspends, 1);
  EXPECT_TRUE(probe.resumedInFiber);
}

TEST(SpawnFiberTest, AwaitSuspendReturningFalseContinuesTheFiber) {
  ThreadPool pool(1);
  ProbeAwaiter probe{.suspendResult = false};
  EXPECT_EQ(syncAwait(spawnFiber(&pool, [&] { return await(probe) + await(answerLater(4)); })),
            15);
  EXPECT_EQ(probe.suspends, 1);
}

TEST(SpawnFiberTest, AwaitSuspendThrowingReachesTheFiberWhichGoesOn) {
  ThreadPool pool(1);
  ProbeAwaiter probe{.throwOnSuspend = true};
  std::string caught = syncAwait(spawnFiber(&pool, [&] {
    std::string what;
    try {
      await(probe);
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    return what + std::to_string(await(answerLater(21)));
  }));
  EXPECT_EQ(caught, "from await_suspend42");
  EXPECT_EQ(probe.suspends, 1);
  EXPECT_FALSE(probe.resumedInFiber);  // await_resume is not called after a throw
}

TEST(SpawnFiberTest, AwaitOutsideAFiberThrows) { EXPECT_THROW(await(answerLater(1)), NotInFiber); }

TEST(SpawnFiberTest, AwaitInAPlainFiberThrows) {
  Fiber<bool> fiber([] {
    try {
      await(answerLater(1));
    } catch (const NotInFiber&) {
      return true;
    }
    return false;
  });
  fiber.resume();
  EXPECT_TRUE(fiber.result());
}

TEST(SpawnFiberTest, YieldAlternatesFibersOnASingleThread) {
  ThreadPool pool(1);
  std::mutex mutex;
  std::vector<char> trace;
  auto body = [&](char name) {
    return [&, name] {
      for (int i = 0; i < 3; ++i) {
        {
          std::lock_guard lock(mutex);
          trace.push_back(name);
        }
        this_fiber::yield();
      }
    };
  };
  // The single worker waits at a gate until both fibers are queued (else it could run
  // all of a before b is spawned); then a runs first, then b, each yielding to the back
  // of the worker's queue.
  std::promise<void> bothSpawned;
  pool.schedule([gate = bothSpawned.get_future().share()] { gate.wait(); });
  auto a = spawnFiber(&pool, body('a'));
  auto b = spawnFiber(&pool, body('b'));
  bothSpawned.set_value();
  syncAwait(std::move(a));
  syncAwait(std::move(b));
  EXPECT_EQ(std::string(trace.begin(), trace.end()), "ababab");
}

TEST(SpawnFiberTest, AwaitAnotherSpawnedFiber) {
  ThreadPool pool(2);
  int v =
      syncAwait(spawnFiber(&pool, [&] { return await(spawnFiber(&pool, [] { return 20; })) + 1; }));
  EXPECT_EQ(v, 21);
}

TEST(SpawnFiberTest, DetachedFiberRunsToTheEnd) {
  Watchdog watchdog(60s, "DetachedFiberRunsToTheEnd");
  std::atomic<bool> finished{false};  // outlives the pool: the notify_all may come late
  ThreadPool pool(2);
  spawnFiber(&pool, [&] {
    await(answerLater(1));
    this_fiber::yield();
    finished = true;
    finished.notify_all();
  }).detach();
  finished.wait(false);  // woken by the fiber's notify_all
}

TEST(SpawnFiberTest, LocalsAreDestroyedWhenTheFiberEnds) {
  Counted::reset();
  {
    ThreadPool pool(2);
    syncAwait(spawnFiber(&pool, [c = Counted()] {
      Counted inside;
      await(answerLater(1));
      (void)c;
    }));
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(SpawnFiberTest, RefusedByAShutDownExecutor) {
  Counted::reset();
  ThreadPool pool(1);
  pool.shutdown();
  EXPECT_THROW((void)spawnFiber(&pool, [c = Counted()] { (void)c; }), ExecutorShutDown);
  EXPECT_EQ(Counted::alive(), 0);
}

// Each fiber creates Lazys in a loop while it moves between the pool's threads: the
// frame allocator's thread-local cache must be looked up on the thread that runs.
TEST(SpawnFiberTest, FiberLocalFollowsTheFiberAcrossThreads) {
  Watchdog watchdog(60s, "FiberLocalFollowsTheFiberAcrossThreads");
  ThreadPool pool(2);
  FiberLocal<int> local;
  constexpr int kFibers = 200;
  std::vector<FiberFuture<bool>> futures;
  for (int i = 0; i < kFibers; ++i) {
    futures.push_back(spawnFiber(&pool, [&local, i] {
      *local = i;
      for (int step = 0; step < 20; ++step) {
        this_fiber::yield();
        if (step % 5 == 0) await(answerLater(step));
        if (*local != i) return false;
      }
      return true;
    }));
  }
  for (auto& f : futures) EXPECT_TRUE(syncAwait(std::move(f)));
}

TEST(SpawnFiberDeathTest, DetachedFiberExceptionIsReported) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        ThreadPool pool(1, "reporter");
        spawnFiber(&pool, [] { throw std::runtime_error("lost?"); }).detach();
        // Stays a sleep: the statement must not end before the report aborts (a statement
        // that returns is "failed to die"); 10 s only bounds a report that never comes.
        std::this_thread::sleep_for(10s);
      },
      "weft: detached fiber [0-9]+ \\(spawnFiber on executor 'reporter'\\) ended with an "
      "exception nobody awaited: lost\\?");
}

// --- Misuse: awaiting twice, syncAwait on the fiber's own executor --------------------------

TEST(SpawnFiberTest, AwaitedFutureIsEmpty) {
  ThreadPool pool(2);
  syncAwait(
      [](ThreadPool* pool) -> Lazy<void> {
        FiberFuture<int> future = spawnFiber(pool, [] { return 3; });
        EXPECT_TRUE(future.valid());
        EXPECT_EQ(co_await std::move(future), 3);
        EXPECT_FALSE(future.valid());  // NOLINT(bugprone-use-after-move): under test
        EXPECT_FALSE(future.ready());  // NOLINT(bugprone-use-after-move): under test
      }(&pool),
      &pool);
}

TEST(SpawnFiberDeathTest, AwaitingAFutureTwiceAborts) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        ThreadPool pool(1);
        syncAwait(
            [](ThreadPool* pool) -> Lazy<void> {
              FiberFuture<int> future = spawnFiber(pool, [] { return 3; });
              (void)co_await std::move(future);
              (void)co_await std::move(future);  // NOLINT(bugprone-use-after-move)
            }(&pool),
            &pool);
      },
      "weft: co_await on an empty FiberFuture \\(already awaited");
}

TEST(SpawnFiberDeathTest, AwaitingAFutureTwiceFromAFiberAborts) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        ThreadPool pool(1);
        syncAwait(spawnFiber(&pool, [&pool] {
          FiberFuture<int> future = spawnFiber(&pool, [] { return 3; });
          int sum = await(std::move(future));
          sum += await(std::move(future));  // NOLINT(bugprone-use-after-move)
          return sum;
        }));
      },
      "weft: co_await on an empty FiberFuture \\(already awaited");
}

// syncAwait on a worker of the fiber's executor throws, before it blocks, whether or not
// the fiber has finished; the future is untouched and can still be awaited.
void expectSyncAwaitOnOwnExecutorThrows(std::size_t threads) {
  Watchdog watchdog(120s, "syncAwait of a FiberFuture on its own executor");
  ThreadPool pool(threads, "own-executor");
  std::string message;
  int value = syncAwait(
      [](ThreadPool* pool, std::string* message) -> Lazy<int> {
        FiberFuture<int> future = spawnFiber(pool, [] { return 7; });
        try {
          (void)syncAwait(std::move(future));
        } catch (const SyncAwaitDeadlock& e) {
          *message = e.what();
        }
        EXPECT_TRUE(future.valid());  // NOLINT(bugprone-use-after-move): not moved on throw
        co_return co_await std::move(future);
      }(&pool, &message),
      &pool);
  EXPECT_EQ(value, 7);
  EXPECT_NE(message.find("would deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("own-executor"), std::string::npos) << message;
}

TEST(SpawnFiberTest, SyncAwaitOnTheFibersOwnSingleThreadExecutorThrows) {
  expectSyncAwaitOnOwnExecutorThrows(1);
}

TEST(SpawnFiberTest, SyncAwaitOnTheFibersOwnTwoThreadExecutorThrows) {
  expectSyncAwaitOnOwnExecutorThrows(2);
}

TEST(SpawnFiberTest, SyncAwaitOnAnotherExecutorsWorkerWaits) {
  ThreadPool fibers(1, "fibers");
  ThreadPool caller(1, "caller");
  int value = syncAwait(
      [](ThreadPool* fibers) -> Lazy<int> {
        co_return syncAwait(spawnFiber(fibers, [] { return 9; }));
      }(&fibers),
      &caller);
  EXPECT_EQ(value, 9);
}

// --- Fibers and Lazy/Task on one pool ------------------------------------------------------

// A one-shot slot for a value: a "foreign" awaitable (it resumes its waiter on the thread
// that puts), so the waiter's executor brings it back to the pool.
class Mailbox {
 public:
  void put(long value) {
    std::coroutine_handle<> waiter;
    {
      std::lock_guard lock(mutex_);
      ++puts_;
      value_ = value;
      waiter = std::exchange(waiter_, nullptr);
    }
    if (waiter) waiter.resume();
  }
  int puts() const {
    std::lock_guard lock(mutex_);
    return puts_;
  }

  struct Take {
    Mailbox* box;
    bool await_ready() const {
      std::lock_guard lock(box->mutex_);
      return box->value_.has_value();
    }
    bool await_suspend(std::coroutine_handle<> waiter) {
      std::lock_guard lock(box->mutex_);
      if (box->value_.has_value()) return false;
      box->waiter_ = waiter;
      return true;
    }
    long await_resume() const {
      std::lock_guard lock(box->mutex_);
      return *box->value_;
    }
  };
  Take take() { return Take{this}; }

 private:
  mutable std::mutex mutex_;
  std::optional<long> value_;
  std::coroutine_handle<> waiter_;
  int puts_ = 0;
};

// 10,000 Tasks and 10,000 fibers on a 2-thread pool: task i hands i to fiber i; fiber j
// hands j back to task (j * 7919) % N (a permutation). Every value must arrive exactly
// once, at the right place.
TEST(SpawnFiberTest, TenThousandFibersAndLazysHandValuesBothWays) {
  Watchdog watchdog(240s, "TenThousandFibersAndLazysHandValuesBothWays");
  constexpr long kN = 10000;
  ThreadPool pool(2);
  std::vector<Mailbox> toFiber(kN), toLazy(kN);
  std::atomic<long> lazyReceived{0}, fiberReceived{0}, misdelivered{0};

  std::vector<FiberFuture<void>> fibers;
  fibers.reserve(kN);
  for (long j = 0; j < kN; ++j) {
    fibers.push_back(spawnFiber(&pool, [&, j] {
      long v = await(toFiber[j].take());
      if (v != j) ++misdelivered;
      ++fiberReceived;
      if (j % 3 == 0) this_fiber::yield();
      toLazy[(j * 7919) % kN].put(j);
    }));
  }
  auto lazyBody = [&](long i) -> Lazy<void> {
    if (i % 2 == 0) co_await yield();
    toFiber[i].put(i);
    long v = co_await toLazy[i].take();
    if ((v * 7919) % kN != i) ++misdelivered;
    ++lazyReceived;
  };
  std::vector<Lazy<void>> lazys;
  lazys.reserve(kN);
  for (long i = 0; i < kN; ++i) lazys.push_back(lazyBody(i));
  // Each Lazy is scheduled on the pool (collectAllPara inherits its executor).
  auto results = syncAwait(collectAllPara(std::move(lazys)), &pool);
  for (auto& r : results) EXPECT_TRUE(r.hasValue());
  for (auto& f : fibers) syncAwait(std::move(f));

  EXPECT_EQ(lazyReceived.load(), kN);
  EXPECT_EQ(fiberReceived.load(), kN);
  EXPECT_EQ(misdelivered.load(), 0);
  for (long i = 0; i < kN; ++i) {
    ASSERT_EQ(toFiber[i].puts(), 1) << i;
    ASSERT_EQ(toLazy[i].puts(), 1) << i;
  }
}

}  // namespace
}  // namespace weft
