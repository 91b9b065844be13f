#include "weft/coro/detail/channel_core.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/select.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "test/support/counted.h"
#include "test/support/watchdog.h"

// Every heap allocation of this test binary is counted while gCounting is set, to check
// that channel operations allocate nothing in the steady state. Not under TSan, whose
// runtime defines the global operator new itself (the test is skipped there).
#if defined(__SANITIZE_THREAD__)
#define WEFT_TEST_COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TEST_COUNTS_ALLOCATIONS 0
#endif
#endif
#ifndef WEFT_TEST_COUNTS_ALLOCATIONS
#define WEFT_TEST_COUNTS_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> gCounting{false};
std::atomic<long> gAllocations{0};
}  // namespace

#if WEFT_TEST_COUNTS_ALLOCATIONS
void* operator new(std::size_t size) {
  // relaxed: a flag and a counter, read after the pool has been joined.
  if (gCounting.load(std::memory_order_relaxed)) gAllocations.fetch_add(1);
  if (void* block = std::malloc(size == 0 ? 1 : size)) return block;
  throw std::bad_alloc();
}
// noinline: inlined next to its operator new, g++-12 mistakes new + free for a mismatch.
[[gnu::noinline]] void operator delete(void* block) noexcept { std::free(block); }
[[gnu::noinline]] void operator delete(void* block, std::size_t) noexcept { std::free(block); }
#endif

namespace weft::detail {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::Watchdog;

TEST(ChannelBufferTest, KeepsFifoOrderAcrossWrapAroundAndGrowth) {
  ChannelBuffer<int> buffer(0);
  EXPECT_TRUE(buffer.full());
  std::optional<int> out;
  int next = 0, expected = 0;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 5; ++i) {
      if (buffer.full()) buffer.grow();
      buffer.push(next++);
    }
    for (int i = 0; i < 3; ++i) {
      buffer.popInto(out);
      ASSERT_EQ(out, expected++);
    }
  }
  while (!buffer.empty()) {
    buffer.popInto(out);
    ASSERT_EQ(out, expected++);
  }
  EXPECT_EQ(expected, next);
}

TEST(ChannelBufferTest, DestroysWhatItHolds) {
  Counted::reset();
  {
    ChannelBuffer<Counted> buffer(3);
    for (int i = 0; i < 3; ++i) buffer.push(Counted());
    std::optional<Counted> out;
    buffer.popInto(out);
    buffer.push(Counted());  // wraps around
    buffer.grow();
    EXPECT_EQ(Counted::alive(), 4);  // three buffered and `out`
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(ChannelCoreTest, TrySendHandsTheValueToAWaitingReceiverBeforeTheBuffer) {
  ChannelCore<int> core(4);
  std::optional<int> slot;
  ChannelWaiter receiver;
  receiver.slot = &slot;
  core.lock().lock();
  core.enqueueReceiverLocked(&receiver);
  int value = 3;
  ChannelWaiter* wake = nullptr;
  EXPECT_EQ(core.trySendLocked(value, wake), ChannelOpResult::kDone);
  EXPECT_EQ(wake, &receiver);
  EXPECT_EQ(receiver.status, WaiterStatus::kDone);
  EXPECT_EQ(slot, 3);
  EXPECT_EQ(core.sizeLocked(), 0u);
  core.lock().unlock();
}

TEST(ChannelCoreTest, ANodeOfAFinishedSelectIsDroppedNotCompleted) {
  ChannelCore<int> core(0);
  SelectState finished;
  finished.winner.store(0);  // completed through another case already
  std::optional<int> lostSlot, slot;
  ChannelWaiter stale, live;
  stale.slot = &lostSlot;
  stale.select = &finished;
  stale.caseIndex = 1;
  live.slot = &slot;
  core.lock().lock();
  core.enqueueReceiverLocked(&stale);
  core.enqueueReceiverLocked(&live);
  int value = 9;
  ChannelWaiter* wake = nullptr;
  EXPECT_EQ(core.trySendLocked(value, wake), ChannelOpResult::kDone);
  EXPECT_EQ(wake, &live);
  EXPECT_EQ(stale.status, WaiterStatus::kIdle) << "dropped, for its select's cleanup to skip";
  EXPECT_FALSE(lostSlot.has_value());
  EXPECT_EQ(slot, 9);
  EXPECT_FALSE(core.removeReceiverLocked(&stale));
  core.lock().unlock();
}

// The steady state of channel operations allocates nothing: blocked operations keep their
// node in the awaiter, and everything else comes from weft's frame allocator (whose free
// lists are warm after the first rounds) or the pool's queue (grown once).
TEST(ChannelAllocationTest, BlockingSendsReceivesAndSelectsAllocateNothing) {
#if !WEFT_TEST_COUNTS_ALLOCATIONS
  GTEST_SKIP() << "allocations cannot be counted under ThreadSanitizer";
#endif
  Watchdog watchdog(60s, "ChannelAllocationTest.BlockingSendsReceivesAndSelectsAllocateNothing");
  ThreadPool pool(1);
  Channel<std::int64_t> ping, pong, quit;
  CancellationSource source;  // never requested: only makes the operations cancellable
  constexpr int kWarmUp = 1000, kMeasured = 20000;
  auto echo = [&]() -> Lazy<void> {
    for (;;) {
      auto r = co_await select(ping.receiveCase(), quit.receiveCase());
      if (r.index() != 0) co_return;
      co_await pong.send(*std::get<0>(r) + 1);
    }
  };
  auto driver = [&]() -> Lazy<std::int64_t> {
    std::int64_t v = 0;
    for (int i = 0; i < kWarmUp + kMeasured; ++i) {
      if (i == kWarmUp) gCounting = true;
      co_await ping.send(v);
      v = *co_await pong.receive();
    }
    gCounting = false;
    quit.close();
    co_return v;
  };
  auto [e, d] =
      syncAwait(collectAllPara(withCancellation(source.token(), echo()),
                               withCancellation(source.token(), driver()))
                    .via(&pool));
  e.value();
  EXPECT_EQ(d.value(), kWarmUp + kMeasured);
  EXPECT_EQ(gAllocations.load(), 0);
}

}  // namespace
}  // namespace weft::detail
