// BufferPool and LentBuffer on their own: lending, giving back on the owner thread and on
// others, the recycle function, the pool's limit, and retire() with buffers still lent
// (the last one back frees the pool: ASan/LeakSanitizer and TSan check the memory).
#include "weft/executors/lent_buffer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace weft {
namespace {

// A pool that is retired when the test ends.
struct RetiredAtEnd {
  BufferPool* pool;
  ~RetiredAtEnd() { pool->retire(); }
};

TEST(LentBufferTest, LendsBytesAndGivesTheBufferBackOnTheOwnerThread) {
  RetiredAtEnd owner{BufferPool::create(64, 1024)};
  BufferPool& pool = *owner.pool;
  const std::uint32_t id = pool.take();
  ASSERT_NE(id, BufferPool::kNone);
  std::memcpy(pool.address(id), "abcdef", 6);
  LentBuffer lent = pool.lend(id, 6);
  EXPECT_EQ(pool.lentCount(), 1u);
  EXPECT_EQ(lent.text(), "abcdef");
  lent.consume(2);
  EXPECT_EQ(lent.text(), "cdef");
  EXPECT_EQ(lent.size(), 4u);
  LentBuffer moved = std::move(lent);
  EXPECT_TRUE(lent.empty());  // NOLINT(bugprone-use-after-move): a moved-from one is empty
  EXPECT_EQ(moved.text(), "cdef");
  EXPECT_EQ(pool.lentCount(), 1u);
  moved.reset();
  EXPECT_TRUE(moved.empty());
  EXPECT_EQ(pool.lentCount(), 0u);
  EXPECT_EQ(pool.take(), id) << "the buffer given back is lent next";
  pool.recycle(id);
}

TEST(LentBufferTest, BuffersGivenBackOnAnotherThreadWaitForTheOwnerToDrainThem) {
  RetiredAtEnd owner{BufferPool::create(32, 1024)};
  BufferPool& pool = *owner.pool;
  std::vector<LentBuffer> lent;
  for (int i = 0; i < 100; ++i) lent.push_back(pool.lend(pool.take(), 1));
  EXPECT_EQ(pool.lentCount(), 100u);
  std::thread([&] { lent.clear(); }).join();
  EXPECT_EQ(pool.lentCount(), 100u) << "not drained yet";
  EXPECT_EQ(pool.drainReturned(), 100u);
  EXPECT_EQ(pool.lentCount(), 0u);
  EXPECT_EQ(pool.drainReturned(), 0u);
}

TEST(LentBufferTest, TheRecycleFunctionSeesEveryBufferThatComesBack) {
  RetiredAtEnd owner{BufferPool::create(32, 1024)};
  BufferPool& pool = *owner.pool;
  struct Seen {
    std::vector<std::uint32_t> ids;
    bool keep = true;
  } seen;
  pool.setRecycle(
      [](void* context, std::uint32_t id) noexcept {
        auto* s = static_cast<Seen*>(context);
        s->ids.push_back(id);
        return s->keep;
      },
      &seen);
  const std::uint32_t first = pool.grow(32);
  ASSERT_NE(first, BufferPool::kNone);
  LentBuffer a = pool.lend(first, 4);
  LentBuffer b = pool.lend(first + 1, 4);
  a.reset();
  std::thread([&] { b.reset(); }).join();
  EXPECT_EQ(seen.ids, std::vector<std::uint32_t>{first});
  pool.drainReturned();
  EXPECT_EQ(seen.ids, (std::vector<std::uint32_t>{first, first + 1}));
  // Not kept by the function: on the pool's free list, which take() lends from.
  seen.keep = false;
  pool.recycle(first + 2);
  EXPECT_EQ(pool.take(), first + 2);
}

TEST(LentBufferTest, ThePoolStopsGrowingAtItsLimit) {
  RetiredAtEnd owner{BufferPool::create(16, 64)};
  BufferPool& pool = *owner.pool;
  std::vector<std::uint32_t> taken;
  for (std::uint32_t id; (id = pool.take()) != BufferPool::kNone;) taken.push_back(id);
  EXPECT_EQ(taken.size(), 64u);
  EXPECT_EQ(pool.count(), 64u);
  for (std::uint32_t id : taken) pool.recycle(id);
  EXPECT_NE(pool.take(), BufferPool::kNone);
}

TEST(LentBufferTest, ARetiredPoolIsFreedByTheLastBufferToComeBack) {
  BufferPool* pool = BufferPool::create(128, 1 << 16);
  std::vector<LentBuffer> lent;
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t id = pool->take();
    std::memset(pool->address(id), i, 128);
    lent.push_back(pool->lend(id, 128));
  }
  lent[0].reset();  // back before the owner retires it
  std::thread([&] { lent[1].reset(); }).join();  // back, not drained
  pool->retire();
  // Still readable after retire(): the memory stays until the last buffer is back.
  for (int i = 2; i < 64; ++i) ASSERT_EQ(lent[i].data()[127], static_cast<std::byte>(i));
  lent[2].reset();  // on the (former) owner thread
  // The rest on four threads at once, racing to be the last.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 3 + t; i < 64; i += 4) lent[i].reset();
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(LentBufferTest, RetireRacesWithBuffersComingBackOnOtherThreads) {
  for (int round = 0; round < 200; ++round) {
    BufferPool* pool = BufferPool::create(64, 1 << 16);
    std::vector<LentBuffer> lent;
    for (int i = 0; i < 32; ++i) lent.push_back(pool->lend(pool->take(), 8));
    std::atomic<bool> go{false};
    std::thread other([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 32; i += 2) lent[i].reset();
    });
    go.store(true);
    pool->retire();
    for (int i = 1; i < 32; i += 2) lent[i].reset();
    other.join();
  }
}

TEST(LentBufferTest, AZeroSizeIsRefused) {
  EXPECT_THROW(BufferPool::create(0, 10), std::invalid_argument);
}

TEST(LentBufferTest, ASizeOf4GiBOrMoreIsRefused) {
  // A LentBuffer keeps its size in 32 bits.
  EXPECT_THROW(BufferPool::create(std::size_t{1} << 32, 10), std::invalid_argument);
}

}  // namespace
}  // namespace weft
