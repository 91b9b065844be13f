#pragma once

#include <string_view>

namespace weft {

// Options of a new Fiber (stackful/fiber.h).
struct FiberOptions {
  // Printed by the stack-overflow diagnostic and by misuse messages instead of the
  // fiber's numeric id. Copied; empty means unnamed.
  std::string_view name;
};

}  // namespace weft
