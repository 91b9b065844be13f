// ThreadPool::shutdown() and the destructor while coroutines and fibers wait in reads and
// accepts with their sockets open: nothing hangs (a watchdog turns a hang into a
// failure), every wait throws ExecutorShutDown, the coroutines and fibers unwind (their
// frames and stacks are freed: test::Counted), their sockets close (the process's open
// descriptors, /proc/self/fd, are back to what they were, the workers' loops included),
// and I/O attempted after the shutdown fails at once with ExecutorShutDown too. Each test
// runs once per backend.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/io_support.h"
#include "test/support/thread_states.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;

constexpr int kReaders = 16;
constexpr int kAcceptors = 4;

// How the waiting coroutines and fibers ended.
struct Tally {
  std::atomic<int> waiting{0};      // started their first wait
  std::atomic<int> shutDown{0};     // ended by ExecutorShutDown
  std::atomic<int> laterIoFailed{0};  // a write after it failed with ExecutorShutDown too
  std::mutex mutex;
  std::vector<std::string> others;  // anything else

  void other(std::string what) {
    std::lock_guard lock(mutex);
    others.push_back(std::move(what));
  }
  void end(std::exception_ptr error) {
    if (!error) {
      other("ended without an exception");
      return;
    }
    try {
      std::rethrow_exception(error);
    } catch (const ExecutorShutDown&) {
      shutDown.fetch_add(1);
    } catch (const std::exception& e) {
      other(e.what());
    }
  }
};

// Waits in reads until the pool shuts down, then tries one more write (which must fail at
// once) and ends with the ExecutorShutDown.
Lazy<void> readUntilShutDown(TcpStream stream, Tally& tally) {
  Counted inFrame;
  std::byte buffer[64];
  std::exception_ptr error;
  try {
    tally.waiting.fetch_add(1);
    for (;;) {
      if (co_await stream.read(buffer) == 0) co_return;
    }
  } catch (const ExecutorShutDown&) {
    error = std::current_exception();
  }
  try {
    co_await stream.writeAll("bye");
  } catch (const ExecutorShutDown&) {
    tally.laterIoFailed.fetch_add(1);
  }
  std::rethrow_exception(error);
}

// Waits in accept (owning its listener) until the pool shuts down.
Lazy<void> acceptUntilShutDown(TcpListener listener, Tally& tally) {
  Counted inFrame;
  tally.waiting.fetch_add(1);
  for (;;) (void)co_await listener.accept();
}

void readUntilShutDownInFiber(TcpStream& stream, Tally& tally) {
  Counted onTheStack;
  std::byte buffer[64];
  try {
    tally.waiting.fetch_add(1);
    for (;;) {
      if (await(stream.read(buffer)) == 0) return;
    }
  } catch (const ExecutorShutDown&) {
    try {
      await(stream.writeAll("bye"));
    } catch (const ExecutorShutDown&) {
      tally.laterIoFailed.fetch_add(1);
    }
    throw;
  }
}

void acceptUntilShutDownInFiber(TcpListener& listener, Tally& tally) {
  Counted onTheStack;
  tally.waiting.fetch_add(1);
  for (;;) (void)await(listener.accept());
}

// A fiber's body, its end counted inside: a detached fiber must not end with an
// exception. (std::exception only: the unwinding of a destroyed fiber is not one.)
template <class Body>
void endInFiber(Tally& tally, Body body) {
  try {
    body();
    tally.other("a fiber ended without an exception");
  } catch (const std::exception&) {
    tally.end(std::current_exception());
  }
}

enum class Stop { kShutdown, kDestructor };
enum class Kind { kLazy, kFiber };

class IoShutdownTest : public test::IoBackendTest {
 protected:
  void SetUp() override {
    test::IoBackendTest::SetUp();
    Counted::reset();
  }

  void run(Stop stop, Kind kind) {
    test::Watchdog watchdog(120s, "IoShutdownTest");
    const int fdsBefore = test::openFdCount();
    Tally tally;
    std::vector<test::OwnedFd> peers;
    {
      std::optional<ThreadPool> pool(std::in_place, options(2, "shutdown"));
      std::vector<FiberFuture<void>> fibers;
      for (int i = 0; i < kReaders; ++i) {
        test::StreamAndPeer pair = test::connectedPair(*pool);
        peers.push_back(std::move(pair.peer));
        if (kind == Kind::kLazy) {
          readUntilShutDown(std::move(pair.stream), tally)
              .via(&*pool)
              .start([&](Try<void> r) { tally.end(r.hasException() ? r.exception() : nullptr); });
        } else {
          fibers.push_back(spawnFiber(&*pool, [&tally, stream = std::move(pair.stream)]() mutable {
            endInFiber(tally, [&] { readUntilShutDownInFiber(stream, tally); });
          }));
        }
      }
      for (int i = 0; i < kAcceptors; ++i) {
        TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
        if (kind == Kind::kLazy) {
          acceptUntilShutDown(std::move(listener), tally)
              .via(&*pool)
              .start([&](Try<void> r) { tally.end(r.hasException() ? r.exception() : nullptr); });
        } else {
          fibers.push_back(spawnFiber(&*pool, [&tally, listener = std::move(listener)]() mutable {
            endInFiber(tally, [&] { acceptUntilShutDownInFiber(listener, tally); });
          }));
        }
      }
      // Hand-shake: every one has started to wait, and then both workers are asleep in
      // their loops: every coroutine and fiber is suspended and its operation is in the
      // kernel (a loop hands its queued operations over before it sleeps). So the
      // shutdown meets operations in flight. (Were one submitted after the loop shut
      // down, the answer would be ExecutorShutDown too.)
      while (tally.waiting.load() != kReaders + kAcceptors) std::this_thread::yield();
      EXPECT_TRUE(test::waitUntilIdle(*pool));
      if (stop == Stop::kShutdown) {
        pool->shutdown();
        // The fibers have ended (the pool is stopped but still exists): their futures
        // are ready.
        for (FiberFuture<void>& fiber : fibers) EXPECT_NO_THROW(syncAwait(std::move(fiber)));
      } else {
        fibers.clear();  // detached: they end (and are counted) as the destructor stops them
      }
      pool.reset();  // the destructor (after shutdown(), it has nothing left to do)
    }
    EXPECT_EQ(tally.shutDown.load(), kReaders + kAcceptors);
    EXPECT_EQ(tally.laterIoFailed.load(), kReaders);
    EXPECT_TRUE(tally.others.empty()) << tally.others.size() << ", first: " << tally.others.front();
    EXPECT_EQ(Counted::alive(), 0) << "a frame or a fiber stack was not unwound";
    peers.clear();
    EXPECT_EQ(test::openFdCount(), fdsBefore) << "a descriptor leaked";
  }
};

TEST_P(IoShutdownTest, ShutdownUnwindsLazysWaitingInReadsAndAccepts) {
  run(Stop::kShutdown, Kind::kLazy);
}

TEST_P(IoShutdownTest, DestructorUnwindsLazysWaitingInReadsAndAccepts) {
  run(Stop::kDestructor, Kind::kLazy);
}

TEST_P(IoShutdownTest, ShutdownUnwindsFibersWaitingInReadsAndAccepts) {
  run(Stop::kShutdown, Kind::kFiber);
}

TEST_P(IoShutdownTest, DestructorUnwindsFibersWaitingInReadsAndAccepts) {
  run(Stop::kDestructor, Kind::kFiber);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoShutdownTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
