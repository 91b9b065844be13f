#pragma once

#include <cstdint>

namespace weft::testing::detail {

// SplitMix64 (Steele, Lea and Flood): a small generator whose output depends only on its
// state, on every platform, which is what replaying a seed needs (std::uniform_int_distribution
// is implementation-defined). Used by Simulation (scheduler, tests, select) and Network
// (chunk sizes). noexcept: arithmetic. Not thread-safe: one owner.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) noexcept : state_(state) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) by the multiply-high method (bias below 2^-64 * bound); 0 for 0.
  std::uint64_t below(std::uint64_t bound) noexcept {
    if (bound == 0) return 0;
    return multiplyHigh(next(), bound);
  }

  // The high 64 bits of the 128-bit product a * b, in standard C++ (no __int128, which
  // -Wpedantic refuses in users' builds). The halves' cross sum cannot overflow: at most
  // (2^32 - 1)^2 + 2 (2^32 - 1) = 2^64 - 1.
  static std::uint64_t multiplyHigh(std::uint64_t a, std::uint64_t b) noexcept {
    const std::uint64_t aLow = a & 0xFFFFFFFFu, aHigh = a >> 32;
    const std::uint64_t bLow = b & 0xFFFFFFFFu, bHigh = b >> 32;
    const std::uint64_t lowLow = aLow * bLow, highLow = aHigh * bLow;
    const std::uint64_t lowHigh = aLow * bHigh, highHigh = aHigh * bHigh;
    const std::uint64_t cross = (lowLow >> 32) + (highLow & 0xFFFFFFFFu) + lowHigh;
    return highHigh + (highLow >> 32) + (cross >> 32);
  }

 private:
  std::uint64_t state_;
};

// The state of stream number `stream` of `seed`: independent streams from one seed (the
// scheduler's, the tests', select's, each connection's). Never 0 (select's generator
// takes 0 as "not seeded").
inline std::uint64_t streamState(std::uint64_t seed, std::uint64_t stream) noexcept {
  SplitMix64 mixer(seed ^ (stream * 0xD1B54A32D192ED03ull));
  const std::uint64_t state = mixer.next();
  return state != 0 ? state : 1;
}

}  // namespace weft::testing::detail
