// The stall watchdog's arithmetic (stallTime): wall time less the run-queue wait that two
// schedstat texts show. The watchdog itself is tested through ThreadPool
// (test/executors/thread_pool_stall_test.cc).

#include "weft/executors/detail/stall_watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

namespace weft::detail {
namespace {

using namespace std::chrono_literals;

TEST(StallWatchdogTest, SubtractsTheRunQueueWaitBetweenTheTwoTexts) {
  // 300 ms of wall time, 250 ms of it waiting for a CPU: 50 ms of stall.
  EXPECT_EQ(stallTime(300ms, "1000 2000000 7\n", "51001000 252000000 9\n"), 50ms);
  // Without the newline too (the kernel writes one).
  EXPECT_EQ(stallTime(300ms, "1000 2000000 7", "51001000 252000000 9"), 50ms);
}

TEST(StallWatchdogTest, AThreadThatDidNotWaitStallsForTheWallTime) {
  // Blocked in a system call: neither the CPU time nor the wait moves.
  EXPECT_EQ(stallTime(700ms, "5 6 7\n", "5 6 7\n"), 700ms);
  // Running all along: only the CPU time moves.
  EXPECT_EQ(stallTime(700ms, "5 6 7\n", "700000005 6 8\n"), 700ms);
}

TEST(StallWatchdogTest, AThreadThatWaitedAllAlongHasNotStalled) {
  EXPECT_EQ(stallTime(700ms, "5 6 7\n", "5 700000006 8\n"), 0ns);
  // A wait a little longer than the wall time (the reads and the clock are not taken at
  // one instant) is no stall either, not a negative one.
  EXPECT_EQ(stallTime(700ms, "5 6 7\n", "5 800000006 8\n"), 0ns);
}

TEST(StallWatchdogTest, WithoutTwoReadableTextsItIsTheWallTime) {
  // No schedstat (a kernel without CONFIG_SCHED_INFO, a thread that has ended).
  EXPECT_EQ(stallTime(300ms, "", ""), 300ms);
  EXPECT_EQ(stallTime(300ms, "", "5 6 7\n"), 300ms);
  EXPECT_EQ(stallTime(300ms, "5 6 7\n", ""), 300ms);
  // Not three numbers.
  EXPECT_EQ(stallTime(300ms, "5 6\n", "5 100000006\n"), 300ms);
  EXPECT_EQ(stallTime(300ms, "5 6 7\n", "5 100000006 8 9\n"), 300ms);
  EXPECT_EQ(stallTime(300ms, "5 6 7\n", "5 -100000006 8\n"), 300ms);
  EXPECT_EQ(stallTime(300ms, "5 6 7\n", "5  100000006 8\n"), 300ms);
  EXPECT_EQ(stallTime(300ms, "5 6 7\n", "5 x 8\n"), 300ms);
  EXPECT_EQ(stallTime(300ms, "5 6 7\n", "5 99999999999999999999999 8\n"), 300ms);
  // A wait that went back (not the same thread).
  EXPECT_EQ(stallTime(300ms, "5 100000006 7\n", "5 6 7\n"), 300ms);
}

TEST(StallWatchdogTest, NoWallTimeIsNoStall) {
  EXPECT_EQ(stallTime(0ns, "5 6 7\n", "5 6 7\n"), 0ns);
  EXPECT_EQ(stallTime(-1ns, "", ""), 0ns);
}

TEST(StallWatchdogTest, ReadsThisKernelsSchedstatWhereThereIsOne) {
  std::ifstream file("/proc/self/schedstat");
  if (!file) GTEST_SKIP() << "no /proc/self/schedstat (a kernel without CONFIG_SCHED_INFO)";
  std::stringstream text;
  text << file.rdbuf();
  unsigned long long cpu = 0, wait = 0, slices = 0;
  std::istringstream numbers(text.str());
  ASSERT_TRUE(numbers >> cpu >> wait >> slices) << text.str();
  // The kernel's own text parses: 100 ms more wait than it shows is 100 ms less stall.
  const std::string later = std::to_string(cpu) + " " + std::to_string(wait + 100000000) + " " +
                            std::to_string(slices) + "\n";
  EXPECT_EQ(stallTime(300ms, text.str(), later), 200ms) << text.str();
}

}  // namespace
}  // namespace weft::detail
