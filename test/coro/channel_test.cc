#include "weft/coro/channel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/async_generator.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/select.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/cancellable_start.h"
#include "test/support/counted.h"
#include "test/support/fiber_wait_cancellation.h"
#include "test/support/manual_executor.h"
#include "test/support/pool_threads.h"
#include "test/support/thread_states.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualExecutor;
using test::Watchdog;

// Starts `lazy` detached on this thread; `*done` becomes true when it finishes and
// `*error` holds what it threw.
template <class T>
void startDetached(Lazy<T> lazy, bool* done, std::exception_ptr* error = nullptr) {
  std::move(lazy).start([done, error](Try<T> result) {
    *done = true;
    if (error != nullptr && result.hasException()) *error = result.exception();
  });
}

Lazy<void> sendOne(Channel<int>& ch, int value) { co_await ch.send(value); }

Lazy<void> receiveInto(Channel<int>& ch, std::optional<int>* out) { *out = co_await ch.receive(); }

TEST(ChannelTest, UnbufferedSendWaitsForAReceiver) {
  Channel<int> ch;
  bool sent = false;
  startDetached(sendOne(ch, 7), &sent);
  EXPECT_FALSE(sent) << "an unbuffered send must wait for a receiver";
  EXPECT_EQ(ch.size(), 0u);
  std::optional<int> got;
  bool received = false;
  startDetached(receiveInto(ch, &got), &received);
  EXPECT_TRUE(received);
  EXPECT_TRUE(sent) << "taking the value completes the send";
  EXPECT_EQ(got, 7);
}

TEST(ChannelTest, UnbufferedReceiveWaitsForASender) {
  Channel<int> ch;
  std::optional<int> got;
  bool received = false;
  startDetached(receiveInto(ch, &got), &received);
  EXPECT_FALSE(received);
  bool sent = false;
  startDetached(sendOne(ch, 9), &sent);
  EXPECT_TRUE(sent);
  EXPECT_TRUE(received);
  EXPECT_EQ(got, 9);
}

TEST(ChannelTest, UnbufferedTrySendNeedsAWaitingReceiver) {
  Channel<int> ch;
  EXPECT_FALSE(ch.trySend(1));
  EXPECT_FALSE(ch.tryReceive().has_value());
  std::optional<int> got;
  bool received = false;
  startDetached(receiveInto(ch, &got), &received);
  EXPECT_TRUE(ch.trySend(2));
  EXPECT_TRUE(received);
  EXPECT_EQ(got, 2);
}

TEST(ChannelTest, BufferedSendWaitsOnlyWhenFull) {
  Channel<int> ch(2);
  EXPECT_EQ(ch.capacity(), 2u);
  bool first = false, second = false, third = false;
  startDetached(sendOne(ch, 1), &first);
  startDetached(sendOne(ch, 2), &second);
  EXPECT_TRUE(first);
  EXPECT_TRUE(second);
  EXPECT_EQ(ch.size(), 2u);
  startDetached(sendOne(ch, 3), &third);
  EXPECT_FALSE(third) << "the buffer is full";
  EXPECT_EQ(ch.tryReceive(), 1);
  EXPECT_TRUE(third) << "a receive makes room for the waiting sender";
  EXPECT_EQ(ch.size(), 2u);
  EXPECT_EQ(ch.tryReceive(), 2);
  EXPECT_EQ(ch.tryReceive(), 3);
  EXPECT_FALSE(ch.tryReceive().has_value());
}

TEST(ChannelTest, WaitingSendersAreServedInArrivalOrder) {
  Channel<int> ch;
  bool done[5] = {};
  for (int i = 0; i < 5; ++i) startDetached(sendOne(ch, i), &done[i]);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(done[i]);
    EXPECT_EQ(ch.tryReceive(), i);
    EXPECT_TRUE(done[i]);
    if (i + 1 < 5) {
      EXPECT_FALSE(done[i + 1]);
    }
  }
}

TEST(ChannelTest, WaitingReceiversAreServedInArrivalOrder) {
  Channel<int> ch;
  std::optional<int> got[3];
  bool done[3] = {};
  for (int i = 0; i < 3; ++i) startDetached(receiveInto(ch, &got[i]), &done[i]);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(ch.trySend(10 + i));
    EXPECT_TRUE(done[i]);
    EXPECT_EQ(got[i], 10 + i);
  }
}

TEST(ChannelTest, UnboundedChannelNeverBlocksASender) {
  Channel<int> ch(Channel<int>::kUnbounded);
  EXPECT_EQ(ch.capacity(), Channel<int>::kUnbounded);
  syncAwait([&]() -> Lazy<void> {
    for (int i = 0; i < 10000; ++i) co_await ch.send(i);
  }());
  EXPECT_EQ(ch.size(), 10000u);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(ch.tryReceive(), i);
  EXPECT_FALSE(ch.tryReceive().has_value());
}

