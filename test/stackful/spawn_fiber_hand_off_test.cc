// The park of fibers of spawnFiber (stackful/detail/fiber_park.h): acted on by the driver
// after the switch, or, on ThreadPool(1), acted on first by the fiber, which then switches
// straight into the next fiber of the queue (the hand-off). These tests pin down what must
// not change with it: the executor's order, the per-fiber thread state, and every outcome
// of await_suspend (suspended, declined, thrown, resumed inline).
// They run with the hand-off under ASan and TSan too (docs/stackful.md, "Sanitizers and
// valgrind").

#include <gtest/gtest.h>

#include <coroutine>
#include <exception>
#include <future>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/fiber.h"
#include "weft/stackful/fiber_local.h"
#include "weft/stackful/spawn_fiber.h"

namespace weft {
namespace {

// Holds a ThreadPool(1)'s only worker until release(), so that everything scheduled
// meanwhile is queued in a known order.
class Gate {
 public:
  explicit Gate(ThreadPool& pool) {
    pool.schedule([opened = opened_.get_future().share()] { opened.wait(); });
  }
  void release() { opened_.set_value(); }

 private:
  std::promise<void> opened_;
};

// Only touched by the pool's single worker.
using Trace = std::string;

TEST(SpawnFiberHandOffTest, YieldKeepsRoundRobinOrderOfManyFibers) {
  ThreadPool pool(1);
  Trace trace;
  Gate gate(pool);
  std::vector<FiberFuture<void>> fibers;
  for (char name : std::string("abcd")) {
    fibers.push_back(spawnFiber(&pool, [&trace, name] {
      for (int i = 0; i < 4; ++i) {
        trace.push_back(name);
        this_fiber::yield();
      }
    }));
  }
  gate.release();
  for (auto& f : fibers) syncAwait(std::move(f));
  EXPECT_EQ(trace, "abcdabcdabcdabcd");
}

// A Lazy queued between two fibers: a yielding fiber cannot switch into it, so it goes
// back to the loop, which runs the Lazy in its turn.
TEST(SpawnFiberHandOffTest, ALazyQueuedBetweenFibersRunsInItsTurn) {
  ThreadPool pool(1);
  Trace trace;
  Gate gate(pool);
  auto fiberBody = [&trace](char name) {
    return [&trace, name] {
      for (int i = 0; i < 3; ++i) {
        trace.push_back(name);
        this_fiber::yield();
      }
    };
  };
  auto a = spawnFiber(&pool, fiberBody('a'));
  auto lazyBody = [&trace]() -> Lazy<void> {
    for (int i = 0; i < 3; ++i) {
      trace.push_back('L');
      co_await yield();
    }
  };
  std::promise<void> lazyDone;
  lazyBody().via(&pool).start([&lazyDone](Try<void> result) {
    EXPECT_TRUE(result.hasValue());
    lazyDone.set_value();
  });
  auto b = spawnFiber(&pool, fiberBody('b'));
  gate.release();
  syncAwait(std::move(a));
  syncAwait(std::move(b));
  lazyDone.get_future().wait();
  EXPECT_EQ(trace, "aLbaLbaLb");
}

// Completes from await_suspend as the probe is told to, recording the order of events.
struct OrderProbe {
  Trace* trace = nullptr;
  bool suspendResult = true;
  bool throwOnSuspend = false;
  bool resumeInline = false;

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> awaiting) {
    trace->push_back('s');
    if (throwOnSuspend) throw std::runtime_error("from await_suspend");
    if (!suspendResult) return false;
    if (resumeInline) awaiting.resume();
    return true;
  }
  int await_resume() const noexcept { return 7; }
};

// `a` and `b` have each run once (so `b` is parked in the queue, a fiber `a` can switch
// into) when `a` awaits `probe`; `b` yields twice. Returns the trace.
template <class Probe>
Trace awaitProbeWhileAnotherFiberWaits(Probe probe, std::string* caught = nullptr) {
  ThreadPool pool(1);
  Trace trace;
  probe.trace = &trace;
  Gate gate(pool);
  auto a = spawnFiber(&pool, [&] {
    trace.push_back('a');
    this_fiber::yield();
    trace.push_back('a');
    try {
      int v = await(Probe(probe));
      trace.push_back(v == 7 ? 'A' : '?');
    } catch (const std::runtime_error& e) {
      if (caught != nullptr) *caught = e.what();
      trace.push_back('E');
    }
  });
  auto b = spawnFiber(&pool, [&] {
    for (int i = 0; i < 3; ++i) {
      trace.push_back('b');
      this_fiber::yield();
    }
  });
  gate.release();
  syncAwait(std::move(a));
  syncAwait(std::move(b));
  return trace;
}

// a, b, then a parks on the probe (which may resume it from any thread, so the park is
// acted on by its driver after the switch) with b next in the queue: await_suspend ('s')
// runs before b goes on. When it declines (false) or throws, a continues at once.
TEST(SpawnFiberHandOffTest, AwaitSuspendDecliningActedOnByTheDriver) {
  Trace trace = awaitProbeWhileAnotherFiberWaits(OrderProbe{.suspendResult = false});
  EXPECT_EQ(trace, "abasAbb");
}

TEST(SpawnFiberHandOffTest, AwaitSuspendThrowingReachesTheFiber) {
  std::string caught;
  Trace trace = awaitProbeWhileAnotherFiberWaits(OrderProbe{.throwOnSuspend = true}, &caught);
  EXPECT_EQ(trace, "abasEbb");
  EXPECT_EQ(caught, "from await_suspend");
}

// await_suspend resumes the fiber's driver inline, from the thread's stack where the
// driver acts on the park: `a` runs nested there, to its end, before `b` goes on.
TEST(SpawnFiberHandOffTest, AwaitSuspendResumingInline) {
  Trace trace = awaitProbeWhileAnotherFiberWaits(OrderProbe{.resumeInline = true});
  EXPECT_EQ(trace, "abasAbb");
}

// ---------------------------------------------------------------------------------------
// Parks acted on before the switch: an awaiter that resumes only through the executor
// (kResumesOnlyThroughExecutor) has its await_suspend called by the parking fiber itself,
// on ThreadPool(1)'s thread, before it switches out (stackful/detail/fiber_park.h). The outcomes of
// await_suspend are then seen at once, before any other fiber runs.

// OrderProbe for that path: made with the awaiting fiber's executor.
struct ExecutorProbe {
  static constexpr bool kResumesOnlyThroughExecutor = true;

