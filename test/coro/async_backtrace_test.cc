#include "weft/coro/async_backtrace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/collect_any.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/spawn.h"
#include "weft/coro/task.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Each coroutine below awaits the next, and the innermost captures its chain. Distinct
// names, so that the test can tell them apart in the trace.
weft::Lazy<weft::AsyncBacktrace> traceLeaf(int depth) {
  weft::AsyncBacktrace trace = co_await weft::asyncBacktrace();
  co_return depth > 0 ? trace : weft::AsyncBacktrace{};
}
weft::Lazy<weft::AsyncBacktrace> traceMiddle() { co_return co_await traceLeaf(1); }
weft::Lazy<weft::AsyncBacktrace> traceTop() { co_return co_await traceMiddle(); }

TEST(AsyncBacktraceTest, ThreeDeepLazyChainListsEachCoroutineThenTheRoot) {
  weft::AsyncBacktrace trace = weft::syncAwait(traceTop());
  EXPECT_THAT(trace.functionNames(),
              ElementsAre(HasSubstr("traceLeaf"), HasSubstr("traceMiddle"), HasSubstr("traceTop"),
                          "syncAwait"));
  for (const weft::AsyncBacktrace::Frame& frame : trace.frames()) {
    if (frame.kind != weft::AsyncBacktrace::Frame::Kind::kMarker) {
      EXPECT_EQ(frame.kind, weft::AsyncBacktrace::Frame::Kind::kCoroutine);
    }
  }
}

TEST(AsyncBacktraceTest, TaskOnAnotherExecutorShowsItsAwaiterAboveIt) {
  weft::ThreadPool pool(1);
  auto outer = [&]() -> weft::Lazy<weft::AsyncBacktrace> {
    co_return co_await traceMiddle().via(&pool);
  };
  weft::AsyncBacktrace trace = weft::syncAwait(outer());
  const std::vector<std::string> names = trace.functionNames();
  ASSERT_EQ(names.size(), 4u) << trace;
  EXPECT_THAT(names[0], HasSubstr("traceLeaf"));
  EXPECT_THAT(names[1], HasSubstr("traceMiddle"));  // the task
  EXPECT_THAT(names[2], HasSubstr("TestBody()::"));  // outer, a lambda
  EXPECT_EQ(names[3], "syncAwait");
}

weft::Lazy<weft::AsyncBacktrace> traceBranch() { co_return co_await traceLeaf(1); }
weft::Lazy<weft::AsyncBacktrace> traceCollector() {
  auto [first, second] = co_await weft::collectAll(traceBranch(), traceBranch());
  EXPECT_EQ(first.value().functionNames(), second.value().functionNames());
  co_return std::move(second).value();
}

TEST(AsyncBacktraceTest, CollectBranchShowsTheCollectThenItsAwaiter) {
  weft::AsyncBacktrace trace = weft::syncAwait(traceCollector());
  EXPECT_THAT(trace.functionNames(),
              ElementsAre(HasSubstr("traceLeaf"), HasSubstr("traceBranch"), "collectAll",
                          HasSubstr("traceCollector"), "syncAwait"));
}

weft::Lazy<weft::AsyncBacktrace> traceFailFast() {
  auto [first, second] = co_await weft::collectAllFailFast(traceBranch(), traceBranch());
  co_return std::move(second).value();
}
weft::Lazy<weft::AsyncBacktrace> traceWindowed() {
  std::vector<weft::Lazy<weft::AsyncBacktrace>> branches;
  for (int i = 0; i < 3; ++i) branches.push_back(traceBranch());
  // One at a time: the later branches are started by the ones that finished.
  std::vector<weft::Try<weft::AsyncBacktrace>> results =
      co_await weft::collectAllWindowed(1, std::move(branches));
  co_return std::move(results.back()).value();
}
weft::Lazy<weft::AsyncBacktrace> traceAny() {
  auto first = co_await weft::collectAny(traceBranch(), traceBranch());
  co_return std::move(std::get<0>(first)).value();
}

TEST(AsyncBacktraceTest, EachCollectNamesItselfInItsBranchesTraces) {
  EXPECT_THAT(weft::syncAwait(traceFailFast()).functionNames(),
              ElementsAre(HasSubstr("traceLeaf"), HasSubstr("traceBranch"), "collectAllFailFast",
                          HasSubstr("traceFailFast"), "syncAwait"));
  EXPECT_THAT(weft::syncAwait(traceWindowed()).functionNames(),
              ElementsAre(HasSubstr("traceLeaf"), HasSubstr("traceBranch"), "collectAllWindowed",
                          HasSubstr("traceWindowed"), "syncAwait"));
  EXPECT_THAT(weft::syncAwait(traceAny()).functionNames(),
              ElementsAre(HasSubstr("traceLeaf"), HasSubstr("traceBranch"), "collectAny",
                          HasSubstr("traceAny"), "syncAwait"));
}

TEST(AsyncBacktraceTest, DetachedStartIsTheRoot) {
  weft::AsyncBacktrace trace;
  traceMiddle().start([&](weft::Try<weft::AsyncBacktrace> result) { trace = std::move(result).value(); });
  EXPECT_THAT(trace.functionNames(),
              ElementsAre(HasSubstr("traceLeaf"), HasSubstr("traceMiddle"), "start()"));
}

