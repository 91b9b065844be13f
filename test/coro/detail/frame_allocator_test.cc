#include "weft/coro/detail/frame_allocator.h"

#include <gtest/gtest.h>

#include <coroutine>
#include <cstddef>
#include <thread>
#include <vector>

#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"

namespace weft::detail {
namespace {

TEST(FrameAllocatorTest, EverySizeFitsItsClass) {
  for (std::size_t size = 1; size <= frameClassSize(kFrameClassCount - 1); ++size) {
    const std::size_t cls = frameClassOf(size);
    ASSERT_LT(cls, kFrameClassCount) << size;
    EXPECT_GE(frameClassSize(cls), size) << size;
    if (cls > 0) {
      EXPECT_LT(frameClassSize(cls - 1), size) << size;  // the tightest class
    }
  }
}

TEST(FrameAllocatorTest, ReusesFreedFrames) {
  void* a = allocateFrame(100);
  deallocateFrame(a, 100);
  void* b = allocateFrame(97);  // same class
  EXPECT_EQ(a, b);
  deallocateFrame(b, 97);
}

// Frames of a few KiB (a chain of Lazys clang folded into one frame) are cached too.
TEST(FrameAllocatorTest, ReusesFreedFramesOfAFewKiB) {
  void* a = allocateFrame(3000);
  deallocateFrame(a, 3000);
  void* b = allocateFrame(2990);  // same class (128 bytes apart there)
  EXPECT_EQ(a, b);
  deallocateFrame(b, 2990);
  EXPECT_EQ(frameClassOf(3000), frameClassOf(2990));
  EXPECT_NE(frameClassOf(3000), frameClassOf(3000 + kLargeFrameStep));
}

// A burst of large frames filling their half of the cache leaves small frames cached.
TEST(FrameAllocatorTest, LargeFramesDoNotCrowdOutSmallOnes) {
  std::vector<void*> large;
  const std::size_t count = WEFT_FRAME_CACHE_BYTES / frameClassSize(frameClassOf(3000)) + 10;
  for (std::size_t i = 0; i < count; ++i) large.push_back(allocateFrame(3000));
  for (void* b : large) deallocateFrame(b, 3000);
  EXPECT_LE(tFrameCache.cachedLargeBytes, std::size_t{WEFT_FRAME_CACHE_BYTES});
  std::vector<void*> small;
  for (int i = 0; i < 1000; ++i) small.push_back(allocateFrame(100));
  const std::size_t before = tFrameCache.cachedBytes;
  for (void* block : small) deallocateFrame(block, 100);
  // Every one of them was cached (with one budget for both, ~3 KiB was left for them).
  EXPECT_EQ(tFrameCache.cachedBytes - before, 1000 * frameClassSize(frameClassOf(100)));
  for (void*& block : small) block = allocateFrame(100);
  for (void* block : small) ::operator delete(block);
  // Leave the large lists empty again for the tests that follow.
  for (std::size_t i = 0; i < count; ++i) large[i] = allocateFrame(3000);
  for (void* block : large) ::operator delete(block);
}

TEST(FrameAllocatorTest, LargeFramesBypassTheCache) {
  const std::size_t big = frameClassSize(kFrameClassCount - 1) + 1;
  const std::size_t before = tFrameCache.cachedBytes;
  void* p = allocateFrame(big);
  deallocateFrame(p, big);
  EXPECT_EQ(tFrameCache.cachedBytes, before);
}

TEST(FrameAllocatorTest, CacheStaysWithinItsBound) {
  std::vector<void*> blocks;
  const std::size_t count = WEFT_FRAME_CACHE_BYTES / frameClassSize(5) + 100;
  for (std::size_t i = 0; i < count; ++i) blocks.push_back(allocateFrame(80));
  for (void* b : blocks) deallocateFrame(b, 80);
  EXPECT_LE(tFrameCache.cachedBytes, std::size_t{WEFT_FRAME_CACHE_BYTES});
  // Leave the cache empty again for the tests that follow.
  for (std::size_t i = 0; i < count; ++i) blocks[i] = allocateFrame(80);
  for (void* b : blocks) ::operator delete(b);
}

TEST(FrameAllocatorTest, FrameFreedOnAnotherThreadIsReusedThere) {
  void* fromOther = nullptr;
  std::thread([&] { fromOther = allocateFrame(64); }).join();
  deallocateFrame(fromOther, 64);
  void* again = allocateFrame(64);
  EXPECT_EQ(again, fromOther);
  deallocateFrame(again, 64);
}

Lazy<int> frameOfSize(int v) { co_return v; }

// Lazys created on one thread and destroyed (after running) on another, both directions
// at once, many times: under AddressSanitizer this catches any mix-up of the lists.
TEST(FrameAllocatorTest, LazyFramesCrossThreadsSafely) {
  constexpr int kRounds = 20'000;
  std::vector<Lazy<int>> madeHere, madeThere;
  for (int i = 0; i < kRounds; ++i) madeHere.push_back(frameOfSize(i));
  std::thread other([&] {
    for (int i = 0; i < kRounds; ++i) madeThere.push_back(frameOfSize(i));
  });
  other.join();
  long sumThere = 0, sumHere = 0;
  std::thread consumer([&] {
    for (auto& lazy : madeHere) sumThere += syncAwait(std::move(lazy));
    madeHere.clear();
  });
  for (auto& lazy : madeThere) sumHere += syncAwait(std::move(lazy));
  madeThere.clear();
  consumer.join();
  const long expected = long{kRounds} * (kRounds - 1) / 2;
  EXPECT_EQ(sumThere, expected);
  EXPECT_EQ(sumHere, expected);
}

// Resumes the awaiting coroutine on `pool`'s worker.
struct HopTo {
  ThreadPool* pool;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) { pool->schedule(h); }
  void await_resume() const noexcept {}
};

// The bytes the calling thread's cache holds, read independently of the allocator's own
// accessor (not inlined, and the asm hides the address from the optimiser), so it is
// right even in a build that breaks the allocator on purpose.
WEFT_NOINLINE std::size_t cachedBytesHere() {
  FrameCache* cache = &tFrameCache;
  asm volatile("" : "+r"(cache));
  return cache->cachedBytes;
}

// A coroutine that runs on thread A, then on thread B, then on A again... must take its
// callees' frames from the cache of the thread it runs on at that moment. Compilers may
// compute the address of a thread_local once and keep it in the coroutine frame across
// suspension points (LLVM #47179, #63022: hoisted out of a loop that suspends), which
// would make B pop A's free lists -- a data race, and the wrong thread's accounting. Each
// round checks that the frames allocated on a thread came out of that thread's cache.
TEST(FrameAllocatorTest, CoroutineMovingBetweenThreadsUsesEachThreadsOwnCache) {
  ThreadPool a(1, "frames-a"), b(1, "frames-b");
  auto warm = []() -> Lazy<void> {
    std::vector<Lazy<int>> frames;  // held: no compiler can elide these allocations
    for (int i = 0; i < 8; ++i) frames.push_back(frameOfSize(i));
    co_return;  // freed here, into this thread's cache
  };
  syncAwait(warm(), &a);
  syncAwait(warm(), &b);
  constexpr int kRounds = 200;
  auto body = [&]() -> Lazy<int> {
    int wrongCache = 0;
    for (int round = 0; round < kRounds; ++round) {
      co_await HopTo{round % 2 == 0 ? &a : &b};
      const std::size_t before = cachedBytesHere();
      std::vector<Lazy<int>> held;
      held.reserve(4);
      for (int i = 0; i < 4; ++i) held.push_back(frameOfSize(i));
      // The four frames came from this thread's cache (it holds eight of their class).
      if (cachedBytesHere() >= before) ++wrongCache;
      for (auto& lazy : held) co_await std::move(lazy);
    }
    co_return wrongCache;
  };
  EXPECT_EQ(syncAwait(body()), 0) << "rounds that allocated from another thread's cache";
}

}  // namespace
}  // namespace weft::detail