TEST(ChannelTest, UnboundedChannelKeepsOrderAcrossGrowthWithWrappedRing) {
  Channel<int> ch(Channel<int>::kUnbounded);
  int next = 0, expected = 0;
  // Interleave sends and receives so the ring wraps before it grows.
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(ch.trySend(next++));
    for (int i = 0; i < 5; ++i) ASSERT_EQ(ch.tryReceive(), expected++);
  }
  while (std::optional<int> v = ch.tryReceive()) ASSERT_EQ(*v, expected++);
  EXPECT_EQ(expected, next);
}

TEST(ChannelTest, CloseWakesEveryWaitingReceiverWithAnEmptyOptional) {
  Channel<int> ch;
  std::optional<int> got[4] = {1, 1, 1, 1};
  bool done[4] = {};
  for (int i = 0; i < 4; ++i) startDetached(receiveInto(ch, &got[i]), &done[i]);
  for (bool d : done) EXPECT_FALSE(d);
  ch.close();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(done[i]);
    EXPECT_FALSE(got[i].has_value());
  }
  EXPECT_TRUE(ch.isClosed());
}

TEST(ChannelTest, CloseMakesEveryWaitingSenderThrowAndDeliversNothing) {
  Channel<int> ch;
  bool done[3] = {};
  std::exception_ptr errors[3];
  for (int i = 0; i < 3; ++i) startDetached(sendOne(ch, i), &done[i], &errors[i]);
  ch.close();
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(done[i]);
    ASSERT_TRUE(errors[i]);
    EXPECT_THROW(std::rethrow_exception(errors[i]), ChannelClosed);
  }
  EXPECT_FALSE(ch.tryReceive().has_value());
}

TEST(ChannelTest, BufferedValuesAreStillReceivedAfterClose) {
  Channel<int> ch(3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ch.trySend(i));
  ch.close();
  std::vector<int> got = syncAwait([&]() -> Lazy<std::vector<int>> {
    std::vector<int> values;
    while (std::optional<int> v = co_await ch.receive()) values.push_back(*v);
    co_return values;
  }());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
}

TEST(ChannelTest, SendOnAClosedChannelThrowsAndDoesNotMoveTheValue) {
  Channel<std::string> ch(1);
  ch.close();
  std::string value = "still mine";
  EXPECT_THROW(syncAwait([&]() -> Lazy<void> { co_await ch.send(std::move(value)); }()),
               ChannelClosed);
  EXPECT_EQ(value, "still mine");
  EXPECT_THROW(ch.trySend(std::string("x")), ChannelClosed);
  std::string other = "kept";
  EXPECT_THROW(ch.trySend(std::move(other)), ChannelClosed);
  EXPECT_EQ(other, "kept");
}

TEST(ChannelTest, CloseOfAClosedChannelThrows) {
  Channel<int> ch;
  ch.close();
  EXPECT_THROW(ch.close(), ChannelClosed);
}

TEST(ChannelTest, ReceiveOnAClosedEmptyChannelReturnsAtOnce) {
  Channel<int> ch(4);
  ch.close();
  std::optional<int> got =
      syncAwait([&]() -> Lazy<std::optional<int>> { co_return co_await ch.receive(); }());
  EXPECT_FALSE(got.has_value());
}

TEST(ChannelTest, TrySendOfAnRvalueMovesOnlyOnSuccess) {
  Channel<std::unique_ptr<int>> ch(1);
  auto a = std::make_unique<int>(1);
  auto b = std::make_unique<int>(2);
  EXPECT_TRUE(ch.trySend(std::move(a)));
  EXPECT_EQ(a, nullptr);
  EXPECT_FALSE(ch.trySend(std::move(b)));
  ASSERT_NE(b, nullptr) << "a failed trySend must leave the value alone";
  EXPECT_EQ(*b, 2);
  std::optional<std::unique_ptr<int>> got = ch.tryReceive();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(**got, 1);
}

TEST(ChannelTest, LvalueSendsCopyAndRvalueSendsMove) {
  Channel<std::string> ch(2);
  std::string kept = "copy me";
  std::string moved = "move me";
  syncAwait([&]() -> Lazy<void> {
    co_await ch.send(kept);
    co_await ch.send(std::move(moved));
  }());
  EXPECT_EQ(kept, "copy me");
  EXPECT_TRUE(moved.empty());  // NOLINT(bugprone-use-after-move): moved into the buffer
  EXPECT_EQ(ch.tryReceive(), "copy me");
  EXPECT_EQ(ch.tryReceive(), "move me");
}

