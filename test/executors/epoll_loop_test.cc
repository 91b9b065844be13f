// The event loops driven by hand with raw IoOperations on Unix socket pairs, as an
// executor implementer would: descriptor numbers reused after close (retired or closed
// behind the loop's back), stale registrations (in another loop, or of a file kept open
// elsewhere), readiness waits on a descriptor that is ready already, and several waiters
// served in order by the events of one descriptor. The epoll loop registers a descriptor
// once (edge-triggered) and keeps its readiness in user space, which is what these
// scenarios could break; they run on io_uring too, where the same contract holds.
//
// Unix socket pairs deliver synchronously: when send(2) returns, the peer's data and its
// epoll event are there, so run(0) after a send sees them, and a run(0) with nothing sent
// has nothing to see, however slow the machine.

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "weft/executors/io_loop.h"
#include "test/support/io_backends.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// An operation that counts its completions (whether submit completed it at once or the
// loop ran `complete`).
struct TestOp : IoOperation {
  int completions = 0;
};

void countCompletion(IoOperation& op) noexcept { ++static_cast<TestOp&>(op).completions; }

// Describes a receive (or readiness wait, or send) of `length` bytes at `buffer` on `fd`.
// `retires`: the owner calls IoLoop::retireDescriptor before closing (as weft's sockets do).
void prepare(TestOp& op, IoOpcode opcode, int fd, void* buffer, std::size_t length,
             bool retires = true) {
  op.opcode = opcode;
  op.fd = fd;
  op.buffer = buffer;
  op.length = length;
  op.ownerRetiresFd = retires;
  op.complete = &countCompletion;
  op.completions = 0;
  op.result = 0;
}

// Submits `op`; true when it is in flight (false: it completed at once, and is counted).
bool start(IoLoop& loop, TestOp& op) {
  if (!loop.submit(op)) return true;
  ++op.completions;
  return false;
}

// Runs `loop` until `op` has completed. False after 30 s: a hang guard far above any
// scheduling delay, not a timing assertion.
bool runUntilDone(IoLoop& loop, const TestOp& op) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (op.completions == 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    loop.run(10);
  }
  return true;
}

// A connected pair of non-blocking Unix stream sockets; closed by the destructor (the
// loop's side retired first, as weft's close does) unless released.
struct Pair {
  int mine = -1;    // the loop's side
  int theirs = -1;  // the test's side, driven with plain system calls

  Pair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
      ADD_FAILURE() << "socketpair: " << std::strerror(errno);
      return;
    }
    mine = fds[0];
    theirs = fds[1];
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
  ~Pair() { close(); }

  // Closes both ends, retiring the loop's side first when `retire`.
  void close(bool retire = true) {
    if (mine >= 0) {
      if (retire) IoLoop::retireDescriptor(mine);
      ::close(std::exchange(mine, -1));
    }
    if (theirs >= 0) ::close(std::exchange(theirs, -1));
  }

  bool send(const char* text) const {
    const auto length = static_cast<ssize_t>(std::strlen(text));
    return ::send(theirs, text, static_cast<std::size_t>(length), MSG_NOSIGNAL) == length;
  }
};

// Reads into `buffer` on `pair`'s loop side with a wait (the socket has no data yet), then
// has the peer write `text`; the read must complete with it.
void waitingReadGets(IoLoop& loop, const Pair& pair, const char* text, bool retires = true) {
  char buffer[32] = {};
  TestOp read;
  prepare(read, IoOpcode::kReceive, pair.mine, buffer, sizeof buffer, retires);
  ASSERT_TRUE(start(loop, read)) << "the read did not wait: " << read.result;
  loop.run(0);
  EXPECT_EQ(read.completions, 0) << "completed without data";
  ASSERT_TRUE(pair.send(text));
  ASSERT_TRUE(runUntilDone(loop, read)) << "a read that waited was never served";
  EXPECT_EQ(read.completions, 1);
  ASSERT_EQ(read.result, static_cast<std::int64_t>(std::strlen(text)));
  EXPECT_EQ(std::string(buffer, std::strlen(text)), text);
}

class EpollLoopTest : public ::testing::TestWithParam<IoBackendChoice> {
 protected:
  void SetUp() override {
    WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
    loop_ = IoLoop::create(GetParam());
  }
  bool isEpoll() const { return GetParam() == IoBackendChoice::kEpoll; }

