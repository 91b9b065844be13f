#include "weft/coro/select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "test/support/cancellable_start.h"
#include "test/support/counted.h"
#include "test/support/manual_executor.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::ManualExecutor;
using test::Watchdog;

TEST(SelectTest, AReadyCaseCompletesWithoutWaiting) {
  Channel<int> a(1), b(1);
  ASSERT_TRUE(b.trySend(2));
  auto r = syncAwait([&]() -> Lazy<std::variant<std::optional<int>, std::optional<int>>> {
    co_return co_await select(a.receiveCase(), b.receiveCase());
  }());
  ASSERT_EQ(r.index(), 1u);
  EXPECT_EQ(std::get<1>(r), 2);
}

TEST(SelectTest, TheDefaultCaseIsChosenWhenNothingIsReadyAndTouchesNothing) {
  Channel<int> a;
  Channel<std::string> s;
  std::string value = "unsent";
  auto r = syncAwait([&]() -> Lazy<std::size_t> {
    auto result = co_await select(a.receiveCase(), s.sendCase(std::move(value)), defaultCase());
    co_return result.index();
  }());
  EXPECT_EQ(r, 2u);
  EXPECT_EQ(value, "unsent");
  EXPECT_FALSE(a.trySend(1)) << "the select must not have left a receiver behind";
  EXPECT_FALSE(s.tryReceive().has_value()) << "nor a sender";
}

TEST(SelectWhenTest, ADisabledCaseIsNeverChosenEvenWhenReady) {
  Channel<int> a(1), b(1);
  ASSERT_TRUE(a.trySend(1));
  ASSERT_TRUE(b.trySend(2));
  for (int round = 0; round < 50; ++round) {  // a random choice would pick `a` half the time
    auto r = syncAwait([&]() -> Lazy<std::size_t> {
      auto result = co_await select(a.receiveCase().when(false), b.receiveCase().when(true));
      co_return result.index();
    }());
    ASSERT_EQ(r, 1u);
    ASSERT_TRUE(b.trySend(2));
  }
  EXPECT_EQ(a.tryReceive(), std::optional<int>(1));  // never taken
}

TEST(SelectWhenTest, ADisabledSendSendsNothingAndLeavesItsValue) {
  Channel<std::string> out(1);
  std::string value = "kept";
  auto r = syncAwait([&]() -> Lazy<std::size_t> {
    auto result = co_await select(out.sendCase(std::move(value)).when(false), defaultCase());
    co_return result.index();
  }());
  EXPECT_EQ(r, 1u);
  EXPECT_EQ(value, "kept");
  EXPECT_FALSE(out.tryReceive().has_value());
}

// Go's nil-channel idiom: merge two channels until both are closed, switching off the
// case of each one that is done.
TEST(SelectWhenTest, MergesTwoChannelsUntilBothAreClosed) {
  ThreadPool pool(2);
  Channel<int> a, b;
  auto producer = [](Channel<int>& ch, int from) -> Lazy<void> {
    for (int i = from; i < from + 100; ++i) co_await ch.send(i);
    ch.close();
  };
  auto merge = [&]() -> Lazy<long> {
    bool aOpen = true, bOpen = true;
    long sum = 0;
    while (aOpen || bOpen) {
      auto r = co_await select(a.receiveCase().when(aOpen), b.receiveCase().when(bOpen));
      std::optional<int>& v = r.index() == 0 ? std::get<0>(r) : std::get<1>(r);
      if (v) {
        sum += *v;
      } else {
        (r.index() == 0 ? aOpen : bOpen) = false;  // closed: never select it again
      }
    }
    co_return sum;
  };
  Watchdog watchdog(60s, "SelectWhenTest.MergesTwoChannelsUntilBothAreClosed");
  auto [pa, pb, m] = syncAwait(collectAllPara(producer(a, 0), producer(b, 1000), merge()), &pool);
  pa.value();
  pb.value();
  EXPECT_EQ(m.value(), 4950 + 104950);
}

