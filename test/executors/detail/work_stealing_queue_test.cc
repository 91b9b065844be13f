#include "weft/executors/detail/work_stealing_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "weft/executors/detail/job.h"

namespace weft::detail {
namespace {

// WorkItems that are never run: distinct even (handle-tagged) words standing for ids.
WorkItem itemFor(std::uint64_t id) { return WorkItem::fromBits((id + 1) * 2); }
std::uint64_t idOf(WorkItem item) { return item.bits() / 2 - 1; }

TEST(WorkStealingQueueTest, PopsInPushOrder) {
  WorkStealingQueue queue(4);
  for (std::uint64_t i = 0; i < 3; ++i) queue.push(itemFor(i));
  for (std::uint64_t i = 0; i < 3; ++i) EXPECT_EQ(idOf(queue.pop()), i);
  EXPECT_TRUE(queue.pop().empty());
}

TEST(WorkStealingQueueTest, GrowsAndKeepsOrderAcrossWrapAround) {
  WorkStealingQueue queue(4);
  std::uint64_t next = 0;
  std::uint64_t expected = 0;
  // Interleave pushes and pops so the live range wraps, then grow past it.
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < round % 7 + 1; ++i) queue.push(itemFor(next++));
    for (int i = 0; i < round % 5; ++i) {
      WorkItem item = queue.pop();
      if (item.empty()) break;
      ASSERT_EQ(idOf(item), expected++);
    }
  }
  for (WorkItem item = queue.pop(); !item.empty(); item = queue.pop()) {
    ASSERT_EQ(idOf(item), expected++);
  }
  EXPECT_EQ(expected, next);
  EXPECT_EQ(queue.sizeHint(), 0u);
}

TEST(WorkStealingQueueTest, PushBatchAppendsInOrder) {
  WorkStealingQueue queue(2);
  queue.push(itemFor(0));
  std::uint64_t next = 1;
  queue.pushBatch(10, [&] { return itemFor(next++); });
  EXPECT_EQ(queue.sizeHint(), 11u);
  for (std::uint64_t i = 0; i < 11; ++i) EXPECT_EQ(idOf(queue.pop()), i);
}

TEST(WorkStealingQueueTest, StealTakesTheOlderHalfInOrder) {
  WorkStealingQueue victim;
  WorkStealingQueue thief(2);
  for (std::uint64_t i = 0; i < 9; ++i) victim.push(itemFor(i));
  WorkItem first = victim.stealHalfInto(thief);
  EXPECT_EQ(idOf(first), 0u);
  EXPECT_EQ(thief.sizeHint(), 4u);  // 5 stolen: one returned, four queued
  for (std::uint64_t i = 1; i < 5; ++i) EXPECT_EQ(idOf(thief.pop()), i);
  for (std::uint64_t i = 5; i < 9; ++i) EXPECT_EQ(idOf(victim.pop()), i);
  EXPECT_TRUE(victim.stealHalfInto(thief).empty());
}

TEST(WorkStealingQueueTest, CountsWhatWasTakenAndTheHighWaterMark) {
  WorkStealingQueue queue(4);
  WorkStealingQueue thief(4);
  for (std::uint64_t i = 0; i < 10; ++i) queue.push(itemFor(i));
  EXPECT_EQ(queue.highWater(), 10u);
  (void)queue.pop();
  std::uint64_t stolen = 0;
  std::atomic<std::uint64_t> count{0};
  ASSERT_FALSE(queue.stealHalfInto(thief, &stolen, &count).empty());
  EXPECT_EQ(stolen, 5u);  // the older half of 9, rounded up
  EXPECT_EQ(count.load(), 5u);
  EXPECT_EQ(queue.taken(), 6u);  // one pop, five stolen
  EXPECT_EQ(thief.highWater(), 4u);  // the four it queued (the fifth it returned)
  EXPECT_EQ(queue.highWater(), 10u);
}

TEST(WorkStealingQueueTest, StealTakesAtMostTheBatchLimit) {
  WorkStealingQueue victim;
  WorkStealingQueue thief;
  const std::uint64_t n = 4 * WorkStealingQueue::kMaxSteal;
  for (std::uint64_t i = 0; i < n; ++i) victim.push(itemFor(i));
  EXPECT_EQ(idOf(victim.stealHalfInto(thief)), 0u);
  EXPECT_EQ(thief.sizeHint(), WorkStealingQueue::kMaxSteal - 1);
}

TEST(WorkStealingQueueTest, EveryItemIsTakenExactlyOnceUnderConcurrentStealing) {
  // The owner pushes (forcing growth) and pops; thieves pop and steal into their own
  // queues, which they drain. Every id must come out exactly once.
  constexpr std::uint64_t kItems = 400'000;
  constexpr int kThieves = 3;
  WorkStealingQueue owner(2);
  std::vector<std::atomic<int>> taken(kItems);
  std::atomic<bool> ownerDone{false};
  std::atomic<std::uint64_t> count{0};
  auto take = [&](WorkItem item) {
    taken[idOf(item)].fetch_add(1, std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
  };
  std::vector<std::thread> thieves;
  for (int t = 0; t < kThieves; ++t) {
    thieves.emplace_back([&, t] {
      WorkStealingQueue mine(2);
      while (!ownerDone.load() || owner.sizeHint() != 0) {
        WorkItem item = t % 2 == 0 ? owner.stealHalfInto(mine) : owner.pop();
        if (item.empty()) {
          std::this_thread::yield();
          continue;
        }
        take(item);
        for (WorkItem more = mine.pop(); !more.empty(); more = mine.pop()) take(more);
      }
    });
  }
  for (std::uint64_t i = 0; i < kItems; ++i) {
    owner.push(itemFor(i));
    if (i % 3 == 0) {
      WorkItem item = owner.pop();
      if (!item.empty()) take(item);
    }
  }
  ownerDone.store(true);
  for (auto& t : thieves) t.join();
  for (WorkItem item = owner.pop(); !item.empty(); item = owner.pop()) take(item);
  EXPECT_EQ(count.load(), kItems);
  for (std::uint64_t i = 0; i < kItems; ++i) ASSERT_EQ(taken[i].load(), 1) << "id " << i;
}

}  // namespace
}  // namespace weft::detail
