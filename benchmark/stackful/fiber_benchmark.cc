// Fiber benchmarks (issue #3), each beside a baseline in the same binary:
//
//  - BM_Fiber_CreateRunDestroy: create a Fiber on a pooled stack, run its trivial body
//    to the end, destroy it. Target <= 100 ns (libaco: ~210-250 ns create + destroy).
//  - BM_Fiber_ResumeYield: one-way switch time (round trip / 2) of the full Fiber API on
//    a protected stack: resume() into the fiber, this_fiber::yield() back. Baseline of
//    the shared-stack switches below.
//  - BM_SharedStackFiber_Switch/copy:<bytes>: two fibers on one SharedStack, each keeping
//    <bytes> of locals live, resumed alternately: every resume saves one fiber's live
//    stack and restores the other's. One-way time (each resume+yield is two switches).
//  - BM_Fiber_YieldViaExecutor: two fibers spawned on ThreadPool(1) alternating through
//    this_fiber::yield() (each yield requeues the fiber behind the other). Time per yield
//    (= per switch from one fiber to the other). Compared with Go's runtime.Gosched()
//    ping-pong under GOMAXPROCS(1) (benchmark/go/gosched_pingpong): target <= 0.25 x Go.
//    Baseline in this binary: BM_Baseline_Lazy_YieldViaExecutor, the same with two
//    stackless Lazys and co_await yield().
//  - BM_InFiber_AwaitFromLazy: a Lazy on ThreadPool(1) runs a trivial function in a fiber
//    with `co_await weft::inFiber(fn)` (the fiber inherits the Lazy's executor and token)
//    and waits for it. Baseline: BM_SpawnFiber_AwaitFromLazy, the same with
//    `co_await weft::spawnFiber(executor, fn)`. Target (issue #17): no slower.
//
// Every benchmark checks its result; a wrong count aborts the run.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "benchmark/support/fixed_iterations.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/yield.h"
#include "weft/executors/thread_pool.h"
#include "weft/coro/current_executor.h"
#include "weft/stackful/fiber.h"
#include "weft/stackful/in_fiber.h"
#include "weft/stackful/shared_stack.h"
#include "weft/stackful/spawn_fiber.h"
#include "weft/stackful/stack_pool.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fiber_benchmark: %s\n", what);
  std::abort();
}

void BM_Fiber_CreateRunDestroy(benchmark::State& state) {
  weft::StackPool& pool = weft::StackPool::defaultPool();
  std::int64_t runs = 0;
  for (auto _ : state) {
    weft::Fiber<> fiber([&runs] { ++runs; }, pool);
    fiber.resume();
  }
  if (runs != static_cast<std::int64_t>(state.iterations())) fail("a fiber did not run");
}
BENCHMARK(BM_Fiber_CreateRunDestroy)->Apply(weft::bench::fixIterations);

