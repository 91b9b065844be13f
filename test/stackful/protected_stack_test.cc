#include "weft/stackful/protected_stack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <system_error>
#include <utility>

#include "weft/stackful/detail/tool_hooks.h"
#include "weft/stackful/fiber.h"

namespace weft {
namespace {

// kDeathTestStyleNote: death tests use the "fast" style (fork at the EXPECT_DEATH): the
// "threadsafe" style re-executes the test binary, which fails under qemu-user without
// binfmt_misc (the aarch64 CI step). No test leaves threads running, and death test
// suites run first, so forking here is safe.

// Under ASan and TSan, the sanitizer's own SIGSEGV handler was installed before weft's,
// so "the previous behaviour" is the sanitizer's report (and exit code 1).
#if WEFT_ASAN || WEFT_TSAN
#define WEFT_EXPECT_PLAIN_SEGV(statement) EXPECT_DEATH(statement, "Sanitizer:DEADLYSIGNAL")
#else
#define WEFT_EXPECT_PLAIN_SEGV(statement)                  \
  EXPECT_EXIT(statement, testing::KilledBySignal(SIGSEGV), \
              testing::Not(testing::HasSubstr("weft: stack overflow")))
#endif

TEST(ProtectedStackTest, DefaultConstructedIsEmpty) {
  ProtectedStack stack;
  EXPECT_FALSE(stack.valid());
  EXPECT_EQ(stack.size(), 0u);
}

TEST(ProtectedStackTest, RoundsSizeUpToWholePages) {
  const std::size_t page = ProtectedStack::pageSize();
  ProtectedStack stack(page + 1);
  ASSERT_TRUE(stack.valid());
  EXPECT_EQ(stack.size(), 2 * page);
  EXPECT_EQ(static_cast<char*>(stack.top()) - static_cast<char*>(stack.bottom()),
            static_cast<std::ptrdiff_t>(2 * page));
  EXPECT_EQ(static_cast<char*>(stack.bottom()) - static_cast<char*>(stack.guardBegin()),
            static_cast<std::ptrdiff_t>(page));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(stack.top()) % 16, 0u);
}

TEST(ProtectedStackTest, DefaultSizeIsDocumentedValue) {
  ProtectedStack stack(ProtectedStack::kDefaultSize);
  EXPECT_EQ(stack.size(), ProtectedStack::kDefaultSize);
}

TEST(ProtectedStackTest, WholeUsableRangeIsWritable) {
  ProtectedStack stack(64 * 1024);
  std::memset(stack.bottom(), 0xab, stack.size());
  EXPECT_EQ(static_cast<unsigned char*>(stack.bottom())[0], 0xab);
  EXPECT_EQ(static_cast<unsigned char*>(stack.top())[-1], 0xab);
}

TEST(ProtectedStackTest, MoveTransfersOwnership) {
  ProtectedStack a(16 * 1024);
  void* top = a.top();
  ProtectedStack b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(b.top(), top);
  ProtectedStack c;
  c = std::move(b);
  EXPECT_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.top(), top);
}

TEST(ProtectedStackTest, GuardPagesAreConfigurable) {
  const std::size_t page = ProtectedStack::pageSize();
  ProtectedStack stack(page, 4);
  EXPECT_EQ(static_cast<char*>(stack.bottom()) - static_cast<char*>(stack.guardBegin()),
            static_cast<std::ptrdiff_t>(4 * page));
}

// Writing into the guard page must fault: the stack really is protected. (The process
// dies of SIGSEGV: no fiber is running, so weft's handler passes the fault on to the
// default action.)
TEST(ProtectedStackDeathTest, GuardPageFaults) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  ProtectedStack stack(16 * 1024);
  WEFT_EXPECT_PLAIN_SEGV({
    volatile char* guard = static_cast<char*>(stack.bottom()) - 1;
    *guard = 1;
  });
}

// A SIGSEGV that is not a fiber overflow keeps its default behaviour once weft's handler
// is installed (it is, by the ProtectedStack constructor).
TEST(ProtectedStackDeathTest, OtherSegvKeepsDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "fast");  // see kDeathTestStyleNote
  ProtectedStack stack(16 * 1024);
  WEFT_EXPECT_PLAIN_SEGV(::raise(SIGSEGV));
}

// Under ASan, true when no byte of [begin, begin + size) is poisoned; always true
// without ASan. Checked in 64 KiB steps, each answered from the shadow at once when clean.
bool unpoisoned(const void* begin, std::size_t size) {
#if WEFT_ASAN
  const auto* p = static_cast<const char*>(begin);
  for (std::size_t done = 0; done < size; done += 64 * 1024) {
    std::size_t length = size - done < 64 * 1024 ? size - done : 64 * 1024;
    if (__asan_region_is_poisoned(const_cast<char*>(p + done), length) != nullptr) return false;
  }
#else
  (void)begin, (void)size;
#endif
  return true;
}

// Recursion whose frames carry ASan redzones (an instrumented local array each), with a
// yield at the deepest point so that the fiber is destroyed while its frames are live.
[[gnu::noinline]] int deepFrames(int depth) {
  volatile char buffer[512];
  buffer[0] = static_cast<char>(depth);
  if (depth == 0) {
    this_fiber::yield();
    return buffer[0];
  }
  return deepFrames(depth - 1) + buffer[0];
}

// A fiber on a 1 GiB stack (which it barely touches) is created, run, finished or
// destroyed while suspended, and its stack released; afterwards no poison of its frames
// is left where they were. Releasing used to unpoison the whole reservation: 128 MiB of
// shadow written per GiB (docs/design/2026-11-asan-stack-shadow.md has the times and
// memory measured).
TEST(ProtectedStackTest, FiberOnAOneGibibyteStackIsReleasedClean) {
  constexpr std::size_t kSize = std::size_t{1} << 30;
  for (bool finish : {true, false}) {
    ProtectedStack stack(kSize);
    ASSERT_TRUE(stack.valid());
    char* top = static_cast<char*>(stack.top());
    int result = 0;
    {
      Fiber<> fiber([&result] { result = deepFrames(64); }, std::move(stack));
      fiber.resume();  // runs to the yield, 64 frames deep
      if (finish) fiber.resume();
      EXPECT_EQ(fiber.done(), finish);
    }  // destroyed: unwound if suspended; its stack is unmapped
    if (finish) {
      EXPECT_EQ(result, 64 * 65 / 2);
    }
    EXPECT_TRUE(unpoisoned(top - (4 << 20), 4 << 20));
  }
}

// Whatever poison is left anywhere on the stack (near either end or in between) is gone
// once it is released.
TEST(ProtectedStackTest, ReleaseClearsAllPoisonLeftOnTheStack) {
  const std::size_t size = 4 << 20;
  ProtectedStack stack(size);
  char* bottom = static_cast<char*>(stack.bottom());
  char* top = static_cast<char*>(stack.top());
#if WEFT_ASAN
  // Three islands of poison with clean stretches between them, one in the lowest chunk.
  __asan_poison_memory_region(bottom + 64, 64);
  __asan_poison_memory_region(bottom + (1 << 20), 4096);
  __asan_poison_memory_region(top - 256, 128);
  EXPECT_FALSE(unpoisoned(bottom, size));
#endif
  stack = ProtectedStack();  // released (unmapped)
  EXPECT_TRUE(unpoisoned(bottom, size));
  (void)top;
}

}  // namespace
}  // namespace weft
