#include "weft/coro/async_generator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "test/support/cancellable_start.h"
#include "test/support/counted.h"
#include "test/support/manual_event.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualEvent;
using test::Watchdog;

AsyncGenerator<int> countTo(int n) {
  for (int i = 0; i < n; ++i) co_yield i;
}

Lazy<std::vector<int>> drain(AsyncGenerator<int>& gen) {
  std::vector<int> values;
  while (std::optional<int> v = co_await gen.next()) values.push_back(*v);
  co_return values;
}

TEST(AsyncGeneratorTest, DoesNotStartUntilNext) {
  bool started = false;
  auto gen = [](bool* started) -> AsyncGenerator<int> {
    *started = true;
    co_yield 1;
  }(&started);
  EXPECT_FALSE(started);
  std::optional<int> first = syncAwait([&]() -> Lazy<std::optional<int>> {
    co_return co_await gen.next();
  }());
  EXPECT_TRUE(started);
  EXPECT_EQ(first, 1);
}

TEST(AsyncGeneratorTest, YieldsInOrderThenEmptyOptionalsForever) {
  auto gen = countTo(4);
  EXPECT_EQ(syncAwait(drain(gen)), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(syncAwait([&]() -> Lazy<std::optional<int>> { co_return co_await gen.next(); }())
                   .has_value());
  AsyncGenerator<int> empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_FALSE(
      syncAwait([&]() -> Lazy<std::optional<int>> { co_return co_await empty.next(); }())
          .has_value());
}

TEST(AsyncGeneratorTest, CopiesLvaluesAndMovesRvalues) {
  Counted::reset();
  {
    auto gen = []() -> AsyncGenerator<Counted> {
      Counted local;
      co_yield local;             // copied: the body keeps its own
      co_yield std::move(local);  // moved
    }();
    syncAwait([&]() -> Lazy<void> {
      std::optional<Counted> a = co_await gen.next();
      std::optional<Counted> b = co_await gen.next();
      EXPECT_TRUE(a.has_value());
      EXPECT_TRUE(b.has_value());
      EXPECT_FALSE((co_await gen.next()).has_value());
    }());
  }
  EXPECT_EQ(Counted::alive(), 0);
  auto strings = []() -> AsyncGenerator<std::string> {
    std::string s = "kept";
    co_yield s;
    EXPECT_EQ(s, "kept") << "an lvalue yield must not be moved from";
    co_yield std::move(s);
  }();
  EXPECT_EQ(syncAwait([&]() -> Lazy<std::string> {
              std::string all;
              while (std::optional<std::string> v = co_await strings.next()) all += *v + ";";
              co_return all;
            }()),
            "kept;kept;");
}

TEST(AsyncGeneratorTest, TheBodyMayAwaitBetweenElements) {
  ManualEvent event;
  auto gen = [](ManualEvent& event) -> AsyncGenerator<int> {
    co_yield 1;
    co_await event;  // suspends the consumer's next() until released
    co_yield 2;
  }(event);
  std::vector<int> got;
  bool done = false;
  auto consumer = [&]() -> Lazy<void> { got = co_await drain(gen); };
  consumer().start([&](Try<void> r) {
    r.value();
    done = true;
  });
  EXPECT_EQ(event.waiting(), 1u);
  EXPECT_FALSE(done);
  event.release();
  EXPECT_TRUE(done);
  EXPECT_EQ(got, (std::vector<int>{1, 2}));
}

AsyncGenerator<int> evens(Channel<int>& ch) {
  while (std::optional<int> v = co_await ch.receive()) {
    if (*v % 2 == 0) co_yield *v;
  }
}

TEST(AsyncGeneratorTest, StreamsFromAChannelOnAThreadPool) {
  Watchdog watchdog(60s, "AsyncGeneratorTest.StreamsFromAChannelOnAThreadPool");
  ThreadPool pool(2);
  Channel<int> ch(4);
  auto producer = [&]() -> Lazy<void> {
    for (int i = 0; i < 10000; ++i) co_await ch.send(i);
    ch.close();
  };
  auto consumer = [&]() -> Lazy<long> {
    auto gen = evens(ch);
    long sum = 0;
    while (std::optional<int> v = co_await gen.next()) sum += *v;
    co_return sum;
  };
  auto [produced, sum] = syncAwait(collectAllPara(producer(), consumer()).via(&pool));
  produced.value();
  EXPECT_EQ(sum.value(), 2L * (4999L * 5000 / 2));
}

TEST(AsyncGeneratorTest, TheBodyRunsWithTheConsumersExecutor) {
  Watchdog watchdog(60s, "AsyncGeneratorTest.TheBodyRunsWithTheConsumersExecutor");
  ThreadPool pool(2);
  Channel<int> ch;
  auto gen = [](Channel<int>& ch, ThreadPool* pool) -> AsyncGenerator<bool> {
    Executor* executor = co_await currentExecutor();
    co_yield executor == pool;
    co_await ch.receive();  // completed by a thread outside the pool
    co_yield pool->currentThreadInExecutor();
  }(ch, &pool);
  std::thread sender([&] {
    while (!ch.trySend(1)) std::this_thread::yield();
  });
  auto [sameExecutor, backOnPool] =
      syncAwait([&]() -> Lazy<std::pair<bool, bool>> {
        bool a = *co_await gen.next();
        bool b = *co_await gen.next();
        co_return std::pair{a, b};
      }()
                    .via(&pool));
  sender.join();
  EXPECT_TRUE(sameExecutor);
  EXPECT_TRUE(backOnPool);
}

TEST(AsyncGeneratorTest, CancellingTheConsumerCancelsTheBodysAwaits) {
  Channel<int> ch;
  CancellationSource source;
  auto gen = evens(ch);
  auto consumer = [&]() -> Lazy<void> { co_await gen.next(); };
  test::CancellableOutcome outcome;
  test::startCancellable(source.token(), consumer(), outcome);
  test::expectCancellationEndsTheWait(source, outcome);
}

TEST(AsyncGeneratorTest, AnExceptionReachesTheConsumerAndEndsTheSequence) {
  auto gen = []() -> AsyncGenerator<int> {
    co_yield 1;
    throw std::runtime_error("boom");
  }();
  syncAwait([&]() -> Lazy<void> {
    EXPECT_EQ(co_await gen.next(), 1);
    EXPECT_THROW(co_await gen.next(), std::runtime_error);
    EXPECT_FALSE((co_await gen.next()).has_value());
  }());
}

TEST(AsyncGeneratorTest, DestroyingItEarlyDestroysTheBodysLocals) {
  Counted::reset();
  {
    auto gen = []() -> AsyncGenerator<int> {
      Counted local;
      for (int i = 0;; ++i) co_yield i;
    }();
    EXPECT_EQ(syncAwait([&]() -> Lazy<std::optional<int>> { co_return co_await gen.next(); }()),
              0);
    EXPECT_EQ(Counted::alive(), 1);
  }
  EXPECT_EQ(Counted::alive(), 0);
  {
    auto unstarted = [](Counted) -> AsyncGenerator<int> { co_yield 1; }(Counted());
    EXPECT_EQ(Counted::alive(), 1);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(AsyncGeneratorTest, MovingTransfersTheSequence) {
  AsyncGenerator<int> a = countTo(3);
  AsyncGenerator<int> b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(syncAwait(drain(b)), (std::vector<int>{0, 1, 2}));
  b = countTo(1);
  EXPECT_EQ(syncAwait(drain(b)), (std::vector<int>{0}));
}

// Two consumers share one generator: the first next() is in progress (the body waits
// on `event`) when the second one is awaited.
TEST(AsyncGeneratorDeathTest, TwoNextsInFlightAbort) {
  EXPECT_DEATH(
      {
        ManualEvent event;
        auto gen = [](ManualEvent& event) -> AsyncGenerator<int> {
          co_await event;
          co_yield 1;
          co_yield 2;
        }(event);
        auto consume = [](AsyncGenerator<int>& gen) -> Lazy<int> {
          std::optional<int> v = co_await gen.next();
          co_return v.value_or(-1);
        };
        consume(gen).start([](Try<int>) {});  // suspends inside the body, on `event`
        consume(gen).start([](Try<int>) {});  // a second next() meanwhile
        event.release();
      },
      "weft: AsyncGenerator: next\\(\\) awaited while another next\\(\\) is still in "
      "progress");
}

TEST(AsyncGeneratorTest, NextAfterTheBodyYieldedIsNotMisuse) {
  ManualEvent event;
  auto gen = [](ManualEvent& event) -> AsyncGenerator<int> {
    co_await event;
    co_yield 1;
    co_await event;  // released already: does not suspend
    co_yield 2;
  }(event);
  std::vector<int> got;
  auto consume = [&]() -> Lazy<void> {
    if (std::optional<int> v = co_await gen.next()) got.push_back(*v);
  };
  consume().start([](Try<void> r) { r.value(); });
  EXPECT_TRUE(got.empty());
  event.release();
  consume().start([](Try<void> r) { r.value(); });  // a new consumer after the first yield
  consume().start([](Try<void> r) { r.value(); });  // and after the end
  EXPECT_EQ(got, (std::vector<int>{1, 2}));
}

TEST(AsyncGeneratorTest, AMillionReadyElementsDoNotGrowTheStack) {
#if !WEFT_TAIL_CALLS_GUARANTEED
  GTEST_SKIP() << "this compiler/optimisation level does not turn symmetric transfer into a "
                  "tail call (g++ below -O2); the test needs it";
#endif
  auto gen = countTo(1'000'000);
  long sum = syncAwait([&]() -> Lazy<long> {
    long total = 0;
    while (std::optional<int> v = co_await gen.next()) total += *v;
    co_return total;
  }());
  EXPECT_EQ(sum, 1'000'000L * 999'999 / 2);
}

}  // namespace
}  // namespace weft
