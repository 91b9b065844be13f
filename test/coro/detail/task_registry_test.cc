// The registry of root tasks and fibers (coro/detail/registry_slot.h, task_registry.h):
// each thread claims slots of its own ring without a lock, and a slot is released by
// whichever thread ends the task or fiber. What a dump lists is what these tests check:
// a task started on one thread and finished on another is listed while it lives and gone
// after, under churn from several threads while dumps run; rings grow past their first
// size; a thread's rings outlive it; numbers and ages.

#include "weft/coro/detail/task_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/channel.h"
#include "weft/coro/event.h"
#include "weft/coro/lazy.h"
#include "weft/coro/spawn.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/task_dump.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

#include "test/support/no_addr2line.h"

namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// Dumps name functions only (test/support/no_addr2line.h): fast, and all these tests read.
const auto* const kNoAddr2line =
    ::testing::AddGlobalTestEnvironment(new weft::test::NoAddr2line);

std::string dump() {
  std::ostringstream out;
  weft::dumpTasks(out);
  return out.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// The numbers of the tasks whose async backtrace names `function`.
std::set<std::string> numbersOf(const std::string& text, const std::string& function) {
  std::set<std::string> numbers;
  static const std::regex kTitle("^task ([0-9]+) ");
  std::istringstream lines(text);
  std::string line, number;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_search(line, match, kTitle)) {
      number = match[1];
    } else if (line.find(function) != std::string::npos && !number.empty()) {
      numbers.insert(number);
    }
  }
  return numbers;
}

// Waits on `release`, on the pool (a Task): started on one thread, it is resumed and
// finished on one of the pool's.
weft::Lazy<> heldTask(weft::Event& release) { co_await release.wait(); }

// Moves between the pool's threads a few times, then ends.
weft::Lazy<> churningTask(int hops) {
  for (int i = 0; i < hops; ++i) co_await weft::yield();
}

TEST(TaskRegistryTest, ATaskStartedOnOneThreadAndFinishedOnAnotherIsListedUntilItEnds) {
  if (!WEFT_TASK_TRACKING) GTEST_SKIP() << "root tasks are listed with WEFT_TASK_TRACKING=1";
  weft::ThreadPool pool(2);
  weft::Event release;
  std::atomic<bool> finished{false};
  std::atomic<std::thread::id> finishedOn{};
  // Started here, on the test's thread (queued: it runs on the pool); listed in the ring of
  // the pool's thread where it first waits, released by whichever thread finishes it.
  heldTask(release).via(&pool).start([&](weft::Try<void> r) {
    EXPECT_TRUE(r.hasValue());
    finishedOn = std::this_thread::get_id();
    finished = true;
  });
  std::string text = dump();
  for (int i = 0; i < 10000 && text.find("waiting on Event::wait") == std::string::npos; ++i) {
    std::this_thread::yield();
    text = dump();
  }
  EXPECT_THAT(text, ContainsRegex("task [0-9]+ \\(start\\(\\)\\), age [0-9]+\\.[0-9]{3} s: "
                                  "waiting on Event::wait \\(0x[0-9a-f]+\\)\n"
                                  "  #0 coroutine [^\n]*heldTask"));
  release.set();
  while (!finished) std::this_thread::yield();
  EXPECT_NE(finishedOn.load(), std::this_thread::get_id());
  EXPECT_THAT(dump(), Not(HasSubstr("heldTask")));
}

