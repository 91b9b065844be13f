#include "weft/coro/task_dump.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/collect_any.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

std::string dump() {
  std::ostringstream out;
  weft::dumpTasks(out);
  return out.str();
}

// Dumps until `ready` says the dump shows what the test set up (the tasks reach their
// waits on the pool's threads): a hand-shake, polled with yield. Gives up after a minute
// (a bound for a hang, not a timing claim) and returns the last dump, which the test's
// expectations then show.
template <class Ready>
std::string dumpOnce(Ready ready) {
  const auto giveUp = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  std::string text = dump();
  while (!ready(text) && std::chrono::steady_clock::now() < giveUp) {
    std::this_thread::yield();
    text = dump();
  }
  return text;
}

weft::Lazy<> lockWaiter(weft::Mutex& mutex) {
  co_await mutex.lock();
  mutex.unlock();
}

weft::Lazy<> sleeper() { co_await weft::sleep(std::chrono::hours(1)); }

[[gnu::noinline]] int consume(weft::Channel<int>& channel) {
  std::optional<int> value = weft::await(channel.receive());
  asm volatile("" ::: "memory");
  return value.value_or(-1);
}

weft::SpawnFiberOptions named(const char* name) {
  weft::SpawnFiberOptions options;
  options.name = name;
  return options;
}

TEST(TaskDumpTest, ListsAParkedFiberAWaitingLazyAndASleepingTaskWithTheirStates) {
  weft::ThreadPool pool(2);
  weft::Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  weft::Channel<int> channel;
  weft::CancellationSource stopSleeping;
  std::atomic<int> finished{0};

  lockWaiter(mutex).via(&pool).start([&](weft::Try<void> r) {
    EXPECT_TRUE(r.hasValue());
    ++finished;
  });
  weft::withCancellation(stopSleeping.token(), sleeper()).via(&pool).start([&](weft::Try<void> r) {
    EXPECT_TRUE(r.hasException());  // cancelled below
    ++finished;
  });
  auto fiber = weft::spawnFiber(&pool, [&] { return consume(channel); }, named("consumer"));

  const std::string text = dumpOnce([](const std::string& t) {
    return (!WEFT_TASK_TRACKING || (t.find("waiting on Mutex::lock") != std::string::npos &&
                                    t.find("waiting on sleep") != std::string::npos)) &&
           t.find("parked on Channel::receive") != std::string::npos;
  });

  // The fiber: parked on the channel, in consume(), with its stack in use (fibers are
  // listed in every build).
  EXPECT_THAT(text, ContainsRegex("fiber [0-9]+ \"consumer\": parked on Channel::receive "
                                  "\\(0x[0-9a-f]+\\), stack [0-9.]+ KiB of 256 KiB in use\n"
                                  "  #0 native [^\n]*consume\\(weft::Channel<int>&\\)[^\n]*\n"
                                  "  #1 fiber [0-9]+ \"consumer\""));
  if constexpr (!WEFT_TASK_TRACKING) {
    EXPECT_THAT(text, HasSubstr("(root tasks are listed in builds with WEFT_TASK_TRACKING=1)"));
    EXPECT_THAT(text, Not(HasSubstr("lockWaiter")));
  } else {
    // The Lazy on the mutex: its state names the mutex, its trace the coroutine and root.
    EXPECT_THAT(text, ContainsRegex("task [0-9]+ \\(start\\(\\)\\), age [0-9]+\\.[0-9]{3} s: "
                                    "waiting on Mutex::lock \\(0x[0-9a-f]+\\)"));
    EXPECT_THAT(text, ContainsRegex("waiting on Mutex::lock[^\n]*\n  #0 coroutine "
                                    "[^\n]*lockWaiter\\(weft::Mutex&\\)[^\n]*\n  #1 start\\(\\)\n"));
    // The sleeping task: an hour to go (less what the test took), its coroutine first.
    EXPECT_THAT(text, ContainsRegex("waiting on sleep, due in 35[0-9]{2}\\.[0-9]{3} s\n"
                                    "  #0 coroutine [^\n]*sleeper\\(\\)[^\n]*\n  #1 start\\(\\)"));
    EXPECT_THAT(text, ContainsRegex("^weft: [0-9]+ tasks?, [0-9]+ fibers?\n"));
  }

  // Let everything finish; the dump is empty of them afterwards.
  mutex.unlock();
  stopSleeping.requestCancellation();
  weft::syncAwait(channel.send(7));
  EXPECT_EQ(weft::syncAwait(std::move(fiber)), 7);
  while (finished.load() < 2) std::this_thread::yield();
  const std::string after = dumpOnce([](const std::string& t) {
    return t.find("consumer") == std::string::npos && t.find("waiting on") == std::string::npos;
  });
  EXPECT_THAT(after, Not(HasSubstr("consumer")));
  EXPECT_THAT(after, Not(HasSubstr("lockWaiter")));
  EXPECT_THAT(after, Not(HasSubstr("sleeper")));
}

weft::Lazy<> collector() {
  auto results = co_await weft::collectAll(sleeper(), sleeper());
  (void)results;
}
weft::Lazy<> racer() {
  auto first = co_await weft::collectAny(sleeper(), sleeper(), sleeper());
  (void)first;
}

