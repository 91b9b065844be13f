// IoLoop as an executor implementer uses it: a user's own single-threaded executor that
// binds a loop serves weft's I/O awaitables; one that binds none refuses them clearly.
#include "weft/executors/io_loop.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "test/support/io_backends.h"
#include "test/support/io_support.h"
#include "test/support/watchdog.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/executor.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"

namespace weft {
namespace {

// A user's own loop written before IoOperation::whole existed: it serves operations
// with one of weft's loops but hides `whole` from it, so that every partial transfer
// completes, as it would in a loop that does not know the field. Counts the submissions
// of operations that asked for `whole` (the first and each rest the awaiter submits).
class LoopIgnoringWhole final : public IoLoop {
 public:
  explicit LoopIgnoringWhole(std::unique_ptr<IoLoop> inner) : inner_(std::move(inner)) {}

  IoBackend backend() const noexcept override { return inner_->backend(); }
  bool submit(IoOperation& op) noexcept override {
    if (op.whole) wholeSubmissions.fetch_add(1, std::memory_order_relaxed);
    op.whole = false;
    return inner_->submit(op);
  }
  void cancel(IoOperation& op) noexcept override { inner_->cancel(op); }
  bool withdraw(IoOperation& op) noexcept override { return inner_->withdraw(op); }
  std::size_t run(int timeoutMs) noexcept override { return inner_->run(timeoutMs); }
  std::size_t runFor(std::int64_t timeoutNs) noexcept override { return inner_->runFor(timeoutNs); }
  void wake() noexcept override { inner_->wake(); }
  bool hasWork() const noexcept override { return inner_->hasWork(); }
  void shutdown() noexcept override { inner_->shutdown(); }

  std::atomic<std::size_t> wholeSubmissions{0};

 private:
  std::unique_ptr<IoLoop> inner_;
};

// A user's executor: one thread, a FIFO of WorkItems, and an IoLoop it runs when idle
// (weft's, or with `ignoreWhole` one that hides IoOperation::whole from it).
// Only public names are used (no weft::detail).
class LoopExecutor final : public Executor {
 public:
  explicit LoopExecutor(IoBackendChoice backend, bool ignoreWhole = false) : Executor("user-loop") {
    thread_ = std::thread([this, backend, ignoreWhole] {
      std::unique_ptr<IoLoop> loop = IoLoop::create(backend);
      if (ignoreWhole) {
        auto own = std::make_unique<LoopIgnoringWhole>(std::move(loop));
        ignoring_ = own.get();
        loop = std::move(own);
      }
      IoLoop::CurrentScope scope(loop.get());
      {
        std::lock_guard<std::mutex> lock(mutex_);
        loop_ = loop.get();
      }
      for (;;) {
        WorkItem item;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (!queue_.empty()) {
            item = queue_.front();
            queue_.pop_front();
          } else if (stop_ && !loop->hasWork()) {
            break;
          }
        }
        if (!item.empty()) {
          try {
            item.run();
          } catch (...) {
            reportEscapedException(name());
          }
          loop->run(0);
        } else {
          loop->run(-1);  // until I/O completes or schedule() wakes it
        }
      }
      std::lock_guard<std::mutex> lock(mutex_);
      loop_ = nullptr;
    });
  }
  ~LoopExecutor() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      if (loop_ != nullptr) loop_->wake();
    }
    thread_.join();
  }

  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override { push(WorkItem::fromHandle(h)); }
  bool currentThreadInExecutor() const noexcept override {
    return std::this_thread::get_id() == thread_.get_id();
  }
  // With `ignoreWhole`: the submissions of `whole` operations so far.
  std::size_t wholeSubmissions() const { return ignoring_->wholeSubmissions.load(); }

 private:
  void scheduleJob(Job* job) override { push(WorkItem::fromJob(job)); }
  void push(WorkItem item) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(item);
    if (loop_ != nullptr) loop_->wake();
  }

  std::mutex mutex_;
  std::deque<WorkItem> queue_;
  IoLoop* loop_ = nullptr;
  LoopIgnoringWhole* ignoring_ = nullptr;  // set before anything is scheduled
  bool stop_ = false;
  std::thread thread_;
};

// A user's executor without I/O: runs items on its thread, binds no loop.
class PlainExecutor final : public Executor {
 public:
  PlainExecutor() : Executor("plain") {}
  using Executor::schedule;
  void schedule(std::coroutine_handle<> h) override { std::thread([h] { h.resume(); }).detach(); }
  bool currentThreadInExecutor() const noexcept override { return false; }

