// Destroying a coroutine while it is suspended in a weft awaitable (DESIGN.md, invariant
// 4: "destroying an unstarted or suspended coroutine frees everything it owns"): its
// awaiter withdraws the wait, the primitive is left as if the coroutine had never waited,
// and the primitive goes on working for everyone else. Each test suspends a Lazy in one
// awaitable, destroys it, then keeps using the primitive; ASan (leaks included), UBSan and
// TSan builds of this file (test/run.sh asan, tsan) check that nothing touches the freed
// frame.
//
// Which awaitable is covered where (this suite unless named):
//
//   awaitable                          test
//   ---------------------------------  ---------------------------------------------------
//   Mutex::lock / scopedLock           MutexWaiter
//   SharedMutex::lock / lockShared     SharedMutexWaiters
//   Semaphore::acquire                 SemaphoreWaiter
//   Event::wait                        EventWaiter
//   Latch::arriveAndWait               LatchWaiter
//   ConditionVariable::wait(m)         ConditionVariableWaiter* (the mutex is left owned
//     and wait(m, predicate)             as the code around the wait believes it is)
//   Channel::receive / send            ChannelReceiver, ChannelSender, BufferedChannel*
//   select (with and without timeout)  SelectWaiter, SelectWithTimeoutWaiter
//   collectAll / collectAllWindowed    CollectAllOfWaiters, CollectAllWindowedOfWaiters,
//     / collectAllFailFast               CollectAllFailFastOfWaiters
//   collectAny (channel branches)      CollectAnyOfWaiters
//   AsyncGenerator::next               AsyncGeneratorConsumer
//   co_await of a FiberFuture          FiberFutureAwaiter (the fiber runs on, detached)
//   sleep / sleepUntil                 SleepDestroyTest.*, SleepDestroyDeathTest.* in
//                                        test/coro/sleep_test.cc
//   withTimeout (work and timer)       WithTimeoutDestroyTest.* (with_timeout_test.cc)
//   collectAny with sleeping branches  CollectAnyDestroyTest.* (collect_any_test.cc)
//   yield (always queued: reported)    YieldDeathTest.* (yield_test.cc)
//   races with other threads           Racing* (TSan): destroyed waiters leave a queue
//                                        while another thread (or a fiber on a pool)
//                                        serves the others
//   a fiber parked in await() (its     ParkedFiberIn* (mutex, semaphore, condition
//     driver destroyed: the stack        variable, channel, select with timeout, sleep);
//     unwinds, its future throws         a fiber unwound while a destructor awaits is in
//     FiberDestroyed)                    test/stackful/await_test.cc
//
// A wait whose wake-up was already claimed (granted, delivered, cancelled: the resumption
// is on its way) cannot be withdrawn: destroying it then is reported and aborts
// (ResumptionUnderWayIsReported).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <optional>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "weft/coro/async_generator.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/collect_any.h"
#include "weft/coro/condition_variable.h"
#include "weft/coro/event.h"
#include "weft/coro/lazy.h"
#include "weft/coro/latch.h"
#include "weft/coro/mutex.h"
#include "weft/coro/select.h"
#include "weft/coro/semaphore.h"
#include "weft/coro/shared_mutex.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/manual_executor.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;

// Runs `lazy` on the calling thread until it first suspends, and returns it still owning
// the suspended frame (no executor: a wake-up would resume it inline).
template <class T>
Lazy<T> suspended(Lazy<T> lazy) {
  // Finishing later returns to nobody (the test checks done() instead).
  detail::LazyAccess::handle(lazy).promise().setContinuation(std::noop_coroutine());
  detail::LazyAccess::handle(lazy).resume();
  EXPECT_FALSE(detail::LazyAccess::handle(lazy).done()) << "the Lazy did not suspend";
  return lazy;
}

// The same, bound to `executor`: a wake-up would be scheduled there.
template <class T>
Lazy<T> suspendedOn(Executor* executor, Lazy<T> lazy) {
  detail::LazyAccess::handle(lazy).promise().setExecutor(executor);
  return suspended(std::move(lazy));
}

