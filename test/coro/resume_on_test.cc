#include "weft/coro/resume_on.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

TEST(ResumeOnTest, MovesTheCoroutineAndLaterAwaitsResumeThere) {
  ThreadPool a(1, "a");
  ThreadPool b(1, "b");
  auto body = [&]() -> Lazy<int> {
    EXPECT_TRUE(a.currentThreadInExecutor());
    co_await resumeOn(&b);
    EXPECT_TRUE(b.currentThreadInExecutor());
    EXPECT_EQ(co_await currentExecutor(), &b);
    co_await sleep(1ms);  // a timer completes elsewhere: we come back to b, not a
    EXPECT_TRUE(b.currentThreadInExecutor());
    auto inner = []() -> Lazy<Executor*> { co_return co_await currentExecutor(); };
    EXPECT_EQ(co_await inner(), &b);  // awaited Lazys inherit the new executor
    co_await resumeOn(&a);
    co_return a.currentThreadInExecutor() ? 1 : 0;
  };
  EXPECT_EQ(syncAwait(body(), &a), 1);
}

TEST(ResumeOnTest, ATaskMovesButItsAwaiterGetsTheResultOnItsOwnExecutor) {
  ThreadPool a(1, "a");
  ThreadPool b(1, "b");
  auto moving = [&]() -> Lazy<bool> {
    co_await resumeOn(&b);
    co_return b.currentThreadInExecutor();
  };
  auto body = [&]() -> Lazy<bool> {
    const bool movedToB = co_await moving().via(&a);
    EXPECT_TRUE(a.currentThreadInExecutor());
    co_return movedToB;
  };
  EXPECT_TRUE(syncAwait(body(), &a));
}

TEST(ResumeOnTest, AnInnerLazyMovesAndItsAwaiterStaysOnItsExecutor) {
  ThreadPool a(1, "a");
  ThreadPool b(1, "b");
  auto inner = [&]() -> Lazy<bool> {
    co_await resumeOn(&b);
    co_await resumeOn(&b);  // twice, and then back and away again: one hop home at the end
    co_await resumeOn(&a);
    co_await resumeOn(&b);
    co_return b.currentThreadInExecutor();
  };
  auto body = [&]() -> Lazy<int> {
    int moved = 0;
    for (int i = 0; i < 100; ++i) {
      moved += co_await inner() ? 1 : 0;
      EXPECT_TRUE(a.currentThreadInExecutor());  // the outer Lazy is bound to a
    }
    co_return moved;
  };
  EXPECT_EQ(syncAwait(body(), &a), 100);
}

TEST(ResumeOnTest, OnItsOwnExecutorItContinuesAtOnce) {
  ThreadPool a(1, "a");
  auto body = [&]() -> Lazy<bool> {
    const std::thread::id before = std::this_thread::get_id();
    co_await resumeOn(&a);
    co_return std::this_thread::get_id() == before && a.currentThreadInExecutor();
  };
  EXPECT_TRUE(syncAwait(body(), &a));
}

TEST(ResumeOnTest, AShutDownTargetThrowsAndTheCoroutineStaysBound) {
  ThreadPool a(1, "a");
  ThreadPool b(1, "b");
  b.shutdown();
  auto body = [&]() -> Lazy<Executor*> {
    EXPECT_THROW(co_await resumeOn(&b), ExecutorShutDown);
    co_await sleep(1ms);
    EXPECT_TRUE(a.currentThreadInExecutor());
    co_return co_await currentExecutor();
  };
  EXPECT_EQ(syncAwait(body(), &a), &a);
}

TEST(ResumeOnTest, MisuseIsAClearError) {
  EXPECT_THROW((void)resumeOn(nullptr), std::invalid_argument);
  ThreadPool a(1, "a");
  ThreadPool b(1, "b");
  auto fiber = spawnFiber(&a, [&] { weft::await(resumeOn(&b)); });
  EXPECT_THROW(syncAwait(std::move(fiber)), std::logic_error);
}

}  // namespace
}  // namespace weft
