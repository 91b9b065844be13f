#include "executors/detail/solo_run_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <thread>

#include "executors/detail/job.h"
#include "executors/thread_pool.h"

namespace weft::detail {
namespace {

// Handles that are never resumed: the queue only stores and compares their addresses.
alignas(16) char gFrames[4][16];
std::coroutine_handle<> fakeHandle(int i) {
  return std::coroutine_handle<>::from_address(static_cast<void*>(gFrames[i]));
}

struct SoloRunQueueTest : ::testing::Test {
  std::atomic<std::size_t> timerDue{0};
  std::atomic<std::size_t> injection{0};
  SoloRunQueue queue{timerDue, injection};

  void SetUp() override { queue.bind(); }
  void TearDown() override { SoloRunQueue::unbind(); }
};

TEST_F(SoloRunQueueTest, TakeNextHandlePopsTheOldestHandle) {
  queue.items.push(WorkItem::fromHandle(fakeHandle(0)));
  queue.items.push(WorkItem::fromHandle(fakeHandle(1)));
  EXPECT_EQ(queue.takeNextHandle(), fakeHandle(0));
  EXPECT_EQ(queue.takeNextHandle(), fakeHandle(1));
  EXPECT_FALSE(queue.takeNextHandle());  // empty
}

TEST_F(SoloRunQueueTest, PutBackMakesATakenHandleNextAgain) {
  queue.items.push(WorkItem::fromHandle(fakeHandle(0)));
  queue.items.push(WorkItem::fromHandle(fakeHandle(1)));
  std::coroutine_handle<> taken = queue.takeNextHandle();
  queue.items.push(WorkItem::fromHandle(fakeHandle(2)));  // queued meanwhile: behind
  queue.putBack(taken);
  EXPECT_EQ(queue.takeNextHandle(), fakeHandle(0));
  EXPECT_EQ(queue.takeNextHandle(), fakeHandle(1));
  EXPECT_EQ(queue.takeNextHandle(), fakeHandle(2));
  EXPECT_FALSE(queue.takeNextHandle());
}

TEST_F(SoloRunQueueTest, TakeNextHandleLeavesACallableOrADueTimerFirst) {
  Job job;
  queue.items.push(WorkItem::fromJob(&job));
  queue.items.push(WorkItem::fromHandle(fakeHandle(0)));
  EXPECT_FALSE(queue.takeNextHandle());  // the loop would run the callable first
  EXPECT_EQ(queue.items.size(), 2u);
  (void)queue.items.pop();
  timerDue.store(1);
  EXPECT_FALSE(queue.takeNextHandle());  // the loop would run the due timer first
  timerDue.store(0);
  EXPECT_EQ(queue.takeNextHandle(), fakeHandle(0));
}

TEST_F(SoloRunQueueTest, OnlyTheOwningThreadTakes) {
  queue.items.push(WorkItem::fromHandle(fakeHandle(0)));
  std::coroutine_handle<> takenElsewhere = fakeHandle(3);
  std::coroutine_handle<> exchangedElsewhere = fakeHandle(3);
  std::thread other([&] {
    takenElsewhere = queue.takeNextHandle();
    exchangedElsewhere = queue.exchangeNextHandle(
        [](std::coroutine_handle<>) noexcept { return true; }, fakeHandle(1));
  });
  other.join();
  EXPECT_FALSE(takenElsewhere);
  EXPECT_FALSE(exchangedElsewhere);
  EXPECT_EQ(queue.items.size(), 1u);
  SoloRunQueue::unbind();
  EXPECT_FALSE(queue.takeNextHandle());  // nor this thread once unbound
  queue.bind();
  EXPECT_EQ(queue.takeNextHandle(), fakeHandle(0));
}

TEST_F(SoloRunQueueTest, ExchangeRotatesTheAcceptedHandleForTheRequeued) {
  queue.items.push(WorkItem::fromHandle(fakeHandle(0)));
  queue.items.push(WorkItem::fromHandle(fakeHandle(1)));
  std::coroutine_handle<> seen;
  auto accept = [&seen](std::coroutine_handle<> h) noexcept {
    seen = h;
    return true;
  };
  EXPECT_EQ(queue.exchangeNextHandle(accept, fakeHandle(2)), fakeHandle(0));
  EXPECT_EQ(seen, fakeHandle(0));
  ASSERT_EQ(queue.items.size(), 2u);
  EXPECT_EQ(queue.items.pop().handle(), fakeHandle(1));
  EXPECT_EQ(queue.items.pop().handle(), fakeHandle(2));
}

TEST_F(SoloRunQueueTest, ExchangeDeclinesAndChangesNothing) {
  auto yes = [](std::coroutine_handle<>) noexcept { return true; };
  auto no = [](std::coroutine_handle<>) noexcept { return false; };
  EXPECT_FALSE(queue.exchangeNextHandle(yes, fakeHandle(2)));  // empty
  EXPECT_TRUE(queue.items.empty());

  queue.items.push(WorkItem::fromHandle(fakeHandle(0)));
  EXPECT_FALSE(queue.exchangeNextHandle(no, fakeHandle(2)));  // refused by the filter
  injection.store(1);
  EXPECT_FALSE(queue.exchangeNextHandle(yes, fakeHandle(2)));  // outside work waits
  injection.store(0);
  timerDue.store(1);
  EXPECT_FALSE(queue.exchangeNextHandle(yes, fakeHandle(2)));  // a due timer waits
  timerDue.store(0);
  Job job;
  queue.items.push(WorkItem::fromJob(&job));
  (void)queue.items.rotate(queue.items.front());               // the job first, then the handle
  EXPECT_FALSE(queue.exchangeNextHandle(yes, fakeHandle(2)));  // a callable is next
  ASSERT_EQ(queue.items.size(), 2u);
  EXPECT_TRUE(queue.items.pop().isJob());
  EXPECT_EQ(queue.items.pop().handle(), fakeHandle(0));
}

TEST(SoloRunQueuePoolTest, OnlyASingleWorkerPoolHasOne) {
  ThreadPool one(1);
  ThreadPool two(2);
  EXPECT_NE(one.soloRunQueue(), nullptr);
  EXPECT_EQ(two.soloRunQueue(), nullptr);
  // Not on the worker: nothing to take, from the pool or from its queue.
  EXPECT_FALSE(one.soloRunQueue()->takeNextHandle());
  EXPECT_FALSE(one.takeNextHandle());
}

}  // namespace
}  // namespace weft::detail
