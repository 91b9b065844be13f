#include "weft/stackful/fiber_local.h"

#include <atomic>

#include "weft/stackful/detail/fiber_core.h"

namespace weft::detail {

FiberLocalStorage& currentFiberLocalStorage() {
  if (FiberCore* core = FiberCore::current()) return core->localStorage();
  static thread_local FiberLocalStorage threadStorage;
  return threadStorage;
}

std::uint64_t newFiberLocalKey() noexcept {
  static std::atomic<std::uint64_t> next{1};
  // relaxed: keys need only be unique.
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace weft::detail
