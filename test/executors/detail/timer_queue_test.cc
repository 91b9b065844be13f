#include "weft/executors/detail/timer_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "test/support/watchdog.h"

namespace weft::detail {
namespace {

using namespace std::chrono_literals;
using Clock = TimerEntry::Clock;

// A timer entry with an index, so deliveries can be checked.
struct TaggedEntry : TimerEntry {
  int tag = 0;
};

// Records deliveries: which entry, whether stop() flushed it, and on which thread.
struct Recorder {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int> delivered;
  std::vector<bool> flushed;
  std::vector<std::thread::id> threads;

  static void deliver(void* context, TimerEntry& entry) noexcept {
    auto* self = static_cast<Recorder*>(context);
    std::lock_guard lock(self->mutex);
    self->delivered.push_back(static_cast<TaggedEntry&>(entry).tag);
    self->flushed.push_back(entry.shutDown);
    self->threads.push_back(std::this_thread::get_id());
    self->changed.notify_all();
  }

  // Waits (at most a minute, then fails) until `count` entries were delivered.
  bool waitFor(std::size_t count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 60s, [&] { return delivered.size() >= count; });
  }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return delivered.size();
  }
};

TEST(TimerQueueTest, StartsNoThreadUntilTheFirstTimer) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  EXPECT_FALSE(queue.threadStarted());
  TaggedEntry entry;
  entry.deadline = Clock::now();
  ASSERT_TRUE(queue.add(entry));
  EXPECT_TRUE(queue.threadStarted());
  ASSERT_TRUE(recorder.waitFor(1));
}

// An entry that never expires (a shutdown guard, io/detail/pool_shutdown_guard.h) needs
// no thread: the first entry with a deadline starts it, and stop() still flushes it.
TEST(TimerQueueTest, EntriesThatNeverExpireStartNoThread) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  TaggedEntry never, guard, soon;
  never.deadline = guard.deadline = Clock::time_point::max();
  never.tag = 1;
  guard.tag = 2;
  soon.tag = 3;
  ASSERT_TRUE(queue.add(never));
  ASSERT_TRUE(queue.add(guard));
  EXPECT_FALSE(queue.threadStarted());
  EXPECT_TRUE(queue.cancel(never));
  soon.deadline = Clock::now();
  ASSERT_TRUE(queue.add(soon));
  EXPECT_TRUE(queue.threadStarted());
  ASSERT_TRUE(recorder.waitFor(1));
  queue.stop(/*deliverPending=*/true);
  std::lock_guard lock(recorder.mutex);
  EXPECT_EQ(recorder.delivered, (std::vector<int>{3, 2}));
  EXPECT_EQ(recorder.flushed, (std::vector<bool>{false, true}));
}

TEST(TimerQueueTest, DeliversOnItsOwnThreadInDeadlineOrder) {
  constexpr int kEntries = 100;
  std::vector<int> order(kEntries);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  // Every entry must be armed before the first deadline (an entry armed after a later one
  // was delivered would come out of order, rightly): the deadlines start `margin` ahead,
  // and a run that took longer than that to arm them all proves nothing and is repeated
  // with a larger margin. No timing is judged.
  for (auto margin = 50ms;; margin *= 2) {
    ASSERT_LT(margin, 10min) << "arming 100 timers never took less than the margin";
    Recorder recorder;
    TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
    std::vector<TaggedEntry> entries(kEntries);
    const auto base = Clock::now() + margin;
    for (int i : order) {  // armed in shuffled order
      entries[i].tag = i;
      entries[i].deadline = base + i * 100us;
      ASSERT_TRUE(queue.add(entries[i]));
    }
    const bool allArmedInTime = Clock::now() < base;
    ASSERT_TRUE(recorder.waitFor(kEntries));
    if (!allArmedInTime) continue;
    std::vector<int> expected(kEntries);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(recorder.delivered, expected);
    for (std::size_t i = 0; i < recorder.threads.size(); ++i) {
      EXPECT_NE(recorder.threads[i], std::this_thread::get_id());
      EXPECT_FALSE(recorder.flushed[i]);
    }
    EXPECT_EQ(queue.size(), 0u);
    return;
  }
}

