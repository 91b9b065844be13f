// ThreadPool::metrics() (executors/pool_metrics.h): every count is checked exactly on a
// workload whose count is known (N items, N timers, a steal forced by a hand-shake), and a
// reader runs beside churn, formatting Prometheus text too (the TSan build checks that
// reading is race-free). prometheus_text_test.cc parses the text back. No sleep and no timing:
// hand-shakes, with a watchdog turning a hang into a failure.

#include "weft/executors/pool_metrics.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test/support/io_backends.h"
#include "test/support/wait_until.h"
#include "test/support/watchdog.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/yield.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/prometheus_text.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/blocking.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = TimerEntry::Clock;

constexpr auto kLimit = 120s;

// Runs `fn` on one of `pool`'s workers and waits until it has returned.
template <class Fn>
void runOnWorker(ThreadPool& pool, Fn fn) {
  std::atomic<bool> done{false};
  pool.schedule([&] {
    fn();
    done.store(true);
  });
  test::waitUntil([&] { return done.load(); });
}

// A timer whose fire function counts, in `fired` (shut-down fires in `shutDown`).
struct CountingTimer : TimerEntry {
  std::atomic<int>* fired = nullptr;
  std::atomic<int>* shutDownFires = nullptr;
  CountingTimer() {
    complete = [](Job* self, bool run) {
      auto* timer = static_cast<CountingTimer*>(self);
      if (run && !timer->shutDown) {
        timer->fired->fetch_add(1);
      } else {
        timer->shutDownFires->fetch_add(1);
      }
    };
  }
};

TEST(PoolMetricsTest, CountsEveryItemOfOneWorker) {
  test::Watchdog watchdog(kLimit, "PoolMetricsTest.CountsEveryItemOfOneWorker");
  ThreadPool pool(1, "metrics");
  constexpr int kItems = 1000;
  std::atomic<int> ran{0};
  for (int i = 0; i < kItems; ++i) pool.schedule([&] { ran.fetch_add(1); });
  test::waitUntil([&] { return ran.load() == kItems; });
  PoolMetrics m = pool.metrics();
  ASSERT_EQ(m.workers.size(), 1u);
  EXPECT_EQ(m.name, "metrics");
  // Each callable is one item; the bump comes before the item runs, and the item's
  // fetch_add is what we waited for.
  EXPECT_EQ(m.workers[0].itemsRun, static_cast<std::uint64_t>(kItems));
  EXPECT_EQ(m.total.itemsRun, static_cast<std::uint64_t>(kItems));
  EXPECT_EQ(m.total.steals, 0u);  // one worker steals from nobody
  EXPECT_EQ(m.injectionQueueDepth, 0u);

  // A Lazy that yields K times: its start is one item (syncAwait schedules it), each
  // yield one more. The end goes back to this thread, not through the pool.
  constexpr int kYields = 50;
  syncAwait(
      [&]() -> Lazy<> {
        for (int i = 0; i < kYields; ++i) co_await yield();
      }(),
      &pool);
  m = pool.metrics();
  EXPECT_EQ(m.workers[0].itemsRun, static_cast<std::uint64_t>(kItems + 1 + kYields));
}

TEST(PoolMetricsTest, QueueGaugesOfOneWorker) {
  test::Watchdog watchdog(kLimit, "PoolMetricsTest.QueueGaugesOfOneWorker");
  ThreadPool pool(1);
  // One item queues 100 more on its own worker: the queue holds 100 when the first of them
  // is taken (the gauges are published as each item is taken).
  constexpr int kQueued = 100;
  std::atomic<int> ran{0};
  runOnWorker(pool, [&] {
    for (int i = 0; i < kQueued; ++i) pool.schedule([&] { ran.fetch_add(1); });
  });
  test::waitUntil([&] { return ran.load() == kQueued; });
  const PoolMetrics m = pool.metrics();
  EXPECT_EQ(m.workers[0].queueHighWater, static_cast<std::uint64_t>(kQueued));
  EXPECT_EQ(m.workers[0].queueDepth, 0u);  // as of the last item: nothing behind it
}

