#pragma once

#include <atomic>
#include <cstdint>

#include "weft/executors/timer_entry.h"

namespace weft::detail {

// The wake token's futex (a ThreadPoolWorker's wakeToken: the word its worker parks on).
// std::atomic::wait has no timeout, and libstdc++'s notify makes no system call unless a
// waiter registered through std::atomic::wait: a worker that waits with a raw futex must
// be woken by one too, so every wait and wake of a token goes through these two.
//
// Thread safety: any thread; one thread at most waits on a word (its worker).

// Waits while `word` holds `expected`, until `deadline` (steady_clock ticks, absolute;
// time_point::max()'s count, detail::kNoTimer: no limit). Returns on a wake, a timeout, a
// signal or a changed word: the caller checks. noexcept: a system call whose failures are
// all "returned".
void futexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               TimerEntry::Clock::rep deadline) noexcept;

// Wakes the thread waiting on `word` (one at most waits: its worker). noexcept: as above.
void futexWake(std::atomic<std::uint32_t>& word) noexcept;

}  // namespace weft::detail
