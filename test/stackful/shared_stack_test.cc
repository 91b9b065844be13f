#include "weft/stackful/shared_stack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "weft/stackful/fiber.h"
#include "test/support/counted.h"

namespace weft {
namespace {

// kDeathTestStyleNote: death tests use the "fast" style (fork at the EXPECT_DEATH): the
// "threadsafe" style re-executes the test binary, which fails under qemu-user without
// binfmt_misc (the aarch64 CI step). No test leaves threads running, and death test
// suites run first, so forking here is safe.

using test::Counted;

// Recurses `depth` frames, each holding a local derived from (seed, level), yields at the
// bottom `yields` times, then checks every frame's local on the way back up. Returns the
// number of intact frames.
int descend(std::uint64_t seed, int level, int depth, int yields) {
  volatile std::uint64_t local[4];
  for (int i = 0; i < 4; ++i)
    local[i] = seed * 1000003u + static_cast<std::uint64_t>(level * 4 + i);
  int intact = 0;
  if (level < depth) {
    intact = descend(seed, level + 1, depth, yields);
  } else {
    for (int y = 0; y < yields; ++y) this_fiber::yield();
  }
  bool ok = true;
  for (int i = 0; i < 4; ++i) {
    ok = ok && local[i] == seed * 1000003u + static_cast<std::uint64_t>(level * 4 + i);
  }
  return intact + (ok ? 1 : 0);
}

TEST(SharedStackTest, FibersWithVaryingDepthKeepTheirLocals) {
  SharedStack shared(256 * 1024);
  std::mt19937 random(12345);
  constexpr int kFibers = 200;
  std::vector<int> depths(kFibers);
  std::vector<Fiber<int>> fibers;
  for (int i = 0; i < kFibers; ++i) {
    depths[i] = static_cast<int>(random() % 400);
    const int depth = depths[i];
    fibers.emplace_back([i, depth] { return descend(static_cast<std::uint64_t>(i), 0, depth, 5); },
                        shared);
  }
  EXPECT_EQ(shared.fibers(), static_cast<std::size_t>(kFibers));
  // Resume them in a shuffled order each round, so every switch copies stacks of
  // different depths over each other.
  std::vector<int> order(kFibers);
  for (int i = 0; i < kFibers; ++i) order[i] = i;
  for (int round = 0; round < 6; ++round) {
    std::shuffle(order.begin(), order.end(), random);
    for (int i : order) {
      if (!fibers[i].done()) fibers[i].resume();
    }
  }
  for (int i = 0; i < kFibers; ++i) {
    ASSERT_TRUE(fibers[i].done()) << i;
    EXPECT_EQ(fibers[i].result(), depths[i] + 1) << "fiber " << i << " depth " << depths[i];
  }
  fibers.clear();
  EXPECT_EQ(shared.fibers(), 0u);
}

TEST(SharedStackTest, PointersToOwnLocalsStayValid) {
  SharedStack shared(64 * 1024);
  auto body = [](int seed) {
    int value = seed;
    int* self = &value;
    for (int i = 0; i < 10; ++i) {
      this_fiber::yield();
      *self += 1;
    }
    return value;
  };
  Fiber<int> a([&] { return body(100); }, shared);
  Fiber<int> b([&] { return body(200); }, shared);
  while (!a.done() || !b.done()) {
    if (!a.done()) a.resume();
    if (!b.done()) b.resume();
  }
  EXPECT_EQ(a.result(), 110);
  EXPECT_EQ(b.result(), 210);
}

TEST(SharedStackTest, DestroyingASavedFiberUnwindsIt) {
  Counted::reset();
  SharedStack shared(64 * 1024);
  {
    Fiber<> a(
        [] {
          Counted local;
          this_fiber::yield();
        },
        shared);
    Fiber<> b(
        [] {
          Counted local;
          this_fiber::yield();
        },
        shared);
    a.resume();
    b.resume();  // a's frames are now saved off the stack
    EXPECT_EQ(Counted::alive(), 2);
  }  // b (on the stack) and a (restored first) are unwound
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_EQ(shared.fibers(), 0u);
}

TEST(SharedStackTest, ExceptionsCrossFibersOnOneStack) {
  SharedStack shared(64 * 1024);
  Fiber<std::string> a(
      [] {
        try {
          throw std::runtime_error("a");
        } catch (const std::exception& e) {
          this_fiber::yield();  // b runs on the same stack meanwhile
          return std::string(e.what());
        }
      },
      shared);
  Fiber<> b([] { throw std::runtime_error("b"); }, shared);
  a.resume();
  EXPECT_THROW(b.resume(), std::runtime_error);
  a.resume();
  EXPECT_EQ(a.result(), "a");
}

TEST(SharedStackDeathTest, ResumingAFiberOfTheSameStackFromInsideAborts) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        SharedStack shared(64 * 1024);
        Fiber<> victim([] { this_fiber::yield(); }, shared);
        Fiber<> culprit([&] { victim.resume(); }, shared, FiberOptions{"culprit"});
        culprit.resume();
      },
      "weft: a fiber of a SharedStack was resumed or destroyed while another fiber runs on "
      "that stack");
}

TEST(SharedStackDeathTest, DestroyingTheStackBeforeItsFibersAborts) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        auto* shared = new SharedStack(64 * 1024);
        auto* fiber = new Fiber<>([] {}, *shared);
        (void)fiber;
        delete shared;
      },
      "weft: SharedStack destroyed while 1 fiber\\(s\\) still use it");
}

}  // namespace
}  // namespace weft
