// WEFT_DUMP_SIGNAL (docs/debugging.md) in a program that never names weft's task dump, as
// a service started with `WEFT_DUMP_SIGNAL=QUIT ./server` does not: this file must not
// include coro/task_dump.h or call dumpTasks() / installDumpOnSignal(), which would link
// coro/task_dump.o whatever the start-up hook does. It links weft's static libraries as a
// user's program does (CMake: weft::weft), so in a build where nothing else refers to
// coro/task_dump.o (Release, WEFT_TASK_TRACKING off) it checks that the hook is linked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"

namespace {

weft::Lazy<int> answer() { co_return 42; }

// Reads `fd` into `text` until `text` holds a whole line (stopAtLine) or the end.
void readInto(int fd, std::string& text, bool stopAtLine) {
  std::array<char, 512> buffer{};
  while (!stopAtLine || text.find('\n') == std::string::npos) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.append(buffer.data(), static_cast<std::size_t>(n));
  }
}

// The death test's child: a ThreadPool and a Lazy, then `signal` raised. Exits 0 once
// weft's dump thread has written the dump (passed on to stderr); 1 if `signal` has no
// handler (it would have ended the program).
[[noreturn]] void raiseAndPassOnTheDump(int signal) {
  weft::ThreadPool pool(2);
  if (weft::syncAwait(answer(), &pool) != 42) std::_Exit(2);
  struct sigaction current {};
  if (::sigaction(signal, nullptr, &current) != 0 || current.sa_handler == SIG_DFL ||
      current.sa_handler == SIG_IGN) {
    std::fputs("signal has no handler: WEFT_DUMP_SIGNAL was ignored\n", stderr);
    std::_Exit(1);
  }
  // Stderr is a pipe read here until the dump's first line has come, then stderr again,
  // and the pipe is read to its end (the end of a write of the dump thread under way).
  int fds[2];
  const int savedStderr = ::dup(STDERR_FILENO);
  if (savedStderr < 0 || ::pipe(fds) != 0 || ::dup2(fds[1], STDERR_FILENO) < 0) std::_Exit(3);
  ::close(fds[1]);
  ::raise(signal);
  std::string dump;
  readInto(fds[0], dump, true);
  ::dup2(savedStderr, STDERR_FILENO);
  ::close(savedStderr);
  readInto(fds[0], dump, false);
  std::fputs(dump.c_str(), stderr);
  std::_Exit(0);
}

TEST(TaskDumpEnvironmentTest, DumpSignalSetAtStartUpDumpsInAProgramThatNeverNamesTheDump) {
  // The child re-executes this program (threadsafe style), with the variable set before
  // its start-up.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_EQ(::setenv("WEFT_DUMP_SIGNAL", "USR1", 1), 0);
  EXPECT_EXIT(raiseAndPassOnTheDump(SIGUSR1), ::testing::ExitedWithCode(0),
              "(^|\n)weft: [0-9]+ tasks?, [0-9]+ fibers?");
  ASSERT_EQ(::setenv("WEFT_DUMP_SIGNAL", "SIGQUIT", 1), 0);
  EXPECT_EXIT(raiseAndPassOnTheDump(SIGQUIT), ::testing::ExitedWithCode(0),
              "(^|\n)weft: [0-9]+ tasks?, [0-9]+ fibers?");
  ::unsetenv("WEFT_DUMP_SIGNAL");
}

TEST(TaskDumpEnvironmentTest, ADumpSignalThatNamesNoSignalIsReportedAtStartUp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_EQ(::setenv("WEFT_DUMP_SIGNAL", "NOPE", 1), 0);
  EXPECT_EXIT(std::_Exit(0), ::testing::ExitedWithCode(0),
              "weft: WEFT_DUMP_SIGNAL=NOPE names no signal");
  ASSERT_EQ(::setenv("WEFT_DUMP_SIGNAL", "9", 1), 0);  // SIGKILL cannot be caught
  EXPECT_EXIT(std::_Exit(0), ::testing::ExitedWithCode(0),
              "weft: WEFT_DUMP_SIGNAL=9: no task dump on a signal: .* not a signal that can be "
              "caught");
  ::unsetenv("WEFT_DUMP_SIGNAL");
}

}  // namespace