TEST(SelectWhenTest, WithEveryCaseDisabledItWaitsForCancellation) {
  ThreadPool pool(1);
  Channel<int> a(1);
  ASSERT_TRUE(a.trySend(1));
  CancellationSource source;
  auto body = [&]() -> Lazy<void> {
    (void)co_await withCancellation(source.token(), select(a.receiveCase().when(false)));
  };
  // Hand-shake: collectAll starts the canceller only once body() has suspended in the
  // select, so the select did wait (a ready value in a disabled case did not end it).
  auto cancel = [&]() -> Lazy<void> {
    source.requestCancellation();
    co_return;
  };
  Watchdog watchdog(60s, "SelectWhenTest.WithEveryCaseDisabledItWaitsForCancellation");
  auto [selected, cancelled] = syncAwait(collectAll(body(), cancel()), &pool);
  EXPECT_THROW(selected.value(), OperationCancelled);
  cancelled.value();
  EXPECT_EQ(a.tryReceive(), std::optional<int>(1));
}

TEST(SelectTest, TheDefaultCaseMayComeFirst) {
  Channel<int> a(1);
  ASSERT_TRUE(a.trySend(4));
  auto r = syncAwait([&]() -> Lazy<std::size_t> {
    auto result = co_await select(defaultCase(), a.receiveCase());
    co_return result.index();
  }());
  EXPECT_EQ(r, 1u) << "a ready case beats the default wherever it is written";
}

TEST(SelectTest, PicksExactlyOneOfSeveralReadyCasesAndLeavesTheOthersUntouched) {
  for (int round = 0; round < 100; ++round) {
    Channel<int> a(1), b(1), out(1);
    ASSERT_TRUE(a.trySend(1));
    ASSERT_TRUE(b.trySend(2));
    auto r = syncAwait([&]() -> Lazy<std::size_t> {
      auto result = co_await select(a.receiveCase(), b.receiveCase(), out.sendCase(3));
      co_return result.index();
    }());
    ASSERT_LT(r, 3u);
    EXPECT_EQ(a.size(), r == 0 ? 0u : 1u);
    EXPECT_EQ(b.size(), r == 1 ? 0u : 1u);
    EXPECT_EQ(out.size(), r == 2 ? 1u : 0u);
  }
}

TEST(SelectTest, ChoosesFairlyAmongReadyCases) {
  Channel<int> a(Channel<int>::kUnbounded), b(Channel<int>::kUnbounded);
  constexpr int kSelects = 2000;
  for (int i = 0; i < kSelects; ++i) {
    ASSERT_TRUE(a.trySend(i));
    ASSERT_TRUE(b.trySend(i));
  }
  int fromA = syncAwait([&]() -> Lazy<int> {
    int count = 0;
    for (int i = 0; i < kSelects; ++i) {
      auto r = co_await select(a.receiveCase(), b.receiveCase());
      if (r.index() == 0) ++count;
    }
    co_return count;
  }());
  // Binomial(2000, 1/2): mean 1000, standard deviation ~22; these bounds are 10 of them.
  EXPECT_GT(fromA, 780);
  EXPECT_LT(fromA, 1220);
  EXPECT_EQ(a.size() + b.size(), static_cast<std::size_t>(kSelects));
}

// The bound for the fairness tests below: with n independent fair choices, Hoeffding's
// inequality gives P(|count - n/2| >= t*n) <= 2*exp(-2*n*t^2). Solving for a chance of
// failing by luck of one in a billion: t = sqrt(ln(2e9) / (2n)), about 0.073 for n = 2000
// (a count outside [854, 1146]). Always picking one case gives 0 or n.
int fairnessSlack(int n) { return static_cast<int>(std::sqrt(std::log(2e9) / (2.0 * n)) * n); }

// Go's TestPseudoRandomSend, for a select that waits: its cases on one channel are linked
// into that channel's queue in a random order, so whichever operation later completes it
// picks each of them about equally often (a fixed order picks the first-listed one always).
TEST(SelectTest, AWaitingSelectChoosesFairlyAmongItsCasesOnOneChannel) {
  constexpr int kSelects = 2000;
  Channel<int> channel;
  int firstReceive = 0;
  int firstSend = 0;
  for (int i = 0; i < kSelects; ++i) {
    std::size_t index = 99;
    auto receiveTwice = [&]() -> Lazy<> {
      auto r = co_await select(channel.receiveCase(), channel.receiveCase());
      index = r.index();
    };
    receiveTwice().start([](Try<void> r) { r.value(); });
    ASSERT_TRUE(channel.trySend(i));  // completes the waiting select inline
    ASSERT_LT(index, 2u);
    if (index == 0) ++firstReceive;

    auto sendTwice = [&]() -> Lazy<> {
      auto r = co_await select(channel.sendCase(0), channel.sendCase(1));
      index = r.index();
    };
    index = 99;
    sendTwice().start([](Try<void> r) { r.value(); });
    std::optional<int> got = channel.tryReceive();
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(static_cast<std::size_t>(*got), index);  // the chosen case's value arrived
    if (*got == 0) ++firstSend;
  }
  const int slack = fairnessSlack(kSelects);
  EXPECT_GT(firstReceive, kSelects / 2 - slack);
  EXPECT_LT(firstReceive, kSelects / 2 + slack);
  EXPECT_GT(firstSend, kSelects / 2 - slack);
  EXPECT_LT(firstSend, kSelects / 2 + slack);
}

