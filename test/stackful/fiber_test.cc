#include "weft/stackful/fiber.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/stackful/detail/tool_hooks.h"
#include "weft/stackful/protected_stack.h"
#include "weft/stackful/stack_pool.h"
#include "test/support/counted.h"

namespace weft {
namespace {

// kDeathTestStyleNote: death tests use the "fast" style (fork at the EXPECT_DEATH): the
// "threadsafe" style re-executes the test binary, which fails under qemu-user without
// binfmt_misc (the aarch64 CI step). No test leaves threads running, and death test
// suites run first, so forking here is safe.

using test::Counted;

TEST(FiberTest, DoesNotRunUntilResumed) {
  bool ran = false;
  Fiber<> fiber([&] { ran = true; });
  EXPECT_FALSE(ran);
  EXPECT_FALSE(fiber.started());
  EXPECT_FALSE(fiber.done());
  fiber.resume();
  EXPECT_TRUE(ran);
  EXPECT_TRUE(fiber.done());
}

TEST(FiberTest, YieldReturnsToResumerAndResumeContinues) {
  std::vector<int> trace;
  Fiber<> fiber([&] {
    trace.push_back(1);
    this_fiber::yield();
    trace.push_back(3);
    this_fiber::yield();
    trace.push_back(5);
  });
  fiber.resume();
  trace.push_back(2);
  fiber.resume();
  trace.push_back(4);
  EXPECT_FALSE(fiber.done());
  fiber.resume();
  EXPECT_TRUE(fiber.done());
  EXPECT_EQ(trace, (std::vector<int>{1, 2, 3, 4, 5}));
}

TEST(FiberTest, ReturnsValueThroughResult) {
  Fiber fiber([] {
    this_fiber::yield();
    return std::string("forty-two");
  });
  static_assert(std::is_same_v<decltype(fiber), Fiber<std::string>>);
  fiber.resume();
  EXPECT_THROW(fiber.result(), EmptyTry);  // not done yet
  fiber.resume();
  EXPECT_EQ(fiber.result(), "forty-two");
}

TEST(FiberTest, ReturnsReference) {
  int target = 7;
  Fiber<int&> fiber([&]() -> int& { return target; });
  fiber.resume();
  EXPECT_EQ(&fiber.result(), &target);
}

// A body that simply returns is normal completion, at any depth of yields.
TEST(FiberTest, LocalsSurviveYields) {
  Fiber<long> fiber([] {
    long sum = 0;
    for (long i = 0; i < 1000; ++i) {
      long local[8] = {i, i, i, i, i, i, i, i};
      this_fiber::yield();
      for (long v : local) sum += v;
    }
    return sum;
  });
  while (!fiber.done()) fiber.resume();
  EXPECT_EQ(fiber.result(), 8L * 999 * 1000 / 2);
}

TEST(FiberTest, ExceptionThrownAndCaughtInside) {
  Fiber<int> fiber([] {
    int caught = 0;
    for (int i = 0; i < 3; ++i) {
      try {
        this_fiber::yield();
        throw std::runtime_error("inside " + std::to_string(i));
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) == "inside " + std::to_string(i)) ++caught;
      }
    }
    return caught;
  });
  while (!fiber.done()) fiber.resume();
  EXPECT_EQ(fiber.result(), 3);
}

TEST(FiberTest, ExceptionEscapingBodyIsRethrownByResume) {
  Fiber<int> fiber([]() -> int {
    this_fiber::yield();
    throw std::logic_error("out of the fiber");
  });
  fiber.resume();
  try {
    fiber.resume();
    FAIL() << "resume() did not rethrow";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "out of the fiber");
  }
  EXPECT_TRUE(fiber.done());
  EXPECT_THROW(fiber.result(), EmptyTry);
}

