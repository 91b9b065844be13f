// Cancellation, timeouts and destruction of I/O awaits (DESIGN.md invariant 4: bytes read
// from a socket reach the caller even when a timeout or cancellation races them;
// destroying a suspended coroutine frees everything it owns). Every test runs once per
// backend and checks that no descriptor leaked (/proc/self/fd) and no frame was left
// (test::Counted in every frame under test).
//
//  - Races (RaceTest): a read on a ThreadPool(1) is cancelled from the test thread at a
//    random moment while a peer thread writes at random moments, 2,000 times per
//    backend (500 under sanitizers), through a CancellationSource (withCancellation of a
//    Lazy), through a Task's token (withCancellation of a Task), and by withTimeout with
//    timeouts of 0 to 175 us. Each read ends exactly once, with bytes or with the
//    cancellation's exception; at the end the bytes returned plus those still readable
//    are exactly the stream the peer wrote.
//    The same races with receive() (lent buffers): no byte lost, and every lent buffer
//    given back (IoLoop::lentBuffers).
//  - Cancellation before the await (nothing submitted: the data stays), during the wait
//    (the data written afterwards stays), and together with the completion (whichever
//    wins, nothing is lost).
//  - Destroying a coroutine suspended in a read or an accept, on the loop's thread (#15's
//    rule; docs/concurrency.md, "Destroying a suspended coroutine"), the way
//    test/coro/suspended_destruction_test.cc does it (resumed by hand until it suspends,
//    then destroyed), on the pool's worker; off the loop's thread it is reported and
//    aborts (IoDestroyDeathTest). After what it waits for has arrived (data, a
//    connection) it must leave it for the next reader or accept where the operation has
//    not taken effect (epoll), or report the claimed wake-up and abort where it has
//    (io_uring, or a completion waiting for the loop's turn), and never leak what a
//    completed accept returned (IoDestroyAfterArrivalTest and the same-turn test).

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/in_fiber.h"
#include "test/support/counted.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;

int raceIterations() { return test::reducedIoScale() ? 500 : 2000; }

// Byte `position` of the stream the peer writes.
std::byte streamByte(std::size_t position) {
  std::uint64_t x = position * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return static_cast<std::byte>(static_cast<std::uint8_t>(x ^ (x >> 17)));
}

void spin(unsigned rounds) {
  std::atomic<unsigned> counter{0};
  while (counter.fetch_add(1, std::memory_order_relaxed) < rounds) {
  }
}

// A read whose frame is counted.
Lazy<std::size_t> readCounted(TcpStream& stream, std::span<std::byte> buffer) {
  Counted inFrame;
  co_return co_await stream.read(buffer);
}

Lazy<TcpStream> acceptCounted(TcpListener& listener) {
  Counted inFrame;
  co_return co_await listener.accept();
}

using test::onWorker;
using test::Outcome;
using test::quiesce;
using test::recordInto;
using test::startOn;
using test::startSuspended;
using test::WorkerHold;

