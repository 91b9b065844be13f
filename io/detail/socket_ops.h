#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/lent_buffer.h"
#include "weft/io/detail/io_errors.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/io_operation_awaitable.h"

namespace weft::detail {

// IoOpcode::kReceiveLent as an awaitable, TcpStream::receive()'s: resumes with the bytes
// received in a buffer the loop lends (empty at the end of the stream). Failures as
// IoOperationAwaitable's. It holds only what differs from one receive to the next (16
// bytes, not an IoRequest and a name): co_await keeps the awaitable in the awaiting
// coroutine's frame beside its awaiter, which is what a connection waiting in receive()
// costs (docs/design/2026-11-idle-connection-memory.md).
class ReceiveLentAwaitable : public IoAwaitable<ReceiveLentAwaitable> {
 public:
  static constexpr const char* kWhat = "receive from a TcpStream";

  ReceiveLentAwaitable(int fd, std::int64_t timeoutNs) noexcept
      : fd_(fd), timeoutNs_(timeoutNs) {}

  class Awaiter : public IoAwaiter {
   public:
    // Errors: std::system_error EBADF when the stream is closed.
    Awaiter(const ReceiveLentAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(kWhat, executor, token) {
      if (a.fd_ < 0) [[unlikely]] throwClosed(kWhat);
      IoOperation& op = operation();
      op.opcode = IoOpcode::kReceiveLent;
      op.fd = a.fd_;
      op.timeoutNs = a.timeoutNs_;
    }

    LentBuffer await_resume() {
      const std::int64_t r = IoAwaiter::await_resume();
      if (r < 0) throwIoError(r, kWhat);
      return std::move(operation().lent);
    }
  };

 private:
  int fd_;
  std::int64_t timeoutNs_;
};

}  // namespace weft::detail