// Each fiber has its own exception state: a fiber parked inside a catch block keeps its
// current exception while other code throws and catches on the same thread.
TEST(FiberTest, YieldInsideCatchBlockKeepsCurrentException) {
  Fiber<std::string> fiber([] {
    try {
      throw std::runtime_error("mine");
    } catch (...) {
      this_fiber::yield();
      try {
        throw;  // rethrows the fiber's current exception
      } catch (const std::runtime_error& e) {
        return std::string(e.what());
      }
    }
    return std::string("unreachable");
  });
  fiber.resume();
  EXPECT_EQ(std::current_exception(), nullptr);  // the caller's state is untouched
  try {
    throw std::runtime_error("caller's");
  } catch (const std::runtime_error& e) {
    fiber.resume();
    EXPECT_STREQ(e.what(), "caller's");
    EXPECT_NE(std::current_exception(), nullptr);
  }
  EXPECT_EQ(fiber.result(), "mine");
}

TEST(FiberTest, UncaughtExceptionsIsPerFiber) {
  struct Probe {
    int* seen;
    ~Probe() {
      // Running during the caller's unwinding; the fiber's view must stay its own.
      *seen = std::uncaught_exceptions();
    }
  };
  int inFiber = -1;
  Fiber<> fiber([&] {
    this_fiber::yield();
    inFiber = std::uncaught_exceptions();
  });
  fiber.resume();
  int inDestructor = -1;
  try {
    struct ResumeOnUnwind {
      Fiber<>* fiber;
      ~ResumeOnUnwind() { fiber->resume(); }
    } resumer{&fiber};
    Probe probe{&inDestructor};
    throw 1;
  } catch (int) {
  }
  EXPECT_EQ(inDestructor, 1);
  EXPECT_EQ(inFiber, 0);
}

int recurse(int depth) {
  volatile char frame[64];
  frame[0] = static_cast<char>(depth);
  if (depth == 0) {
    this_fiber::yield();
    return frame[0];
  }
  return recurse(depth - 1) + 1 + frame[0] * 0;
}

TEST(FiberTest, DeepRecursionOnABigStack) {
  // ~100 bytes a frame: about 10 MB of stack. (TSan keeps its own shadow call stack per
  // fiber, 64 Ki entries: deeper recursion overflows TSan itself.)
  constexpr int kDepth = WEFT_TSAN ? 30000 : 100000;
  Fiber<int> fiber([] { return recurse(kDepth); }, ProtectedStack(32u << 20));
  fiber.resume();  // parked kDepth frames deep
  EXPECT_FALSE(fiber.done());
  fiber.resume();
  EXPECT_EQ(fiber.result(), kDepth);
}

TEST(FiberTest, NestedFibers) {
  std::vector<std::string> trace;
  Fiber<> outer([&] {
    Fiber<> inner([&] {
      trace.push_back("inner 1");
      this_fiber::yield();
      trace.push_back("inner 2");
    });
    inner.resume();
    trace.push_back("outer 1");
    this_fiber::yield();
    inner.resume();
    trace.push_back("outer 2");
  });
  outer.resume();
  trace.push_back("main");
  outer.resume();
  EXPECT_TRUE(outer.done());
  EXPECT_EQ(trace, (std::vector<std::string>{"inner 1", "outer 1", "main", "inner 2", "outer 2"}));
}

TEST(FiberTest, PingPong100000Fibers) {
  // 100,000 live fibers (on one shared stack: 100,000 protected stacks would exceed the
  // default vm.max_map_count), each resumed round-robin 3 times.
  // Under TSan every live fiber carries a TSan thread state (hundreds of KiB): fewer.
  SharedStack shared(64 * 1024);
  constexpr int kFibers = WEFT_TSAN ? 2000 : 100000, kRounds = 3;
  std::vector<int> counters(kFibers, 0);
  std::vector<Fiber<>> fibers;
  fibers.reserve(kFibers);
  for (int i = 0; i < kFibers; ++i) {
    fibers.emplace_back(
        [&counters, i] {
          for (int round = 0; round < kRounds; ++round) {
            int expected = round;
            EXPECT_EQ(counters[i], expected);
            ++counters[i];
            this_fiber::yield();
          }
        },
        shared);
  }
  for (int round = 0; round <= kRounds; ++round) {
    for (auto& fiber : fibers) fiber.resume();
  }
  for (int i = 0; i < kFibers; ++i) {
    ASSERT_EQ(counters[i], kRounds);
    ASSERT_TRUE(fibers[i].done());
  }
}

