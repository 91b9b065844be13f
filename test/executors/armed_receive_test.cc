// IoArmedReceive driven raw, as an executor implementer's code or weft's streams use it:
// one request per socket, a completion per arrival, a last one when cancelArmed() (from
// the loop's thread or another), the end of the stream or the loop's shutdown ends it;
// no byte lost, duplicated or reordered, every lent buffer given back. A loop that keeps
// no such requests (epoll) refuses them.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test/support/io_backends.h"
#include "test/support/io_support.h"
#include "test/support/watchdog.h"
#include "weft/executors/io_loop.h"

namespace weft {
namespace {

// An armed receive that records its completions (result, `more`, shutDown, the bytes).
struct RecordingArmed : IoArmedReceive {
  struct Seen {
    std::int64_t result;
    bool more;
    bool shutDown;
    std::string bytes;
  };
  std::vector<Seen> completions;
  std::string bytes;  // every byte received, in order
  bool ended = false;
  RecordingArmed() {
    complete = [](IoArmedReceive& request, Completion& c) noexcept {
      auto& self = static_cast<RecordingArmed&>(request);
      self.completions.push_back({c.result, c.more, c.shutDown, std::string(c.received.text())});
      self.bytes += c.received.text();
      self.ended = !c.more;
      // c.received goes back to the loop when the completion returns.
    };
  }
};

// Runs `loop` until `request` has `n` completions (a hang is the watchdog's).
void runUntil(IoLoop& loop, const RecordingArmed& request, std::size_t n) {
  while (request.completions.size() < n) loop.run(-1);
}
void runUntilEnded(IoLoop& loop, const RecordingArmed& request) {
  while (!request.ended) loop.run(-1);
}

std::pair<test::OwnedFd, test::OwnedFd> socketPair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return {test::OwnedFd(fds[0]), test::OwnedFd(fds[1])};
}

// Reads what is left in `fd` (non-blocking) into `out`.
void drainSocket(int fd, std::string& out) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return;
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

class ArmedReceiveTest : public ::testing::TestWithParam<IoBackendChoice> {};

// One request, one completion per arrival with `more` set, and a last one without when
// cancelArmed() ends it (from another thread) or the stream ends. A loop that keeps no
// such requests (epoll) refuses it at once; an IoOperation of kReceiveMultishot is
// refused by every loop.
TEST_P(ArmedReceiveTest, KeepsAReceiveArmedWhereItOffersTo) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  test::Watchdog watchdog(std::chrono::seconds(60), "KeepsAReceiveArmed");
  auto loop = IoLoop::create(GetParam());
  IoLoop::CurrentScope scope(loop.get());
  auto [mine, peer] = socketPair();
  IoOperation old;
  old.opcode = IoOpcode::kReceiveMultishot;
  old.fd = mine.get();
  ASSERT_TRUE(loop->submit(old));
  EXPECT_EQ(old.result, -EOPNOTSUPP);
  RecordingArmed request;
  request.fd = mine.get();
  if (!loop->multishotReceive()) {
    EXPECT_EQ(loop->armReceive(request), -EOPNOTSUPP);
    EXPECT_FALSE(loop->hasWork());
    return;
  }
  ASSERT_EQ(loop->armReceive(request), 0);
  EXPECT_TRUE(loop->hasWork());
  ASSERT_TRUE(test::sendAllBlocking(peer.get(), "ab", 2));
  runUntil(*loop, request, 1);
  ASSERT_TRUE(test::sendAllBlocking(peer.get(), "cd", 2));
  runUntil(*loop, request, 2);
  EXPECT_EQ(request.completions[0].bytes, "ab");
  EXPECT_TRUE(request.completions[0].more);
  EXPECT_EQ(request.completions[1].bytes, "cd");
  EXPECT_TRUE(request.completions[1].more);
  std::thread([&] { loop->cancelArmed(request); }).join();  // from another thread
  runUntil(*loop, request, 3);
  EXPECT_EQ(request.completions[2].result, -ECANCELED);
  EXPECT_FALSE(request.completions[2].more);
  EXPECT_FALSE(request.completions[2].shutDown);
  EXPECT_FALSE(loop->hasWork());
  // Armed again, then the end of the stream ends it.
  request.completions.clear();
  request.ended = false;
  ASSERT_EQ(loop->armReceive(request), 0);
  ASSERT_TRUE(test::sendAllBlocking(peer.get(), "e", 1));
  ::shutdown(peer.get(), SHUT_WR);
  runUntilEnded(*loop, request);
  EXPECT_EQ(request.completions.front().bytes, "e");
  EXPECT_EQ(request.completions.back().result, 0);
  EXPECT_FALSE(loop->hasWork());
  EXPECT_EQ(loop->lentBuffers(), 0u);
}