// A Lazy that owns `f` (a lambda whose captures the Lazy it returns refers to) and awaits
// what it returns: a lambda coroutine called as a temporary would leave its Lazy pointing
// at a destroyed closure once the Lazy outlives the full expression.
template <class F>
Lazy<> owning(F f) {
  co_await f();
}

// A frame that holds a Counted while it waits in `awaitable`, and records whether it ever
// got past it.
template <class MakeAwaitable>
Lazy<> waitIn(MakeAwaitable make, bool& passed) {
  Counted local;
  co_await make();
  passed = true;
}

class SuspendedDestructionTest : public ::testing::Test {
 protected:
  void SetUp() override { Counted::reset(); }
  void TearDown() override { EXPECT_EQ(Counted::alive(), 0) << "a frame was not freed"; }
};

TEST_F(SuspendedDestructionTest, MutexWaiter) {
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  bool passed = false;
  bool nextGotIt = false;
  {
    Lazy<> doomed = suspended(waitIn([&] { return mutex.lock(); }, passed));
    Lazy<> next = suspended(owning([&]() -> Lazy<> {
      ScopedLock lock = co_await mutex.scopedLock();
      nextGotIt = true;
    }));
    doomed = Lazy<>();  // destroyed while queued ahead of `next`
    mutex.unlock();     // hands the lock to `next`, which runs inline and unlocks
    EXPECT_TRUE(detail::LazyAccess::handle(next).done());
  }
  EXPECT_FALSE(passed);
  EXPECT_TRUE(nextGotIt);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST_F(SuspendedDestructionTest, SharedMutexWaiters) {
  SharedMutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  bool passedExclusive = false;
  bool passedShared = false;
  {
    Lazy<> writer = suspended(waitIn([&] { return mutex.lock(); }, passedExclusive));
    Lazy<> reader = suspended(waitIn([&] { return mutex.lockShared(); }, passedShared));
  }
  mutex.unlock();
  EXPECT_FALSE(passedExclusive);
  EXPECT_FALSE(passedShared);
  EXPECT_TRUE(mutex.tryLockShared());
  mutex.unlockShared();
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST_F(SuspendedDestructionTest, SemaphoreWaiter) {
  Semaphore semaphore(0);
  bool passed = false;
  { Lazy<> doomed = suspended(waitIn([&] { return semaphore.acquire(); }, passed)); }
  semaphore.release();
  EXPECT_FALSE(passed);
  EXPECT_EQ(semaphore.available(), 1);  // the permit was not taken by the destroyed waiter
  EXPECT_TRUE(semaphore.tryAcquire());
}

TEST_F(SuspendedDestructionTest, EventWaiter) {
  Event event;
  bool passed = false;
  { Lazy<> doomed = suspended(waitIn([&] { return event.wait(); }, passed)); }
  event.set();  // finds no waiter to resume (and ~Event finds none either)
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, LatchWaiter) {
  Latch latch(2);
  bool passed = false;
  { Lazy<> doomed = suspended(waitIn([&] { return latch.arriveAndWait(); }, passed)); }
  bool released = false;
  syncAwait([&]() -> Lazy<> {
    co_await latch.arriveAndWait();  // the destroyed waiter had arrived: this completes it
    released = true;
  }());
  EXPECT_FALSE(passed);
  EXPECT_TRUE(released);
}

// The documented pattern: a ScopedLock around the wait. Destroying the waiter must leave
// the mutex owned as the frame believes: its ScopedLock's unlock must release a mutex the
// destroyed wait counted as reacquired, not one somebody else holds.
Lazy<> waitForFlag(Mutex& mutex, ConditionVariable& cv, bool& flag, bool& passed) {
  Counted local;
  ScopedLock lock = co_await mutex.scopedLock();
  while (!flag) co_await cv.wait(mutex);
  passed = true;
}

TEST_F(SuspendedDestructionTest, ConditionVariableWaiterWithTheMutexFree) {
  Mutex mutex;
  ConditionVariable cv;
  bool flag = false;
  bool passed = false;
  { Lazy<> doomed = suspended(waitForFlag(mutex, cv, flag, passed)); }
  EXPECT_FALSE(passed);
  EXPECT_TRUE(mutex.tryLock());  // free: the frame's ScopedLock released what it held
  mutex.unlock();
  cv.notifyAll();  // nobody waits: a no-op
}

TEST_F(SuspendedDestructionTest, ConditionVariableWaiterWhileAnotherHoldsTheMutex) {
  Mutex mutex;
  ConditionVariable cv;
  bool flag = false;
  bool passed = false;
  Lazy<> doomed = suspended(waitForFlag(mutex, cv, flag, passed));
  ASSERT_TRUE(mutex.tryLock());  // another owner, while the waiter waits unlocked
  bool queuedGotIt = false;
  Lazy<> queued = suspended(owning([&]() -> Lazy<> {
    ScopedLock lock = co_await mutex.scopedLock();
    queuedGotIt = true;
  }));
  doomed = Lazy<>();
  // The owner still owns it, and the waiter queued behind it still waits.
  EXPECT_FALSE(mutex.tryLock());
  EXPECT_FALSE(queuedGotIt);
  mutex.unlock();  // the owner's unlock hands it on as usual
  EXPECT_TRUE(queuedGotIt);
  EXPECT_TRUE(detail::LazyAccess::handle(queued).done());
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, ConditionVariableWaiterNotifiedButQueuedForTheMutex) {
  Mutex mutex;
  ConditionVariable cv;
  bool flag = false;
  bool passed = false;
  Lazy<> doomed = suspended(waitForFlag(mutex, cv, flag, passed));
  ASSERT_TRUE(mutex.tryLock());
  flag = true;
  cv.notifyOne();  // moves the waiter into the mutex's queue
  doomed = Lazy<>();
  EXPECT_FALSE(passed);
  EXPECT_FALSE(mutex.tryLock());  // still ours
  mutex.unlock();
  EXPECT_TRUE(mutex.tryLock());  // and now free: the destroyed waiter holds nothing
  mutex.unlock();
}

TEST_F(SuspendedDestructionTest, ConditionVariablePredicateWaiter) {
  Mutex mutex;
  ConditionVariable cv;
  bool flag = false;
  bool passed = false;
  {
    Lazy<> doomed = suspended(owning([&]() -> Lazy<> {
      Counted local;
      ScopedLock lock = co_await mutex.scopedLock();
      co_await cv.wait(mutex, [&] { return flag; });
      passed = true;
    }));
  }
  EXPECT_FALSE(passed);
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
}

TEST_F(SuspendedDestructionTest, ChannelReceiver) {
  Channel<int> channel;
  bool passed = false;
  { Lazy<> doomed = suspended(waitIn([&] { return channel.receive(); }, passed)); }
  // The destroyed receiver is gone: a send finds nobody and would block.
  EXPECT_FALSE(channel.trySend(1));
  std::optional<int> got;
  Lazy<> receiver = suspended(owning([&]() -> Lazy<> { got = co_await channel.receive(); }));
  EXPECT_TRUE(channel.trySend(2));
  EXPECT_EQ(got, 2);
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, ChannelSender) {
  Channel<Counted> channel;
  bool passed = false;
  {
    Lazy<> doomed = suspended(owning([&]() -> Lazy<> {
      Counted local;
      co_await channel.send(Counted());
      passed = true;
    }));
  }
  EXPECT_FALSE(channel.tryReceive().has_value());  // its value never entered the channel
  EXPECT_FALSE(passed);
  channel.close();  // no waiter left to wake
}

TEST_F(SuspendedDestructionTest, BufferedChannelSenderAndReceiver) {
  Channel<int> channel(1);
  ASSERT_TRUE(channel.trySend(1));
  bool senderPassed = false;
  { Lazy<> doomed = suspended(waitIn([&] { return channel.send(2); }, senderPassed)); }
  EXPECT_EQ(channel.tryReceive(), 1);
  EXPECT_FALSE(channel.tryReceive().has_value());  // 2 was never delivered
  bool receiverPassed = false;
  { Lazy<> doomed = suspended(waitIn([&] { return channel.receive(); }, receiverPassed)); }
  EXPECT_TRUE(channel.trySend(3));
  EXPECT_EQ(channel.size(), 1u);  // buffered, not handed to the destroyed receiver
  EXPECT_EQ(channel.tryReceive(), 3);
  EXPECT_FALSE(senderPassed);
  EXPECT_FALSE(receiverPassed);
}

TEST_F(SuspendedDestructionTest, SelectWaiter) {
  Channel<int> a;
  Channel<int> b;
  Channel<int> out;
  bool passed = false;
  {
    Lazy<> doomed = suspended(owning([&]() -> Lazy<> {
      Counted local;
      co_await select(a.receiveCase(), b.receiveCase(), a.receiveCase(), out.sendCase(7));
      passed = true;
    }));
  }
  EXPECT_FALSE(a.trySend(1));
  EXPECT_FALSE(b.trySend(1));
  EXPECT_FALSE(out.tryReceive().has_value());
  std::optional<int> got;
  Lazy<> receiver = suspended(owning([&]() -> Lazy<> { got = co_await a.receive(); }));
  EXPECT_TRUE(a.trySend(4));
  EXPECT_EQ(got, 4);
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, SelectWithTimeoutWaiter) {
  ThreadPool pool(1);
  Channel<int> a;
  bool passed = false;
  {
    Lazy<> doomed = suspendedOn(&pool, owning([&]() -> Lazy<> {
      Counted local;
      co_await select(a.receiveCase(), timeoutCase(1h));
      passed = true;
    }));
  }
  EXPECT_FALSE(a.trySend(1));
  // Timers keep working on the pool after the withdrawn one.
  bool slept = syncAwait(
      [&]() -> Lazy<bool> {
        auto r = co_await select(a.receiveCase(), timeoutCase(1ms));
        co_return r.index() == 1;
      }(),
      &pool);
  EXPECT_TRUE(slept);
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, CollectAllOfWaiters) {
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  Channel<int> channel;
  Event event;
  bool passed = false;
  {
    Lazy<> doomed = suspended(owning([&]() -> Lazy<> {
      Counted local;
      co_await collectAll(
          [&]() -> Lazy<> {
            Counted inBranch;
            co_await mutex.lock();
          }(),
          [&]() -> Lazy<std::optional<int>> { co_return co_await channel.receive(); }(),
          [&]() -> Lazy<> { co_await event.wait(); }());
      passed = true;
    }));
  }
  mutex.unlock();
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
  EXPECT_FALSE(channel.trySend(1));
  event.set();  // the destroyed branch left its queue: nothing is resumed
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, CollectAllWindowedOfWaiters) {
  Semaphore semaphore(0);
  bool passed = false;
  {
    Lazy<> doomed = suspended(owning([&]() -> Lazy<> {
      Counted local;
      std::vector<Lazy<>> branches;
      for (int i = 0; i < 4; ++i) {
        branches.push_back([](Semaphore& s) -> Lazy<> { co_await s.acquire(); }(semaphore));
      }
      co_await collectAllWindowed(2, std::move(branches));
      passed = true;
    }));
  }
  semaphore.release(3);
  EXPECT_EQ(semaphore.available(), 3);
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, CollectAllFailFastOfWaiters) {
  ThreadPool pool(1);
  Channel<int> channel;
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  bool passed = false;
  {
    Lazy<> doomed = suspendedOn(&pool, owning([&]() -> Lazy<> {
      Counted local;
      co_await collectAllFailFast(
          [&]() -> Lazy<std::optional<int>> { co_return co_await channel.receive(); }(),
          []() -> Lazy<> { co_await sleep(1h); }(),
          [&]() -> Lazy<> { co_await mutex.lock(); }());
      passed = true;
    }));
  }
  EXPECT_FALSE(channel.trySend(1));
  mutex.unlock();
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, CollectAnyOfWaiters) {
  Channel<int> a;
  Channel<int> b;
  bool passed = false;
  {
    Lazy<> doomed = suspended(owning([&]() -> Lazy<> {
      Counted local;
      co_await collectAny([&]() -> Lazy<std::optional<int>> { co_return co_await a.receive(); }(),
                          [&]() -> Lazy<std::optional<int>> { co_return co_await b.receive(); }());
      passed = true;
    }));
  }
  EXPECT_FALSE(a.trySend(1));
  EXPECT_FALSE(b.trySend(1));
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, AsyncGeneratorConsumer) {
  Channel<int> source;
  bool passed = false;
  {
    Lazy<> doomed = suspended(owning([&]() -> Lazy<> {
      Counted local;
      auto relay = [](Channel<int>& in) -> AsyncGenerator<int> {
        Counted inGenerator;
        while (std::optional<int> v = co_await in.receive()) co_yield *v;
      }(source);
      co_await relay.next();  // the generator's body waits in receive()
      passed = true;
    }));
  }
  EXPECT_FALSE(source.trySend(1));
  EXPECT_FALSE(passed);
}

// Destroyed waiters leave their queue while another thread serves the waiters ahead of
// them (TSan checks the queue's locking). The waker only ever serves waiters that are not
// destroyed, since destroying one whose wake-up was claimed is the caller's race.
TEST_F(SuspendedDestructionTest, RacingChannelReceiversAndASender) {
  constexpr int kServed = 200;
  constexpr int kDestroyed = 200;
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    Channel<int> channel;
    std::vector<Lazy<>> served;
    std::vector<Lazy<>> doomed;
    std::atomic<int> sum{0};
    auto receiver = [&]() -> Lazy<> {
      std::optional<int> v = co_await channel.receive();
      sum.fetch_add(*v);
    };
    for (int i = 0; i < kServed; ++i) served.push_back(suspended(receiver()));
    for (int i = 0; i < kDestroyed; ++i) doomed.push_back(suspended(receiver()));
    std::thread sender([&] {
      for (int i = 1; i <= kServed; ++i) ASSERT_TRUE(channel.trySend(int(i)));
    });
    while (!doomed.empty()) doomed.pop_back();  // from the back, as the sender pops the front
    sender.join();
    EXPECT_EQ(sum.load(), kServed * (kServed + 1) / 2);
    EXPECT_FALSE(channel.trySend(0));  // nobody is left waiting
  }
}

TEST_F(SuspendedDestructionTest, RacingMutexWaitersAndUnlocks) {
  constexpr int kServed = 200;
  constexpr int kDestroyed = 200;
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    Mutex mutex;
    ASSERT_TRUE(mutex.tryLock());
    int held = 0;  // written under the mutex only
    std::vector<Lazy<>> served;
    std::vector<Lazy<>> doomed;
    // Each served waiter passes the lock on, except the last, which keeps it: the
    // hand-offs (inline, on the unlocking thread) never reach the destroyed ones.
    auto waiter = [&](bool keep) -> Lazy<> {
      co_await mutex.lock();
      ++held;
      if (!keep) mutex.unlock();
    };
    for (int i = 0; i < kServed; ++i) served.push_back(suspended(waiter(i == kServed - 1)));
    for (int i = 0; i < kDestroyed; ++i) doomed.push_back(suspended(waiter(false)));
    std::thread unlocker([&] { mutex.unlock(); });
    while (!doomed.empty()) doomed.pop_back();
    unlocker.join();
    EXPECT_EQ(held, kServed);
    EXPECT_FALSE(mutex.tryLock());  // the last served waiter holds it
    mutex.unlock();
    EXPECT_TRUE(mutex.tryLock());   // and nobody is left waiting
    mutex.unlock();
  }
}