TEST(FiberTest, PingPongManyFibersOnPooledStacks) {
  StackPool pool(16 * 1024, 16);
  constexpr int kFibers = 5000, kRounds = 10;
  long total = 0;
  std::vector<Fiber<>> fibers;
  for (int i = 0; i < kFibers; ++i) {
    fibers.emplace_back(
        [&total] {
          for (int round = 0; round < kRounds; ++round) {
            ++total;
            this_fiber::yield();
          }
        },
        pool);
  }
  for (int round = 0; round <= kRounds; ++round) {
    for (auto& fiber : fibers) fiber.resume();
  }
  EXPECT_EQ(total, long{kFibers} * kRounds);
  fibers.clear();
  EXPECT_EQ(pool.cached(), 16u);
}

TEST(FiberTest, DestroyingSuspendedFiberUnwindsItsStack) {
  Counted::reset();
  int afterYield = 0;
  {
    Fiber<> fiber([&] {
      Counted a;
      {
        Counted b;
        this_fiber::yield();
        ++afterYield;
      }
    });
    fiber.resume();
    EXPECT_EQ(Counted::alive(), 2);
  }
  EXPECT_EQ(Counted::alive(), 0);
  EXPECT_EQ(Counted::constructions.load(), 2);
  EXPECT_EQ(afterYield, 0);
}

