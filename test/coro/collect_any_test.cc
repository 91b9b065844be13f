#include "weft/coro/collect_any.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/detail/timer_queue.h"
#include "weft/executors/thread_pool.h"
#include "test/support/counted.h"
#include "test/support/manual_event.h"
#include "test/support/timer_probe_executor.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::TimerProbeExecutor;
using test::Watchdog;

// Waits (cancellably) for an hour; counts how it ended.
struct Outcomes {
  std::atomic<int> started{0}, cancelled{0}, completed{0};
};
Lazy<int> sleepsForever(Outcomes& outcomes) {
  Counted alive;
  outcomes.started.fetch_add(1);
  try {
    co_await sleep(1h);
  } catch (const OperationCancelled&) {
    outcomes.cancelled.fetch_add(1);
    throw;
  }
  outcomes.completed.fetch_add(1);
  co_return -1;
}

Lazy<int> valueAfter(std::chrono::microseconds delay, int value) {
  Counted alive;
  co_await sleep(delay);
  co_return value;
}

TEST(CollectAnyTest, FirstToFinishWinsAndTheOthersAreCancelledAndAwaited) {
  Counted::reset();
  Outcomes outcomes;
  Watchdog watchdog(std::chrono::seconds(60), "CollectAnyTest.FirstToFinishWins");
  // The winner finishes only once both losers have started, whatever the machine's
  // speed: otherwise the third branch may never start, and only one would be cancelled.
  test::ManualEvent bothLosersStarted;
  std::thread releaser([&] {
    while (outcomes.started.load() < 2) std::this_thread::yield();  // the watchdog bounds it
    bothLosersStarted.release();
  });
  auto winner = [](test::ManualEvent& go) -> Lazy<int> {
    Counted alive;
    co_await go;
    co_return 42;
  };
  auto result = syncAwait(
      collectAny(sleepsForever(outcomes), winner(bothLosersStarted), sleepsForever(outcomes)));
  releaser.join();
  ASSERT_EQ(result.index(), 1u);
  EXPECT_EQ(std::get<1>(result).value(), 42);
  // Both losers were cancelled and had finished before collectAny returned.
  EXPECT_EQ(outcomes.cancelled.load(), 2);
  EXPECT_EQ(outcomes.completed.load(), 0);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(CollectAnyTest, HeterogeneousBranchesReportTheWinnersType) {
  Outcomes outcomes;
  auto text = []() -> Lazy<std::string> {
    co_await sleep(1ms);
    co_return "done";
  };
  auto result = syncAwait(collectAny(sleepsForever(outcomes), text()));
  ASSERT_EQ(result.index(), 1u);
  EXPECT_EQ(std::get<1>(result).value(), "done");
}

TEST(CollectAnyTest, ASynchronousWinnerMeansLaterBranchesNeverStart) {
  Counted::reset();
  bool laterStarted = false;
  auto immediate = []() -> Lazy<int> { co_return 7; };
  auto later = [&]() -> Lazy<int> {
    Counted alive;
    laterStarted = true;
    co_return 8;
  };
  auto result = syncAwait(collectAny(immediate(), later()));
  ASSERT_EQ(result.index(), 0u);
  EXPECT_EQ(std::get<0>(result).value(), 7);
  EXPECT_FALSE(laterStarted);
  EXPECT_EQ(Counted::alive(), 0);  // its frame was freed with the collect
}

TEST(CollectAnyTest, AWinnersExceptionIsItsResult) {
  Outcomes outcomes;
  auto fails = []() -> Lazy<int> {
    co_await sleep(1ms);
    throw std::runtime_error("boom");
  };
  auto result = syncAwait(collectAny(sleepsForever(outcomes), fails()));
  ASSERT_EQ(result.index(), 1u);
  EXPECT_THROW(std::get<1>(result).value(), std::runtime_error);
  EXPECT_EQ(outcomes.cancelled.load(), 1);
}

TEST(CollectAnyTest, RangeReportsTheWinnersIndex) {
  Counted::reset();
  Outcomes outcomes;
  std::vector<Lazy<int>> branches;
  Watchdog watchdog(std::chrono::seconds(60), "CollectAnyTest.RangeReportsTheWinnersIndex");
  // As above: the winner finishes only once all three losers have started.
  test::ManualEvent losersStarted;
  std::thread releaser([&] {
    while (outcomes.started.load() < 3) std::this_thread::yield();
    losersStarted.release();
  });
  auto winner = [](test::ManualEvent& go) -> Lazy<int> {
    Counted alive;
    co_await go;
    co_return 3;
  };
  branches.push_back(sleepsForever(outcomes));
  branches.push_back(sleepsForever(outcomes));
  branches.push_back(winner(losersStarted));
  branches.push_back(sleepsForever(outcomes));
  CollectAnyResult<int> result = syncAwait(collectAny(std::move(branches)));
  releaser.join();
  EXPECT_EQ(result.index, 2u);
  EXPECT_EQ(result.result.value(), 3);
  EXPECT_EQ(outcomes.cancelled.load(), 3);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(CollectAnyTest, EmptyRangeThrowsInvalidArgument) {
  EXPECT_THROW(syncAwait(collectAny(std::vector<Lazy<int>>())), std::invalid_argument);
}

TEST(CollectAnyTest, CancellingTheAwaiterCancelsEveryBranch) {
  ThreadPool pool(2);
  TimerProbeExecutor probe(pool);
  Outcomes outcomes;
  CancellationSource source;
  std::thread canceller([&] {
    while (probe.armed.load() < 2) std::this_thread::yield();  // both branches asleep
    source.requestCancellation();
  });
  Watchdog watchdog(std::chrono::seconds(60), "CollectAnyTest.CancellingTheAwaiter");
  auto result = syncAwait(
      withCancellation(source.token(), collectAny(sleepsForever(outcomes), sleepsForever(outcomes)))
          .via(&probe));
  canceller.join();
  // The first branch to finish (with OperationCancelled) is the winner.
  EXPECT_THROW(result.index() == 0 ? std::get<0>(result).value() : std::get<1>(result).value(),
               OperationCancelled);
  EXPECT_EQ(outcomes.cancelled.load(), 2);
  EXPECT_EQ(probe.disarmed.load(), 2);  // both timers left the heap
}

TEST(CollectAnyTest, AwaiterAlreadyCancelledCancelsTheBranchesAtOnce) {
  Outcomes outcomes;
  CancellationSource source;
  source.requestCancellation();
  auto result = syncAwait(withCancellation(
      source.token(), collectAny(sleepsForever(outcomes), sleepsForever(outcomes))));
  EXPECT_EQ(result.index(), 0u);  // finished first, with OperationCancelled
  EXPECT_THROW(std::get<0>(result).value(), OperationCancelled);
}

TEST(CollectAnyTest, ResumesOnTheAwaitersExecutor) {
  ThreadPool pool(2);
  Outcomes outcomes;
  auto body = [&]() -> Lazy<bool> {
    auto result = co_await collectAny(sleepsForever(outcomes), valueAfter(1ms, 1));
    co_return result.index() == 1 && pool.currentThreadInExecutor();
  };
  EXPECT_TRUE(syncAwait(body().via(&pool)));
}

// Races on a 2-thread pool: exactly one winner per round, every loser finished, no frame
// leaked.
TEST(CollectAnyTest, RacingBranchesStress) {
  ThreadPool pool(2);
  Counted::reset();
  Watchdog watchdog(std::chrono::seconds(120), "CollectAnyTest.RacingBranchesStress");
  std::mt19937 rng(11);
  for (int round = 0; round < 500; ++round) {
    std::vector<Lazy<int>> branches;
    std::vector<std::chrono::microseconds> delays;
    for (int i = 0; i < 4; ++i) {
      delays.emplace_back(rng() % 300);
      branches.push_back(valueAfter(delays.back(), i));
    }
    auto body = [&]() -> Lazy<CollectAnyResult<int>> {
      co_return co_await collectAny(std::move(branches));
    };
    CollectAnyResult<int> result = syncAwait(body().via(&pool));
    ASSERT_LT(result.index, 4u);
    // Cancellation is requested only once the winner has finished, so the winner always
    // finished with its value.
    ASSERT_EQ(result.result.value(), static_cast<int>(result.index));
    ASSERT_EQ(Counted::alive(), 0) << "round " << round;
  }
}

// --- losers that finish anyway: collectAnyNoDiscard --------------------------------------

// Finishes with `value` once its token is cancelled: its own wait is not cancellable, like
// work that obtained its result just as the cancellation arrived.
Lazy<int> finishesAfterItsCancellation(int value) {
  Counted alive;
  test::ManualEvent go;
  CancellationToken token = co_await currentCancellationToken();
  CancellationCallback onCancel(token, [&go] { go.release(); });
  co_await go;
  co_return value;
}

Lazy<int> immediately(int value) {
  Counted alive;
  co_return value;
}

TEST(CollectAnyNoDiscardTest, ALoserThatFinishesWithAValueAfterItsCancellationIsReturned) {
  Counted::reset();
  CollectAnyNoDiscardResult<int, int> result =
      syncAwait(collectAnyNoDiscard(finishesAfterItsCancellation(5), immediately(7)));
  EXPECT_EQ(result.index, 1u);
  EXPECT_EQ(std::get<1>(result.results).value(), 7);
  EXPECT_EQ(std::get<0>(result.results).value(), 5);  // the loser's value, not dropped
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(CollectAnyNoDiscardTest, ALosersCancellationAndABranchNeverStartedAreReported) {
  Outcomes outcomes;
  auto result = syncAwait(
      collectAnyNoDiscard(sleepsForever(outcomes), valueAfter(1ms, 3), immediately(4)));
  // valueAfter suspends, so immediately(4) starts and wins at once... unless the sleep of
  // valueAfter already ended: then it may win. Either way the first branch was cancelled.
  EXPECT_THROW(std::get<0>(result.results).value(), OperationCancelled);
  EXPECT_EQ(outcomes.cancelled.load(), 1);
  auto never = syncAwait(collectAnyNoDiscard(immediately(1), sleepsForever(outcomes)));
  EXPECT_EQ(never.index, 0u);
  EXPECT_EQ(std::get<0>(never.results).value(), 1);
  EXPECT_FALSE(std::get<1>(never.results).available());  // never started
  EXPECT_EQ(outcomes.started.load(), 1);
}

TEST(CollectAnyNoDiscardTest, RangeReturnsEveryBranchsOutcome) {
  Counted::reset();
  std::vector<Lazy<int>> branches;
  branches.push_back(finishesAfterItsCancellation(5));
  branches.push_back(finishesAfterItsCancellation(6));
  branches.push_back(immediately(7));
  branches.push_back(immediately(8));  // never started
  CollectAnyNoDiscardRangeResult<int> result = syncAwait(collectAnyNoDiscard(std::move(branches)));
  EXPECT_EQ(result.index, 2u);
  ASSERT_EQ(result.results.size(), 4u);
  EXPECT_EQ(result.results[0].value(), 5);
  EXPECT_EQ(result.results[1].value(), 6);
  EXPECT_EQ(result.results[2].value(), 7);
  EXPECT_FALSE(result.results[3].available());
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_THROW(syncAwait(collectAnyNoDiscard(std::vector<Lazy<int>>())), std::invalid_argument);
}

TEST(CollectAnyNoDiscardTest, OnAPoolTheLateValueIsReturnedToo) {
  ThreadPool pool(2);
  Counted::reset();
  auto body = [&]() -> Lazy<int> {
    auto result = co_await collectAnyNoDiscard(finishesAfterItsCancellation(5), valueAfter(1ms, 7));
    co_return std::get<0>(result.results).value() * 10 + std::get<1>(result.results).value();
  };
  EXPECT_EQ(syncAwait(body().via(&pool)), 57);
  EXPECT_EQ(Counted::alive(), 0);
}

// --- destroying a collect suspended on its branches ---------------------------------------

// Starts `lazy` with `executor` on this thread: it runs until it suspends (it has no
// continuation: it must not finish).
template <class T>
void startSuspended(Lazy<T>& lazy, Executor* executor) {
  auto handle = detail::LazyAccess::handle(lazy);
  handle.promise().setExecutor(executor);
  handle.resume();
  ASSERT_FALSE(handle.done()) << "the collect was expected to suspend";
}

TEST(CollectAnyDestroyTest, DestroyingACollectSuspendedOnSleepsDisarmsTheirTimers) {
  ThreadPool pool(2);
  TimerProbeExecutor probe(pool);
  Counted::reset();
  Outcomes outcomes;
  {
    auto lazy = collectAny(sleepsForever(outcomes), sleepsForever(outcomes));
    startSuspended(lazy, &probe);
    EXPECT_EQ(probe.armed.load(), 2);
    EXPECT_EQ(Counted::alive(), 2);
  }
  EXPECT_EQ(probe.disarmed.load(), 2);  // both timers left the heap with their frames
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_EQ(outcomes.cancelled.load() + outcomes.completed.load(), 0);  // never resumed
  {
    std::vector<Lazy<int>> branches;
    for (int i = 0; i < 3; ++i) branches.push_back(sleepsForever(outcomes));
    auto lazy = collectAnyNoDiscard(std::move(branches));
    startSuspended(lazy, &probe);
    EXPECT_EQ(probe.armed.load(), 5);
  }
  EXPECT_EQ(probe.disarmed.load(), 5);
  EXPECT_EQ(Counted::alive(), 0);
  // The pool's timers keep working.
  auto again = syncAwait(collectAny(sleepsForever(outcomes), valueAfter(1ms, 9)).via(&probe));
  ASSERT_EQ(again.index(), 1u);
  EXPECT_EQ(std::get<1>(again).value(), 9);
}

TEST(CollectAnyDestroyTest, DestroyingACollectWithoutAnExecutorDisarmsItsTimers) {
  Counted::reset();
  Outcomes outcomes;
  syncAwait(sleep(1ms));  // the timer thread runs; its heap is empty again
  const std::size_t before = detail::globalTimerQueue().size();
  {
    auto lazy = collectAny(sleepsForever(outcomes), sleepsForever(outcomes));
    startSuspended(lazy, nullptr);
    EXPECT_EQ(detail::globalTimerQueue().size(), before + 2);
  }
  EXPECT_EQ(detail::globalTimerQueue().size(), before);
  EXPECT_EQ(Counted::alive(), 0);
  auto again = syncAwait(collectAny(sleepsForever(outcomes), valueAfter(1ms, 9)));
  EXPECT_EQ(again.index(), 1u);
}

}  // namespace
}  // namespace weft
