// test/consumer's weft::testing check: a program linked with weft::testing builds with
// the consumer's strict flags and runs a 30-second timeout in virtual time (no waiting).
#include <chrono>
#include <cstdio>

#include <weft/coro/lazy.h>
#include <weft/coro/sleep.h>
#include <weft/coro/with_timeout.h>
#include <weft/testing/for_each_seed.h>
#include <weft/testing/simulation.h>

using namespace std::chrono_literals;

weft::Lazy<int> slow() {
  co_await weft::sleep(1h);
  co_return 1;
}

int main() {
  int checked = 0;
  weft::testing::forEachSeed(3, [&](weft::testing::Simulation& sim) {
    try {
      sim.run(weft::withTimeout(slow(), 30s));
    } catch (const weft::TimeoutError&) {
      if (sim.elapsed() == 30s) ++checked;
    }
  });
  if (checked != 3) {
    std::fprintf(stderr, "testing consumer: %d of 3 seeds timed out at 30 s\n", checked);
    return 1;
  }
  std::printf("testing consumer: ok\n");
  return 0;
}