// The same with the waker a fiber on a pool: the fiber's channel hand-offs race with the
// destruction of the other receivers on this thread.
TEST_F(SuspendedDestructionTest, RacingChannelReceiversAndAFiberSender) {
  constexpr int kServed = 200;
  constexpr int kDestroyed = 200;
  constexpr int kRounds = 10;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int round = 0; round < kRounds; ++round) {
      Channel<int> channel;
      std::vector<Lazy<>> doomed;
      std::atomic<int> sum{0};
      Latch finished(kServed);
      auto receiver = [&]() -> Lazy<> {
        std::optional<int> v = co_await channel.receive();
        sum.fetch_add(*v);
      };
      // Started detached (their frames are freed when they finish, on the fiber's worker,
      // which resumes them inline), queued ahead of the doomed ones, which are bound to
      // the pool.
      for (int i = 0; i < kServed; ++i) {
        receiver().start([&](Try<void> r) {
          EXPECT_TRUE(r.hasValue());
          finished.countDown();
        });
      }
      for (int i = 0; i < kDestroyed; ++i) doomed.push_back(suspendedOn(&pool, receiver()));
      auto sender = spawnFiber(&pool, [&] {
        for (int i = 1; i <= kServed; ++i) await(channel.send(int(i)));
      });
      while (!doomed.empty()) doomed.pop_back();
      syncAwait(std::move(sender));
      syncAwait(finished.wait());
      EXPECT_EQ(sum.load(), kServed * (kServed + 1) / 2);
      EXPECT_FALSE(channel.trySend(0));
    }
  }
}