 private:
  void scheduleJob(Job* job) override {
    std::thread([job] { job->complete(job, true); }).detach();
  }
};

class IoLoopTest : public ::testing::TestWithParam<IoBackendChoice> {};

TEST_P(IoLoopTest, UserExecutorServesSocketAwaitables) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  LoopExecutor executor(GetParam());
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  auto server = [&]() -> Lazy<std::size_t> {
    TcpStream stream = co_await listener.accept();
    std::array<std::byte, 256> buffer;
    std::size_t total = 0;
    while (std::size_t n = co_await stream.read(buffer)) {
      total += n;
      co_await stream.writeAll(std::span<const std::byte>(buffer.data(), n));
    }
    co_return total;
  };
  auto client = [&]() -> Lazy<std::string> {
    TcpStream stream = co_await TcpStream::connect(address);
    co_await stream.writeAll("hello, loop");
    stream.shutdownWrite();
    std::string echoed;
    std::array<char, 64> buffer;
    while (std::size_t n = co_await stream.read(buffer.data(), buffer.size())) {
      echoed.append(buffer.data(), n);
    }
    co_return echoed;
  };
  auto [served, echoed] = syncAwait(collectAll(server(), client()).via(&executor));
  EXPECT_EQ(served.value(), 11u);
  EXPECT_EQ(echoed.value(), "hello, loop");
}

std::vector<std::byte> pattern(std::size_t size, std::size_t seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<std::byte>((i * 131 + (i >> 9) + seed * 71) & 0xff);
  }
  return bytes;
}

// A stream on `executor` and the blocking socket at its other end.
test::StreamAndPeer connectedPairOn(Executor& executor) {
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  test::StreamAndPeer pair;
  pair.peer = test::connectBlocking(listener.localAddress());
  if (!pair.peer) throw std::system_error(errno, std::system_category(), "test: connect");
  pair.stream = syncAwait(listener.accept().via(&executor));
  return pair;
}

// Reads `fd` until the end of the stream.
std::vector<std::byte> readToEnd(int fd) {
  std::vector<std::byte> all;
  std::array<std::byte, 4096> chunk;
  for (;;) {
    const int one = 1;  // acknowledge at once: the small send buffer refills sooner
    ::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
    const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return all;
    all.insert(all.end(), chunk.begin(), chunk.begin() + n);
  }
}

// TcpStream::writeAll and readExactly are one operation with IoOperation::whole, which
// weft's loops carry on after each partial transfer. A loop of one's own that ignores the
// field completes each part instead: the awaiter then submits the rest itself, so every
// byte still arrives in place, a cancellation between two parts is honoured with the
// count exact, and a close stops it.
TEST_P(IoLoopTest, AUserLoopThatIgnoresWholeStillTransfersWholeBuffers) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  test::Watchdog watchdog(std::chrono::seconds(240), "AUserLoopThatIgnoresWhole");
  LoopExecutor executor(GetParam(), /*ignoreWhole=*/true);
  const std::vector<std::byte> data = pattern(1 << 20, 1);
  test::StreamAndPeer pair = connectedPairOn(executor);
  const int sendBuffer = 32 * 1024;
  ASSERT_EQ(::setsockopt(pair.stream.nativeHandle(), SOL_SOCKET, SO_SNDBUF, &sendBuffer,
                         sizeof sendBuffer),
            0);
  // writeAll: many parts (one submission each), every byte in place.
  const std::size_t before = executor.wholeSubmissions();
  std::vector<std::byte> received;
  std::thread reader([&] { received = readToEnd(pair.peer.get()); });
  syncAwait(pair.stream.writeAll(data).via(&executor));
  const std::size_t writeParts = executor.wholeSubmissions() - before;
  pair.stream.shutdownWrite();
  reader.join();
  EXPECT_TRUE(received == data) << "received " << received.size() << " bytes";
  EXPECT_GT(writeParts, 2u) << "the write was not split: the test shows nothing";

  // readExactly: the peer writes in pieces.
  std::vector<std::byte> buffer(data.size());
  std::thread writer([&] {
    for (std::size_t at = 0; at < data.size(); at += 4096) {
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), data.data() + at,
                                        std::min<std::size_t>(4096, data.size() - at)));
    }
  });
  syncAwait(pair.stream.readExactly(buffer).via(&executor));
  writer.join();
  EXPECT_TRUE(buffer == data);

  // A cancellation while the parts go on (a new connection: the first one's sending
  // side is shut): the count is what the peer got.
  pair = connectedPairOn(executor);
  ASSERT_EQ(::setsockopt(pair.stream.nativeHandle(), SOL_SOCKET, SO_SNDBUF, &sendBuffer,
                         sizeof sendBuffer),
            0);
  CancellationSource source;
  std::atomic<std::size_t> got{0};
  received.clear();
  std::thread slowReader([&] {
    std::array<std::byte, 4096> chunk;
    for (;;) {
      const int one = 1;
      ::setsockopt(pair.peer.get(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
      const ssize_t n = ::recv(pair.peer.get(), chunk.data(), chunk.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      received.insert(received.end(), chunk.begin(), chunk.begin() + n);
      got.fetch_add(static_cast<std::size_t>(n));
    }
  });
  std::atomic<bool> ended{false};
  std::exception_ptr error;
  withCancellation(source.token(), pair.stream.writeAll(data))
      .via(&executor)
      .start([&](Try<void> result) {
        error = result.exception();
        ended.store(true);
      });
  while (got.load() < data.size() / 3 && !ended.load()) std::this_thread::yield();
  source.requestCancellation();
  while (!ended.load()) std::this_thread::yield();
  std::size_t n = data.size();
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const IncompleteTransfer& e) {
      n = e.bytesTransferred();
    } catch (const OperationCancelled&) {
      n = 0;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "another failure: " << e.what();
    }
  }
  pair.stream.close();
  slowReader.join();
  EXPECT_TRUE(received ==
              std::vector<std::byte>(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n)))
      << "reported " << n << ", the peer got " << received.size();
}

