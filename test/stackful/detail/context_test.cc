// Tests of the switch core (stackful/detail/context.h), for whichever backend the build
// chose (WEFT_FIBER_BACKEND_ASM or _BOOST; CI runs this file with both).

#include "stackful/detail/context.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace weft::detail {
namespace {

// An mmap'd stack with a PROT_NONE guard page below it: an overflow in a test faults
// instead of corrupting the heap.
class TestStack {
 public:
  explicit TestStack(std::size_t size = 256 * 1024) : size_(size) {
    page_ = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    size_ = (size + page_ - 1) / page_ * page_;
    void* p = ::mmap(nullptr, size_ + page_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) {
      throw std::runtime_error("TestStack: mmap failed");
    }
    base_ = static_cast<std::byte*>(p);
    ::mprotect(base_, page_, PROT_NONE);
  }
  ~TestStack() { ::munmap(base_, size_ + page_); }
  TestStack(const TestStack&) = delete;
  TestStack& operator=(const TestStack&) = delete;

  void* top() const { return base_ + page_ + size_; }
  std::size_t size() const { return size_; }

 private:
  std::size_t size_;
  std::size_t page_;
  std::byte* base_;
};

// --- basic transfer -------------------------------------------------------------------

struct PingPong {
  void* main = nullptr;
  int rounds = 0;
};

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
  // Leave for good: the main context never resumes us again.
  jumpContext(t.context, nullptr);
  ADD_FAILURE() << "a finished context was resumed";
  contextEntryReturned();
}

TEST(ContextTest, FirstJumpRunsEntryWithTheTransfer) {
  TestStack stack;
  void* ctx = makeContext(stack.top(), stack.size(), &addOneEntry);
  ASSERT_NE(ctx, nullptr);
  int value = 41;
  ContextTransfer t = jumpContext(ctx, &value);
  EXPECT_EQ(t.data, &value);
  EXPECT_EQ(value, 42);
  EXPECT_NE(t.context, nullptr);
  int stop = -1;
  t = jumpContext(t.context, &stop);
  EXPECT_EQ(t.data, nullptr);
}

TEST(ContextTest, PingPongKeepsPassingData) {
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
      jumpContext(ring->main, ring);
      ADD_FAILURE() << "resumed after the ring finished";
      contextEntryReturned();
    }
    void* peer = ring->peer;
    t = jumpContext(peer, ring);
    ring->peer = t.context;  // the context that just jumped to us
  }
}

TEST(ContextTest, ContextsCanJumpToEachOtherDirectly) {
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

// --- ontop ----------------------------------------------------------------------------

ContextTransfer ontopDouble(ContextTransfer t) {
  // Runs on the target's stack; its result is what the target's jumpContext returns.
  int* value = static_cast<int*>(t.data);
  *value *= 2;
  return ContextTransfer{t.context, value};
}

TEST(ContextTest, OntopRunsFnAndItsResultReachesTheTarget) {
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

struct UnwindProbe {
  void* main = nullptr;
  int destructorsRun = 0;
  bool caughtInside = false;
  std::string what;
};

struct CountsDestruction {
  UnwindProbe* probe;
  ~CountsDestruction() { ++probe->destructorsRun; }
};

struct ForcedUnwind {
  void* from;
};

[[gnu::noinline]] void suspendDeep(UnwindProbe* probe, void*& main, int depth) {
  CountsDestruction guard{probe};
  if (depth == 0) {
    ContextTransfer t = jumpContext(main, probe);
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
  jumpContext(main, probe);
  contextEntryReturned();
}

ContextTransfer throwForcedUnwind(ContextTransfer t) { throw ForcedUnwind{t.context}; }

TEST(ContextTest, ExceptionFromOntopFnUnwindsTheTargetStack) {
  TestStack stack;
  UnwindProbe probe;
  void* ctx = makeContext(stack.top(), stack.size(), &unwindEntry);
  ContextTransfer t = jumpContext(ctx, &probe);
  ASSERT_EQ(probe.destructorsRun, 0);
  t = ontopContext(t.context, &probe, &throwForcedUnwind);
  EXPECT_TRUE(probe.caughtInside);
  EXPECT_EQ(probe.destructorsRun, 11);
  EXPECT_EQ(t.data, &probe);
}

// --- misuse ---------------------------------------------------------------------------

void returningEntry(ContextTransfer) {}

TEST(ContextDeathTest, EntryThatReturnsTrapsWithAMessage) {
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

}  // namespace
}  // namespace weft::detail
