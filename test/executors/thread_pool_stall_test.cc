// ThreadPool's stall detector (ThreadPoolOptions::stallThreshold, StallReport). No timing
// is asserted: a spinning item spins on an atomic flag that the test releases once the
// report it waits for has come (bounded by a watchdog), and "reported once" and "never
// reported" are checked against a later report that proves the detector kept looking
// meanwhile.

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test/support/thread_states.h"
#include "test/support/wait_until.h"
#include "test/support/watchdog.h"
#include "weft/coro/lazy.h"
#include "weft/coro/spawn.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/task_group.h"
#include "weft/coro/yield.h"
#include "weft/executors/stall_report.h"
#include "weft/executors/thread_pool.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

constexpr auto kLimit = 120s;

// The reports a pool made, for the test thread to wait on.
class Reports {
 public:
  std::function<void(const StallReport&)> sink() {
    return [this](const StallReport& report) {
      std::lock_guard<std::mutex> lock(mutex_);
      reports_.push_back(report);
      changed_.notify_all();
    };
  }
  // Waits (at most a minute: a hang guard, not a timing) until `predicate(reports)`.
  template <class Predicate>
  bool waitFor(Predicate predicate) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, 60s, [&] { return predicate(reports_); });
  }
  std::vector<StallReport> all() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reports_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<StallReport> reports_;
};

std::size_t workerReports(const std::vector<StallReport>& reports) {
  return static_cast<std::size_t>(std::count_if(reports.begin(), reports.end(),
                                                [](const StallReport& r) { return !r.wholePool; }));
}

bool names(const StallReport& report, const std::string& function) {
  return std::any_of(report.nativeFunctions.begin(), report.nativeFunctions.end(),
                     [&](const std::string& f) { return f.find(function) != std::string::npos; });
}

// Spins on `release` until it is set. Not with sched_yield (std::this_thread::yield): the
// detector counts a stall in the time its thread had the CPU or was blocked, and a thread
// that yields while others want the CPU waits for it nearly all the time (measured on
// Linux 6.18: 0.5 ms of CPU in a second against two plain spinners), so such an item would
// take minutes to reach the threshold on a busy machine. A plain spin gets its fair share.
// (The load is an atomic operation: under ThreadSanitizer, the stall signal's handler runs
// there.)
[[gnu::noinline]] void spinUntil(const std::atomic<bool>& release) {
  while (!release.load()) {
  }
}

// A coroutine that stalls its worker: after one hop through the pool, it spins until
// released, without suspending.
[[gnu::noinline]] Lazy<> spinUntilReleased(std::atomic<bool>& spinning,
                                           std::atomic<bool>& release) {
  co_await yield();
  spinning.store(true);
  spinUntil(release);
}

// A coroutine that keeps its worker busy with short items until told to stop.
Lazy<> hopUntilStopped(std::atomic<bool>& stop, std::atomic<std::uint64_t>& hops) {
  while (!stop.load()) {
    co_await yield();
    hops.fetch_add(1, std::memory_order_relaxed);
  }
}

// Stalls one worker of `pool` with spinUntilReleased (awaited by syncAwait on a thread of
// its own) until `reports` holds one worker report, then releases it: returns that report
// (an empty one, with a test failure, if none came within the wait's bound). The first
// report: with one worker, the whole pool's report may follow it.
StallReport firstStallOf(ThreadPool& pool, Reports& reports) {
  std::atomic<bool> spinning{false}, release{false};
  std::thread t([&] { syncAwait(spinUntilReleased(spinning, release), &pool); });
  const bool reported = reports.waitFor([](const auto& r) { return workerReports(r) == 1; });
  release.store(true);
  t.join();
  EXPECT_TRUE(reported) << "no stall report";
  return reported ? reports.all()[0] : StallReport{};
}

ThreadPoolOptions detecting(std::size_t threads, const char* name, Reports& reports,
                            std::chrono::milliseconds threshold = 50ms) {
  ThreadPoolOptions options;
  options.threads = threads;
  options.name = name;
  options.stallThreshold = threshold;
  options.onStall = reports.sink();
  return options;
}