TEST(PoolMetricsTest, CountsStealsForcedByABlockedWorker) {
  test::Watchdog watchdog(kLimit, "PoolMetricsTest.CountsStealsForcedByABlockedWorker");
  constexpr int kItems = 64;
  // Before the pool: the blocker may still be polling `release` when the test's body
  // ends, and the pool's destructor waits for it.
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  std::atomic<bool> blockerStarted{false};
  ThreadPool pool(2);
  // The blocker runs on one worker (taken from the injection queue and run at once, never
  // queued where the other could steal it), queues kItems on its own worker and blocks
  // until they have all run: the other worker can only get them by stealing.
  pool.schedule([&] {
    blockerStarted.store(true);
    for (int i = 0; i < kItems; ++i) pool.schedule([&] { ran.fetch_add(1); });
    test::waitUntil([&] { return release.load(); });
  });
  test::waitUntil([&] { return ran.load() == kItems; });
  const PoolMetrics during = pool.metrics();
  release.store(true);
  ASSERT_TRUE(blockerStarted.load());
  // Every item was stolen: one worker stole all of them (in one or more steals: it may
  // have started while the blocker was still queueing), the other (the blocker's) none.
  EXPECT_EQ(during.total.stolenItems, static_cast<std::uint64_t>(kItems));
  EXPECT_GE(during.total.steals, 1u);
  EXPECT_LE(during.total.steals, static_cast<std::uint64_t>(kItems));
  const WorkerMetrics& a = during.workers[0];
  const WorkerMetrics& b = during.workers[1];
  EXPECT_TRUE((a.stolenItems == kItems && b.stolenItems == 0) ||
              (a.stolenItems == 0 && b.stolenItems == kItems))
      << a.stolenItems << " " << b.stolenItems;
  // The thief ran every item; the blocker's worker ran the blocker only.
  EXPECT_EQ(during.total.itemsRun, static_cast<std::uint64_t>(kItems + 1));
  const WorkerMetrics& thief = a.stolenItems != 0 ? a : b;
  const WorkerMetrics& blocked = a.stolenItems != 0 ? b : a;
  EXPECT_EQ(thief.itemsRun, static_cast<std::uint64_t>(kItems));
  EXPECT_EQ(blocked.itemsRun, 1u);
  // The blocker's queue held the items (at most all of them at once).
  EXPECT_GE(blocked.queueHighWater, 1u);
  EXPECT_LE(blocked.queueHighWater, static_cast<std::uint64_t>(kItems));
}

TEST(PoolMetricsTest, CountsParksAndWakeUps) {
  test::Watchdog watchdog(kLimit, "PoolMetricsTest.CountsParksAndWakeUps");
  ThreadPool pool(1);
  auto parks = [&] { return pool.metrics().workers[0].parks; };
  // The worker starts with nothing to do: it parks once.
  test::waitUntil([&] { return parks() == 1; });
  constexpr int kRounds = 20;
  std::atomic<int> ran{0};
  for (int i = 1; i <= kRounds; ++i) {
    // The worker is parked (it counted the park after its last sweep): this push finds
    // nobody searching and one sleeper, and wakes it.
    pool.schedule([&] { ran.fetch_add(1); });
    test::waitUntil([&] { return ran.load() == i; });
    test::waitUntil([&] { return parks() == static_cast<std::uint64_t>(i + 1); });
  }
  const PoolMetrics m = pool.metrics();
  EXPECT_EQ(m.workers[0].parks, static_cast<std::uint64_t>(kRounds + 1));
  EXPECT_EQ(m.workers[0].wakeUps, static_cast<std::uint64_t>(kRounds));
}

