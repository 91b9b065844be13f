#include "weft/executors/pool_metrics.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <string>

#include "weft/executors/detail/stall_watchdog.h"
#include "weft/executors/detail/thread_pool_worker.h"
#include "weft/executors/detail/worker_counters.h"
#include "weft/executors/thread_pool.h"

namespace weft {

namespace {

constexpr std::string_view kOpcodeNames[kIoOpcodeCount] = {
    "receive",
    "send",
    "accept",
    "connect",
    "receive_message",
    "send_message",
    "read_at",
    "write_at",
    "sync",
    "poll_readable",
    "poll_writable",
    "receive_lent",
    "receive_message_lent",
    "receive_multishot",
    "wait",
};
static_assert(static_cast<std::size_t>(IoOpcode::kReceiveMultishot) == 13 &&
                  static_cast<std::size_t>(IoOpcode::kWait) == 14 && kIoOpcodeCount == 15,
              "kOpcodeNames follows IoOpcode");

// The blocking pool's gauges (setBlockingGaugesReader). Acquire/release: the reader's
// code and data are published with the pointer.
std::atomic<BlockingGaugesReader> gBlockingGauges{nullptr};

}  // namespace

std::string_view ioOpcodeName(IoOpcode opcode) noexcept {
  const auto index = static_cast<std::size_t>(opcode);
  return index < kIoOpcodeCount ? kOpcodeNames[index] : std::string_view("unknown");
}

std::size_t LatenessHistogram::bucketOf(std::uint64_t nanos) noexcept {
  // Whole microseconds, rounded up: bucket i holds (2^(i-1), 2^i] us, bucket 0 [0, 1] us.
  const std::uint64_t micros = nanos / 1000 + (nanos % 1000 != 0 ? 1 : 0);
  if (micros <= 1) return 0;
  const auto i = static_cast<std::size_t>(std::bit_width(micros - 1));
  return std::min(i, kBuckets - 1);
}

void setBlockingGaugesReader(BlockingGaugesReader read) noexcept {
  gBlockingGauges.store(read, std::memory_order_release);
}

std::uint64_t ThreadPool::itemsRunBy(std::size_t index) const noexcept {
  const Worker& worker = *workers_[index];
  std::uint64_t popped;
  if (solo_) {
    popped = soloRun_.takenCount();  // by the worker, and by fibers on its thread
  } else {
    // Acquire: every steal this head includes was counted by its thief before its claim
    // (WorkStealingQueue::stealHalfInto), so the sum below covers them (and may cover a
    // steal under way that has not claimed yet: then the count lags for a moment).
    const std::uint64_t head = worker.queue.taken(std::memory_order_acquire);
    std::uint64_t stolen = 0;
    for (const auto& thief : workers_) stolen += detail::read(thief->stolenFrom[index]);
    popped = head > stolen ? head - stolen : 0;
  }
  const std::uint64_t count = popped + detail::read(worker.counters.itemsTaken);
  // Never less than a reader reported before (see Worker::reportedItemsRun).
  std::uint64_t reported = worker.reportedItemsRun.load(std::memory_order_relaxed);
  while (count > reported && !worker.reportedItemsRun.compare_exchange_weak(
                                 reported, count, std::memory_order_relaxed)) {
  }
  return std::max(count, reported);
}

PoolMetrics ThreadPool::metrics() const {
  PoolMetrics m;
  m.name = std::string(name());
  m.ioBackend = ioBackend_;
  m.workers.resize(workers_.size());
  WorkerMetrics& t = m.total;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const Worker& worker = *workers_[i];
    const detail::WorkerCounters& c = worker.counters;
    WorkerMetrics& w = m.workers[i];
    w.itemsRun = itemsRunBy(i);
    if (solo_) {
      w.queueDepth = soloRun_.sizeAnyThread();
      w.queueHighWater = soloRun_.highWater();
    } else {
      w.queueDepth = worker.queue.sizeHint();
      w.queueHighWater = worker.queue.highWater();
    }
    w.steals = detail::read(c.steals);
    w.stolenItems = detail::read(c.stolenItems);
    w.parks = detail::read(c.parks);
    w.wakeUps = detail::read(c.wakeUps);
    for (std::size_t op = 0; op < kIoOpcodeCount; ++op) {
      w.ioSubmitted[op] = detail::read(c.io.submitted[op]);
      w.ioCompleted[op] = detail::read(c.io.completed[op]);
    }
    w.timersArmed = detail::read(c.timersArmed);
    w.timersFired = detail::read(c.timersFired);
    w.timersShutDown = detail::read(c.timersShutDown);
    w.timersCancelled = detail::read(worker.timersCancelled);
    c.timerLateness.addTo(w.timerLateness);

    t.itemsRun += w.itemsRun;
    t.steals += w.steals;
    t.stolenItems += w.stolenItems;
    t.parks += w.parks;
    t.wakeUps += w.wakeUps;
    t.queueDepth += w.queueDepth;
    t.queueHighWater = std::max(t.queueHighWater, w.queueHighWater);
    for (std::size_t op = 0; op < kIoOpcodeCount; ++op) {
      t.ioSubmitted[op] += w.ioSubmitted[op];
      t.ioCompleted[op] += w.ioCompleted[op];
    }
    t.timersArmed += w.timersArmed;
    t.timersFired += w.timersFired;
    t.timersShutDown += w.timersShutDown;
    t.timersCancelled += w.timersCancelled;
    for (std::size_t b = 0; b < LatenessHistogram::kBuckets; ++b) {
      t.timerLateness.buckets[b] += w.timerLateness.buckets[b];
    }
    t.timerLateness.count += w.timerLateness.count;
    t.timerLateness.sumNanos += w.timerLateness.sumNanos;
  }
  // Relaxed: a gauge; the value some push or take stored.
  m.injectionQueueDepth = injectionSize_.load(std::memory_order_relaxed);
  m.timerThreadArmed = timers_.armedCount();
  m.timerThreadCancelled = timers_.cancelledCount() + detail::read(dueCancelled_);
  t.timersArmed += m.timerThreadArmed;
  t.timersCancelled += m.timerThreadCancelled;
  // Relaxed: a statistic (see its declaration).
  m.timersTakenFromBusyWorkers = timersTakenFromWorkers_.load(std::memory_order_relaxed);
  // Acquire: see gBlockingGauges.
  if (BlockingGaugesReader read = gBlockingGauges.load(std::memory_order_acquire)) {
    read(m.blockingThreads, m.blockingQueued);
  }
  if (watchdog_ != nullptr) {
    m.stalls = watchdog_->workerReports();
    m.wholePoolStalls = watchdog_->poolReports();
  }
  return m;
}

}  // namespace weft