// Waits until the listening socket `fd` has a connection in its accept queue (for a
// listening socket, TCP_INFO's tcpi_unacked is that queue's length); false if it does not
// within a second. The bound: on a kernel without COOP_TASKRUN, io_uring's task work may
// take the connection out of the queue at once, even while the worker is held, and the
// wait would never see it; callers hold either way, only their coverage differs.
bool waitForPendingConnection(int fd) {
  const auto giveUp = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < giveUp) {
    tcp_info info{};
    socklen_t length = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0 && info.tcpi_unacked >= 1) {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

class IoCancellationTest : public test::IoLeakCheckedTest {
 protected:

  // Reads, without weft, the `size` bytes the peer wrote before (loopback delivers them
  // within its send), or what is there of them: poll() waits up to 10 s for each part (a
  // bound for data that was lost, not a timing claim: present data is read at once).
  static std::string readAvailable(int fd, std::size_t size) {
    std::string out;
    char buffer[256];
    while (out.size() < size) {
      pollfd readable{fd, POLLIN, 0};
      if (::poll(&readable, 1, 10'000) != 1) break;
      const ssize_t n = ::recv(fd, buffer, std::min(sizeof buffer, size - out.size()), MSG_DONTWAIT);
      if (n <= 0) break;
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
  }

};

// ---------------------------------------------------------------------------------------
// Races: cancellation, a Task's token and timeouts against a peer writing at random.

enum class Race { kCancellationSource, kTaskToken, kTimeout };

// How the race reads: read() into the caller's buffer, or receive() into a lent one
// (copied out; at most 64 KiB, so the caller's buffer is that large).
enum class ReadStyle { kRead, kReceive };

// A counted read that announces its start (readStarts goes up, waiters are woken).
Lazy<std::size_t> readAnnounced(TcpStream& stream, std::span<std::byte> buffer,
                                std::atomic<int>& readStarts, ReadStyle style) {
  Counted inFrame;
  readStarts.fetch_add(1);
  readStarts.notify_all();
  if (style == ReadStyle::kRead) co_return co_await stream.read(buffer);
  LentBuffer data = co_await stream.receive();
  if (data.size() > buffer.size()) throw std::length_error("a receive returned too much");
  std::memcpy(buffer.data(), data.data(), data.size());
  co_return data.size();
}

// The moments are anchored to each read's start (not to wall time, which a loaded
// machine stretches): the peer writes its chunk (3 reads in 4), and the cancellation is
// requested, each after a spin of random length from that start; 1 cancellation in 8
// comes before the read is even started.
void raceReadsAgainstAWriter(ThreadPool& pool, Race race, ReadStyle style = ReadStyle::kRead) {
  test::StreamAndPeer pair = test::connectedPair(pool);
  const int iterations = raceIterations();
  std::atomic<int> readStarted{-1};  // the iteration whose read has started; -2: stop
  std::size_t sent = 0;
  std::thread writer([&] {
    std::minstd_rand random(7);
    std::byte chunk[64];
    int last = -1;
    for (;;) {
      readStarted.wait(last);
      last = readStarted.load();
      if (last == -2) break;
      if (random() % 4 == 0) continue;
      spin(random() % 20000);
      const std::size_t n = 1 + random() % sizeof chunk;
      for (std::size_t i = 0; i < n; ++i) chunk[i] = streamByte(sent + i);
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), chunk, n));
      sent += n;
    }
    ::shutdown(pair.peer.get(), SHUT_WR);
  });

  std::vector<std::byte> received;
  std::minstd_rand random(11);
  std::atomic<int> readStarts{0};
  int cancelled = 0;
  int completed = 0;
  int wrongEnds = 0;
  std::string firstWrongEnd;
  std::vector<std::byte> readBuffer(style == ReadStyle::kRead ? 48 : 65536);
  for (int i = 0; i < iterations; ++i) {
    const std::span<std::byte> buffer(readBuffer);
    Outcome<std::size_t> read;
    CancellationSource source;
    const unsigned when = random() % 8;
    if (race != Race::kTimeout && when == 0) source.requestCancellation();
    const int starts = readStarts.load();
    auto readOne = [&] { return readAnnounced(pair.stream, buffer, readStarts, style); };
    switch (race) {
      case Race::kCancellationSource:
        startOn(pool, withCancellation(source.token(), readOne()), read);
        break;
      case Race::kTaskToken:
        withCancellation(source.token(), readOne().via(&pool)).start(recordInto(read));
        break;
      case Race::kTimeout:
        startOn(pool,
                withTimeout(readOne(),
                            std::chrono::microseconds(when == 0 ? 0 : random() % (when * 25))),
                read);
        break;
    }
    readStarts.wait(starts);  // the read has started on the worker
    readStarted.store(i);
    readStarted.notify_all();
    if (race != Race::kTimeout && when != 0) {
      spin(random() % (when * 3000));
      source.requestCancellation();
    }
    read.wait();
    if (read.result.hasValue()) {
      const std::size_t n = read.result.value();
      if (n == 0 || n > buffer.size()) {
        ++wrongEnds;
        if (firstWrongEnd.empty()) firstWrongEnd = "a read returned " + std::to_string(n);
      }
      received.insert(received.end(), buffer.begin(), buffer.begin() + std::min(n, buffer.size()));
      ++completed;
    } else if (race == Race::kTimeout ? read.endedWith<TimeoutError>()
                                      : read.endedWith<OperationCancelled>()) {
      ++cancelled;
    } else {
      ++wrongEnds;
      if (firstWrongEnd.empty()) firstWrongEnd = read.what();
    }
    // Exactly one end (a second resumption would also be caught by ASan).
    EXPECT_EQ(read.ends.load(), 1);
  }
  readStarted.store(-2);
  readStarted.notify_all();
  // The rest of the stream, to its end (while the writer may still be finishing).
  for (;;) {
    std::byte buffer[4096];
    const std::size_t n = syncAwait(readCounted(pair.stream, buffer).via(&pool));
    if (n == 0) break;
    received.insert(received.end(), buffer, buffer + n);
  }
  writer.join();
  EXPECT_EQ(wrongEnds, 0) << "first: " << firstWrongEnd;
  ASSERT_EQ(received.size(), sent) << "bytes lost or duplicated";
  for (std::size_t i = 0; i < sent; ++i) {
    ASSERT_EQ(received[i], streamByte(i)) << "the stream differs at byte " << i << " of " << sent;
  }
  std::printf("  %d reads: %d returned bytes, %d ended by the cancellation; %zu bytes\n",
              iterations, completed, cancelled, sent);
  // Every buffer a receive was lent came back (those of cancelled receives too).
  EXPECT_EQ(test::lentBuffers(pool), 0u) << "lent buffers were not given back";
}

TEST_P(IoCancellationTest, ReadsCancelledFromAnotherThreadLoseNoBytes) {
  test::Watchdog watchdog(120s, "ReadsCancelledFromAnotherThread");
  ThreadPool pool(options(1));
  raceReadsAgainstAWriter(pool, Race::kCancellationSource);
}

TEST_P(IoCancellationTest, TasksCancelledThroughTheirTokenLoseNoBytes) {
  test::Watchdog watchdog(120s, "TasksCancelledThroughTheirToken");
  ThreadPool pool(options(1));
  raceReadsAgainstAWriter(pool, Race::kTaskToken);
}

TEST_P(IoCancellationTest, ReadsWithTinyTimeoutsLoseNoBytes) {
  test::Watchdog watchdog(120s, "ReadsWithTinyTimeouts");
  ThreadPool pool(options(1));
  raceReadsAgainstAWriter(pool, Race::kTimeout);
}

TEST_P(IoCancellationTest, ReceivesCancelledFromAnotherThreadLoseNoBytesAndNoBuffers) {
  test::Watchdog watchdog(120s, "ReceivesCancelledFromAnotherThread");
  ThreadPool pool(options(1));
  raceReadsAgainstAWriter(pool, Race::kCancellationSource, ReadStyle::kReceive);
}

TEST_P(IoCancellationTest, ReceivesWithTinyTimeoutsLoseNoBytesAndNoBuffers) {
  test::Watchdog watchdog(120s, "ReceivesWithTinyTimeouts");
  ThreadPool pool(options(1));
  raceReadsAgainstAWriter(pool, Race::kTimeout, ReadStyle::kReceive);
}

// ---------------------------------------------------------------------------------------
// Before, during, and together with the completion.

TEST_P(IoCancellationTest, CancelledBeforeTheAwaitThrowsAtOnceAndReadsNothing) {
  test::Watchdog watchdog(60s, "CancelledBefore");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "abc", 3));
  CancellationSource source;
  source.requestCancellation();
  std::byte buffer[16];
  EXPECT_THROW(
      syncAwait(withCancellation(source.token(), readCounted(pair.stream, buffer)).via(&pool)),
      OperationCancelled);
  // Nothing was submitted: a read (which the epoll loop tries at once) would have taken
  // the bytes.
  ASSERT_EQ(syncAwait(readCounted(pair.stream, buffer).via(&pool)), 3u);
  EXPECT_EQ(std::memcmp(buffer, "abc", 3), 0);

  // The same for accept: the pending connection stays for the next accept.
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  test::OwnedFd client = test::connectBlocking(listener.localAddress());
  ASSERT_TRUE(client);
  EXPECT_THROW(syncAwait(withCancellation(source.token(), acceptCounted(listener)).via(&pool)),
               OperationCancelled);
  TcpStream accepted = syncAwait(acceptCounted(listener).via(&pool));
  EXPECT_EQ(accepted.peerAddress(), [&] {
    SocketAddress local;
    socklen_t length = SocketAddress::kNativeCapacity;
    ::getsockname(client.get(), local.nativeBuffer(), &length);
    local.setNativeLength(length);
    return local;
  }());
}

