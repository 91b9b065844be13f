#include "weft/testing/simulation.h"

#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/select.h"
#include "weft/coro/sleep.h"
#include "weft/coro/spawn.h"
#include "weft/coro/task_group.h"
#include "weft/coro/with_timeout.h"
#include "weft/coro/yield.h"
#include "weft/executors/executor_clock.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "weft/testing/deadlock.h"
#include "weft/testing/gtest.h"

namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using weft::Lazy;
using weft::testing::Deadlock;
using weft::testing::Simulation;

// Virtual time since the start of the simulation running this coroutine.
Simulation::Duration elapsed() { return weft::ExecutorClock::now() - Simulation::kStartTime; }

long long elapsedMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(elapsed()).count();
}

TEST(SimulationTest, ThirtySecondTimeoutEndsAtExactlyThirtyVirtualSeconds) {
  Simulation sim(1);
  EXPECT_EQ(sim.now(), Simulation::kStartTime);
  auto slowFetch = []() -> Lazy<int> {
    co_await weft::sleep(1h);  // a peer that never answers in time
    co_return 1;
  };
  // Measured by the simulation's clock only: no real time is waited for.
  EXPECT_THROW(sim.run(weft::withTimeout(slowFetch(), 30s)), weft::TimeoutError);
  EXPECT_EQ(sim.elapsed(), 30s);
  EXPECT_EQ(sim.timerCount(), 0u);  // the hour-long sleep was withdrawn with the work
}

// The example of docs/testing.md: a client that retries a request with a timeout and a
// backoff, and a fake backend that answers after delays the test chooses.
struct SlowBackend {
  std::vector<std::chrono::milliseconds> delays;  // one per call
  int calls = 0;
  Lazy<std::string> get() {
    const std::chrono::milliseconds delay = delays.at(calls++);
    co_await weft::sleep(delay);
    co_return "ok";
  }
};

Lazy<std::string> fetchWithRetry(SlowBackend& backend) {
  std::chrono::milliseconds backoff = 100ms;
  for (int attempt = 1;; ++attempt) {
    try {
      co_return co_await weft::withTimeout(backend.get(), 2s);
    } catch (const weft::TimeoutError&) {
      if (attempt == 3) throw;
    }
    co_await weft::sleep(backoff);
    backoff *= 2;
  }
}

TEST(SimulationTest, RetryGivesUpAfterThreeTimeoutsAtAnExactTime) {
  Simulation sim(0);
  SlowBackend backend{{10s, 10s, 10s}};
  EXPECT_THROW(sim.run(fetchWithRetry(backend)), weft::TimeoutError);
  EXPECT_EQ(backend.calls, 3);
  EXPECT_EQ(sim.elapsed(), 2s + 100ms + 2s + 200ms + 2s);
}

TEST(SimulationTest, RetrySucceedsOnTheThirdAttempt) {
  Simulation sim(0);
  SlowBackend backend{{5s, 3s, 500ms}};
  EXPECT_EQ(sim.run(fetchWithRetry(backend)), "ok");
  EXPECT_EQ(sim.elapsed(), 2s + 100ms + 2s + 200ms + 500ms);
}

TEST(SimulationTest, TasksReadTheVirtualClock) {
  Simulation sim(2);
  std::vector<Simulation::Duration> seen;
  sim.run([&]() -> Lazy<void> {
    seen.push_back(elapsed());
    co_await weft::sleep(1500ms);
    seen.push_back(elapsed());
    co_await weft::sleepUntil(weft::ExecutorClock::now() + 2s);
    seen.push_back(elapsed());
    co_await weft::sleep(0s);  // does not suspend, and time does not move
    seen.push_back(elapsed());
  }());
  EXPECT_EQ(seen, (std::vector<Simulation::Duration>{0s, 1500ms, 3500ms, 3500ms}));
  EXPECT_EQ(sim.elapsed(), 3500ms);
  // Outside the simulation's run, the thread reads the real clock again.
  EXPECT_EQ(weft::ExecutorClock::virtualTime(), nullptr);
}

TEST(SimulationTest, TimeDoesNotPassWhileAnythingCanRun) {
  Simulation sim(3);
  long long yielderDoneAtMs = -1;
  long long sleeperWokeAtMs = -1;
  bool yielderDoneFirst = false;
  sim.run([&]() -> Lazy<void> {
    auto yielder = [&]() -> Lazy<void> {
      for (int i = 0; i < 1000; ++i) co_await weft::yield();
      yielderDoneAtMs = elapsedMs();
    };
    auto sleeper = [&]() -> Lazy<void> {
      co_await weft::sleep(1ms);
      sleeperWokeAtMs = elapsedMs();
      yielderDoneFirst = yielderDoneAtMs >= 0;
    };
    co_await weft::collectAll(yielder(), sleeper());
  }());
  EXPECT_EQ(yielderDoneAtMs, 0);  // 1000 steps, no time
  EXPECT_EQ(sleeperWokeAtMs, 1);
  EXPECT_TRUE(yielderDoneFirst);  // the clock moved only once nothing else could run
}