Lazy<std::size_t> selectIndex(Channel<int>& a, Channel<int>& b, std::optional<int>* got) {
  auto r = co_await select(a.receiveCase(), b.receiveCase());
  if (r.index() == 0) *got = std::get<0>(r);
  if (r.index() == 1) *got = std::get<1>(r);
  co_return r.index();
}

TEST(SelectTest, AWaitingSelectCompletesWithTheFirstCaseThatBecomesReady) {
  Channel<int> a, b;
  std::optional<int> got;
  std::size_t index = 99;
  bool done = false;
  selectIndex(a, b, &got).start([&](Try<std::size_t> r) {
    index = r.value();
    done = true;
  });
  EXPECT_FALSE(done);
  EXPECT_TRUE(b.trySend(5)) << "the waiting select is a receiver on b";
  EXPECT_TRUE(done);
  EXPECT_EQ(index, 1u);
  EXPECT_EQ(got, 5);
  EXPECT_FALSE(a.trySend(6)) << "the abandoned case on a must not take a value";
  EXPECT_FALSE(b.trySend(7));
}

TEST(SelectTest, AWaitingSendCaseDeliversItsValue) {
  Channel<std::string> out;
  Channel<int> never;
  std::size_t index = 99;
  auto sender = [&]() -> Lazy<void> {
    auto r = co_await select(never.receiveCase(), out.sendCase(std::string("hello")));
    index = r.index();
  };
  bool done = false;
  sender().start([&](Try<void> r) {
    r.value();
    done = true;
  });
  EXPECT_FALSE(done);
  EXPECT_EQ(out.tryReceive(), "hello");
  EXPECT_TRUE(done);
  EXPECT_EQ(index, 1u);
  EXPECT_FALSE(never.trySend(1));
}

TEST(SelectTest, ASendCaseThatIsNotChosenDoesNotMoveItsValue) {
  Channel<std::unique_ptr<int>> out;
  Channel<int> in(1);
  ASSERT_TRUE(in.trySend(1));
  auto value = std::make_unique<int>(42);
  std::size_t index = syncAwait([&]() -> Lazy<std::size_t> {
    auto r = co_await select(out.sendCase(std::move(value)), in.receiveCase());
    co_return r.index();
  }());
  EXPECT_EQ(index, 1u);
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(*value, 42);
}

TEST(SelectTest, AbandonedWaitingSendCaseDoesNotMoveItsValue) {
  Channel<std::unique_ptr<int>> out;
  Channel<int> in;
  auto value = std::make_unique<int>(42);
  std::size_t index = 99;
  auto selector = [&]() -> Lazy<void> {
    auto r = co_await select(out.sendCase(std::move(value)), in.receiveCase());
    index = r.index();
  };
  bool done = false;
  selector().start([&](Try<void>) { done = true; });
  EXPECT_FALSE(done);
  EXPECT_TRUE(in.trySend(1));
  EXPECT_TRUE(done);
  EXPECT_EQ(index, 1u);
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(*value, 42);
  EXPECT_FALSE(out.tryReceive().has_value());
}

TEST(SelectTest, AClosedChannelsReceiveCaseIsReadyWithAnEmptyOptional) {
  Channel<int> open, closed;
  closed.close();
  auto r = syncAwait([&]() -> Lazy<std::variant<std::optional<int>, std::optional<int>>> {
    co_return co_await select(open.receiveCase(), closed.receiveCase());
  }());
  ASSERT_EQ(r.index(), 1u);
  EXPECT_FALSE(std::get<1>(r).has_value());
}

