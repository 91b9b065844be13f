#include "weft/coro/task.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "test/support/manual_event.h"

namespace weft {
namespace {

using test::ManualEvent;

// The threads of a "third-party library": each completes one awaitable. Joined before
// the test's pool is destroyed (declare it after the pool): a completer may still be
// inside the pool's schedule() when the coroutine it resumed has already finished.
class ForeignThreads {
 public:
  ~ForeignThreads() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }
  template <class F>
  void spawn(F f) {
    std::lock_guard lock(mutex_);
    threads_.emplace_back(std::move(f));
  }

 private:
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

// An awaitable completed by a thread of its own, like a third-party I/O library's.
struct CompletesOnOwnThread {
  ForeignThreads* threads;
  std::thread::id* completer;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const {
    threads->spawn([h, id = completer] {
      *id = std::this_thread::get_id();
      h.resume();
    });
  }
  void await_resume() const noexcept {}
};

TEST(TaskTest, StartsOnItsExecutor) {
  ThreadPool pool(2);
  bool onPool = syncAwait([&]() -> Lazy<bool> { co_return pool.currentThreadInExecutor(); }()
                              .via(&pool));
  EXPECT_TRUE(onPool);
}

TEST(TaskTest, ResumesOnItsExecutorAfterForeignCompletion) {
  ThreadPool pool(2);
  ForeignThreads foreign;
  std::thread::id completer;
  auto [onPool, notCompleter] = syncAwait(
      [&]() -> Lazy<std::pair<bool, bool>> {
        co_await CompletesOnOwnThread{&foreign, &completer};
        co_return std::pair{pool.currentThreadInExecutor(),
                            std::this_thread::get_id() != completer};
      }()
                   .via(&pool));
  EXPECT_TRUE(onPool);
  EXPECT_TRUE(notCompleter);
}

TEST(TaskTest, NestedLazyInheritsExecutorAndResumesOnIt) {
  ThreadPool pool(2);
  ForeignThreads foreign;
  std::thread::id completer;
  auto inner = [&]() -> Lazy<bool> {
    Executor* ex = co_await currentExecutor();
    co_await CompletesOnOwnThread{&foreign, &completer};
    co_return ex == &pool && pool.currentThreadInExecutor() &&
        std::this_thread::get_id() != completer;
  };
  auto outer = [&]() -> Lazy<bool> {
    bool innerOk = co_await inner();
    co_return innerOk && pool.currentThreadInExecutor();
  };
  EXPECT_TRUE(syncAwait(outer().via(&pool)));
}

TEST(TaskTest, PlainLazyResumesWhereItsAwaiteeCompleted) {
  // The contrast with the test above: without an executor there is no hop back.
  ForeignThreads foreign;
  std::thread::id completer;
  std::thread::id after = syncAwait([&]() -> Lazy<std::thread::id> {
    co_await CompletesOnOwnThread{&foreign, &completer};
    co_return std::this_thread::get_id();
  }());
  EXPECT_EQ(after, completer);
}

TEST(TaskTest, AwaitingATaskOnAnotherExecutorComesBack) {
  ThreadPool home(1, "home");
  ThreadPool away(1, "away");
  auto result = syncAwait(
      [&]() -> Lazy<std::vector<bool>> {
        bool ranAway = co_await [&]() -> Lazy<bool> {
          co_return away.currentThreadInExecutor();
        }()
                                            .via(&away);
        co_return std::vector<bool>{ranAway, home.currentThreadInExecutor()};
      }()
                   .via(&home));
  EXPECT_EQ(result, (std::vector<bool>{true, true}));
}

TEST(TaskTest, ExceptionReachesAwaiter) {
  ThreadPool pool(2);
  auto task = []() -> Lazy<int> {
    throw std::runtime_error("task failed");
    co_return 0;
  }()
                          .via(&pool);
  EXPECT_THROW(syncAwait(std::move(task)), std::runtime_error);
}

TEST(TaskTest, StartDeliversTryOnTheExecutor) {
  ThreadPool pool(2);
  std::atomic<bool> done{false};
  bool callbackOnPool = false;
  int value = 0;
  []() -> Lazy<int> { co_return 5; }().via(&pool).start([&](Try<int> r) {
    value = r.value();
    callbackOnPool = pool.currentThreadInExecutor();
    done.store(true);
    done.notify_one();
  });
  done.wait(false);
  EXPECT_EQ(value, 5);
  EXPECT_TRUE(callbackOnPool);
}

TEST(TaskTest, StartOnShutDownExecutorThrowsAndFreesTheFrame) {
  ThreadPool pool(1);
  pool.shutdown();
  bool called = false;
  EXPECT_THROW(
      []() -> Lazy<int> { co_return 1; }().via(&pool).start([&](Try<int>) { called = true; }),
      ExecutorShutDown);
  EXPECT_FALSE(called);
}

TEST(TaskTest, YieldLetsOtherQueuedWorkRun) {
  ThreadPool pool(1);
  std::vector<int> trace;  // only touched on the pool's single thread
  auto worker = [&](int id) -> Lazy<void> {
    for (int i = 0; i < 3; ++i) {
      trace.push_back(id);
      co_await yield();
    }
  };
  auto both = [&]() -> Lazy<void> { co_await collectAllPara(worker(1), worker(2)); };
  syncAwait(both(), &pool);
  EXPECT_EQ(trace, (std::vector<int>{1, 2, 1, 2, 1, 2}));
}

TEST(TaskTest, ManyTasksResumeOnTheirExecutorAfterEventsReleasedElsewhere) {
  ThreadPool pool(2);
  constexpr int kTasks = 200;
  std::vector<ManualEvent> events(kTasks);
  std::atomic<int> onPool{0}, finished{0};
  for (int i = 0; i < kTasks; ++i) {
    [](ManualEvent& e, ThreadPool& p, std::atomic<int>& ok) -> Lazy<void> {
      co_await e;
      if (p.currentThreadInExecutor()) ok.fetch_add(1);
    }(events[i], pool, onPool)
                                                               .via(&pool)
                                                               .start([&](Try<void>) {
                                                                 finished.fetch_add(1);
                                                                 finished.notify_one();
                                                               });
  }
  // Release from this (outside) thread once every task is parked.
  for (int i = 0; i < kTasks; ++i) {
    while (events[i].waiting() == 0) std::this_thread::yield();
    events[i].release();
  }
  for (int f = finished.load(); f < kTasks; f = finished.load()) finished.wait(f);
  EXPECT_EQ(onPool.load(), kTasks);
}

// A Task is single-shot: only an rvalue can be awaited.
template <class A>
concept AwaitableAs = requires(A&& a) { std::forward<A>(a).operator co_await(); };
static_assert(!AwaitableAs<Task<int>&>);
static_assert(AwaitableAs<Task<int>&&>);

TEST(TaskTest, AwaitedTaskIsEmpty) {
  ThreadPool pool(1);
  syncAwait([](ThreadPool* pool) -> Lazy<void> {
    Task<int> task = []() -> Lazy<int> { co_return 5; }().via(pool);
    EXPECT_EQ(co_await std::move(task), 5);
    EXPECT_FALSE(task.valid());  // NOLINT(bugprone-use-after-move): the state under test
  }(&pool));
}

TEST(TaskDeathTest, AwaitingTheSameTaskTwiceAborts) {
  EXPECT_DEATH(
      {
        ThreadPool pool(1);
        syncAwait([](ThreadPool* pool) -> Lazy<void> {
          Task<int> task = []() -> Lazy<int> { co_return 5; }().via(pool);
          (void)co_await std::move(task);
          (void)co_await std::move(task);  // NOLINT(bugprone-use-after-move)
        }(&pool));
      },
      "weft: co_await Task on an empty Lazy");
}

TEST(TaskDeathTest, SyncAwaitOfAnEmptyTaskAborts) {
  EXPECT_DEATH(syncAwait(Task<int>()), "weft: syncAwait on an empty Lazy");
}

TEST(TaskDeathTest, ViaNullExecutorAborts) {
  EXPECT_DEATH((void)[]()->Lazy<int> { co_return 1; }().via(nullptr), "needs an executor");
}

}  // namespace
}  // namespace weft
