// coro/detail/config.h read the way a source tree used without CMake, Bazel or an installed
// weft reads it: with no WEFT_TASK_TRACKING definition, and in a release build (NDEBUG).
// Only that header is included before the macro is read, so that nothing else in this
// program is compiled with another value (the build's definition is taken away here alone,
// and config.h holds macros only).
#undef WEFT_TASK_TRACKING
#ifndef NDEBUG
#define NDEBUG 1
#endif
#include "weft/coro/detail/config.h"

namespace {
constexpr int kTrackingWithoutADefinition = WEFT_TASK_TRACKING;
}  // namespace

#include <gtest/gtest.h>

namespace {

// Task tracking is on by default in every build type: NDEBUG does not turn it off.
TEST(ConfigTest, TaskTrackingIsOnWithoutADefinitionEvenWithNdebug) {
  EXPECT_EQ(kTrackingWithoutADefinition, 1);
}

}  // namespace
