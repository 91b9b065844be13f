// Tests of the switch core (stackful/detail/context.h), for whichever backend the build
// chose (WEFT_FIBER_BACKEND_ASM or _BOOST; CI runs this file with both, and on aarch64
// under qemu). These drive raw contexts, below Fiber: no sanitizer annotations, so the
// ASan build sees unannotated switches (which it tolerates here) and the TSan build
// skips the file (TSan needs __tsan_switch_to_fiber at every switch; Fiber's tests cover
// the core under TSan).

#include "weft/stackful/detail/context.h"

#include <execinfo.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/stackful/detail/context_layout.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define WEFT_TEST_VALGRIND 1
#else
#define WEFT_TEST_VALGRIND 0
#endif

#if defined(__SANITIZE_THREAD__)
#define WEFT_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TEST_TSAN 1
#endif
#endif
#ifndef WEFT_TEST_TSAN
#define WEFT_TEST_TSAN 0
#endif

// Does the build save the FP control registers per context? Boost.Context always does;
// weft's assembly unless built with WEFT_FIBER_SAVE_FPU_CONTROL=0.
#if WEFT_FIBER_BACKEND_BOOST || WEFT_FIBER_SAVE_FPU_CONTROL
#define WEFT_TEST_SAVES_FPU_CONTROL 1
#else
#define WEFT_TEST_SAVES_FPU_CONTROL 0
#endif

// --- register probes ------------------------------------------------------------------
// weft_test_probe_switch(to, data, patterns, seen, rawJump): loads `patterns` into every
// callee-saved register, calls the backend's raw switch function (the .S entry point
// itself, so no compiler-generated save/restore can mask a bug), and stores what those
// registers hold when the switch returns into `seen`; *to receives the returned context.
// The probe saves and restores the caller's values of those registers itself (ABI).
using RawJump = weft::detail::ContextTransfer (*)(void*, void*);
extern "C" void weft_test_probe_switch(void** to, void* data, const std::uint64_t* patterns,
                                       std::uint64_t* seen, RawJump rawJump);

