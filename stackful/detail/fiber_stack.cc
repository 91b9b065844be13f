#include "weft/stackful/detail/fiber_stack.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "weft/stackful/detail/tool_hooks.h"

namespace weft::detail {

std::size_t FiberStack::bytesInUse(const void* sp) const noexcept {
  if (isShared()) return 0;
  const auto top = reinterpret_cast<std::uintptr_t>(own_.stack.top());
  const auto at = reinterpret_cast<std::uintptr_t>(sp);
  const auto low = reinterpret_cast<std::uintptr_t>(own_.stack.bottom());
  return at <= top && at >= low ? top - at : 0;
}

bool FiberStack::claimShared() {
  SharedStack& stack = *shared_.stack;
  if (stack.running_ != nullptr) return false;
  auto* top = static_cast<unsigned char*>(stack.stack_.top());
  if (stack.owner_ != this) {
    if (FiberStack* other = stack.owner_; other != nullptr) {
      // Everything live of the other fiber is at or above its stack pointer.
      SharedSlot& slot = other->shared_;
      auto* low = static_cast<unsigned char*>(const_cast<void*>(slot.parkedSp));
      auto used = static_cast<std::size_t>(top - low);
      if (used > slot.capacity) {
        // Round up to 64 bytes: a fiber parked at slightly different depths reuses it.
        std::size_t capacity = (used + 63) & ~std::size_t{63};
        auto* save = static_cast<unsigned char*>(std::malloc(capacity));
        if (save == nullptr) throw std::bad_alloc();
        if (other->saveOnHeap_) std::free(slot.save);
        slot.save = save;
        slot.capacity = static_cast<std::uint32_t>(capacity);
        other->saveOnHeap_ = true;
      }
      // The frames there may carry ASan poison (redzones of locals): copying them is
      // fine, the shadow is simply cleared (poisoning resumes as functions are entered).
      asanUnpoison(low, used);
      std::memcpy(slot.save, low, used);
      stack.owner_ = nullptr;
    }
    if (shared_.parkedSp != nullptr) {
      // Parked: we saved [parkedSp, top) when another fiber claimed the stack.
      auto* low = static_cast<unsigned char*>(const_cast<void*>(shared_.parkedSp));
      auto saved = static_cast<std::size_t>(top - low);
      asanUnpoison(low, saved);
      valgrindMakeWritable(low, saved);
      std::memcpy(low, shared_.save, saved);
    }
    stack.owner_ = this;
  }
  stack.running_ = this;
  return true;
}

void FiberStack::releaseShared() noexcept {
  SharedStack& stack = *shared_.stack;
  if (stack.owner_ == this) stack.owner_ = nullptr;
  --stack.users_;
  if (saveOnHeap_) std::free(shared_.save);
}

}  // namespace weft::detail