// A timeout on a task reaches a read that blocking-style code started in a fiber (inFiber):
// the read is withdrawn at once, and the stream stays usable.
TEST_P(IoCancellationTest, InFiberReadTimeoutEndsTheFibersReadAtOnce) {
  test::Watchdog watchdog(60s, "InFiberReadTimeout");
  ThreadPool pool(options(2));
  test::StreamAndPeer pair = test::connectedPair(pool);
  std::atomic<bool> sawCancellation{false};
  auto task = [&]() -> Lazy<void> {
    co_await inFiber([&] {
      std::byte buffer[64];
      try {
        (void)weft::await(pair.stream.read(buffer));  // the peer writes nothing yet
      } catch (const OperationCancelled&) {
        sawCancellation = true;
        throw;
      }
    });
  };
  // No time is judged: the read, not the timeout, is what could fail to end. The peer
  // writes nothing, so only the cancellation can end it (else the watchdog fires), and
  // sawCancellation says it did.
  EXPECT_THROW(syncAwait(withTimeout(task(), 50ms), &pool), TimeoutError);
  EXPECT_TRUE(sawCancellation.load());
  const std::string message = "after the timeout";
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), message.data(), message.size()));
  std::byte got[32];
  ASSERT_EQ(syncAwait(readCounted(pair.stream, got).via(&pool)), message.size());
}

