// The cancellation contracts of docs/concurrency.md, each checked under hundreds of seeded
// interleavings (weft::testing::forEachSeed): Mutex, Semaphore, Channel (send and
// receive), select and TaskGroup.
//
// Each scenario gives up waits with withTimeout (or select's timeoutCase) at whole
// virtual milliseconds, and grants, sends, releases and task ends happen at whole
// milliseconds too. So a wait's timeout and the grant that would end it are often due at
// the same virtual instant, and which runs first (the granter, the timer, the granted
// waiter's resumption) is the seed's choice: the races that real threads produce once in
// a while happen here in every few seeds, and a failing seed replays exactly
// (WEFT_TEST_SEED=<n>). The contract asserted, for every seed:
//  - a wait cancelled after it was granted still gets the lock, permit, value or result
//    (withTimeout then returns it): nothing is lost;
//  - a cancelled wait that was not granted takes nothing, and leaves the queue;
//  - grants follow arrival order where the documentation promises it (FIFO hand-off);
//  - at the end nothing is held that nobody owns (the lock free, every permit back,
//    every completed send received).
//
// Why here and not beside each primitive's tests: only the tests under test/testing/
// link weft::testing, so the layer-by-layer test programs (built for aarch64 under
// qemu, and with the Boost switch core) keep depending on their own layer only; and the
// scenarios share one harness of seeded arrivals and patiences.
//
// How each test was checked against a broken primitive (the break made by hand, the test
// run, the break reverted; "seed n": the first seed that failed, of 0..499):
//  - Mutex: Mutex::cancelWaiter turned a waiter already handed the lock (kDone) into a
//    cancelled one, so that its co_await threw with the lock held by nobody: seed 0 (the
//    lock not free at the end). A LIFO hand-off in unlockSlow: seed 0 (order).
//  - Semaphore: the same in Semaphore::cancelWaiter (a granted permit dropped): seed 2 (a
//    permit missing at the end). A LIFO hand-off in releaseSlow: seed 3 (order).
//  - Channel: ChannelOpAwaiter::cancel turned a completed receive (kDone) into a cancelled
//    one, dropping the value it had been handed: seed 1 of the send test, seed 31 of the
//    receive test (a completed send nobody received). The same for a completed send (the
//    value delivered, the send reporting a timeout): seed 31 of the send test, seed 1 of
//    the receive test (a value received twice, or one received whose send "failed").
//  - select: SelectAwaiter::cancel remembered a cancellation that lost the claim to a
//    case, and await_resume then threw OperationCancelled: seed 0 (a value taken from
//    `in` lost).
//  - TaskGroup: a next() cancelled after a finished task had handed it its result was
//    marked cancelled (the result lost): seed 7. finished() woke the joiners while one
//    task still ran: seed 1 ("join() returned while a task ran").
// The TaskGroup test also found a real bug, at seed 1: a next() cancelled while it waited
// aborted in its awaiter's destructor ("destroyed while suspended ... after its wake-up
// had been claimed"), because await_resume threw before it marked itself resumed. Fixed in
// coro/task_group.h; test/coro/task_group_test.cc has a hand-shake test of it.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/lazy.h"
#include "weft/coro/mutex.h"
#include "weft/coro/select.h"
#include "weft/coro/semaphore.h"
#include "weft/coro/sleep.h"
#include "weft/coro/task_group.h"
#include "weft/coro/try.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/executor_clock.h"
#include "weft/testing/for_each_seed.h"
#include "weft/testing/gtest.h"
#include "weft/testing/simulation.h"