TEST(ChannelTest, BufferedValuesAreDestroyedWithTheChannel) {
  Counted::reset();
  {
    Channel<Counted> ch(4);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(ch.trySend(Counted()));
    EXPECT_EQ(Counted::alive(), 3);
    EXPECT_TRUE(ch.tryReceive().has_value());
    EXPECT_EQ(Counted::alive(), 2);
  }
  EXPECT_EQ(Counted::alive(), 0);
  {
    Channel<Counted> unbounded(Channel<Counted>::kUnbounded);
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(unbounded.trySend(Counted()));
    EXPECT_EQ(Counted::alive(), 100);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(ChannelTest, AValueIsNeitherLostNorDuplicatedOnAnyPath) {
  Counted::reset();
  {
    Channel<Counted> ch;
    bool sent = false;
    auto sender = [](Channel<Counted>& c) -> Lazy<void> { co_await c.send(Counted()); };
    startDetached(sender(ch), &sent);
    std::optional<Counted> got = ch.tryReceive();
    EXPECT_TRUE(sent);
    EXPECT_TRUE(got.has_value());
    EXPECT_EQ(Counted::alive(), 1);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(ChannelTest, AWaiterWithAnExecutorIsResumedThroughItNotInline) {
  ManualExecutor executor;
  Channel<int> ch;
  std::optional<int> got;
  bool done = false;
  // A named lambda: its captures must outlive the coroutine, which resumes later.
  auto receiver = [&]() -> Lazy<void> { got = co_await ch.receive(); };
  receiver().via(&executor).start([&](Try<void>) { done = true; });
  EXPECT_EQ(executor.runAll(), 1u);  // the task starts and waits
  EXPECT_FALSE(done);
  EXPECT_TRUE(ch.trySend(5));
  EXPECT_FALSE(done) << "the receiver must not run on the sender's stack";
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(executor.pending(), 1u);
  executor.runAll();
  EXPECT_TRUE(done);
  EXPECT_EQ(got, 5);
}

TEST(ChannelTest, AWaiterWithoutAnExecutorIsResumedInlineByTheCompletingThread) {
  Channel<int> ch;
  std::thread::id resumedOn;
  bool done = false;
  auto receiver = [&]() -> Lazy<void> {
    co_await ch.receive();
    resumedOn = std::this_thread::get_id();
  };
  startDetached(receiver(), &done);
  std::thread sender([&] { ASSERT_TRUE(ch.trySend(1)); });
  std::thread::id senderId = sender.get_id();
  sender.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(resumedOn, senderId);
}

TEST(ChannelTest, TaskWaiterResumesOnItsPoolWhenTheSenderIsElsewhere) {
  Watchdog watchdog(60s, "ChannelTest.TaskWaiterResumesOnItsPoolWhenTheSenderIsElsewhere");
  ThreadPool pool(2);
  Channel<int> ch;
  std::atomic<bool> waiting{false};
  std::thread sender([&] {
    // Hand-shake: once the receiver has started and the pool's workers are asleep, it
    // waits in the receive, so the send below resumes a waiter from outside the pool.
    while (!waiting.load()) std::this_thread::yield();
    EXPECT_TRUE(test::waitUntilIdle(pool));
    syncAwait([&]() -> Lazy<void> { co_await ch.send(3); }());
  });
  bool onPool = syncAwait([&]() -> Lazy<bool> {
    waiting = true;
    std::optional<int> v = co_await ch.receive();
    co_return v == 3 && pool.currentThreadInExecutor();
  }()
                                       .via(&pool));
  sender.join();
  EXPECT_TRUE(onPool);
}

TEST(ChannelTest, AResumedSenderOnASingleThreadPoolRunsAfterTheReceiverSuspends) {
  // On ThreadPool(1), the woken side is queued, not run on the waker's stack.
  Watchdog watchdog(60s, "ChannelTest.AResumedSenderOnASingleThreadPool...");
  ThreadPool pool(1);
  Channel<int> ch;
  std::vector<std::string> log;  // only touched by the pool's one thread
  syncAwait(collectAllPara(
                [&]() -> Lazy<void> {
                  log.push_back("receiver waits");
                  std::optional<int> v = co_await ch.receive();
                  log.push_back("receiver got " + std::to_string(*v));
                }(),
                [&]() -> Lazy<void> {
                  log.push_back("sender sends");
                  co_await ch.send(1);
                  log.push_back("sender continues");
                }())
                .via(&pool));
  EXPECT_EQ(log, (std::vector<std::string>{"receiver waits", "sender sends", "sender continues",
                                           "receiver got 1"}));
}

TEST(ChannelTest, PingPongBetweenTwoTasksOnOneThread) {
  Watchdog watchdog(60s, "ChannelTest.PingPongBetweenTwoTasksOnOneThread");
  ThreadPool pool(1);
  Channel<int> ping, pong;
  constexpr int kRounds = 10000;
  auto [a, b] = syncAwait(collectAllPara(
                              [&]() -> Lazy<int> {
                                int v = 0;
                                for (int i = 0; i < kRounds; ++i) {
                                  co_await ping.send(v);
                                  v = *co_await pong.receive();
                                }
                                ping.close();
                                co_return v;
                              }(),
                              [&]() -> Lazy<int> {
                                int echoes = 0;
                                while (std::optional<int> v = co_await ping.receive()) {
                                  co_await pong.send(*v + 1);
                                  ++echoes;
                                }
                                co_return echoes;
                              }())
                              .via(&pool));
  EXPECT_EQ(a.value(), kRounds);
  EXPECT_EQ(b.value(), kRounds);
}

// Multi-producer, multi-consumer on a 2-thread pool: every value delivered exactly once.
class ChannelStressTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ChannelStressTest, EveryValueIsDeliveredExactlyOnce) {
  Watchdog watchdog(120s, "ChannelStressTest.EveryValueIsDeliveredExactlyOnce");
  constexpr int kProducers = 4, kConsumers = 4, kPerProducer = 20000;
  ThreadPool pool(2);
  Channel<int> ch(GetParam());
  std::vector<std::vector<int>> received(kConsumers);

  auto producer = [&](int id) -> Lazy<void> {
    for (int i = 0; i < kPerProducer; ++i) co_await ch.send(id * kPerProducer + i);
  };
  auto producers = [&]() -> Lazy<void> {
    std::vector<Lazy<void>> all;
    for (int p = 0; p < kProducers; ++p) all.push_back(producer(p));
    auto results = co_await collectAllPara(std::move(all));
    for (auto& r : results) r.value();
    ch.close();
  };
  auto consumer = [&](int id) -> Lazy<void> {
    while (std::optional<int> v = co_await ch.receive()) received[id].push_back(*v);
  };
  std::vector<Lazy<void>> everything;
  everything.push_back(producers());
  for (int c = 0; c < kConsumers; ++c) everything.push_back(consumer(c));
  for (auto& r : syncAwait(collectAllPara(std::move(everything)).via(&pool))) r.value();

  std::vector<int> all;
  for (auto& values : received) {
    // Each producer's values reach any one consumer in the order they were sent.
    std::vector<int> last(kProducers, -1);
    for (int v : values) {
      EXPECT_GT(v, last[v / kPerProducer]);
      last[v / kPerProducer] = v;
    }
    all.insert(all.end(), values.begin(), values.end());
  }
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kProducers * kPerProducer));
  for (int i = 0; i < kProducers * kPerProducer; ++i) ASSERT_EQ(all[i], i);
}

INSTANTIATE_TEST_SUITE_P(Capacities, ChannelStressTest,
                         ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{16},
                                           Channel<int>::kUnbounded),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return info.param == Channel<int>::kUnbounded
                                      ? std::string("Unbounded")
                                      : "Capacity" + std::to_string(info.param);
                         });

