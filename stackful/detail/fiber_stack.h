#pragma once

// FiberStack: the storage a fiber's frames live in (a stack of its own, or its turn on a
// SharedStack), what FiberCore (fiber_core.h) runs a fiber on.

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "weft/stackful/protected_stack.h"
#include "weft/stackful/shared_stack.h"
#include "weft/stackful/stack_pool.h"

namespace weft::detail {

// The save area allocated with every shared-stack fiber, so that parking costs one heap
// block: at least this many bytes (FiberCore::create rounds it up so that the block fills
// malloc's chunk). A fiber parked in a yield right in its body needs less than 160 bytes
// (with a one-word body, the block is then 288 bytes: docs/stackful.md); one that parks
// deeper gets a heap buffer instead.
inline constexpr std::size_t kSharedInlineSave = 160;

// The stack of one fiber, of one of two kinds:
//  - its own ProtectedStack (taken from a StackPool, or given): the fiber's object sits at
//    its top and the fiber's frames grow down from right below it;
//  - a turn on a SharedStack: the fiber's frames are on the shared stack while it runs,
//    and copied into the fiber's save area whenever another fiber of that stack runs in
//    between (claimShared()).
// Empty until FiberCore::create() gives it one (holdOwn() or holdShared()); emptied by
// release(), which FiberCore calls last. Thread safety: none; used by whoever runs or
// destroys the fiber.
class FiberStack {
 public:
  // Empty (the slot is constructed by holdOwn() or holdShared()).
  FiberStack() noexcept {}  // NOLINT(modernize-use-equals-default): the union needs it
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  // Does nothing: release() empties it. (Defined, as the union's members are not trivial.)
  ~FiberStack() {}  // NOLINT(modernize-use-equals-default)

  // Takes `stack`; release() gives it back to `pool` (nullptr: unmaps it).
  void holdOwn(ProtectedStack&& stack, StackPool* pool) noexcept {
    kind_ = Kind::kOwn;
    ::new (&own_) OwnSlot{std::move(stack), pool};
  }
  // A turn on `stack`, with `capacity` bytes at `save` (allocated with the fiber's object)
  // to save its frames in. Counts the fiber as one of the stack's users until release().
  void holdShared(SharedStack& stack, unsigned char* save, std::uint32_t capacity) noexcept {
    kind_ = Kind::kShared;
    ::new (&shared_) SharedSlot{&stack, save, nullptr, capacity};
    ++stack.users_;
  }

  // noexcept on the queries: they read members.
  bool isShared() const noexcept { return kind_ == Kind::kShared; }
  // The bounds of the memory the fiber's frames run in (for the SIGSEGV handler and the
  // sanitizers): the guard page's start, the lowest usable address, the usable bytes.
  const void* guardBegin() const noexcept { return memory().guardBegin(); }
  const void* bottom() const noexcept { return memory().bottom(); }
  std::size_t size() const noexcept { return memory().size(); }
  // Where the fiber's frames start (they grow down from there): right below the fiber's
  // object `fiber` on a stack of its own, the top of a shared stack.
  void* framesTop(const void* fiber) const noexcept {
    return isShared() ? shared_.stack->stack_.top() : const_cast<void*>(fiber);
  }
  // On a stack of its own: the bytes in use from stack pointer `sp` to the stack's top
  // (the fiber's object included; 0 when `sp` is not on the stack, and on a shared stack,
  // where a parked fiber's frames may be saved off it).
  std::size_t bytesInUse(const void* sp) const noexcept;

  // --- shared stacks -------------------------------------------------------------------
  // Before the fiber runs: makes the shared stack hold its frames. Saves the frames of the
  // fiber whose frames are there, if another fiber's, into that fiber's save area (grown
  // on the heap if they do not fit), then, if the fiber is parked, copies its own frames
  // back. Returns false, having done nothing, when a fiber is running on the stack. Throws
  // std::bad_alloc, before anything changed, when the displaced fiber's save area cannot
  // grow.
  bool claimShared();
  // After the fiber switched off its shared stack: `parkedSp` is its stack pointer if it
  // is parked (its frames stay on the stack until another fiber claims it), nullptr once
  // it finished (nothing of it is left to save). noexcept: stores.
  void leaveShared(const void* parkedSp) noexcept {
    SharedStack& stack = *shared_.stack;
    stack.running_ = nullptr;
    shared_.parkedSp = parkedSp;
    if (parkedSp == nullptr) stack.owner_ = nullptr;
  }

  // --- the end -------------------------------------------------------------------------
  // The fiber's own stack, taken out of it by release() before the fiber's object (which
  // lives on that stack) is destroyed; goes back to its pool, or is unmapped, by
  // giveBack() or when this is destroyed.
  struct OwnStack {
    ProtectedStack stack;
    StackPool* pool = nullptr;
    // noexcept: StackPool::release and munmap do not fail.
    void giveBack() noexcept {
      if (pool != nullptr) pool->release(std::move(stack));
      // else: `stack` is unmapped as it goes out of scope.
    }
  };
  // Empties the stack, once the fiber no longer runs: a shared stack forgets the fiber and
  // its heap save area is freed; a stack of its own is moved into the result, to give
  // back after the fiber's object is gone. noexcept: bookkeeping and freeing.
  OwnStack release() noexcept {
    if (isShared()) {
      releaseShared();
      return {};
    }
    OwnStack own{std::move(own_.stack), own_.pool};
    own_.stack.~ProtectedStack();
    return own;
  }

 private:
  enum class Kind : std::uint8_t { kOwn, kShared };

  struct OwnSlot {
    ProtectedStack stack;
    StackPool* pool;  // where the stack goes back to; nullptr: unmapped
  };
  struct SharedSlot {
    SharedStack* stack;
    // The fiber's frames while another fiber runs on `stack`: first the area allocated
    // right after the fiber's object, a heap buffer if the fiber ever parks deeper.
    unsigned char* save;
    // While the fiber is parked: its stack pointer, the low end of its frames (null before
    // it first ran and once it finished).
    const void* parkedSp;
    std::uint32_t capacity;
  };

  const ProtectedStack& memory() const noexcept {
    return isShared() ? shared_.stack->stack_ : own_.stack;
  }
  void releaseShared() noexcept;

  // Packed with FiberCore's small fields: FiberCore holds this [[no_unique_address]], so
  // its next fields go into the tail padding after kind_ and saveOnHeap_ (a parked
  // shared-stack fiber costs its object plus its frames in one heap block).
  union {
    OwnSlot own_;
    SharedSlot shared_;
  };
  Kind kind_ = Kind::kOwn;
  bool saveOnHeap_ = false;  // shared stacks: shared_.save is malloc'd
};

}  // namespace weft::detail
