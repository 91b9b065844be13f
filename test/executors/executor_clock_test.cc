#include "weft/executors/executor_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <type_traits>

namespace {

using namespace std::chrono_literals;
using weft::ExecutorClock;

static_assert(std::is_same_v<ExecutorClock::time_point, std::chrono::steady_clock::time_point>);
static_assert(std::is_same_v<ExecutorClock::duration, std::chrono::steady_clock::duration>);
static_assert(ExecutorClock::is_steady);

TEST(ExecutorClockTest, IsTheSteadyClockOutsideAVirtualTimeScope) {
  EXPECT_EQ(ExecutorClock::virtualTime(), nullptr);
  const auto before = std::chrono::steady_clock::now();
  const auto now = ExecutorClock::now();
  const auto after = std::chrono::steady_clock::now();
  EXPECT_LE(before, now);
  EXPECT_LE(now, after);
}

TEST(ExecutorClockTest, ReadsTheVirtualTimeOfItsScopeOnItsThreadOnly) {
  ExecutorClock::time_point virtualNow{1h};
  ExecutorClock::time_point seenOnOtherThread{};
  {
    ExecutorClock::VirtualTimeScope scope(&virtualNow);
    EXPECT_EQ(ExecutorClock::virtualTime(), &virtualNow);
    EXPECT_EQ(ExecutorClock::now(), ExecutorClock::time_point{1h});
    virtualNow += 5s;  // the executor moves it
    EXPECT_EQ(ExecutorClock::now(), ExecutorClock::time_point{1h + 5s});
    std::thread([&] { seenOnOtherThread = ExecutorClock::now(); }).join();
  }
  EXPECT_NE(seenOnOtherThread, ExecutorClock::time_point{1h + 5s});  // the real clock
  EXPECT_EQ(ExecutorClock::virtualTime(), nullptr);
}

TEST(ExecutorClockTest, NestedScopesRestoreTheOuterOne) {
  ExecutorClock::time_point outer{1h};
  ExecutorClock::time_point inner{2h};
  ExecutorClock::VirtualTimeScope outerScope(&outer);
  {
    ExecutorClock::VirtualTimeScope innerScope(&inner);
    EXPECT_EQ(ExecutorClock::now(), inner);
    {
      ExecutorClock::VirtualTimeScope realScope(nullptr);  // the steady clock again
      EXPECT_EQ(ExecutorClock::virtualTime(), nullptr);
    }
    EXPECT_EQ(ExecutorClock::now(), inner);
  }
  EXPECT_EQ(ExecutorClock::now(), outer);
}

}  // namespace
