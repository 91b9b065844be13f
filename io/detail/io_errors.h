#pragma once

#include <cerrno>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>

#include "weft/executors/io_loop.h"

namespace weft::detail {

// The loop of the calling thread, or a clear error when it has none.
// Errors: std::logic_error naming the operation; std::system_error if the loop cannot be
// created (ThreadPool creates a worker's loop on its first I/O).
inline IoLoop& requireIoLoop(const char* what) {
  IoLoop* loop = IoLoop::current();
  if (loop == nullptr) [[unlikely]] {
    throw std::logic_error(std::string("weft: ") + what +
                           " was awaited on a thread without an event loop: run the coroutine "
                           "on a ThreadPool (e.g. syncAwait(task.via(pool)), or a fiber "
                           "spawned on the pool), or on an executor that binds an IoLoop");
  }
  return *loop;
}

// The failure of an operation that waited when its descriptor was closed (by the
// stream's close(), its destructor or move-assignment, from any thread).
[[noreturn]] inline void throwClosedWhileWaiting(const char* what) {
  throw std::system_error(ECANCELED, std::system_category(),
                          std::string("weft: ") + what +
                              ": the socket was closed while the operation waited");
}

// The failure of an operation on a closed socket (fd -1), checked before anything is
// submitted.
[[noreturn]] inline void throwClosed(const char* what) {
  throw std::system_error(EBADF, std::system_category(),
                          std::string("weft: ") + what + " on a closed socket");
}

// Throws std::system_error for a failed operation's -errno.
[[noreturn]] inline void throwIoError(std::int64_t result, const char* what) {
  throw std::system_error(static_cast<int>(-result), std::system_category(),
                          std::string("weft: ") + what);
}

}  // namespace weft::detail
