#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "weft/executors/io_loop.h"
#include "weft/executors/pool_metrics.h"

namespace weft::detail {

// One counter of ThreadPool's metrics (executors/pool_metrics.h): written by one thread at
// a time, read by any.
//
// Cost rule: no read-modify-write. The writer adds with a relaxed load and a relaxed
// store of the sum (on x86-64 and aarch64 a plain load, add and store: no lock prefix, no
// exclusive pair), which is exact because nobody else writes the counter meanwhile:
// either it belongs to one thread (a worker's own counters), or every writer holds the
// same mutex. Readers load it relaxed: a counter is a statistic, ordered with nothing
// else; a reader sees each writer's stores in order (coherence), so a counter read twice
// never goes back.
using Counter = std::atomic<std::uint64_t>;

// Adds `n` to `counter`. Precondition: the caller is the counter's only writer now (see
// above). noexcept: two relaxed accesses.
[[gnu::always_inline]] inline void bump(Counter& counter, std::uint64_t n = 1) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// Raises `gauge` to `value` if it is lower. Precondition: as bump. noexcept: as bump.
[[gnu::always_inline]] inline void raise(Counter& gauge, std::uint64_t value) noexcept {
  if (value > gauge.load(std::memory_order_relaxed)) {
    gauge.store(value, std::memory_order_relaxed);
  }
}

// Reads `counter` for a snapshot. noexcept: a relaxed load.
inline std::uint64_t read(const Counter& counter) noexcept {
  return counter.load(std::memory_order_relaxed);
}

// The operations an event loop served, by opcode: written by the loop's thread only
// (IoLoopBase), read by ThreadPool::metrics() from any thread.
struct IoOpCounters {
  Counter submitted[kIoOpcodeCount] = {};
  Counter completed[kIoOpcodeCount] = {};
  // The sum of `completed`, in one word: the stall watchdog's progress count reads it.
  Counter completedAll{0};
};

// A lateness histogram's counters (LatenessHistogram): written by one thread at a time.
struct LatenessCounters {
  Counter buckets[LatenessHistogram::kBuckets] = {};
  Counter sumNanos{0};

  // Counts one timer `nanos` late (negative: on time, counted as 0). noexcept: bumps.
  void record(std::int64_t nanos) noexcept {
    const std::uint64_t late = nanos > 0 ? static_cast<std::uint64_t>(nanos) : 0;
    bump(buckets[LatenessHistogram::bucketOf(late)]);
    bump(sumNanos, late);
  }
  // Adds these counts to `out`. noexcept: relaxed loads.
  void addTo(LatenessHistogram& out) const noexcept {
    for (std::size_t i = 0; i < LatenessHistogram::kBuckets; ++i) {
      const std::uint64_t n = read(buckets[i]);
      out.buckets[i] += n;
      out.count += n;
    }
    out.sumNanos += read(sumNanos);
  }
};

// The counters a ThreadPool worker writes itself (each has that one writer). 64-byte
// aligned (the common cache line size), so that none shares a line with another worker's
// data: a reader's load only ever shares a line the worker owns, and the worker's next
// store takes it back; no two writers contend for a line.
//
// Nothing here is written per item: the items a worker runs from its own queue are
// counted by the queue's head index, which it moves anyway (executors/pool_metrics.cc);
// only the items it takes from elsewhere are counted here, on paths that lock or steal.
struct alignas(64) WorkerCounters {
  // Items the worker took other than by popping its own queue: the first item of a steal
  // or of a share of the injection queue (the rest go through its queue), and timers it
  // fired (its own, and due ones).
  Counter itemsTaken{0};
  Counter steals{0};
  Counter stolenItems{0};
  Counter parks{0};
  Counter wakeUps{0};
  Counter timersArmed{0};
  Counter timersFired{0};
  Counter timersShutDown{0};
  LatenessCounters timerLateness;
  // The worker's progress count (the stall watchdog's: its queue's head index, itemsTaken,
  // I/O completions run) as of the moment it last ran out of work: while the count still
  // equals it, the worker is idle, not stalled. Stored when it starts to look for work
  // (findWork).
  Counter idleAt{~std::uint64_t{0}};

  // Written by the worker's event loop, on the worker's thread (IoLoopBase::countInto).
  alignas(64) IoOpCounters io;
};

}  // namespace weft::detail
