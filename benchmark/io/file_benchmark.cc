// weft::File reads and writes of a file in the page cache, on each event loop: what a
// service that serves or logs to local files pays per operation, and what decides
// between the backends for file I/O (docs/io.md, "Which backend").
//
//  - BM_File_ReadAt/<backend>/<bytes>/<coroutines>: `coroutines` Lazys on a ThreadPool(1)
//    each read `bytes` at pseudo-random aligned offsets of a 64 MiB file that is in the
//    page cache (written just before), 20,000 reads in all per iteration.
//  - BM_File_WriteAt/<backend>/<bytes>/<coroutines>: the same with writes over the file's
//    existing blocks (no allocation: the common case of a log or a cache file rewritten).
//  - BM_Baseline_Pread: pread(2) of 4 KiB in a loop on the calling thread: the kernel's
//    own cost, with no event loop and no coroutine.
// Counters: us/op (wall clock per operation, all coroutines together) and cpu-us/op (the
// whole process's CPU time per operation, blocking-pool threads included).
//
// The file is made in TMPDIR (default /tmp) and removed at exit. WEFT_BENCH_ITERATIONS=n
// fixes the iteration counts, as in tcp_stream_benchmark; WEFT_BENCH_SMOKE=1 runs 640
// operations per iteration instead of 20,000.

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/file.h"

namespace {

using weft::Lazy;

constexpr std::uint64_t kFileSize = 64ull << 20;

// Operations per iteration: 20,000, or 640 under WEFT_BENCH_SMOKE=1 (test/run.sh's crash
// check of every benchmark).
const std::int64_t kOperations = std::getenv("WEFT_BENCH_SMOKE") != nullptr ? 640 : 20000;

void fixIterations(benchmark::internal::Benchmark* b) {
  const char* fixed = std::getenv("WEFT_BENCH_ITERATIONS");
  if (fixed != nullptr && std::atol(fixed) > 0) b->Iterations(std::atol(fixed));
}

void check(bool ok, const char* what) {
  if (!ok) [[unlikely]] {
    std::fprintf(stderr, "%s: failed\n", what);
    std::abort();
  }
}

// The benchmark's file: created and filled once (so it is in the page cache), removed at
// exit.
const std::string& filePath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir != nullptr ? dir : "/tmp") + "/weft_file_benchmark.XXXXXX";
    const int fd = ::mkstemp(p.data());
    check(fd >= 0, "mkstemp");
    std::vector<char> block(1 << 20, 'x');
    for (std::uint64_t done = 0; done < kFileSize; done += block.size()) {
      check(::write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size()),
            "write");
    }
    ::close(fd);
    std::atexit([] { ::unlink(filePath().c_str()); });
    return p;
  }();
  return path;
}

double processCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// The offsets one coroutine visits: a fixed linear congruential walk over the file's
// `bytes`-aligned blocks, distinct per coroutine.
std::uint64_t nextOffset(std::uint64_t& state, std::uint64_t bytes) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return ((state >> 33) % (kFileSize / bytes)) * bytes;
}

Lazy<void> reader(const weft::File& file, std::uint64_t bytes, std::int64_t count,
                  std::uint64_t seed) {
  std::vector<std::byte> buffer(bytes);
  for (std::int64_t i = 0; i < count; ++i) {
    co_await file.readExactlyAt(buffer, nextOffset(seed, bytes));
    check(buffer[0] == std::byte{'x'}, "BM_File_ReadAt");
  }
}

Lazy<void> writer(const weft::File& file, std::uint64_t bytes, std::int64_t count,
                  std::uint64_t seed) {
  std::vector<std::byte> buffer(bytes, std::byte{'x'});
  for (std::int64_t i = 0; i < count; ++i) {
    co_await file.writeAllAt(buffer, nextOffset(seed, bytes));
  }
}

Lazy<void> run(bool write, std::uint64_t bytes, int coroutines) {
  weft::File file = co_await weft::File::open(
      filePath(), write ? weft::FileMode::kRead | weft::FileMode::kWrite : weft::FileMode::kRead);
  std::vector<Lazy<void>> work;
  const std::int64_t each = kOperations / coroutines;
  for (int i = 0; i < coroutines; ++i) {
    const auto seed = static_cast<std::uint64_t>(i) + 1;
    work.push_back(write ? writer(file, bytes, each, seed) : reader(file, bytes, each, seed));
  }
  auto results = co_await weft::collectAll(std::move(work));
  for (auto& r : results) r.value();
}

void fileOperations(benchmark::State& state, bool write) {
  const auto backend = state.range(0) == 0 ? weft::IoBackendChoice::kIoUring : weft::IoBackendChoice::kEpoll;
  if (backend == weft::IoBackendChoice::kIoUring && !weft::IoLoop::available(weft::IoBackend::kIoUring)) {
    state.SkipWithError("io_uring is not available");
    return;
  }
  const auto bytes = static_cast<std::uint64_t>(state.range(1));
  const int coroutines = static_cast<int>(state.range(2));
  (void)filePath();
  weft::ThreadPool pool(weft::ThreadPoolOptions{1, "bench", backend});
  std::int64_t total = 0;
  const double cpuBefore = processCpuSeconds();
  for (auto _ : state) {
    weft::syncAwait(run(write, bytes, coroutines).via(&pool));
    total += kOperations / coroutines * coroutines;
  }
  const double cpu = processCpuSeconds() - cpuBefore;
  state.SetItemsProcessed(total);
  state.counters["us/op"] = benchmark::Counter(
      static_cast<double>(total), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["cpu-us/op"] = cpu * 1e6 / static_cast<double>(total);
}

void BM_File_ReadAt(benchmark::State& state) { fileOperations(state, false); }
void BM_File_WriteAt(benchmark::State& state) { fileOperations(state, true); }

void fileArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"epoll", "bytes", "coroutines"});
  for (const std::int64_t bytes : {4096, 65536}) {
    for (const std::int64_t coroutines : {1, 64}) {
      b->Args({0, bytes, coroutines});
      b->Args({1, bytes, coroutines});
    }
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond)->Apply(fixIterations);
}
BENCHMARK(BM_File_ReadAt)->Apply(fileArgs);
BENCHMARK(BM_File_WriteAt)->Apply(fileArgs);

void BM_Baseline_Pread(benchmark::State& state) {
  const int fd = ::open(filePath().c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "open");
  std::vector<char> buffer(4096);
  std::uint64_t seed = 1;
  std::int64_t total = 0;
  for (auto _ : state) {
    for (std::int64_t i = 0; i < kOperations; ++i) {
      const auto offset = static_cast<off_t>(nextOffset(seed, buffer.size()));
      check(::pread(fd, buffer.data(), buffer.size(), offset) == 4096, "pread");
    }
    total += kOperations;
  }
  ::close(fd);
  state.SetItemsProcessed(total);
  state.counters["us/op"] = benchmark::Counter(
      static_cast<double>(total), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Baseline_Pread)->UseRealTime()->Unit(benchmark::kMillisecond)->Apply(fixIterations);

}  // namespace

BENCHMARK_MAIN();
