#pragma once

// WEFT_BENCH_ITERATIONS for benchmarks registered with BENCHMARK(): `->Apply(
// weft::bench::fixIterations)` makes WEFT_BENCH_ITERATIONS=n fix the benchmark's
// iteration count (no calibration runs), so that `valgrind --tool=callgrind` gives
// repeatable instruction counts: a run of 2n minus a run of n, over n, is one iteration
// (as for coro/lazy_benchmark). A benchmark that runs in batches (KeepRunningBatch)
// rounds n up to its batch. Benchmark support only, not part of weft.

#include <benchmark/benchmark.h>

#include <cstdlib>

namespace weft::bench {

inline void fixIterations(benchmark::internal::Benchmark* b) {
  const char* fixed = std::getenv("WEFT_BENCH_ITERATIONS");
  if (fixed != nullptr && std::atol(fixed) > 0) b->Iterations(std::atol(fixed));
}

}  // namespace weft::bench
