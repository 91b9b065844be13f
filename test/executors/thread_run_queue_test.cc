#include "weft/executors/thread_run_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <thread>

#include "weft/executors/inline_executor.h"
#include "weft/executors/thread_pool.h"
#include "weft/executors/work_item.h"

namespace weft {
namespace {

// Handles that are never resumed: the queue only stores and compares their addresses.
alignas(16) char gFrames[4][16];
std::coroutine_handle<> fakeHandle(int i) {
  return std::coroutine_handle<>::from_address(static_cast<void*>(gFrames[i]));
}
WorkItem fakeItem(int i) { return WorkItem::fromHandle(fakeHandle(i)); }

auto acceptAll = [](WorkItem) noexcept { return true; };

struct ThreadRunQueueTest : ::testing::Test {
  InlineExecutor executor;
  std::atomic<std::size_t> runsFirst{0};
  std::atomic<std::size_t> arrivesFirst{0};
  ThreadRunQueue queue{executor, runsFirst, arrivesFirst};

  void SetUp() override { queue.bind(); }
  void TearDown() override { ThreadRunQueue::unbind(); }
};

TEST_F(ThreadRunQueueTest, CurrentIsTheBoundQueueOfItsExecutor) {
  EXPECT_EQ(ThreadRunQueue::current(), &queue);
  EXPECT_EQ(ThreadRunQueue::currentFor(&executor), &queue);
  InlineExecutor other;
  EXPECT_EQ(ThreadRunQueue::currentFor(&other), nullptr);
  EXPECT_EQ(queue.executor(), &executor);
  ThreadRunQueue::unbind();
  EXPECT_EQ(ThreadRunQueue::current(), nullptr);
  EXPECT_EQ(ThreadRunQueue::currentFor(&executor), nullptr);
}

TEST_F(ThreadRunQueueTest, TakeNextIfPopsTheOldestAcceptedHandle) {
  queue.push(fakeItem(0));
  queue.push(fakeItem(1));
  WorkItem seen;
  EXPECT_EQ(queue.takeNextIf([&seen](WorkItem item) noexcept {
                  seen = item;
                  return true;
                }).handle(),
            fakeHandle(0));
  EXPECT_EQ(seen.handle(), fakeHandle(0));
  EXPECT_TRUE(queue.takeNextIf([](WorkItem) noexcept { return false; }).empty());  // refused
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_EQ(queue.takeNextIf(acceptAll).handle(), fakeHandle(1));
  EXPECT_TRUE(queue.takeNextIf(acceptAll).empty());  // empty
}

TEST_F(ThreadRunQueueTest, PutBackMakesATakenItemNextAgain) {
  queue.push(fakeItem(0));
  queue.push(fakeItem(1));
  const WorkItem taken = queue.takeNextIf(acceptAll);
  queue.push(fakeItem(2));  // queued meanwhile: behind
  queue.putBack(taken);
  EXPECT_EQ(queue.takeNextIf(acceptAll).handle(), fakeHandle(0));
  EXPECT_EQ(queue.takeNextIf(acceptAll).handle(), fakeHandle(1));
  EXPECT_EQ(queue.takeNextIf(acceptAll).handle(), fakeHandle(2));
  EXPECT_TRUE(queue.empty());
}

TEST_F(ThreadRunQueueTest, TakeNextIfLeavesACallableOrWorkThatRunsFirst) {
  Job job;
  queue.push(WorkItem::fromJob(&job));
  queue.push(fakeItem(0));
  EXPECT_TRUE(queue.takeNextIf(acceptAll).empty());  // the loop would run the callable first
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_TRUE(queue.pop().isJob());
  runsFirst.store(1);
  EXPECT_TRUE(queue.takeNextIf(acceptAll).empty());  // the loop would run a due timer first
  runsFirst.store(0);
  arrivesFirst.store(1);  // outside work does not go in front of the next item
  EXPECT_EQ(queue.takeNextIf(acceptAll).handle(), fakeHandle(0));
}

TEST_F(ThreadRunQueueTest, TryPushQueuesOnlyOnTheOwnerWithNoOutsideWorkWaiting) {
  EXPECT_TRUE(queue.tryPush(fakeItem(0)));
  arrivesFirst.store(1);
  EXPECT_FALSE(queue.tryPush(fakeItem(1)));  // outside work goes first: through schedule
  arrivesFirst.store(0);
  bool pushedElsewhere = true;
  std::thread other([&] { pushedElsewhere = queue.tryPush(fakeItem(2)); });
  other.join();
  EXPECT_FALSE(pushedElsewhere);
  ASSERT_EQ(queue.size(), 1u);
  EXPECT_EQ(queue.pop().handle(), fakeHandle(0));
}

TEST_F(ThreadRunQueueTest, OnlyTheOwningThreadTakes) {
  queue.push(fakeItem(0));
  WorkItem takenElsewhere = fakeItem(3);
  WorkItem exchangedElsewhere = fakeItem(3);
  std::thread other([&] {
    takenElsewhere = queue.takeNextIf(acceptAll);
    exchangedElsewhere = queue.exchangeNextIf(acceptAll, fakeItem(1));
  });
  other.join();
  EXPECT_TRUE(takenElsewhere.empty());
  EXPECT_TRUE(exchangedElsewhere.empty());
  EXPECT_EQ(queue.size(), 1u);
  ThreadRunQueue::unbind();
  EXPECT_TRUE(queue.takeNextIf(acceptAll).empty());  // nor this thread once unbound
  queue.bind();
  EXPECT_EQ(queue.takeNextIf(acceptAll).handle(), fakeHandle(0));
}

TEST_F(ThreadRunQueueTest, ExchangeRotatesTheAcceptedHandleForTheRequeued) {
  queue.push(fakeItem(0));
  queue.push(fakeItem(1));
  WorkItem seen;
  auto accept = [&seen](WorkItem item) noexcept {
    seen = item;
    return true;
  };
  EXPECT_EQ(queue.exchangeNextIf(accept, fakeItem(2)).handle(), fakeHandle(0));
  EXPECT_EQ(seen.handle(), fakeHandle(0));
  ASSERT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue.pop().handle(), fakeHandle(1));
  EXPECT_EQ(queue.pop().handle(), fakeHandle(2));
}

TEST_F(ThreadRunQueueTest, ExchangeDeclinesAndChangesNothing) {
  auto no = [](WorkItem) noexcept { return false; };
  EXPECT_TRUE(queue.exchangeNextIf(acceptAll, fakeItem(2)).empty());  // empty
  EXPECT_TRUE(queue.empty());

  queue.push(fakeItem(0));
  EXPECT_TRUE(queue.exchangeNextIf(no, fakeItem(2)).empty());  // refused by the filter
  arrivesFirst.store(1);
  EXPECT_TRUE(queue.exchangeNextIf(acceptAll, fakeItem(2)).empty());  // outside work waits
  arrivesFirst.store(0);
  runsFirst.store(1);
  EXPECT_TRUE(queue.exchangeNextIf(acceptAll, fakeItem(2)).empty());  // a due timer waits
  runsFirst.store(0);
  Job job;
  queue.putBack(WorkItem::fromJob(&job));                             // the job first
  EXPECT_TRUE(queue.exchangeNextIf(acceptAll, fakeItem(2)).empty());  // a callable is next
  ASSERT_EQ(queue.size(), 2u);
  EXPECT_TRUE(queue.pop().isJob());
  EXPECT_EQ(queue.pop().handle(), fakeHandle(0));
}

TEST(ThreadRunQueuePoolTest, OnlyASingleWorkerPoolOffersOneOnItsWorker) {
  ThreadPool one(1);
  ThreadPool two(2);
  EXPECT_EQ(ThreadRunQueue::current(), nullptr);  // not on a worker
  std::atomic<ThreadRunQueue*> seenOnOne{nullptr};
  std::atomic<ThreadRunQueue*> seenOnTwo{reinterpret_cast<ThreadRunQueue*>(1)};
  std::atomic<int> done{0};
  one.schedule([&] {
    seenOnOne = ThreadRunQueue::currentFor(&one);
    ++done;
  });
  two.schedule([&] {
    seenOnTwo = ThreadRunQueue::current();
    ++done;
  });
  while (done.load() != 2) std::this_thread::yield();
  ASSERT_NE(seenOnOne.load(), nullptr);
  EXPECT_EQ(seenOnOne.load()->executor(), &one);
  EXPECT_EQ(seenOnTwo.load(), nullptr);
}

}  // namespace
}  // namespace weft