TEST(ChannelTest, CloseWakesEveryWaiterUnderConcurrency) {
  Watchdog watchdog(120s, "ChannelTest.CloseWakesEveryWaiterUnderConcurrency");
  ThreadPool pool(2);
  for (int round = 0; round < 50; ++round) {
    Channel<int> ch;
    Channel<int> started(Channel<int>::kUnbounded);
    std::atomic<int> receiversWoken{0}, sendersFailed{0}, sendersDelivered{0}, valuesReceived{0};
    auto receiver = [&]() -> Lazy<void> {
      co_await started.send(0);
      while (co_await ch.receive()) ++valuesReceived;
      ++receiversWoken;
    };
    auto sender = [&](int v) -> Lazy<void> {
      co_await started.send(0);
      try {
        co_await ch.send(v);
        ++sendersDelivered;
      } catch (const ChannelClosed&) {
        ++sendersFailed;
      }
    };
    auto closer = [&]() -> Lazy<void> {
      for (int i = 0; i < 40; ++i) co_await started.receive();
      ch.close();
    };
    std::vector<Lazy<void>> all;
    for (int i = 0; i < 20; ++i) {
      all.push_back(receiver());
      all.push_back(sender(i));
    }
    all.push_back(closer());
    for (auto& r : syncAwait(collectAllPara(std::move(all)).via(&pool))) r.value();
    EXPECT_EQ(receiversWoken.load(), 20);
    EXPECT_EQ(sendersFailed.load() + sendersDelivered.load(), 20);
    EXPECT_EQ(sendersDelivered.load(), valuesReceived.load());
  }
}