  Trace* trace = nullptr;
  bool suspendResult = true;
  bool throwOnSuspend = false;
  Executor* executor = nullptr;

  ExecutorProbe coAwait(Executor* awaitingExecutor) && noexcept {
    ExecutorProbe probe = *this;
    probe.executor = awaitingExecutor;
    return probe;
  }
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> awaiting) {
    trace->push_back('s');
    if (throwOnSuspend) throw std::runtime_error("from await_suspend");
    if (!suspendResult) return false;
    executor->schedule(awaiting);  // done: resumed through the executor, in its turn
    return true;
  }
  int await_resume() const noexcept { return 7; }
};
static_assert(ResumesOnlyThroughExecutor<ExecutorProbe>);
static_assert(!ResumesOnlyThroughExecutor<OrderProbe>);

// With awaitProbeWhileAnotherFiberWaits (above): with or without a hand-off, a declining
// or throwing await_suspend lets `a` continue before `b` runs again.
TEST(SpawnFiberActingFirstTest, AwaitSuspendDeclining) {
  EXPECT_EQ(awaitProbeWhileAnotherFiberWaits(ExecutorProbe{.suspendResult = false}), "abasAbb");
}

TEST(SpawnFiberActingFirstTest, AwaitSuspendThrowing) {
  std::string caught;
  Trace trace = awaitProbeWhileAnotherFiberWaits(ExecutorProbe{.throwOnSuspend = true}, &caught);
  EXPECT_EQ(trace, "abasEbb");
  EXPECT_EQ(caught, "from await_suspend");
}