namespace {

using weft::Lazy;
using weft::testing::Simulation;
using Ms = std::chrono::milliseconds;

// Seeds per scenario: each runs in a few tens of microseconds.
constexpr std::uint64_t kSeeds = 500;

// A whole number of milliseconds below `bound`, from the simulation's random stream.
Ms randomMs(Simulation& sim, std::uint64_t bound) {
  return Ms(static_cast<Ms::rep>(sim.randomBelow(bound)));
}

// Virtual time since the simulation started.
Simulation::Duration elapsed() { return weft::ExecutorClock::now() - Simulation::kStartTime; }

// `arrivals` restricted to the ids in `granted`, in arrival order.
std::vector<int> grantedInArrivalOrder(const std::vector<int>& arrivals,
                                       const std::vector<int>& granted) {
  std::vector<int> result;
  for (int id : arrivals) {
    if (std::find(granted.begin(), granted.end(), id) != granted.end()) result.push_back(id);
  }
  return result;
}

// --- Mutex and Semaphore: a lock or permit handed to a waiter whose timeout is due ------

constexpr int kWaiters = 6;
constexpr std::ptrdiff_t kPermits = 2;

// The scenario both share: the first owner holds everything at first and gives it back
// at a random millisecond; six waiters arrive at random milliseconds, each giving up
// after a random patience, and hold what they get for 0 or 1 ms. `acquire(patience)`
// returns whether the waiter got one (false: it timed out, holding nothing); `release()`
// gives one back.
struct Contention {
  struct Outcome {
    int arrival = -1;  // the order its wait began in
    bool granted = false;
    Simulation::Duration at{};  // when it was granted, or gave up
  };
  std::vector<Outcome> outcomes = std::vector<Outcome>(kWaiters);
  int arrivals = 0;
  std::vector<int> grants;  // ids, in the order the waiters resumed with what they got
  int holders = 0;
  int mostHolders = 0;
};

template <class Acquire, class Release>
Lazy<void> contend(Simulation& sim, Contention& c, Acquire acquire, Release release, int id) {
  Contention::Outcome& outcome = c.outcomes[static_cast<std::size_t>(id)];
  co_await weft::sleep(randomMs(sim, 3));
  const Ms patience = randomMs(sim, 4);
  outcome.arrival = c.arrivals++;
  outcome.granted = co_await acquire(patience);
  outcome.at = elapsed();
  if (!outcome.granted) co_return;
  c.grants.push_back(id);
  c.mostHolders = std::max(c.mostHolders, ++c.holders);
  co_await weft::sleep(randomMs(sim, 2));
  --c.holders;
  release();
}

// The waiters' ids in the order their waits began.
std::vector<int> arrivalOrder(const Contention& c) {
  std::vector<int> ids(c.outcomes.size());
  for (std::size_t id = 0; id < c.outcomes.size(); ++id) {
    const int arrival = c.outcomes[id].arrival;
    if (arrival >= 0) ids[static_cast<std::size_t>(arrival)] = static_cast<int>(id);
  }
  return ids;
}

// FIFO hand-off, seen at the granularity of virtual instants (a grant and the granted
// waiter's resumption happen at the same instant; the order of resumptions within one
// instant is the seed's): no waiter is granted at an instant when one that arrived
// before it was still waiting. So for A arriving before B, with B granted at tB: A was
// granted no later than tB, or gave up no later than tB. A LIFO hand-off, or one that
// skipped a waiter, breaks it.
void expectFifo(const Contention& c) {
  for (const Contention::Outcome& b : c.outcomes) {
    if (!b.granted) continue;
    for (const Contention::Outcome& a : c.outcomes) {
      if (a.arrival < b.arrival) {
        EXPECT_LE(a.at, b.at) << "a waiter that arrived earlier (" << a.arrival
                              << (a.granted ? ", granted" : ", gave up")
                              << ") still waited when one that arrived later (" << b.arrival
                              << ") was granted";
      }
    }
  }
}

TEST(MutexTest, ACancelledLockTakesNothingAGrantedOneKeepsTheLockInArrivalOrder) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    weft::Mutex mutex;
    Contention c;
    auto acquire = [&mutex](Ms patience) -> Lazy<bool> {
      try {
        co_await weft::withTimeout(mutex.lock(), patience);  // returns if it was granted
      } catch (const weft::TimeoutError&) {
        co_return false;
      }
      co_return true;
    };
    auto release = [&mutex] { mutex.unlock(); };
    sim.run([&]() -> Lazy<void> {
      co_await mutex.lock();  // the first owner
      std::vector<Lazy<void>> tasks;
      for (int id = 0; id < kWaiters; ++id) {
        tasks.push_back(contend(sim, c, acquire, release, id));
      }
      auto firstOwnerUnlocks = [&]() -> Lazy<void> {  // named: it outlives its coroutine
        co_await weft::sleep(randomMs(sim, 4));
        mutex.unlock();
      };
      tasks.push_back(firstOwnerUnlocks());
      co_await weft::collectAll(std::move(tasks));
    }());
    EXPECT_LE(c.mostHolders, 1);  // mutual exclusion
    // Nothing held by nobody: a granted wait kept the lock (and unlocked it), a timed-out
    // one never had it.
    ASSERT_TRUE(mutex.tryLock()) << "the lock was lost";
    mutex.unlock();
    // FIFO hand-off: one holder at a time, so the order the waiters resumed in is the
    // order they were granted in, which is the order they arrived in.
    EXPECT_EQ(c.grants, grantedInArrivalOrder(arrivalOrder(c), c.grants));
    expectFifo(c);
  });
}