// ---------------------------------------------------------------------------------------
// Cancellation: before the operation starts, while it waits, and after it completed.

TEST(ChannelCancellationTest, AReceiveCancelledBeforeItStartsThrowsAndTakesNothing) {
  Channel<int> ch(1);
  ASSERT_TRUE(ch.trySend(1));
  CancellationSource source;
  source.requestCancellation();
  EXPECT_THROW(
      syncAwait(withCancellation(source.token(), [&]() -> Lazy<void> { co_await ch.receive(); }())),
      OperationCancelled);
  EXPECT_EQ(ch.size(), 1u) << "the buffered value must still be there";
}

TEST(ChannelCancellationTest, ASendCancelledBeforeItStartsThrowsAndSendsNothing) {
  Channel<std::string> ch(1);
  CancellationSource source;
  source.requestCancellation();
  std::string value = "kept";
  EXPECT_THROW(syncAwait(withCancellation(
                   source.token(), [&]() -> Lazy<void> { co_await ch.send(std::move(value)); }())),
               OperationCancelled);
  EXPECT_EQ(ch.size(), 0u);
  EXPECT_EQ(value, "kept");
}

TEST(ChannelCancellationTest, AWaitingReceiveIsCancelledAndLeavesTheChannel) {
  Channel<int> ch;
  CancellationSource source;
  bool done = false;
  std::exception_ptr error;
  std::optional<int> got;
  withCancellation(source.token(), receiveInto(ch, &got)).start([&](Try<void> r) {
    done = true;
    if (r.hasException()) error = r.exception();
  });
  EXPECT_FALSE(done);
  EXPECT_TRUE(source.requestCancellation());
  EXPECT_TRUE(done);
  ASSERT_TRUE(error);
  EXPECT_THROW(std::rethrow_exception(error), OperationCancelled);
  EXPECT_FALSE(got.has_value());
  EXPECT_FALSE(ch.trySend(1)) << "the cancelled receiver must have left the queue";
}

TEST(ChannelCancellationTest, AWaitingSendIsCancelledAndItsValueIsNotDelivered) {
  Channel<std::unique_ptr<int>> ch;
  CancellationSource source;
  auto value = std::make_unique<int>(5);
  auto sender = [&]() -> Lazy<void> { co_await ch.send(std::move(value)); };
  test::CancellableOutcome outcome;
  test::startCancellable(source.token(), sender(), outcome);
  test::expectCancellationEndsTheWait(source, outcome);
  EXPECT_FALSE(ch.tryReceive().has_value()) << "the cancelled sender must have left the queue";
  ASSERT_NE(value, nullptr) << "a cancelled send must not move its value";
  EXPECT_EQ(*value, 5);
}

TEST(ChannelCancellationTest, CancellationAfterCompletionChangesNothing) {
  Channel<int> ch;
  CancellationSource source;
  std::optional<int> got;
  auto receiver = [&]() -> Lazy<void> {
    got = co_await ch.receive();
    source.requestCancellation();  // after the value arrived
  };
  test::CancellableOutcome outcome;
  test::startCancellable(source.token(), receiver(), outcome);
  EXPECT_TRUE(ch.trySend(3));
  EXPECT_TRUE(outcome.done);
  EXPECT_FALSE(outcome.error);
  EXPECT_EQ(got, 3);
}

TEST(ChannelCancellationTest, ACancelledWaiterIsResumedThroughItsExecutor) {
  ManualExecutor executor;
  Channel<int> ch;
  CancellationSource source;
  bool done = false;
  std::exception_ptr error;
  auto receiver = [&]() -> Lazy<void> { co_await ch.receive(); };
  withCancellation(source.token(), receiver()).via(&executor).start([&](Try<void> r) {
    done = true;
    if (r.hasException()) error = r.exception();
  });
  executor.runAll();
  EXPECT_FALSE(done);
  source.requestCancellation();
  EXPECT_FALSE(done) << "the waiter must not run inside requestCancellation()";
  EXPECT_EQ(executor.pending(), 1u);
  executor.runAll();
  EXPECT_TRUE(done);
  ASSERT_TRUE(error);
  EXPECT_THROW(std::rethrow_exception(error), OperationCancelled);
}