TEST(SelectTest, ASendCaseOnAClosedChannelThrows) {
  Channel<int> closed, other;
  closed.close();
  EXPECT_THROW(syncAwait([&]() -> Lazy<void> {
                 co_await select(other.receiveCase(), closed.sendCase(1));
               }()),
               ChannelClosed);
}

TEST(SelectTest, CloseWakesAWaitingSelect) {
  Channel<int> a, b;
  std::optional<int> got = 1;
  std::size_t index = 99;
  bool done = false;
  selectIndex(a, b, &got).start([&](Try<std::size_t> r) {
    index = r.value();
    done = true;
  });
  EXPECT_FALSE(done);
  a.close();
  EXPECT_TRUE(done);
  EXPECT_EQ(index, 0u);
  EXPECT_FALSE(got.has_value());
  EXPECT_FALSE(b.trySend(1));
}

TEST(SelectTest, CloseMakesAWaitingSendCaseThrow) {
  Channel<int> out, in;
  bool done = false;
  std::exception_ptr error;
  auto selector = [&]() -> Lazy<void> {
    co_await select(in.receiveCase(), out.sendCase(1));
  };
  selector().start([&](Try<void> r) {
    done = true;
    if (r.hasException()) error = r.exception();
  });
  out.close();
  EXPECT_TRUE(done);
  ASSERT_TRUE(error);
  EXPECT_THROW(std::rethrow_exception(error), ChannelClosed);
  EXPECT_FALSE(in.trySend(1));
}

TEST(SelectTest, TwoSelectsMeetOnAnUnbufferedChannel) {
  Channel<int> ch, idleA, idleB;
  std::size_t senderIndex = 99;
  auto sender = [&]() -> Lazy<void> {
    auto r = co_await select(idleA.receiveCase(), ch.sendCase(8));
    senderIndex = r.index();
  };
  bool sent = false;
  sender().start([&](Try<void>) { sent = true; });
  EXPECT_FALSE(sent);
  std::optional<int> got;
  std::size_t index = syncAwait([&]() -> Lazy<std::size_t> {
    auto r = co_await select(idleB.receiveCase(), ch.receiveCase());
    if (r.index() == 1) got = std::get<1>(r);
    co_return r.index();
  }());
  EXPECT_TRUE(sent);
  EXPECT_EQ(senderIndex, 1u);
  EXPECT_EQ(index, 1u);
  EXPECT_EQ(got, 8);
  EXPECT_FALSE(idleA.trySend(1));
  EXPECT_FALSE(idleB.trySend(1));
}

TEST(SelectTest, ASelectDoesNotPairWithItself) {
  Channel<int> ch;
  bool done = false;
  auto selector = [&]() -> Lazy<void> {
    auto r = co_await select(ch.sendCase(1), ch.receiveCase());
    EXPECT_EQ(r.index(), 0u);
  };
  selector().start([&](Try<void> r) {
    r.value();
    done = true;
  });
  EXPECT_FALSE(done) << "its own send and receive must not meet";
  EXPECT_EQ(ch.tryReceive(), 1);
  EXPECT_TRUE(done);
  EXPECT_FALSE(ch.trySend(2)) << "the abandoned receive case was unlinked";
}

TEST(SelectTest, SeveralCasesOnOneChannelCompleteOnlyOnce) {
  Channel<int> ch;
  std::size_t index = 99;
  auto selector = [&]() -> Lazy<void> {
    auto r = co_await select(ch.receiveCase(), ch.receiveCase(), ch.receiveCase());
    index = r.index();
  };
  bool done = false;
  selector().start([&](Try<void>) { done = true; });
  EXPECT_TRUE(ch.trySend(1));
  EXPECT_TRUE(done);
  EXPECT_LT(index, 3u);
  EXPECT_FALSE(ch.trySend(2)) << "only one of the three cases may take a value";
}

TEST(SelectTest, AWaitingSelectWithAnExecutorIsResumedThroughIt) {
  ManualExecutor executor;
  Channel<int> a, b;
  std::optional<int> got;
  bool done = false;
  selectIndex(a, b, &got).via(&executor).start([&](Try<std::size_t>) { done = true; });
  executor.runAll();
  EXPECT_FALSE(done);
  EXPECT_TRUE(a.trySend(3));
  EXPECT_FALSE(done) << "the select must not run on the sender's stack";
  EXPECT_EQ(executor.pending(), 1u);
  executor.runAll();
  EXPECT_TRUE(done);
  EXPECT_EQ(got, 3);
}

