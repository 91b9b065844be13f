// dumpTasks() while the tasks and fibers it lists keep moving on other threads: awaits of
// child Lazys that suspend and finish (their frames freed and recycled), waits that end
// and begin again at the same place in a frame, fibers that park and resume, fibers that
// finish while a Lazy awaits them. A dump must never read what has been freed or reused:
// under AddressSanitizer these tests failed within a few hundred dumps (a dump followed a
// root's "awaits this Lazy" note into a child frame already freed), and under
// ThreadSanitizer they check the dump's synchronisation with the threads it reads.
//
// Each test makes a bounded number of dumps (not a time), each checked for what must be in
// it however the tasks move: every churning task or fiber listed, with a state.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "weft/coro/channel.h"
#include "weft/coro/channel_closed.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/task_dump.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "weft/stackful/this_fiber.h"

#include "test/support/no_addr2line.h"

namespace {

using ::testing::ContainsRegex;

// Enough dumps for the old code to read a freed frame many times over under ASan (it
// did within a few hundred); each dump runs the symbolizer, so not many more.
constexpr int kDumps = 400;

// Dumps name functions only (test/support/no_addr2line.h): fast, and all these tests read.
const auto* const kNoAddr2line =
    ::testing::AddGlobalTestEnvironment(new weft::test::NoAddr2line);

// A dump's first line (without tracking it goes on to say that tasks are not listed).
constexpr const char* kHeader = "^weft: [0-9]+ tasks?, [0-9]+ fibers?[ \n]";

std::string dump() {
  std::ostringstream out;
  weft::dumpTasks(out);
  return out.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// A child that suspends (it goes to the back of its executor's queue) and finishes: its
// frame is freed when its parent resumes, and recycled by the parent's next child.
weft::Lazy<int> yieldingChild(int depth) {
  co_await weft::yield();
  if (depth > 0) co_return 1 + co_await yieldingChild(depth - 1);
  co_return 1;
}

// A child that waits on a channel: its wait ends when the other side hands a value over.
weft::Lazy<int> receivingChild(weft::Channel<int>& channel) {
  std::optional<int> value = co_await channel.receive();
  co_return value.value_or(0);
}
weft::Lazy<> sendingChild(weft::Channel<int>& channel, int value) {
  co_await channel.send(value);
}

// Root tasks: loop until told to stop, each turn awaiting child Lazys that suspend and
// finish, and waiting (noted in their own frame) on different awaitables in turn.
weft::Lazy<> yieldingRoot(const std::atomic<bool>& stop, long& sum) {
  while (!stop.load(std::memory_order_relaxed)) {
    sum += co_await yieldingChild(2);
    co_await weft::yield();
    auto [a, b] = co_await weft::collectAll(yieldingChild(0), yieldingChild(1));
    sum += a.value() + b.value();
  }
}
weft::Lazy<> receivingRoot(const std::atomic<bool>& stop, weft::Channel<int>& channel,
                           long& sum) {
  while (!stop.load(std::memory_order_relaxed)) {
    sum += co_await receivingChild(channel);
    sum += co_await yieldingChild(0);
  }
  // Drains what the sender still hands over, so that it is not left waiting.
  while (std::optional<int> value = co_await channel.receive()) sum += *value;
}
weft::Lazy<> sendingRoot(const std::atomic<bool>& stop, weft::Channel<int>& channel) {
  for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
    co_await sendingChild(channel, i);
    co_await weft::yield();
  }
  channel.close();
}

TEST(TaskDumpTest, IsSafeWhileRootTasksAwaitChildLazysThatSuspendAndFinish) {
  if (!WEFT_TASK_TRACKING) GTEST_SKIP() << "root tasks are listed with WEFT_TASK_TRACKING=1";
  weft::ThreadPool pool(2);
  std::atomic<bool> stop{false};
  std::atomic<int> finished{0};
  weft::Channel<int> channel;
  long sums[2] = {0, 0};
  auto done = [&](weft::Try<void> r) {
    EXPECT_TRUE(r.hasValue());
    finished.fetch_add(1);
  };
  yieldingRoot(stop, sums[0]).via(&pool).start(done);
  receivingRoot(stop, channel, sums[1]).via(&pool).start(done);
  sendingRoot(stop, channel).via(&pool).start(done);
  // A root task is listed, with its age, from its first wait: until the three have waited.
  while (count(dump(), " (start()), age ") < 3u) std::this_thread::yield();

  // EXPECT, not ASSERT, and a stop at the first failure: the tasks must be stopped below
  // whatever happens (the pool's destructor waits for them).
  for (int i = 0; i < kDumps && !HasFailure(); ++i) {
    const std::string text = dump();
    // Each root is listed from then on for as long as it runs, with a state, whatever it
    // is doing.
    EXPECT_THAT(text, ContainsRegex(kHeader)) << text;
    EXPECT_GE(count(text, "\ntask "), 3u) << text;
    EXPECT_EQ(count(text, " (start()), age "),
              count(text, ": running or runnable\n") + count(text, ": waiting on "))
        << text;
  }

  stop.store(true);
  while (finished.load() < 3) std::this_thread::yield();
  EXPECT_GT(sums[0], 0);
  EXPECT_GT(sums[1], 0);
}

// A fiber that parks on different awaitables in turn (a yield, a Lazy that suspends, a
// channel hand-off with the other fiber), so that what its park notes on its stack
// changes under the dump. Ends when told to stop, or when the channel is closed under it.
int parkingFiber(const std::atomic<bool>& stop, weft::Channel<int>& channel, bool sendFirst) {
  int sum = 0;
  try {
    while (!stop.load(std::memory_order_relaxed)) {
      weft::this_fiber::yield();
      sum += weft::await(yieldingChild(1));
      if (sendFirst) weft::await(channel.send(1));
      sum += weft::await(channel.receive()).value_or(0);
      if (!sendFirst) weft::await(channel.send(1));
    }
  } catch (const weft::ChannelClosed&) {
  }
  return sum;
}

// A root task awaiting short fibers one after another: each finishes (and is freed) while
// the Lazy awaits it, and the Lazy's frames above it, which dumps of the fiber show, come
// and go.
weft::Lazy<int> awaitShortFiber(weft::Executor* executor) {
  co_return co_await weft::spawnFiber(executor, [] {
    weft::this_fiber::yield();
    weft::this_fiber::yield();
    return 1;
  });
}
weft::Lazy<> fiberAwaitingRoot(const std::atomic<bool>& stop, weft::Executor* executor,
                               long& sum) {
  while (!stop.load(std::memory_order_relaxed)) sum += co_await awaitShortFiber(executor);
}

TEST(TaskDumpTest, IsSafeWhileFibersParkResumeAndFinish) {
  weft::ThreadPool pool(2);
  std::atomic<bool> stop{false};
  std::atomic<int> finished{0};
  weft::Channel<int> channel;  // the two fibers hand values to each other
  auto first = weft::spawnFiber(&pool, [&] { return parkingFiber(stop, channel, true); });
  auto second = weft::spawnFiber(&pool, [&] { return parkingFiber(stop, channel, false); });
  long sum = 0;
  fiberAwaitingRoot(stop, &pool, sum).via(&pool).start([&](weft::Try<void> r) {
    EXPECT_TRUE(r.hasValue());
    finished.fetch_add(1);
  });

  for (int i = 0; i < kDumps && !HasFailure(); ++i) {  // (EXPECT: see above)
    const std::string text = dump();
    EXPECT_THAT(text, ContainsRegex(kHeader)) << text;
    // The two parking fibers are listed for as long as they run, each with a state.
    EXPECT_GE(count(text, "\nfiber "), 2u) << text;
    EXPECT_EQ(count(text, "\nfiber "),
              count(text, ": parked on ") + count(text, ": running\n") +
                  count(text, ": created, not started yet\n") + count(text, ": finished\n"))
        << text;
  }

  stop.store(true);
  channel.close();  // a fiber left waiting on the other ends its loop
  (void)weft::syncAwait(std::move(first));
  (void)weft::syncAwait(std::move(second));
  while (finished.load() < 1) std::this_thread::yield();
  EXPECT_GT(sum, 0);
}

}  // namespace