// Cancellation racing with transfers on a 2-thread pool: a value is received exactly when
// its send succeeded; cancelled operations transfer nothing.
class ChannelCancellationStressTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ChannelCancellationStressTest, CancelledOperationsTransferNothing) {
  Watchdog watchdog(180s, "ChannelCancellationStressTest.CancelledOperationsTransferNothing");
  ThreadPool pool(2);
  constexpr int kSenders = 16, kReceivers = 16, kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    Channel<int> ch(GetParam());
    std::vector<CancellationSource> senderSources(kSenders), receiverSources(kReceivers);
    std::vector<int> sentOk, received;  // guarded by `mutex`
    std::mutex mutex;
    std::atomic<int> cancelledSends{0};
    auto sender = [&](int v) -> Lazy<void> {
      try {
        co_await ch.send(v);
        std::lock_guard lock(mutex);
        sentOk.push_back(v);
      } catch (const OperationCancelled&) {
        ++cancelledSends;
      }
    };
    auto receiver = [&]() -> Lazy<void> {
      try {
        if (std::optional<int> v = co_await ch.receive()) {
          std::lock_guard lock(mutex);
          received.push_back(*v);
        }
      } catch (const OperationCancelled&) {
        // nothing was taken: checked below
      }
    };
    auto senders = [&]() -> Lazy<void> {
      std::vector<Lazy<void>> all;
      for (int i = 0; i < kSenders; ++i) {
        all.push_back(withCancellation(senderSources[i].token(), sender(i)));
      }
      for (auto& r : co_await collectAllPara(std::move(all))) r.value();
      ch.close();  // wakes the receivers that got no value
    };
    auto canceller = [&]() -> Lazy<void> {
      for (int i = round % 2; i < kSenders; i += 2) senderSources[i].requestCancellation();
      for (int i = round % 3; i < kReceivers; i += 3) receiverSources[i].requestCancellation();
      co_return;
    };
    std::vector<Lazy<void>> everything;
    for (int i = 0; i < kReceivers; ++i) {
      everything.push_back(withCancellation(receiverSources[i].token(), receiver()));
    }
    everything.push_back(canceller());
    everything.push_back(senders());
    for (auto& r : syncAwait(collectAllPara(std::move(everything)).via(&pool))) r.value();
    while (std::optional<int> v = ch.tryReceive()) received.push_back(*v);  // buffered
    std::sort(sentOk.begin(), sentOk.end());
    std::sort(received.begin(), received.end());
    ASSERT_EQ(sentOk, received) << "round " << round;
    // Every send either delivered or was cancelled (the channel closes only after all).
    EXPECT_EQ(static_cast<int>(sentOk.size()) + cancelledSends.load(), kSenders);
  }
}

INSTANTIATE_TEST_SUITE_P(Capacities, ChannelCancellationStressTest,
                         ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{4}),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return "Capacity" + std::to_string(info.param);
                         });

// ---------------------------------------------------------------------------------------
// Fibers and Lazys on the two ends of the same channels (stackful/await.h).

class ChannelFiberTest : public ::testing::TestWithParam<std::size_t> {};

// Producers 0 and 1, as fibers on `pool`: producer p sends p * perProducer + i for each i
// below perProducer.
std::vector<FiberFuture<void>> spawnFiberProducers(ThreadPool& pool, Channel<int>& ch,
                                                   int perProducer) {
  std::vector<FiberFuture<void>> fibers;
  for (int p = 0; p < 2; ++p) {
    fibers.push_back(spawnFiber(&pool, [&ch, p, perProducer] {
      for (int i = 0; i < perProducer; ++i) await(ch.send(p * perProducer + i));
    }));
  }
  return fibers;
}

// Consumers 0 and 1, as fibers on `pool`: consumer c appends what it receives to
// received[c] until the channel is closed and drained.
std::vector<FiberFuture<void>> spawnFiberConsumers(ThreadPool& pool, Channel<int>& ch,
                                                   std::vector<std::vector<int>>& received) {
  std::vector<FiberFuture<void>> fibers;
  for (int c = 0; c < 2; ++c) {
    fibers.push_back(spawnFiber(&pool, [&ch, &received, c] {
      while (std::optional<int> v = await(ch.receive())) received[c].push_back(*v);
    }));
  }
  return fibers;
}

// Together, the consumers received each of 0 .. total-1 exactly once.
void expectEachValueOnce(const std::vector<std::vector<int>>& received, int total) {
  std::vector<int> all;
  for (const auto& values : received) all.insert(all.end(), values.begin(), values.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<std::size_t>(total));
  for (int i = 0; i < total; ++i) ASSERT_EQ(all[i], i);
}

