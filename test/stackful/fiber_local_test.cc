#include "weft/stackful/fiber_local.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "weft/stackful/fiber.h"
#include "test/support/counted.h"

namespace weft {
namespace {

using test::Counted;

TEST(FiberLocalTest, EachFiberHasItsOwnInstance) {
  FiberLocal<int> local;
  Fiber<int> a([&] {
    *local = 1;
    this_fiber::yield();
    return *local;
  });
  Fiber<int> b([&] {
    *local = 2;
    this_fiber::yield();
    return *local;
  });
  a.resume();
  b.resume();
  *local = 3;  // the thread's own instance
  a.resume();
  b.resume();
  EXPECT_EQ(a.result(), 1);
  EXPECT_EQ(b.result(), 2);
  EXPECT_EQ(*local, 3);
}

TEST(FiberLocalTest, StartsFromTheInitialValue) {
  FiberLocal<std::string> local(std::string("initial"));
  Fiber<std::string> fiber([&] {
    std::string first = *local;
    local->append("+fiber");
    return first + "|" + *local;
  });
  fiber.resume();
  EXPECT_EQ(fiber.result(), "initial|initial+fiber");
  EXPECT_EQ(*local, "initial");
}

TEST(FiberLocalTest, ValuesDieWithTheirFiber) {
  Counted::reset();
  FiberLocal<Counted> local;
  {
    Fiber<> fiber([&] {
      (void)local.get();
      this_fiber::yield();
    });
    fiber.resume();
    EXPECT_EQ(Counted::alive(), 1);
  }  // destroyed while suspended: unwound, then its FiberLocal values freed
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(FiberLocalTest, ThreadsOutsideFibersHaveTheirOwnInstance) {
  FiberLocal<int> local;
  *local = 10;
  int seen = -1;
  std::thread([&] { seen = *local; }).join();
  EXPECT_EQ(seen, 0);
  EXPECT_EQ(*local, 10);
}

TEST(FiberLocalTest, DistinctFiberLocalsDoNotMix) {
  FiberLocal<int> x, y;
  Fiber<> fiber([&] {
    *x = 1;
    *y = 2;
    EXPECT_EQ(*x, 1);
    EXPECT_EQ(*y, 2);
  });
  fiber.resume();
  EXPECT_TRUE(fiber.done());
}

}  // namespace
}  // namespace weft