// Fibers: a spawnFiber fiber parked in a weft awaitable is destroyed with its driver,
// when whoever holds the driver's handle destroys it instead of resuming it (here a test
// awaitable that captured the handle earlier). The fiber's stack unwinds on the
// destroying thread, the awaiters on it withdraw as a Lazy's do, and the fiber's future
// reports FiberDestroyed.
struct CaptureDriver {
  std::atomic<void*>* driver;
  // Executor-aware, so that await() hands it the driver itself (not a wrapper that
  // resumes the fiber through its executor).
  CaptureDriver coAwait(Executor* /*executor*/) && noexcept { return *this; }
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) const noexcept {
    driver->store(h.address(), std::memory_order_release);
    return false;  // does not suspend: the fiber goes on at once
  }
  void await_resume() const noexcept {}
};

// Runs `parkIn` (which parks the fiber in one await) in a fiber on a ThreadPool(1), waits
// until the fiber is parked there, destroys its driver, and checks the future.
template <class ParkIn>
void destroyParkedFiber(ParkIn parkIn, bool& passed) {
  ThreadPool pool(1, "parked");
  std::atomic<void*> driver{nullptr};
  FiberFuture<void> future = spawnFiber(&pool, [&] {
    Counted onTheStack;
    await(CaptureDriver{&driver});
    parkIn();
    passed = true;
  });
  // The pool's one worker runs the fiber until it parks, then this (FIFO).
  std::atomic<bool> parked{false};
  pool.schedule([&] {
    parked.store(true);
    parked.notify_one();
  });
  parked.wait(false);
  ASSERT_NE(driver.load(std::memory_order_acquire), nullptr);
  std::coroutine_handle<>::from_address(driver.load(std::memory_order_acquire)).destroy();
  EXPECT_THROW(syncAwait(std::move(future)), FiberDestroyed);
}