  std::unique_ptr<IoLoop> loop_;
};

// The reported class of hang, by construction: a number registered (and trusted) in one
// generation, retired and closed, then reused by a new socket whose read waits.
TEST_P(EpollLoopTest, AWaitOnANumberRetiredClosedAndReusedIsServed) {
  test::Watchdog watchdog(120s, "EpollLoopTest.AWaitOnANumberRetiredClosedAndReusedIsServed");
  Pair first;
  const int number = first.mine;
  waitingReadGets(*loop_, first, "first");
  waitingReadGets(*loop_, first, "again");  // registered and trusted now: no epoll_ctl
  first.close();
  Pair second;
  ASSERT_EQ(second.mine, number) << "the test needs the number to be reused";
  waitingReadGets(*loop_, second, "second");
}

// A user's raw descriptor (its owner does not retire it), closed with close(2) behind
// the loop's back and reused: the loop checks its registration at the next wait.
TEST_P(EpollLoopTest, ARawDescriptorClosedBehindTheLoopsBackAndReusedIsServed) {
  test::Watchdog watchdog(120s, "EpollLoopTest.ARawDescriptorClosedBehindTheLoopsBack");
  Pair first;
  const int number = first.mine;
  waitingReadGets(*loop_, first, "first", /*retires=*/false);
  waitingReadGets(*loop_, first, "again", /*retires=*/false);
  first.close(/*retire=*/false);
  Pair second;
  ASSERT_EQ(second.mine, number) << "the test needs the number to be reused";
  waitingReadGets(*loop_, second, "second", /*retires=*/false);
  // The next owner of the number may be one that retires (a weft socket adopting it).
  waitingReadGets(*loop_, second, "adopted", /*retires=*/true);
  second.close();
  Pair third;
  ASSERT_EQ(third.mine, number);
  waitingReadGets(*loop_, third, "third", /*retires=*/true);
}

// The old file stays open through a dup: its registration in the loop's epoll outlives
// the number's close, and its events still carry the number. They must neither complete
// nor disturb the read of the socket that reuses the number.
TEST_P(EpollLoopTest, EventsOfAClosedNumbersFileKeptOpenElsewhereAreIgnored) {
  test::Watchdog watchdog(120s, "EpollLoopTest.EventsOfAClosedNumbersFile");
  Pair first;
  const int number = first.mine;
  waitingReadGets(*loop_, first, "first");
  const int keptOpen = ::fcntl(first.mine, F_DUPFD_CLOEXEC, 100);
  ASSERT_GE(keptOpen, 0);
  IoLoop::retireDescriptor(first.mine);
  ::close(std::exchange(first.mine, -1));
  Pair second;
  ASSERT_EQ(second.mine, number) << "the test needs the number to be reused";
  char buffer[32] = {};
  TestOp read;
  prepare(read, IoOpcode::kReceive, second.mine, buffer, sizeof buffer);
  ASSERT_TRUE(start(*loop_, read));
  ASSERT_TRUE(first.send("stale"));  // an event for the old file, with the old number
  for (int i = 0; i < 3; ++i) loop_->run(0);
  EXPECT_EQ(read.completions, 0) << "the old file's event completed the new socket's read";
  ASSERT_TRUE(second.send("fresh"));
  ASSERT_TRUE(runUntilDone(*loop_, read));
  ASSERT_EQ(read.result, 5);
  EXPECT_EQ(std::string(buffer, 5), "fresh");
  char old[8] = {};
  EXPECT_EQ(::recv(keptOpen, old, sizeof old, 0), 5) << "the old file's bytes were taken";
  ::close(keptOpen);
}

