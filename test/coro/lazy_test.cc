#include "weft/coro/lazy.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/current_executor.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/yield.h"
#include "test/support/counted.h"
#include "test/support/manual_event.h"

namespace weft {
namespace {

using test::Counted;
using test::ManualEvent;

Lazy<int> value(int v) { co_return v; }

Lazy<int> add(int a, int b) { co_return co_await value(a) + co_await value(b); }

TEST(LazyTest, DoesNotStartUntilAwaited) {
  // Lambda coroutines are named: a coroutine that outlives the full expression creating
  // it must not read captures through a destroyed lambda temporary.
  bool started = false;
  auto body = [&]() -> Lazy<int> {
    started = true;
    co_return 1;
  };
  auto lazy = body();
  EXPECT_FALSE(started);
  EXPECT_EQ(syncAwait(std::move(lazy)), 1);
  EXPECT_TRUE(started);
}

TEST(LazyTest, ProducesValue) { EXPECT_EQ(syncAwait(add(40, 2)), 42); }

TEST(LazyTest, ProducesMoveOnlyValue) {
  auto lazy = []() -> Lazy<std::unique_ptr<int>> { co_return std::make_unique<int>(7); }();
  std::unique_ptr<int> p = syncAwait(std::move(lazy));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

TEST(LazyTest, ProducesVoid) {
  int sideEffect = 0;
  syncAwait([&]() -> Lazy<void> {
    sideEffect = 5;
    co_return;
  }());
  EXPECT_EQ(sideEffect, 5);
}

TEST(LazyTest, ProducesReference) {
  int target = 1;
  auto getRef = [&]() -> Lazy<int&> { co_return target; };
  int& ref = syncAwait(getRef());
  EXPECT_EQ(&ref, &target);
  syncAwait([&]() -> Lazy<void> {
    int& r = co_await getRef();
    r = 9;
  }());
  EXPECT_EQ(target, 9);
}

TEST(LazyTest, ExceptionPropagatesThroughChain) {
  auto inner = []() -> Lazy<int> {
    throw std::runtime_error("inner failed");
    co_return 0;
  };
  auto middle = [&]() -> Lazy<int> { co_return 1 + co_await inner(); };
  auto outer = [&]() -> Lazy<std::string> {
    try {
      co_await middle();
    } catch (const std::runtime_error& e) {
      co_return std::string("caught: ") + e.what();
    }
    co_return "not thrown";
  };
  EXPECT_EQ(syncAwait(outer()), "caught: inner failed");
  EXPECT_THROW(syncAwait(middle()), std::runtime_error);
}

TEST(LazyTest, VoidExceptionPropagates) {
  auto failing = []() -> Lazy<void> {
    throw std::logic_error("void failed");
    co_return;
  };
  EXPECT_THROW(syncAwait(failing()), std::logic_error);
}

TEST(LazyTest, DestroyingUnstartedLazyFreesEverything) {
  Counted::reset();
  {
    auto lazy = [](Counted) -> Lazy<int> {
      Counted local;
      co_return 1;
    }(Counted{});
    EXPECT_GE(Counted::alive(), 1);  // the parameter copy lives in the frame
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(LazyTest, DetachedChainFreesEverythingWhenItFinishes) {
  Counted::reset();
  ManualEvent event;
  bool finished = false;
  auto child = [&]([[maybe_unused]] Counted param) -> Lazy<void> {
    Counted local;
    co_await event;
  };
  auto parent = [&]() -> Lazy<void> {
    Counted parentLocal;
    co_await child(Counted{});
  };
  parent().start([&](Try<void> r) {
    EXPECT_TRUE(r.hasValue());
    finished = true;
  });
  EXPECT_EQ(event.waiting(), 1u);
  EXPECT_FALSE(finished);
  // parentLocal, the argument temporary (it lives to the end of the co_await full
  // expression), the parameter copy in the child frame, and the child's local.
  EXPECT_EQ(Counted::alive(), 4);
  event.release();
  EXPECT_TRUE(finished);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(LazyTest, DestroyingSuspendedChainFreesEveryFrame) {
  Counted::reset();
  ManualEvent never;
  auto child = [&]() -> Lazy<void> {
    Counted local;
    co_await never;
  };
  auto parent = [&]([[maybe_unused]] Counted param) -> Lazy<void> {
    Counted local;
    co_await child();
  };
  {
    // Run the chain by hand, as an executor would, until the child parks on `never`;
    // the owner then drops it without ever resuming it.
    Lazy<void> top = parent(Counted{});
    auto handle = detail::LazyAccess::handle(top);
    handle.promise().setContinuation(std::noop_coroutine());
    handle.resume();
    EXPECT_EQ(never.waiting(), 1u);
    EXPECT_EQ(Counted::alive(), 3);  // param, parent's local, child's local
  }
  // Destroying the parent destroyed the child Lazy it was awaiting, and so its frame.
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(LazyTest, StartRunsDetachedAndDeliversTry) {
  ManualEvent event;
  Try<int> result;
  auto body = [&]() -> Lazy<int> {
    co_await event;
    co_return 11;
  };
  auto lazy = body();
  std::move(lazy).start([&](Try<int> r) { result = std::move(r); });
  EXPECT_FALSE(result.available());
  event.release();
  ASSERT_TRUE(result.hasValue());
  EXPECT_EQ(result.value(), 11);
}

TEST(LazyTest, StartDeliversException) {
  Try<int> result;
  []() -> Lazy<int> {
    throw std::runtime_error("detached failure");
    co_return 0;
  }()
              .start([&](Try<int> r) { result = std::move(r); });
  ASSERT_TRUE(result.hasException());
  EXPECT_THROW(result.value(), std::runtime_error);
}

TEST(LazyTest, ResumesOnTheThreadThatCompletedItsAwaitee) {
  ManualEvent event;
  std::thread::id resumedOn;
  bool done = false;
  auto body = [&]() -> Lazy<void> {
    co_await event;
    resumedOn = std::this_thread::get_id();
  };
  body().start([&](Try<void>) { done = true; });
  std::thread other([&] { event.release(); });
  const std::thread::id otherId = other.get_id();
  other.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(resumedOn, otherId);
}

TEST(LazyTest, HasNoExecutorOutsideATask) {
  Executor* seen = reinterpret_cast<Executor*>(1);
  syncAwait([&]() -> Lazy<void> { seen = co_await currentExecutor(); }());
  EXPECT_EQ(seen, nullptr);
}

TEST(LazyTest, YieldWithoutExecutorContinuesAtOnce) {
  int steps = 0;
  syncAwait([&]() -> Lazy<void> {
    ++steps;
    co_await yield();
    ++steps;
  }());
  EXPECT_EQ(steps, 2);
}

Lazy<long> nested(int depth) {
  if (depth == 0) co_return 0;
  co_return 1 + co_await nested(depth - 1);
}

TEST(LazyTest, MillionDeepNestedChainDoesNotOverflowStack) {
#if !WEFT_TAIL_CALLS_GUARANTEED
  GTEST_SKIP() << "this compiler/optimisation level does not turn symmetric transfer into a "
                  "tail call (g++ below -O2); the test needs it";
#endif
  EXPECT_EQ(syncAwait(nested(1'000'000)), 1'000'000);
}

TEST(LazyTest, MillionSynchronousAwaitsInALoopDoNotOverflowStack) {
#if !WEFT_TAIL_CALLS_GUARANTEED
  GTEST_SKIP() << "this compiler/optimisation level does not turn symmetric transfer into a "
                  "tail call (g++ below -O2); the test needs it";
#endif
  long sum = 0;
  syncAwait([&]() -> Lazy<void> {
    for (int i = 0; i < 1'000'000; ++i) sum += co_await value(1);
  }());
  EXPECT_EQ(sum, 1'000'000);
}

TEST(LazyTest, MovedFromLazyIsInvalid) {
  Lazy<int> a = value(3);
  EXPECT_TRUE(a.valid());
  Lazy<int> b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(syncAwait(std::move(b)), 3);
}

// A Lazy is single-shot: only an rvalue can be awaited.
template <class A>
concept AwaitableAs = requires(A&& a) { std::forward<A>(a).operator co_await(); };
static_assert(!AwaitableAs<Lazy<int>&>);
static_assert(!AwaitableAs<const Lazy<int>&>);
static_assert(AwaitableAs<Lazy<int>&&>);

Lazy<int> countedValue(int v) {
  Counted local;
  co_return v;
}

TEST(LazyTest, AwaitedLazyIsEmptyAndItsFrameFreedAfterTheAwait) {
  Counted::reset();
  syncAwait([]() -> Lazy<void> {
    Lazy<int> named = countedValue(7);
    EXPECT_EQ(Counted::alive(), 0);  // not started yet: no local constructed
    EXPECT_EQ(co_await std::move(named), 7);
    // The awaiter owned the frame and freed it at the end of the co_await's full
    // expression, though `named` is still in scope.
    EXPECT_FALSE(named.valid());  // NOLINT(bugprone-use-after-move): the state under test
    EXPECT_EQ(Counted::constructions.load(), 1);
    EXPECT_EQ(Counted::alive(), 0);
  }());
  EXPECT_EQ(Counted::alive(), 0);
}

Lazy<int> countedFailure() {
  Counted local;
  throw std::runtime_error("failed");
  co_return 0;
}

TEST(LazyTest, AwaitedLazyThatThrowsIsEmptyToo) {
  Counted::reset();
  syncAwait([]() -> Lazy<void> {
    Lazy<int> named = countedFailure();
    bool threw = false;
    try {
      (void)co_await std::move(named);
    } catch (const std::runtime_error&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
    EXPECT_FALSE(named.valid());  // NOLINT(bugprone-use-after-move): the state under test
    EXPECT_EQ(Counted::alive(), 0);
  }());
}

TEST(LazyDeathTest, AwaitingTheSameLazyTwiceAborts) {
  EXPECT_DEATH(syncAwait([]() -> Lazy<void> {
                 Lazy<int> once = value(1);
                 (void)co_await std::move(once);
                 (void)co_await std::move(once);  // NOLINT(bugprone-use-after-move)
               }()),
               "weft: co_await on an empty Lazy");
}

TEST(LazyDeathTest, AwaitingAnEmptyLazyAborts) {
  EXPECT_DEATH(syncAwait([]() -> Lazy<void> {
                 Lazy<int> empty;
                 co_await std::move(empty);
               }()),
               "co_await on an empty Lazy");
}

}  // namespace
}  // namespace weft
