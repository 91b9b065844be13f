#include "weft/coro/shared_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/fiber.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/manual_executor.h"
#include "test/support/pool_threads.h"
#include "test/support/start_detached.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualExecutor;
using test::startDetached;
using test::Watchdog;

TEST(SharedMutexTest, SharedHoldersExcludeOnlyWriters) {
  SharedMutex mutex;
  EXPECT_TRUE(mutex.tryLockShared());
  EXPECT_TRUE(mutex.tryLockShared());
  EXPECT_FALSE(mutex.tryLock());
  mutex.unlockShared();
  EXPECT_FALSE(mutex.tryLock());
  mutex.unlockShared();
  EXPECT_TRUE(mutex.tryLock());
  EXPECT_FALSE(mutex.tryLockShared());
  EXPECT_FALSE(mutex.tryLock());
  mutex.unlock();
  EXPECT_TRUE(mutex.tryLockShared());
  mutex.unlockShared();
}

TEST(SharedMutexTest, ScopedGuardsReleaseWhatTheyHold) {
  SharedMutex mutex;
  syncAwait([&]() -> Lazy<> {
    {
      SharedLock reader = co_await mutex.scopedLockShared();
      EXPECT_TRUE(reader.ownsLock());
      EXPECT_FALSE(mutex.tryLock());
      EXPECT_TRUE(mutex.tryLockShared());
      mutex.unlockShared();
    }
    {
      ScopedLock<SharedMutex> writer = co_await mutex.scopedLock();
      EXPECT_FALSE(mutex.tryLockShared());
    }
    co_await mutex.lock();
    mutex.unlock();
    co_await mutex.lockShared();
    mutex.unlockShared();
  }());
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

// Grants in arrival order; consecutive readers at the front go together.
TEST(SharedMutexTest, GrantsInFifoOrderBatchingConsecutiveReaders) {
  SharedMutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  std::string granted;
  std::atomic<int> done{0};
  // Each waiter records its name when granted and keeps the lock; the test releases it.
  auto reader = [&](char name) -> Lazy<> {
    co_await mutex.lockShared();
    granted += name;
  };
  auto writer = [&](char name) -> Lazy<> {
    co_await mutex.lock();
    granted += name;
  };
  startDetached(reader('a'), done);
  startDetached(reader('b'), done);
  startDetached(writer('W'), done);
  startDetached(reader('c'), done);
  startDetached(writer('X'), done);
  EXPECT_EQ(granted, "");
  mutex.unlock();
  EXPECT_EQ(granted, "ab");  // both readers; W waits for them, c waits behind W
  mutex.unlockShared();
  EXPECT_EQ(granted, "ab");
  mutex.unlockShared();
  EXPECT_EQ(granted, "abW");
  mutex.unlock();
  EXPECT_EQ(granted, "abWc");
  mutex.unlockShared();
  EXPECT_EQ(granted, "abWcX");
  mutex.unlock();
  EXPECT_EQ(done.load(), 5);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(SharedMutexTest, AReaderArrivingWhileAWriterWaitsQueuesBehindIt) {
  SharedMutex mutex;
  ASSERT_TRUE(mutex.tryLockShared());
  std::atomic<int> done{0};
  bool writerIn = false;
  auto writer = [&]() -> Lazy<> {
    ScopedLock<SharedMutex> lock = co_await mutex.scopedLock();
    writerIn = true;
  };
  startDetached(writer(), done);
  EXPECT_FALSE(mutex.tryLockShared());  // a writer waits: no new readers
  mutex.unlockShared();
  EXPECT_TRUE(writerIn);
  EXPECT_EQ(done.load(), 1);
}

TEST(SharedMutexTest, ADestroyedWriterAtTheFrontLetsTheReadersBehindItIn) {
  Counted::reset();
  SharedMutex mutex;
  ASSERT_TRUE(mutex.tryLockShared());
  std::atomic<int> done{0};
  bool readerIn = false;
  // Declared before the scope below: the reader runs when that scope ends.
  auto body = [&]() -> Lazy<> {
    Counted local;
    co_await mutex.lock();
  };
  auto reader = [&]() -> Lazy<> {
    co_await mutex.lockShared();
    readerIn = true;
    mutex.unlockShared();
  };
  {
    Lazy<> doomedWriter = body();
    detail::LazyAccess::handle(doomedWriter).resume();
    startDetached(reader(), done);
    EXPECT_FALSE(readerIn);  // queued behind the writer
  }  // the writer's frame is destroyed: the reader no longer has to wait
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_TRUE(readerIn);
  EXPECT_EQ(done.load(), 1);
  mutex.unlockShared();
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(SharedMutexTest, WaitersWithAnExecutorAreScheduledOnIt) {
  SharedMutex mutex;
  ManualExecutor executor;
  ASSERT_TRUE(mutex.tryLock());
  std::atomic<int> done{0};
  auto reader = [&]() -> Lazy<> {
    SharedLock lock = co_await mutex.scopedLockShared();
    co_return;
  };
  reader().via(&executor).start([&](Try<void>) { done.fetch_add(1); });
  reader().via(&executor).start([&](Try<void>) { done.fetch_add(1); });
  executor.runAll();
  mutex.unlock();
  EXPECT_EQ(executor.pending(), 2u);  // granted together, both scheduled
  EXPECT_EQ(done.load(), 0);
  EXPECT_FALSE(mutex.tryLock());
  executor.runAll();
  EXPECT_EQ(done.load(), 2);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(SharedMutexTest, ReadersNeverSeeAWriterHalfWayOnTwoThreads) {
  Watchdog watchdog(120s, "SharedMutexTest.ReadersNeverSeeAWriterHalfWay");
  constexpr int kTasks = 1000;
  constexpr int kRounds = 100;
  ThreadPool pool(2);
  SharedMutex mutex;
  long first = 0, second = 0;  // writers keep them equal; not atomic
  long writes = 0;
  std::atomic<int> readers{0};
  std::atomic<int> writersIn{0};
  std::atomic<int> violations{0};
  auto task = [&](int id) -> Lazy<> {
    for (int r = 0; r < kRounds; ++r) {
      bool hold = (id + r) % 13 == 0;
      if ((id + r) % 4 == 0) {
        ScopedLock<SharedMutex> lock = co_await mutex.scopedLock();
        if (writersIn.fetch_add(1) != 0 || readers.load() != 0) violations.fetch_add(1);
        ++first;
        if (hold) co_await yield();
        ++second;
        ++writes;
        writersIn.fetch_sub(1);
      } else {
        SharedLock lock = co_await mutex.scopedLockShared();
        readers.fetch_add(1);
        if (writersIn.load() != 0) violations.fetch_add(1);
        if (first != second) violations.fetch_add(1);
        if (hold) co_await yield();
        if (first != second) violations.fetch_add(1);
        readers.fetch_sub(1);
      }
    }
  };
  std::vector<Lazy<>> branches;
  for (int i = 0; i < kTasks; ++i) branches.push_back(task(i));
  syncAwait(collectAllPara(std::move(branches)), &pool);
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(writes, long{kTasks} * kRounds / 4);
  EXPECT_EQ(first, writes);
  EXPECT_EQ(second, writes);
}

TEST(SharedMutexCancellationTest, ACancelledWriterNoLongerBlocksTheReadersBehindIt) {
  Counted::reset();
  SharedMutex mutex;
  ASSERT_TRUE(mutex.tryLockShared());
  CancellationSource source;
  std::optional<bool> cancelled;
  auto writer = [&]() -> Lazy<bool> {
    Counted alive;
    try {
      co_await mutex.lock();
    } catch (const OperationCancelled&) {
      co_return true;
    }
    co_return false;
  };
  withCancellation(source.token(), writer()).start([&](Try<bool> r) { cancelled = r.value(); });
  bool readerIn = false;
  std::atomic<int> done{0};
  auto reader = [&]() -> Lazy<> {
    co_await mutex.lockShared();
    readerIn = true;
  };
  startDetached(reader(), done);
  EXPECT_FALSE(readerIn);
  source.requestCancellation();
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_TRUE(*cancelled);
  EXPECT_TRUE(readerIn);  // admitted beside the first reader
  EXPECT_EQ(Counted::alive(), 0);
  mutex.unlockShared();
  mutex.unlockShared();
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

// On ThreadPool(1) these fibers act on their parks before switching out.
static_assert(ResumesOnlyThroughExecutor<detail::SharedMutexLockAwaiter<true, void>>);
class SharedMutexFiberTest : public test::PoolThreadsTest {};

TEST_P(SharedMutexFiberTest, FibersAndLazysReadAndWriteTogether) {
  Watchdog watchdog(120s, "SharedMutexFiberTest.FibersAndLazysReadAndWriteTogether");
  constexpr int kEach = 50;
  constexpr int kRounds = 100;
  ThreadPool pool(GetParam());
  SharedMutex mutex;
  long first = 0, second = 0, writes = 0;  // not atomic: guarded by mutex
  std::atomic<int> violations{0};
  std::vector<FiberFuture<void>> fibers;
  for (int i = 0; i < kEach; ++i) {
    fibers.push_back(spawnFiber(&pool, [&, i] {
      for (int r = 0; r < kRounds; ++r) {
        if ((i + r) % 3 == 0) {
          ScopedLock<SharedMutex> lock = await(mutex.scopedLock());
          ++first;
          if ((i + r) % 7 == 0) this_fiber::yield();
          ++second;
          ++writes;
        } else {
          SharedLock lock = await(mutex.scopedLockShared());
          if (first != second) violations.fetch_add(1);
        }
      }
    }));
  }
  auto lazyBody = [&](int i) -> Lazy<> {
    for (int r = 0; r < kRounds; ++r) {
      if ((i + r) % 3 == 0) {
        ScopedLock<SharedMutex> lock = co_await mutex.scopedLock();
        ++first;
        if ((i + r) % 7 == 0) co_await yield();
        ++second;
        ++writes;
      } else {
        SharedLock lock = co_await mutex.scopedLockShared();
        if (first != second) violations.fetch_add(1);
        if ((i + r) % 11 == 0) co_await yield();
        if (first != second) violations.fetch_add(1);
      }
    }
  };
  std::vector<Lazy<>> lazys;
  for (int i = 0; i < kEach; ++i) lazys.push_back(lazyBody(i));
  syncAwait(collectAllPara(std::move(lazys)), &pool);
  for (auto& fiber : fibers) syncAwait(std::move(fiber));
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(first, writes);
  EXPECT_EQ(second, writes);
  long expectedWrites = 0;
  for (int i = 0; i < kEach; ++i) {
    for (int r = 0; r < kRounds; ++r) expectedWrites += (i + r) % 3 == 0 ? 2 : 0;
  }
  EXPECT_EQ(writes, expectedWrites);
}

INSTANTIATE_TEST_SUITE_P(Threads, SharedMutexFiberTest, test::oneAndTwoPoolThreads(),
                         test::poolThreadsName);

TEST(SharedMutexDeathTest, MisuseAborts) {
  EXPECT_DEATH(
      {
        SharedMutex mutex;
        mutex.unlock();
      },
      "SharedMutex::unlock\\(\\) called without an exclusive holder");
  EXPECT_DEATH(
      {
        SharedMutex mutex;
        mutex.unlockShared();
      },
      "SharedMutex::unlockShared\\(\\) called without a shared holder");
  EXPECT_DEATH(
      {
        SharedMutex mutex;
        ASSERT_TRUE(mutex.tryLock());
        mutex.unlockShared();
      },
      "SharedMutex::unlockShared\\(\\) called without a shared holder");
  EXPECT_DEATH(
      {
        auto* mutex = new SharedMutex;
        ASSERT_TRUE(mutex->tryLock());
        std::atomic<int> done{0};
        startDetached([](SharedMutex& m) -> Lazy<> { co_await m.lockShared(); }(*mutex), done);
        delete mutex;
      },
      "SharedMutex destroyed while coroutines are waiting");
}

}  // namespace
}  // namespace weft