TEST_F(SuspendedDestructionTest, ParkedFiberInMutexLock) {
  Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  bool passed = false;
  destroyParkedFiber([&] { await(mutex.lock()); }, passed);
  mutex.unlock();
  EXPECT_TRUE(mutex.tryLock());
  mutex.unlock();
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, ParkedFiberInSemaphoreAcquire) {
  Semaphore semaphore(0);
  bool passed = false;
  destroyParkedFiber([&] { await(semaphore.acquire()); }, passed);
  semaphore.release();
  EXPECT_EQ(semaphore.available(), 1);
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, ParkedFiberInConditionVariableWait) {
  Mutex mutex;
  ConditionVariable cv;
  bool passed = false;
  destroyParkedFiber(
      [&] {
        ScopedLock lock = await(mutex.scopedLock());
        await(cv.wait(mutex, [] { return false; }));
      },
      passed);
  EXPECT_TRUE(mutex.tryLock());  // the unwound ScopedLock released what it held
  mutex.unlock();
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, ParkedFiberInChannelReceiveAndSend) {
  Channel<int> channel;
  bool passed = false;
  destroyParkedFiber([&] { (void)await(channel.receive()); }, passed);
  EXPECT_FALSE(channel.trySend(1));
  destroyParkedFiber([&] { await(channel.send(2)); }, passed);
  EXPECT_FALSE(channel.tryReceive().has_value());
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, ParkedFiberInSelectWithTimeout) {
  Channel<int> a;
  Channel<int> b;
  bool passed = false;
  destroyParkedFiber([&] { (void)await(select(a.receiveCase(), b.sendCase(3), timeoutCase(1h))); },
                     passed);
  EXPECT_FALSE(a.trySend(1));
  EXPECT_FALSE(b.tryReceive().has_value());
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, ParkedFiberInSleep) {
  bool passed = false;
  destroyParkedFiber([&] { await(sleep(1h)); }, passed);
  EXPECT_FALSE(passed);
}

