#pragma once

#include <atomic>

namespace weft::test {

// Counts live instances, for lifetime tests: a test resets the counters, creates
// coroutines holding Counted objects, and checks that every construction was matched by
// a destruction.
struct Counted {
  static inline std::atomic<int> constructions{0};
  static inline std::atomic<int> destructions{0};

  static void reset() {
    constructions = 0;
    destructions = 0;
  }
  static int alive() { return constructions.load() - destructions.load(); }

  Counted() { ++constructions; }
  Counted(const Counted&) { ++constructions; }
  Counted(Counted&&) noexcept { ++constructions; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) noexcept = default;
  ~Counted() { ++destructions; }
};

}  // namespace weft::test
