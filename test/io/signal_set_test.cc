// SignalSet: signals read from a signalfd on the event loop.

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <stdexcept>

#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/signal_set.h"
#include "test/support/io_support.h"

namespace weft {
namespace {

TEST(SignalSetTest, SignalsThatCannotBeCaughtOrAreNoSignalsAreRejected) {
  for (int bad : {SIGKILL, SIGSTOP, 0, -1, 65, 1000}) {
    EXPECT_THROW(SignalSet({SIGUSR1, bad}), std::invalid_argument) << "signal " << bad;
  }
}

class SignalSetWaitTest : public test::IoBackendTest {};

// The set is made before the pool (its workers inherit the blocked mask), the signal is
// sent to the process while the wait may or may not have started: either way it is
// pending for the signalfd and the wait returns it.
TEST_P(SignalSetWaitTest, WaitReturnsASignalSentToTheProcess) {
  sigset_t before;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  {
    SignalSet signals{SIGUSR2};
    ThreadPool pool(options(1));
    ASSERT_EQ(::kill(::getpid(), SIGUSR2), 0);
    EXPECT_EQ(syncAwait(signals.wait().via(&pool)), SIGUSR2);
  }
  sigset_t after;
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  EXPECT_EQ(sigismember(&after, SIGUSR2), sigismember(&before, SIGUSR2))
      << "the destructor did not restore the constructing thread's mask";
}

INSTANTIATE_TEST_SUITE_P(Backends, SignalSetWaitTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
