#include "weft/stackful/shared_stack.h"

#include <cstdio>
#include <cstdlib>

namespace weft {

SharedStack::~SharedStack() {
  if (users_ != 0) {
    std::fprintf(stderr,
                 "weft: SharedStack destroyed while %zu fiber(s) still use it (destroy the "
                 "fibers of a SharedStack before the stack)\n",
                 users_);
    std::abort();
  }
}

}  // namespace weft
