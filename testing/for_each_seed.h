#pragma once

#include <concepts>
#include <cstdint>
#include <exception>

#include "weft/testing/simulation.h"

namespace weft::testing {

namespace detail {

// The seeds forEachSeed runs: first, first + 1, ... up to (not including) end.
struct SeedRange {
  std::uint64_t first;
  std::uint64_t end;
};

// 0..count-1, or only the seed that the environment variable WEFT_TEST_SEED names (a
// decimal number; then a line on stderr says so). Errors: std::invalid_argument when
// WEFT_TEST_SEED is set to something else than a number.
SeedRange seedRange(std::uint64_t count);

// True when the test framework's hook (FailureHooks::failed) says a failure was recorded.
// Errors: what the hook throws.
bool testFailed();

// Reports that `seed` failed: with `failure` (what it threw), or, when null, through the
// test framework (an EXPECT_... recorded a failure). To stderr and the report hook.
void reportSeedFailure(std::uint64_t seed, std::uint64_t count, const std::exception_ptr& failure);

}  // namespace detail

// forEachSeed(count, fn): runs `fn` once per seed 0, 1, ... count - 1, each time with a
// new Simulation of that seed (`fn(Simulation&)`), or with the seed alone
// (`fn(std::uint64_t)`), and stops at the first seed that fails, saying which: the seed
// replays that run exactly (same interleaving, same virtual times). A seed fails when
// `fn` throws (the exception is reported with the seed, then rethrown), or when the test
// framework recorded a failure during it (EXPECT_..., a leak that the Simulation reported:
// see FailureHooks; <weft/testing/gtest.h> installs GoogleTest's).
//
// To replay one seed, set the environment variable WEFT_TEST_SEED to it: forEachSeed
// then runs that seed only (whatever `count` is), in every test that calls it.
//
// Errors: what `fn` throws (after the report); std::invalid_argument for a WEFT_TEST_SEED
// that is not a number.
// Thread safety: runs `fn` on the calling thread, one seed after another.
//
// Example:
//   weft::testing::forEachSeed(1000, [](weft::testing::Simulation& sim) {
//     EXPECT_EQ(sim.run(transferBetweenAccounts()), 100);  // under 1000 interleavings
//   });
//   // weft::testing: forEachSeed: seed 412 of 0..999 failed ...; replay it alone with
//   // WEFT_TEST_SEED=412
template <class F>
  requires std::invocable<F&, Simulation&> || std::invocable<F&, std::uint64_t>
void forEachSeed(std::uint64_t count, F&& fn) {
  const detail::SeedRange range = detail::seedRange(count);
  // A failure recorded before the first seed is not any seed's.
  const bool failedBefore = detail::testFailed();
  for (std::uint64_t seed = range.first; seed != range.end; ++seed) {
    try {
      if constexpr (std::invocable<F&, Simulation&>) {
        Simulation sim(seed);
        fn(sim);
      } else {
        fn(seed);
      }
    } catch (...) {
      detail::reportSeedFailure(seed, count, std::current_exception());
      throw;
    }
    if (!failedBefore && detail::testFailed()) {
      detail::reportSeedFailure(seed, count, nullptr);
      return;
    }
  }
}

}  // namespace weft::testing
