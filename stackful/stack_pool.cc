#include "weft/stackful/stack_pool.h"

#include <utility>

#include "weft/stackful/detail/tool_hooks.h"

namespace weft {

StackPool::StackPool(std::size_t stackSize, std::size_t maxCached)
    : stackSize_((stackSize == 0 ? ProtectedStack::pageSize()
                                 : stackSize + ProtectedStack::pageSize() - 1) /
                 ProtectedStack::pageSize() * ProtectedStack::pageSize()),
      maxCached_(maxCached) {
  cache_.reserve(maxCached_);
}

StackPool::~StackPool() = default;

ProtectedStack StackPool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!cache_.empty()) {
      ProtectedStack stack = std::move(cache_.back());
      cache_.pop_back();
      return stack;
    }
  }
  return ProtectedStack(stackSize_);
}

void StackPool::release(ProtectedStack&& stack) noexcept {
  if (!stack.valid()) return;
  if (stack.size() == stackSize_) {
    // The previous fiber's frames may still be poisoned in ASan's shadow memory (a
    // finished fiber never returns from its outermost frames).
    detail::asanUnpoisonStack(stack.bottom(), stack.top());
    std::lock_guard lock(mutex_);
    if (cache_.size() < maxCached_) {
      cache_.push_back(std::move(stack));
      return;
    }
  }
  ProtectedStack unmapped = std::move(stack);  // unmapped here, outside the lock
}

std::size_t StackPool::cached() const {
  std::lock_guard lock(mutex_);
  return cache_.size();
}

StackPool& StackPool::defaultPool() {
  // Never destroyed: fibers (and the stacks they give back) may outlive static
  // destruction order. If `new` throws, the static stays uninitialised and the exception
  // reaches the caller ([stmt.dcl]: the next call runs the initialiser again).
  static StackPool* const pool = new StackPool();
  return *pool;
}

}  // namespace weft