TEST_P(IoCancellationTest, CancelledDuringTheWaitThrowsAndLaterDataStaysReadable) {
  test::Watchdog watchdog(60s, "CancelledDuring");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  for (int round = 0; round < 20; ++round) {
    std::byte buffer[16];
    CancellationSource source;
    Outcome<std::size_t> read;
    startOn(pool, withCancellation(source.token(), readCounted(pair.stream, buffer)), read);
    quiesce(pool);  // the read waits (in the kernel, for io_uring)
    EXPECT_EQ(read.ends.load(), 0);
    source.requestCancellation();
    read.wait();
    EXPECT_TRUE(read.endedWith<OperationCancelled>()) << read.what();
    const std::string message = "round " + std::to_string(round);
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), message.data(), message.size()));
    std::byte got[16];
    ASSERT_EQ(syncAwait(readCounted(pair.stream, got).via(&pool)), message.size());
    EXPECT_EQ(std::memcmp(got, message.data(), message.size()), 0);
  }

  // An accept: the connection made after the cancellation is accepted by the next one.
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  CancellationSource source;
  Outcome<TcpStream> accept;
  startOn(pool, withCancellation(source.token(), acceptCounted(listener)), accept);
  quiesce(pool);
  EXPECT_EQ(accept.ends.load(), 0);
  source.requestCancellation();
  accept.wait();
  EXPECT_TRUE(accept.endedWith<OperationCancelled>()) << accept.what();
  test::OwnedFd client = test::connectBlocking(listener.localAddress());
  ASSERT_TRUE(client);
  TcpStream accepted = syncAwait(acceptCounted(listener).via(&pool));
  EXPECT_TRUE(accepted.isOpen());
}

