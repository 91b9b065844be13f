#include "weft/stackful/await.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <vector>

#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/fiber.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/watchdog.h"

// weft::await() and this_fiber::yield() in a fiber of spawnFiber that is torn down while
// it is parked: its driver is destroyed, which destroys the fiber and unwinds its stack
// (ForcedUnwind) on the destroying thread. Destructors that this unwinding runs may yield
// (it returns at once) and await what is ready at once; an await there that would suspend
// aborts with a weft message (docs/stackful.md, "Destruction").

namespace weft {
namespace {

// kDeathTestStyleNote: death tests use the "fast" style (fork at the EXPECT_DEATH): the
// "threadsafe" style re-executes the test binary, which fails under qemu-user without
// binfmt_misc (the aarch64 CI step). The death test forks before it starts any thread.

using namespace std::chrono_literals;
using test::Counted;
using test::Watchdog;

// Parks the fiber for good: keeps the driver's handle (executor-aware, so that await()
// hands it the driver itself) and never resumes it. The test destroys that handle.
struct ParkForGood {
  std::atomic<void*>* driver;
  ParkForGood coAwait(Executor* /*executor*/) && noexcept { return *this; }
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) noexcept {
    driver->store(h.address(), std::memory_order_release);
    driver->notify_all();
  }
  void await_resume() const noexcept {}
};

// Complete at once (await_ready): awaiting one never suspends.
struct ReadyAtOnce {
  int value;
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<> /*h*/) const noexcept {}
  int await_resume() const noexcept { return value; }
};

// Would suspend (and, were it ever resumed, yield 1).
struct NeverReady {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> /*h*/) const noexcept {}
  int await_resume() const noexcept { return 1; }
};

// Spawns `body` (which ends parked in ParkForGood) on a fresh pool, waits until it is
// parked, then destroys its driver from this thread: the fiber unwinds here, and its
// future reports that it will never finish.
template <class Body>
void spawnParkAndTearDown(std::size_t threads, Body body) {
  ThreadPool pool(threads, "teardown");
  std::atomic<void*> driver{nullptr};
  FiberFuture<void> future = spawnFiber(&pool, [&] { body(driver); });
  driver.wait(nullptr, std::memory_order_acquire);
  std::coroutine_handle<>::from_address(driver.load(std::memory_order_acquire)).destroy();
  EXPECT_THROW(syncAwait(std::move(future)), FiberDestroyed);
}

TEST(AwaitTest, YieldInADestructorOfATornDownFiberReturnsAtOnce) {
  Watchdog watchdog(60s, "YieldInADestructorOfATornDownFiberReturnsAtOnce");
  for (std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
    Counted::reset();
    int yieldsReturned = 0, afterPark = 0;
    struct YieldsOnDestruction {
      int* returned;
      ~YieldsOnDestruction() {
        this_fiber::yield();
        ++*returned;
      }
    };
    spawnParkAndTearDown(threads, [&](std::atomic<void*>& driver) {
      Counted outer;
      YieldsOnDestruction guard{&yieldsReturned};
      Counted inner;
      await(ParkForGood{&driver});
      ++afterPark;
    });
    EXPECT_EQ(yieldsReturned, 1) << threads << " threads";
    EXPECT_EQ(afterPark, 0);
    EXPECT_EQ(Counted::alive(), 0);  // the unwind went on past the yielding destructor
  }
}

TEST(AwaitTest, ReadyAwaitInADestructorOfATornDownFiberCompletes) {
  Watchdog watchdog(60s, "ReadyAwaitInADestructorOfATornDownFiberCompletes");
  Counted::reset();
  int awaited = 0;
  struct AwaitsOnDestruction {
    int* awaited;
    ~AwaitsOnDestruction() { *awaited = await(ReadyAtOnce{7}); }
  };
  spawnParkAndTearDown(1, [&](std::atomic<void*>& driver) {
    AwaitsOnDestruction guard{&awaited};
    Counted inner;
    await(ParkForGood{&driver});
  });
  EXPECT_EQ(awaited, 7);
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(AwaitDeathTest, SuspendingAwaitInADestructorOfATornDownFiberAborts) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  struct AwaitsOnDestruction {
    ~AwaitsOnDestruction() { (void)await(NeverReady{}); }
  };
  for (std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
    EXPECT_DEATH(spawnParkAndTearDown(threads,
                                      [&](std::atomic<void*>& driver) {
                                        AwaitsOnDestruction guard;
                                        await(ParkForGood{&driver});
                                      }),
                 "weft: weft::await\\(\\) would suspend a fiber that is being destroyed, in a "
                 "destructor run by the unwinding of its stack")
        << threads << " threads";
  }
}

}  // namespace
}  // namespace weft
