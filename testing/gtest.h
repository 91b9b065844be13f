#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "weft/testing/failure_hooks.h"

// weft::testing for GoogleTest: including this header in a test program installs
// GoogleTest's FailureHooks (during static initialisation, before main): forEachSeed then
// also stops at, and names, a seed during which an EXPECT_... or ASSERT_... failed, and
// what weft::testing reports outside exceptions (that seed, work still alive when a
// Simulation ends) becomes a failure of the running test (ADD_FAILURE).
//
// Requires GoogleTest (link GTest::gtest); nothing else of weft::testing does.
//
// Example:
//   #include <weft/testing/gtest.h>
//   #include <weft/testing/for_each_seed.h>
//   TEST(AccountTest, TransfersUnderEveryInterleaving) {
//     weft::testing::forEachSeed(1000, [](weft::testing::Simulation& sim) { ... });
//   }

namespace weft::testing::detail {

inline bool gtestHasFailure() { return ::testing::Test::HasFailure(); }

inline void gtestReport(std::string_view message) { ADD_FAILURE() << std::string(message); }

// Installs the hooks once per program (every translation unit that includes this header
// installs the same two functions).
inline const bool kGtestHooksInstalled =
    (setFailureHooks(FailureHooks{&gtestHasFailure, &gtestReport}), true);

}  // namespace weft::testing::detail