TEST(SemaphoreTest, ACancelledAcquireTakesNothingAGrantedOneKeepsThePermitInArrivalOrder) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    weft::Semaphore slots(kPermits);
    Contention c;
    auto acquire = [&slots](Ms patience) -> Lazy<bool> {
      try {
        co_await weft::withTimeout(slots.acquire(), patience);
      } catch (const weft::TimeoutError&) {
        co_return false;
      }
      co_return true;
    };
    auto release = [&slots] { slots.release(); };
    sim.run([&]() -> Lazy<void> {
      co_await slots.acquire();  // the first owner holds both permits
      co_await slots.acquire();
      std::vector<Lazy<void>> tasks;
      for (int id = 0; id < kWaiters; ++id) {
        tasks.push_back(contend(sim, c, acquire, release, id));
      }
      auto firstOwnerReleases = [&]() -> Lazy<void> {  // named: it outlives its coroutine
        co_await weft::sleep(randomMs(sim, 4));
        if (sim.randomBelow(2) == 0) {
          slots.release(kPermits);  // both at once: to the two oldest waiters
        } else {
          slots.release();
          co_await weft::sleep(randomMs(sim, 2));
          slots.release();
        }
      };
      tasks.push_back(firstOwnerReleases());
      co_await weft::collectAll(std::move(tasks));
    }());
    EXPECT_LE(c.mostHolders, kPermits);
    EXPECT_EQ(slots.available(), kPermits) << "a permit was lost or made up";
    expectFifo(c);  // (two waiters granted at one instant may resume in either order)
  });
}

// --- Channel: sends and receives that give up while the other side arrives ---------------

// Senders 0..5 each send their id once, arriving at random milliseconds with a random
// patience; one receiver takes values with a random patience per receive until every
// sender is done. Capacity 0 (a rendezvous) or 1, as the seed says.
TEST(ChannelTest, ACancelledSendDeliversNothingACompletedOneIsReceivedInArrivalOrder) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    weft::Channel<int> channel(static_cast<std::size_t>(sim.randomBelow(2)));
    std::vector<int> arrivals, sent, received;
    int sendersDone = 0;
    auto sender = [&](int id) -> Lazy<void> {
      co_await weft::sleep(randomMs(sim, 4));
      const Ms patience = randomMs(sim, 3);
      arrivals.push_back(id);
      try {
        co_await weft::withTimeout(channel.send(id), patience);
        sent.push_back(id);
      } catch (const weft::TimeoutError&) {
      }
      ++sendersDone;
    };
    auto receiver = [&]() -> Lazy<void> {
      while (sendersDone < kWaiters) {
        bool gaveUp = false;
        try {
          std::optional<int> value =
              co_await weft::withTimeout(channel.receive(), Ms(1) + randomMs(sim, 3));
          received.push_back(value.value());
        } catch (const weft::TimeoutError&) {
          gaveUp = true;
        }
        if (gaveUp) co_await weft::sleep(randomMs(sim, 2));  // away a while: senders queue
      }
    };
    sim.run([&]() -> Lazy<void> {
      std::vector<Lazy<void>> tasks;
      for (int id = 0; id < kWaiters; ++id) tasks.push_back(sender(id));
      tasks.push_back(receiver());
      co_await weft::collectAll(std::move(tasks));
    }());
    while (std::optional<int> value = channel.tryReceive()) received.push_back(*value);
    // Every completed send was received once, and nothing else: a send that timed out
    // delivered nothing, a value taken by a receive that timed out was not lost.
    std::vector<int> sortedSent = sent, sortedReceived = received;
    std::sort(sortedSent.begin(), sortedSent.end());
    std::sort(sortedReceived.begin(), sortedReceived.end());
    EXPECT_EQ(sortedReceived, sortedSent);
    // First come, first served: values arrive in the order their senders began to send.
    EXPECT_EQ(received, grantedInArrivalOrder(arrivals, received));
  });
}