TEST(SelectTest, ValuesInSelectCasesAreNeitherLostNorDuplicated) {
  Counted::reset();
  {
    Channel<Counted> a(1), b(1);
    ASSERT_TRUE(a.trySend(Counted()));
    std::size_t index = syncAwait([&]() -> Lazy<std::size_t> {
      auto r = co_await select(a.receiveCase(), b.sendCase(Counted()));
      co_return r.index();
    }());
    ASSERT_LT(index, 2u);
    // Either a's value was taken (and dropped with the result), or b got one and a
    // still holds its own.
    EXPECT_EQ(Counted::alive(), index == 0 ? 0 : 2);
    EXPECT_EQ(a.size(), index == 0 ? 0u : 1u);
    EXPECT_EQ(b.size(), index == 0 ? 0u : 1u);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

// Multi-producer, multi-consumer through selects on a 2-thread pool: consumers receive
// from two channels with one select, producers send each value into whichever of two
// channels is ready first. Every value must arrive exactly once.
class SelectStressTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(SelectStressTest, EveryValueIsDeliveredExactlyOnce) {
  Watchdog watchdog(120s, "SelectStressTest.EveryValueIsDeliveredExactlyOnce");
  constexpr int kProducers = 3, kConsumers = 3, kPerProducer = 10000;
  ThreadPool pool(2);
  Channel<int> a(GetParam()), b(GetParam());
  std::vector<std::vector<int>> received(kConsumers);
  std::atomic<int> closedSeen{0};

  auto producer = [&](int id) -> Lazy<void> {
    for (int i = 0; i < kPerProducer; ++i) {
      int v = id * kPerProducer + i;
      if (i % 3 == 0) {
        co_await a.send(v);  // some plain sends in the mix
      } else {
        co_await select(a.sendCase(v), b.sendCase(v));
      }
    }
  };
  auto producers = [&]() -> Lazy<void> {
    std::vector<Lazy<void>> all;
    for (int p = 0; p < kProducers; ++p) all.push_back(producer(p));
    for (auto& r : co_await collectAllPara(std::move(all))) r.value();
    a.close();
    b.close();
  };
  auto consumer = [&](int id) -> Lazy<void> {
    bool aOpen = true, bOpen = true;
    while (aOpen || bOpen) {
      if (aOpen && bOpen) {
        auto r = co_await select(a.receiveCase(), b.receiveCase());
        std::optional<int>& v = r.index() == 0 ? std::get<0>(r) : std::get<1>(r);
        if (v) {
          received[id].push_back(*v);
        } else {
          (r.index() == 0 ? aOpen : bOpen) = false;
          ++closedSeen;
        }
      } else {
        Channel<int>& ch = aOpen ? a : b;
        if (std::optional<int> v = co_await ch.receive()) {
          received[id].push_back(*v);
        } else {
          (aOpen ? aOpen : bOpen) = false;
          ++closedSeen;
        }
      }
    }
  };
  std::vector<Lazy<void>> everything;
  everything.push_back(producers());
  for (int c = 0; c < kConsumers; ++c) everything.push_back(consumer(c));
  for (auto& r : syncAwait(collectAllPara(std::move(everything)).via(&pool))) r.value();

  std::vector<int> all;
  for (auto& values : received) all.insert(all.end(), values.begin(), values.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kProducers * kPerProducer));
  for (int i = 0; i < kProducers * kPerProducer; ++i) ASSERT_EQ(all[i], i);
  EXPECT_EQ(closedSeen.load(), 2 * kConsumers);
}

INSTANTIATE_TEST_SUITE_P(Capacities, SelectStressTest,
                         ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{8}),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return "Capacity" + std::to_string(info.param);
                         });

