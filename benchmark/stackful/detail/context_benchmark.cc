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
//  - BM_Fiber_SwitchFast (x86-64 only): a study of the opt-in fast path the issue
//    mentions, NOT part of the library: the switch is inline asm that saves only the
//    resume address and rbp, and declares every other register clobbered, so the
//    compiler saves just the registers that are live at the call site (here: almost
//    none). It gives up what the library core guarantees: no MXCSR/x87 saving, no CFI
//    for the instructions of the switch (a profiler's unwinder may misread them), no
//    ontop, and it skips the 128-byte red zone before pushing. See the comment at
//    fastJump for what a library version would need.
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

#include "weft/stackful/detail/context.h"

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

// --- fast path study (x86-64) ---------------------------------------------------------

#if defined(__x86_64__)
// A fast context's record, at its handle: [0] resume address, [8] rbp, and for a new
// context [16] the entry function. 16-byte aligned like the core's.
extern "C" void weft_bench_fast_trampoline();
asm(R"(
    .text
    .type   weft_bench_fast_trampoline, @function
    .p2align 4
weft_bench_fast_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    endbr64
    movq    (%rsp), %rcx        # the entry function (rsp = handle + 16, 16-byte aligned)
    movq    %rax, %rdi          # ContextTransfer{from, data} from the switch: rax, rdx
    movq    %rdx, %rsi
    callq   *%rcx
    ud2                         # an entry must not return
    .cfi_endproc
    .size   weft_bench_fast_trampoline, .-weft_bench_fast_trampoline
)");

using FastEntry = void (*)(weft::detail::ContextTransfer);

void* fastMakeContext(void* stackTop, FastEntry entry) {
  auto top = reinterpret_cast<std::uintptr_t>(stackTop) & ~std::uintptr_t{15};
  auto* record = reinterpret_cast<void**>(top - 64);
  record[0] = reinterpret_cast<void*>(&weft_bench_fast_trampoline);
  record[1] = nullptr;  // rbp
  record[2] = reinterpret_cast<void*>(entry);
  record[3] = nullptr;
  return record;
}

// The switch as inline asm. The compiler treats it as a statement that clobbers every
// register but rbp and rsp (which the asm itself saves in the record), so it keeps live
// values in memory around it -- only those that are live. What a library version would
// still need: the clobber list for AVX-512's xmm16-31 / k0-7 when compiled for them, the
// MXCSR/x87 control word (or a documented opt-out, as here), CFI for the asm region
// (.cfi_remember_state / .cfi_adjust_cfa_offset inside the asm), and contexts that only
// ever switch to other fast contexts (the record differs from the core's).
inline weft::detail::ContextTransfer fastJump(void* to, void* data) {
  void* from;
  void* passed;
  asm volatile(
      "leaq    -128(%%rsp), %%rsp\n\t"  // skip the red zone the compiler may be using
      "pushq   %%rbp\n\t"               // rbp: the frame pointer, not clobberable
      "leaq    1f(%%rip), %%rcx\n\t"
      "pushq   %%rcx\n\t"               // resume address; rsp = our handle
      "movq    %%rsp, %%rax\n\t"        // rax = our handle (the other side's `from`)
      "movq    %%rdi, %%rsp\n\t"        // the switch
      "popq    %%rcx\n\t"               // the target's resume address
      "popq    %%rbp\n\t"               // its rbp
      "movq    %%rsi, %%rdx\n\t"        // data
      "jmpq    *%%rcx\n"                 // resume it (rax = from, rdx = data)
      "1:\n\t"
      "leaq    128(%%rsp), %%rsp\n\t"   // back above our red zone
      : "=a"(from), "=d"(passed), "+D"(to), "+S"(data)
      :
      : "rbx", "rcx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "xmm0", "xmm1",
        "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
        "xmm12", "xmm13", "xmm14", "xmm15", "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)",
        "st(6)", "st(7)", "memory", "cc");
  return weft::detail::ContextTransfer{from, passed};
}

void fastPingPongEntry(weft::detail::ContextTransfer t) {
  auto* pingPong = static_cast<PingPong*>(t.data);
  for (;;) {
    if (!pingPong->warmingUp) {
      if (!pingPong->state->KeepRunning()) {
        pingPong->done = true;
      } else {
        ++pingPong->contextSwitches;
      }
    }
    t = fastJump(t.context, pingPong);
  }
}

void BM_Fiber_SwitchFast(benchmark::State& state) {
  BenchStack stack;
  PingPong pingPong{&state};
  void* context = fastMakeContext(stack.top(), &fastPingPongEntry);
  for (int i = 0; i < kWarmUpRoundTrips; ++i) {
    context = fastJump(context, &pingPong).context;
  }
  pingPong.warmingUp = false;
  std::int64_t mainSwitches = 0;
  while (state.KeepRunning()) {
    ++mainSwitches;
    context = fastJump(context, &pingPong).context;
    if (pingPong.done) break;
  }
  if (mainSwitches + pingPong.contextSwitches != static_cast<std::int64_t>(state.iterations())) {
    fail("BM_Fiber_SwitchFast: switches and iterations disagree");
  }
  state.SetLabel("study, not the library: one iteration = one switch, no FP control saving");
}
BENCHMARK(BM_Fiber_SwitchFast);
#endif  // __x86_64__

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