// One sender sends 0, 1, 2... with a random patience per send, until six receivers, which
// arrive at random milliseconds with random patiences, are done. Capacity 0 or 1.
TEST(ChannelTest, ACancelledReceiveTakesNothingACompletedOneGetsItsValueInArrivalOrder) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    weft::Channel<int> channel(static_cast<std::size_t>(sim.randomBelow(2)));
    std::vector<int> arrivals;                    // receiver ids
    std::vector<std::pair<int, int>> receivedBy;  // (value, receiver id)
    std::vector<int> sent;
    int receiversDone = 0;
    auto receiver = [&](int id) -> Lazy<void> {
      co_await weft::sleep(randomMs(sim, 4));
      const Ms patience = randomMs(sim, 3);
      arrivals.push_back(id);
      try {
        std::optional<int> value = co_await weft::withTimeout(channel.receive(), patience);
        receivedBy.emplace_back(value.value(), id);
      } catch (const weft::TimeoutError&) {
      }
      ++receiversDone;
    };
    auto sender = [&]() -> Lazy<void> {
      int next = 0;
      while (receiversDone < kWaiters) {
        bool gaveUp = false;
        try {
          co_await weft::withTimeout(channel.send(next), Ms(1) + randomMs(sim, 3));
          sent.push_back(next++);
        } catch (const weft::TimeoutError&) {
          gaveUp = true;
        }
        if (gaveUp) co_await weft::sleep(randomMs(sim, 2));  // away a while: receivers queue
      }
    };
    sim.run([&]() -> Lazy<void> {
      std::vector<Lazy<void>> tasks;
      for (int id = 0; id < kWaiters; ++id) tasks.push_back(receiver(id));
      tasks.push_back(sender());
      co_await weft::collectAll(std::move(tasks));
    }());
    std::vector<int> values;
    for (const auto& [value, id] : receivedBy) values.push_back(value);
    while (std::optional<int> value = channel.tryReceive()) values.push_back(*value);
    std::sort(values.begin(), values.end());
    EXPECT_EQ(values, sent);  // each completed send reached exactly one receiver, or the buffer
    // First come, first served: the receivers that got values got them in arrival order
    // (the sender sends increasing values one at a time).
    std::sort(receivedBy.begin(), receivedBy.end());
    std::vector<int> servedOrder;
    for (const auto& [value, id] : receivedBy) servedOrder.push_back(id);
    EXPECT_EQ(servedOrder, grantedInArrivalOrder(arrivals, servedOrder));
  });
}

// --- select: exactly one case, or none when it gives up --------------------------------

constexpr int kValues = 5;