TEST(SelectTest, SelectsSendingAndReceivingOnTheSameChannelsUnderConcurrency) {
  // Every participant is a select, on both ends: selects must claim each other.
  Watchdog watchdog(120s, "SelectTest.SelectsSendingAndReceivingOnTheSameChannelsUnderConcurrency");
  ThreadPool pool(2);
  constexpr int kPairs = 4, kPerSender = 5000;
  Channel<int> a, b;
  std::atomic<long> sum{0};
  std::atomic<int> count{0};
  auto sender = [&](int id) -> Lazy<void> {
    for (int i = 0; i < kPerSender; ++i) {
      co_await select(a.sendCase(id * kPerSender + i), b.sendCase(id * kPerSender + i));
    }
  };
  auto receiver = [&]() -> Lazy<void> {
    for (int i = 0; i < kPerSender; ++i) {
      auto r = co_await select(a.receiveCase(), b.receiveCase());
      std::optional<int>& v = r.index() == 0 ? std::get<0>(r) : std::get<1>(r);
      sum += *v;
      ++count;
    }
  };
  std::vector<Lazy<void>> all;
  for (int i = 0; i < kPairs; ++i) {
    all.push_back(sender(i));
    all.push_back(receiver());
  }
  for (auto& r : syncAwait(collectAllPara(std::move(all)).via(&pool))) r.value();
  const long n = kPairs * kPerSender;
  EXPECT_EQ(count.load(), n);
  EXPECT_EQ(sum.load(), n * (n - 1) / 2);
}

// ---------------------------------------------------------------------------------------
// Cancellation.

TEST(SelectCancellationTest, ASelectCancelledBeforeItStartsThrowsAndCompletesNothing) {
  Channel<int> a(1), out(1);
  ASSERT_TRUE(a.trySend(1));
  CancellationSource source;
  source.requestCancellation();
  EXPECT_THROW(syncAwait(withCancellation(source.token(), [&]() -> Lazy<void> {
                 co_await select(a.receiveCase(), out.sendCase(2));
               }())),
               OperationCancelled);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(out.size(), 0u);
}

TEST(SelectCancellationTest, AWaitingSelectIsCancelledAndLeavesEveryChannel) {
  Channel<int> a, b;
  Channel<std::unique_ptr<int>> out;
  auto value = std::make_unique<int>(9);
  CancellationSource source;
  auto selector = [&]() -> Lazy<void> {
    co_await select(a.receiveCase(), b.receiveCase(), out.sendCase(std::move(value)));
  };
  test::CancellableOutcome outcome;
  test::startCancellable(source.token(), selector(), outcome);
  test::expectCancellationEndsTheWait(source, outcome);
  EXPECT_FALSE(a.trySend(1));
  EXPECT_FALSE(b.trySend(1));
  EXPECT_FALSE(out.tryReceive().has_value());
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(*value, 9);
}

TEST(SelectCancellationTest, CancellationAfterACaseCompletedChangesNothing) {
  Channel<int> a, b;
  CancellationSource source;
  std::size_t index = 99;
  auto selector = [&]() -> Lazy<void> {
    auto r = co_await select(a.receiveCase(), b.receiveCase());
    index = r.index();
    source.requestCancellation();
  };
  test::CancellableOutcome outcome;
  test::startCancellable(source.token(), selector(), outcome);
  EXPECT_TRUE(b.trySend(2));
  EXPECT_TRUE(outcome.done);
  EXPECT_FALSE(outcome.error);
  EXPECT_EQ(index, 1u);
}

TEST(SelectCancellationTest, ACancelledSelectIsResumedThroughItsExecutor) {
  ManualExecutor executor;
  Channel<int> a, b;
  CancellationSource source;
  bool done = false;
  std::exception_ptr error;
  auto selector = [&]() -> Lazy<void> { co_await select(a.receiveCase(), b.receiveCase()); };
  withCancellation(source.token(), selector()).via(&executor).start([&](Try<void> r) {
    done = true;
    if (r.hasException()) error = r.exception();
  });
  executor.runAll();
  EXPECT_FALSE(done);
  source.requestCancellation();
  EXPECT_FALSE(done);
  EXPECT_EQ(executor.pending(), 1u);
  executor.runAll();
  EXPECT_TRUE(done);
  ASSERT_TRUE(error);
  EXPECT_THROW(std::rethrow_exception(error), OperationCancelled);
}