// Sleepers record their name and wake-up time.
Lazy<void> sleeper(char name, Simulation::Duration d, std::string& order,
                   std::vector<Simulation::Duration>& times) {
  co_await weft::sleep(d);
  order += name;
  times.push_back(elapsed());
}

TEST(SimulationTest, EqualDeadlinesWakeTogetherInAnOrderTheSeedPicks) {
  std::set<std::string> orders;
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    std::string order;
    std::vector<Simulation::Duration> times;
    auto runOnce = [&](std::uint64_t s) {
      order.clear();
      times.clear();
      Simulation sim(s);
      sim.run([&]() -> Lazy<void> {
        weft::TaskGroup<> group(co_await weft::currentExecutor());
        group.spawn(sleeper('c', 20ms, order, times));
        group.spawn(sleeper('a', 10ms, order, times));
        group.spawn(sleeper('b', 10ms, order, times));
        group.spawn(sleeper('d', 10ms, order, times));
        co_await group.join();
      }());
    };
    runOnce(seed);
    // The three 10 ms sleepers wake at 10 ms, in some order, all before the 20 ms one.
    ASSERT_EQ(order.size(), 4u);
    EXPECT_EQ(order.back(), 'c') << "seed " << seed;
    EXPECT_EQ(std::multiset<char>(order.begin(), order.begin() + 3),
              (std::multiset<char>{'a', 'b', 'd'}));
    EXPECT_EQ(times, (std::vector<Simulation::Duration>{10ms, 10ms, 10ms, 20ms}));
    orders.insert(order);
    const std::string first = order;
    runOnce(seed);
    EXPECT_EQ(order, first) << "seed " << seed << " did not replay its order";
  }
  // Equal deadlines have no order of their own: the seeds try several.
  EXPECT_GT(orders.size(), 1u);
}

// One run of a task group whose tasks sleep for random times (drawn from the seed) and
// record what they do and when.
std::vector<std::string> taskGroupTrace(std::uint64_t seed) {
  Simulation sim(seed);
  std::vector<std::string> trace;
  auto worker = [&](int id) -> Lazy<void> {
    for (int round = 0; round < 3; ++round) {
      co_await weft::sleep(std::chrono::milliseconds(10 * sim.randomBelow(3)));
      trace.push_back(std::to_string(id) + "@" + std::to_string(elapsedMs()));
    }
  };
  sim.run([&]() -> Lazy<void> {
    weft::TaskGroup<> group(co_await weft::currentExecutor());
    for (int id = 0; id < 5; ++id) group.spawn(worker(id));
    co_await group.join();
  }());
  return trace;
}

TEST(SimulationTest, SameSeedGivesTheSameTraceAndSeedsGiveDifferentOnes) {
  std::set<std::vector<std::string>> traces;
  for (std::uint64_t seed = 0; seed < 1000; ++seed) {
    std::vector<std::string> first = taskGroupTrace(seed);
    ASSERT_EQ(first.size(), 15u);
    ASSERT_EQ(taskGroupTrace(seed), first) << "seed " << seed << " did not replay";
    traces.insert(std::move(first));
  }
  EXPECT_GE(traces.size(), 2u);
}

TEST(SimulationTest, ReportsADeadlockWithTheTaskDumpInsteadOfHanging) {
  Simulation sim(4);
  weft::Channel<int> toLeft;
  weft::Channel<int> toRight;
  bool leftUnwound = false;
  bool rightUnwound = false;
  // Each waits for the other to send first.
  auto left = [&]() -> Lazy<void> {
    try {
      std::optional<int> v = co_await toLeft.receive();
      co_await toRight.send(*v);
    } catch (const weft::OperationCancelled&) {
      leftUnwound = true;
      throw;
    }
  };
  auto right = [&]() -> Lazy<void> {
    try {
      std::optional<int> v = co_await toRight.receive();
      co_await toLeft.send(*v);
    } catch (const weft::OperationCancelled&) {
      rightUnwound = true;
      throw;
    }
  };
  try {
    sim.run([&]() -> Lazy<void> {
      co_await weft::sleep(5s);  // the deadlock comes at 5 s, once the timer is gone
      weft::TaskGroup<> group(co_await weft::currentExecutor());
      group.spawn(left());
      group.spawn(right());
      co_await group.join();
    }());
    ADD_FAILURE() << "no Deadlock";
  } catch (const Deadlock& deadlock) {
    EXPECT_THAT(deadlock.what(), HasSubstr("deadlock"));
    EXPECT_THAT(deadlock.what(), HasSubstr("WEFT_TEST_SEED=4"));
    EXPECT_EQ(deadlock.seed(), 4u);
    EXPECT_EQ(deadlock.elapsed(), 5s);
    EXPECT_THAT(deadlock.taskDump(), HasSubstr("weft: "));
#if WEFT_TASK_TRACKING
    // With task tracking the dump says what each task waits on.
    EXPECT_THAT(deadlock.taskDump(), HasSubstr("Channel::receive"));
#endif
    EXPECT_THAT(deadlock.what(), ::testing::Not(HasSubstr("leaked")));
  }
  // The simulation cancelled the tasks so that they unwound.
  EXPECT_TRUE(leftUnwound);
  EXPECT_TRUE(rightUnwound);
  EXPECT_THROW(sim.run([]() -> Lazy<void> { co_return; }()), std::logic_error);
}

