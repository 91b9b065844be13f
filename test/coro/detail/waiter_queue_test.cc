#include "weft/coro/detail/waiter_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/coro/channel.h"
#include "weft/coro/event.h"
#include "weft/coro/lazy.h"
#include "test/support/start_detached.h"
#include "test/support/eager_coroutine.h"

namespace weft::detail {
namespace {

struct Node : WaiterNode {
  explicit Node(int i) : id(i) {}
  int id;
  WaiterStatus status = WaiterStatus::kIdle;
};

std::vector<int> ids(const WaiterList<Node>& list) {
  std::vector<int> out;
  list.forEach([&](Node* node) { out.push_back(node->id); });
  return out;
}

TEST(WaiterListTest, IsAFifoWhoseNodesLeaveFromAnywhere) {
  Node a(1), b(2), c(3), d(4);
  WaiterList<Node> list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.popFront(), nullptr);
  for (Node* node : {&a, &b, &c, &d}) list.pushBack(node);
  EXPECT_EQ(ids(list), (std::vector<int>{1, 2, 3, 4}));
  list.remove(&b);  // the middle
  EXPECT_EQ(b.prev, nullptr);
  EXPECT_EQ(b.next, nullptr);
  list.remove(&d);  // the tail
  EXPECT_EQ(ids(list), (std::vector<int>{1, 3}));
  list.remove(&a);  // the head
  EXPECT_EQ(list.front(), &c);
  list.pushBack(&b);
  EXPECT_EQ(list.popFront(), &c);
  EXPECT_EQ(list.popFront(), &b);
  EXPECT_TRUE(list.empty());
}

TEST(WaiterListTest, AppendMovesEveryNodeInOrder) {
  Node a(1), b(2), c(3);
  WaiterList<Node> list, other, empty;
  list.append(std::move(other));  // empty onto empty
  EXPECT_TRUE(list.empty());
  other.pushBack(&a);
  other.pushBack(&b);
  list.append(std::move(other));  // onto empty
  EXPECT_TRUE(other.empty());
  EXPECT_EQ(ids(list), (std::vector<int>{1, 2}));
  other.pushBack(&c);
  list.append(std::move(other));  // onto a non-empty list
  list.append(std::move(empty));
  EXPECT_EQ(ids(list), (std::vector<int>{1, 2, 3}));
  list.remove(&c);  // the tail is still known
  EXPECT_EQ(ids(list), (std::vector<int>{1, 2}));
}

TEST(CancelWaitLockedTest, MarksAWaiterNotYetQueuedWithoutTouchingTheList) {
  Node a(1), b(2);
  WaiterList<Node> list;
  list.pushBack(&a);
  a.status = WaiterStatus::kQueued;
  EXPECT_FALSE(cancelWaitLocked(list, &b, b.status));
  EXPECT_EQ(b.status, WaiterStatus::kCancelled);
  EXPECT_EQ(ids(list), (std::vector<int>{1}));
}

TEST(CancelWaitLockedTest, UnlinksAQueuedWaiterAndGivesItsResumptionToTheCaller) {
  Node a(1), b(2), c(3);
  WaiterList<Node> list;
  for (Node* node : {&a, &b, &c}) {
    list.pushBack(node);
    node->status = WaiterStatus::kQueued;
  }
  EXPECT_TRUE(cancelWaitLocked(list, &b, b.status));
  EXPECT_EQ(b.status, WaiterStatus::kCancelled);
  EXPECT_EQ(ids(list), (std::vector<int>{1, 3}));
  // A second request finds it cancelled already: nothing more to do.
  EXPECT_FALSE(cancelWaitLocked(list, &b, b.status));
  EXPECT_EQ(ids(list), (std::vector<int>{1, 3}));
}

TEST(CancelWaitLockedTest, LeavesACompletedWaiterAlone) {
  for (WaiterStatus done : {WaiterStatus::kDone, WaiterStatus::kClosed}) {
    Node a(1);
    WaiterList<Node> list;
    a.status = done;
    EXPECT_FALSE(cancelWaitLocked(list, &a, a.status));
    EXPECT_EQ(a.status, done);
  }
}

// A coroutine that parks its handle in a node, then logs its id, runs `then`, and logs
// the negated id.
using Detached = test::EagerCoroutine;
struct Park {
  Node& node;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> handle) noexcept { node.handle = handle; }
  void await_resume() const noexcept {}
};
Detached parked(Node& node, std::vector<int>& log, std::function<void()> then) {
  co_await Park{node};
  log.push_back(node.id);
  then();
  log.push_back(-node.id);
}

TEST(ResumeWaiterTest, InlineResumptionsRequestedWhileOneRunsFollowItInOrder) {
  std::vector<int> log;
  Node a(1), b(2), c(3);
  parked(b, log, [] {});
  parked(c, log, [] {});
  parked(a, log, [&] {
    resumeWaiter(&b);
    resumeWaiter(&c);
  });
  resumeWaiter(&a);
  // b and c ran after a, not nested inside it, and in the order they were requested.
  EXPECT_EQ(log, (std::vector<int>{1, -1, 2, -2, 3, -3}));
  EXPECT_FALSE(tInlineResumer.running);
  EXPECT_EQ(tInlineResumer.head, nullptr);
}

// One trampoline serves every kind of waiter: a channel receiver woken inline from inside
// an Event waiter's inline resumption runs after it, not nested inside its send.
TEST(ResumeWaiterTest, OneTrampolineServesSyncAndChannelWaiters) {
  Event event;
  Channel<int> channel;
  std::vector<std::string> log;
  std::atomic<int> done{0};
  auto receiver = [&]() -> Lazy<> {
    std::optional<int> value = co_await channel.receive();
    log.push_back("received " + std::to_string(value.value_or(-1)));
  };
  auto sender = [&]() -> Lazy<> {
    co_await event.wait();
    co_await channel.send(7);
    log.push_back("sent");
  };
  test::startDetached(receiver(), done);
  test::startDetached(sender(), done);
  EXPECT_EQ(done.load(), 0);
  event.set();
  EXPECT_EQ(done.load(), 2);
  EXPECT_EQ(log, (std::vector<std::string>{"sent", "received 7"}));
}

}  // namespace
}  // namespace weft::detail