TEST(TaskRegistryTest, ListsEveryLiveTaskWhileTasksComeAndGoOnSeveralThreadsAndDumpsRun) {
  if (!WEFT_TASK_TRACKING) GTEST_SKIP() << "root tasks are listed with WEFT_TASK_TRACKING=1";
  constexpr int kHeld = 40;      // live for the whole test, started on several threads
  constexpr int kStarters = 3;   // threads that start tasks the pool finishes
  constexpr int kRounds = 300;   // tasks each starter starts, each through a few hops
  constexpr int kDumps = 150;
  weft::ThreadPool pool(2);
  weft::Event release;
  std::atomic<int> heldDone{0};
  std::atomic<int> churnDone{0};
  std::atomic<int> started{0};

  std::vector<std::thread> starters;
  for (int s = 0; s < kStarters; ++s) {
    starters.emplace_back([&, s] {
      for (int i = s; i < kHeld; i += kStarters) {
        heldTask(release).via(&pool).start([&](weft::Try<void> r) {
          EXPECT_TRUE(r.hasValue());
          heldDone.fetch_add(1);
        });
        started.fetch_add(1);
      }
      for (int i = 0; i < kRounds; ++i) {
        if (i % 2 == 0) {
          churningTask(1 + i % 3).via(&pool).start([&](weft::Try<void> r) {
            EXPECT_TRUE(r.hasValue());
            churnDone.fetch_add(1);
          });
        } else {
          // spawn() from outside the pool: queued, registered here, finished there.
          weft::JoinHandle<void> handle = weft::spawn(&pool, churningTask(1 + i % 3));
          weft::syncAwait(std::move(handle));
          churnDone.fetch_add(1);
        }
      }
    });
  }
  while (started.load() < kHeld) std::this_thread::yield();
  // A task is listed from its first wait: until every held task waits on `release`.
  while (numbersOf(dump(), "heldTask").size() < static_cast<std::size_t>(kHeld)) {
    std::this_thread::yield();
  }

  // Each dump lists every held task (by the coroutine it runs), each with a state, and
  // every task it lists has one.
  std::set<std::string> heldNumbers;
  for (int i = 0; i < kDumps && !HasFailure(); ++i) {
    const std::string text = dump();
    const std::size_t tasks = count(text, "\ntask ");
    EXPECT_EQ(tasks, count(text, ": running or runnable\n") + count(text, ": waiting on "))
        << text;
    const std::set<std::string> numbers = numbersOf(text, "heldTask");
    EXPECT_EQ(numbers.size(), static_cast<std::size_t>(kHeld)) << text;
    // A task keeps its number from one dump to the next.
    if (heldNumbers.empty()) heldNumbers = numbers;
    EXPECT_EQ(numbers, heldNumbers);
  }
  for (std::thread& starter : starters) starter.join();
  EXPECT_EQ(churnDone.load(), kStarters * kRounds);

  release.set();
  while (heldDone.load() < kHeld) std::this_thread::yield();
  const std::string after = dump();
  EXPECT_THAT(after, Not(HasSubstr("heldTask")));
  EXPECT_THAT(after, Not(HasSubstr("churningTask")));
}

TEST(TaskRegistryTest, ListsMoreLiveTasksThanAFirstRingHoldsStartedOnOneThread) {
  if (!WEFT_TASK_TRACKING) GTEST_SKIP() << "root tasks are listed with WEFT_TASK_TRACKING=1";
  constexpr int kTasks = 1000;  // several times a thread's first ring (128 slots)
  weft::ThreadPool pool(1);
  weft::Event release;
  std::atomic<int> done{0};
  std::thread starter([&] {
    for (int i = 0; i < kTasks; ++i) {
      heldTask(release).via(&pool).start([&](weft::Try<void>) { done.fetch_add(1); });
      // Short tasks in between, whose slots are taken back and used again.
      weft::syncAwait(churningTask(1), &pool);
    }
  });
  starter.join();
  std::string text = dump();
  for (int i = 0; i < 10000 && count(text, "waiting on Event::wait") < kTasks; ++i) {
    std::this_thread::yield();
    text = dump();
  }
  EXPECT_EQ(numbersOf(text, "heldTask").size(), static_cast<std::size_t>(kTasks));
  release.set();
  while (done.load() < kTasks) std::this_thread::yield();
  EXPECT_THAT(dump(), Not(HasSubstr("heldTask")));
}