TEST(ThreadPoolStallTest, ReportsASpinningCoroutineOnceThenTheWholePool) {
  test::Watchdog watchdog(kLimit,
                          "ThreadPoolStallTest.ReportsASpinningCoroutineOnceThenTheWholePool");
  Reports reports;
  ThreadPool pool(detecting(2, "stall", reports));
  std::atomic<bool> spinningA{false}, spinningB{false}, release{false};
  std::thread a([&] { syncAwait(spinUntilReleased(spinningA, release), &pool); });
  ASSERT_TRUE(reports.waitFor([](const auto& r) { return workerReports(r) == 1; }));
  const std::size_t first = reports.all()[0].worker;
  // The other worker is the only one free to take this.
  std::thread b([&] { syncAwait(spinUntilReleased(spinningB, release), &pool); });
  // Both stalled: the second worker's report, and one for the whole pool. The second
  // report comes from a look made at least a threshold after the first one, with the
  // first worker stalled all along: it was not reported again.
  ASSERT_TRUE(reports.waitFor(
      [](const auto& r) { return workerReports(r) == 2 && r.size() - workerReports(r) == 1; }));
  const PoolMetrics metrics = pool.metrics();
  release.store(true);
  a.join();
  b.join();
  pool.shutdown();

  const std::vector<StallReport> all = reports.all();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(metrics.stalls, 2u);
  EXPECT_EQ(metrics.wholePoolStalls, 1u);
  std::vector<std::size_t> workers;
  for (const StallReport& r : all) {
    SCOPED_TRACE(r.toString());
    EXPECT_EQ(r.pool, "stall");
    EXPECT_GE(r.stalledFor, 50ms);
    EXPECT_TRUE(r.thread == "stall-" + std::to_string(r.worker));
    if (r.wholePool) {
      EXPECT_EQ(r.stalledWorkers, (std::vector<std::size_t>{0, 1}));
      continue;
    }
    workers.push_back(r.worker);
    // The worker's native stack, with the spinning coroutine on it. (ThreadSanitizer
    // delays a signal to the thread's next atomic operation or C library call, which the
    // spin makes: the handler runs there too.)
    ASSERT_FALSE(r.nativeFrames.empty()) << r.nativeBacktraceMissing;
    EXPECT_EQ(r.nativeFrames.size(), r.nativeFunctions.size());
    EXPECT_TRUE(names(r, "spinUntilReleased"));
  }
  EXPECT_EQ(workers[0], first);
  EXPECT_NE(workers[0], workers[1]);
}

bool hasFunction(const std::vector<std::string>& functions, const std::string& function) {
  return std::any_of(functions.begin(), functions.end(),
                     [&](const std::string& f) { return f.find(function) != std::string::npos; });
}

// A task of three coroutines: its root awaits `outer`, which awaits `inner`, which spins
// until released, in the task's first run (it never suspends).
[[gnu::noinline]] Lazy<> stallInner(std::atomic<bool>& spinning, std::atomic<bool>& release) {
  spinning.store(true);
  spinUntil(release);
  co_return;
}
[[gnu::noinline]] Lazy<> stallOuter(std::atomic<bool>& spinning, std::atomic<bool>& release) {
  co_await stallInner(spinning, release);
}
[[gnu::noinline]] Lazy<> stallRoot(std::atomic<bool>& spinning, std::atomic<bool>& release) {
  co_await stallOuter(spinning, release);
}