// Cancellation racing with channel operations on a 2-thread pool, selects on both ends:
// a value arrives exactly when its send completed.
TEST(SelectCancellationTest, CancelledSelectsTransferNothingUnderConcurrency) {
  Watchdog watchdog(180s, "SelectCancellationTest.CancelledSelectsTransferNothingUnderConcurrency");
  ThreadPool pool(2);
  constexpr int kSenders = 12, kReceivers = 12, kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    Channel<int> a, b(1);
    std::vector<CancellationSource> senderSources(kSenders), receiverSources(kReceivers);
    std::vector<int> sentOk, received;  // guarded by `mutex`
    std::mutex mutex;
    std::atomic<int> cancelledSends{0};
    auto sender = [&](int v) -> Lazy<void> {
      try {
        co_await select(a.sendCase(v), b.sendCase(v));
        std::lock_guard lock(mutex);
        sentOk.push_back(v);
      } catch (const OperationCancelled&) {
        ++cancelledSends;
      }
    };
    auto receiver = [&]() -> Lazy<void> {
      try {
        auto r = co_await select(a.receiveCase(), b.receiveCase());
        std::optional<int>& v = r.index() == 0 ? std::get<0>(r) : std::get<1>(r);
        if (v) {
          std::lock_guard lock(mutex);
          received.push_back(*v);
        }
      } catch (const OperationCancelled&) {
      }
    };
    auto senders = [&]() -> Lazy<void> {
      std::vector<Lazy<void>> all;
      for (int i = 0; i < kSenders; ++i) {
        all.push_back(withCancellation(senderSources[i].token(), sender(i)));
      }
      for (auto& r : co_await collectAllPara(std::move(all))) r.value();
      a.close();
      b.close();
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
    while (std::optional<int> v = b.tryReceive()) received.push_back(*v);
    std::sort(sentOk.begin(), sentOk.end());
    std::sort(received.begin(), received.end());
    ASSERT_EQ(sentOk, received) << "round " << round;
    EXPECT_EQ(static_cast<int>(sentOk.size()) + cancelledSends.load(), kSenders);
  }
}

// ---------------------------------------------------------------------------------------
// The timeout case (Go's `case <-time.After(d)`). No timing is asserted: a timeout
// that never fired would trip the watchdog.

TEST(SelectTimeoutTest, TheTimeoutIsChosenWhenNothingArrivesAndLeavesNothingBehind) {
  Watchdog watchdog(60s, "SelectTimeoutTest.TheTimeoutIsChosenWhenNothingArrives");
  Channel<int> a;
  Channel<std::string> out;
  std::string value = "unsent";
  std::size_t index = syncAwait([&]() -> Lazy<std::size_t> {
    auto r = co_await select(a.receiveCase(), out.sendCase(std::move(value)), timeoutCase(5ms));
    co_return r.index();
  }());
  EXPECT_EQ(index, 2u);
  EXPECT_EQ(value, "unsent");
  EXPECT_FALSE(a.trySend(1));
  EXPECT_FALSE(out.tryReceive().has_value());
}

TEST(SelectTimeoutTest, AReadyCaseBeatsEvenAnExpiredTimeout) {
  Watchdog watchdog(60s, "SelectTimeoutTest.AReadyCaseBeatsEvenAnExpiredTimeout");
  Channel<int> a(1);
  for (std::chrono::milliseconds timeout : {0ms, -5ms, std::chrono::milliseconds(1h)}) {
    ASSERT_TRUE(a.trySend(4));
    std::size_t index = syncAwait([&]() -> Lazy<std::size_t> {
      auto r = co_await select(timeoutCase(timeout), a.receiveCase());
      co_return r.index();
    }());
    EXPECT_EQ(index, 1u);
  }
}

TEST(SelectTimeoutTest, AnExpiredTimeoutIsChosenAtOnceWhenNothingElseIsReady) {
  Watchdog watchdog(60s, "SelectTimeoutTest.AnExpiredTimeoutIsChosenAtOnce");
  Channel<int> a;
  std::size_t index = syncAwait([&]() -> Lazy<std::size_t> {
    auto r = co_await select(a.receiveCase(), timeoutCase(0s));
    co_return r.index();
  }());
  EXPECT_EQ(index, 1u);
  EXPECT_FALSE(a.trySend(1));
}

TEST(SelectTimeoutTest, AValueArrivingFirstWinsAndDisarmsTheTimer) {
  Watchdog watchdog(60s, "SelectTimeoutTest.AValueArrivingFirstWinsAndDisarmsTheTimer");
  ThreadPool pool(2);
  Channel<int> a;
  std::thread sender([&] {
    while (!a.trySend(7)) std::this_thread::yield();  // once the select waits on `a`
  });
  auto [index, value, onPool] = syncAwait([&]() -> Lazy<std::tuple<std::size_t, int, bool>> {
    auto r = co_await select(a.receiveCase(), timeoutCase(1h));
    co_return std::tuple{r.index(), r.index() == 0 ? *std::get<0>(r) : -1,
                         pool.currentThreadInExecutor()};
  }()
                                                      .via(&pool));
  sender.join();
  EXPECT_EQ(index, 0u);
  EXPECT_EQ(value, 7);
  EXPECT_TRUE(onPool);
  // The hour-long timer was disarmed: shutting the pool down does not wait for it (it
  // would end it early with ExecutorShutDown, which nobody is left to receive).
}