// The data arrives and the cancellation is requested while the worker is busy, so that
// its loop sees both in one turn: the read returns the data, or ends cancelled and leaves
// the data readable. Never both, never neither.
TEST_P(IoCancellationTest, CancellationTogetherWithTheDataLosesNothing) {
  test::Watchdog watchdog(60s, "CancellationTogetherWithTheData");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  int returned = 0;
  int cancelled = 0;
  for (int round = 0; round < 200; ++round) {
    std::byte buffer[32];
    CancellationSource source;
    Outcome<std::size_t> read;
    startOn(pool, withCancellation(source.token(), readCounted(pair.stream, buffer)), read);
    quiesce(pool);
    const std::string message = "together " + std::to_string(round);
    {
      WorkerHold hold(pool);
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), message.data(), message.size()));
      // Stays a sleep: a deliberate jitter that varies what the loop finds on its next turn
      // (io_uring may complete the read in the kernel meanwhile; the outcome is checked
      // either way). The hold above, not the sleep, makes both arrive in one turn.
      if (round % 2 == 0) std::this_thread::sleep_for(1ms);
      source.requestCancellation();
      hold.release([] {});
    }
    read.wait();
    std::string got;
    if (read.result.hasValue()) {
      ++returned;
      got.assign(reinterpret_cast<const char*>(buffer), read.result.value());
    } else {
      ASSERT_TRUE(read.endedWith<OperationCancelled>()) << read.what();
      ++cancelled;
    }
    // Whatever the read did not return is still there.
    while (got.size() < message.size()) {
      std::byte rest[32];
      const std::size_t n = syncAwait(readCounted(pair.stream, rest).via(&pool));
      ASSERT_GT(n, 0u);
      got.append(reinterpret_cast<const char*>(rest), n);
    }
    EXPECT_EQ(got, message);
  }
  std::printf("  %d reads returned the data, %d were cancelled\n", returned, cancelled);
}

// ---------------------------------------------------------------------------------------
// Destroying a coroutine suspended in a read or an accept, on the worker (the loop's
// thread), as #15's rule allows.

TEST_P(IoCancellationTest, DestroyingASuspendedReadWithdrawsIt) {
  test::Watchdog watchdog(60s, "DestroyingASuspendedRead");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  std::byte buffer[16];
  for (bool submittedFirst : {false, true}) {
    std::optional<Lazy<std::size_t>> doomed;
    bool suspended = false;
    onWorker(pool, [&] {
      doomed.emplace(readCounted(pair.stream, buffer));
      suspended = startSuspended(pool, *doomed);
      // Destroyed before the loop's next turn: io_uring has not submitted the read yet.
      if (!submittedFirst) doomed.reset();
    });
    ASSERT_TRUE(suspended);
    if (submittedFirst) {
      quiesce(pool);  // now the read waits in the kernel
      onWorker(pool, [&] { doomed.reset(); });
    }
    EXPECT_EQ(Counted::alive(), 0);
    // The withdrawn read takes nothing: the next bytes go to the next read.
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "next", 4));
    std::byte got[16];
    ASSERT_EQ(syncAwait(readCounted(pair.stream, got).via(&pool)), 4u);
    EXPECT_EQ(std::memcmp(got, "next", 4), 0);
  }
}

TEST_P(IoCancellationTest, DestroyingASuspendedAcceptWithdrawsIt) {
  test::Watchdog watchdog(60s, "DestroyingASuspendedAccept");
  ThreadPool pool(options(1));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  for (bool submittedFirst : {false, true}) {
    std::optional<Lazy<TcpStream>> doomed;
    bool suspended = false;
    onWorker(pool, [&] {
      doomed.emplace(acceptCounted(listener));
      suspended = startSuspended(pool, *doomed);
      if (!submittedFirst) doomed.reset();
    });
    ASSERT_TRUE(suspended);
    if (submittedFirst) {
      quiesce(pool);
      onWorker(pool, [&] { doomed.reset(); });
    }
    EXPECT_EQ(Counted::alive(), 0);
    // The next connection goes to the next accept.
    test::OwnedFd client = test::connectBlocking(listener.localAddress());
    ASSERT_TRUE(client);
    TcpStream accepted = syncAwait(acceptCounted(listener).via(&pool));
    ASSERT_TRUE(accepted.isOpen());
    ASSERT_TRUE(test::sendAllBlocking(client.get(), "hi", 2));
    std::byte got[4];
    EXPECT_EQ(syncAwait(readCounted(accepted, got).via(&pool)), 2u);
  }
}