TEST(ThreadPoolStallTest, ReportsNameTheTaskWithItsAsyncBacktrace) {
  test::Watchdog watchdog(kLimit, "ThreadPoolStallTest.ReportsNameTheTaskWithItsAsyncBacktrace");
  Reports reports;
  ThreadPool pool(detecting(2, "chain", reports));
  std::atomic<bool> spinningA{false}, spinningB{false}, release{false};
  // A: stalls in the first run of a spawned task (the pool item that started it names it).
  JoinHandle<void> a = spawn(&pool, stallRoot(spinningA, release));
  ASSERT_TRUE(reports.waitFor([](const auto& r) { return workerReports(r) == 1; }));
  const std::size_t first = reports.all()[0].worker;
  // B, on the other worker: stalls after a wait (the end of the wait names the task). Its
  // report comes from a look made at least a threshold after A's, with A stalled all
  // along: A was not reported again.
  JoinHandle<void> b = spawn(&pool, spinUntilReleased(spinningB, release));
  ASSERT_TRUE(reports.waitFor(
      [](const auto& r) { return workerReports(r) == 2 && r.size() - workerReports(r) == 1; }));
  release.store(true);
  syncAwait(std::move(a));
  syncAwait(std::move(b));
  pool.shutdown();

  std::vector<StallReport> all = reports.all();
  ASSERT_EQ(all.size(), 3u);
  std::vector<StallReport> workers;
  for (const StallReport& r : all) {
    if (r.wholePool) {
      EXPECT_TRUE(r.task.empty());  // the workers' own reports name them
      continue;
    }
    workers.push_back(r);
  }
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[0].worker, first);
  EXPECT_NE(workers[1].worker, first);
  const StallReport& spawned = workers[0];
  const StallReport& waited = workers[1];
  SCOPED_TRACE(spawned.toString() + waited.toString());
  // The native backtrace names the coroutine that runs.
  ASSERT_FALSE(spawned.nativeFrames.empty()) << spawned.nativeBacktraceMissing;
  EXPECT_TRUE(names(spawned, "stallInner"));
  ASSERT_FALSE(waited.nativeFrames.empty()) << waited.nativeBacktraceMissing;
  EXPECT_TRUE(names(waited, "spinUntilReleased"));
  if (!WEFT_TASK_TRACKING) {
    for (const StallReport* r : {&spawned, &waited}) {
      EXPECT_TRUE(r->task.empty());
      EXPECT_TRUE(r->asyncFunctions.empty());
      EXPECT_NE(r->asyncBacktraceMissing.find("task tracking is off"), std::string::npos);
      EXPECT_NE(r->toString().find(r->asyncBacktraceMissing), std::string::npos);
    }
    return;
  }
  // The task and its async backtrace: the root coroutine, then the origin. (The Lazys
  // between the root and the coroutine that runs are not known: see StallReport.)
  EXPECT_EQ(spawned.task.rfind("task ", 0), 0u);
  EXPECT_NE(spawned.task.find("(spawn())"), std::string::npos);
  ASSERT_EQ(spawned.asyncFunctions.size(), 2u);
  EXPECT_NE(spawned.asyncFunctions[0].find("stallRoot"), std::string::npos);
  EXPECT_EQ(spawned.asyncFunctions[1], "spawn()");
  EXPECT_FALSE(hasFunction(spawned.asyncFunctions, "stallOuter"));
  EXPECT_NE(waited.task.find("(spawn())"), std::string::npos);
  EXPECT_NE(waited.task, spawned.task);  // another task number
  ASSERT_EQ(waited.asyncFunctions.size(), 2u);
  EXPECT_NE(waited.asyncFunctions[0].find("spinUntilReleased"), std::string::npos);
  EXPECT_EQ(waited.asyncFunctions[1], "spawn()");
  EXPECT_NE(spawned.toString().find("async backtrace (root coroutine, then origin):\n    #0 "),
            std::string::npos);
}

// Each way a root task starts, on a worker (inline) or from another thread (scheduled on
// the pool): a task that stalls in its first run, before it ever waits, is named with its
// origin. (Its first run is entered by the start itself, not by its root coroutine:
// coro/detail/task_registry.h, runRootTask and scheduleRootTask.)
struct FirstRunStart {
  const char* name;
  const char* origin;  // the task's label
  // Starts `root` on `pool` as a root task; returns once it is started (it may still be
  // queued). `done` is set once the task has ended.
  std::function<void(ThreadPool& pool, Lazy<> root, std::atomic<bool>& done)> start;
};