TEST(TimerQueueTest, EqualDeadlinesKeepArmingOrder) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  std::vector<TaggedEntry> entries(20);
  const auto deadline = Clock::now() + 20ms;
  for (int i = 0; i < 20; ++i) {
    entries[i].tag = i;
    entries[i].deadline = deadline;
    ASSERT_TRUE(queue.add(entries[i]));
  }
  ASSERT_TRUE(recorder.waitFor(20));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(recorder.delivered[i], i);
}

TEST(TimerQueueTest, CancelRemovesAnArmedTimerAndNeverDeliversIt) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  // Two far timers, so that the heap holds both when one is cancelled (a near one could
  // fire between two lines on a slow machine, and change the sizes seen).
  TaggedEntry never, later, soon;
  never.tag = 1;
  never.deadline = Clock::now() + 1h;
  later.tag = 3;
  later.deadline = Clock::now() + 2h;
  soon.tag = 2;
  ASSERT_TRUE(queue.add(never));
  ASSERT_TRUE(queue.add(later));
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_TRUE(queue.cancel(never));
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_FALSE(queue.cancel(never));  // not armed any more
  // The queue goes on delivering what is due, and never the cancelled timer.
  soon.deadline = Clock::now();
  ASSERT_TRUE(queue.add(soon));
  ASSERT_TRUE(recorder.waitFor(1));
  EXPECT_FALSE(queue.cancel(soon));  // already delivered
  EXPECT_EQ(recorder.delivered, std::vector<int>{2});
  EXPECT_TRUE(queue.cancel(later));
}

// Random adds and cancels: the heap keeps its order through removals from the middle.
TEST(TimerQueueTest, CancellingFromTheMiddleKeepsTheOthersInOrder) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  constexpr int kEntries = 500;
  std::vector<TaggedEntry> entries(kEntries);
  std::mt19937 rng(3);
  const auto base = Clock::now() + 200ms;
  for (int i = 0; i < kEntries; ++i) {
    entries[i].tag = i;
    entries[i].deadline = base + std::chrono::microseconds(rng() % 20000);
    ASSERT_TRUE(queue.add(entries[i]));
  }
  std::vector<bool> cancelled(kEntries, false);
  for (int i = 0; i < kEntries; ++i) {
    if (rng() % 2 == 0) {
      ASSERT_TRUE(queue.cancel(entries[i]));
      cancelled[i] = true;
    }
  }
  const auto kept = static_cast<std::size_t>(std::count(cancelled.begin(), cancelled.end(), false));
  EXPECT_EQ(queue.size(), kept);
  ASSERT_TRUE(recorder.waitFor(kept));
  // Hand-shake: stop(true) joins the timer thread, then delivers (flushes) whatever is
  // still armed. So a cancelled entry that stayed in the heap, or a delivery still under
  // way, is counted now, however slow the timer thread is.
  EXPECT_EQ(queue.size(), 0u);
  queue.stop(/*deliverPending=*/true);
  ASSERT_EQ(recorder.count(), kept);
  for (std::size_t k = 0; k < kept; ++k) {
    const int i = recorder.delivered[k];
    EXPECT_FALSE(cancelled[i]);
    if (k > 0) {
      const TaggedEntry& prev = entries[recorder.delivered[k - 1]];
      EXPECT_TRUE(prev.deadline < entries[i].deadline ||
                  (prev.deadline == entries[i].deadline && prev.tag < i));
    }
  }
}

TEST(TimerQueueTest, StopFlushesPendingTimersWithShutDownAndRefusesNewOnes) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  std::vector<TaggedEntry> entries(3);
  for (int i = 0; i < 3; ++i) {
    entries[i].tag = i;
    entries[i].deadline = Clock::now() + std::chrono::hours(1 + 2 - i);
    ASSERT_TRUE(queue.add(entries[i]));
  }
  queue.stop(/*deliverPending=*/true);
  // Delivered on the stopping thread, in deadline order, flagged.
  EXPECT_EQ(recorder.delivered, (std::vector<int>{2, 1, 0}));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(recorder.flushed[i]);
    EXPECT_EQ(recorder.threads[i], std::this_thread::get_id());
  }
  TaggedEntry late;
  late.deadline = Clock::now();
  EXPECT_FALSE(queue.add(late));
  EXPECT_FALSE(queue.cancel(entries[0]));
  queue.stop(true);  // idempotent
  EXPECT_EQ(recorder.count(), 3u);
}

