#pragma once

#include <cstdint>

#include "weft/stackful/detail/fiber_core.h"
#include "weft/stackful/detail/fiber_park.h"
#include "weft/stackful/not_in_fiber.h"

// What code running in a fiber asks of the fiber it runs in: plain Fibers (fiber.h) and
// fibers of spawnFiber (spawn_fiber.h) alike.

namespace weft::this_fiber {

// Suspends the calling fiber. In a plain Fiber, resume() returns to its caller and the
// next resume() continues here. In a fiber started by spawnFiber, the fiber goes to the
// back of its executor's queue (letting other work run first) and continues when the
// executor gets to it, possibly on another worker thread.
// While the fiber is being destroyed (its stack unwinds from where it was parked, see
// Fiber), a yield in a destructor that the unwinding runs returns at once: nobody will
// resume the fiber, and an exception may not leave that destructor.
// Errors: throws NotInFiber outside a fiber; throws detail::ForcedUnwind (do not catch)
// when the fiber is being destroyed and the yield is not in a destructor run by the
// unwinding (code that caught ForcedUnwind and did not rethrow it).
// Thread safety: affects only the calling fiber.
// Example:
//   while (!ready()) weft::this_fiber::yield();
[[gnu::always_inline]] inline void yield() {
  const detail::FiberCore::ParkSwitch park = detail::parkForYield();
  // No switch: the fiber is being destroyed and this is a destructor of its unwinding.
  if (park.fiber == nullptr) [[unlikely]]
    return;
  // The switch is made in the caller's frame, hence the forced inline (see
  // FiberCore::resume()).
  detail::FiberCore::switchOut(park);
}

// True when the caller runs inside a fiber. noexcept: reads a thread_local.
bool inFiber() noexcept;

// The running fiber's id (Fiber::id()). Errors: throws NotInFiber outside a fiber.
std::uint64_t id();

}  // namespace weft::this_fiber
