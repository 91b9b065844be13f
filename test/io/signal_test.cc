#include "weft/io/signal.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <memory>
#include <unistd.h>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "weft/coro/cancellation.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/latch.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/task_group.h"
#include "weft/coro/try.h"
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

// Raises `s` at the process once, from another thread, as soon as `waiters` more signal
// waiters are linked than when it was constructed (detail::linkedSignalWaiterCount): the
// waiters are in place, so that the one signal reaches every one of them (the dispatcher
// resumes every waiter linked for it). A hand-shake, not a rate: construct it before the
// waiters start. Its destructor stops a raiser that still waits (a test that failed
// before its waiters were linked).
class Raiser {
 public:
  Raiser(int s, std::size_t waiters)
      : before_(detail::linkedSignalWaiterCount()), thread_([this, s, waiters] {
          while (detail::linkedSignalWaiterCount() < before_ + waiters) {
            if (stop_.load()) return;
            std::this_thread::yield();
          }
          ::kill(::getpid(), s);
        }) {}
  ~Raiser() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  const std::size_t before_;
  std::thread thread_;
};

TEST(SignalTest, AWaitReturnsTheSignalDelivered) {
  ThreadPool pool(2);  // its threads exist before the first signal(): no mask needed
  // Until weft's handler is installed (the first signal() for SIGUSR1), SIGUSR1 would
  // take its default action and end the process: install it before raising.
  auto wait = signal(SIGUSR2, SIGUSR1);
  auto body = [&]() -> Lazy<int> { co_return co_await wait; };
  Raiser raiser(SIGUSR1, 1);
  Watchdog watchdog(60s, "SignalTest.AWaitReturnsTheSignalDelivered");
  EXPECT_EQ(syncAwait(body(), &pool), SIGUSR1);
}

TEST(SignalTest, EveryWaiterForTheSignalIsWokenAndOthersAreNot) {
  ThreadPool pool(2);
  std::atomic<int> woken{0};
  Latch allWoken(4);
  (void)signal(SIGUSR1);  // installed before the raiser starts
  auto body = [&]() -> Lazy<void> {
    TaskGroup<> group(co_await currentExecutor());
    auto waiter = [&]() -> Lazy<void> {
      EXPECT_EQ(co_await signal(SIGUSR1), SIGUSR1);
      woken.fetch_add(1);
      allWoken.countDown();
    };
    for (int i = 0; i < 4; ++i) group.spawn(waiter());
    // A waiter for another signal only: still waiting when the group is cancelled.
    CancellationSource other;
    auto otherWaiter = [&]() -> Lazy<void> {
      EXPECT_THROW((void)co_await withCancellation(other.token(), signal(SIGUSR2)),
                   OperationCancelled);
    };
    group.spawn(otherWaiter());
    // The one SIGUSR1 comes once all five waits are linked: it wakes the four for it; the
    // SIGUSR2 waiter, still waiting after they have all woken, is then cancelled.
    co_await allWoken.wait();
    other.requestCancellation();
    co_await group.join();
  };
  Raiser raiser(SIGUSR1, 5);
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
  (void)signal(SIGUSR1);  // installed before the raiser starts
  Raiser raiser(SIGUSR1, 1);
  auto fiber = spawnFiber(&pool, [] { return weft::await(signal(SIGUSR1)); });
  Watchdog watchdog(60s, "SignalTest.FromAFiber");
  EXPECT_EQ(syncAwait(std::move(fiber)), SIGUSR1);
}

TEST(SignalTest, AWaiterEndsWithExecutorShutDownWhenItsPoolIsDestroyed) {
  Watchdog watchdog(60s, "SignalTest.AWaiterEndsWithExecutorShutDownWhenItsPoolIsDestroyed");
  (void)signal(SIGUSR2);  // weft's handler: raising SIGUSR2 below is safe
  const std::size_t before = detail::linkedSignalWaiterCount();
  std::atomic<int> outcome{0};  // 1: ExecutorShutDown, 2: a signal, 3: anything else
  // Declared before the pool, which runs the coroutine until its destructor returns.
  auto body = [&]() -> Lazy<void> {
    try {
      (void)co_await signal(SIGUSR2);
      outcome = 2;
    } catch (const ExecutorShutDown&) {
      outcome = 1;
    } catch (...) {
      outcome = 3;
    }
  };
  auto pool = std::make_unique<ThreadPool>(1, "doomed");
  body().via(pool.get()).start([](Try<void>) {});
  while (detail::linkedSignalWaiterCount() == before) std::this_thread::yield();
  pool.reset();  // ends the wait, as it ends sleeps
  EXPECT_EQ(outcome.load(), 1);
  EXPECT_EQ(detail::linkedSignalWaiterCount(), before);
  // The signal finds nobody waiting (before the fix, the dead pool's waiter): it is kept
  // for the next wait, which takes it.
  ::kill(::getpid(), SIGUSR2);
  auto next = []() -> Lazy<int> { co_return co_await signal(SIGUSR2); };
  EXPECT_EQ(syncAwait(next()), SIGUSR2);
}

