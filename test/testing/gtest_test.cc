#include "weft/testing/gtest.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <string_view>

#include "weft/testing/failure_hooks.h"

namespace {

TEST(GtestTest, IncludingTheHeaderInstallsGoogleTestsHooks) {
  const weft::testing::FailureHooks hooks = weft::testing::failureHooks();
  EXPECT_EQ(hooks.failed, &weft::testing::detail::gtestHasFailure);
  EXPECT_EQ(hooks.report, &weft::testing::detail::gtestReport);
  EXPECT_FALSE(hooks.failed());  // nothing failed so far in this test
}

TEST(GtestTest, AReportIsAFailureOfTheRunningTest) {
  EXPECT_NONFATAL_FAILURE(weft::testing::reportFailure("weft::testing: seed 7 failed"),
                          "seed 7 failed");
}

}  // namespace