// A selector loops on select(in.receiveCase(), out.sendCase(next)), giving up each time
// after a random patience: by a withTimeout around it, or by a timeoutCase in it, as the
// seed says. A producer sends 0..4 into `in`, a consumer takes five values from `out`,
// each with patiences of its own (1 to 3 ms: every round moves time on) and pauses of 0
// to 2 ms before each attempt, during which the select waits for them. Exactly one case
// completes per select; one that gives up transfers nothing.
TEST(SelectTest, AGivenUpSelectTransfersNothingAndOneThatCompletesACaseKeepsIt) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    weft::Channel<int> in, out;
    std::vector<int> produced, selectedIn, selectedOut, consumed;
    bool producerDone = false, consumerDone = false;
    int timeoutCases = 0;
    auto producer = [&]() -> Lazy<void> {
      for (int v = 0; v < kValues;) {
        co_await weft::sleep(randomMs(sim, 3));  // away a while: the select waits for it
        try {
          co_await weft::withTimeout(in.send(v), Ms(1) + randomMs(sim, 3));
          produced.push_back(v++);
        } catch (const weft::TimeoutError&) {
        }
      }
      producerDone = true;
    };
    auto consumer = [&]() -> Lazy<void> {
      while (consumed.size() < static_cast<std::size_t>(kValues)) {
        co_await weft::sleep(randomMs(sim, 3));
        try {
          std::optional<int> v =
              co_await weft::withTimeout(out.receive(), Ms(1) + randomMs(sim, 3));
          consumed.push_back(v.value());
        } catch (const weft::TimeoutError&) {
        }
      }
      consumerDone = true;
    };
    auto selector = [&]() -> Lazy<void> {
      int next = 0;  // what the send case offers; moves on only once it was sent
      while (!producerDone || !consumerDone) {
        const Ms patience = Ms(1) + randomMs(sim, 3);
        if (sim.randomBelow(2) == 0) {
          auto once = [&]() -> Lazy<void> {
            auto r = co_await weft::select(in.receiveCase(), out.sendCase(next));
            if (r.index() == 0) {
              selectedIn.push_back(std::get<0>(r).value());
            } else {
              selectedOut.push_back(next++);
            }
          };
          try {
            co_await weft::withTimeout(once(), patience);
          } catch (const weft::TimeoutError&) {
          }
        } else {
          auto r = co_await weft::select(in.receiveCase(), out.sendCase(next),
                                         weft::timeoutCase(patience));
          if (r.index() == 0) selectedIn.push_back(std::get<0>(r).value());
          if (r.index() == 1) selectedOut.push_back(next++);
          if (r.index() == 2) ++timeoutCases;
        }
      }
    };
    sim.run(
        [&]() -> Lazy<void> { co_await weft::collectAll(producer(), consumer(), selector()); }());
    EXPECT_EQ(selectedIn, produced);   // every completed send into `in` was selected, once
    EXPECT_EQ(consumed, selectedOut);  // every value taken from `out` was sent by a case
    std::vector<int> expected;
    for (int v = 0; v < kValues; ++v) expected.push_back(v);
    EXPECT_EQ(produced, expected);
    EXPECT_EQ(consumed, expected);
  });
}

// --- TaskGroup: cancellation reaches every task; join waits for all; next() loses nothing

constexpr int kTasks = 6;

