#include "weft/testing/for_each_seed.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/yield.h"
#include "weft/testing/failure_hooks.h"
#include "weft/testing/simulation.h"

// This program does not include <weft/testing/gtest.h>: the tests install hooks of their
// own to see what forEachSeed reports (test/testing/gtest_test.cc checks GoogleTest's).

namespace {

using ::testing::HasSubstr;
using weft::Lazy;
using weft::testing::FailureHooks;
using weft::testing::Simulation;

// A lost update that only a few interleavings expose (docs/testing.md shows it: keep the
// two in step). The counter has no lock: `slow`
// reads it, awaits (a yield stands for any suspension: I/O, a lock elsewhere), then
// writes what it read plus one; `fast` increments it in one step. The update of `fast` is
// lost only when its increment lands between `slow`'s read and write: `slow` reads after
// 5 yields, `fast` increments after 12, so `fast` must run 7 steps ahead of `slow`. A
// FIFO executor alternates them and never does; the seeded scheduler does for a few
// seeds.
struct Counter {
  int value = 0;
};

Lazy<void> slow(Counter& counter) {
  for (int i = 0; i < 5; ++i) co_await weft::yield();
  const int read = counter.value;
  co_await weft::yield();  // the window
  counter.value = read + 1;
  for (int i = 0; i < 5; ++i) co_await weft::yield();
}

Lazy<void> fast(Counter& counter) {
  for (int i = 0; i < 12; ++i) co_await weft::yield();
  ++counter.value;
}

class LostUpdate : public std::runtime_error {
 public:
  LostUpdate() : std::runtime_error("lost update: the counter is 1, not 2") {}
};

// One run of the scenario; throws LostUpdate when the race shows.
void raceOnce(Simulation& sim) {
  Counter counter;
  sim.run(weft::collectAll(slow(counter), fast(counter)));
  if (counter.value != 2) throw LostUpdate();
}

// Installs `hooks` for the scope of a test.
class ScopedHooks {
 public:
  explicit ScopedHooks(FailureHooks hooks) : previous_(weft::testing::setFailureHooks(hooks)) {}
  ~ScopedHooks() { weft::testing::setFailureHooks(previous_); }
  ScopedHooks(const ScopedHooks&) = delete;
  ScopedHooks& operator=(const ScopedHooks&) = delete;

 private:
  FailureHooks previous_;
};

// What the hooks of these tests saw.
std::vector<std::string> gReports;
bool gFailed = false;
FailureHooks recordingHooks() {
  gReports.clear();
  gFailed = false;
  return FailureHooks{[] { return gFailed; },
                      [](std::string_view message) { gReports.emplace_back(message); }};
}

// Sets WEFT_TEST_SEED (nullptr: unsets it) for the scope of a test, and puts back what
// it was (a replay of some other test's seed must not change what these tests see).
class ScopedSeedVariable {
 public:
  explicit ScopedSeedVariable(const char* value) {
    if (const char* old = std::getenv("WEFT_TEST_SEED"); old != nullptr) previous_ = old;
    if (value != nullptr) {
      ::setenv("WEFT_TEST_SEED", value, 1);
    } else {
      ::unsetenv("WEFT_TEST_SEED");
    }
  }
  ~ScopedSeedVariable() {
    if (previous_) {
      ::setenv("WEFT_TEST_SEED", previous_->c_str(), 1);
    } else {
      ::unsetenv("WEFT_TEST_SEED");
    }
  }
  ScopedSeedVariable(const ScopedSeedVariable&) = delete;
  ScopedSeedVariable& operator=(const ScopedSeedVariable&) = delete;