TEST_P(IoLoopTest, ReportsItsBackend) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  auto loop = IoLoop::create(GetParam());
  EXPECT_EQ(loop->backend(),
            GetParam() == IoBackendChoice::kEpoll ? IoBackend::kEpoll : IoBackend::kIoUring);
  EXPECT_FALSE(loop->hasWork());
  EXPECT_EQ(loop->run(0), 0u);
  loop->wake();
  EXPECT_EQ(loop->run(-1), 0u);  // returns for the wake, with nothing completed
}

// lendBuffer: a whole buffer for the caller to fill (TlsStream::receive decrypts into
// one), counted by lentBuffers until it comes back, from this thread or another.
TEST_P(IoLoopTest, LendsWholeBuffersForTheCallerToFill) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  auto loop = IoLoop::create(GetParam());
  LentBuffer buffer = loop->lendBuffer();
  ASSERT_EQ(buffer.size(), 65536u);
  EXPECT_EQ(loop->lentBuffers(), 1u);
  std::memcpy(buffer.data(), "filled", 6);
  buffer.truncate(6);
  EXPECT_EQ(buffer.text(), "filled");
  buffer.truncate(100);  // no longer than it is
  EXPECT_EQ(buffer.size(), 6u);
  buffer.reset();
  EXPECT_EQ(loop->lentBuffers(), 0u);
  std::vector<LentBuffer> many;
  for (int i = 0; i < 100; ++i) {
    many.push_back(loop->lendBuffer());
    ASSERT_FALSE(many.back().empty());
  }
  EXPECT_EQ(loop->lentBuffers(), 100u);
  std::thread([&] { many.clear(); }).join();
  EXPECT_EQ(loop->lentBuffers(), 0u);  // taken in from the other thread
}

// A loop may be destroyed on another thread than the one that created it, here after that
// thread has ended: this thread's own loop keeps working. On io_uring each ring is
// registered in its creating thread's table (io_uring_register_ring_fd) and entered by its
// index there; letting go of the other ring here must not drop the registration this
// thread made at the same index (its next io_uring_enter would fail with EBADF, and weft
// abort: so it did, for rings set up without SINGLE_ISSUER, before the loop's destructor
// kept liburing from unregistering on the wrong thread).
TEST_P(IoLoopTest, DestroyingAnotherThreadsLoopLeavesThisThreadsLoopWorking) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  auto mine = IoLoop::create(GetParam());
  for (int round = 0; round < 3; ++round) {
    std::unique_ptr<IoLoop> theirs;
    std::thread([&] {
      theirs = IoLoop::create(GetParam());
      theirs->wake();
      EXPECT_EQ(theirs->run(-1), 0u);  // entered on its own thread
    }).join();
    theirs.reset();  // on this thread
    mine->wake();
    EXPECT_EQ(mine->run(-1), 0u);  // enters this thread's ring
  }
}

