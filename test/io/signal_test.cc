#include "weft/io/signal.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <unistd.h>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "weft/coro/cancellation.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task_group.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Watchdog;

// Raises `s` at the process from another thread once `ready` is set (the waiters are in
// place), again every 10 ms until `stop`: a wait that starts late still gets one.
class Raiser {
 public:
  Raiser(int s, std::atomic<bool>& ready) : thread_([this, s, &ready] {
    while (!ready.load()) std::this_thread::sleep_for(1ms);
    while (!stop_.load()) {
      ::kill(::getpid(), s);
      std::this_thread::sleep_for(10ms);
    }
  }) {}
  ~Raiser() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(SignalTest, AWaitReturnsTheSignalDelivered) {
  ThreadPool pool(2);  // its threads exist before the first signal(): no mask needed
  std::atomic<bool> ready{true};
  // Until weft's handler is installed (the first signal() for SIGUSR1), SIGUSR1 would
  // take its default action and end the process: install it before raising.
  auto wait = signal(SIGUSR2, SIGUSR1);
  auto body = [&]() -> Lazy<int> { co_return co_await wait; };
  Raiser raiser(SIGUSR1, ready);
  Watchdog watchdog(60s, "SignalTest.AWaitReturnsTheSignalDelivered");
  EXPECT_EQ(syncAwait(body(), &pool), SIGUSR1);
}

TEST(SignalTest, EveryWaiterForTheSignalIsWokenAndOthersAreNot) {
  ThreadPool pool(2);
  std::atomic<int> woken{0};
  std::atomic<bool> ready{false};
  (void)signal(SIGUSR1);  // installed before the raiser starts
  auto body = [&]() -> Lazy<void> {
    TaskGroup<> group(co_await currentExecutor());
    auto waiter = [&]() -> Lazy<void> {
      EXPECT_EQ(co_await signal(SIGUSR1), SIGUSR1);
      woken.fetch_add(1);
    };
    for (int i = 0; i < 4; ++i) group.spawn(waiter());
    // A waiter for another signal only: still waiting when the group is cancelled.
    CancellationSource other;
    auto otherWaiter = [&]() -> Lazy<void> {
      EXPECT_THROW((void)co_await withCancellation(other.token(), signal(SIGUSR2)),
                   OperationCancelled);
    };
    group.spawn(otherWaiter());
    ready = true;
    while (woken.load() < 4) co_await sleep(1ms);
    other.requestCancellation();
    co_await group.join();
  };
  Raiser raiser(SIGUSR1, ready);
  Watchdog watchdog(60s, "SignalTest.EveryWaiterForTheSignalIsWokenAndOthersAreNot");
  syncAwait(body(), &pool);
  EXPECT_EQ(woken.load(), 4);
}

TEST(SignalTest, ASignalNobodyWaitedForIsKeptForTheNextWait) {
  ThreadPool pool(1);
  const int marker = SIGRTMIN + 5;  // used by no other test here: never pending from one
  (void)signal(SIGUSR2, marker);    // installs the handlers
  // Hand-shake: raise() returns after the handler has run on this thread, so the
  // dispatcher's pipe holds SIGUSR2, then the marker, in that order. The dispatcher
  // handles them in that order: once a wait for the marker has returned (whether the
  // marker woke it or was kept for it), SIGUSR2 has been handled, with nobody waiting.
  ::raise(SIGUSR2);
  ::raise(marker);
  auto waitFor = [](int s) -> Lazy<int> { co_return co_await signal(s); };
  Watchdog watchdog(60s, "SignalTest.ASignalNobodyWaitedForIsKeptForTheNextWait");
  EXPECT_EQ(syncAwait(waitFor(marker), &pool), marker);
  EXPECT_EQ(syncAwait(waitFor(SIGUSR2), &pool), SIGUSR2);
}

TEST(SignalTest, AWaitIsCancellableAndTakesNothing) {
  ThreadPool pool(1);
  auto body = []() -> Lazy<void> { (void)co_await withTimeout(signal(SIGUSR2), 10ms); };
  Watchdog watchdog(60s, "SignalTest.AWaitIsCancellableAndTakesNothing");
  EXPECT_THROW(syncAwait(body(), &pool), TimeoutError);
  CancellationSource source;
  source.requestCancellation();
  auto early = [&]() -> Lazy<void> {
    (void)co_await withCancellation(source.token(), signal(SIGUSR2));
  };
  EXPECT_THROW(syncAwait(early(), &pool), OperationCancelled);
}

TEST(SignalTest, FromAFiber) {
  ThreadPool pool(2);
  std::atomic<bool> ready{true};
  (void)signal(SIGUSR1);  // installed before the raiser starts
  Raiser raiser(SIGUSR1, ready);
  auto fiber = spawnFiber(&pool, [] { return weft::await(signal(SIGUSR1)); });
  Watchdog watchdog(60s, "SignalTest.FromAFiber");
  EXPECT_EQ(syncAwait(std::move(fiber)), SIGUSR1);
}

TEST(SignalTest, BadSignalNumbersAreRejected) {
  EXPECT_THROW((void)signal(0), std::invalid_argument);
  EXPECT_THROW((void)signal(64), std::invalid_argument);
  EXPECT_THROW((void)signal(SIGKILL), std::system_error);
}

}  // namespace
}  // namespace weft
