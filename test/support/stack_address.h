#pragma once

#include <cstdint>

#include "weft/coro/detail/config.h"

namespace weft::test {

// The address of this call's native stack frame: compared before and after a long
// chain of resumptions, it shows whether they nested on the stack.
WEFT_NOINLINE inline std::uintptr_t nativeStackAddress() {
  return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
}

}  // namespace weft::test