// Sleeps on its Task's pool until the pool's shutdown ends the sleep (it stops the pool's
// timers first), then sets `begun`: a witness that the shutdown has begun.
Lazy<void> setWhenShutDownBegins(std::atomic<bool>& begun) {
  try {
    co_await sleep(std::chrono::hours(1));
  } catch (const ExecutorShutDown&) {
  }
  begun = true;
}

// Waits racing the shutdown and their cancellation: whichever wins, every waiter has
// finished when the shutdown returns, with ExecutorShutDown or OperationCancelled.
TEST(SignalTest, WaitersCancelledAsTheirPoolIsDestroyedAllEnd) {
  Watchdog watchdog(120s, "SignalTest.WaitersCancelledAsTheirPoolIsDestroyedAllEnd");
  (void)signal(SIGUSR2);
  const std::size_t before = detail::linkedSignalWaiterCount();
  constexpr int kRounds = 50;
  constexpr int kWaiters = 6;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> started{0}, shutDowns{0}, cancels{0}, finished{0};
    CancellationSource source;
    // Before the pool: the coroutines refer to it until the pool's shutdown returns.
    auto body = [&]() -> Lazy<void> {
      try {
        ++started;
        (void)co_await signal(SIGUSR2);
        ADD_FAILURE() << "no SIGUSR2 was raised";
      } catch (const ExecutorShutDown&) {
        ++shutDowns;
      } catch (const OperationCancelled&) {
        ++cancels;
      }
    };
    {
      ThreadPool pool(2, "race");
      for (int i = 0; i < kWaiters; ++i) {
        withCancellation(source.token(), body()).via(&pool).start([&](Try<void> result) {
          EXPECT_TRUE(result.hasValue());
          ++finished;
        });
      }
      while (started.load() != kWaiters) std::this_thread::yield();
      // Every other round, the cancellation races the shutdown; otherwise only the
      // shutdown ends the waits.
      // The cancellation comes as the shutdown begins (even rounds), or once it has begun
      // (a sleep on the pool has been ended), racing the guards that end the waits.
      std::atomic<bool> shutdownBegun{false}, go{false};
      setWhenShutDownBegins(shutdownBegun).via(&pool).start([](Try<void>) {});
      std::thread canceller([&] {
        while (!(round % 2 == 0 ? go.load() : shutdownBegun.load())) std::this_thread::yield();
        source.requestCancellation();
      });
      go = true;
      pool.shutdown();
      canceller.join();
    }
    ASSERT_EQ(finished.load(), kWaiters) << "round " << round;
    EXPECT_EQ(shutDowns.load() + cancels.load(), kWaiters);
  }
  EXPECT_EQ(detail::linkedSignalWaiterCount(), before);
}

TEST(SignalTest, BadSignalNumbersAreRejected) {
  EXPECT_THROW((void)signal(0), std::invalid_argument);
  EXPECT_THROW((void)signal(64), std::invalid_argument);
  EXPECT_THROW((void)signal(SIGKILL), std::invalid_argument);
}


// What() of the std::invalid_argument `call` throws ("" if it throws nothing).
template <class Call>
std::string invalidArgument(Call call) {
  try {
    (void)call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Signals that no handler can catch are std::invalid_argument, as the header says, not
// sigaction's EINVAL as std::system_error: SIGKILL, SIGSTOP, numbers out of range, and
// those the C library keeps for itself (glibc's 32 and 33, below SIGRTMIN).
TEST(SignalTest, SignalsThatCannotBeCaughtAreInvalidArguments) {
  for (int s : {SIGKILL, SIGSTOP, 0, -1, 64, 65, 1000, -2147483647 - 1}) {
    const std::string what = invalidArgument([s] { return signal(s); });
    EXPECT_NE(what.find("signal " + std::to_string(s)), std::string::npos) << s << ": " << what;
  }
  EXPECT_NE(invalidArgument([] { return signal(SIGKILL); }).find("SIGKILL"), std::string::npos);
  EXPECT_NE(invalidArgument([] { return signal(SIGSTOP); }).find("SIGSTOP"), std::string::npos);
  for (int s = 32; s < SIGRTMIN; ++s) {
    EXPECT_NE(invalidArgument([s] { return signal(s); }), "") << s;
  }
  // The real-time signals the C library leaves to applications are accepted.
  EXPECT_NO_THROW((void)signal(SIGRTMIN));
  EXPECT_NO_THROW((void)signal(SIGRTMAX - 1));
}

// A bad signal in a list installs nothing, not even the good ones before it.
TEST(SignalTest, ABadSignalInAListInstallsNone) {
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGWINCH, nullptr, &before), 0);
  ASSERT_EQ(before.sa_handler, SIG_DFL);
  EXPECT_NE(invalidArgument([] { return signal(SIGWINCH, SIGSTOP); }), "");
  struct sigaction after {};
  ASSERT_EQ(::sigaction(SIGWINCH, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, SIG_DFL);
}

}  // namespace
}  // namespace weft
