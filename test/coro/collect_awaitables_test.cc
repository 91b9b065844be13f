// The collects (coro/collect.h, coro/collect_any.h) with branches that are not Lazys:
// Tasks, fibers (inFiber, FiberFuture), weft awaitables and mixes of them with Lazys.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <vector>

#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/collect_any.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/in_fiber.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Watchdog;

Lazy<int> lazyValue(int v) {
  co_await yield();
  co_return v;
}

TEST(CollectAwaitablesTest, CollectAllMixesLazysTasksFibersAndChannelOperations) {
  ThreadPool pool(2);
  ThreadPool other(1);
  Channel<int> channel(1);
  auto body = [&]() -> Lazy<int> {
    co_await channel.send(4);
    Executor* executor = co_await currentExecutor();
    auto [a, b, c, d, e] = co_await collectAll(
        lazyValue(1), lazyValue(2).via(&other), inFiber([] { return 3; }), channel.receive(),
        spawnFiber(executor, [] { return 5; }));
    co_return a.value() + b.value() + c.value() + *d.value() + e.value();
  };
  EXPECT_EQ(syncAwait(body(), &pool), 15);
}

TEST(CollectAwaitablesTest, VectorsOfTasksAndOfFibersInEveryCollect) {
  ThreadPool pool(2);
  auto tasks = [&] {
    std::vector<Task<int>> v;
    for (int i = 0; i < 10; ++i) v.push_back(lazyValue(i).via(&pool));
    return v;
  };
  auto fibers = [] {
    std::vector<InFiber<int (*)()>> v;
    for (int i = 0; i < 10; ++i) v.push_back(inFiber(+[] { return 1; }));
    return v;
  };
  auto sum = [](const auto& results) {
    int s = 0;
    for (const auto& r : results) s += r.value();
    return s;
  };
  auto body = [&]() -> Lazy<void> {
    EXPECT_EQ(sum(co_await collectAll(tasks())), 45);
    EXPECT_EQ(sum(co_await collectAllPara(tasks())), 45);
    EXPECT_EQ(sum(co_await collectAllFailFast(fibers())), 10);
    EXPECT_EQ(sum(co_await collectAllParaFailFast(fibers())), 10);
    EXPECT_EQ(sum(co_await collectAllWindowed(3, tasks())), 45);
    EXPECT_EQ(sum(co_await collectAllParaWindowed(3, fibers())), 10);
  };
  syncAwait(body(), &pool);
}

TEST(CollectAwaitablesTest, CollectAnyRacesAFiberAgainstAChannelAndCancelsTheLoser) {
  ThreadPool pool(2);
  Channel<int> channel(1);
  std::atomic<bool> fiberCancelled{false};
  auto body = [&]() -> Lazy<int> {
    co_await channel.send(9);
    auto winner = co_await collectAny(inFiber([&] {
                                        try {
                                          weft::await(sleep(10s));
                                        } catch (const OperationCancelled&) {
                                          fiberCancelled = true;
                                          throw;
                                        }
                                      }),
                                      channel.receive());
    EXPECT_EQ(winner.index(), 1u);
    co_return *std::get<1>(winner).value();
  };
  Watchdog watchdog(60s, "CollectAwaitablesTest.CollectAnyRacesAFiberAgainstAChannel");
  EXPECT_EQ(syncAwait(body(), &pool), 9);
  EXPECT_TRUE(fiberCancelled.load());  // awaited: the collect waited for it
}

TEST(CollectAwaitablesTest, CollectAnyNoDiscardOfAVectorOfTasks) {
  ThreadPool pool(2);
  auto body = [&]() -> Lazy<std::size_t> {
    std::vector<Task<int>> v;
    v.push_back([]() -> Lazy<int> {
      co_await sleep(10s);
      co_return 0;
    }().via(&pool));
    v.push_back(lazyValue(7).via(&pool));
    auto result = co_await collectAnyNoDiscard(std::move(v));
    EXPECT_EQ(result.results[1].value(), 7);
    EXPECT_THROW(result.results[0].value(), OperationCancelled);
    co_return result.index;
  };
  Watchdog watchdog(60s, "CollectAwaitablesTest.CollectAnyNoDiscardOfAVectorOfTasks");
  EXPECT_EQ(syncAwait(body(), &pool), 1u);
}

}  // namespace
}  // namespace weft