TEST(AsyncBacktraceTest, PrintsOneNumberedLinePerFrameWithSourceLines) {
  weft::AsyncBacktrace trace = weft::syncAwait(traceTop());
  const std::string text = trace.toString();
  EXPECT_THAT(text, StartsWith("#0 coroutine "));
  EXPECT_THAT(text, HasSubstr("#3 syncAwait\n"));
  // Built with debug information (-g) the coroutines have file:line; without it the
  // function names are still there.
  EXPECT_THAT(text, HasSubstr("traceMiddle"));
  const std::string plain = trace.toString(/*sourceLines=*/false);
  EXPECT_THAT(plain, Not(HasSubstr(" at ")));
}

TEST(AsyncBacktraceTest, OutsideAnyCoroutineItIsTheNativeStack) {
  weft::AsyncBacktrace trace = weft::asyncBacktrace();
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace.frames()[0].kind, weft::AsyncBacktrace::Frame::Kind::kNative);
  const std::vector<std::string> names = trace.functionNames();
  EXPECT_THAT(names[0], HasSubstr("OutsideAnyCoroutineItIsTheNativeStack"));
}

// --- an exception nobody receives ---------------------------------------------------------

weft::Lazy<int> throwDeep() {
  co_await weft::yield();
  throw std::runtime_error("lost failure");
}
weft::Lazy<int> throwMiddle() { co_return co_await throwDeep() + 1; }

TEST(AsyncBacktraceDeathTest, ALostExceptionIsReportedWithWhereItWasThrown) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        weft::ThreadPool pool(1);
        { auto handle = weft::spawn(&pool, throwMiddle()); }  // dropped: nobody awaits
        // Stays a sleep: the statement must not end before the report aborts (a statement
        // that returns is "failed to die"); 10 s only bounds a report that never comes.
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      "nobody awaited: lost failure\nweft: where it was thrown \\(async backtrace, innermost "
      "first\\):\n  #0 coroutine [^\n]*throwDeep\\(\\)[^\n]*\n  #1 coroutine "
      "[^\n]*throwMiddle\\(\\)[^\n]*\n  #2 spawn\\(\\)");
}

// --- across fibers -----------------------------------------------------------------------

weft::SpawnFiberOptions namedFiber(const char* name) {
  weft::SpawnFiberOptions options;
  options.name = name;
  return options;
}

[[gnu::noinline]] weft::AsyncBacktrace fiberInnerFunction() {
  weft::AsyncBacktrace trace = weft::asyncBacktrace();
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return trace;
}

weft::Lazy<weft::AsyncBacktrace> awaitFiberFromLazy(weft::ThreadPool& pool) {
  co_return co_await weft::spawnFiber(&pool, [] { return fiberInnerFunction(); },
                                      namedFiber("tracer"));
}

TEST(AsyncBacktraceTest, FiberAwaitedByLazyShowsItsFramesThenTheLazyChain) {
  weft::ThreadPool pool(1);
  auto outer = [&]() -> weft::Lazy<weft::AsyncBacktrace> {
    co_return co_await awaitFiberFromLazy(pool);
  };
  weft::AsyncBacktrace trace = weft::syncAwait(outer());
  const std::vector<std::string> names = trace.functionNames();
  // Native frames of the fiber, innermost first, down to its entry; then the fiber, the
  // Lazy that awaits its future, that Lazy's awaiter, the root.
  ASSERT_GE(names.size(), 5u) << trace;
  EXPECT_THAT(names[0], HasSubstr("fiberInnerFunction"));
  EXPECT_EQ(trace.frames()[0].kind, weft::AsyncBacktrace::Frame::Kind::kNative);
  std::size_t fiber = 0;
  while (fiber < names.size() && names[fiber].rfind("fiber ", 0) != 0) ++fiber;
  ASSERT_LT(fiber, names.size()) << trace;
  EXPECT_THAT(names[fiber], AllOf(StartsWith("fiber "), HasSubstr("\"tracer\"")));
  ASSERT_EQ(names.size(), fiber + 4) << trace;
  EXPECT_THAT(names[fiber + 1], HasSubstr("awaitFiberFromLazy"));
  EXPECT_THAT(names[fiber + 2], HasSubstr("TestBody()::"));  // a lambda
  EXPECT_EQ(names[fiber + 3], "syncAwait");
}

weft::Lazy<weft::AsyncBacktrace> lazyAwaitedByFiber() { co_return co_await traceLeaf(1); }

[[gnu::noinline]] weft::AsyncBacktrace fiberAwaitingLazy() {
  weft::AsyncBacktrace trace = weft::await(lazyAwaitedByFiber());
  asm volatile("" ::: "memory");
  return trace;
}

TEST(AsyncBacktraceTest, LazyAwaitedByFiberShowsWhereTheFiberWaitsThenTheFiber) {
  weft::ThreadPool pool(1);
  weft::AsyncBacktrace trace =
      weft::syncAwait(weft::spawnFiber(&pool, [] { return fiberAwaitingLazy(); },
                                       namedFiber("waiter")));
  const std::vector<std::string> names = trace.functionNames();
  ASSERT_EQ(names.size(), 5u) << trace;
  EXPECT_THAT(names[0], HasSubstr("traceLeaf"));
  EXPECT_THAT(names[1], HasSubstr("lazyAwaitedByFiber"));
  EXPECT_THAT(names[2], HasSubstr("fiberAwaitingLazy"));  // where the fiber is parked
  EXPECT_EQ(trace.frames()[2].kind, weft::AsyncBacktrace::Frame::Kind::kNative);
  EXPECT_THAT(names[3], AllOf(StartsWith("fiber "), HasSubstr("\"waiter\"")));
  EXPECT_EQ(names[4], "syncAwait");
}

}  // namespace