std::vector<FirstRunStart> firstRunStarts(TaskGroup<void>& group) {
  // On a worker: a callable of the pool starts the task there, inline.
  auto onWorker = [](ThreadPool& pool, std::function<void()> start) {
    pool.schedule([start = std::move(start)] { start(); });
  };
  return {
      {"syncAwait on a worker", "syncAwait",
       [=](ThreadPool& pool, Lazy<> root, std::atomic<bool>& done) {
         onWorker(pool, [root = std::make_shared<Lazy<>>(std::move(root)), &done] {
           syncAwait(std::move(*root));
           done.store(true);
         });
       }},
      {"Lazy::start() on a worker", "start()",
       [=](ThreadPool& pool, Lazy<> root, std::atomic<bool>& done) {
         onWorker(pool, [root = std::make_shared<Lazy<>>(std::move(root)), &done] {
           std::move(*root).start([&done](Try<void>&&) { done.store(true); });
         });
       }},
      {"Task::start() scheduled", "start()",
       [](ThreadPool& pool, Lazy<> root, std::atomic<bool>& done) {
         std::move(root).via(&pool).start([&done](Try<void>&&) { done.store(true); });
       }},
      {"Task::start() on a worker", "start()",
       [=](ThreadPool& pool, Lazy<> root, std::atomic<bool>& done) {
         onWorker(pool, [&pool, root = std::make_shared<Lazy<>>(std::move(root)), &done] {
           std::move(*root).via(&pool).start([&done](Try<void>&&) { done.store(true); });
         });
       }},
      {"spawn() scheduled", "spawn()",
       [](ThreadPool& pool, Lazy<> root, std::atomic<bool>& done) {
         spawn(&pool, [](Lazy<> task, std::atomic<bool>& done) -> Lazy<> {
           co_await std::move(task);
           done.store(true);
         }(std::move(root), done)).detach();
       }},
      {"spawn() on a worker", "spawn()",
       [=](ThreadPool& pool, Lazy<> root, std::atomic<bool>& done) {
         onWorker(pool, [&pool, root = std::make_shared<Lazy<>>(std::move(root)), &done] {
           spawn(&pool, [](Lazy<> task, std::atomic<bool>& done) -> Lazy<> {
             co_await std::move(task);
             done.store(true);
           }(std::move(*root), done)).detach();
         });
       }},
      {"TaskGroup::spawn() scheduled", "TaskGroup::spawn()",
       [&group](ThreadPool&, Lazy<> root, std::atomic<bool>& done) {
         group.spawn([](Lazy<> task, std::atomic<bool>& done) -> Lazy<> {
           co_await std::move(task);
           done.store(true);
         }(std::move(root), done));
       }},
      {"TaskGroup::spawn() on a worker", "TaskGroup::spawn()",
       [=, &group](ThreadPool& pool, Lazy<> root, std::atomic<bool>& done) {
         onWorker(pool, [&group, root = std::make_shared<Lazy<>>(std::move(root)), &done] {
           group.spawn([](Lazy<> task, std::atomic<bool>& done) -> Lazy<> {
             co_await std::move(task);
             done.store(true);
           }(std::move(*root), done));
         });
       }},
  };
}

