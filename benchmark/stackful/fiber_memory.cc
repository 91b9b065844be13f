// How much memory a parked fiber costs (issue #3):
//  - shared: 1,000,000 fibers on one SharedStack (copy stacks), each parked in a
//    this_fiber::yield() called from its body. Target <= 300 bytes of RSS each
//    (libaco: 256 B; a blocked Go goroutine: ~2.7 KB, benchmark/go/goroutine_memory).
//  - pooled: 100,000 fibers on protected stacks from a StackPool (256 KiB each, one guard
//    page), parked the same way. Each stack is two kernel mappings, so the count is capped
//    at what vm.max_map_count leaves room for (65530 by default: about 32,000 stacks); the
//    number actually parked is printed.
//
// Each measurement runs in a child process forked from the same clean parent. In the
// child: the vector of fibers is allocated and touched first (it is not what is
// measured); RSS is read (/proc/self/statm); the fibers are created and each resumed
// once, to its yield; RSS is read again: (after - before) / n is the cost of one parked
// fiber (its control block, its saved stack or its touched stack pages, malloc
// overhead). Then every fiber is resumed to the end and must finish (else exit 1).
//
// Output, one "name value" pair a line, for benchmark/run.sh:
//   shared_fibers 1000000
//   shared_parked_bytes_per_fiber 230.4
//   shared_heap_bytes_per_fiber 224.0      (malloc's in-use bytes, from mallinfo2)
//   pooled_fibers 32000
//   pooled_parked_bytes_per_fiber 8192.0
//   ...
// Usage: fiber_memory [shared fibers] [pooled fibers]   (defaults 1000000 100000)

#include <malloc.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "weft/stackful/fiber.h"
#include "benchmark/support/memory_probe.h"
#include "weft/stackful/protected_stack.h"
#include "weft/stackful/shared_stack.h"
#include "weft/stackful/stack_pool.h"

namespace {

constexpr const char* kProgram = "fiber_memory";

[[noreturn]] void fail(const char* what) { weft::bench::failMeasurement(kProgram, what); }

long residentBytes() { return weft::bench::residentBytes(kProgram); }

std::size_t heapInUse() { return mallinfo2().uordblks; }

std::size_t countLines(const char* path) {
  std::ifstream in(path);
  std::size_t lines = 0;
  std::string line;
  while (std::getline(in, line)) ++lines;
  return lines;
}

long readLong(const char* path, long fallback) {
  std::ifstream in(path);
  long value = fallback;
  in >> value;
  return in ? value : fallback;
}

struct Measurement {
  long rssBefore;
  long rssParked;
  std::size_t heapBefore;
  std::size_t heapParked;
};

// Creates n fibers with makeFiber(body), resumes each to its yield, measures, then
// finishes them all.
template <class MakeFiber>
Measurement measure(std::size_t n, MakeFiber makeFiber) {
  std::vector<weft::Fiber<>> fibers;
  fibers.reserve(n);
  fibers.resize(n);  // touch the vector's pages now: they are not what is measured
  fibers.clear();
  std::size_t finished = 0;

  Measurement m{};
  m.rssBefore = residentBytes();
  m.heapBefore = heapInUse();
  for (std::size_t i = 0; i < n; ++i) {
    fibers.push_back(makeFiber([&finished] {
      weft::this_fiber::yield();
      ++finished;
    }));
    fibers.back().resume();
  }
  m.rssParked = residentBytes();
  m.heapParked = heapInUse();

  for (auto& fiber : fibers) {
    if (fiber.done()) fail("a fiber finished before it was released");
    fiber.resume();
  }
  if (finished != n) fail("not every parked fiber finished");
  return m;
}

// Runs `body` (returning a Measurement) in a child and prints its results as `name_*`.
template <class Body>
void report(const char* name, std::size_t n, Body body) {
  weft::bench::runInChild(kProgram, [&] {
    Measurement m = body();
    std::printf("%s_fibers %zu\n", name, n);
    std::printf("%s_rss_before_bytes %ld\n", name, m.rssBefore);
    std::printf("%s_rss_parked_bytes %ld\n", name, m.rssParked);
    std::printf("%s_parked_bytes_per_fiber %.1f\n", name,
                double(m.rssParked - m.rssBefore) / double(n));
    std::printf("%s_heap_bytes_per_fiber %.1f\n", name,
                double(m.heapParked) > double(m.heapBefore)
                    ? double(m.heapParked - m.heapBefore) / double(n)
                    : 0.0);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t sharedCount = 1'000'000, pooledCount = 100'000;
  if (argc > 1) sharedCount = std::strtoul(argv[1], nullptr, 10);
  if (argc > 2) pooledCount = std::strtoul(argv[2], nullptr, 10);
  if (sharedCount == 0 || pooledCount == 0) {
    fail("usage: fiber_memory [shared fibers > 0] [pooled fibers > 0]");
  }

  report("shared", sharedCount, [sharedCount] {
    weft::SharedStack shared(64 * 1024);
    return measure(sharedCount, [&shared](auto body) { return weft::Fiber<>(body, shared); });
  });

  // Each protected stack is two mappings; leave room for the process's own mappings and
  // the forked child's bookkeeping.
  const long maxMaps = readLong("/proc/sys/vm/max_map_count", 65530);
  const auto used = static_cast<long>(countLines("/proc/self/maps"));
  const long room = (maxMaps - used - 2000) / 2;
  std::size_t pooled = pooledCount;
  if (room < static_cast<long>(pooled)) {
    pooled = room > 0 ? static_cast<std::size_t>(room) : 1;
    std::printf("pooled_capped_by_max_map_count %ld\n", maxMaps);
  }
  std::printf("pooled_requested_fibers %zu\n", pooledCount);
  std::printf("pooled_stack_bytes %zu\n", weft::ProtectedStack::kDefaultSize);
  report("pooled", pooled, [pooled] {
    weft::StackPool pool(weft::ProtectedStack::kDefaultSize, 0);
    return measure(pooled, [&pool](auto body) { return weft::Fiber<>(body, pool); });
  });
  return 0;
}
