// The program test/tools/gdb_extension_test.sh debugs with tools/gdb/weft.py: it sets up
// one of each kind of pending work, then calls weftGdbBreakHere() from the innermost of
// three nested Lazys, where the script stops it (a breakpoint, or std::abort() for a core
// file). What is pending then:
//  - gdbOutermost() -> gdbMiddle() -> gdbInnermost(), a task on the pool run by syncAwait,
//    running (the innermost is the caller of weftGdbBreakHere);
//  - a fiber named "gdb-consumer", parked in gdbConsume() on a Channel receive;
//  - gdbLockWaiter(), started with start(), waiting on a Mutex that main() holds;
//  - gdbSleeper(), started with start(), sleeping for an hour.
// Before the break it prints weft's own view of the same (asyncBacktrace() in the
// innermost coroutine and dumpTasks()), which the script shows beside gdb's.
//
// Usage: gdb_program [abort]. Without "abort" it then releases everything and exits 0.
// Built with -O2 -g (CMake: tools/gdb_extension), with g++ or clang++.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/sleep.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/task_dump.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

// Where the script stops the program. extern "C"-free, plain name: `break weftGdbBreakHere`.
[[gnu::noinline]] void weftGdbBreakHere(bool abortHere) {
  if (abortHere) std::abort();
  asm volatile("" ::: "memory");  // not folded away: the breakpoint has a body to stop in
}

namespace {

std::string inProcessDump() {
  std::ostringstream out;
  weft::dumpTasks(out);
  return out.str();
}

weft::Lazy<int> gdbInnermost(bool abortHere) {
  const weft::AsyncBacktrace trace = co_await weft::asyncBacktrace();
  std::cout << "in-process asyncBacktrace:\n" << trace << "in-process dumpTasks:\n"
            << inProcessDump() << "end of in-process output\n";
  std::cout.flush();
  weftGdbBreakHere(abortHere);
  co_return 1;
}

weft::Lazy<int> gdbMiddle(bool abortHere) { co_return co_await gdbInnermost(abortHere) + 1; }

weft::Lazy<int> gdbOutermost(bool abortHere) { co_return co_await gdbMiddle(abortHere) + 1; }

weft::Lazy<> gdbLockWaiter(weft::Mutex& mutex) {
  co_await mutex.lock();
  mutex.unlock();
}

weft::Lazy<> gdbSleeper() { co_await weft::sleep(std::chrono::hours(1)); }

[[gnu::noinline]] int gdbConsume(weft::Channel<int>& channel) {
  std::optional<int> value = weft::await(channel.receive());
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the fiber's stack
  return value.value_or(-1);
}

// Until weft's own dump shows everything parked (the pool's threads get there): a
// hand-shake polled with yield; false after a minute (a bound for a hang, not a timing).
// Without WEFT_TASK_TRACKING the dump lists the fiber only.
bool waitUntilParked() {
  const auto giveUp = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (std::chrono::steady_clock::now() < giveUp) {
    const std::string text = inProcessDump();
    if ((!WEFT_TASK_TRACKING || (text.find("waiting on Mutex::lock") != std::string::npos &&
                                 text.find("waiting on sleep") != std::string::npos)) &&
        text.find("parked on Channel::receive") != std::string::npos) {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const bool abortHere = argc > 1 && std::strcmp(argv[1], "abort") == 0;
  weft::ThreadPool pool(2, "gdb-pool");
  weft::Mutex mutex;
  if (!mutex.tryLock()) return 1;
  weft::Channel<int> channel;
  weft::CancellationSource stopSleeping;
  std::atomic<int> finished{0};

  gdbLockWaiter(mutex).via(&pool).start([&](weft::Try<void>) { ++finished; });
  weft::withCancellation(stopSleeping.token(), gdbSleeper()).via(&pool).start([&](weft::Try<void>) {
    ++finished;
  });
  weft::SpawnFiberOptions options;
  options.name = "gdb-consumer";
  auto fiber = weft::spawnFiber(&pool, [&] { return gdbConsume(channel); }, options);
  if (!waitUntilParked()) {
    std::fprintf(stderr, "gdb_program: the tasks did not park within 10 s:\n%s",
                 inProcessDump().c_str());
    return 1;
  }

  const int depth = weft::syncAwait(gdbOutermost(abortHere).via(&pool));

  // Release everything, so that the program exits 0 when nothing stopped it.
  mutex.unlock();
  stopSleeping.requestCancellation();
  weft::syncAwait(channel.send(7));
  const int received = weft::syncAwait(std::move(fiber));
  while (finished.load() < 2) std::this_thread::yield();
  if (depth != 3 || received != 7) {
    std::fprintf(stderr, "gdb_program: depth %d (expected 3), received %d (expected 7)\n", depth,
                 received);
    return 1;
  }
  std::puts("gdb_program: done");
  return 0;
}