TEST(ThreadPoolStallTest, ATaskStalledInItsFirstRunIsNamedHoweverItStarted) {
  test::Watchdog watchdog(kLimit,
                          "ThreadPoolStallTest.ATaskStalledInItsFirstRunIsNamedHoweverItStarted");
  Reports reports;
  ThreadPool pool(detecting(2, "firstrun", reports));
  TaskGroup<void> group(&pool);
  std::size_t expected = 0;
  for (const FirstRunStart& way : firstRunStarts(group)) {
    SCOPED_TRACE(way.name);
    std::atomic<bool> spinning{false}, release{false}, done{false};
    // The stalling coroutine is awaited by the task's root (or, where the start wraps
    // the task to see it end, one level further down).
    way.start(pool, stallRoot(spinning, release), done);
    ++expected;
    const bool reported =
        reports.waitFor([&](const auto& r) { return workerReports(r) == expected; });
    release.store(true);
    test::waitUntil([&] { return done.load(); });
    ASSERT_TRUE(reported) << "no stall report";
    const StallReport report = reports.all().back();
    SCOPED_TRACE(report.toString());
    ASSERT_FALSE(report.wholePool);
    ASSERT_FALSE(report.nativeFrames.empty()) << report.nativeBacktraceMissing;
    EXPECT_TRUE(names(report, "stallInner"));
    if (!WEFT_TASK_TRACKING) {
      EXPECT_TRUE(report.task.empty());
      EXPECT_NE(report.asyncBacktraceMissing.find("task tracking is off"), std::string::npos);
      continue;
    }
    // Named in its first run: its number and origin, its root coroutine, then the origin.
    EXPECT_EQ(report.task.rfind("task ", 0), 0u);
    EXPECT_NE(report.task.find(std::string("(") + way.origin + ")"), std::string::npos);
    ASSERT_EQ(report.asyncFunctions.size(), 2u);
    EXPECT_EQ(report.asyncFunctions[1], way.origin);
  }
  syncAwait(group.join());
  pool.shutdown();
  // One report per stall: none for the whole pool (one worker stalled at a time), none
  // twice.
  EXPECT_EQ(reports.all().size(), expected);
}

// A Task that syncAwait(lazy, executor) runs is awaited by syncAwait's own root task: it
// runs outside any root task's run, and is not named (the native backtrace names it).
TEST(ThreadPoolStallTest, ATaskAwaitedBySyncAwaitIsNotNamed) {
  test::Watchdog watchdog(kLimit, "ThreadPoolStallTest.ATaskAwaitedBySyncAwaitIsNotNamed");
  Reports reports;
  ThreadPool pool(detecting(2, "awaited", reports));
  const StallReport report = firstStallOf(pool, reports);
  pool.shutdown();
  EXPECT_TRUE(report.task.empty()) << report.toString();
  EXPECT_NE(report.asyncBacktraceMissing.find("no async backtrace"), std::string::npos);
  EXPECT_TRUE(names(report, "spinUntilReleased")) << report.toString();
}

TEST(ThreadPoolStallTest, ACallableIsReportedWithoutATask) {
  test::Watchdog watchdog(kLimit, "ThreadPoolStallTest.ACallableIsReportedWithoutATask");
  Reports reports;
  ThreadPool pool(detecting(2, "callable", reports));
  std::atomic<bool> release{false};
  // A task runs on the pool first, so that the worker has run one before the callable.
  syncAwait(
      [&]() -> Lazy<> {
        co_await yield();
        pool.schedule([&] { spinUntil(release); });
      }(),
      &pool);
  ASSERT_TRUE(reports.waitFor([](const auto& r) { return workerReports(r) == 1; }));
  release.store(true);
  pool.shutdown();
  const StallReport report = reports.all()[0];
  EXPECT_TRUE(report.task.empty()) << report.toString();
  EXPECT_TRUE(report.asyncFunctions.empty());
  EXPECT_FALSE(report.asyncBacktraceMissing.empty());
}