TEST_F(SuspendedDestructionTest, FiberFutureAwaiter) {
  bool passed = false;
  std::atomic<bool> fiberFinished{false};
  {
    Event go;  // outlives the pool, which drains the fiber as it is destroyed
    ThreadPool pool(1, "fiber");
    FiberFuture<int> future = spawnFiber(&pool, [&] {
      Counted onTheStack;
      await(go.wait());
      fiberFinished.store(true);
      return 7;
    });
    {
      Lazy<> doomed = suspended(owning([&]() -> Lazy<> {
        Counted local;
        (void)co_await std::move(future);
        passed = true;
      }));
    }  // detaches the fiber: it runs on, and its completion resumes nobody
    go.set();
  }  // the pool drains: the fiber finishes and frees its state
  EXPECT_TRUE(fiberFinished.load());
  EXPECT_FALSE(passed);
}

// The rule's other half: a wait whose wake-up was claimed cannot be withdrawn. Here the
// receiver's value was delivered and its resumption queued on an executor that has not
// run it yet.
TEST(SuspendedDestructionDeathTest, ResumptionUnderWayIsReported) {
  EXPECT_DEATH(
      {
        test::ManualExecutor executor;
        Channel<int> channel;
        Lazy<> receiver =
            suspendedOn(&executor, owning([&]() -> Lazy<> { (void)co_await channel.receive(); }));
        (void)channel.trySend(1);  // claims the receiver; its resumption is queued
        receiver = Lazy<>();
      },
      "weft: a coroutine was destroyed while suspended in Channel::receive\\(\\) after its "
      "wake-up had been claimed");
  EXPECT_DEATH(
      {
        test::ManualExecutor executor;
        Mutex mutex;
        (void)mutex.tryLock();
        Lazy<> waiter = suspendedOn(&executor, owning([&]() -> Lazy<> { co_await mutex.lock(); }));
        mutex.unlock();  // hands the lock over; the resumption is queued
        waiter = Lazy<>();
      },
      "weft: a coroutine was destroyed while suspended in Mutex::lock\\(\\)");
  EXPECT_DEATH(
      {
        test::ManualExecutor executor;
        {
          Event go;
          ThreadPool pool(1, "fiber");
          FiberFuture<int> future = spawnFiber(&pool, [&] {
            await(go.wait());
            return 7;
          });
          Lazy<> waiter = suspendedOn(&executor, owning([&]() -> Lazy<> {
            (void)co_await std::move(future);
          }));
          go.set();
          pool.shutdown();  // the fiber finished: the waiter's resumption is queued
          waiter = Lazy<>();
        }
      },
      "weft: a coroutine was destroyed while suspended in co_await of a FiberFuture");
}

}  // namespace
}  // namespace weft