// An IoOperation that records its completions (result, `more`, the bytes lent).
struct RecordingOperation : IoOperation {
  struct Completion {
    std::int64_t result;
    bool more;
    bool shutDown;
    std::string bytes;
  };
  std::vector<Completion> completions;
  RecordingOperation() {
    complete = [](IoOperation& op) noexcept {
      auto& self = static_cast<RecordingOperation&>(op);
      self.completions.push_back({op.result, op.more, op.loopShutDown, std::string(op.lent.text())});
      op.lent.reset();
    };
  }
};

// Runs `loop` until `op` has `n` completions (a hang is the watchdog's).
void runUntil(IoLoop& loop, const RecordingOperation& op, std::size_t n) {
  while (op.completions.size() < n) loop.run(-1);
}

// kWait, driven raw: no system call; it ends when cancel() ends it (here from another
// thread), when its time limit passes, when it is withdrawn, or at shutdown.
TEST_P(IoLoopTest, AWaitEndsByCancelTimeLimitWithdrawalOrShutdown) {
  WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam());
  test::Watchdog watchdog(std::chrono::seconds(60), "AWaitEnds");
  auto loop = IoLoop::create(GetParam());
  IoLoop::CurrentScope scope(loop.get());
  RecordingOperation op;
  op.opcode = IoOpcode::kWait;
  if (loop->backend() == IoBackend::kEpoll) {  // offered by io_uring only
    ASSERT_TRUE(loop->submit(op));
    EXPECT_EQ(op.result, -EOPNOTSUPP);
    return;
  }
  ASSERT_FALSE(loop->submit(op));
  EXPECT_EQ(loop->run(0), 0u);
  std::thread([&] { loop->cancel(op); }).join();
  runUntil(*loop, op, 1);
  EXPECT_EQ(op.completions[0].result, -ECANCELED);

  op.timeoutNs = 1000000;  // 1 ms
  ASSERT_FALSE(loop->submit(op));
  runUntil(*loop, op, 2);
  EXPECT_EQ(op.completions[1].result, -ETIMEDOUT);

  op.timeoutNs = std::int64_t{3600} * 1000000000;
  ASSERT_FALSE(loop->submit(op));
  EXPECT_TRUE(loop->withdraw(op));  // never took effect
  EXPECT_FALSE(loop->hasWork());

  ASSERT_FALSE(loop->submit(op));
  loop->shutdown();
  runUntil(*loop, op, 3);
  EXPECT_EQ(op.completions[2].result, -ECANCELED);
  EXPECT_TRUE(op.completions[2].shutDown);
  while (loop->hasWork()) loop->run(-1);
  EXPECT_EQ(op.completions.size(), 3u);
}

// WEFT_IO_URING_SETUP (a comma-separated list of features to leave out, for measuring
// them) names only `coop`, `unregistered` and `singleshot`: another word is reported when
// the first ring is set up, never ignored.
TEST(IoLoopSetupDeathTest, AnUnknownWordInWeftIoUringSetupIsReported) {
  // The child re-executes this program (threadsafe style), with the variable set before
  // anything reads it (it is read once per process).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  if (!IoLoop::available(IoBackend::kIoUring)) GTEST_SKIP() << "no io_uring here";
  const char* before = std::getenv("WEFT_IO_URING_SETUP");
  const std::optional<std::string> saved =
      before != nullptr ? std::optional<std::string>(before) : std::nullopt;
  ASSERT_EQ(::setenv("WEFT_IO_URING_SETUP", "coop,bogus", 1), 0);
  EXPECT_DEATH((void)IoLoop::create(IoBackendChoice::kIoUring),
               "weft: WEFT_IO_URING_SETUP: unknown word 'bogus'");
  if (saved) {
    ::setenv("WEFT_IO_URING_SETUP", saved->c_str(), 1);
  } else {
    ::unsetenv("WEFT_IO_URING_SETUP");
  }
}

TEST(IoLoopRefusalTest, ExecutorWithoutLoopRefusesIoWithAClearError) {
  PlainExecutor executor;
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  auto accept = [&]() -> Lazy<void> { co_await listener.accept(); };
  try {
    syncAwait(accept().via(&executor));
    FAIL() << "accept on a thread without an event loop did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("without an event loop"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, IoLoopTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