// Six tasks end after random delays (0 to 4 ms); two consumers take results with next()
// under random patiences; at a random millisecond the group is cancelled, by
// requestCancellation() or by the cancellation of a coroutine waiting in join() (a
// withTimeout around it), as the seed says, and then one more task is spawned. Tasks due
// before the cancellation end with their value, tasks due after it end with
// OperationCancelled at exactly its instant (due at that instant: either, as the seed
// says), the late task starts cancelled, join() returns only when no task runs, and
// next() hands out each result once.
TEST(TaskGroupTest, CancellationEndsEveryTaskJoinWaitsForAllAndNextLosesNothing) {
  weft::testing::forEachSeed(kSeeds, [](Simulation& sim) {
    struct End {
      bool ended = false;
      bool cancelled = false;
      Simulation::Duration at{};
    };
    std::vector<End> ends(kTasks + 1);  // the last: the task spawned after the cancellation
    std::vector<Ms> delays;
    for (int i = 0; i < kTasks; ++i) delays.push_back(randomMs(sim, 5));
    const Ms cancelAt = randomMs(sim, 5);
    const bool byJoiner = sim.randomBelow(2) == 0;
    std::vector<int> handedOut;  // per next() result: the task's id, or -1: cancelled
    std::size_t runningWhenJoinEnded = 0;
    bool lateSpawned = false;
    sim.run([&]() -> Lazy<void> {
      weft::TaskGroup<int> group(co_await weft::currentExecutor());
      auto task = [&](int id, Ms delay) -> Lazy<int> {
        End& end = ends[static_cast<std::size_t>(id)];
        try {
          co_await weft::sleep(delay);
        } catch (const weft::OperationCancelled&) {
          end = {true, true, elapsed()};
          throw;
        }
        end = {true, false, elapsed()};
        co_return id;
      };
      for (int i = 0; i < kTasks; ++i) group.spawn(task(i, delays[static_cast<std::size_t>(i)]));
      auto consumer = [&]() -> Lazy<void> {
        for (;;) {
          try {
            std::optional<weft::Try<int>> result =
                co_await weft::withTimeout(group.next(), randomMs(sim, 3));
            if (!result) co_return;
            handedOut.push_back(result->hasValue() ? result->value() : -1);
          } catch (const weft::TimeoutError&) {
          }
        }
      };
      auto canceller = [&]() -> Lazy<void> {
        if (byJoiner) {
          try {
            co_await weft::withTimeout(group.join(), cancelAt);
          } catch (const weft::TimeoutError&) {
          } catch (const weft::OperationCancelled&) {  // a cancelled task's result
          }
          runningWhenJoinEnded = group.running();
        } else {
          co_await weft::sleep(cancelAt);
          group.requestCancellation();
        }
        if (group.isCancellationRequested()) {
          lateSpawned = true;
          group.spawn(task(kTasks, Ms(1)));
        }
      };
      co_await weft::collectAll(consumer(), consumer(), canceller());
      try {
        co_await group.join();
      } catch (const weft::OperationCancelled&) {  // a result no next() took
      }
      EXPECT_EQ(group.running(), 0u);
    }());
    // Cancelling the joiner cancelled the group, and join() still waited for every task.
    EXPECT_EQ(runningWhenJoinEnded, 0u) << "join() returned while a task ran";
    std::vector<int> expected;  // what next() should hand out: -1 for a cancelled task
    for (int i = 0; i < kTasks; ++i) {
      const End& end = ends[static_cast<std::size_t>(i)];
      const Ms delay = delays[static_cast<std::size_t>(i)];
      SCOPED_TRACE("task " + std::to_string(i));
      ASSERT_TRUE(end.ended);
      if (delay < cancelAt) {
        EXPECT_FALSE(end.cancelled);
      } else if (delay > cancelAt) {
        EXPECT_TRUE(end.cancelled);
      }
      const Simulation::Duration endsAt = end.cancelled ? cancelAt : delay;
      EXPECT_EQ(end.at, endsAt);
      expected.push_back(end.cancelled ? -1 : i);
    }
    if (lateSpawned) {
      EXPECT_TRUE(ends[kTasks].ended);
      EXPECT_TRUE(ends[kTasks].cancelled) << "a task spawned after the cancellation ran";
    }
    // Each result was handed out once (a result that no next() took was discarded by a
    // join(), as documented; with requestCancellation() the consumers take them all but
    // the late task's, which may finish after they saw nothing running).
    std::vector<int> withLate = expected;
    if (lateSpawned) withLate.push_back(-1);
    std::sort(handedOut.begin(), handedOut.end());
    std::sort(expected.begin(), expected.end());
    std::sort(withLate.begin(), withLate.end());
    if (byJoiner) {
      // No result twice, none made up (a join racing the consumers may discard some).
      EXPECT_TRUE(
          std::includes(withLate.begin(), withLate.end(), handedOut.begin(), handedOut.end()));
    } else {
      EXPECT_TRUE(handedOut == expected || handedOut == withLate);
    }
  });
}

}  // namespace
