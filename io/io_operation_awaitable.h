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
#include "weft/io/detail/io_errors.h"
#include "weft/io/detail/io_request.h"
#include "weft/io/io_awaiter.h"

namespace weft {

// IoOperationAwaitable: one IoOperation (executors/io_loop.h) described once and awaited:
// `co_await` in a Lazy/Task, `weft::await` in a fiber, on the awaiting thread's event
// loop. What weft's sockets return for their single operations (TcpStream::readable(),
// UdpSocket::sendTo(), ...), and the shortest way to an I/O operation of one's own: name
// it (`what`, for error messages: "sendfile to a client"), give the opcode and the
// descriptor, then what the opcode needs (buffer, flags, offset, address, message), and
// optionally a time limit. Each await submits a fresh operation.
//
// Semantics, cancellation, close and withdrawal: as IoAwaiter's (io/io_awaiter.h), whose
// awaiter this is. The descriptor is treated as weft's own (IoOperation::ownerRetiresFd):
// a descriptor of one's own closed with ::close must be retired first, on the loop's
// thread, with IoLoop::retireDescriptor(fd) (or use an IoAwaiter of one's own that clears
// ownerRetiresFd).
// Preconditions: the buffers, address and message outlive the await; the await runs on a
// thread with an event loop (a ThreadPool worker).
// Errors: await_resume returns the non-negative result (bytes moved, the accepted
// descriptor for kAccept, 0 for a poll); a failure throws
// std::system_error with its errno, naming `what`; ETIMEDOUT after the time limit;
// EBADF for fd -1 (a closed socket); OperationCancelled or ExecutorShutDown as IoAwaiter
// says; std::logic_error on a thread without an event loop.
// Thread safety: the description is a value: awaiting it twice makes two operations.
// Example:
//   co_await weft::IoOperationAwaitable("wait to send a file", weft::IoOpcode::kPollWritable, fd);
//   ssize_t n = ::sendfile(fd, file, &offset, count);  // the socket is writable now
class IoOperationAwaitable : public IoAwaitable<IoOperationAwaitable> {
 public:
  IoOperationAwaitable(const char* what, IoOpcode opcode, int fd) noexcept
      : what_(what), request_{.opcode = opcode, .fd = fd} {}

  IoOperationAwaitable& buffer(void* data, std::size_t size) noexcept {
    request_.buffer = data;
    request_.length = size;
    return *this;
  }
  IoOperationAwaitable& flags(int flags) noexcept {
    request_.flags = flags;
    return *this;
  }
  IoOperationAwaitable& offset(std::uint64_t offset) noexcept {
    request_.offset = offset;
    return *this;
  }
  IoOperationAwaitable& address(sockaddr* address, socklen_t length) noexcept {
    request_.address = address;
    request_.addressLength = length;
    return *this;
  }
  IoOperationAwaitable& message(msghdr* message) noexcept {
    request_.message = message;
    return *this;
  }
  // Fails the operation with ETIMEDOUT if it has not completed `ns` nanoseconds after it
  // was submitted (negative: no limit).
  IoOperationAwaitable& timeout(std::int64_t ns) noexcept {
    request_.timeoutNs = ns;
    return *this;
  }

  class Awaiter : public IoAwaiter {
   public:
    Awaiter(const IoOperationAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token), what_(a.what_) {
      detail::describeOpen(operation(), a.request_, a.what_);
    }

    // The result; for kAccept, the peer address length is in operation().addressLength.
    std::size_t await_resume() {
      const std::int64_t r = IoAwaiter::await_resume();
      if (r < 0) detail::throwIoError(r, what_);
      return static_cast<std::size_t>(r);
    }

   private:
    const char* what_;
  };

 private:
  const char* what_;
  detail::IoRequest request_;
};

}  // namespace weft