TEST(SelectTimeoutTest, ATimedOutTaskResumesOnItsPool) {
  Watchdog watchdog(60s, "SelectTimeoutTest.ATimedOutTaskResumesOnItsPool");
  ThreadPool pool(2);
  Channel<int> a;
  auto [index, onPool] = syncAwait([&]() -> Lazy<std::pair<std::size_t, bool>> {
    auto r = co_await select(a.receiveCase(), timeoutCase(2ms));
    co_return std::pair{r.index(), pool.currentThreadInExecutor()};
  }()
                                       .via(&pool));
  EXPECT_EQ(index, 1u);
  EXPECT_TRUE(onPool);
}

TEST(SelectTimeoutTest, CancellationBeforeTheTimeoutWins) {
  Watchdog watchdog(60s, "SelectTimeoutTest.CancellationBeforeTheTimeoutWins");
  Channel<int> a;
  CancellationSource source;
  auto selector = [&]() -> Lazy<void> { co_await select(a.receiveCase(), timeoutCase(1h)); };
  test::CancellableOutcome outcome;
  test::startCancellable(source.token(), selector(), outcome);
  test::expectCancellationEndsTheWait(source, outcome);
  EXPECT_FALSE(a.trySend(1));
}

TEST(SelectTimeoutTest, PoolShutdownEndsAWaitingTimeoutWithExecutorShutDown) {
  Watchdog watchdog(60s, "SelectTimeoutTest.PoolShutdownEndsAWaitingTimeout");
  Channel<int> a;
  std::atomic<bool> done{false};
  std::exception_ptr error;
  {
    ThreadPool pool(1);
    Channel<int> started(1);
    auto selector = [&]() -> Lazy<void> {
      co_await started.send(0);
      co_await select(a.receiveCase(), timeoutCase(1h));
    };
    selector().via(&pool).start([&](Try<void> r) {
      if (r.hasException()) error = r.exception();
      done = true;
    });
    syncAwait(started.receive());
    pool.shutdown();
  }
  EXPECT_TRUE(done.load());
  ASSERT_TRUE(error);
  EXPECT_THROW(std::rethrow_exception(error), ExecutorShutDown);
  EXPECT_FALSE(a.trySend(1));
}

// Timeouts racing with deliveries on a 2-thread pool: a value is received exactly when
// its send completed; a select that timed out took nothing.
TEST(SelectTimeoutTest, TimeoutsRacingWithDeliveriesLoseNothing) {
  Watchdog watchdog(180s, "SelectTimeoutTest.TimeoutsRacingWithDeliveriesLoseNothing");
  ThreadPool pool(2);
  constexpr int kValues = 2000;
  Channel<int> ch;
  std::mutex mutex;
  std::vector<int> sentOk, received;  // guarded by `mutex`
  std::atomic<int> timeouts{0};
  auto sender = [&]() -> Lazy<void> {
    for (int i = 0; i < kValues; ++i) {
      auto r = co_await select(ch.sendCase(i), timeoutCase(std::chrono::microseconds(i % 50)));
      if (r.index() == 0) {
        std::lock_guard lock(mutex);
        sentOk.push_back(i);
      }
    }
    ch.close();
  };
  auto receiver = [&]() -> Lazy<void> {
    for (;;) {
      auto r = co_await select(ch.receiveCase(), timeoutCase(std::chrono::microseconds(30)));
      if (r.index() == 1) {
        ++timeouts;
        continue;
      }
      if (!std::get<0>(r)) break;  // closed
      std::lock_guard lock(mutex);
      received.push_back(*std::get<0>(r));
    }
  };
  auto [a, b, c] = syncAwait(collectAllPara(sender(), receiver(), receiver()).via(&pool));
  a.value();
  b.value();
  c.value();
  std::sort(received.begin(), received.end());
  EXPECT_EQ(sentOk, received);
}

}  // namespace
}  // namespace weft