TEST(ThreadPoolStallTest, ABusyPoolOfShortItemsIsNotReported) {
  test::Watchdog watchdog(kLimit, "ThreadPoolStallTest.ABusyPoolOfShortItemsIsNotReported");
  Reports reports;
  // Items of microseconds against a threshold of 200 ms.
  ThreadPool pool(detecting(3, "busy", reports, 200ms));
  std::atomic<bool> spinning{false}, release{false}, stop{false};
  std::atomic<std::uint64_t> hops{0};
  // One worker stalls (the clock of this test: its report proves that the detector
  // looked at the others for longer than a threshold meanwhile)...
  std::thread spinner([&] { syncAwait(spinUntilReleased(spinning, release), &pool); });
  test::waitUntil([&] { return spinning.load(); });
  // ...while the two others run short items all along.
  std::vector<std::thread> busy;
  for (int i = 0; i < 4; ++i) {
    busy.emplace_back([&] { syncAwait(hopUntilStopped(stop, hops), &pool); });
  }
  ASSERT_TRUE(reports.waitFor([](const auto& r) { return !r.empty(); }));
  const std::uint64_t hopsWhileWatched = hops.load();
  stop.store(true);
  for (std::thread& t : busy) t.join();
  release.store(true);
  spinner.join();
  pool.shutdown();
  const std::vector<StallReport> all = reports.all();
  ASSERT_EQ(all.size(), 1u) << all.back().toString();  // the spinner only, no whole pool
  EXPECT_FALSE(all[0].wholePool);
  EXPECT_TRUE(names(all[0], "spinUntilReleased")) << all[0].toString();
  EXPECT_GT(hopsWhileWatched, 0u);
}