// Task tracking is on by default in every build type: a build whose option does not turn
// it off (WEFT_TEST_EXPECT_TRACKING, test/CMakeLists.txt) lists a waiting root task, also
// in Release (test/run.sh's gcc tree: NDEBUG, no -DWEFT_TASK_TRACKING).
TEST(TaskDumpTest, ABuildWithTheDefaultOptionsListsRootTasksInEveryBuildType) {
  EXPECT_EQ(WEFT_TASK_TRACKING, WEFT_TEST_EXPECT_TRACKING)
      << "WEFT_TASK_TRACKING=" << WEFT_TASK_TRACKING << " where the build's option expects "
      << WEFT_TEST_EXPECT_TRACKING;
  if (!WEFT_TEST_EXPECT_TRACKING) GTEST_SKIP() << "built with task tracking turned off";
  weft::ThreadPool pool(1);
  weft::Mutex mutex;
  ASSERT_TRUE(mutex.tryLock());
  std::atomic<bool> finished{false};
  lockWaiter(mutex).via(&pool).start([&](weft::Try<void> r) {
    EXPECT_TRUE(r.hasValue());
    finished = true;
  });
  const std::string text = dumpOnce([](const std::string& t) {
    return t.find("waiting on Mutex::lock") != std::string::npos;
  });
  EXPECT_THAT(text, ContainsRegex("^weft: 1 task, 0 fibers\n"));
  EXPECT_THAT(text, ContainsRegex("task [0-9]+ \\(start\\(\\)\\), age [0-9]+\\.[0-9]{3} s: "
                                  "waiting on Mutex::lock \\(0x[0-9a-f]+\\)\n"
                                  "  #0 coroutine [^\n]*lockWaiter\\(weft::Mutex&\\)"));
  mutex.unlock();
  while (!finished) std::this_thread::yield();
}

TEST(TaskDumpTest, ACollectShowsWhatItIsAndHowManyBranchesItWaitsFor) {
  if (!WEFT_TASK_TRACKING) GTEST_SKIP() << "root tasks are listed with WEFT_TASK_TRACKING=1";
  weft::ThreadPool pool(2);
  weft::CancellationSource stop;
  std::atomic<int> finished{0};
  auto done = [&](weft::Try<void> r) {
    EXPECT_TRUE(r.hasValue());  // the branches' OperationCancelled stay in their Trys
    ++finished;
  };
  weft::withCancellation(stop.token(), collector()).via(&pool).start(done);
  weft::withCancellation(stop.token(), racer()).via(&pool).start(done);
  const std::string text = dumpOnce([](const std::string& t) {
    return t.find("waiting on collectAll") != std::string::npos &&
           t.find("waiting on collectAny") != std::string::npos;
  });
  EXPECT_THAT(text, HasSubstr("waiting on collectAll of 2 branches\n"));
  EXPECT_THAT(text, HasSubstr("waiting on collectAny of 3 branches\n"));
  stop.requestCancellation();
  while (finished.load() < 2) std::this_thread::yield();
}

TEST(TaskDumpTest, ARunningTaskThatHasWaitedShowsItselfRunning) {
  if (!WEFT_TASK_TRACKING) GTEST_SKIP() << "root tasks are listed with WEFT_TASK_TRACKING=1";
  weft::ThreadPool pool(1);
  std::string text;
  std::atomic<bool> done{false};
  auto waitThenDump = [](std::string& out) -> weft::Lazy<> {
    co_await weft::yield();  // its first wait lists it
    out = dump();
  };
  waitThenDump(text).via(&pool).start([&](weft::Try<void>) { done = true; });
  while (!done) std::this_thread::yield();
  EXPECT_THAT(text,
              ContainsRegex("task [0-9]+ \\(start\\(\\)\\), age [0-9]+\\.[0-9]{3} s: "
                            "running or runnable\n"
                            "  #0 coroutine [^\n]*ARunningTaskThatHasWaitedShowsItselfRunning"));
}

TEST(TaskDumpTest, ATaskThatHasNotWaitedIsNotListed) {
  if (!WEFT_TASK_TRACKING) GTEST_SKIP() << "root tasks are listed with WEFT_TASK_TRACKING=1";
  std::string text;
  weft::syncAwait([&]() -> weft::Lazy<> {
    text = dump();
    co_return;
  }());
  // Listed from its first wait only: a task that ends without waiting never touches the
  // registry.
  EXPECT_THAT(text, Not(HasSubstr("ATaskThatHasNotWaitedIsNotListed"))) << text;
}

TEST(TaskDumpTest, InstallDumpOnSignalWritesTheDumpToStderr) {
  weft::installDumpOnSignal(SIGUSR1);
  weft::ThreadPool pool(1);
  weft::Channel<int> channel;
  auto fiber = weft::spawnFiber(&pool, [&] { return consume(channel); }, named("signalled"));
  (void)dumpOnce([](const std::string& t) { return t.find("parked on") != std::string::npos; });

  // Stderr into a pipe, read until the dump thread has written the dump (bounded).
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int savedStderr = ::dup(STDERR_FILENO);
  ASSERT_GE(::dup2(fds[1], STDERR_FILENO), 0);
  ASSERT_EQ(::raise(SIGUSR1), 0);
  std::string captured;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (captured.find("#1 fiber") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    pollfd readable{fds[0], POLLIN, 0};
    if (::poll(&readable, 1, 100) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
    if (n > 0) captured.append(buffer, static_cast<std::size_t>(n));
  }
  ::dup2(savedStderr, STDERR_FILENO);
  ::close(savedStderr);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_THAT(captured, HasSubstr("weft: "));
  EXPECT_THAT(captured, ContainsRegex("fiber [0-9]+ \"signalled\": parked on Channel::receive"));
  EXPECT_THAT(captured, HasSubstr("consume("));
  weft::syncAwait(channel.send(1));
  EXPECT_EQ(weft::syncAwait(std::move(fiber)), 1);
}

TEST(TaskDumpTest, InstallDumpOnSignalRefusesSignalsThatCannotBeCaught) {
  EXPECT_THROW(weft::installDumpOnSignal(SIGKILL), std::invalid_argument);
  EXPECT_THROW(weft::installDumpOnSignal(0), std::invalid_argument);
}

}  // namespace