TEST(TimerQueueTest, StopWithoutDeliveryDropsPendingTimers) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  TaggedEntry entry;
  entry.deadline = Clock::now() + 1h;
  ASSERT_TRUE(queue.add(entry));
  queue.stop(/*deliverPending=*/false);
  EXPECT_EQ(recorder.count(), 0u);
  EXPECT_EQ(entry.heapIndex, TimerEntry::kNotQueued);
}

TEST(TimerQueueTest, NeverDeadlineWaitsUntilCancelledOrStopped) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  TaggedEntry never, soon;
  never.deadline = Clock::time_point::max();
  never.tag = 1;
  soon.tag = 2;
  ASSERT_TRUE(queue.add(never));
  soon.deadline = Clock::now() + 1ms;
  ASSERT_TRUE(queue.add(soon));  // an earlier deadline wakes the waiting thread
  ASSERT_TRUE(recorder.waitFor(1));
  EXPECT_EQ(recorder.delivered, std::vector<int>{2});
  EXPECT_TRUE(queue.cancel(never));
}

// A delivery may arm and cancel timers (it runs without the lock).
struct Rearming {
  TimerQueue* queue = nullptr;
  std::deque<TaggedEntry> entries;
  std::atomic<int> delivered{0};
  static void deliver(void* context, TimerEntry& entry) noexcept {
    auto* self = static_cast<Rearming*>(context);
    const int n = self->delivered.fetch_add(1) + 1;
    self->delivered.notify_all();
    if (n < 50) {
      TaggedEntry& next = self->entries.emplace_back();
      next.deadline = Clock::now();
      self->queue->add(next);
      TaggedEntry& cancelled = self->entries.emplace_back();
      cancelled.deadline = Clock::now() + 1h;
      self->queue->add(cancelled);
      self->queue->cancel(cancelled);
    }
    (void)entry;
  }
};

TEST(TimerQueueTest, DeliveryMayArmAndCancelTimers) {
  test::Watchdog watchdog(60s, "TimerQueueTest.DeliveryMayArmAndCancelTimers");
  Rearming rearming;
  TimerQueue queue("test-timer", &Rearming::deliver, &rearming);
  rearming.queue = &queue;
  TaggedEntry first;
  first.deadline = Clock::now();
  ASSERT_TRUE(queue.add(first));
  // Woken by each delivery's notify_all; the 50th arms no more (the watchdog bounds a hang).
  for (int n = rearming.delivered.load(); n < 50; n = rearming.delivered.load()) {
    rearming.delivered.wait(n);
  }
  EXPECT_EQ(rearming.delivered.load(), 50);
  queue.stop(false);
  EXPECT_EQ(queue.size(), 0u);
}

TEST(TimerQueueTest, ConcurrentAddAndCancelFromManyThreads) {
  Recorder recorder;
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder);
  constexpr int kThreads = 4, kPerThread = 500;
  std::vector<TaggedEntry> entries(kThreads * kPerThread);
  std::atomic<int> kept{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kPerThread; ++i) {
        TaggedEntry& e = entries[t * kPerThread + i];
        e.tag = t * kPerThread + i;
        e.deadline = Clock::now() + std::chrono::microseconds(rng() % 3000);
        ASSERT_TRUE(queue.add(e));
        // A cancel either removes it (never delivered) or finds it delivered already.
        if (rng() % 2 == 0 && queue.cancel(e)) continue;
        kept.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_TRUE(recorder.waitFor(static_cast<std::size_t>(kept.load())));
  // Hand-shake: stop(true) joins the timer thread and flushes what is still armed, so a
  // cancelled entry delivered anyway (or twice) is in `delivered` now.
  queue.stop(/*deliverPending=*/true);
  std::vector<int> delivered = recorder.delivered;
  EXPECT_EQ(delivered.size(), static_cast<std::size_t>(kept.load()));
  std::sort(delivered.begin(), delivered.end());
  EXPECT_EQ(std::adjacent_find(delivered.begin(), delivered.end()), delivered.end());
}

// A delivery that stops its own queue (as a coroutine resumed on the timer thread that
// calls exit() does, through the process-wide queue's exit handler): no self-join.
struct SelfStopping {
  TimerQueue* queue = nullptr;
  std::atomic<int> delivered{0};
  static void deliver(void* context, TimerEntry&) noexcept {
    auto* self = static_cast<SelfStopping*>(context);
    const bool first = self->delivered.fetch_add(1) == 0;
    self->delivered.notify_all();
    if (first) self->queue->stop(/*deliverPending=*/true);
  }
};