#if defined(__x86_64__)
// rbx rbp r12 r13 r14 r15
inline constexpr int kProbeRegisters = 6;
asm(R"(
    .text
    .globl  weft_test_probe_switch
    .type   weft_test_probe_switch, @function
    .p2align 4
weft_test_probe_switch:
    .cfi_startproc
    endbr64
    pushq   %rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbx, 0
    pushq   %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbp, 0
    pushq   %r12
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset r12, 0
    pushq   %r13
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset r13, 0
    pushq   %r14
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset r14, 0
    pushq   %r15
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset r15, 0
    pushq   %rdi                 # to
    .cfi_adjust_cfa_offset 8
    pushq   %rcx                 # seen
    .cfi_adjust_cfa_offset 8
    pushq   %r8                  # rawJump; rsp is now 16-byte aligned for the call
    .cfi_adjust_cfa_offset 8
    movq    0(%rdx), %rbx
    movq    8(%rdx), %rbp
    movq    16(%rdx), %r12
    movq    24(%rdx), %r13
    movq    32(%rdx), %r14
    movq    40(%rdx), %r15
    movq    (%rdi), %rdi         # *to; rsi = data
    callq   *(%rsp)
    movq    8(%rsp), %rcx        # seen
    movq    %rbx, 0(%rcx)
    movq    %rbp, 8(%rcx)
    movq    %r12, 16(%rcx)
    movq    %r13, 24(%rcx)
    movq    %r14, 32(%rcx)
    movq    %r15, 40(%rcx)
    movq    16(%rsp), %rdi       # to
    movq    %rax, (%rdi)         # *to = the context that switched back
    addq    $24, %rsp
    .cfi_adjust_cfa_offset -24
    popq    %r15
    .cfi_adjust_cfa_offset -8
    popq    %r14
    .cfi_adjust_cfa_offset -8
    popq    %r13
    .cfi_adjust_cfa_offset -8
    popq    %r12
    .cfi_adjust_cfa_offset -8
    popq    %rbp
    .cfi_adjust_cfa_offset -8
    popq    %rbx
    .cfi_adjust_cfa_offset -8
    ret
    .cfi_endproc
    .size   weft_test_probe_switch, .-weft_test_probe_switch
)");
#elif defined(__aarch64__)
// x19..x28, x29, d8..d15
inline constexpr int kProbeRegisters = 19;
asm(R"(
    .text
    .globl  weft_test_probe_switch
    .type   weft_test_probe_switch, %function
    .p2align 4
weft_test_probe_switch:
    .cfi_startproc
    stp     x29, x30, [sp, #-176]!
    .cfi_def_cfa_offset 176
    .cfi_offset x29, -176
    .cfi_offset x30, -168
    stp     x19, x20, [sp, #16]
    stp     x21, x22, [sp, #32]
    stp     x23, x24, [sp, #48]
    stp     x25, x26, [sp, #64]
    stp     x27, x28, [sp, #80]
    stp     d8, d9, [sp, #96]
    stp     d10, d11, [sp, #112]
    stp     d12, d13, [sp, #128]
    stp     d14, d15, [sp, #144]
    stp     x0, x3, [sp, #160]   // to, seen
    ldp     x19, x20, [x2, #0]
    ldp     x21, x22, [x2, #16]
    ldp     x23, x24, [x2, #32]
    ldp     x25, x26, [x2, #48]
    ldp     x27, x28, [x2, #64]
    ldr     x29, [x2, #80]
    ldp     d8, d9, [x2, #88]
    ldp     d10, d11, [x2, #104]
    ldp     d12, d13, [x2, #120]
    ldp     d14, d15, [x2, #136]
    ldr     x0, [x0]             // *to; x1 = data
    blr     x4
    ldp     x9, x10, [sp, #160]  // to, seen
    stp     x19, x20, [x10, #0]
    stp     x21, x22, [x10, #16]
    stp     x23, x24, [x10, #32]
    stp     x25, x26, [x10, #48]
    stp     x27, x28, [x10, #64]
    str     x29, [x10, #80]
    stp     d8, d9, [x10, #88]
    stp     d10, d11, [x10, #104]
    stp     d12, d13, [x10, #120]
    stp     d14, d15, [x10, #136]
    str     x0, [x9]             // *to = the context that switched back
    ldp     x19, x20, [sp, #16]
    ldp     x21, x22, [sp, #32]
    ldp     x23, x24, [sp, #48]
    ldp     x25, x26, [sp, #64]
    ldp     x27, x28, [sp, #80]
    ldp     d8, d9, [sp, #96]
    ldp     d10, d11, [sp, #112]
    ldp     d12, d13, [sp, #128]
    ldp     d14, d15, [sp, #144]
    ldp     x29, x30, [sp], #176
    .cfi_def_cfa_offset 0
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size   weft_test_probe_switch, .-weft_test_probe_switch
)");
#else
#error "context_test.cc: no register probe for this architecture"
#endif

// weft_test_sp_probe_entry: a ContextEntry that records its stack pointer at its first
// instruction in weft_test_entry_sp, then tail-calls spProbeContinue(transfer).
// weft_test_sp_probe_ontop: the same for an ontop fn (tail-calls spProbeOntopContinue).
extern "C" std::uintptr_t weft_test_entry_sp;
extern "C" void weft_test_sp_probe_entry(weft::detail::ContextTransfer);
extern "C" weft::detail::ContextTransfer weft_test_sp_probe_ontop(weft::detail::ContextTransfer);
extern "C" void weft_test_sp_probe_continue(weft::detail::ContextTransfer);
extern "C" weft::detail::ContextTransfer weft_test_sp_probe_ontop_continue(
    weft::detail::ContextTransfer);
std::uintptr_t weft_test_entry_sp = 0;
#if defined(__x86_64__)
asm(R"(
    .text
    .globl  weft_test_sp_probe_entry
    .type   weft_test_sp_probe_entry, @function
    .p2align 4
weft_test_sp_probe_entry:
    endbr64
    movq    %rsp, weft_test_entry_sp(%rip)
    jmp     weft_test_sp_probe_continue
    .size   weft_test_sp_probe_entry, .-weft_test_sp_probe_entry
    .globl  weft_test_sp_probe_ontop
    .type   weft_test_sp_probe_ontop, @function
    .p2align 4
weft_test_sp_probe_ontop:
    endbr64
    movq    %rsp, weft_test_entry_sp(%rip)
    jmp     weft_test_sp_probe_ontop_continue
    .size   weft_test_sp_probe_ontop, .-weft_test_sp_probe_ontop
)");
// At a function's first instruction rsp + 8 is 16-byte aligned (the call pushed 8).
inline constexpr std::uintptr_t kSpAtEntryMod16 = 8;
#else
asm(R"(
    .text
    .globl  weft_test_sp_probe_entry
    .type   weft_test_sp_probe_entry, %function
    .p2align 4
weft_test_sp_probe_entry:
    hint    #34
    mov     x9, sp
    adrp    x10, weft_test_entry_sp
    str     x9, [x10, :lo12:weft_test_entry_sp]
    b       weft_test_sp_probe_continue
    .size   weft_test_sp_probe_entry, .-weft_test_sp_probe_entry
    .globl  weft_test_sp_probe_ontop
    .type   weft_test_sp_probe_ontop, %function
    .p2align 4
weft_test_sp_probe_ontop:
    hint    #34
    mov     x9, sp
    adrp    x10, weft_test_entry_sp
    str     x9, [x10, :lo12:weft_test_entry_sp]
    b       weft_test_sp_probe_ontop_continue
    .size   weft_test_sp_probe_ontop, .-weft_test_sp_probe_ontop
)");
inline constexpr std::uintptr_t kSpAtEntryMod16 = 0;
#endif

namespace weft::detail {
namespace {

// The backend's own switch routine, for the register probe: the .S function itself.
RawJump rawJump() {
#if WEFT_FIBER_BACKEND_ASM
  return &weft_jump_context;
#else
  // Same register convention (two-pointer structs in, two-pointer struct out).
  return reinterpret_cast<RawJump>(
      reinterpret_cast<void (*)()>(&boost::context::detail::jump_fcontext));
#endif
}

// An mmap'd stack with a PROT_NONE guard page below it: an overflow in a test faults
// instead of corrupting the heap. Registered with valgrind, which otherwise takes a
// switch for a huge stack-pointer change within one stack.
class TestStack {
 public:
  explicit TestStack(std::size_t size = 256 * 1024) {
    page_ = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    size_ = (size + page_ - 1) / page_ * page_;
    void* p = ::mmap(nullptr, size_ + page_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      throw std::runtime_error("TestStack: mmap failed");
    }
    base_ = static_cast<std::byte*>(p);
    ::mprotect(base_, page_, PROT_NONE);
#if WEFT_TEST_VALGRIND
    valgrindId_ = VALGRIND_STACK_REGISTER(base_ + page_, base_ + page_ + size_);
#endif
  }
  ~TestStack() {
#if WEFT_TEST_VALGRIND
    VALGRIND_STACK_DEREGISTER(valgrindId_);
#endif
    ::munmap(base_, size_ + page_);
  }
  TestStack(const TestStack&) = delete;
  TestStack& operator=(const TestStack&) = delete;

  void* top() const { return base_ + page_ + size_; }
  std::size_t size() const { return size_; }
  bool contains(std::uintptr_t address) const {
    auto bottom = reinterpret_cast<std::uintptr_t>(base_ + page_);
    return address >= bottom && address < bottom + size_;
  }

 private:
  std::size_t size_;
  std::size_t page_;
  std::byte* base_;
#if WEFT_TEST_VALGRIND
  unsigned valgrindId_ = 0;
#endif
};

#define WEFT_SKIP_UNDER_TSAN()                                                                   \
  do {                                                                                          \
    if (WEFT_TEST_TSAN) {                                                                       \
      GTEST_SKIP() << "raw, unannotated switches confuse TSan's shadow stack; the core is "     \
                      "exercised under TSan through Fiber (annotated) in the fiber tests";      \
    }                                                                                           \
  } while (false)

// Whether valgrind runs the test (it emulates the FP control state and the delivery of
// signals only in part; see their tests).
bool underValgrind() {
#if WEFT_TEST_VALGRIND
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}

// A context that never comes back: the test abandons it, and its TestStack is unmapped.
[[noreturn]] void leaveForGood(void* to, void* data) {
  jumpContext(to, data);
  ADD_FAILURE() << "a finished context was resumed";
  contextEntryReturned();
}

// --- basic transfer -------------------------------------------------------------------

// Receives ints via data, answers with value + 1, until it gets -1.
void addOneEntry(ContextTransfer t) {
  for (;;) {
    int* value = static_cast<int*>(t.data);
    if (*value == -1) {
      break;
    }
    ++*value;
    t = jumpContext(t.context, value);
  }
  leaveForGood(t.context, nullptr);
}

TEST(ContextTest, FirstJumpRunsEntryWithTheTransfer) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  void* ctx = makeContext(stack.top(), stack.size(), &addOneEntry);
  ASSERT_NE(ctx, nullptr);
  EXPECT_TRUE(stack.contains(reinterpret_cast<std::uintptr_t>(ctx)));
  int value = 41;
  ContextTransfer t = jumpContext(ctx, &value);
  EXPECT_EQ(t.data, &value);
  EXPECT_EQ(value, 42);
  EXPECT_TRUE(stack.contains(reinterpret_cast<std::uintptr_t>(t.context)));
  int stop = -1;
  t = jumpContext(t.context, &stop);
  EXPECT_EQ(t.data, nullptr);
}

TEST(ContextTest, PingPongKeepsPassingData) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  void* ctx = makeContext(stack.top(), stack.size(), &addOneEntry);
  int value = 0;
  for (int i = 0; i < 1000; ++i) {
    ContextTransfer t = jumpContext(ctx, &value);
    ASSERT_EQ(t.data, &value);
    ctx = t.context;
  }
  EXPECT_EQ(value, 1000);
  int stop = -1;
  jumpContext(ctx, &stop);
}

TEST(ContextTest, MakeContextAcceptsAnUnalignedTopAndTheMinimumSize) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  // An odd top and the smallest size the API allows; the context must still run.
  auto* top = static_cast<std::byte*>(stack.top()) - 7;
  void* ctx = makeContext(top, kMinContextStackSize, &addOneEntry);
  EXPECT_LT(reinterpret_cast<std::uintptr_t>(ctx), reinterpret_cast<std::uintptr_t>(top));
  int value = 1;
  ContextTransfer t = jumpContext(ctx, &value);
  EXPECT_EQ(value, 2);
  int stop = -1;
  jumpContext(t.context, &stop);
}

// Two child contexts that jump to each other directly (symmetric), not via main.
struct Ring {
  void* main = nullptr;
  void* peer = nullptr;
  int hops = 0;
};

void ringEntry(ContextTransfer t) {
  auto* ring = static_cast<Ring*>(t.data);
  if (ring->main == nullptr) {
    // First child: started by main; remember it, hand control back so main can start
    // the second child.
    ring->main = t.context;
    t = jumpContext(ring->main, ring);
    ring->peer = t.context;  // the second child jumped to us
  } else {
    // Second child: started by main; jump into the first child.
    ring->main = t.context;
  }
  for (;;) {
    ++ring->hops;
    if (ring->hops >= 100) {
      leaveForGood(ring->main, ring);
    }
    t = jumpContext(ring->peer, ring);
    ring->peer = t.context;  // the context that just jumped to us
  }
}

TEST(ContextTest, ContextsCanJumpToEachOtherDirectly) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stackA;
  TestStack stackB;
  Ring ring;
  void* a = makeContext(stackA.top(), stackA.size(), &ringEntry);
  void* b = makeContext(stackB.top(), stackB.size(), &ringEntry);
  ContextTransfer t = jumpContext(a, &ring);  // a records main and comes back
  ring.peer = t.context;                      // b will jump to a
  t = jumpContext(b, &ring);                  // b <-> a until 100 hops
  EXPECT_EQ(ring.hops, 100);
  EXPECT_EQ(t.data, &ring);
}

// A context suspended on one thread is resumed on another (what fibers do when an
// executor moves them), and comes back to the first.
// Not inlined: glibc declares pthread_self() __attribute__((const)), so inside one
// function the compiler may read it once and reuse the value across a switch, which is
// wrong after a migration (the same holds for thread_local addresses and errno).
[[gnu::noinline]] std::thread::id currentThreadId() {
  asm volatile("" ::: "memory");  // and not inferred pure either
  return std::this_thread::get_id();
}

void threadIdEntry(ContextTransfer t) {
  for (;;) {
    *static_cast<std::thread::id*>(t.data) = currentThreadId();
    t = jumpContext(t.context, t.data);
  }
}

TEST(ContextTest, AContextCanBeResumedOnAnotherThread) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  std::thread::id seen;
  void* ctx = makeContext(stack.top(), stack.size(), &threadIdEntry);
  ctx = jumpContext(ctx, &seen).context;
  EXPECT_EQ(seen, std::this_thread::get_id());
  std::thread::id other;
  std::thread thread([&] {
    other = std::this_thread::get_id();
    ctx = jumpContext(ctx, &seen).context;
  });
  thread.join();
  EXPECT_EQ(seen, other);
  ctx = jumpContext(ctx, &seen).context;
  EXPECT_EQ(seen, std::this_thread::get_id());
}

// --- the ABI: registers, alignment, FP control ---------------------------------------

// Fills `patterns` with values unique to `owner` and register index.
void fillPatterns(std::uint64_t* patterns, std::uint64_t owner) {
  for (int i = 0; i < kProbeRegisters; ++i) {
    patterns[i] = 0x5745465400000000ull ^ (owner << 24) ^ (0x1111ull * (i + 1));
  }
}

struct ProbeShared {
  std::uint64_t contextSeen[kProbeRegisters][2] = {};
  int rounds = 0;
};

void registerProbeEntry(ContextTransfer t) {
  auto* shared = static_cast<ProbeShared*>(t.data);
  void* main = t.context;
  for (int round = 0; round < 2; ++round) {
    std::uint64_t patterns[kProbeRegisters];
    std::uint64_t seen[kProbeRegisters];
    fillPatterns(patterns, 0xC0 + round);
    // Switch back to main with the context's patterns in every callee-saved register;
    // when main switches back, they must still be there.
    weft_test_probe_switch(&main, shared, patterns, seen, rawJump());
    for (int i = 0; i < kProbeRegisters; ++i) {
      shared->contextSeen[i][0] = patterns[i];
      shared->contextSeen[i][1] = seen[i];
    }
    ++shared->rounds;
  }
  leaveForGood(main, shared);
}

TEST(ContextTest, CalleeSavedRegistersSurviveSwitchesBothWays) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  ProbeShared shared;
  void* ctx = makeContext(stack.top(), stack.size(), &registerProbeEntry);
  for (int round = 0; round < 2; ++round) {
    std::uint64_t patterns[kProbeRegisters];
    std::uint64_t seen[kProbeRegisters];
    fillPatterns(patterns, 0x3A + round);
    // main -> context: the context loads its own patterns and switches back; main's must
    // survive that.
    weft_test_probe_switch(&ctx, &shared, patterns, seen, rawJump());
    for (int i = 0; i < kProbeRegisters; ++i) {
      EXPECT_EQ(seen[i], patterns[i]) << "main's callee-saved register #" << i << ", round "
                                      << round;
    }
    if (round == 1) {
      // The context's check of round 0 happened when we resumed it this round.
      ASSERT_GE(shared.rounds, 1);
      for (int i = 0; i < kProbeRegisters; ++i) {
        EXPECT_EQ(shared.contextSeen[i][1], shared.contextSeen[i][0])
            << "the context's callee-saved register #" << i;
      }
    }
  }
  jumpContext(ctx, &shared);  // let the context check round 1 and leave
  EXPECT_EQ(shared.rounds, 2);
  for (int i = 0; i < kProbeRegisters; ++i) {
    EXPECT_EQ(shared.contextSeen[i][1], shared.contextSeen[i][0])
        << "the context's callee-saved register #" << i;
  }
}

// Set by weft_test_sp_probe_ontop_continue (below, at global scope: extern "C").
std::uintptr_t gOntopSp = 0;

TEST(ContextTest, EntryAndOntopFnStartWithAnAbiAlignedStack) {
  WEFT_SKIP_UNDER_TSAN();
  // Every top alignment: the core must align, whatever it is given.
  for (std::uintptr_t offset = 0; offset < 16; ++offset) {
    TestStack stack;
    void* top = static_cast<std::byte*>(stack.top()) - offset;
    std::uintptr_t entrySp = 0;
    void* ctx = makeContext(top, stack.size() - offset, &weft_test_sp_probe_entry);
    ContextTransfer t = jumpContext(ctx, &entrySp);
    EXPECT_EQ(entrySp % 16, kSpAtEntryMod16) << "top offset " << offset;
    EXPECT_TRUE(stack.contains(entrySp));
    gOntopSp = 0;
    t = ontopContext(t.context, nullptr, &weft_test_sp_probe_ontop);
    EXPECT_EQ(gOntopSp % 16, kSpAtEntryMod16) << "top offset " << offset;
    EXPECT_TRUE(stack.contains(gOntopSp));
  }
}

// Floating-point control state: what a context sets stays with it.
#if defined(__x86_64__)
struct FpControl {
  std::uint32_t mxcsr;
  std::uint16_t x87;
  bool operator==(const FpControl&) const = default;
};
FpControl readFpControl() {
  FpControl c{};
  c.mxcsr = _mm_getcsr();
  asm volatile("fnstcw %0" : "=m"(c.x87));
  return c;
}
void writeFpControl(FpControl c) {
  _mm_setcsr(c.mxcsr);
  asm volatile("fldcw %0" : : "m"(c.x87));
}
// All exceptions masked in both (0x1f80 / 0x3f): a test must not raise SIGFPE.
// Main: round down + flush-to-zero + denormals-are-zero (MXCSR); round up, 53-bit
// precision (x87). Context: round toward zero (both). valgrind emulates only the
// rounding modes (it reads back FTZ/DAZ as 0 and precision as 64-bit), so under
// valgrind the settings differ in rounding modes only.
FpControl mainSetting() {
  if (underValgrind()) {
    return {0x1f80u | 0x2000u, 0x0b7f};
  }
  return {0x1f80u | 0x2000u | 0x8040u, 0x0a7f};
}
FpControl contextSetting() { return {0x1f80u | 0x6000u, 0x0f7f}; }
std::string describe(FpControl c) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "MXCSR %#x, x87 CW %#x", c.mxcsr & 0xffc0u, c.x87);
  return buffer;
}
#elif defined(__aarch64__)
struct FpControl {
  std::uint64_t fpcr;
  bool operator==(const FpControl&) const = default;
};
FpControl readFpControl() {
  FpControl c{};
  asm volatile("mrs %0, fpcr" : "=r"(c.fpcr));
  return c;
}
void writeFpControl(FpControl c) { asm volatile("msr fpcr, %0" : : "r"(c.fpcr)); }
// RMode (bits 22-23) round toward minus infinity + FZ (bit 24); round toward zero + DN
// (bit 25). Exception trap enables stay 0.
FpControl mainSetting() { return {(2ull << 22) | (1ull << 24)}; }
FpControl contextSetting() { return {(3ull << 22) | (1ull << 25)}; }
std::string describe(FpControl c) { return "FPCR " + std::to_string(c.fpcr); }
#endif

// Compare MXCSR without its sticky status flags (bits 0-5), which arithmetic may set.
bool sameControl(FpControl a, FpControl b) {
#if defined(__x86_64__)
  return (a.mxcsr & ~0x3fu) == (b.mxcsr & ~0x3fu) && a.x87 == b.x87;
#else
  return a == b;
#endif
}

struct FpShared {
  FpControl atEntry{};
  FpControl afterResume{};
};

void fpEntry(ContextTransfer t) {
  auto* shared = static_cast<FpShared*>(t.data);
  shared->atEntry = readFpControl();
  writeFpControl(contextSetting());
  t = jumpContext(t.context, shared);
  shared->afterResume = readFpControl();
  leaveForGood(t.context, shared);
}

class ScopedFpControl {
 public:
  ScopedFpControl() : saved_(readFpControl()) {}
  ~ScopedFpControl() { writeFpControl(saved_); }

 private:
  FpControl saved_;
};

TEST(ContextTest, FloatingPointControlStateStaysWithItsContext) {
  WEFT_SKIP_UNDER_TSAN();
  ScopedFpControl restore;
  const FpControl mine = mainSetting();
  const FpControl theirs = contextSetting();
  ASSERT_FALSE(sameControl(mine, theirs));
  writeFpControl(mine);
  TestStack stack;
  FpShared shared;
  void* ctx = makeContext(stack.top(), stack.size(), &fpEntry);  // inherits `mine`
  writeFpControl(theirs);  // what the context sees at entry depends on the build: below
  ContextTransfer t = jumpContext(ctx, &shared);  // the context writes `theirs` too
  FpControl back = readFpControl();
  writeFpControl(mine);
  jumpContext(t.context, &shared);  // the context reads its state after resuming
#if WEFT_TEST_SAVES_FPU_CONTROL
  // Saved per context: the new context starts with its creator's state at makeContext,
  // and each side keeps its own across switches, both ways.
  EXPECT_TRUE(sameControl(shared.atEntry, mine)) << describe(shared.atEntry);
  EXPECT_TRUE(sameControl(back, theirs)) << describe(back);  // main's own, at its jump
  EXPECT_TRUE(sameControl(shared.afterResume, theirs)) << describe(shared.afterResume);
#else
  // WEFT_FIBER_SAVE_FPU_CONTROL=0: the state belongs to the thread; it flows across
  // switches unchanged (documented in stackful/detail/context_layout.h).
  EXPECT_TRUE(sameControl(shared.atEntry, theirs)) << describe(shared.atEntry);
  EXPECT_TRUE(sameControl(back, theirs)) << describe(back);
  EXPECT_TRUE(sameControl(shared.afterResume, mine)) << describe(shared.afterResume);
#endif
}

TEST(ContextTest, MainKeepsItsFloatingPointControlStateWhileAContextChangesIt) {
  WEFT_SKIP_UNDER_TSAN();
  ScopedFpControl restore;
  const FpControl mine = mainSetting();
  TestStack stack;
  FpShared shared;
  void* ctx = makeContext(stack.top(), stack.size(), &fpEntry);
  writeFpControl(mine);
  ContextTransfer t = jumpContext(ctx, &shared);  // the context writes contextSetting()
  FpControl back = readFpControl();
  jumpContext(t.context, &shared);
#if WEFT_TEST_SAVES_FPU_CONTROL
  EXPECT_TRUE(sameControl(back, mine)) << describe(back);
#else
  EXPECT_TRUE(sameControl(back, contextSetting())) << describe(back);
#endif
}

// Vector registers are caller-saved: the compiler keeps live vectors across the switch
// call, and the switch must not disturb what it relies on (stack, alignment).
using Vec4 = float __attribute__((vector_size(16)));

void vectorEntry(ContextTransfer t) {
  Vec4 acc = {1.0f, 2.0f, 3.0f, 4.0f};
  const Vec4 step = {0.5f, -0.25f, 2.0f, 1.0f};
  for (;;) {
    acc = acc * 1.0f + step;
    t = jumpContext(t.context, &acc);  // main reads acc while we are suspended
  }
}

TEST(ContextTest, VectorValuesLiveAcrossSwitches) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  void* ctx = makeContext(stack.top(), stack.size(), &vectorEntry);
  Vec4 mine = {10.0f, 20.0f, 30.0f, 40.0f};
  const Vec4 myStep = {-1.0f, 1.0f, 0.0f, 3.0f};
  Vec4 expectedTheirs = {1.0f, 2.0f, 3.0f, 4.0f};
  const Vec4 theirStep = {0.5f, -0.25f, 2.0f, 1.0f};
  for (int i = 0; i < 1000; ++i) {
    mine += myStep;
    ContextTransfer t = jumpContext(ctx, nullptr);
    ctx = t.context;
    expectedTheirs += theirStep;
    Vec4 theirs = *static_cast<Vec4*>(t.data);
    for (int lane = 0; lane < 4; ++lane) {
      ASSERT_EQ(theirs[lane], expectedTheirs[lane]) << "iteration " << i << " lane " << lane;
    }
  }
  const Vec4 expectedMine = {10.0f - 1000.0f, 20.0f + 1000.0f, 30.0f, 40.0f + 3000.0f};
  for (int lane = 0; lane < 4; ++lane) {
    EXPECT_EQ(mine[lane], expectedMine[lane]) << "lane " << lane;
  }
}

// --- stacks ---------------------------------------------------------------------------

[[gnu::noinline]] std::uint64_t recurse(int depth, void*& main) {
  volatile std::uint64_t frame[8];  // a real frame per level
  for (int i = 0; i < 8; ++i) {
    frame[i] = static_cast<std::uint64_t>(depth) * 8 + i;
  }
  std::uint64_t below = 0;
  if (depth == 0) {
    main = jumpContext(main, nullptr).context;  // suspend at the bottom, resume, unwind
  } else {
    below = recurse(depth - 1, main);
  }
  std::uint64_t sum = below;
  for (int i = 0; i < 8; ++i) {
    sum += frame[i];
  }
  return sum;
}

struct DeepShared {
  int depth;
  std::uint64_t sum = 0;
};

void deepEntry(ContextTransfer t) {
  auto* shared = static_cast<DeepShared*>(t.data);
  void* main = t.context;
  shared->sum = recurse(shared->depth, main);
  leaveForGood(main, shared);
}

TEST(ContextTest, DeepRecursionInsideAContextSurvivesASwitchAtTheBottom) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack(64u << 20);  // MAP_NORESERVE: only the touched pages are used
  DeepShared shared{100000};
  void* ctx = makeContext(stack.top(), stack.size(), &deepEntry);
  ctx = jumpContext(ctx, &shared).context;  // now 100,000 frames deep
  EXPECT_EQ(shared.sum, 0u);
  jumpContext(ctx, &shared);
  // sum over depth d and slot i of (8d + i) = 8 * (0 + 1 + ... + 64 * n - 1) ... computed:
  std::uint64_t expected = 0;
  for (std::uint64_t d = 0; d <= 100000; ++d) {
    for (std::uint64_t i = 0; i < 8; ++i) {
      expected += d * 8 + i;
    }
  }
  EXPECT_EQ(shared.sum, expected);
}

[[gnu::noinline]] int backtraceDepth(int depth, int* frameCount) {
  if (depth > 0) {
    int levels = backtraceDepth(depth - 1, frameCount);
    asm volatile("" ::: "memory");  // not a tail call: every level keeps its frame
    return levels + 1;
  }
  void* frames[512];
  *frameCount = ::backtrace(frames, 512);
  return 0;
}

void backtraceEntry(ContextTransfer t) {
  backtraceDepth(20, static_cast<int*>(t.data));
  leaveForGood(t.context, t.data);
}

TEST(ContextTest, BacktraceInsideAContextEndsAtItsBase) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  int frames = 0;
  void* ctx = makeContext(stack.top(), stack.size(), &backtraceEntry);
  jumpContext(ctx, &frames);
  // 21 backtraceDepth frames + backtraceEntry + the trampoline (+ backtrace itself), and
  // then the unwinder stops: nothing above the context's base frame.
  EXPECT_GE(frames, 21);
  EXPECT_LT(frames, 40);
}

// --- exceptions -----------------------------------------------------------------------

struct ExceptionShared {
  int caught = 0;
  int rethrownCaught = 0;
};

void exceptionEntry(ContextTransfer t) {
  auto* shared = static_cast<ExceptionShared*>(t.data);
  for (int i = 0; i < 100; ++i) {
    try {
      throw std::runtime_error("inside " + std::to_string(i));
    } catch (const std::runtime_error& e) {
      if (e.what() == "inside " + std::to_string(i)) {
        ++shared->caught;
      }
    }
    t = jumpContext(t.context, shared);
  }
  // Suspend INSIDE a catch block; main throws and catches its own exception meanwhile;
  // then rethrow ours.
  try {
    try {
      throw std::logic_error("kept across a switch");
    } catch (...) {
      t = jumpContext(t.context, shared);
      throw;
    }
  } catch (const std::logic_error& e) {
    if (std::string(e.what()) == "kept across a switch") {
      ++shared->rethrownCaught;
    }
  }
  leaveForGood(t.context, shared);
}

TEST(ContextTest, ExceptionsAreThrownAndCaughtInsideAContext) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  ExceptionShared shared;
  void* ctx = makeContext(stack.top(), stack.size(), &exceptionEntry);
  for (int i = 0; i < 100; ++i) {
    ctx = jumpContext(ctx, &shared).context;
    try {
      throw i;  // main's own exceptions, interleaved
    } catch (int caught) {
      ASSERT_EQ(caught, i);
    }
  }
  ctx = jumpContext(ctx, &shared).context;  // the context is now inside its catch block
  try {
    throw std::string("main's");
  } catch (const std::string& s) {
    EXPECT_EQ(s, "main's");
  }
  jumpContext(ctx, &shared);
  EXPECT_EQ(shared.caught, 100);
  EXPECT_EQ(shared.rethrownCaught, 1);
}

// --- ontop ----------------------------------------------------------------------------

ContextTransfer ontopDouble(ContextTransfer t) {
  // Runs on the target's stack; its result is what the target's jumpContext returns.
  int* value = static_cast<int*>(t.data);
  *value *= 2;
  return ContextTransfer{t.context, value};
}

TEST(ContextTest, OntopRunsFnAndItsResultReachesTheTarget) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  void* ctx = makeContext(stack.top(), stack.size(), &addOneEntry);
  int value = 1;
  ContextTransfer t = jumpContext(ctx, &value);  // value = 2; ctx suspended in jump
  ASSERT_EQ(value, 2);
  // fn doubles (4) on the target's stack, then the target adds one (5) and jumps back.
  t = ontopContext(t.context, &value, &ontopDouble);
  EXPECT_EQ(value, 5);
  EXPECT_EQ(t.data, &value);
  int stop = -1;
  jumpContext(t.context, &stop);
}

struct WhereShared {
  const TestStack* stack = nullptr;
  bool fnOnTargetStack = false;
  void* fnFrom = nullptr;
};

ContextTransfer ontopWhere(ContextTransfer t) {
  auto* shared = static_cast<WhereShared*>(t.data);
  shared->fnOnTargetStack =
      shared->stack->contains(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)));
  shared->fnFrom = t.context;
  return t;
}

void suspendTwiceEntry(ContextTransfer t) {
  t = jumpContext(t.context, t.data);
  t = jumpContext(t.context, t.data);
  leaveForGood(t.context, t.data);
}

TEST(ContextTest, OntopFnRunsOnTheTargetStackAndGetsTheCallersContext) {
  WEFT_SKIP_UNDER_TSAN();
  TestStack stack;
  WhereShared shared{&stack};
  void* ctx = makeContext(stack.top(), stack.size(), &suspendTwiceEntry);
  ContextTransfer t = jumpContext(ctx, &shared);
  t = ontopContext(t.context, &shared, &ontopWhere);
  EXPECT_TRUE(shared.fnOnTargetStack);
  // fn received main's suspended context, and passed it on as the target's transfer, so
  // the target jumped back to main with it: main is running again.
  EXPECT_NE(shared.fnFrom, nullptr);
  jumpContext(t.context, &shared);
}

struct UnwindProbe {
  int destructorsRun = 0;
  bool caughtInside = false;
  bool viaOntop = false;
};

struct CountsDestruction {
  UnwindProbe* probe;
  ~CountsDestruction() { ++probe->destructorsRun; }
};

struct ForcedUnwind {
  void* from;
};

ContextTransfer identity(ContextTransfer t) { return t; }

[[gnu::noinline]] void suspendDeep(UnwindProbe* probe, void*& main, int depth) {
  CountsDestruction guard{probe};
  if (depth == 0) {
    // Suspend either in a jump or in an ontop (which then runs `identity` on main).
    ContextTransfer t =
        probe->viaOntop ? ontopContext(main, probe, &identity) : jumpContext(main, probe);
    main = t.context;
    ADD_FAILURE() << "resumed normally instead of unwinding";
    return;
  }
  suspendDeep(probe, main, depth - 1);
}

void unwindEntry(ContextTransfer t) {
  auto* probe = static_cast<UnwindProbe*>(t.data);
  void* main = t.context;
  try {
    suspendDeep(probe, main, 10);  // 11 guards live when it suspends
  } catch (const ForcedUnwind& unwind) {
    probe->caughtInside = true;
    main = unwind.from;
  }
  leaveForGood(main, probe);
}

ContextTransfer throwForcedUnwind(ContextTransfer t) { throw ForcedUnwind{t.context}; }

TEST(ContextTest, ExceptionFromOntopFnUnwindsTheTargetStack) {
  WEFT_SKIP_UNDER_TSAN();
  for (bool viaOntop : {false, true}) {
    TestStack stack;
    UnwindProbe probe;
    probe.viaOntop = viaOntop;
    void* ctx = makeContext(stack.top(), stack.size(), &unwindEntry);
    ContextTransfer t = jumpContext(ctx, &probe);
    ASSERT_EQ(probe.destructorsRun, 0);
    t = ontopContext(t.context, &probe, &throwForcedUnwind);
    EXPECT_TRUE(probe.caughtInside) << "target suspended via ontop: " << viaOntop;
    EXPECT_EQ(probe.destructorsRun, 11) << "target suspended via ontop: " << viaOntop;
    EXPECT_EQ(t.data, &probe);
  }
}

// --- signals --------------------------------------------------------------------------

// Where a piece of code lies in memory: [begin, end).
struct CodeRange {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  bool contains(std::uintptr_t address) const { return address >= begin && address < end; }
};

// The loaded ELF object that holds `address`: the file it came from, and its load bias
// (what its symbol values are offset by in memory; 0 for a non-PIE program).
struct LoadedObject {
  std::uintptr_t address = 0;
  std::uintptr_t bias = 0;
  std::string path;
};

int findLoadedObject(dl_phdr_info* info, std::size_t, void* data) {
  auto* object = static_cast<LoadedObject*>(data);
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    std::uintptr_t start = info->dlpi_addr + segment.p_vaddr;
    if (segment.p_type == PT_LOAD && object->address >= start &&
        object->address < start + segment.p_memsz) {
      object->bias = info->dlpi_addr;
      // The program itself is listed without a name (valgrind and qemu-user show their
      // guest's file as /proc/self/exe too).
      object->path = info->dlpi_name[0] != '\0' ? info->dlpi_name : "/proc/self/exe";
      return 1;
    }
  }
  return 0;
}

// The extent of the function that starts at `function`, from the symbol tables of the
// file it was loaded from: .symtab (kept by unstripped builds; holds weft's hidden
// weft_jump_context, or a static Boost.Context's jump_fcontext) or .dynsym (where a shared
// Boost.Context exports jump_fcontext). Empty if no table has a sized function there.
CodeRange functionExtent(const void* function) {
  LoadedObject object;
  object.address = reinterpret_cast<std::uintptr_t>(function);
  if (dl_iterate_phdr(&findLoadedObject, &object) == 0) {
    return {};
  }
  int fd = ::open(object.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return {};
  }
  auto readAt = [fd](void* to, std::size_t size, std::uint64_t offset) {
    return ::pread(fd, to, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
  };
  CodeRange extent;
  ElfW(Ehdr) header{};
  std::vector<ElfW(Shdr)> sections;
  if (readAt(&header, sizeof header, 0) && std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0 &&
      header.e_shentsize == sizeof(ElfW(Shdr))) {
    sections.resize(header.e_shnum);
    if (!readAt(sections.data(), sections.size() * sizeof(ElfW(Shdr)), header.e_shoff)) {
      sections.clear();
    }
  }
  for (const ElfW(Shdr)& section : sections) {
    if ((section.sh_type != SHT_SYMTAB && section.sh_type != SHT_DYNSYM) ||
        section.sh_entsize != sizeof(ElfW(Sym))) {
      continue;
    }
    std::vector<ElfW(Sym)> symbols(section.sh_size / sizeof(ElfW(Sym)));
    if (!readAt(symbols.data(), symbols.size() * sizeof(ElfW(Sym)), section.sh_offset)) {
      continue;
    }
    for (const ElfW(Sym)& symbol : symbols) {
      if (ELF64_ST_TYPE(symbol.st_info) == STT_FUNC && symbol.st_shndx != SHN_UNDEF &&
          symbol.st_size > 0 && object.bias + symbol.st_value == object.address) {
        extent = {object.address, object.address + symbol.st_size};
      }
    }
  }
  ::close(fd);
  return extent;
}

// Where a signal interrupted the thread: the program counter and stack pointer that the
// handler returns to.
struct Interrupted {
  std::uintptr_t pc;
  std::uintptr_t sp;
};

Interrupted interruptedAt(const void* signalContext) {
  const auto* uc = static_cast<const ucontext_t*>(signalContext);
#if defined(__x86_64__)
  return {static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]),
          static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RSP])};
#else
  return {static_cast<std::uintptr_t>(uc->uc_mcontext.pc),
          static_cast<std::uintptr_t>(uc->uc_mcontext.sp)};
#endif
}

// Written by the switching thread's signal handler, read by the same thread's loop (and,
// for the counters, by the test after the loop): relaxed is enough between a thread and
// its own signal handler.
struct StormState {
  const TestStack* contextStack = nullptr;
  std::uintptr_t mainLow = 0;
  std::uintptr_t mainHigh = 0;
  CodeRange switchCode;                           // the backend's jump routine
  std::atomic<bool> signalArrived{false};         // since the loop last looked
  std::atomic<std::uint64_t> handled{0};          // signals the handler has run for
  std::atomic<std::uint64_t> inSwitchCode{0};     // ... that interrupted the jump routine
  std::atomic<std::uint64_t> onContextStack{0};   // ... other code on the context's stack
  std::atomic<std::uint64_t> badStackPointer{0};  // ... found sp outside both stacks
};
StormState* gStorm = nullptr;

// Sent by the test's one-shot timer.
constexpr int kStormSignal = SIGUSR1;

void stormHandler(int, siginfo_t*, void* signalContext) {
  StormState& state = *gStorm;
  Interrupted at = interruptedAt(signalContext);
  // Whichever instruction of a switch was interrupted, its stack pointer, and so the
  // handler's frame below it, must be on one of the two valid stacks.
  auto onValidStack = [&state](std::uintptr_t sp) {
    return state.contextStack->contains(sp) || (sp >= state.mainLow && sp < state.mainHigh);
  };
  auto frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  if (!onValidStack(at.sp) || !onValidStack(frame)) {
    state.badStackPointer.fetch_add(1, std::memory_order_relaxed);
  }
  if (state.switchCode.contains(at.pc)) {
    state.inSwitchCode.fetch_add(1, std::memory_order_relaxed);
  } else if (state.contextStack->contains(at.sp)) {
    state.onContextStack.fetch_add(1, std::memory_order_relaxed);
  }
  // Dirty the stack below the interrupted code and some registers.
  volatile std::uint64_t scratch[64];
  for (int i = 0; i < 64; ++i) {
    scratch[i] = ~static_cast<std::uint64_t>(i);
  }
  volatile double x = 1.0;
  for (int i = 0; i < 8; ++i) {
    x = x * 1.5 + scratch[i];
  }
  state.handled.fetch_add(1, std::memory_order_relaxed);
  state.signalArrived.store(true, std::memory_order_relaxed);
}

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  return x;
}

void stormEntry(ContextTransfer t) {
  std::uint64_t checksum = 0;
  for (;;) {
    auto value = reinterpret_cast<std::uintptr_t>(t.data);
    checksum = mix(checksum + value);
    t = jumpContext(t.context, reinterpret_cast<void*>(checksum));
  }
}

// Switches between the main stack and a context's while signals interrupt the switching
// thread one at a time: a one-shot timer that the loop arms again only once the handler
// has run for the previous signal and the loop has done a round trip since. So signals
// come as fast as the machine (or valgrind, or qemu) delivers them, never faster, and the
// loop always progresses. The timer's delay sets no rate (nothing is judged by time): it
// keeps the signal from landing as the arming system call returns, which is where a
// signal sent by another thread, woken by the loop, lands. The loop runs until enough
// signals have interrupted the jump routine itself and enough switches have happened; a
// cap on signals and on switches ends it if they never land there.
//
// valgrind delivers a signal only between two of its translated blocks (at the same place
// of the loop each time: its time slices are counted in blocks), never inside the jump
// routine; under valgrind the test makes its 2,000,000 switches with what signals arrive,
// for memcheck to check the handler's frames on both stacks, and asks no more.
TEST(ContextTest, SignalsThatInterruptTheSwitchCorruptNothing) {
  WEFT_SKIP_UNDER_TSAN();
  constexpr std::uint64_t kMinRoundTrips = 1'000'000;   // 2,000,000 switches at least
  constexpr std::uint64_t kMaxRoundTrips = 20'000'000;  // caps, for when signals never land
  constexpr std::uint64_t kMaxSignals = 20'000;         //   inside the jump routine
  constexpr long kDelayNanoseconds = 20'000;
  const std::uint64_t wantedInSwitch = underValgrind() ? 0 : 1'000;
  TestStack stack;
  StormState state;
  state.contextStack = &stack;
  state.switchCode = functionExtent(reinterpret_cast<const void*>(rawJump()));
  ASSERT_LT(state.switchCode.begin, state.switchCode.end)
      << "the symbol tables do not give the jump routine's size (a stripped test binary?)";
  pthread_attr_t attr;
  ASSERT_EQ(pthread_getattr_np(pthread_self(), &attr), 0);
  void* mainStack = nullptr;
  std::size_t mainSize = 0;
  ASSERT_EQ(pthread_attr_getstack(&attr, &mainStack, &mainSize), 0);
  pthread_attr_destroy(&attr);
  state.mainLow = reinterpret_cast<std::uintptr_t>(mainStack);
  state.mainHigh = state.mainLow + mainSize;

  // For this thread only (SIGEV_THREAD_ID; glibc 2.36 has no sigev_notify_thread_id macro
  // for the field).
  sigevent event{};
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = kStormSignal;
  event._sigev_un._tid = static_cast<pid_t>(::gettid());
  timer_t timer{};
  ASSERT_EQ(timer_create(CLOCK_MONOTONIC, &event, &timer), 0) << std::strerror(errno);
  gStorm = &state;
  struct sigaction action {};
  action.sa_sigaction = &stormHandler;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  struct sigaction previous {};
  bool installed = sigaction(kStormSignal, &action, &previous) == 0;
  EXPECT_TRUE(installed) << std::strerror(errno);
  itimerspec oneShot{};
  oneShot.it_value.tv_nsec = kDelayNanoseconds;
  bool armed = installed && timer_settime(timer, 0, &oneShot, nullptr) == 0;

  void* ctx = makeContext(stack.top(), stack.size(), &stormEntry);
  std::uint64_t mainChecksum = 0;
  std::uint64_t roundTrips = 0;
  while (armed) {
    ++roundTrips;
    ContextTransfer t =
        jumpContext(ctx, reinterpret_cast<void*>(static_cast<std::uintptr_t>(roundTrips)));
    ctx = t.context;
    mainChecksum += reinterpret_cast<std::uintptr_t>(t.data);
    std::uint64_t handled = state.handled.load(std::memory_order_relaxed);
    bool signalsDone = handled >= kMaxSignals ||
                       state.inSwitchCode.load(std::memory_order_relaxed) >= wantedInSwitch;
    if ((roundTrips >= kMinRoundTrips && signalsDone) || roundTrips >= kMaxRoundTrips) {
      break;
    }
    if (state.signalArrived.load(std::memory_order_relaxed) && handled < kMaxSignals) {
      // No race with the handler: the next signal comes only after this call.
      state.signalArrived.store(false, std::memory_order_relaxed);
      armed = timer_settime(timer, 0, &oneShot, nullptr) == 0;
    }
  }
  EXPECT_TRUE(armed) << "timer_settime: " << std::strerror(errno);

  timer_delete(timer);
  if (installed) {
    // A signal may still be pending (valgrind delivers late): ignoring discards it, then
    // the previous disposition comes back.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(kStormSignal, &ignore, nullptr);
    sigaction(kStormSignal, &previous, nullptr);
  }
  gStorm = nullptr;

  // The same computation without switches.
  std::uint64_t theirs = 0;
  std::uint64_t expected = 0;
  for (std::uint64_t i = 1; i <= roundTrips; ++i) {
    theirs = mix(theirs + i);
    expected += theirs;
  }
  std::uint64_t handled = state.handled.load();
  std::uint64_t inSwitchCode = state.inSwitchCode.load();
  std::printf("[          ] %llu signals during %llu switches: %llu inside the jump routine, "
              "%llu elsewhere on the context's stack\n",
              static_cast<unsigned long long>(handled),
              static_cast<unsigned long long>(roundTrips * 2),
              static_cast<unsigned long long>(inSwitchCode),
              static_cast<unsigned long long>(state.onContextStack.load()));
  EXPECT_EQ(mainChecksum, expected);
  EXPECT_EQ(state.badStackPointer.load(), 0u);
  EXPECT_GT(handled, 0u) << "no signal arrived";
  EXPECT_GE(inSwitchCode, wantedInSwitch)
      << "too few of the " << handled << " signals interrupted the jump routine";
}

// --- misuse ---------------------------------------------------------------------------

void returningEntry(ContextTransfer) {}

TEST(ContextDeathTest, EntryThatReturnsTrapsWithAMessage) {
  WEFT_SKIP_UNDER_TSAN();
  // The default "fast" style (fork, no re-exec) also works under qemu-user, where the
  // "threadsafe" style's exec of the test binary fails without binfmt_misc.
  EXPECT_DEATH(
      {
        TestStack stack;
        void* ctx = makeContext(stack.top(), stack.size(), &returningEntry);
        jumpContext(ctx, nullptr);
      },
      "entry function returned into the switch trampoline");
}

void throwingEntry(ContextTransfer) { throw std::runtime_error("escapes the context"); }

TEST(ContextDeathTest, ExceptionEscapingTheEntryTerminatesAtTheContextBase) {
  WEFT_SKIP_UNDER_TSAN();
  // The unwinder stops at the trampoline (.cfi_undefined): no handler outside the context
  // is ever considered, std::terminate runs.
  EXPECT_DEATH(
      {
        TestStack stack;
        void* ctx = makeContext(stack.top(), stack.size(), &throwingEntry);
        try {
          jumpContext(ctx, nullptr);
        } catch (...) {
          std::fputs("caught outside the context\n", stderr);
        }
      },
      "terminat");  // libstdc++: "terminate called after...", libc++abi: "terminating"
}

}  // namespace
}  // namespace weft::detail

// The C++ halves of the stack-pointer probes (see weft_test_sp_probe_entry above).
extern "C" void weft_test_sp_probe_continue(weft::detail::ContextTransfer t) {
  auto* entrySp = static_cast<std::uintptr_t*>(t.data);
  *entrySp = weft_test_entry_sp;
  // Suspend in a jump: the test's ontop targets this context next.
  t = weft::detail::jumpContext(t.context, nullptr);
  weft::detail::leaveForGood(t.context, nullptr);
}

extern "C" weft::detail::ContextTransfer weft_test_sp_probe_ontop_continue(
    weft::detail::ContextTransfer t) {
  weft::detail::gOntopSp = weft_test_entry_sp;
  return t;
}
