#include "coro/detail/frame_allocator.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "coro/lazy.h"
#include "coro/sync_await.h"

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

}  // namespace
}  // namespace weft::detail