// Suspended and scheduled at once: `a`'s driver goes behind `b`, into which `a` switches.
TEST(SpawnFiberActingFirstTest, AwaitSuspendSchedulingBehindAnotherFiber) {
  EXPECT_EQ(awaitProbeWhileAnotherFiberWaits(ExecutorProbe{}), "abasbAb");
}

// Alone on the pool, a fiber whose await_suspend schedules it at once: it has taken
// nothing from the queue (it was empty), so it goes back to the pool's loop, which finds
// its driver and resumes it.
TEST(SpawnFiberActingFirstTest, AFiberScheduledByItsOwnAwaitSuspendGoesOn) {
  ThreadPool pool(1);
  Trace trace;
  auto a = spawnFiber(&pool, [&] {
    int sum = 0;
    for (int i = 0; i < 1000; ++i) sum += await(ExecutorProbe{.trace = &trace});
    return sum;
  });
  EXPECT_EQ(syncAwait(std::move(a)), 7000);
  EXPECT_EQ(trace, std::string(1000, 's'));
}

// The next fiber is taken from the queue before await_suspend runs; when that declines,
// the fiber is put back: the order stays round-robin.
TEST(SpawnFiberActingFirstTest, ADecliningAwaitSuspendKeepsTheQueueOrder) {
  ThreadPool pool(1);
  Trace trace;
  Gate gate(pool);
  std::vector<FiberFuture<void>> fibers;
  for (char name : std::string("abc")) {
    fibers.push_back(spawnFiber(&pool, [&trace, name] {
      for (int i = 0; i < 4; ++i) {
        trace.push_back(name);
        if (name == 'a') await(ExecutorProbe{.trace = &trace, .suspendResult = false});
        this_fiber::yield();
      }
    }));
  }
  gate.release();
  for (auto& f : fibers) syncAwait(std::move(f));
  EXPECT_EQ(trace, "asbcasbcasbcasbc");
}

// The same with a Lazy queued behind the fiber: the fiber cannot switch into it and leaves
// it in the queue; the fiber goes back to the loop, which runs it next.
TEST(SpawnFiberActingFirstTest, ALazyTakenFromTheQueueRunsNext) {
  ThreadPool pool(1);
  Trace trace;
  Gate gate(pool);
  auto a = spawnFiber(&pool, [&] {
    trace.push_back('a');
    int v = await(ExecutorProbe{.trace = &trace});
    trace.push_back(v == 7 ? 'A' : '?');
  });
  std::promise<void> lazyDone;
  [](Trace& t) -> Lazy<void> {
    t.push_back('L');
    co_return;
  }(trace)
                      .via(&pool)
                      .start([&lazyDone](Try<void> result) {
                        EXPECT_TRUE(result.hasValue());
                        lazyDone.set_value();
                      });
  gate.release();
  syncAwait(std::move(a));
  lazyDone.get_future().wait();
  EXPECT_EQ(trace, "asLA");
}

// Each fiber keeps its own exception state, id and FiberLocal values across hand-offs:
// `a` yields inside a catch block; `b`, switched into directly, must not see a's
// exception.
TEST(SpawnFiberHandOffTest, ThreadStateFollowsEachFiber) {
  ThreadPool pool(1);
  FiberLocal<int> local;
  Gate gate(pool);
  auto a = spawnFiber(&pool, [&local] {
    std::uint64_t id = this_fiber::id();
    *local = 1;
    bool ok = true;
    try {
      throw std::runtime_error("a's");
    } catch (const std::runtime_error&) {
      for (int i = 0; i < 3; ++i) {
        this_fiber::yield();
        ok = ok && std::current_exception() != nullptr && this_fiber::id() == id && *local == 1;
      }
    }
    return ok && std::current_exception() == nullptr;
  });
  auto b = spawnFiber(&pool, [&local] {
    std::uint64_t id = this_fiber::id();
    *local = 2;
    bool ok = true;
    for (int i = 0; i < 3; ++i) {
      this_fiber::yield();
      ok = ok && std::current_exception() == nullptr && std::uncaught_exceptions() == 0 &&
           this_fiber::id() == id && *local == 2;
    }
    return ok;
  });
  gate.release();
  EXPECT_TRUE(syncAwait(std::move(a)));
  EXPECT_TRUE(syncAwait(std::move(b)));
}

