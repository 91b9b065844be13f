#include "weft/executors/detail/timer_heap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <numeric>
#include <random>
#include <vector>

namespace weft::detail {
namespace {

using namespace std::chrono_literals;
using Clock = TimerEntry::Clock;

struct Tagged : TimerEntry {
  int tag = 0;
};

std::vector<int> popAll(TimerHeap& heap) {
  std::vector<int> order;
  while (!heap.empty()) order.push_back(static_cast<Tagged*>(heap.pop())->tag);
  return order;
}

// Shuffled deadlines in groups of 3 equal ones: pops come in deadline order, and within
// a group in push order.
TEST(TimerHeapTest, PopsInDeadlineOrderAndEqualDeadlinesInPushOrder) {
  constexpr int kEntries = 300;
  std::vector<int> slot(kEntries);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), std::mt19937(7));
  const auto base = Clock::now();
  std::vector<Tagged> entries(kEntries);
  TimerHeap heap;
  for (int i = 0; i < kEntries; ++i) {
    entries[i].tag = i;
    entries[i].deadline = base + (slot[i] / 3) * 1us;
    heap.push(entries[i]);
    EXPECT_TRUE(TimerHeap::contains(entries[i]));
  }
  EXPECT_EQ(heap.size(), std::size_t{kEntries});
  std::vector<int> expected(kEntries);
  std::iota(expected.begin(), expected.end(), 0);
  std::stable_sort(expected.begin(), expected.end(),
                   [&](int a, int b) { return slot[a] / 3 < slot[b] / 3; });
  EXPECT_EQ(popAll(heap), expected);
  for (const Tagged& entry : entries) EXPECT_FALSE(TimerHeap::contains(entry));
}

TEST(TimerHeapTest, RemovingAnyEntryKeepsTheOthersInOrder) {
  constexpr int kEntries = 100;
  std::mt19937 random(11);
  std::vector<Tagged> entries(kEntries);
  TimerHeap heap;
  const auto base = Clock::now();
  for (int i = 0; i < kEntries; ++i) {
    entries[i].tag = i;
    entries[i].deadline = base + std::uniform_int_distribution<int>(0, 1000)(random) * 1us;
    heap.push(entries[i]);
  }
  std::vector<int> kept;
  for (int i = 0; i < kEntries; ++i) {
    if (i % 3 == 1) {
      heap.remove(entries[i]);
      EXPECT_FALSE(TimerHeap::contains(entries[i]));
    } else {
      kept.push_back(i);
    }
  }
  std::stable_sort(kept.begin(), kept.end(),
                   [&](int a, int b) { return entries[a].deadline < entries[b].deadline; });
  EXPECT_EQ(popAll(heap), kept);
}

TEST(TimerHeapTest, TakeAllEmptiesTheHeapInFiringOrder) {
  std::vector<Tagged> entries(5);
  TimerHeap heap;
  const auto base = Clock::now();
  const int offsets[] = {40, 10, 30, 10, 20};
  for (int i = 0; i < 5; ++i) {
    entries[i].tag = i;
    entries[i].deadline = base + offsets[i] * 1ms;
    heap.push(entries[i]);
  }
  std::vector<int> order;
  for (TimerEntry* entry : heap.takeAll()) order.push_back(static_cast<Tagged*>(entry)->tag);
  EXPECT_EQ(order, (std::vector<int>{1, 3, 4, 2, 0}));
  EXPECT_TRUE(heap.empty());
  for (const Tagged& entry : entries) EXPECT_FALSE(TimerHeap::contains(entry));
  // The entries may be pushed again.
  heap.push(entries[0]);
  EXPECT_EQ(heap.top(), &entries[0]);
}

// The heap is generic over where an element keeps its position: here 1-based, 0 meaning
// "not in the heap" (as the epoll loop's deadlines do).
struct Deadline {
  long at = 0;
  std::size_t slotPlusOne = 0;
};
struct DeadlineOrder {
  static bool before(const Deadline& a, const Deadline& b) noexcept { return a.at < b.at; }
  static void setPosition(Deadline& d, std::size_t i) noexcept {
    d.slotPlusOne = i == IntrusiveHeap<Deadline, DeadlineOrder>::kNotInHeap ? 0 : i + 1;
  }
  static std::size_t position(const Deadline& d) noexcept {
    return d.slotPlusOne == 0 ? IntrusiveHeap<Deadline, DeadlineOrder>::kNotInHeap
                              : d.slotPlusOne - 1;
  }
};

TEST(TimerHeapTest, ServesAnyPolicy) {
  Deadline a{30}, b{10}, c{20};
  IntrusiveHeap<Deadline, DeadlineOrder> heap;
  EXPECT_FALSE(heap.contains(a));
  heap.push(a);
  heap.push(b);
  heap.push(c);
  EXPECT_EQ(heap.top(), &b);
  heap.remove(c);
  EXPECT_EQ(c.slotPlusOne, 0u);
  EXPECT_EQ(heap.pop(), &b);
  EXPECT_EQ(heap.pop(), &a);
  EXPECT_TRUE(heap.empty());
  EXPECT_EQ(heap.top(), nullptr);
}

// update(): an element whose key moved, later or earlier, goes to its new place (the
// epoll loop moves a writeAll's deadline when it waits again after a partial write).
TEST(TimerHeapTest, UpdateMovesAnElementWhoseKeyChanged) {
  constexpr int kEntries = 64;
  std::mt19937 random(5);
  std::vector<Deadline> entries(kEntries);
  IntrusiveHeap<Deadline, DeadlineOrder> heap;
  for (int i = 0; i < kEntries; ++i) {
    entries[i].at = static_cast<long>(random() % 1000);
    heap.push(entries[i]);
  }
  for (int round = 0; round < 200; ++round) {
    Deadline& moved = entries[random() % kEntries];
    moved.at = static_cast<long>(random() % 1000);  // later or earlier
    heap.update(moved);
    EXPECT_TRUE(heap.contains(moved));
  }
  std::vector<long> popped;
  while (!heap.empty()) popped.push_back(heap.pop()->at);
  std::vector<long> expected;
  for (const Deadline& d : entries) expected.push_back(d.at);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(popped, expected);
}

}  // namespace
}  // namespace weft::detail