 private:
  std::optional<std::string> previous_;
};

TEST(ForEachSeedTest, RunsEverySeedWithASimulationOfThatSeed) {
  ScopedSeedVariable noReplay(nullptr);
  std::vector<std::uint64_t> seeds;
  weft::testing::forEachSeed(5, [&](Simulation& sim) { seeds.push_back(sim.seed()); });
  EXPECT_EQ(seeds, (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  seeds.clear();
  weft::testing::forEachSeed(3, [&](std::uint64_t seed) { seeds.push_back(seed); });
  EXPECT_EQ(seeds, (std::vector<std::uint64_t>{0, 1, 2}));
}

TEST(ForEachSeedTest, FindsARaceFewInterleavingsExposeAndItsSeedReplaysIt) {
  ScopedSeedVariable noReplay(nullptr);
  ScopedHooks hooks(recordingHooks());
  // Rare: most seeds do not show it (and a FIFO order never would).
  int failing = 0;
  for (std::uint64_t seed = 0; seed < 1000; ++seed) {
    Simulation sim(seed);
    try {
      raceOnce(sim);
    } catch (const LostUpdate&) {
      ++failing;
    }
  }
  EXPECT_GT(failing, 0);
  EXPECT_LT(failing, 100);  // 50 (docs/testing.md)

  // forEachSeed stops at the first failing seed and names it.
  std::uint64_t found = 0;
  std::uint64_t runs = 0;
  EXPECT_THROW(weft::testing::forEachSeed(1000,
                                          [&](Simulation& sim) {
                                            ++runs;
                                            found = sim.seed();
                                            raceOnce(sim);
                                          }),
               LostUpdate);
  EXPECT_EQ(runs, found + 1);
  ASSERT_EQ(gReports.size(), 1u);
  EXPECT_THAT(gReports[0], HasSubstr("seed " + std::to_string(found) + " of 0..999 failed"));
  EXPECT_THAT(gReports[0], HasSubstr("WEFT_TEST_SEED=" + std::to_string(found)));
  EXPECT_THAT(gReports[0], HasSubstr("lost update"));

  // The seed replays it, every time.
  for (int replay = 0; replay < 3; ++replay) {
    Simulation sim(found);
    EXPECT_THROW(raceOnce(sim), LostUpdate);
  }
  // And so does WEFT_TEST_SEED, in forEachSeed itself: that seed only.
  const std::string seedText = std::to_string(found);
  ScopedSeedVariable variable(seedText.c_str());
  runs = 0;
  EXPECT_THROW(weft::testing::forEachSeed(1000,
                                          [&](Simulation& sim) {
                                            ++runs;
                                            EXPECT_EQ(sim.seed(), found);
                                            raceOnce(sim);
                                          }),
               LostUpdate);
  EXPECT_EQ(runs, 1u);
}

TEST(ForEachSeedTest, StopsAtASeedDuringWhichTheTestRecordedAFailure) {
  ScopedSeedVariable noReplay(nullptr);
  ScopedHooks hooks(recordingHooks());
  std::vector<std::uint64_t> seeds;
  weft::testing::forEachSeed(10, [&](std::uint64_t seed) {
    seeds.push_back(seed);
    if (seed == 3) gFailed = true;  // as an EXPECT_... that failed would
  });
  EXPECT_EQ(seeds, (std::vector<std::uint64_t>{0, 1, 2, 3}));
  ASSERT_EQ(gReports.size(), 1u);
  EXPECT_THAT(gReports[0], HasSubstr("seed 3 of 0..9 failed"));
  EXPECT_THAT(gReports[0], HasSubstr("WEFT_TEST_SEED=3"));
}

TEST(ForEachSeedTest, AFailureRecordedBeforeItIsNoSeedsFault) {
  ScopedSeedVariable noReplay(nullptr);
  ScopedHooks hooks(recordingHooks());
  gFailed = true;
  int runs = 0;
  weft::testing::forEachSeed(4, [&](std::uint64_t) { ++runs; });
  EXPECT_EQ(runs, 4);
  EXPECT_TRUE(gReports.empty());
}

TEST(ForEachSeedTest, RejectsASeedVariableThatIsNotANumber) {
  ScopedSeedVariable variable("twelve");
  EXPECT_THROW(weft::testing::forEachSeed(4, [](std::uint64_t) {}), std::invalid_argument);
}

}  // namespace
