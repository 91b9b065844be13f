#pragma once

#include <string_view>

namespace weft::testing {

// FailureHooks: how weft::testing talks to the test framework it runs under. weft's
// testing module does not depend on one; <weft/testing/gtest.h> installs GoogleTest's.
//
//  - failed(): true once the running test has recorded a failure (GoogleTest:
//    ::testing::Test::HasFailure()). forEachSeed asks it after each seed, so that a seed
//    whose EXPECT_... failed is reported with its seed, as one that threw is.
//  - report(message): records a failure with `message` (GoogleTest: ADD_FAILURE()), for
//    what weft::testing finds outside any exception: the seed that failed, work still
//    alive when a Simulation ends.
//
// Without hooks (both null, the default), failed() counts as false and a report is only
// written to stderr (it always is).
struct FailureHooks {
  bool (*failed)() = nullptr;
  void (*report)(std::string_view message) = nullptr;
};

// Installs `hooks` for the whole process (replacing the previous ones) and returns the
// previous ones. noexcept: two stores. Thread safety: install them before tests start
// (GoogleTest's are installed during static initialisation by <weft/testing/gtest.h>);
// installing concurrently with a report is a data race.
FailureHooks setFailureHooks(FailureHooks hooks) noexcept;

// The hooks installed now. noexcept: a copy.
FailureHooks failureHooks() noexcept;

// Writes `message` and a newline to stderr, then calls the report hook, if any.
// Errors: what the hook throws (GoogleTest's does not). Thread safety: any thread.
void reportFailure(std::string_view message);

}  // namespace weft::testing
