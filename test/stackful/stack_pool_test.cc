#include "weft/stackful/stack_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "weft/stackful/detail/tool_hooks.h"
#include "weft/stackful/fiber.h"

// This test binary's operator new fails on demand (gFailAllocations), to show that the
// default pool's creation reports allocation failure to its caller. Not under TSan, whose
// runtime defines the global operator new itself, nor under valgrind, which replaces it
// (the test is skipped there).
#if defined(__SANITIZE_THREAD__)
#define WEFT_TEST_FAILS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TEST_FAILS_ALLOCATIONS 0
#endif
#endif
#ifndef WEFT_TEST_FAILS_ALLOCATIONS
#define WEFT_TEST_FAILS_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> gFailAllocations{false};
}  // namespace

#if WEFT_TEST_FAILS_ALLOCATIONS
void* operator new(std::size_t size) {
  // relaxed: set and cleared by the thread that allocates.
  if (gFailAllocations.load(std::memory_order_relaxed)) throw std::bad_alloc();
  if (void* block = std::malloc(size == 0 ? 1 : size)) return block;
  throw std::bad_alloc();
}
// noinline: inlined next to its operator new, g++-12 mistakes new + free for a mismatch.
[[gnu::noinline]] void operator delete(void* block) noexcept { std::free(block); }
[[gnu::noinline]] void operator delete(void* block, std::size_t) noexcept { std::free(block); }
#endif

namespace weft {
namespace {

// The first use of the default pool must happen in this test, so it runs in a child
// process (a death-test suite runs before the other suites; the fork isolates it from
// them either way). There, the first Fiber made under allocation failure gets
// std::bad_alloc (it used to be std::terminate, defaultPool() being noexcept), and the
// next one, with memory back, gets the pool.
TEST(StackPoolDeathTest, DefaultPoolCreationReportsAllocationFailureToTheCaller) {
#if !WEFT_TEST_FAILS_ALLOCATIONS
  GTEST_SKIP() << "TSan's runtime owns operator new";
#endif
#if WEFT_VALGRIND
  if (RUNNING_ON_VALGRIND) GTEST_SKIP() << "valgrind replaces this binary's operator new";
#endif
  GTEST_FLAG_SET(death_test_style, "fast");  // no threads run here; see spawn_fiber_test.cc
  EXPECT_EXIT(
      {
        bool threw = false;
        gFailAllocations = true;
        try {
          Fiber<> fiber([] {});
        } catch (const std::bad_alloc&) {
          threw = true;
        }
        gFailAllocations = false;
        bool ran = false;
        Fiber<> fiber([&ran] { ran = true; });
        fiber.resume();
        std::fprintf(stderr, "threw=%d ran=%d pool=%zu\n", threw, ran,
                     StackPool::defaultPool().stackSize());
        std::exit(threw && ran ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "threw=1 ran=1 pool=[0-9]+");
}

TEST(StackPoolTest, RecyclesReleasedStacks) {
  StackPool pool(32 * 1024, 4);
  ProtectedStack first = pool.acquire();
  void* top = first.top();
  pool.release(std::move(first));
  EXPECT_EQ(pool.cached(), 1u);
  ProtectedStack again = pool.acquire();
  EXPECT_EQ(again.top(), top);
  EXPECT_EQ(pool.cached(), 0u);
}

TEST(StackPoolTest, StacksHaveThePoolsSize) {
  StackPool pool(10000, 2);
  EXPECT_EQ(pool.stackSize() % ProtectedStack::pageSize(), 0u);
  EXPECT_GE(pool.stackSize(), 10000u);
  ProtectedStack stack = pool.acquire();
  EXPECT_EQ(stack.size(), pool.stackSize());
  pool.release(std::move(stack));
}

TEST(StackPoolTest, CacheIsBounded) {
  StackPool pool(16 * 1024, 3);
  std::vector<ProtectedStack> stacks;
  for (int i = 0; i < 10; ++i) stacks.push_back(pool.acquire());
  for (auto& stack : stacks) pool.release(std::move(stack));
  EXPECT_EQ(pool.cached(), 3u);
}

TEST(StackPoolTest, ForeignSizedStacksAreNotCached) {
  StackPool pool(16 * 1024, 3);
  pool.release(ProtectedStack(64 * 1024));
  EXPECT_EQ(pool.cached(), 0u);
}

TEST(StackPoolTest, OutstandingStacksAreDistinct) {
  StackPool pool(16 * 1024, 8);
  std::vector<ProtectedStack> stacks;
  std::set<void*> tops;
  for (int i = 0; i < 8; ++i) {
    stacks.push_back(pool.acquire());
    tops.insert(stacks.back().top());
  }
  EXPECT_EQ(tops.size(), 8u);
  for (auto& stack : stacks) pool.release(std::move(stack));
}

TEST(StackPoolTest, ConcurrentAcquireRelease) {
  StackPool pool(16 * 1024, 4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool] {
      for (int i = 0; i < 500; ++i) {
        ProtectedStack stack = pool.acquire();
        // Each owner writes its own mark: two owners of one stack would clobber it.
        auto* mark = static_cast<volatile int*>(stack.bottom());
        *mark = i;
        std::this_thread::yield();
        EXPECT_EQ(*mark, i);
        pool.release(std::move(stack));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_LE(pool.cached(), 4u);
}

TEST(StackPoolTest, DefaultPoolUsesDefaultSize) {
  EXPECT_EQ(StackPool::defaultPool().stackSize(), ProtectedStack::kDefaultSize);
  EXPECT_EQ(&StackPool::defaultPool(), &StackPool::defaultPool());
}

}  // namespace
}  // namespace weft
