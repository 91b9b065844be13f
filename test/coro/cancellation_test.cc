#include "weft/coro/cancellation.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "test/support/thread_states.h"

namespace weft {
namespace {

// ---------------------------------------------------------------------------------------
// CancellationToken / CancellationSource

TEST(CancellationTokenTest, DefaultTokenCanNeverBeCancelled) {
  CancellationToken token;
  EXPECT_FALSE(token.canBeCancelled());
  EXPECT_FALSE(token.isCancellationRequested());
  EXPECT_NO_THROW(token.throwIfCancellationRequested());
}

TEST(CancellationTokenTest, ObservesItsSource) {
  CancellationSource source;
  CancellationToken token = source.token();
  EXPECT_TRUE(token.canBeCancelled());
  EXPECT_FALSE(token.isCancellationRequested());
  EXPECT_FALSE(source.isCancellationRequested());
  EXPECT_TRUE(source.requestCancellation());
  EXPECT_TRUE(token.isCancellationRequested());
  EXPECT_TRUE(source.isCancellationRequested());
  EXPECT_THROW(token.throwIfCancellationRequested(), OperationCancelled);
}

TEST(CancellationTokenTest, OnlyTheFirstRequestReturnsTrue) {
  CancellationSource source;
  CancellationSource copy = source;
  EXPECT_TRUE(copy.requestCancellation());
  EXPECT_FALSE(source.requestCancellation());
  EXPECT_FALSE(copy.requestCancellation());
  EXPECT_TRUE(source.isCancellationRequested());
}

TEST(CancellationTokenTest, CopiesAndMovesKeepObservingTheSameSource) {
  CancellationSource source;
  CancellationToken a = source.token();
  CancellationToken b = a;
  CancellationToken c = std::move(b);
  EXPECT_EQ(a, c);
  EXPECT_FALSE(b.canBeCancelled());  // moved-from: empty
  EXPECT_NE(a, b);
  source.requestCancellation();
  EXPECT_TRUE(c.isCancellationRequested());
  b = c;
  EXPECT_TRUE(b.isCancellationRequested());
}

TEST(CancellationTokenTest, CannotBeCancelledOnceEverySourceIsGone) {
  CancellationToken token;
  {
    CancellationSource source;
    CancellationSource copy = source;
    token = source.token();
    EXPECT_TRUE(token.canBeCancelled());
  }
  EXPECT_FALSE(token.canBeCancelled());
  EXPECT_FALSE(token.isCancellationRequested());
}

TEST(CancellationTokenTest, RequestedTokenStaysCancelledAfterItsSourceIsGone) {
  CancellationToken token;
  {
    CancellationSource source;
    token = source.token();
    source.requestCancellation();
  }
  EXPECT_TRUE(token.canBeCancelled());
  EXPECT_TRUE(token.isCancellationRequested());
}

TEST(CancellationTokenTest, MovedFromSourceIsEmpty) {
  CancellationSource source;
  CancellationSource moved = std::move(source);
  EXPECT_FALSE(source.token().canBeCancelled());  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(source.requestCancellation());
  EXPECT_TRUE(moved.token().canBeCancelled());
}

// ---------------------------------------------------------------------------------------
// CancellationCallback

TEST(CancellationCallbackTest, RunsOnceOnTheRequestingThread) {
  CancellationSource source;
  int runs = 0;
  std::thread::id ranOn;
  CancellationCallback callback(source.token(), [&] {
    ++runs;
    ranOn = std::this_thread::get_id();
  });
  EXPECT_EQ(runs, 0);
  std::thread::id requester;
  std::thread([&] {
    requester = std::this_thread::get_id();
    source.requestCancellation();
  }).join();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(ranOn, requester);
  source.requestCancellation();
  EXPECT_EQ(runs, 1);
}

TEST(CancellationCallbackTest, RunsInTheConstructorWhenAlreadyCancelled) {
  CancellationSource source;
  source.requestCancellation();
  int runs = 0;
  CancellationCallback callback(source.token(), [&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

TEST(CancellationCallbackTest, NeverRunsWhenDestroyedBeforeTheRequest) {
  CancellationSource source;
  int runs = 0;
  {
    CancellationCallback callback(source.token(), [&] { ++runs; });
  }
  source.requestCancellation();
  EXPECT_EQ(runs, 0);
}

TEST(CancellationCallbackTest, NeverRunsForATokenThatCannotBeCancelled) {
  int runs = 0;
  {
    CancellationCallback callback(CancellationToken(), [&] { ++runs; });
  }
  EXPECT_EQ(runs, 0);
}

TEST(CancellationCallbackTest, EveryRegisteredCallbackRuns) {
  CancellationSource source;
  std::array<int, 5> runs{};
  std::vector<std::unique_ptr<CancellationCallback>> callbacks;
  for (int& r : runs) {
    callbacks.push_back(std::make_unique<CancellationCallback>(source.token(), [&r] { ++r; }));
  }
  callbacks[2].reset();  // deregistered: must not run
  source.requestCancellation();
  EXPECT_EQ(runs, (std::array<int, 5>{1, 1, 0, 1, 1}));
}

TEST(CancellationCallbackTest, StoresLargeCallables) {
  CancellationSource source;
  std::array<long, 16> big{};
  big[15] = 7;
  long seen = 0;
  auto counted = std::make_shared<int>(0);
  {
    CancellationCallback callback(source.token(), [big, &seen, counted] { seen = big[15]; });
    EXPECT_EQ(counted.use_count(), 2);
    source.requestCancellation();
  }
  EXPECT_EQ(seen, 7);
  EXPECT_EQ(counted.use_count(), 1);  // the stored copy was destroyed
}

TEST(CancellationCallbackTest, DestroysItsCallableWithoutRunningIt) {
  CancellationSource source;
  auto counted = std::make_shared<int>(0);
  {
    CancellationCallback callback(source.token(), [counted] { ++*counted; });
    EXPECT_EQ(counted.use_count(), 2);
  }
  EXPECT_EQ(counted.use_count(), 1);
  source.requestCancellation();
  EXPECT_EQ(*counted, 0);
}

TEST(CancellationCallbackTest, MayDestroyItsOwnRegistration) {
  CancellationSource source;
  std::unique_ptr<CancellationCallback> self;
  int runs = 0;
  self = std::make_unique<CancellationCallback>(source.token(), [&] {
    ++runs;
    self.reset();  // would deadlock if the destructor waited for its own callback
  });
  source.requestCancellation();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(self, nullptr);
}

TEST(CancellationCallbackTest, MayDestroyAnotherRegistrationFromInsideACallback) {
  CancellationSource source;
  std::unique_ptr<CancellationCallback> first, second;
  int firstRuns = 0, secondRuns = 0;
  // Whichever runs first deregisters the other, so exactly one of them runs.
  first = std::make_unique<CancellationCallback>(source.token(), [&] {
    ++firstRuns;
    second.reset();
  });
  second = std::make_unique<CancellationCallback>(source.token(), [&] {
    ++secondRuns;
    first.reset();
  });
  source.requestCancellation();
  EXPECT_EQ(firstRuns + secondRuns, 1);
}

TEST(CancellationCallbackTest, MayRegisterANewCallbackFromInsideACallback) {
  CancellationSource source;
  std::unique_ptr<CancellationCallback> inner;
  int innerRuns = 0;
  CancellationCallback outer(source.token(), [&] {
    // Already cancelled: runs right here, in the constructor.
    inner = std::make_unique<CancellationCallback>(source.token(), [&] { ++innerRuns; });
  });
  source.requestCancellation();
  EXPECT_EQ(innerRuns, 1);
}

TEST(CancellationCallbackTest, DestructorWaitsForTheCallbackRunningOnAnotherThread) {
  CancellationSource source;
  std::atomic<bool> started{false}, release{false}, finished{false};
  auto callback = std::make_unique<CancellationCallback>(source.token(), [&] {
    started = true;
    while (!release) std::this_thread::yield();
    finished = true;
  });
  std::thread requester([&] { source.requestCancellation(); });
  while (!started) std::this_thread::yield();
  // The callback is running (and cannot finish until `release`). Let it go from a third
  // thread once this one is blocked (the kernel says so: test::waitUntilBlocked) after
  // saying it goes into the destructor: a correct destructor waits there. One that
  // did not wait would return with the callback still held, and fail the check below.
  const pid_t destroyer = test::currentThreadId();
  std::atomic<bool> destroying{false};
  std::thread releaser([&] {
    while (!destroying) std::this_thread::yield();
    EXPECT_TRUE(test::waitUntilBlocked(destroyer));
    release = true;
  });
  destroying = true;
  callback.reset();
  EXPECT_TRUE(finished);  // a destructor that did not wait returns before this is set
  requester.join();
  releaser.join();
}

// Concurrent registration, deregistration and cancellation: every callback runs at most
// once, never after its destructor returned, and exactly once when its registration was
// alive when cancellation completed.
TEST(CancellationCallbackTest, ConcurrentRegisterDeregisterAndCancelStress) {
  ThreadPool pool(2);
  constexpr int kRounds = 2000;
  constexpr int kCallbacks = 32;
  for (int round = 0; round < kRounds; ++round) {
    CancellationSource source;
    std::array<std::atomic<int>, kCallbacks> runs{};
    std::array<int, kCallbacks> runsAtDestruction{};
    std::array<std::optional<CancellationCallback>, kCallbacks> callbacks;
    std::atomic<bool> sawRequestInCallback{true};

    auto registerer = [&]() -> Lazy<void> {
      for (int i = 0; i < kCallbacks; ++i) {
        callbacks[i].emplace(source.token(), [&, i] {
          if (!source.isCancellationRequested()) sawRequestInCallback = false;
          runs[i].fetch_add(1);
        });
        if (i % 2 == 1) {
          callbacks[i].reset();
          runsAtDestruction[i] = runs[i].load();
        }
      }
      co_return;
    };
    auto canceller = [&, spin = round % 64]() -> Lazy<void> {
      for (int i = 0; i < spin; ++i) std::this_thread::yield();
      source.requestCancellation();
      co_return;
    };
    syncAwait(collectAllPara(registerer(), canceller()), &pool);
    for (int i = 0; i < kCallbacks; i += 2) {
      callbacks[i].reset();
      runsAtDestruction[i] = runs[i].load();
    }
    for (int i = 0; i < kCallbacks; ++i) {
      ASSERT_LE(runs[i].load(), 1) << "round " << round << " callback " << i;
      ASSERT_EQ(runs[i].load(), runsAtDestruction[i]) << "ran after its destructor returned";
      if (i % 2 == 0) {
        ASSERT_EQ(runs[i].load(), 1) << "alive at cancellation but never ran";
      }
    }
    ASSERT_TRUE(sawRequestInCallback.load());
  }
}

// ---------------------------------------------------------------------------------------
// Lazy / Task integration

// A cancellable awaitable for these tests: parks until release() or until the awaiting
// coroutine's token is cancelled (then throws OperationCancelled). The gate's mutex picks
// exactly one of the two to resume the waiter; `arrivals_` makes sure the winner resumes
// it only once await_suspend has returned (or await_suspend continues it itself).
class Gate {
 public:
  class Awaiter {
   public:
    Awaiter(Gate& gate, const CancellationToken& token) : gate_(gate), token_(token) {}
    bool await_ready() const {
      token_.throwIfCancellationRequested();  // cancelled before: never suspends
      std::lock_guard lock(gate_.mutex_);
      return gate_.released_;
    }
    bool await_suspend(std::coroutine_handle<> waiter) {
      waiter_ = waiter;
      {
        std::lock_guard lock(gate_.mutex_);
        if (gate_.released_) return false;
        gate_.waiter_ = this;
      }
      // May run at once (cancelled meanwhile): then it wins and arrives first.
      onCancel_.emplace(token_, [this] {
        {
          std::lock_guard lock(gate_.mutex_);
          if (gate_.waiter_ != this) return;  // release() won
          gate_.waiter_ = nullptr;
        }
        cancelled_ = true;
        arrive();
      });
      // First to arrive: stay suspended, the winner resumes us. Second: continue now.
      return arrivals_.fetch_add(1) == 0;
    }
    void await_resume() {
      onCancel_.reset();
      if (cancelled_) throw OperationCancelled();
    }

   private:
    friend class Gate;
    void arrive() {
      if (arrivals_.fetch_add(1) == 1) waiter_.resume();
    }

    Gate& gate_;
    const CancellationToken& token_;
    std::coroutine_handle<> waiter_;
    std::atomic<int> arrivals_{0};
    bool cancelled_ = false;
    std::optional<CancellationCallback> onCancel_;
  };

  Awaiter coAwait(Executor*, const CancellationToken& token) { return Awaiter(*this, token); }

  void release() {
    Awaiter* waiter;
    {
      std::lock_guard lock(mutex_);
      released_ = true;
      waiter = std::exchange(waiter_, nullptr);
      if (waiter != nullptr) hadWaiter_ = true;
    }
    if (waiter != nullptr) waiter->arrive();
  }
  bool hasWaiter() const {
    std::lock_guard lock(mutex_);
    return waiter_ != nullptr || hadWaiter_;
  }

 private:
  mutable std::mutex mutex_;
  bool released_ = false;
  bool hadWaiter_ = false;
  Awaiter* waiter_ = nullptr;
};

TEST(CancellationLazyTest, PlainLazyCarriesATokenThatCannotBeCancelled) {
  CancellationToken token = syncAwait(
      []() -> Lazy<CancellationToken> { co_return co_await currentCancellationToken(); }());
  EXPECT_FALSE(token.canBeCancelled());
}

TEST(CancellationLazyTest, OutsideAWeftCoroutineThereIsNoToken) {
  CancellationToken token = syncAwait(currentCancellationToken());
  EXPECT_FALSE(token.canBeCancelled());
}

TEST(CancellationLazyTest, WithCancellationBindsTheTokenAndNestedLazysInheritIt) {
  CancellationSource source;
  auto inner = []() -> Lazy<CancellationToken> { co_return co_await currentCancellationToken(); };
  auto outer = [&]() -> Lazy<std::pair<CancellationToken, CancellationToken>> {
    CancellationToken own = co_await currentCancellationToken();
    CancellationToken nested = co_await inner();
    co_return std::pair{own, nested};
  };
  auto [own, nested] = syncAwait(withCancellation(source.token(), outer()));
  EXPECT_EQ(own, source.token());
  EXPECT_EQ(nested, source.token());
}

TEST(CancellationLazyTest, WithCancellationReplacesTheInheritedToken) {
  CancellationSource outerSource, innerSource;
  auto probe = []() -> Lazy<CancellationToken> { co_return co_await currentCancellationToken(); };
  auto body = [&]() -> Lazy<std::pair<CancellationToken, CancellationToken>> {
    CancellationToken bound = co_await withCancellation(innerSource.token(), probe());
    CancellationToken after = co_await probe();  // the awaiter's own token again
    co_return std::pair{bound, after};
  };
  auto [bound, after] = syncAwait(withCancellation(outerSource.token(), body()));
  EXPECT_EQ(bound, innerSource.token());
  EXPECT_EQ(after, outerSource.token());
}

TEST(CancellationLazyTest, CollectAllBranchesInheritTheToken) {
  CancellationSource source;
  auto probe = []() -> Lazy<CancellationToken> { co_return co_await currentCancellationToken(); };
  auto body = [&]() -> Lazy<bool> {
    auto [a, b] = co_await collectAll(probe(), probe());
    std::vector<Lazy<CancellationToken>> range;
    range.push_back(probe());
    auto r = co_await collectAllPara(std::move(range));
    co_return a.value() == source.token() && b.value() == source.token() &&
        r[0].value() == source.token();
  };
  EXPECT_TRUE(syncAwait(withCancellation(source.token(), body())));
}

TEST(CancellationLazyTest, TaskCarriesItsAwaitersToken) {
  ThreadPool pool(2);
  CancellationSource source;
  auto probe = [&]() -> Lazy<bool> {
    CancellationToken token = co_await currentCancellationToken();
    co_return token == source.token() && pool.currentThreadInExecutor();
  };
  auto body = [&]() -> Lazy<bool> { co_return co_await probe().via(&pool); };
  EXPECT_TRUE(syncAwait(withCancellation(source.token(), body())));
}

TEST(CancellationLazyTest, WithCancellationOfATaskKeepsItsExecutor) {
  ThreadPool pool(2);
  CancellationSource source;
  auto probe = [&]() -> Lazy<bool> {
    CancellationToken token = co_await currentCancellationToken();
    co_return token == source.token() && pool.currentThreadInExecutor();
  };
  Task<bool> task = withCancellation(source.token(), probe().via(&pool));
  EXPECT_EQ(task.executor(), &pool);
  EXPECT_TRUE(syncAwait(std::move(task)));
}

TEST(CancellationLazyTest, CancelledBeforeTheAwaitThrowsWithoutSuspending) {
  CancellationSource source;
  source.requestCancellation();
  Gate gate;
  auto body = [&]() -> Lazy<void> { co_await gate; };
  EXPECT_THROW(syncAwait(withCancellation(source.token(), body())), OperationCancelled);
  EXPECT_FALSE(gate.hasWaiter());
}

TEST(CancellationLazyTest, CancelledWhileSuspendedThrows) {
  ThreadPool pool(2);
  CancellationSource source;
  Gate gate;
  std::atomic<bool> completedNormally{false};
  auto body = [&]() -> Lazy<void> {
    co_await gate;
    completedNormally = true;
  };
  std::thread canceller([&] {
    while (!gate.hasWaiter()) std::this_thread::yield();
    source.requestCancellation();
  });
  EXPECT_THROW(syncAwait(withCancellation(source.token(), body()).via(&pool)), OperationCancelled);
  canceller.join();
  EXPECT_FALSE(completedNormally);
}

TEST(CancellationLazyTest, CancelledAfterCompletionChangesNothing) {
  CancellationSource source;
  Gate gate;
  gate.release();
  auto body = [&]() -> Lazy<int> {
    co_await gate;
    co_return 7;
  };
  EXPECT_EQ(syncAwait(withCancellation(source.token(), body())), 7);
  EXPECT_TRUE(source.requestCancellation());
}

TEST(CancellationLazyTest, CancellationReachesAwaitsNestedInTasksAndCollects) {
  ThreadPool pool(2);
  CancellationSource source;
  Gate a, b;
  auto wait = [](Gate& g) -> Lazy<void> { co_await g; };
  auto inTask = [&](Gate& g) -> Lazy<void> { co_await wait(g).via(&pool); };
  auto body = [&]() -> Lazy<std::pair<bool, bool>> {
    auto [ra, rb] = co_await collectAllPara(inTask(a), wait(b));
    co_return std::pair{ra.hasException(), rb.hasException()};
  };
  std::thread canceller([&] {
    while (!a.hasWaiter() || !b.hasWaiter()) std::this_thread::yield();
    source.requestCancellation();
  });
  auto [aCancelled, bCancelled] = syncAwait(withCancellation(source.token(), body()), &pool);
  canceller.join();
  EXPECT_TRUE(aCancelled);
  EXPECT_TRUE(bCancelled);
}

// Cancellation racing completion on a 2-thread pool: every await ends exactly once,
// either normally or with OperationCancelled, and nothing is lost.
TEST(CancellationLazyTest, CancellationRacingCompletionStress) {
  ThreadPool pool(2);
  constexpr int kRounds = 3000;
  int cancelled = 0, completed = 0;
  for (int round = 0; round < kRounds; ++round) {
    CancellationSource source;
    Gate gate;
    auto waiter = [&]() -> Lazy<bool> {
      try {
        co_await gate;
        co_return true;
      } catch (const OperationCancelled&) {
        co_return false;
      }
    };
    auto releaser = [&]() -> Lazy<void> {
      gate.release();
      co_return;
    };
    auto canceller = [&]() -> Lazy<void> {
      source.requestCancellation();
      co_return;
    };
    auto [w, r, c] = syncAwait(
        collectAllPara(withCancellation(source.token(), waiter()), releaser(), canceller()), &pool);
    ASSERT_TRUE(w.hasValue());
    (w.value() ? completed : cancelled)++;
  }
  EXPECT_EQ(completed + cancelled, kRounds);
}

}  // namespace
}  // namespace weft