TEST(FiberTest, DestroyingUnwindsDeepFrames) {
  Counted::reset();
  struct Deep {
    static void down(int n) {
      Counted local;
      if (n == 0) {
        this_fiber::yield();
        return;
      }
      down(n - 1);
    }
  };
  {
    Fiber<> fiber([] { Deep::down(100); });
    fiber.resume();
    EXPECT_EQ(Counted::alive(), 101);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(FiberTest, NeverStartedFiberJustFreesItsBody) {
  Counted::reset();
  {
    Fiber<> fiber([c = Counted()] { (void)c; });
    EXPECT_GE(Counted::alive(), 1);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(FiberTest, FinishedFiberFreesEverything) {
  Counted::reset();
  {
    Fiber<> fiber([c = Counted()] {
      Counted inside;
      (void)c;
    });
    fiber.resume();
    EXPECT_TRUE(fiber.done());
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(FiberTest, CatchAllThatSwallowsForcedUnwindStillUnwinds) {
  Counted::reset();
  int swallowed = 0, afterYield = 0;
  {
    Fiber<> fiber([&] {
      Counted outer;
      for (int i = 0; i < 3; ++i) {
        try {
          Counted inner;
          this_fiber::yield();
          ++afterYield;
        } catch (...) {
          ++swallowed;  // swallows ForcedUnwind; the next yield throws it again
        }
      }
    });
    fiber.resume();
  }
  // Every later attempt to park threw ForcedUnwind again, so each catch saw it once and
  // the code after the yield never ran.
  EXPECT_EQ(swallowed, 3);
  EXPECT_EQ(afterYield, 0);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(FiberTest, YieldInADestructorRunByTheForcedUnwindReturnsAtOnce) {
  // docs/stackful.md allows yield in destructors. When the destructor runs because the
  // suspended fiber is destroyed, nobody will resume the fiber again: the yield returns
  // at once instead of throwing out of the destructor (std::terminate).
  Counted::reset();
  int yieldsReturned = 0, afterYield = 0;
  struct YieldsTwiceOnDestruction {
    int* returned;
    ~YieldsTwiceOnDestruction() {
      this_fiber::yield();
      ++*returned;
      this_fiber::yield();
      ++*returned;
    }
  };
  {
    Fiber<> fiber([&] {
      Counted outer;
      YieldsTwiceOnDestruction guard{&yieldsReturned};
      Counted inner;
      this_fiber::yield();
      ++afterYield;
    });
    fiber.resume();
    EXPECT_EQ(Counted::alive(), 2);
  }  // destroyed while suspended: unwinds
  EXPECT_EQ(yieldsReturned, 2);
  EXPECT_EQ(afterYield, 0);
  EXPECT_EQ(Counted::alive(), 0);  // the unwind went on past the yielding destructor
}

TEST(FiberTest, YieldInADestructorDuringNormalUnwindingStillSuspends) {
  // Outside a forced unwind a yield in a destructor is an ordinary yield, even while an
  // exception of the fiber's own propagates.
  int step = 0;
  struct YieldsOnDestruction {
    int* step;
    ~YieldsOnDestruction() {
      *step = 1;
      this_fiber::yield();
      *step = 2;
    }
  };
  Fiber<> fiber([&] {
    try {
      YieldsOnDestruction guard{&step};
      throw std::runtime_error("own");
    } catch (const std::runtime_error&) {
      step = 3;
    }
  });
  fiber.resume();
  EXPECT_EQ(step, 1);
  EXPECT_FALSE(fiber.done());
  fiber.resume();
  EXPECT_EQ(step, 3);
  EXPECT_TRUE(fiber.done());
}

TEST(FiberTest, YieldInADestructorOfADestroyedFiberThatSwallowedForcedUnwindStillUnwinds) {
  // A catch-all that swallows ForcedUnwind, then an object whose destructor yields: the
  // next yield outside a destructor throws ForcedUnwind again, and the destructor it
  // runs on the way yields and returns at once.
  Counted::reset();
  int swallowed = 0, yieldsReturned = 0;
  struct YieldsOnDestruction {
    int* returned;
    ~YieldsOnDestruction() {
      this_fiber::yield();
      ++*returned;
    }
  };
  {
    Fiber<> fiber([&] {
      YieldsOnDestruction guard{&yieldsReturned};
      try {
        Counted inner;
        this_fiber::yield();
      } catch (...) {
        ++swallowed;
      }
      Counted after;
      this_fiber::yield();  // throws ForcedUnwind again
    });
    fiber.resume();
  }
  EXPECT_EQ(swallowed, 1);
  EXPECT_EQ(yieldsReturned, 1);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(FiberTest, CatchStdExceptionDoesNotSeeForcedUnwind) {
  bool caught = false;
  {
    Fiber<> fiber([&] {
      try {
        this_fiber::yield();
      } catch (const std::exception&) {
        caught = true;
      }
    });
    fiber.resume();
  }
  EXPECT_FALSE(caught);
}

TEST(FiberTest, MoveTransfersTheFiber) {
  int steps = 0;
  Fiber<> a([&] {
    ++steps;
    this_fiber::yield();
    ++steps;
  });
  a.resume();
  Fiber<> b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  b.resume();
  EXPECT_EQ(steps, 2);
  Fiber<> c;
  c = std::move(b);
  EXPECT_TRUE(c.done());
}

TEST(FiberTest, IdsAreUniqueAndVisibleInside) {
  std::uint64_t seen = 0;
  Fiber<> a([&] { seen = this_fiber::id(); });
  Fiber<> b([] {});
  EXPECT_NE(a.id(), b.id());
  a.resume();
  EXPECT_EQ(seen, a.id());
}

TEST(FiberTest, InFiberTellsWhereWeAre) {
  EXPECT_FALSE(this_fiber::inFiber());
  bool inside = false;
  Fiber<> fiber([&] { inside = this_fiber::inFiber(); });
  fiber.resume();
  EXPECT_TRUE(inside);
  EXPECT_FALSE(this_fiber::inFiber());
}

TEST(FiberTest, YieldOutsideAFiberThrows) {
  EXPECT_THROW(this_fiber::yield(), NotInFiber);
  EXPECT_THROW(this_fiber::id(), NotInFiber);
}

// pthread_self() (under std::this_thread::get_id()) is declared __attribute__((const)):
// within one function the compiler may reuse a result computed before a yield after it,
// though the fiber now runs on another thread (see docs/stackful.md, "Threads"). An
// opaque, non-inlined call is asked each time.
[[gnu::noinline]] std::thread::id threadIdNow() {
  asm volatile("");
  return std::this_thread::get_id();
}

TEST(FiberTest, ResumedOnAnotherThread) {
  std::thread::id first, second;
  int local = 0;
  Fiber<> fiber([&] {
    int onStack = 41;
    first = threadIdNow();
    this_fiber::yield();
    second = threadIdNow();
    local = onStack + 1;
  });
  // Thread a stays alive until b is done, so the two thread ids are distinct.
  std::atomic<bool> bDone{false};
  std::atomic<bool> aResumed{false};
  std::thread a([&] {
    fiber.resume();
    aResumed = true;
    while (!bDone.load()) std::this_thread::yield();
  });
  while (!aResumed.load()) std::this_thread::yield();
  std::thread b([&] {
    fiber.resume();
    bDone = true;
  });
  b.join();
  a.join();
  EXPECT_TRUE(fiber.done());
  EXPECT_NE(first, second);
  EXPECT_EQ(local, 42);
}

TEST(FiberTest, StackComesFromAndReturnsToTheGivenPool) {
  StackPool pool(32 * 1024, 4);
  {
    Fiber<> fiber([] { this_fiber::yield(); }, pool);
    fiber.resume();
    EXPECT_EQ(pool.cached(), 0u);
  }
  EXPECT_EQ(pool.cached(), 1u);
}

TEST(FiberTest, TooSmallStackIsRejected) {
  struct Huge {
    char bytes[64 * 1024];
  };
  Huge huge{};
  EXPECT_THROW(Fiber<>([huge] { (void)huge; }, ProtectedStack(16 * 1024)), std::invalid_argument);
}

TEST(FiberDeathTest, ResumingAFinishedFiberAborts) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  Fiber<> fiber([] {});
  fiber.resume();
  EXPECT_DEATH(fiber.resume(),
               "weft: resume\\(\\) of a fiber that has finished \\(fiber [0-9]+\\)");
}

TEST(FiberDeathTest, ResumingItselfAborts) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        Fiber<>* self = nullptr;
        Fiber<> fiber([&] { self->resume(); }, FiberOptions{"selfish"});
        self = &fiber;
        fiber.resume();
      },
      "weft: resume\\(\\) of a running fiber .*\\(fiber selfish\\)");
}

volatile bool gRecurseForever = true;  // hides the unbounded recursion from the compiler

void overflow(int depth) {
  volatile char frame[256];
  frame[0] = static_cast<char>(depth);
  if (gRecurseForever) overflow(depth + 1);
  frame[1] = frame[0];  // not a tail call
}

TEST(FiberDeathTest, StackOverflowIsDiagnosedWithTheFibersId) {
  // The child is forked right here, so the fiber (and its id) is the parent's.
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  Fiber<> fiber([] { overflow(0); }, ProtectedStack(64 * 1024));
  EXPECT_DEATH(fiber.resume(), "weft: stack overflow in fiber " + std::to_string(fiber.id()) +
                                   " \\(stack 65536 bytes\\)");
}

TEST(FiberDeathTest, StackOverflowIsDiagnosedWithTheFibersName) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        Fiber<> fiber([] { overflow(0); }, ProtectedStack(32 * 1024), FiberOptions{"parser"});
        fiber.resume();
      },
      "weft: stack overflow in fiber parser \\(stack 32768 bytes\\)");
}

TEST(FiberDeathTest, StackOverflowOnAnotherThreadIsDiagnosed) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        std::thread([] {
          Fiber<> fiber([] { overflow(0); }, StackPool::defaultPool(), FiberOptions{"worker"});
          fiber.resume();
        }).join();
      },
      "weft: stack overflow in fiber worker \\(stack 262144 bytes\\)");
}

// The fiber starts on one thread and overflows on another that never started a fiber:
// that thread needs its alternate signal stack too.
TEST(FiberDeathTest, StackOverflowAfterMovingToAnotherThreadIsDiagnosed) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        Fiber<> fiber(
            [] {
              this_fiber::yield();
              overflow(0);
            },
            ProtectedStack(64 * 1024), FiberOptions{"mover"});
        fiber.resume();
        std::thread([&] { fiber.resume(); }).join();
      },
      "weft: stack overflow in fiber mover \\(stack 65536 bytes\\)");
}

TEST(FiberDeathTest, StackOverflowOnASharedStackIsDiagnosed) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  EXPECT_DEATH(
      {
        SharedStack shared(48 * 1024);
        Fiber<> fiber([] { overflow(0); }, shared, FiberOptions{"copier"});
        fiber.resume();
      },
      "weft: stack overflow in fiber copier \\(stack 49152 bytes\\)");
}

}  // namespace
}  // namespace weft