// cancelArmed() from another thread while bytes keep arriving, 200 times: the request
// ends exactly once, every byte it received is reported once and in order, the rest is
// still in the socket, and every buffer comes back. Races the cancellation queue's
// hand-off against the request's last completion (IoLoopBase::settleArmed).
TEST_P(ArmedReceiveTest, CancelFromAnotherThreadLosesAndDuplicatesNothing) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  test::Watchdog watchdog(std::chrono::seconds(120), "CancelFromAnotherThread");
  auto loop = IoLoop::create(GetParam());
  IoLoop::CurrentScope scope(loop.get());
  if (!loop->multishotReceive()) GTEST_SKIP() << "this loop arms no receives";
  for (int round = 0; round < 200; ++round) {
    auto [mine, peer] = socketPair();
    auto request = std::make_unique<RecordingArmed>();
    request->fd = mine.get();
    ASSERT_EQ(loop->armReceive(*request), 0);
    std::string sent;
    for (int i = 0; i < 8; ++i) sent += "message " + std::to_string(round * 8 + i) + ";";
    std::atomic<bool> go{false};
    std::thread canceller([&] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      loop->cancelArmed(*request);
    });
    std::size_t offset = 0;
    for (int i = 0; i < 8; ++i) {
      const std::size_t part = sent.size() / 8 + (i == 7 ? sent.size() % 8 : 0);
      ASSERT_TRUE(test::sendAllBlocking(peer.get(), sent.data() + offset, part));
      offset += part;
      if (i == round % 8) go.store(true, std::memory_order_release);
      loop->run(0);
    }
    runUntilEnded(*loop, *request);
    canceller.join();
    for (std::size_t i = 0; i + 1 < request->completions.size(); ++i) {
      EXPECT_TRUE(request->completions[i].more);
      EXPECT_GT(request->completions[i].result, 0);
    }
    const auto& last = request->completions.back();
    EXPECT_TRUE(last.result == -ECANCELED || last.result > 0) << last.result;
    std::string received = request->bytes;
    drainSocket(mine.get(), received);
    EXPECT_EQ(received, sent) << "round " << round;
    EXPECT_FALSE(loop->hasWork());
    request.reset();  // the record may go once its last completion has begun
    EXPECT_EQ(loop->lentBuffers(), 0u);
  }
}

// shutdown() with armed requests (some with bytes waiting, some idle): each ends once,
// its last completion with -ECANCELED and `shutDown` set (or the bytes of a last arrival,
// or the end); no byte is reported twice; a request armed after it is refused with
// -ECANCELED; every buffer comes back.
TEST_P(ArmedReceiveTest, ShutdownEndsEveryArmedReceive) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  test::Watchdog watchdog(std::chrono::seconds(60), "ShutdownEndsEveryArmedReceive");
  auto loop = IoLoop::create(GetParam());
  IoLoop::CurrentScope scope(loop.get());
  if (!loop->multishotReceive()) GTEST_SKIP() << "this loop arms no receives";
  constexpr int kRequests = 64;
  std::vector<std::pair<test::OwnedFd, test::OwnedFd>> pairs;
  std::vector<std::unique_ptr<RecordingArmed>> requests;
  for (int i = 0; i < kRequests; ++i) {
    pairs.push_back(socketPair());
    requests.push_back(std::make_unique<RecordingArmed>());
    requests.back()->fd = pairs.back().first.get();
    ASSERT_EQ(loop->armReceive(*requests.back()), 0);
  }
  loop->run(0);
  for (int i = 0; i < kRequests; i += 2) {
    ASSERT_TRUE(test::sendAllBlocking(pairs[i].second.get(), "xyz", 3));
  }
  loop->shutdown();
  while (loop->hasWork()) loop->run(-1);
  for (int i = 0; i < kRequests; ++i) {
    const RecordingArmed& request = *requests[i];
    ASSERT_TRUE(request.ended) << i;
    const auto& last = request.completions.back();
    if (last.result == -ECANCELED) {
      EXPECT_TRUE(last.shutDown) << i;
    }
    std::string received = request.bytes;
    drainSocket(pairs[i].first.get(), received);
    EXPECT_EQ(received, i % 2 == 0 ? "xyz" : "") << i;
  }
  RecordingArmed late;
  late.fd = pairs[0].first.get();
  EXPECT_EQ(loop->armReceive(late), -ECANCELED);
  EXPECT_TRUE(late.completions.empty());
  requests.clear();
  EXPECT_EQ(loop->lentBuffers(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, ArmedReceiveTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
