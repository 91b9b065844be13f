// How much memory a parked weft::Lazy costs: parks 1,000,000 Lazy<void> coroutines, each
// suspended on a trivial awaitable that records its handle, and reports the growth of
// the resident set per coroutine while they are all parked. The same is measured for
// the bare task of benchmark/support/bare_task.h as the baseline (issue #2: target
// <= 128 bytes per Lazy; a bare task frame is ~64 bytes).
//
// Each measurement runs in a child process forked from the same clean parent, so one
// does not reuse memory the other freed. In the child:
//  1. the vector of Lazys and the vector the awaitable records handles into are
//     allocated and touched (they are not what is measured);
//  2. RSS is read (/proc/self/statm);
//  3. 1,000,000 coroutines are created and started by collectAll(vector).start(cb): each
//     runs to the awaitable and parks;
//  4. RSS is read again: (after - before) / 1,000,000 is the cost of one parked
//     coroutine, frame plus allocator overhead (the collect's own frame is shared);
//  5. every handle is resumed; every coroutine must finish and the collect's callback
//     must run (else the program aborts).
//
// Output, one "name value" pair a line, for benchmark/run.sh:
//   lazy_parked_bytes_per_coroutine 96.0
//   lazy_frame_request_bytes 88      (what the frame allocator asked the heap for)
//   bare_parked_bytes_per_coroutine 48.0
//   ...
// Usage: lazy_memory [coroutines]   (default 1000000)


#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include "benchmark/support/bare_task.h"
#include "benchmark/support/memory_probe.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/try.h"

// Heap requests are counted while `gCounting` is set, to report what each parked frame
// asked for (weft rounds frames up to its size classes; malloc adds its own header).
// Replacing the global operator new changes nothing else: it is malloc either way.
namespace {

constexpr const char* kProgram = "lazy_memory";
constexpr std::size_t kCountedSizes = 1024;
bool gCounting = false;
std::size_t gRequests = 0;
std::size_t gRequestsOfSize[kCountedSizes] = {};  // the last one: that size or more
}  // namespace

void* operator new(std::size_t size) {
  if (gCounting) {
    ++gRequests;
    ++gRequestsOfSize[size < kCountedSizes ? size : kCountedSizes - 1];
  }
  if (void* block = std::malloc(size == 0 ? 1 : size)) return block;
  throw std::bad_alloc();
}
// noinline: inlined next to its operator new, g++-12 mistakes new + free for a mismatch.
[[gnu::noinline]] void operator delete(void* block) noexcept { std::free(block); }
[[gnu::noinline]] void operator delete(void* block, std::size_t) noexcept { std::free(block); }

namespace {

// Where parked coroutines wait: a preallocated, pre-touched array of handles.
struct ParkingLot {
  std::vector<std::coroutine_handle<>> handles;
  std::size_t parked = 0;
  std::size_t finished = 0;
};
ParkingLot gLot;

// The trivial awaitable: always suspends and records the handle. Empty, so a frame
// holds nothing on its behalf but what the coroutine machinery itself needs.
struct Park {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const noexcept { gLot.handles[gLot.parked++] = h; }
  void await_resume() const noexcept {}
};

weft::Lazy<void> parkedLazy() {
  co_await Park{};
  ++gLot.finished;
}

weft::bench::BareTask<void> parkedBare() {
  co_await Park{};
  ++gLot.finished;
}

long residentBytes() { return weft::bench::residentBytes(kProgram); }

[[noreturn]] void fail(const char* what) { weft::bench::failMeasurement(kProgram, what); }

struct Measurement {
  long rssBefore;
  long rssParked;
};

// Steps 1-5 of the file comment for one kind of task. `Task` is weft::Lazy<void> or
// BareTask<void>; `make` creates one parked coroutine; `startCollect` starts the collect
// of all of them and returns a predicate telling whether it has finished.
template <class Task, class Make, class StartCollect>
Measurement measure(std::size_t n, Make make, StartCollect startCollect) {
  std::vector<Task> tasks;
  tasks.reserve(n);
  // Touch the handle array now, so that its pages are not counted as frames.
  gLot.handles.assign(n, std::coroutine_handle<>());
  // Pre-touch the task vector's pages too: write and drop n empty tasks.
  tasks.resize(n);
  tasks.clear();

  Measurement m{};
  m.rssBefore = residentBytes();
  gCounting = true;
  for (std::size_t i = 0; i < n; ++i) tasks.push_back(make());
  auto finished = startCollect(std::move(tasks));
  gCounting = false;
  m.rssParked = residentBytes();

  if (gLot.parked != n) fail("not every coroutine parked");
  if (finished()) fail("the collect finished before its branches were released");
  for (std::size_t i = 0; i < n; ++i) gLot.handles[i].resume();
  if (gLot.finished != n) fail("not every parked coroutine finished");
  if (!finished()) fail("the collect did not finish after every branch did");
  return m;
}

// Runs `body` (which returns a Measurement) in a child and prints its results.
template <class Body>
void report(const char* name, std::size_t n, Body body) {
  weft::bench::runInChild(kProgram, [&] {
    Measurement m = body();
    const double perCoroutine = double(m.rssParked - m.rssBefore) / double(n);
    // The most frequent heap request is the frame; gRequests also counts the collect's
    // own frame and (for weft) the start() callback's sink.
    std::size_t frameRequest = 0;
    for (std::size_t size = 0; size < kCountedSizes; ++size) {
      if (gRequestsOfSize[size] > gRequestsOfSize[frameRequest]) frameRequest = size;
    }
    std::printf("%s_coroutines %zu\n", name, n);
    std::printf("%s_rss_before_bytes %ld\n", name, m.rssBefore);
    std::printf("%s_rss_parked_bytes %ld\n", name, m.rssParked);
    std::printf("%s_parked_bytes_per_coroutine %.1f\n", name, perCoroutine);
    std::printf("%s_frame_request_bytes %zu\n", name, frameRequest);
    std::printf("%s_heap_requests %zu\n", name, gRequests);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 1'000'000;
  if (argc > 1) n = std::strtoul(argv[1], nullptr, 10);
  if (n == 0) fail("usage: lazy_memory [coroutines > 0]");

  report("lazy", n, [n] {
    bool collectDone = false;
    return measure<weft::Lazy<void>>(
        n, [] { return parkedLazy(); },
        [&collectDone](std::vector<weft::Lazy<void>> tasks) {
          weft::collectAll(std::move(tasks)).start([&collectDone](auto&& results) {
            for (weft::Try<void>& result : results.value()) result.value();
            collectDone = true;
          });
          return [&collectDone] { return collectDone; };
        });
  });

  report("bare", n, [n] {
    return measure<weft::bench::BareTask<void>>(
        n, [] { return parkedBare(); },
        [](std::vector<weft::bench::BareTask<void>> tasks) {
          auto collect = weft::bench::collectAll(std::move(tasks));
          collect.start();
          // The predicate owns the collect, so its frame outlives the measurement.
          return [collect = std::move(collect)]() mutable {
            if (!collect.done()) return false;
            collect.result();
            return true;
          };
        });
  });
  return 0;
}
