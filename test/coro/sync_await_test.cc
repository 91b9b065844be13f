#include "weft/coro/sync_await.h"

#include <gtest/gtest.h>

#include <coroutine>
#include <stdexcept>
#include <string>
#include <thread>

#include "weft/coro/lazy.h"
#include "weft/executors/inline_executor.h"
#include "weft/executors/thread_pool.h"
#include "test/support/manual_event.h"

namespace weft {
namespace {

using test::ManualEvent;

TEST(SyncAwaitTest, ReturnsTheValue) {
  EXPECT_EQ(syncAwait([]() -> Lazy<std::string> { co_return "v"; }()), "v");
}

TEST(SyncAwaitTest, RethrowsTheException) {
  EXPECT_THROW(syncAwait([]() -> Lazy<int> {
                 throw std::out_of_range("o");
                 co_return 1;
               }()),
               std::out_of_range);
}

TEST(SyncAwaitTest, BlocksUntilWorkCompletedOnAnotherThread) {
  ManualEvent event;
  std::thread releaser([&] {
    while (event.waiting() == 0) std::this_thread::yield();
    event.release();
  });
  int v = syncAwait([&]() -> Lazy<int> {
    co_await event;
    co_return 3;
  }());
  releaser.join();
  EXPECT_EQ(v, 3);
}

TEST(SyncAwaitTest, RunsOnTheGivenExecutor) {
  ThreadPool pool(2);
  EXPECT_TRUE(syncAwait([&]() -> Lazy<bool> { co_return pool.currentThreadInExecutor(); }(),
                        &pool));
}

TEST(SyncAwaitTest, InlineExecutorIsAllowed) {
  InlineExecutor inlineExecutor;
  EXPECT_EQ(syncAwait([]() -> Lazy<int> { co_return 4; }(), &inlineExecutor), 4);
}

TEST(SyncAwaitTest, AcceptsAnyAwaitable) {
  std::suspend_never never;
  syncAwait(never);
  struct ReadyInt {
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    int await_resume() const noexcept { return 12; }
  };
  EXPECT_EQ(syncAwait(ReadyInt{}), 12);
  ManualEvent event;
  std::thread releaser([&] {
    while (event.waiting() == 0) std::this_thread::yield();
    event.release();
  });
  syncAwait(event);  // an lvalue awaitable is awaited in place
  releaser.join();
}

TEST(SyncAwaitTest, OnTheExecutorsOwnThreadIsAClearError) {
  ThreadPool pool(1);
  std::string message;
  syncAwait(
      [&]() -> Lazy<void> {
        try {
          syncAwait([]() -> Lazy<int> { co_return 1; }(), &pool);
        } catch (const SyncAwaitDeadlock& e) {
          message = e.what();
        }
        co_return;
      }(),
      &pool);
  EXPECT_NE(message.find("would deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find(std::string(pool.name())), std::string::npos) << message;
}

// An awaitable that completes on an executor names it (as stackful's FiberFuture does):
// syncAwait on one of that executor's threads throws instead of blocking it, and leaves
// the awaitable untouched; elsewhere it waits as usual.
struct RunsOn {
  Executor* executor;
  bool* awaited;
  Executor* syncAwaitExecutor() const noexcept { return executor; }
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  int await_resume() const noexcept {
    *awaited = true;
    return 4;
  }
};

TEST(SyncAwaitTest, AwaitableNamingTheCallersExecutorIsAClearError) {
  ThreadPool pool(2, "named");
  std::string message;
  bool awaited = false;
  syncAwait(
      [&]() -> Lazy<void> {
        try {
          (void)syncAwait(RunsOn{&pool, &awaited});
        } catch (const SyncAwaitDeadlock& e) {
          message = e.what();
        }
        co_return;
      }(),
      &pool);
  EXPECT_FALSE(awaited);
  EXPECT_NE(message.find("would deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("named"), std::string::npos) << message;
  EXPECT_EQ(syncAwait(RunsOn{&pool, &awaited}), 4);  // from a thread that is not the pool's
  EXPECT_TRUE(awaited);
}

}  // namespace
}  // namespace weft