// A fiber that finishes right after another fiber handed the thread to it: the chain of
// hand-offs ends at the driver that started it, which must finish the right fiber.
TEST(SpawnFiberHandOffTest, AFiberSwitchedIntoCanFinish) {
  ThreadPool pool(1);
  Gate gate(pool);
  auto a = spawnFiber(&pool, [] {
    this_fiber::yield();
    this_fiber::yield();
    return 'a';
  });
  auto b = spawnFiber(&pool, [] {
    this_fiber::yield();
    return 'b';
  });
  gate.release();
  EXPECT_EQ(syncAwait(std::move(b)), 'b');
  EXPECT_EQ(syncAwait(std::move(a)), 'a');
}

// The fibers of ThreadPool(1) share plain data, ordered only by the switches between
// them: hand-offs (yields) mixed with parks that go back to the thread's stack (a Lazy,
// which starts by symmetric transfer), and fibers finishing after being handed the
// thread. Under TSan (which runs the hand-off) each of these switches is annotated: a
// fiber handed the thread must run as its own TSan fiber and switch back to the TSan
// fiber of the resumer it inherited, or TSan's per-fiber call stacks go wrong.
TEST(SpawnFiberHandOffTest, WhatAFiberWroteIsSeenByTheFiberItHandsTheThreadTo) {
  ThreadPool pool(1);
  long shared = 0;  // plain: only the worker's fibers touch it, one at a time
  std::vector<FiberFuture<long>> fibers;
  Gate gate(pool);
  for (int f = 0; f < 8; ++f) {
    fibers.push_back(spawnFiber(&pool, [&shared, f] {
      long seen = 0;
      for (int i = 0; i < 1000; ++i) {
        ++shared;
        if (i % 3 == f % 3) {
          seen += await([]() -> Lazy<long> { co_return 1; }());  // no hand-off
        } else {
          this_fiber::yield();  // a hand-off to the next fiber, most of the time
        }
      }
      return seen;
    }));
  }
  gate.release();
  long seen = 0;
  for (auto& fiber : fibers) seen += syncAwait(std::move(fiber));
  EXPECT_EQ(shared, 8000);
  EXPECT_GT(seen, 0);
}

// Fibers awaiting Lazys (which start by symmetric transfer, with no hand-off) and Tasks
// on another pool (resumed through this pool's queue, where a hand-off may take them)
// while yielding to each other on two threads: every value arrives.
TEST(SpawnFiberHandOffTest, MixedAwaitsOnTwoThreads) {
  ThreadPool pool(2);
  ThreadPool other(1);
  auto twice = [](int v) -> Lazy<int> { co_return 2 * v; };
  auto onOther = [](int v) -> Lazy<int> { co_return v + 1; };
  std::vector<FiberFuture<long>> fibers;
  for (int f = 0; f < 64; ++f) {
    fibers.push_back(spawnFiber(&pool, [&, f] {
      long sum = 0;
      for (int i = 0; i < 100; ++i) {
        sum += await(twice(i));
        if (i % 10 == f % 10) sum += await(onOther(i).via(&other));
        this_fiber::yield();
      }
      return sum;
    }));
  }
  for (int f = 0; f < 64; ++f) {
    long expected = 0;
    for (int i = 0; i < 100; ++i) expected += 2 * i + (i % 10 == f % 10 ? i + 1 : 0);
    EXPECT_EQ(syncAwait(std::move(fibers[f])), expected) << f;
  }
}

}  // namespace
}  // namespace weft