TEST_P(ChannelFiberTest, FibersAndLazysExchangeEveryValueExactlyOnce) {
  Watchdog watchdog(120s, "ChannelFiberTest.FibersAndLazysExchangeEveryValueExactlyOnce");
  constexpr int kPerProducer = 5000;
  ThreadPool pool(2);
  Channel<int> ch(GetParam());
  // Producers 0 and 1 are fibers, 2 and 3 Lazys; so are consumers 0, 1 and 2, 3.
  std::vector<std::vector<int>> received(4);
  std::vector<FiberFuture<void>> fiberProducers = spawnFiberProducers(pool, ch, kPerProducer);
  std::vector<FiberFuture<void>> fiberConsumers = spawnFiberConsumers(pool, ch, received);
  auto lazyProducer = [&](int p) -> Lazy<void> {
    for (int i = 0; i < kPerProducer; ++i) co_await ch.send(p * kPerProducer + i);
  };
  auto lazyConsumer = [&](int c) -> Lazy<void> {
    while (std::optional<int> v = co_await ch.receive()) received[c].push_back(*v);
  };
  auto producersThenClose = [&]() -> Lazy<void> {
    auto [a, b] = co_await collectAllPara(lazyProducer(2), lazyProducer(3));
    a.value();
    b.value();
    for (auto& fiber : fiberProducers) co_await std::move(fiber);
    ch.close();
  };
  auto [producers, c2, c3] =
      syncAwait(collectAllPara(producersThenClose(), lazyConsumer(2), lazyConsumer(3)).via(&pool));
  producers.value();
  c2.value();
  c3.value();
  for (auto& fiber : fiberConsumers) syncAwait(std::move(fiber));

  expectEachValueOnce(received, 4 * kPerProducer);
}

INSTANTIATE_TEST_SUITE_P(Capacities, ChannelFiberTest,
                         ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{64}),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return "Capacity" + std::to_string(info.param);
                         });

// Fibers on a ThreadPool(1) act on their channel parks before they switch out (see
// stackful/await.h); outside threads send to and receive from them meanwhile: every value
// arrives exactly once, whatever thread completes the operation.
TEST_P(ChannelFiberTest, FibersOnOneThreadExchangeWithOutsideThreads) {
  Watchdog watchdog(120s, "ChannelFiberTest.FibersOnOneThreadExchangeWithOutsideThreads");
  constexpr int kPerProducer = 5000;
  ThreadPool pool(1);
  Channel<int> ch(GetParam());
  // Producers 0, 1 and consumers 0, 1 are fibers; producers 2, 3 and consumers 2, 3 are
  // plain threads (syncAwait on the channel).
  std::vector<std::vector<int>> received(4);
  std::vector<FiberFuture<void>> fiberProducers = spawnFiberProducers(pool, ch, kPerProducer);
  std::vector<FiberFuture<void>> fiberConsumers = spawnFiberConsumers(pool, ch, received);
  std::vector<std::thread> threads;
  for (int p = 2; p < 4; ++p) {
    threads.emplace_back([&ch, p] {
      for (int i = 0; i < kPerProducer; ++i) syncAwait(ch.send(p * kPerProducer + i));
    });
  }
  for (int c = 2; c < 4; ++c) {
    threads.emplace_back([&ch, &received, c] {
      while (std::optional<int> v = syncAwait(ch.receive())) received[c].push_back(*v);
    });
  }
  for (auto& fiber : fiberProducers) syncAwait(std::move(fiber));
  threads[0].join();
  threads[1].join();
  ch.close();
  for (auto& fiber : fiberConsumers) syncAwait(std::move(fiber));
  threads[2].join();
  threads[3].join();

  expectEachValueOnce(received, 4 * kPerProducer);
}

// Two fibers bounce a value over two unbuffered channels on one thread: each park is
// acted on by the parking fiber, which then switches straight into the other.
TEST(ChannelFiberTest, PingPongBetweenTwoFibersOnOneThread) {
  Watchdog watchdog(60s, "ChannelFiberTest.PingPongBetweenTwoFibersOnOneThread");
  ThreadPool pool(1);
  Channel<int> ping, pong;
  constexpr int kRounds = 10000;
  auto echo = spawnFiber(&pool, [&] {
    int echoes = 0;
    while (std::optional<int> v = await(ping.receive())) {
      await(pong.send(*v + 1));
      ++echoes;
    }
    return echoes;
  });
  auto driver = spawnFiber(&pool, [&] {
    int v = 0;
    for (int i = 0; i < kRounds; ++i) {
      await(ping.send(v));
      v = *await(pong.receive());
    }
    ping.close();
    return v;
  });
  EXPECT_EQ(syncAwait(std::move(driver)), kRounds);
  EXPECT_EQ(syncAwait(std::move(echo)), kRounds);
}

