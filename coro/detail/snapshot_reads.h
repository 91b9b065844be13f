#pragma once

#include "weft/coro/detail/config.h"

#if WEFT_TSAN
// ThreadSanitizer's runtime has these; clang-16's <sanitizer/tsan_interface.h> does not
// declare them.
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace weft::detail {

// While one lives, the calling thread reads other threads' coroutines and fibers without
// synchronising with them: an async backtrace or a task dump follows links that their
// owners may be changing (a snapshot, as gdb takes one), and ThreadSanitizer is told so.
// Nothing else: outside ThreadSanitizer builds it is empty.
class SnapshotReads {
 public:
  SnapshotReads() noexcept {
#if WEFT_TSAN
    __tsan_ignore_thread_begin();
#endif
  }
  ~SnapshotReads() {
#if WEFT_TSAN
    __tsan_ignore_thread_end();
#endif
  }
  SnapshotReads(const SnapshotReads&) = delete;
  SnapshotReads& operator=(const SnapshotReads&) = delete;
};

}  // namespace weft::detail