// Readiness waits complete when the descriptor is ready now, not only on the next edge:
// on a fresh descriptor with data; on a registered one whose data came while nobody
// waited (the event harvested, or still in the kernel); and they do wait once the data
// was taken outside the loop (by a plain recv, as tryRead does).
TEST_P(EpollLoopTest, AReadinessWaitOnAnAlreadyReadableDescriptorCompletes) {
  test::Watchdog watchdog(120s, "EpollLoopTest.AReadinessWaitOnAnAlreadyReadable");
  Pair pair;
  char drain[64];
  TestOp ready;

  // Fresh (never registered), data there.
  ASSERT_TRUE(pair.send("x"));
  prepare(ready, IoOpcode::kPollReadable, pair.mine, nullptr, 0);
  start(*loop_, ready);
  ASSERT_TRUE(runUntilDone(*loop_, ready)) << "fresh descriptor, data there";
  EXPECT_EQ(ready.result, 0);
  ASSERT_EQ(::recv(pair.mine, drain, sizeof drain, 0), 1);

  waitingReadGets(*loop_, pair, "registered");  // registered, the loop saw it not ready

  // Data while nobody waits, its event harvested by the loop, then the wait.
  ASSERT_TRUE(pair.send("y"));
  for (int i = 0; i < 3; ++i) loop_->run(0);
  prepare(ready, IoOpcode::kPollReadable, pair.mine, nullptr, 0);
  start(*loop_, ready);
  ASSERT_TRUE(runUntilDone(*loop_, ready)) << "registered, event harvested before the wait";
  EXPECT_EQ(ready.result, 0);
  // Still readable (nobody read): a second wait completes too, with no new edge.
  prepare(ready, IoOpcode::kPollReadable, pair.mine, nullptr, 0);
  start(*loop_, ready);
  ASSERT_TRUE(runUntilDone(*loop_, ready)) << "registered, still readable, no new edge";
  ASSERT_EQ(::recv(pair.mine, drain, sizeof drain, 0), 1);

  // The loop's last try saw EAGAIN; data comes, its event not yet harvested.
  waitingReadGets(*loop_, pair, "again");
  ASSERT_TRUE(pair.send("z"));
  prepare(ready, IoOpcode::kPollReadable, pair.mine, nullptr, 0);
  start(*loop_, ready);
  ASSERT_TRUE(runUntilDone(*loop_, ready)) << "registered, event pending in the kernel";
  ASSERT_EQ(::recv(pair.mine, drain, sizeof drain, 0), 1);

  // Taken outside the loop: the loop may believe it readable; the wait must wait.
  ASSERT_TRUE(pair.send("w"));
  for (int i = 0; i < 3; ++i) loop_->run(0);
  ASSERT_EQ(::recv(pair.mine, drain, sizeof drain, 0), 1);
  prepare(ready, IoOpcode::kPollReadable, pair.mine, nullptr, 0);
  ASSERT_TRUE(start(*loop_, ready)) << "completed with nothing to read";
  for (int i = 0; i < 3; ++i) loop_->run(0);
  EXPECT_EQ(ready.completions, 0) << "completed with nothing to read";
  ASSERT_TRUE(pair.send("v"));
  ASSERT_TRUE(runUntilDone(*loop_, ready)) << "a readiness wait missed the edge";
  EXPECT_EQ(ready.completions, 1);
}

// Two reads wait in order. One edge with bytes for one of them serves the first; the
// second, tried on the same event, would block and must be served by the next edge. One
// edge with bytes for both serves both, in order.
TEST_P(EpollLoopTest, TwoReadersWaitingInOrderAreServedByTheEdges) {
  test::Watchdog watchdog(120s, "EpollLoopTest.TwoReadersWaitingInOrder");
  Pair pair;
  waitingReadGets(*loop_, pair, "registered");
  char one[5];
  char two[5];
  TestOp first;
  TestOp second;
  prepare(first, IoOpcode::kReceive, pair.mine, one, sizeof one);
  prepare(second, IoOpcode::kReceive, pair.mine, two, sizeof two);
  ASSERT_TRUE(start(*loop_, first));
  ASSERT_TRUE(start(*loop_, second));
  ASSERT_TRUE(pair.send("AAAAA"));
  ASSERT_TRUE(runUntilDone(*loop_, first));
  for (int i = 0; i < 3; ++i) loop_->run(0);
  EXPECT_EQ(second.completions, 0) << "completed without data";
  ASSERT_TRUE(pair.send("BBBBB"));
  ASSERT_TRUE(runUntilDone(*loop_, second)) << "the second reader missed the next edge";
  EXPECT_EQ(std::string(one, 5), "AAAAA");
  EXPECT_EQ(std::string(two, 5), "BBBBB");

  prepare(first, IoOpcode::kReceive, pair.mine, one, sizeof one);
  prepare(second, IoOpcode::kReceive, pair.mine, two, sizeof two);
  ASSERT_TRUE(start(*loop_, first));
  ASSERT_TRUE(start(*loop_, second));
  ASSERT_TRUE(pair.send("CCCCCDDDDD"));  // one edge for both
  ASSERT_TRUE(runUntilDone(*loop_, first));
  ASSERT_TRUE(runUntilDone(*loop_, second)) << "one edge for two readers served only one";
  EXPECT_EQ(std::string(one, 5), "CCCCC");
  EXPECT_EQ(std::string(two, 5), "DDDDD");
}

