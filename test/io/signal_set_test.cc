// SignalSet: a named set of signals on weft::signal()'s mechanism.

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <stdexcept>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/signal.h"
#include "weft/io/signal_set.h"
#include "test/support/io_support.h"

namespace weft {
namespace {

TEST(SignalSetTest, SignalsThatCannotBeCaughtOrAreNoSignalsAreRejected) {
  for (int bad : {SIGKILL, SIGSTOP, 0, -1, 64, 65, 1000}) {
    EXPECT_THROW(SignalSet({SIGUSR1, bad}), std::invalid_argument) << "signal " << bad;
  }
}

// No signal mask is touched: the constructing thread's mask is the same before, during
// and after the set's life.
TEST(SignalSetTest, LeavesTheSignalMaskAlone) {
  sigset_t before;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  {
    SignalSet signals{SIGUSR2};
    sigset_t during;
    pthread_sigmask(SIG_SETMASK, nullptr, &during);
    EXPECT_EQ(sigismember(&during, SIGUSR2), sigismember(&before, SIGUSR2));
  }
  sigset_t after;
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  EXPECT_EQ(sigismember(&after, SIGUSR2), sigismember(&before, SIGUSR2));
}

class SignalSetWaitTest : public test::IoBackendTest {};

// The set is made after the pool's threads exist (no mask to inherit) and the signal is
// sent before the wait starts: the handler keeps it for the wait, which returns it.
TEST_P(SignalSetWaitTest, ASignalSentBeforeTheWaitIsKeptForIt) {
  ThreadPool pool(options(1));
  const SignalSet signals{SIGUSR2};
  ASSERT_EQ(::kill(::getpid(), SIGUSR2), 0);
  EXPECT_EQ(syncAwait(signals.wait().via(&pool)), SIGUSR2);
}

// A wait that is cancelled takes no signal: the one sent afterwards goes to the next wait,
// whichever object or function it comes from.
TEST_P(SignalSetWaitTest, ACancelledWaitTakesNoSignal) {
  ThreadPool pool(options(1));
  const SignalSet signals{SIGUSR1, SIGUSR2};
  CancellationSource source;
  source.requestCancellation();
  EXPECT_THROW(syncAwait(withCancellation(source.token(), signals.wait()), &pool),
               OperationCancelled);
  ASSERT_EQ(::kill(::getpid(), SIGUSR1), 0);
  auto viaFunction = []() -> Lazy<int> { co_return co_await signal(SIGUSR1); };
  EXPECT_EQ(syncAwait(viaFunction(), &pool), SIGUSR1);
}

// Two sets waiting for the same signal at once both see it: waits are linked before the
// signal is sent (the dispatcher's count of linked waiters says so), then one kill wakes both.
TEST_P(SignalSetWaitTest, OneSignalResumesEveryWaitForIt) {
  ThreadPool pool(options(2));
  const SignalSet first{SIGUSR2};
  const SignalSet second{SIGUSR2, SIGUSR1};
  const std::size_t linkedBefore = detail::linkedSignalWaiterCount();
  auto sendWhenBothWait = [&]() -> Lazy<void> {
    while (detail::linkedSignalWaiterCount() < linkedBefore + 2) co_await yield();
    ::kill(::getpid(), SIGUSR2);
  };
  auto [a, b, sent] =
      syncAwait(collectAllPara(first.wait(), second.wait(), sendWhenBothWait()), &pool);
  EXPECT_EQ(a.value(), SIGUSR2);
  EXPECT_EQ(b.value(), SIGUSR2);
  sent.value();
}

INSTANTIATE_TEST_SUITE_P(Backends, SignalSetWaitTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