TEST(TaskRegistryTest, TasksAndFibersOfAThreadThatExitedStayListedUntilTheyEnd) {
  weft::ThreadPool pool(1);
  weft::Event release;
  weft::Channel<int> channel;
  std::atomic<int> done{0};
  std::optional<weft::FiberFuture<int>> fiber;
  std::thread([&] {
    heldTask(release).via(&pool).start([&](weft::Try<void>) { done.fetch_add(1); });
    weft::SpawnFiberOptions options;
    options.name = "orphan";
    fiber.emplace(weft::spawnFiber(
        &pool, [&] { return weft::await(channel.receive()).value_or(0); }, options));
  }).join();
  // Its thread is gone; both are still listed. Another thread takes its rings over.
  std::string text = dump();
  for (int i = 0; i < 10000 && text.find("parked on Channel::receive") == std::string::npos; ++i) {
    std::this_thread::yield();
    text = dump();
  }
  EXPECT_THAT(text, ContainsRegex("fiber [0-9]+ \"orphan\": parked on Channel::receive"));
  if (WEFT_TASK_TRACKING) {
    EXPECT_THAT(text, HasSubstr("heldTask"));
  }
  std::thread([&] {
    // Claims slots of the rings the first thread left (or new ones): both stay listed.
    weft::syncAwait(churningTask(2), &pool);
    EXPECT_THAT(dump(), ContainsRegex("fiber [0-9]+ \"orphan\""));
  }).join();
  release.set();
  weft::syncAwait(channel.send(7));
  EXPECT_EQ(weft::syncAwait(std::move(*fiber)), 7);
  while (done.load() < 1) std::this_thread::yield();
  const std::string after = dump();
  EXPECT_THAT(after, Not(HasSubstr("orphan")));
  EXPECT_THAT(after, Not(HasSubstr("heldTask")));
}

weft::Lazy<> waitsThenRuns(weft::Event& first, weft::Event& second, std::atomic<int>& stage) {
  stage = 1;
  co_await first.wait();
  stage = 2;
  co_await second.wait();
}

// Keeps its thread busy, without waiting, until `letGo`.
weft::Lazy<> busyUntil(std::atomic<bool>& started, const std::atomic<bool>& letGo) {
  started = true;
  while (!letGo) std::this_thread::yield();
  co_return;
}

TEST(TaskRegistryTest, ATaskIsListedFromItsFirstWaitAndKeepsItsNumber) {
  if (!WEFT_TASK_TRACKING) GTEST_SKIP() << "root tasks are listed with WEFT_TASK_TRACKING=1";
  weft::ThreadPool pool(1);
  weft::Event first, second;
  std::atomic<int> stage{0};
  std::atomic<bool> blocking{false}, letGo{false}, done{false};
  // The pool's thread is kept busy (not waiting), so the task below stays queued.
  auto blocker = weft::spawn(&pool, busyUntil(blocking, letGo));
  while (!blocking) std::this_thread::yield();
  waitsThenRuns(first, second, stage).via(&pool).start([&](weft::Try<void>) { done = true; });

  // Queued, never run: not listed (a task is listed from its first wait).
  EXPECT_THAT(dump(), Not(HasSubstr("waitsThenRuns")));
  letGo = true;
  weft::syncAwait(std::move(blocker));
  std::string text = dump();
  while (text.find("waiting on Event::wait") == std::string::npos) {
    std::this_thread::yield();
    text = dump();
  }
  // It waited: listed, numbered, with an age.
  std::smatch match;
  const std::regex listed(
      "task ([0-9]+) \\(start\\(\\)\\), age [0-9]+\\.[0-9]{3} s: "
      "waiting on Event::wait \\(0x[0-9a-f]+\\)\n"
      "  #0 coroutine [^\n]*waitsThenRuns");
  ASSERT_TRUE(std::regex_search(text, match, listed)) << text;
  const std::string number = match[1];
  first.set();
  while (stage.load() < 2) std::this_thread::yield();
  // Past its first wait (withdrawn before stage 2): any wait seen now is its second.
  text = dump();
  while (text.find("waiting on Event::wait") == std::string::npos) {
    std::this_thread::yield();
    text = dump();
  }
  EXPECT_EQ(numbersOf(text, "waitsThenRuns"), std::set<std::string>{number}) << text;
  second.set();
  while (!done) std::this_thread::yield();
  EXPECT_THAT(dump(), Not(HasSubstr("waitsThenRuns")));
}

}  // namespace
