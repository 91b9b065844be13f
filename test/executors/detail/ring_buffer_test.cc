#include "weft/executors/detail/ring_buffer.h"

#include <gtest/gtest.h>

#include <cstddef>

namespace weft::detail {
namespace {

TEST(RingBufferTest, StartsEmpty) {
  RingBuffer<int> ring;
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.size(), 0u);
}

TEST(RingBufferTest, PopsInPushOrder) {
  RingBuffer<int> ring;
  for (int i = 0; i < 10; ++i) ring.push(i);
  EXPECT_EQ(ring.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ring.pop(), i);
  EXPECT_TRUE(ring.empty());
}

TEST(RingBufferTest, KeepsOrderWhenGrowingWhileWrappedAround) {
  RingBuffer<int> ring;
  int next = 0;
  int expected = 0;
  // Move the window through the initial capacity a few times, then grow while wrapped.
  for (int round = 0; round < 1000; ++round) {
    ring.push(next++);
    ring.push(next++);
    EXPECT_EQ(ring.pop(), expected++);
  }
  for (int i = 0; i < 5000; ++i) ring.push(next++);
  while (!ring.empty()) ASSERT_EQ(ring.pop(), expected++);
  EXPECT_EQ(expected, next);
}

TEST(RingBufferTest, ReserveForMakesRoomWithoutLosingValues) {
  RingBuffer<int> ring;
  for (int i = 0; i < 200; ++i) ring.push(i);
  for (int i = 0; i < 150; ++i) ASSERT_EQ(ring.pop(), i);
  ring.reserveFor(10'000);
  for (int i = 200; i < 10'200; ++i) ring.push(i);
  for (int i = 150; i < 10'200; ++i) ASSERT_EQ(ring.pop(), i);
  EXPECT_TRUE(ring.empty());
}

TEST(RingBufferTest, PushFrontPutsAValueBeforeTheOldest) {
  RingBuffer<int> ring;
  ring.pushFront(1);  // into an empty ring with no slots yet: it grows
  ring.push(2);
  ring.pushFront(0);  // from slot 0: the head index wraps below zero
  EXPECT_EQ(ring.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ring.pop(), i);
  EXPECT_TRUE(ring.empty());
}

TEST(RingBufferTest, PushFrontOnAFullRingGrowsAndKeepsOrder) {
  RingBuffer<int> ring;
  for (int i = 1; i <= 256; ++i) ring.push(i);  // full at the initial capacity
  ring.pushFront(0);
  for (int i = 0; i < 300; ++i) ring.pushFront(-1 - i);
  for (int i = -300; i <= 256; ++i) ASSERT_EQ(ring.pop(), i);
  EXPECT_TRUE(ring.empty());
}

TEST(RingBufferTest, RotateIsPopThenPush) {
  RingBuffer<int> ring;
  for (int i = 0; i < 3; ++i) ring.push(i);
  EXPECT_EQ(ring.rotate(3), 0);
  EXPECT_EQ(ring.rotate(4), 1);
  EXPECT_EQ(ring.size(), 3u);
  for (int i = 2; i < 5; ++i) EXPECT_EQ(ring.pop(), i);
  EXPECT_TRUE(ring.empty());
}

TEST(RingBufferTest, RotateOnAFullRingReusesTheFreedSlot) {
  RingBuffer<int> ring;
  int next = 0;
  int expected = 0;
  // Move the window off slot 0, then fill the ring to its initial capacity (256 slots):
  // the slot a rotate writes is then the one it reads.
  for (int i = 0; i < 100; ++i) {
    ring.push(next++);
    ASSERT_EQ(ring.pop(), expected++);
  }
  while (ring.size() < 256) ring.push(next++);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(ring.rotate(next++), expected++);
  EXPECT_EQ(ring.size(), 256u);
  while (!ring.empty()) ASSERT_EQ(ring.pop(), expected++);
  EXPECT_EQ(expected, next);
}

TEST(RingBufferTest, CountsWhatWasTakenAndTheHighWaterMark) {
  RingBuffer<int> ring;
  EXPECT_EQ(ring.taken(), 0u);
  EXPECT_EQ(ring.highWater(), 0u);
  for (int i = 0; i < 10; ++i) ring.push(i);
  for (int i = 0; i < 4; ++i) ring.pop();
  EXPECT_EQ(ring.taken(), 4u);
  EXPECT_EQ(ring.highWater(), 10u);
  EXPECT_EQ(ring.sizeAnyThread(), 6u);
  ring.pushFront(-1);  // a value put back is no longer taken
  EXPECT_EQ(ring.taken(), 3u);
  int value = 0;
  ASSERT_TRUE(ring.tryPop(value));
  EXPECT_EQ(value, -1);
  (void)ring.rotate(10);  // one out, one in
  EXPECT_EQ(ring.taken(), 5u);
  // Through growth (the indices are kept, so the count goes on): 1000 more in, all out.
  for (int i = 0; i < 1000; ++i) ring.push(i);
  EXPECT_EQ(ring.highWater(), 1006u);
  while (ring.tryPop(value)) {
  }
  EXPECT_EQ(ring.taken(), 1011u);
  EXPECT_EQ(ring.sizeAnyThread(), 0u);
  EXPECT_EQ(ring.highWater(), 1006u);  // the mark stays
}

TEST(RingBufferTest, MovesABatchFromOneRingToAnother) {
  RingBuffer<int> from;
  RingBuffer<int> to;
  to.push(-1);
  for (int i = 0; i < 600; ++i) from.push(i);
  std::size_t read = 0;
  to.pushBatch(500, [&] { return from.at(read++); });  // grows `to` once
  from.drop(read);
  EXPECT_EQ(from.size(), 100u);
  EXPECT_EQ(from.front(), 500);
  EXPECT_EQ(from.taken(), 500u);
  EXPECT_EQ(to.size(), 501u);
  EXPECT_EQ(to.highWater(), 501u);
  EXPECT_EQ(to.pop(), -1);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(to.pop(), i);
  to.pushBatch(0, [] { return 0; });  // nothing
  EXPECT_TRUE(to.empty());
}

}  // namespace
}  // namespace weft::detail
