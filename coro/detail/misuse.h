#pragma once

#include <cstdio>
#include <cstdlib>

namespace weft::detail {

// Misuse that has nobody to report to (an unlock of an unlocked mutex, a Generator's
// begin() called twice, a primitive destroyed with waiters...): prints "weft: <message>"
// on stderr, then aborts. noexcept, [[noreturn]]: going on would corrupt state.
// Thread safety: any thread.
[[noreturn]] inline void abortMisuse(const char* message) noexcept {
  std::fprintf(stderr, "weft: %s\n", message);
  std::abort();
}

}  // namespace weft::detail
