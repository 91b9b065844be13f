#include "weft/coro/await_result.h"

#include <gtest/gtest.h>

#include <type_traits>
#include <utility>

#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/resume_on.h"
#include "weft/coro/semaphore.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_timeout.h"
#include "weft/coro/yield.h"
#include "weft/executors/inline_executor.h"
#include "weft/stackful/await.h"

// The public names that public functions return (issue #33): what a co_await of each
// yields, through AwaitResult, and that a fiber's await() yields the same.

namespace {

// What co_await gives, by value or by reference, as declared.
static_assert(std::is_same_v<weft::AwaitResult<weft::Lazy<int>>, int>);
static_assert(std::is_same_v<weft::AwaitResult<weft::Lazy<int&>>, int&>);
static_assert(std::is_same_v<weft::AwaitResult<weft::Task<void>>, void>);
static_assert(std::is_same_v<weft::AwaitResult<weft::Mutex::ScopedLockOperation>,
                             weft::ScopedLock<weft::Mutex>>);
static_assert(std::is_same_v<weft::AwaitResult<weft::Semaphore::ScopedAcquireOperation>,
                             weft::SemaphorePermit>);
static_assert(std::is_same_v<weft::AwaitResult<weft::CurrentExecutorOperation>,
                             weft::Executor*>);
static_assert(std::is_same_v<weft::AwaitResult<weft::ResumeOnOperation>, void>);
static_assert(std::is_same_v<weft::AwaitResult<weft::YieldOperation>, void>);
// A fiber's await() yields what a Lazy's co_await does.
static_assert(std::is_same_v<weft::FiberAwaitResult<weft::Lazy<int>>, int>);
static_assert(std::is_same_v<weft::FiberAwaitResult<weft::Mutex::ScopedLockOperation>,
                             weft::ScopedLock<weft::Mutex>>);
// The aliases are what the functions return.
static_assert(std::is_same_v<decltype(std::declval<weft::Lazy<int>>().operator co_await()),
                             weft::Lazy<int>::Awaiter>);
static_assert(std::is_same_v<decltype(std::declval<weft::Task<int>>().coAwait(nullptr)),
                             weft::Task<int>::Awaiter>);

weft::Lazy<int> answer() { co_return 42; }

TEST(AwaitResultTest, SyncAwaitOfAnAwaitableReturnsItsAwaitResult) {
  weft::Mutex mutex;
  {
    weft::AwaitResult<weft::Mutex::ScopedLockOperation> lock =
        weft::syncAwait(mutex.scopedLock());
    EXPECT_FALSE(mutex.tryLock());  // the lock the await returned holds it
  }
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST(AwaitResultTest, WithTimeoutOfAnAwaitableIsALazyOfItsAwaitResult) {
  weft::InlineExecutor inlineExecutor;
  auto lazy = weft::withTimeout(answer().via(&inlineExecutor), std::chrono::hours(1));
  static_assert(std::is_same_v<decltype(lazy), weft::Lazy<int>>);
  EXPECT_EQ(weft::syncAwait(std::move(lazy)), 42);
}

}  // namespace
