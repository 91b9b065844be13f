#pragma once

#include <stdexcept>

namespace weft {

// Thrown by weft::await() and this_fiber functions called where they cannot work: on a
// thread's own stack (not inside a fiber), or, for await(), inside a plain Fiber that has
// no executor to be resumed by.
class NotInFiber : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace weft
