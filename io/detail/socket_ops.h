#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/detail/io_awaiter.h"

namespace weft::detail {

// The failure of an operation on a closed socket (fd -1), checked before anything is
// submitted.
[[noreturn]] inline void throwClosed(const char* what) {
  throw std::system_error(EBADF, std::system_category(),
                          std::string("weft: ") + what + " on a closed socket");
}

// One IoOperation as an awaitable: `co_await` in a Lazy/Task, `weft::await` in a fiber.
// The operation is described once (opcode, fd, buffer...) and submitted by its awaiter;
// await_resume returns the non-negative result and throws std::system_error for a
// failure (naming `what`), OperationCancelled or ExecutorShutDown as IoAwaiter says.
class IoOperationAwaitable {
 public:
  IoOperationAwaitable(const char* what, IoOpcode opcode, int fd) noexcept
      : what_(what), opcode_(opcode), fd_(fd) {}

  IoOperationAwaitable& buffer(void* data, std::size_t size) noexcept {
    buffer_ = data;
    length_ = size;
    return *this;
  }
  IoOperationAwaitable& flags(int flags) noexcept {
    flags_ = flags;
    return *this;
  }
  IoOperationAwaitable& offset(std::uint64_t offset) noexcept {
    offset_ = offset;
    return *this;
  }
  IoOperationAwaitable& address(sockaddr* address, socklen_t length) noexcept {
    address_ = address;
    addressLength_ = length;
    return *this;
  }
  IoOperationAwaitable& message(msghdr* message) noexcept {
    message_ = message;
    return *this;
  }
  // Fails the operation with ETIMEDOUT if it has not completed `ns` nanoseconds after it
  // was submitted (negative: no limit).
  IoOperationAwaitable& timeout(std::int64_t ns) noexcept {
    timeoutNs_ = ns;
    return *this;
  }

  class Awaiter : public IoAwaiter {
   public:
    Awaiter(const IoOperationAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token), what_(a.what_) {
      if (a.fd_ < 0) throwClosed(a.what_);
      IoOperation& op = operation();
      op.opcode = a.opcode_;
      op.fd = a.fd_;
      op.flags = a.flags_;
      op.buffer = a.buffer_;
      op.length = a.length_;
      op.offset = a.offset_;
      op.address = a.address_;
      op.addressLength = a.addressLength_;
      op.message = a.message_;
      op.timeoutNs = a.timeoutNs_;
    }

    // The result; for kAccept, the peer address length is in operation().addressLength.
    std::size_t await_resume() {
      const std::int64_t r = IoAwaiter::await_resume();
      if (r < 0) throwIoError(r, what_);
      return static_cast<std::size_t>(r);
    }

   private:
    const char* what_;
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return Awaiter(*this, executor, token);
  }
  Awaiter operator co_await() const { return Awaiter(*this, nullptr, kNoCancellationToken); }

 private:
  const char* what_;
  IoOpcode opcode_;
  int fd_;
  int flags_ = 0;
  void* buffer_ = nullptr;
  std::size_t length_ = 0;
  std::uint64_t offset_ = 0;
  sockaddr* address_ = nullptr;
  socklen_t addressLength_ = 0;
  msghdr* message_ = nullptr;
  std::int64_t timeoutNs_ = -1;
};

// IoOpcode::kReceiveLent as an awaitable: resumes with the bytes received in a buffer the
// loop lends (empty at the end of the stream). Failures as IoOperationAwaitable's.
class ReceiveLentAwaitable {
 public:
  ReceiveLentAwaitable(const char* what, int fd, std::int64_t timeoutNs) noexcept
      : operation_(IoOperationAwaitable(what, IoOpcode::kReceiveLent, fd).timeout(timeoutNs)) {}

  class Awaiter : public IoOperationAwaitable::Awaiter {
   public:
    Awaiter(const ReceiveLentAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoOperationAwaitable::Awaiter(a.operation_, executor, token) {}

    LentBuffer await_resume() {
      IoOperationAwaitable::Awaiter::await_resume();
      return std::move(operation().lent);
    }
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return Awaiter(*this, executor, token);
  }
  Awaiter operator co_await() const { return Awaiter(*this, nullptr, kNoCancellationToken); }

 private:
  IoOperationAwaitable operation_;
};

}  // namespace weft::detail