// A stall is what the item did, not what the scheduler did: the stall time leaves out the
// time the worker's thread waited for a CPU. A thread blocked in a system call waits for
// none, so a worker blocked in read() on a pipe that nobody writes until its report has
// come is reported, however busy the machine.
TEST(ThreadPoolStallTest, AWorkerBlockedInASystemCallIsReported) {
  test::Watchdog watchdog(kLimit, "ThreadPoolStallTest.AWorkerBlockedInASystemCallIsReported");
  int pipe[2];
  ASSERT_EQ(::pipe2(pipe, O_CLOEXEC), 0);
  Reports reports;
  ThreadPoolOptions options = detecting(2, "blocked", reports);
  options.onStall = [&, record = reports.sink()](const StallReport& report) {
    record(report);
    if (report.wholePool) return;
    const char byte = 'x';
    ssize_t n;
    do {
      n = ::write(pipe[1], &byte, 1);
    } while (n < 0 && errno == EINTR);
  };
  ThreadPool pool(options);
  std::atomic<bool> blocking{false};
  std::atomic<ssize_t> got{-2};
  pool.schedule([&] {
    blocking.store(true);
    char byte = 0;
    ssize_t n;
    do {
      n = ::read(pipe[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    got.store(n);
  });
  test::waitUntil([&] { return got.load() != -2; });
  pool.shutdown();
  ::close(pipe[0]);
  ::close(pipe[1]);
  EXPECT_TRUE(blocking.load());
  EXPECT_EQ(got.load(), 1);  // released by the report's byte, not by an error
  const std::vector<StallReport> all = reports.all();
  ASSERT_EQ(all.size(), 1u) << all.back().toString();  // the other worker was idle
  EXPECT_FALSE(all[0].wholePool);
  EXPECT_EQ(all[0].thread, "blocked-" + std::to_string(all[0].worker));
  EXPECT_GE(all[0].stalledFor, 50ms) << all[0].toString();
}

TEST(ThreadPoolStallTest, ShutdownWithTheDetectorOnDoesNotHang) {
  test::Watchdog watchdog(kLimit, "ThreadPoolStallTest.ShutdownWithTheDetectorOnDoesNotHang");
  {
    // Idle, with looks every half millisecond.
    Reports reports;
    ThreadPool pool(detecting(2, "idle", reports, 1ms));
    std::atomic<int> ran{0};
    for (int i = 0; i < 1000; ++i) pool.schedule([&] { ran.fetch_add(1); });
    test::waitUntil([&] { return ran.load() == 1000; });
    pool.shutdown();
  }
  {
    // Shut down while a worker is stalled: shutdown() waits for the item, which the
    // report releases (the detector keeps looking while the pool drains).
    std::atomic<bool> spinning{false}, release{false};
    ThreadPoolOptions options;
    options.threads = 1;
    options.name = "draining";
    options.stallThreshold = 20ms;
    options.onStall = [&](const StallReport&) { release.store(true); };
    ThreadPool pool(options);
    pool.schedule([&] {
      spinning.store(true);
      spinUntil(release);
    });
    test::waitUntil([&] { return spinning.load(); });
    pool.shutdown();
    EXPECT_TRUE(release.load());
  }
}

TEST(ThreadPoolStallTest, TheDefaultReportGoesToStderr) {
  test::Watchdog watchdog(kLimit, "ThreadPoolStallTest.TheDefaultReportGoesToStderr");
  ::testing::internal::CaptureStderr();
  std::string output;
  {
    ThreadPoolOptions options;
    options.threads = 1;
    options.name = "quiet";
    options.stallThreshold = 20ms;
    ThreadPool pool(options);
    std::atomic<bool> spinning{false}, release{false};
    std::thread t([&] { syncAwait(spinUntilReleased(spinning, release), &pool); });
    test::waitUntil([&] { return pool.metrics().stalls == 1; });
    release.store(true);
    t.join();
  }
  output = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(output.find("weft: ThreadPool 'quiet': worker 0 (thread quiet-0) has been running "
                        "one item for "),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("spinUntilReleased"), std::string::npos) << output;
}

TEST(ThreadPoolStallTest, WithoutTheSignalReportsSayWhy) {
  test::Watchdog watchdog(kLimit, "ThreadPoolStallTest.WithoutTheSignalReportsSayWhy");
  Reports reports;
  ThreadPoolOptions options = detecting(1, "nosignal", reports, 20ms);
  options.stallSignal = -1;
  ThreadPool pool(options);
  const StallReport report = firstStallOf(pool, reports);
  EXPECT_TRUE(report.nativeFrames.empty());
  EXPECT_NE(report.nativeBacktraceMissing.find("stallSignal"), std::string::npos);
  EXPECT_NE(report.toString().find(report.nativeBacktraceMissing), std::string::npos);
}

TEST(ThreadPoolStallTest, WorkersMadeWithEverySignalBlockedStillAnswer) {
  test::Watchdog watchdog(kLimit,
                          "ThreadPoolStallTest.WorkersMadeWithEverySignalBlockedStillAnswer");
  Reports reports;
  // As a program that takes its signals on a thread of its own does: every thread made
  // from here on inherits the mask.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &all, &previous), 0);
  ThreadPool pool(detecting(1, "masked", reports, 20ms));
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &previous, nullptr), 0);
  const StallReport report = firstStallOf(pool, reports);
  EXPECT_FALSE(report.nativeFrames.empty()) << report.nativeBacktraceMissing;
  EXPECT_TRUE(names(report, "spinUntilReleased")) << report.toString();
}

TEST(ThreadPoolStallTest, TheStallThreadEndsWithShutdown) {
  ThreadPoolOptions options;
  options.threads = 1;
  options.name = "withstall";
  ThreadPool pool(options);  // the default threshold: on
  EXPECT_EQ(test::threadStates("withstall-stall").size(), 1u);
  pool.shutdown();
  EXPECT_EQ(test::threadStates("withstall-stall").size(), 0u);  // joined
}

TEST(ThreadPoolStallTest, OffMeansNoThread) {
  ThreadPoolOptions options;
  options.threads = 1;
  options.name = "nodetector";
  options.stallThreshold = 0ms;
  ThreadPool pool(options);
  std::atomic<bool> ran{false};
  pool.schedule([&] { ran.store(true); });
  test::waitUntil([&] { return ran.load(); });
  const std::vector<char> threads = test::threadStates("nodetector-");
  EXPECT_EQ(threads.size(), 1u);  // the worker only
  EXPECT_EQ(pool.metrics().stalls, 0u);

  options.stallThreshold = -1ms;
  EXPECT_THROW(ThreadPool bad(options), std::invalid_argument);
}

}  // namespace
}  // namespace weft
