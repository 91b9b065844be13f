#pragma once

#include <cstddef>

#include "weft/stackful/protected_stack.h"

namespace weft {

namespace detail {
class FiberStack;
}  // namespace detail

// SharedStack: one execution stack shared by many fibers, which take turns on it by
// copying (the scheme libaco calls "copy stacks").
//
// Semantics: a fiber created on a SharedStack runs on that stack. When another fiber of
// the same SharedStack is resumed, the part of the first fiber's stack that is in use
// (from its stack pointer to the top: typically a few hundred bytes for a parked fiber)
// is copied into a private buffer of the fiber, sized to what was used, and the second
// fiber's saved part is copied back in. A fiber resumed again right after it suspended
// (nobody else used the stack meanwhile) costs no copy. So a parked fiber costs its
// control block plus the bytes of stack it really uses: a million parked fibers fit in a
// few hundred megabytes, where a million protected stacks would need at least 8 GiB of
// touched pages and two million kernel mappings.
//
// The rule this imposes: NO POINTERS INTO ANOTHER FIBER'S STACK. While a fiber is parked,
// its locals are not where they were (they are in its save buffer, and the stack holds
// another fiber's frames), so a pointer or reference to a local of fiber A must not be
// used by fiber B, nor by anything that runs while A is parked (a callback, another
// thread). Pass values, or heap objects. A fiber's pointers to its own locals are fine:
// its frames are always restored to the same addresses before it runs.
//
// The stack is a ProtectedStack: running off it hits a guard page and prints the overflow
// diagnostic naming the fiber. Its size is what the deepest fiber needs; the copy cost is
// what the fibers use, not the size.
//
// Preconditions (aborting with a message otherwise): the fibers of one SharedStack run
// one at a time: a fiber of a SharedStack must not resume, nor destroy a suspended fiber
// of, the same SharedStack (it is in use by the fiber doing so). The SharedStack outlives
// its fibers (its destructor aborts if unfinished fibers still use it).
// Errors: the constructor throws what ProtectedStack's throws; resuming a fiber may throw
// std::bad_alloc when the save buffer of the fiber it displaces cannot grow.
// Thread safety: none of its own: create, resume and destroy the fibers of one SharedStack
// from one thread at a time (e.g. one SharedStack per thread, as libaco has it).
//
// Example:
//   weft::SharedStack shared;                    // 256 KiB
//   std::vector<weft::Fiber<>> fibers;
//   for (int i = 0; i < 1000; ++i)
//     fibers.emplace_back([] { weft::this_fiber::yield(); }, shared);
//   for (auto& f : fibers) f.resume();           // 1000 parked fibers, one stack
class SharedStack {
 public:
  static constexpr std::size_t kDefaultSize = ProtectedStack::kDefaultSize;

  explicit SharedStack(std::size_t size = kDefaultSize) : stack_(size) {}
  // Aborts with a message if unfinished fibers still use this stack.
  ~SharedStack();
  SharedStack(const SharedStack&) = delete;
  SharedStack& operator=(const SharedStack&) = delete;

  // Usable bytes. noexcept: reads a member.
  std::size_t size() const noexcept { return stack_.size(); }
  // How many fibers (created, suspended or running, not yet destroyed) use this stack.
  std::size_t fibers() const noexcept { return users_; }

 private:
  friend class detail::FiberStack;

  ProtectedStack stack_;
  detail::FiberStack* owner_ = nullptr;    // whose frames are on the stack now
  detail::FiberStack* running_ = nullptr;  // that of the fiber running on it, if any
  std::size_t users_ = 0;
};

}  // namespace weft