TEST(SimulationTest, SelectTimesOutInVirtualTime) {
  Simulation sim(5);
  sim.run([&]() -> Lazy<void> {
    weft::Channel<int> quiet;
    auto r = co_await weft::select(quiet.receiveCase(), weft::timeoutCase(5s));
    EXPECT_EQ(r.index(), 1u);
    EXPECT_EQ(elapsed(), 5s);

    weft::Channel<int> late;
    auto producer = [&]() -> Lazy<void> {
      co_await weft::sleep(2s);
      co_await late.send(42);
    };
    auto consumer = [&]() -> Lazy<void> {
      auto got = co_await weft::select(late.receiveCase(), weft::timeoutCase(3s));
      EXPECT_EQ(got.index(), 0u);
      EXPECT_EQ(*std::get<0>(got), 42);
      EXPECT_EQ(elapsed(), 7s);  // the value came at 5 s + 2 s, before the 3 s were up
    };
    co_await weft::collectAll(producer(), consumer());
  }());
  EXPECT_EQ(sim.timerCount(), 0u);
}

TEST(SimulationTest, ChannelsHandValuesOverInOrderAcrossTime) {
  Simulation sim(6);
  std::vector<std::pair<int, long long>> received;
  sim.run([&]() -> Lazy<void> {
    weft::Channel<int> channel(2);
    auto producer = [&]() -> Lazy<void> {
      for (int i = 0; i < 5; ++i) {
        co_await weft::sleep(100ms);
        co_await channel.send(i);
      }
      channel.close();
    };
    auto consumer = [&]() -> Lazy<void> {
      while (std::optional<int> v = co_await channel.receive()) {
        received.emplace_back(*v, elapsedMs());
      }
    };
    co_await weft::collectAll(producer(), consumer());
  }());
  EXPECT_EQ(received, (std::vector<std::pair<int, long long>>{
                          {0, 100}, {1, 200}, {2, 300}, {3, 400}, {4, 500}}));
}

TEST(SimulationTest, MutexHoldersTakeTurnsInVirtualTime) {
  Simulation sim(7);
  std::vector<long long> entered;
  sim.run([&]() -> Lazy<void> {
    weft::Mutex mutex;
    auto holder = [&]() -> Lazy<void> {
      weft::ScopedLock lock = co_await mutex.scopedLock();
      entered.push_back(elapsedMs());
      co_await weft::sleep(1s);
    };
    co_await weft::collectAll(holder(), holder(), holder());
  }());
  EXPECT_EQ(entered, (std::vector<long long>{0, 1000, 2000}));
  EXPECT_EQ(sim.elapsed(), 3s);
}

TEST(SimulationTest, AdvanceStepsTimeByHand) {
  Simulation sim(8);
  std::vector<long long> ticks;
  // A named lambda: the coroutine refers to its captures through it, after spawn().
  auto ticker = [&]() -> Lazy<void> {
    for (int i = 0; i < 5; ++i) {
      co_await weft::sleep(1s);
      ticks.push_back(elapsedMs());
    }
  };
  sim.spawn(ticker());
  sim.runUntilBlocked();
  EXPECT_TRUE(ticks.empty());
  EXPECT_EQ(sim.timerCount(), 1u);
  sim.advance(2500ms);
  EXPECT_EQ(ticks, (std::vector<long long>{1000, 2000}));
  EXPECT_EQ(sim.elapsed(), 2500ms);
  sim.advance(500ms);  // a deadline exactly at the end of the step fires
  EXPECT_EQ(ticks, (std::vector<long long>{1000, 2000, 3000}));
  sim.advance(10s);
  EXPECT_EQ(ticks, (std::vector<long long>{1000, 2000, 3000, 4000, 5000}));
  EXPECT_EQ(sim.elapsed(), 13s);
  EXPECT_EQ(sim.timerCount(), 0u);
  EXPECT_THROW(sim.advance(-1s), std::invalid_argument);
}

