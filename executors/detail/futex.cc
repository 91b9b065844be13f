#include "weft/executors/detail/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <limits>

namespace weft::detail {

namespace {

using TimerClock = TimerEntry::Clock;
using TimerRep = TimerClock::rep;

// futexWait's "no limit" (kNoTimer in executors/detail/thread_pool_worker.h).
constexpr TimerRep kNoDeadline = std::numeric_limits<TimerRep>::max();

}  // namespace

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
              std::atomic<std::uint32_t>::is_always_lock_free);

void futexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               TimerRep deadline) noexcept {
  timespec at{};
  const timespec* timeout = nullptr;
  if (deadline != kNoDeadline) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(TimerClock::duration(deadline))
            .count();
    at.tv_sec = static_cast<time_t>(ns / 1000000000);
    at.tv_nsec = static_cast<long>(ns % 1000000000);
    timeout = &at;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time (steady_clock's clock), so a
  // retry waits for the same deadline.
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_BITSET_PRIVATE,
                  expected, timeout, nullptr, FUTEX_BITSET_MATCH_ANY);
}

void futexWake(std::atomic<std::uint32_t>& word) noexcept {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1,
                  nullptr, nullptr, 0);
}

}  // namespace weft::detail