TEST(PoolMetricsTest, CountsWorkerTimersArmedFiredAndCancelled) {
  test::Watchdog watchdog(kLimit, "PoolMetricsTest.CountsWorkerTimersArmedFiredAndCancelled");
  ThreadPool pool(1);
  constexpr int kFiring = 40;
  constexpr int kCancelled = 25;
  constexpr int kAtShutdown = 7;
  std::atomic<int> fired{0};
  std::atomic<int> shutDown{0};
  std::vector<CountingTimer> firing(kFiring), cancelled(kCancelled), pending(kAtShutdown);
  for (auto* group : {&firing, &cancelled, &pending}) {
    for (CountingTimer& t : *group) {
      t.fired = &fired;
      t.shutDownFires = &shutDown;
    }
  }
  // Armed on the worker: in its own heap. Due at once, or in an hour.
  runOnWorker(pool, [&] {
    for (CountingTimer& t : firing) {
      t.deadline = Clock::now();
      pool.scheduleTimer(t);
    }
    for (CountingTimer& t : cancelled) {
      t.deadline = Clock::now() + 1h;
      pool.scheduleTimer(t);
    }
    for (CountingTimer& t : pending) {
      t.deadline = Clock::now() + 1h;
      pool.scheduleTimer(t);
    }
  });
  test::waitUntil([&] { return fired.load() == kFiring; });
  for (CountingTimer& t : cancelled) ASSERT_TRUE(pool.cancelTimer(t));  // from this thread
  PoolMetrics m = pool.metrics();
  const WorkerMetrics& w = m.workers[0];
  EXPECT_EQ(w.timersArmed, static_cast<std::uint64_t>(kFiring + kCancelled + kAtShutdown));
  // Fired by the worker itself, or (on a slow machine) by way of the due list when the
  // backstop took them from it: the worker fires them either way.
  EXPECT_EQ(w.timersFired, static_cast<std::uint64_t>(kFiring));
  EXPECT_EQ(w.timersCancelled, static_cast<std::uint64_t>(kCancelled));
  EXPECT_EQ(w.timersShutDown, 0u);
  EXPECT_EQ(w.timerLateness.count, static_cast<std::uint64_t>(kFiring));
  std::uint64_t inBuckets = 0;
  for (std::uint64_t n : w.timerLateness.buckets) inBuckets += n;
  EXPECT_EQ(inBuckets, static_cast<std::uint64_t>(kFiring));
  EXPECT_EQ(m.timerThreadArmed, 0u);
  // A worker item per fire function, and the one that armed them.
  EXPECT_EQ(w.itemsRun, static_cast<std::uint64_t>(kFiring + 1));

  pool.shutdown();  // the pending ones fire now, with shutDown set
  EXPECT_EQ(shutDown.load(), kAtShutdown);
  m = pool.metrics();  // readable after shutdown
  EXPECT_EQ(m.workers[0].timersShutDown, static_cast<std::uint64_t>(kAtShutdown));
  EXPECT_EQ(m.workers[0].timersFired, static_cast<std::uint64_t>(kFiring));
  EXPECT_EQ(m.total.timersArmed,
            m.total.timersFired + m.total.timersCancelled + m.total.timersShutDown);
}

TEST(PoolMetricsTest, CountsTimersOfTheTimerThread) {
  test::Watchdog watchdog(kLimit, "PoolMetricsTest.CountsTimersOfTheTimerThread");
  ThreadPool pool(2);
  constexpr int kFiring = 30;
  constexpr int kCancelled = 12;
  std::atomic<int> fired{0};
  std::atomic<int> shutDown{0};
  std::vector<CountingTimer> firing(kFiring), cancelled(kCancelled);
  // Armed from this thread (outside the pool): on the pool's timer thread, which hands
  // each to the workers when due.
  for (CountingTimer& t : firing) {
    t.fired = &fired;
    t.shutDownFires = &shutDown;
    t.deadline = Clock::now();
    pool.scheduleTimer(t);
  }
  for (CountingTimer& t : cancelled) {
    t.fired = &fired;
    t.shutDownFires = &shutDown;
    t.deadline = Clock::now() + 1h;
    pool.scheduleTimer(t);
  }
  test::waitUntil([&] { return fired.load() == kFiring; });
  for (CountingTimer& t : cancelled) ASSERT_TRUE(pool.cancelTimer(t));
  const PoolMetrics m = pool.metrics();
  EXPECT_EQ(m.timerThreadArmed, static_cast<std::uint64_t>(kFiring + kCancelled));
  EXPECT_EQ(m.timerThreadCancelled, static_cast<std::uint64_t>(kCancelled));
  EXPECT_EQ(m.total.timersFired, static_cast<std::uint64_t>(kFiring));
  EXPECT_EQ(m.total.timerLateness.count, static_cast<std::uint64_t>(kFiring));
  EXPECT_EQ(m.total.timersArmed, static_cast<std::uint64_t>(kFiring + kCancelled));
  EXPECT_EQ(m.total.timersCancelled, static_cast<std::uint64_t>(kCancelled));
  for (const WorkerMetrics& w : m.workers) EXPECT_EQ(w.timersArmed, 0u);
}

