#include "stackful/stack_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace weft {
namespace {

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