// A send that waits for room is served by the writable edge when the peer reads.
TEST_P(EpollLoopTest, AWriterThatWaitedForRoomIsServed) {
  test::Watchdog watchdog(120s, "EpollLoopTest.AWriterThatWaitedForRoom");
  Pair pair;
  waitingReadGets(*loop_, pair, "registered");
  char chunk[4096] = {};
  std::size_t queued = 0;
  for (;;) {  // fill the socket's buffers
    const ssize_t n = ::send(pair.mine, chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) break;
    queued += static_cast<std::size_t>(n);
  }
  ASSERT_EQ(errno, EAGAIN);
  TestOp write;
  prepare(write, IoOpcode::kSend, pair.mine, chunk, sizeof chunk);
  ASSERT_TRUE(start(*loop_, write)) << "a send into full buffers did not wait";
  for (int i = 0; i < 3; ++i) loop_->run(0);
  EXPECT_EQ(write.completions, 0);
  while (queued != 0) {  // the peer reads everything
    const ssize_t n = ::recv(pair.theirs, chunk, sizeof chunk, 0);
    ASSERT_GT(n, 0);
    queued -= static_cast<std::size_t>(n);
  }
  ASSERT_TRUE(runUntilDone(*loop_, write)) << "a send that waited for room was never served";
  EXPECT_GT(write.result, 0);
}

// Two loops (two workers a stream moved between) both register one descriptor. Events
// for it in the loop that no longer serves it are ignored; after close and reuse of the
// number each loop serves the new socket.
TEST_P(EpollLoopTest, AStaleRegistrationInAnotherLoopIsHarmless) {
  test::Watchdog watchdog(120s, "EpollLoopTest.AStaleRegistrationInAnotherLoop");
  std::unique_ptr<IoLoop> other = IoLoop::create(GetParam());
  Pair first;
  const int number = first.mine;
  waitingReadGets(*loop_, first, "in one");
  waitingReadGets(*other, first, "in the other");
  // Data nobody waits for: both loops may be told; neither completes anything.
  ASSERT_TRUE(first.send("idle"));
  EXPECT_EQ(loop_->run(0), 0u);
  EXPECT_EQ(other->run(0), 0u);
  char buffer[16];
  ASSERT_EQ(::recv(first.mine, buffer, sizeof buffer, 0), 4);
  waitingReadGets(*loop_, first, "back in one");
  first.close();
  Pair second;
  ASSERT_EQ(second.mine, number) << "the test needs the number to be reused";
  waitingReadGets(*other, second, "the other, reused");
  waitingReadGets(*loop_, second, "one, reused");
  EXPECT_FALSE(loop_->hasWork());
  EXPECT_FALSE(other->hasWork());
}

// A regular file cannot be waited on with epoll: the wait fails with EPERM at once, and
// the number, closed and reused by a socket, is served.
TEST_P(EpollLoopTest, AWaitOnARegularFileFailsWithEpermOnEpoll) {
  if (!isEpoll()) GTEST_SKIP() << "io_uring polls regular files (always ready)";
  test::Watchdog watchdog(120s, "EpollLoopTest.AWaitOnARegularFile");
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  const int number = ::fileno(file);
  TestOp ready;
  prepare(ready, IoOpcode::kPollReadable, number, nullptr, 0);
  EXPECT_FALSE(start(*loop_, ready));
  EXPECT_EQ(ready.result, -EPERM);
  EXPECT_FALSE(loop_->hasWork());
  IoLoop::retireDescriptor(number);
  std::fclose(file);
  Pair pair;
  if (pair.mine == number) waitingReadGets(*loop_, pair, "after the file");
}

INSTANTIATE_TEST_SUITE_P(Backends, EpollLoopTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