void BM_Fiber_ResumeYield(benchmark::State& state) {
  bool stop = false;
  std::int64_t yields = 0;
  weft::Fiber<> fiber([&] {
    while (!stop) {
      ++yields;
      weft::this_fiber::yield();
    }
  });
  fiber.resume();  // warm up: the stack's first pages are touched
  for (auto _ : state) fiber.resume();
  stop = true;
  fiber.resume();
  if (yields != static_cast<std::int64_t>(state.iterations()) + 1) fail("lost a yield");
  // One resume + one yield = two switches.
  state.counters["one_way_ns"] =
      benchmark::Counter(2.0 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel("time per iteration = round trip; one_way_ns = round trip / 2");
}
BENCHMARK(BM_Fiber_ResumeYield)->Apply(weft::bench::fixIterations);

// Keeps `bytes` of locals live across every yield (the compiler cannot drop them: they
// are written before and read after).
template <std::size_t kBytes>
[[gnu::noinline]] void yieldWithLiveStack(const bool& stop, std::int64_t& yields) {
  volatile unsigned char live[kBytes];
  for (std::size_t i = 0; i < kBytes; i += 64) live[i] = static_cast<unsigned char>(i);
  while (!stop) {
    ++yields;
    weft::this_fiber::yield();
  }
  for (std::size_t i = 0; i < kBytes; i += 64) {
    if (live[i] != static_cast<unsigned char>(i)) fail("a shared-stack fiber lost its locals");
  }
}

template <std::size_t kBytes>
void BM_SharedStackFiber_Switch(benchmark::State& state) {
  weft::SharedStack shared(64 * 1024);
  bool stop = false;
  std::int64_t yieldsA = 0, yieldsB = 0;
  weft::Fiber<> a([&] { yieldWithLiveStack<kBytes>(stop, yieldsA); }, shared);
  weft::Fiber<> b([&] { yieldWithLiveStack<kBytes>(stop, yieldsB); }, shared);
  a.resume();
  b.resume();
  for (auto _ : state) {
    a.resume();  // copies b's live stack out and a's in
    b.resume();  // and back
  }
  stop = true;
  a.resume();
  b.resume();
  if (yieldsA != yieldsB || yieldsA != static_cast<std::int64_t>(state.iterations()) + 1) {
    fail("shared-stack fibers lost a yield");
  }
  // Per iteration: two resumes and two yields = four switches, two of them with copies.
  state.counters["one_way_ns"] =
      benchmark::Counter(4.0 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel("one_way_ns = iteration / 4 (each resume saves one stack, restores one)");
}
BENCHMARK(BM_SharedStackFiber_Switch<64>)->Name("BM_SharedStackFiber_Switch/copy:64")->Apply(weft::bench::fixIterations);
BENCHMARK(BM_SharedStackFiber_Switch<256>)->Name("BM_SharedStackFiber_Switch/copy:256")->Apply(weft::bench::fixIterations);
BENCHMARK(BM_SharedStackFiber_Switch<1024>)->Name("BM_SharedStackFiber_Switch/copy:1024")->Apply(weft::bench::fixIterations);
BENCHMARK(BM_SharedStackFiber_Switch<4096>)->Name("BM_SharedStackFiber_Switch/copy:4096")->Apply(weft::bench::fixIterations);

// Two fibers on ThreadPool(1), each yielding `perFiber` times; returns the total.
std::int64_t alternateFibers(weft::ThreadPool& pool, std::int64_t perFiber) {
  auto body = [perFiber] {
    std::int64_t n = 0;
    for (; n < perFiber; ++n) weft::this_fiber::yield();
    return n;
  };
  auto a = weft::spawnFiber(&pool, body);
  auto b = weft::spawnFiber(&pool, body);
  return weft::syncAwait(std::move(a)) + weft::syncAwait(std::move(b));
}

void BM_Fiber_YieldViaExecutor(benchmark::State& state) {
  weft::ThreadPool pool(1);
  constexpr std::int64_t kBatch = 20000;  // yields per batch, 10,000 per fiber
  alternateFibers(pool, 1000);            // warm up: stacks, frames, the worker
  while (state.KeepRunningBatch(kBatch)) {
    if (alternateFibers(pool, kBatch / 2) != kBatch) fail("lost a yield");
  }
  state.SetLabel("time per yield (one fiber-to-fiber switch through the executor)");
}
BENCHMARK(BM_Fiber_YieldViaExecutor)->UseRealTime()->Apply(weft::bench::fixIterations);

weft::Lazy<std::int64_t> lazyYielder(std::int64_t perLazy) {
  std::int64_t n = 0;
  for (; n < perLazy; ++n) co_await weft::yield();
  co_return n;
}

std::int64_t alternateLazys(weft::ThreadPool& pool, std::int64_t perLazy) {
  std::vector<weft::Lazy<std::int64_t>> branches;
  branches.push_back(lazyYielder(perLazy));
  branches.push_back(lazyYielder(perLazy));
  std::int64_t total = 0;
  for (auto& r : weft::syncAwait(weft::collectAllPara(std::move(branches)), &pool)) {
    total += r.value();
  }
  return total;
}

void BM_Baseline_Lazy_YieldViaExecutor(benchmark::State& state) {
  weft::ThreadPool pool(1);
  constexpr std::int64_t kBatch = 20000;
  alternateLazys(pool, 1000);
  while (state.KeepRunningBatch(kBatch)) {
    if (alternateLazys(pool, kBatch / 2) != kBatch) fail("lost a yield");
  }
  state.SetLabel("time per yield (one Lazy-to-Lazy switch through the executor)");
}
BENCHMARK(BM_Baseline_Lazy_YieldViaExecutor)->UseRealTime()->Apply(weft::bench::fixIterations);

weft::Lazy<std::int64_t> spawnAndAwaitFibers(std::int64_t n) {
  weft::Executor* executor = co_await weft::currentExecutor();
  std::int64_t sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += co_await weft::spawnFiber(executor, [] { return 1; });
  co_return sum;
}

weft::Lazy<std::int64_t> inFiberAwaits(std::int64_t n) {
  std::int64_t sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += co_await weft::inFiber([] { return 1; });
  co_return sum;
}

template <weft::Lazy<std::int64_t> (*kRun)(std::int64_t)>
void runFibersFromLazy(benchmark::State& state) {
  weft::ThreadPool pool(1);
  constexpr std::int64_t kBatch = 1000;
  weft::syncAwait(kRun(kBatch), &pool);  // warm up: stacks, frames, the worker
  while (state.KeepRunningBatch(kBatch)) {
    if (weft::syncAwait(kRun(kBatch), &pool) != kBatch) fail("lost a fiber");
  }
  state.SetLabel("time per fiber started, run and awaited from a Lazy");
}

void BM_SpawnFiber_AwaitFromLazy(benchmark::State& state) { runFibersFromLazy<spawnAndAwaitFibers>(state); }
BENCHMARK(BM_SpawnFiber_AwaitFromLazy)->UseRealTime()->Apply(weft::bench::fixIterations);

void BM_InFiber_AwaitFromLazy(benchmark::State& state) { runFibersFromLazy<inFiberAwaits>(state); }
BENCHMARK(BM_InFiber_AwaitFromLazy)->UseRealTime()->Apply(weft::bench::fixIterations);

}  // namespace

BENCHMARK_MAIN();
