#include "weft/stackful/this_fiber.h"

#include "weft/stackful/detail/fiber_core.h"

namespace weft::this_fiber {

bool inFiber() noexcept { return detail::FiberCore::current() != nullptr; }

std::uint64_t id() {
  detail::FiberCore* core = detail::FiberCore::current();
  if (core == nullptr) throw NotInFiber("weft::this_fiber::id() called outside a fiber");
  return core->id();
}

}  // namespace weft::this_fiber