TEST(PoolMetricsTest, ReportsTheDefaultBlockingPool) {
  test::Watchdog watchdog(kLimit, "PoolMetricsTest.ReportsTheDefaultBlockingPool");
  ThreadPool pool(1);
  std::atomic<bool> inside{false};
  std::atomic<bool> release{false};
  std::thread caller([&] {
    syncAwait(
        [&]() -> Lazy<> {
          co_await blocking([&] {
            inside.store(true);
            test::waitUntil([&] { return release.load(); });
          });
        }(),
        &pool);
  });
  test::waitUntil([&] { return inside.load(); });
  const PoolMetrics m = pool.metrics();
  release.store(true);
  caller.join();
  EXPECT_GE(m.blockingThreads, 1u);  // the one running the call, at least
  EXPECT_EQ(m.blockingQueued, 0u);   // it was taken, not queued
}

TEST(PoolMetricsTest, LatenessBuckets) {
  using H = LatenessHistogram;
  EXPECT_EQ(H::bucketOf(0), 0u);
  EXPECT_EQ(H::bucketOf(1000), 0u);  // 1 us: le 1 us
  EXPECT_EQ(H::bucketOf(1001), 1u);  // just above: le 2 us
  EXPECT_EQ(H::bucketOf(2000), 1u);
  EXPECT_EQ(H::bucketOf(2001), 2u);
  EXPECT_EQ(H::bucketOf(1000 * 1000), 10u);  // 1 ms <= 1024 us
  EXPECT_EQ(H::bucketOf((std::uint64_t{1} << 21) * 1000), H::kBuckets - 2);
  EXPECT_EQ(H::bucketOf((std::uint64_t{1} << 21) * 1000 + 1), H::kBuckets - 1);
  EXPECT_EQ(H::bucketOf(~std::uint64_t{0}), H::kBuckets - 1);
}

class PoolMetricsIoTest : public ::testing::TestWithParam<IoBackendChoice> {};

// Counts what a worker's loop does: one receive that waits (completed when data comes),
// one send, each submitted and completed once.
TEST_P(PoolMetricsIoTest, CountsIoOperationsByOpcode) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  test::Watchdog watchdog(kLimit, "PoolMetricsIoTest.CountsIoOperationsByOpcode");
  ThreadPoolOptions options;
  options.threads = 1;
  options.ioBackend = GetParam();
  ThreadPool pool(options);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);

  struct Op : IoOperation {
    std::atomic<bool> done{false};
  };
  Op receive;
  Op send;
  char in[8] = {};
  char out[3] = {'a', 'b', 'c'};
  auto complete = [](IoOperation& op) noexcept { static_cast<Op&>(op).done.store(true); };
  runOnWorker(pool, [&] {
    IoLoop* loop = IoLoop::current();
    receive.opcode = IoOpcode::kReceive;
    receive.fd = fds[0];
    receive.buffer = in;
    receive.length = sizeof in;
    receive.complete = complete;
    if (loop->submit(receive)) receive.done.store(true);  // nothing to read yet: it waits
    send.opcode = IoOpcode::kSend;
    send.fd = fds[0];
    send.buffer = out;
    send.length = sizeof out;
    send.complete = complete;
    if (loop->submit(send)) send.done.store(true);
  });
  ASSERT_EQ(::write(fds[1], "xy", 2), 2);
  test::waitUntil([&] { return receive.done.load() && send.done.load(); });
  EXPECT_EQ(receive.result, 2);
  EXPECT_EQ(send.result, 3);
  const PoolMetrics m = pool.metrics();
  const WorkerMetrics& w = m.workers[0];
  const auto r = static_cast<std::size_t>(IoOpcode::kReceive);
  const auto s = static_cast<std::size_t>(IoOpcode::kSend);
  EXPECT_EQ(w.ioSubmitted[r], 1u);
  EXPECT_EQ(w.ioCompleted[r], 1u);
  EXPECT_EQ(w.ioSubmitted[s], 1u);
  EXPECT_EQ(w.ioCompleted[s], 1u);
  std::uint64_t others = 0;
  for (std::size_t op = 0; op < kIoOpcodeCount; ++op) {
    if (op != r && op != s) others += w.ioSubmitted[op] + w.ioCompleted[op];
  }
  EXPECT_EQ(others, 0u);
  EXPECT_EQ(m.total.ioSubmitted[r], 1u);
  pool.shutdown();
  ::close(fds[0]);
  ::close(fds[1]);
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolMetricsIoTest, test::kIoBackends, test::ioBackendName);

