// How much memory one task of the 30,000-task echo ring costs (issue #4), the rings of
// BM_Channel_EchoRing30000 (Lazys) and BM_FiberChannel_EchoRing30000 (fibers, 16 KiB
// guarded stacks) in benchmark/coro/channel_benchmark.cc; Go's figure for the same ring
// comes from benchmark/go/channel_echo_ring ("bytes_per_task").
//
// In a child process forked from a clean parent, on a ThreadPool(1):
//  1. RSS is read (/proc/self/statm) once the pool runs;
//  2. 30,000 channels of capacity 1 and 30,000 echo Lazys (each waiting on its own
//     channel) are created and started, and one full round is run, so every echoer has
//     received, replied and parked again;
//  3. RSS is read again while they are all parked: (after - before) / 30,000 is the cost
//     of one echo task: its coroutine frame (for a fiber: its control block, the touched
//     pages of its stack and the Lazy that drives it), its channel and its share of the
//     collect;
//  4. the ring is shut down (every channel closed; every task must finish).
//
// Output, one "name value" pair a line, for benchmark/run.sh:
//   lazy_echo_tasks 30000
//   lazy_echo_bytes_per_task 351.0
//   fiber_echo_tasks 30000
//   fiber_echo_bytes_per_task 9000.0
// Usage: channel_memory [tasks]   (default 30000)


#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "benchmark/support/echo_ring.h"
#include "benchmark/support/memory_probe.h"
#include "weft/coro/channel.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "weft/stackful/stack_pool.h"

namespace {

constexpr const char* kProgram = "channel_memory";

using weft::Channel;
using weft::Lazy;

long residentBytes() { return weft::bench::residentBytes(kProgram); }

[[noreturn]] void fail(const char* what) { weft::bench::failMeasurement(kProgram, what); }

// Steps 1-4 for Lazys; returns the RSS growth per task.
double measureLazyRing(int tasks) {
  weft::ThreadPool pool(1, "echo-ring");
  Channel<int> warmed(1);
  weft::syncAwait([&]() -> Lazy<void> { co_await warmed.send(0); }().via(&pool));
  const long before = residentBytes();

  weft::bench::EchoRing ring(tasks);
  Channel<int> measured;  // the main thread's go-ahead after measuring
  Channel<int> parked(1);  // the driver's signal: one round done, everybody parked
  auto driver = [&]() -> Lazy<void> {
    if (!co_await ring.lazyRound()) fail("wrong echo sum");
    co_await parked.send(1);
    co_await measured.receive();
    ring.close();
  };
  std::vector<Lazy<void>> all;
  all.reserve(tasks + 1);
  for (int i = 0; i < tasks; ++i) all.push_back(ring.lazyEcho(i));
  all.push_back(driver());
  bool finished = false;
  weft::collectAllPara(std::move(all)).via(&pool).start([&](auto&& results) {
    for (weft::Try<void>& result : results.value()) result.value();
    finished = true;
  });
  weft::syncAwait([&]() -> Lazy<void> { co_await parked.receive(); }());
  const long after = residentBytes();
  weft::syncAwait([&]() -> Lazy<void> { co_await measured.send(0); }());
  pool.shutdown();  // waits for the ring to finish
  if (!finished) fail("the ring did not finish");
  return double(after - before) / tasks;
}

// The same with fibers (each on a 16 KiB guarded stack, as in the benchmark).
double measureFiberRing(int tasks) {
  weft::ThreadPool pool(1, "echo-ring");
  weft::StackPool stacks(16 * 1024, 0);
  weft::SpawnFiberOptions options;
  options.stackPool = &stacks;
  Channel<int> warmed(1);
  weft::syncAwait(weft::spawnFiber(&pool, [&] { weft::await(warmed.send(0)); }, options));
  const long before = residentBytes();

  weft::bench::EchoRing ring(tasks);
  Channel<int> measured;
  Channel<int> parked(1);
  std::vector<weft::FiberFuture<void>> echoes;
  echoes.reserve(tasks);
  for (int i = 0; i < tasks; ++i) {
    echoes.push_back(weft::spawnFiber(&pool, [&ring, i] { ring.fiberEcho(i); }, options));
  }
  auto driver = weft::spawnFiber(
      &pool,
      [&] {
        if (!ring.fiberRound()) fail("wrong echo sum");
        weft::await(parked.send(1));
        weft::await(measured.receive());
        ring.close();
      },
      options);
  weft::syncAwait([&]() -> Lazy<void> { co_await parked.receive(); }());
  const long after = residentBytes();
  weft::syncAwait([&]() -> Lazy<void> { co_await measured.send(0); }());
  weft::syncAwait(std::move(driver));
  for (auto& echo : echoes) weft::syncAwait(std::move(echo));
  return double(after - before) / tasks;
}

template <class Body>
void report(const char* name, int tasks, Body body) {
  weft::bench::runInChild(kProgram, [&] {
    const double perTask = body();
    std::printf("%s_echo_tasks %d\n", name, tasks);
    std::printf("%s_echo_bytes_per_task %.1f\n", name, perTask);
  });
}

}  // namespace

int main(int argc, char** argv) {
  int tasks = 30000;
  if (argc > 1) tasks = std::atoi(argv[1]);
  if (tasks <= 0) fail("usage: channel_memory [tasks > 0]");
  report("lazy", tasks, [tasks] { return measureLazyRing(tasks); });
  report("fiber", tasks, [tasks] { return measureFiberRing(tasks); });
  return 0;
}