// A completion destroys another coroutine whose accept completed in the same loop turn
// (its result is in, its completion function has not run: a wake-up already claimed).
// By #15's rule weft may either hand nothing out (close what the accept returned) or
// report the misuse and abort; what it must not do is leak the accepted descriptor. In a
// child, so that an abort with a message is an outcome the test can accept.
Lazy<void> readThenDestroy(TcpStream& stream, std::optional<Lazy<TcpStream>>& other) {
  Counted inFrame;
  std::byte buffer[8];
  (void)co_await stream.read(buffer);
  other.reset();
}

TEST_P(IoCancellationTest, DestroyingAnAcceptThatCompletedInTheSameTurnIsReportedOrClean) {
  const IoBackendChoice backend = GetParam();
  const int status = test::runInChild([backend]() -> int {
    ::alarm(60);  // hang guard: SIGALRM
    ThreadPool pool(ThreadPoolOptions{1, "same-turn", backend});
    test::StreamAndPeer pair = test::connectedPair(pool);
    TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
    std::optional<Lazy<TcpStream>> doomed;
    std::optional<Lazy<void>> destroyer;
    bool suspended = false;
    onWorker(pool, [&] {
      doomed.emplace(acceptCounted(listener));
      destroyer.emplace(readThenDestroy(pair.stream, doomed));
      suspended = startSuspended(pool, *doomed) && startSuspended(pool, *destroyer);
    });
    if (!suspended) return 20;
    quiesce(pool);
    const int fdsBefore = test::openFdCount();
    test::OwnedFd client;
    {
      // Both arrive while the worker is held: the data first, then the connection, so
      // that the loop's next turn completes the read first and the accept after it.
      WorkerHold hold(pool);
      if (!test::sendAllBlocking(pair.peer.get(), "x", 1)) return 21;
      client = test::connectBlocking(listener.localAddress());
      if (!client) return 22;
      // Hand-shake: the connection is in the listener's accept queue (the data was in
      // the stream's receive queue when sendAllBlocking returned: loopback), so the
      // loop's next turn sees both.
      (void)waitForPendingConnection(listener.nativeHandle());
      hold.release([] {});
    }
    quiesce(pool);
    if (!detail::LazyAccess::handle(*destroyer).done()) return 23;
    if (doomed.has_value()) return 24;
    destroyer.reset();
    if (Counted::alive() != 0) return 25;
    // Only the client's descriptor is new.
    const int leaked = test::openFdCount() - (fdsBefore + 1);
    if (leaked != 0) {
      std::fprintf(stderr, "child: %d descriptor(s) leaked\n", leaked);
      return 26;
    }
    return 0;
  });
  const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const bool reported = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  EXPECT_TRUE(clean || reported) << test::describeStatus(status);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoCancellationTest, test::kIoBackends, test::ioBackendName);

// The other half of the rule for I/O: off the loop's thread the kernel may still write
// into the frame, so destroying it there is reported (a message naming the operation)
// and aborts, never a silent use after free.
class IoDestroyDeathTest : public test::IoBackendTest {};

TEST_P(IoDestroyDeathTest, DestroyingASuspendedReadOffTheLoopsThreadIsReported) {
  EXPECT_DEATH(
      {
        ThreadPool pool(options(1));
        test::StreamAndPeer pair = test::connectedPair(pool);
        std::byte buffer[16];
        std::optional<Lazy<std::size_t>> doomed;
        onWorker(pool, [&] {
          doomed.emplace(readCounted(pair.stream, buffer));
          (void)startSuspended(pool, *doomed);
        });
        quiesce(pool);
        doomed.reset();  // on the test thread
      },
      "suspended in read from a TcpStream was destroyed on a thread other than");
}