TEST(TimerQueueTest, StopFromADeliveryOnTheTimerThreadDoesNotJoinItself) {
  test::Watchdog watchdog(60s, "TimerQueueTest.StopFromADeliveryOnTheTimerThreadDoesNotJoinItself");
  // Never destroyed (like the process-wide queue): the detached timer thread still
  // relocks the queue's mutex on its way out, after stop() has returned. A new pair for
  // each run of the test (--gtest_repeat: the last run's queue is stopped), all kept
  // reachable.
  static auto* runs = new std::vector<std::pair<SelfStopping*, TimerQueue*>>;
  auto* selfStoppingState = new SelfStopping;
  runs->emplace_back(selfStoppingState,
                     new TimerQueue("test-timer", &SelfStopping::deliver, selfStoppingState));
  SelfStopping& selfStopping = *selfStoppingState;
  TimerQueue& queue = *runs->back().second;
  selfStopping.queue = &queue;
  TaggedEntry first, pending;
  first.deadline = Clock::now();
  pending.deadline = Clock::now() + 1h;
  ASSERT_TRUE(queue.add(pending));
  ASSERT_TRUE(queue.add(first));
  // Woken by each delivery's notify_all (the watchdog bounds a hang).
  for (int n = selfStopping.delivered.load(); n < 2; n = selfStopping.delivered.load()) {
    selfStopping.delivered.wait(n);
  }
  EXPECT_EQ(selfStopping.delivered.load(), 2);  // `first`, then `pending` flushed by stop
  EXPECT_TRUE(pending.shutDown);
  TaggedEntry late;
  late.deadline = Clock::now();
  EXPECT_FALSE(queue.add(late));
}

// The poll (ThreadPool's backstop for busy workers): pollBy starts the thread and runs
// the poll by the time asked; the poll runs again when its result asks; nothing after
// stop().
struct Poller {
  std::mutex mutex;
  std::condition_variable changed;
  int polls = 0;
  int again = 0;  // how many more times the poll asks to run again at once

  static Clock::time_point poll(void* context, Clock::time_point now) noexcept {
    auto* self = static_cast<Poller*>(context);
    std::lock_guard lock(self->mutex);
    ++self->polls;
    self->changed.notify_all();
    if (self->again > 0) {
      --self->again;
      return now;
    }
    return Clock::time_point::max();
  }
  static void deliverNothing(void*, TimerEntry&) noexcept {}  // no timer is armed
  bool waitFor(int count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 60s, [&] { return polls >= count; });
  }
  int count() {
    std::lock_guard lock(mutex);
    return polls;
  }
};

TEST(TimerQueueTest, PollByStartsTheThreadAndThePollRunsAgainWhenItAsks) {
  Poller poller;
  poller.again = 2;
  TimerQueue queue("test-timer", &Poller::deliverNothing, &poller, &Poller::poll);
  EXPECT_FALSE(queue.threadStarted());
  queue.pollBy(Clock::now());
  EXPECT_TRUE(queue.threadStarted());
  ASSERT_TRUE(poller.waitFor(3));  // once asked, twice more on its own request
  queue.pollBy(Clock::now());      // asked again: it had planned nothing
  ASSERT_TRUE(poller.waitFor(4));
  queue.stop(/*deliverPending=*/false);
  const int polls = poller.count();
  queue.pollBy(Clock::now());  // stopped: nothing
  EXPECT_EQ(poller.count(), polls);
}

// Timers and polls share the thread: a far poll does not delay a near timer.
TEST(TimerQueueTest, APlannedPollDoesNotDelayTimers) {
  Recorder recorder;
  struct NeverAgain {
    static Clock::time_point poll(void*, Clock::time_point) noexcept {
      return Clock::time_point::max();
    }
  };
  TimerQueue queue("test-timer", &Recorder::deliver, &recorder, &NeverAgain::poll);
  queue.pollBy(Clock::now() + 1h);
  TaggedEntry soon;
  soon.tag = 7;
  soon.deadline = Clock::now() + 1ms;
  ASSERT_TRUE(queue.add(soon));
  ASSERT_TRUE(recorder.waitFor(1));
  queue.stop(/*deliverPending=*/false);
}

}  // namespace
}  // namespace weft::detail