TEST(PoolMetricsTest, NamesEveryOpcode) {
  std::set<std::string_view> names;
  for (std::size_t op = 0; op < kIoOpcodeCount; ++op) {
    const std::string_view name = ioOpcodeName(static_cast<IoOpcode>(op));
    EXPECT_NE(name, "unknown");
    names.insert(name);
  }
  EXPECT_EQ(names.size(), kIoOpcodeCount);
  EXPECT_EQ(ioOpcodeName(IoOpcode::kReceiveMultishot), "receive_multishot");
  EXPECT_EQ(ioOpcodeName(static_cast<IoOpcode>(200)), "unknown");
}

// Read in a loop beside heavy churn (items, steals, timers): the counters never go back,
// and (under TSan) no read races with the workers' writes.
TEST(PoolMetricsTest, ReadWhileThePoolChurns) {
  test::Watchdog watchdog(kLimit, "PoolMetricsTest.ReadWhileThePoolChurns");
  ThreadPool pool(2, "churn");
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0};
  std::thread reader([&] {
    std::vector<std::uint64_t> last(pool.threadCount(), 0);
    std::uint64_t lastFired = 0;
    while (!stop.load()) {
      const PoolMetrics m = pool.metrics();
      for (std::size_t i = 0; i < m.workers.size(); ++i) {
        EXPECT_GE(m.workers[i].itemsRun, last[i]);
        last[i] = m.workers[i].itemsRun;
      }
      EXPECT_GE(m.total.timersFired, lastFired);
      lastFired = m.total.timersFired;
      (void)toPrometheusText(m, "churn");
      reads.fetch_add(1);
    }
  });
  constexpr int kRounds = 200;
  constexpr int kFanOut = 50;
  std::atomic<int> ran{0};
  std::atomic<int> fired{0};
  std::atomic<int> shutDown{0};
  std::vector<CountingTimer> timers(kRounds);
  for (int round = 0; round < kRounds; ++round) {
    runOnWorker(pool, [&, round] {
      CountingTimer& t = timers[static_cast<std::size_t>(round)];
      t.fired = &fired;
      t.shutDownFires = &shutDown;
      t.deadline = Clock::now();
      pool.scheduleTimer(t);
      for (int i = 0; i < kFanOut; ++i) {
        pool.schedule([&] { pool.schedule([&] { ran.fetch_add(1); }); });
      }
    });
  }
  test::waitUntil([&] { return ran.load() == kRounds * kFanOut && fired.load() == kRounds; });
  // At least one read overlapped the churn's end (the reader runs until told to stop).
  test::waitUntil([&] { return reads.load() >= 2; });
  stop.store(true);
  reader.join();
  const PoolMetrics m = pool.metrics();
  // Each round: the round's item, its kFanOut items and their kFanOut children, its timer.
  EXPECT_EQ(m.total.itemsRun, static_cast<std::uint64_t>(kRounds * (1 + 2 * kFanOut + 1)));
  EXPECT_EQ(m.total.timersFired, static_cast<std::uint64_t>(kRounds));
}

}  // namespace
}  // namespace weft
