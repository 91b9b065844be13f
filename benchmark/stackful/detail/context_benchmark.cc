// The switch core (stackful/detail/context.h) against Boost.Context, in one binary:
//
//  - BM_Fiber_Switch: one-way switch time of weft's switch core (whichever backend this
//    build uses: the asm core by default). Two contexts ping-pong with jumpContext, and
//    each side takes one benchmark iteration before each switch, so one iteration is
//    exactly one switch (= round trip / 2). MXCSR/x87 (FPCR) saving as built (on by
//    default: WEFT_FIBER_SAVE_FPU_CONTROL).
//  - BM_BoostContext_Switch: the same ping-pong with Boost.Context's jump_fcontext
//    (which always saves MXCSR and the x87 control word). Target: BM_Fiber_Switch <=
//    1.0 x BM_BoostContext_Switch.
//  - BM_Baseline_FunctionCall: one call of a non-inlined function per iteration, the
//    floor any switch is measured against.
//
// Both switch benchmarks warm up first (the stacks' pages touched, the branch predictors
// trained) and check that every switch happened; a lost switch aborts the run.

#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <boost/context/detail/fcontext.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "stackful/detail/context.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "context_benchmark: %s\n", what);
  std::abort();
}

constexpr int kWarmUpRoundTrips = 100'000;

// An mmap'd stack for the benchmarks (no guard page needed: the bodies are tiny).
class BenchStack {
 public:
  static constexpr std::size_t kSize = 64 * 1024;
  BenchStack() {
    memory_ = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (memory_ == MAP_FAILED) fail("mmap failed");
  }
  ~BenchStack() { ::munmap(memory_, kSize); }
  BenchStack(const BenchStack&) = delete;
  BenchStack& operator=(const BenchStack&) = delete;
  void* top() const { return static_cast<std::byte*>(memory_) + kSize; }

 private:
  void* memory_;
};

// What the two sides of a ping-pong share. While `warmingUp`, the context switches back
// without taking iterations; after that every switch, on either side, is preceded by one
// KeepRunning() (one iteration). When the context's KeepRunning() says stop, it sets
// `done` and switches back one last time.
struct PingPong {
  benchmark::State* state;
  bool warmingUp = true;
  bool done = false;
  std::int64_t contextSwitches = 0;
};

// --- weft ---------------------------------------------------------------------------

void weftPingPongEntry(weft::detail::ContextTransfer t) {
  auto* pingPong = static_cast<PingPong*>(t.data);
  for (;;) {
    if (!pingPong->warmingUp) {
      if (!pingPong->state->KeepRunning()) {
        pingPong->done = true;
      } else {
        ++pingPong->contextSwitches;
      }
    }
    t = weft::detail::jumpContext(t.context, pingPong);
  }
}

void BM_Fiber_Switch(benchmark::State& state) {
  BenchStack stack;
  PingPong pingPong{&state};
  void* context =
      weft::detail::makeContext(stack.top(), BenchStack::kSize, &weftPingPongEntry);
  for (int i = 0; i < kWarmUpRoundTrips; ++i) {
    context = weft::detail::jumpContext(context, &pingPong).context;
  }
  pingPong.warmingUp = false;
  std::int64_t mainSwitches = 0;
  while (state.KeepRunning()) {
    ++mainSwitches;
    context = weft::detail::jumpContext(context, &pingPong).context;
    if (pingPong.done) break;
  }
  // Every iteration was one switch: main's switches into the context, the context's
  // back (the context's last switch, after its KeepRunning() said stop, is not one).
  if (mainSwitches + pingPong.contextSwitches != static_cast<std::int64_t>(state.iterations())) {
    fail("BM_Fiber_Switch: switches and iterations disagree");
  }
  // The context stays suspended; its stack goes away with nothing on it to destroy.
  state.SetLabel("one iteration = one switch (round trip / 2)");
}
BENCHMARK(BM_Fiber_Switch);

// --- Boost.Context --------------------------------------------------------------------

namespace bctx = boost::context::detail;

void boostPingPongEntry(bctx::transfer_t t) {
  auto* pingPong = static_cast<PingPong*>(t.data);
  for (;;) {
    if (!pingPong->warmingUp) {
      if (!pingPong->state->KeepRunning()) {
        pingPong->done = true;
      } else {
        ++pingPong->contextSwitches;
      }
    }
    t = bctx::jump_fcontext(t.fctx, pingPong);
  }
}

void BM_BoostContext_Switch(benchmark::State& state) {
  BenchStack stack;
  PingPong pingPong{&state};
  bctx::fcontext_t context =
      bctx::make_fcontext(stack.top(), BenchStack::kSize, &boostPingPongEntry);
  for (int i = 0; i < kWarmUpRoundTrips; ++i) {
    context = bctx::jump_fcontext(context, &pingPong).fctx;
  }
  pingPong.warmingUp = false;
  std::int64_t mainSwitches = 0;
  while (state.KeepRunning()) {
    ++mainSwitches;
    context = bctx::jump_fcontext(context, &pingPong).fctx;
    if (pingPong.done) break;
  }
  if (mainSwitches + pingPong.contextSwitches != static_cast<std::int64_t>(state.iterations())) {
    fail("BM_BoostContext_Switch: switches and iterations disagree");
  }
  state.SetLabel("one iteration = one switch (round trip / 2)");
}
BENCHMARK(BM_BoostContext_Switch);

// --- baseline -------------------------------------------------------------------------

[[gnu::noinline]] void* plainFunction(void* data) {
  asm volatile("" : : "r"(data) : "memory");  // not optimised away
  return data;
}

void BM_Baseline_FunctionCall(benchmark::State& state) {
  int token = 0;
  void* data = &token;
  while (state.KeepRunning()) {  // the same loop construct as the switch benchmarks
    data = plainFunction(data);
  }
  if (data != &token) fail("BM_Baseline_FunctionCall: wrong result");
}
BENCHMARK(BM_Baseline_FunctionCall);

}  // namespace

BENCHMARK_MAIN();