TEST(SimulationTest, RunsFibersOnItsThreadInVirtualTime) {
  Simulation sim(9);
  const int v = sim.run([&]() -> Lazy<int> {
    auto future = weft::spawnFiber(&sim, [] {
      weft::await(weft::sleep(2s));
      return elapsedMs();
    });
    co_return static_cast<int>(co_await std::move(future));
  }());
  EXPECT_EQ(v, 2000);
  EXPECT_EQ(sim.elapsed(), 2s);
}

TEST(SimulationTest, RunsDetachedSpawnsAndJoinHandles) {
  Simulation sim(10);
  const int sum = sim.run([&]() -> Lazy<int> {
    auto handle = weft::spawn(&sim, []() -> Lazy<int> {
      co_await weft::sleep(3s);
      co_return 40;
    }());
    co_return co_await std::move(handle) + 2;
  }());
  EXPECT_EQ(sum, 42);
  EXPECT_EQ(sim.elapsed(), 3s);
}

TEST(SimulationTest, AFailedSpawnedTaskIsRethrownByRun) {
  Simulation sim(11);
  sim.spawn([]() -> Lazy<void> {
    co_await weft::sleep(1s);
    throw std::runtime_error("background failure");
  }());
  EXPECT_THROW(sim.run([]() -> Lazy<void> { co_await weft::sleep(2s); }()), std::runtime_error);
  // Reported once: the next run is clean.
  EXPECT_NO_THROW(sim.run([]() -> Lazy<void> { co_return; }()));
}

TEST(SimulationTest, ReportsWorkStillAliveWhenItEndsAndStopsIt) {
  bool stopped = false;
  auto forgotten = [&]() -> Lazy<void> {
    try {
      co_await weft::sleep(1h);
    } catch (const weft::OperationCancelled&) {
      stopped = true;
      throw;
    }
  };
  EXPECT_NONFATAL_FAILURE(
      {
        Simulation sim(12);
        sim.spawn(forgotten());
        sim.runUntilBlocked();
      },
      "work still alive");
  EXPECT_TRUE(stopped);
}

TEST(SimulationTest, ShutdownStopsSleepersWithoutALeakReport) {
  Simulation sim(13);
  bool shutDown = false;
  // Not cancellable (no token of the simulation's): only the shutdown of its timer ends it.
  auto sleeper = [&]() -> Lazy<void> {
    try {
      co_await weft::sleep(1h);
    } catch (const weft::ExecutorShutDown&) {
      shutDown = true;
    }
  };
  weft::spawn(&sim, sleeper()).detach();
  sim.runUntilBlocked();
  EXPECT_EQ(sim.timerCount(), 1u);
  sim.shutdown();
  EXPECT_TRUE(shutDown);
  EXPECT_EQ(sim.timerCount(), 0u);
  EXPECT_THROW(sim.run([]() -> Lazy<void> { co_return; }()), weft::ExecutorShutDown);
  sim.shutdown();  // idempotent
}

TEST(SimulationTest, RefusesToBeDrivenFromInsideItself) {
  Simulation sim(14);
  bool refused = false;
  sim.run([&]() -> Lazy<void> {
    EXPECT_EQ(Simulation::current(), &sim);
    EXPECT_TRUE(sim.currentThreadInExecutor());
    try {
      sim.runUntilBlocked();
    } catch (const std::logic_error&) {
      refused = true;
    }
    co_return;
  }());
  EXPECT_TRUE(refused);
  EXPECT_EQ(Simulation::current(), nullptr);
  EXPECT_FALSE(sim.currentThreadInExecutor());
}

TEST(SimulationTest, SelectChoosesAmongReadyCasesAsTheSeedSays) {
  // Two ready channels: select picks one at random, from the seed's generator.
  auto choices = [](std::uint64_t seed) {
    Simulation sim(seed);
    return sim.run([]() -> Lazy<std::string> {
      weft::Channel<int> a(8), b(8);
      std::string picked;
      for (int i = 0; i < 8; ++i) {
        co_await a.send(i);
        co_await b.send(i);
        auto r = co_await weft::select(a.receiveCase(), b.receiveCase());
        picked += r.index() == 0 ? 'a' : 'b';
      }
      co_return picked;
    }());
  };
  std::set<std::string> seen;
  for (std::uint64_t seed = 0; seed < 16; ++seed) {
    const std::string first = choices(seed);
    EXPECT_EQ(choices(seed), first) << "seed " << seed;
    seen.insert(first);
  }
  EXPECT_GT(seen.size(), 1u);
}

}  // namespace