TEST(ChannelFiberTest, PingPongBetweenAFiberAndALazyOnOneThread) {
  Watchdog watchdog(60s, "ChannelFiberTest.PingPongBetweenAFiberAndALazyOnOneThread");
  ThreadPool pool(1);
  Channel<int> ping, pong;
  constexpr int kRounds = 5000;
  auto fiber = spawnFiber(&pool, [&] {
    int echoes = 0;
    while (std::optional<int> v = await(ping.receive())) {
      await(pong.send(*v + 1));
      ++echoes;
    }
    return echoes;
  });
  int last = syncAwait([&]() -> Lazy<int> {
    int v = 0;
    for (int i = 0; i < kRounds; ++i) {
      co_await ping.send(v);
      v = *co_await pong.receive();
    }
    ping.close();
    co_return v;
  }()
                                    .via(&pool));
  EXPECT_EQ(last, kRounds);
  EXPECT_EQ(syncAwait(std::move(fiber)), kRounds);
}

TEST(ChannelFiberTest, AFiberSelectsOverChannelsFedByLazys) {
  Watchdog watchdog(60s, "ChannelFiberTest.AFiberSelectsOverChannelsFedByLazys");
  ThreadPool pool(2);
  Channel<int> numbers;
  Channel<std::string> words;
  auto fiber = spawnFiber(&pool, [&] {
    int sum = 0;
    std::string text;
    bool numbersOpen = true, wordsOpen = true;
    while (numbersOpen || wordsOpen) {
      if (numbersOpen && wordsOpen) {
        auto r = await(select(numbers.receiveCase(), words.receiveCase()));
        if (r.index() == 0) {
          if (std::optional<int> v = std::get<0>(r)) {
            sum += *v;
          } else {
            numbersOpen = false;
          }
        } else if (std::optional<std::string> w = std::get<1>(r)) {
          text += *w;
        } else {
          wordsOpen = false;
        }
      } else if (numbersOpen) {
        if (std::optional<int> v = await(numbers.receive())) {
          sum += *v;
        } else {
          numbersOpen = false;
        }
      } else if (std::optional<std::string> w = await(words.receive())) {
        text += *w;
      } else {
        wordsOpen = false;
      }
    }
    return std::pair{sum, text.size()};
  });
  auto feedNumbers = [&]() -> Lazy<void> {
    for (int i = 1; i <= 100; ++i) co_await numbers.send(i);
    numbers.close();
  };
  auto feedWords = [&]() -> Lazy<void> {
    for (int i = 0; i < 50; ++i) co_await words.send(std::string("ab"));
    words.close();
  };
  auto [a, b] = syncAwait(collectAllPara(feedNumbers(), feedWords()).via(&pool));
  a.value();
  b.value();
  auto [sum, length] = syncAwait(std::move(fiber));
  EXPECT_EQ(sum, 5050);
  EXPECT_EQ(length, 100u);
}

// On one thread (the park acted on before the switch) and on two.
class ChannelFiberCancellationTest : public test::PoolThreadsTest {};

// A fiber's token cancels its channel wait, before it starts and while the fiber waits;
// the cancelled receiver leaves the channel, so a send finds nobody to take it.
TEST_P(ChannelFiberCancellationTest, AFibersCancellationTokenCancelsItsChannelWait) {
  Watchdog watchdog(60s, "ChannelFiberTest.AFibersCancellationTokenCancelsItsChannelWait");
  ThreadPool pool(GetParam());
  Channel<int> ch;
  test::expectFiberWaitCancelled(pool, [&] { await(ch.receive()); });
  EXPECT_FALSE(ch.trySend(1)) << "the cancelled fiber must have left the channel";
}

INSTANTIATE_TEST_SUITE_P(Threads, ChannelFiberCancellationTest, test::oneAndTwoPoolThreads(),
                         test::poolThreadsName);

TEST(ChannelFiberTest, AFiberConsumesAnAsyncGeneratorStreamingAChannel) {
  Watchdog watchdog(60s, "ChannelFiberTest.AFiberConsumesAnAsyncGeneratorStreamingAChannel");
  ThreadPool pool(2);
  Channel<int> ch(8);
  auto squares = [](Channel<int>& in) -> AsyncGenerator<long> {
    while (std::optional<int> v = co_await in.receive()) co_yield long{*v} * *v;
  };
  auto fiber = spawnFiber(&pool, [&] {
    auto gen = squares(ch);
    long sum = 0;
    while (std::optional<long> v = await(gen.next())) sum += *v;
    return sum;
  });
  syncAwait([&]() -> Lazy<void> {
    for (int i = 1; i <= 10; ++i) co_await ch.send(i);
    ch.close();
  }()
                         .via(&pool));
  EXPECT_EQ(syncAwait(std::move(fiber)), 385);
}

TEST(ChannelDeathTest, DestroyingAChannelWithWaitersAborts) {
  EXPECT_DEATH(
      {
        bool done = false;
        auto* ch = new Channel<int>();
        startDetached(receiveInto(*ch, new std::optional<int>()), &done);
        delete ch;
      },
      "destroyed while coroutines or fibers were still waiting");
}

}  // namespace
}  // namespace weft
