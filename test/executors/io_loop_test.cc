// IoLoop as an executor implementer uses it: a user's own single-threaded executor that
// binds a loop serves weft's I/O awaitables; one that binds none refuses them clearly.
#include "weft/executors/io_loop.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <coroutine>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/executor.h"
#include "weft/io/tcp_listener.h"
#include "test/support/io_backends.h"
#include "weft/io/tcp_stream.h"

namespace weft {
namespace {

// A user's executor: one thread, a FIFO of WorkItems, and an IoLoop it runs when idle.
// Only public names are used (no weft::detail).
class LoopExecutor final : public Executor {
 public:
  explicit LoopExecutor(IoBackendChoice backend) : Executor("user-loop") {
    thread_ = std::thread([this, backend] {
      auto loop = IoLoop::create(backend);
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

// WEFT_IO_URING_SETUP (a comma-separated list of features to leave out, for measuring
// them) names only `coop` and `unregistered`: another word is reported when the first ring
// is set up, never ignored.
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