INSTANTIATE_TEST_SUITE_P(Backends, IoDestroyDeathTest, test::kIoBackends, test::ioBackendName);

// Destroying the coroutine after what it waits for has arrived, but before its loop's
// next turn. On epoll the operation has not taken effect (the loop makes the system call
// on its turn), so by #15's rule the wait is withdrawn and the stream or listener is left
// as if the coroutine had never waited: the bytes stay readable, the connection stays in
// the backlog, no descriptor is created. On io_uring the kernel may already have
// performed it (bytes read, connection accepted): that wake-up is claimed and cannot be
// handed back, so weft reports it and aborts, or, when the synchronous cancellation got
// there first, withdraws it cleanly. Both run in a child, where an abort is an outcome.
class IoDestroyAfterArrivalTest : public IoCancellationTest {
 protected:
  // 0: clean (what arrived is left in place); SIGABRT: reported.
  void expectCleanOrReported(int status) {
    const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const bool reported = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
    if (GetParam() == IoBackendChoice::kEpoll) {
      EXPECT_TRUE(clean) << test::describeStatus(status);
    } else {
      EXPECT_TRUE(clean || reported) << test::describeStatus(status);
    }
  }
};

TEST_P(IoDestroyAfterArrivalTest, DestroyingAReadWhoseDataArrivedLeavesTheDataOrIsReported) {
  const IoBackendChoice backend = GetParam();
  expectCleanOrReported(test::runInChild([backend]() -> int {
    ::alarm(60);  // hang guard: SIGALRM
    ThreadPool pool(ThreadPoolOptions{1, "arrival", backend});
    test::StreamAndPeer pair = test::connectedPair(pool);
    std::byte buffer[16];
    std::optional<Lazy<std::size_t>> doomed;
    bool suspended = false;
    onWorker(pool, [&] {
      doomed.emplace(readCounted(pair.stream, buffer));
      suspended = startSuspended(pool, *doomed);
    });
    if (!suspended) return 20;
    quiesce(pool);  // the read waits in the kernel (io_uring) or on epoll
    {
      WorkerHold hold(pool);
      if (!test::sendAllBlocking(pair.peer.get(), "data", 4)) return 21;
      hold.release([&] { doomed.reset(); });
    }
    if (Counted::alive() != 0) return 22;
    return readAvailable(pair.stream.nativeHandle(), 4) == "data" ? 0 : 23;
  }));
}

TEST_P(IoDestroyAfterArrivalTest, DestroyingAnAcceptWhoseConnectionArrivedLeavesItOrIsReported) {
  const IoBackendChoice backend = GetParam();
  expectCleanOrReported(test::runInChild([backend]() -> int {
    ::alarm(60);  // hang guard: SIGALRM
    ThreadPool pool(ThreadPoolOptions{1, "arrival", backend});
    TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
    std::optional<Lazy<TcpStream>> doomed;
    bool suspended = false;
    onWorker(pool, [&] {
      doomed.emplace(acceptCounted(listener));
      suspended = startSuspended(pool, *doomed);
    });
    if (!suspended) return 20;
    quiesce(pool);
    const int fdsWithListener = test::openFdCount();  // the worker's loop exists by now
    test::OwnedFd client;
    {
      WorkerHold hold(pool);
      client = test::connectBlocking(listener.localAddress());
      if (!client) return 21;
      hold.release([&] { doomed.reset(); });
    }
    if (Counted::alive() != 0) return 22;
    // Only the client's descriptor is new: the withdrawn accept created none.
    if (test::openFdCount() != fdsWithListener + 1) return 23;
    // And the connection waits in the backlog for the next accept.
    TcpStream accepted = syncAwait(withTimeout(acceptCounted(listener), 5s).via(&pool));
    return accepted.isOpen() ? 0 : 24;
  }));
}

INSTANTIATE_TEST_SUITE_P(Backends, IoDestroyAfterArrivalTest, test::kIoBackends,
                         test::ioBackendName);

}  // namespace
}  // namespace weft
