#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/detail/io_awaiter.h"
#include "weft/io/detail/socket_ops.h"
#include "weft/io/datagram.h"
#include "weft/io/lent_datagram.h"
#include "weft/io/socket_address.h"

namespace weft {

namespace detail {

// sendmsg(fd, {destination, one iovec}) as an awaitable. The awaiter holds the msghdr,
// the iovec and a copy of the destination: the kernel reads them while the operation is
// in flight (io_uring copies the msghdr when it issues the request, which may be after
// await_suspend returned), so they must live in the awaiter, which lives in the awaiting
// coroutine's frame (or on the fiber's stack) until the operation is complete.
class SendMessageAwaitable {
 public:
  SendMessageAwaitable(const char* what, int fd, std::span<const std::byte> buffer,
                       const SocketAddress& to) noexcept
      : what_(what), fd_(fd), buffer_(buffer), to_(to) {}

  class Awaiter : public IoAwaiter {
   public:
    // Errors: std::system_error EBADF when the socket is closed (nothing is submitted).
    Awaiter(const SendMessageAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token), what_(a.what_), to_(a.to_) {
      if (a.fd_ < 0) throwClosed(a.what_);
      iovec_.iov_base = const_cast<std::byte*>(a.buffer_.data());
      iovec_.iov_len = a.buffer_.size();
      message_.msg_name = const_cast<sockaddr*>(to_.native());
      message_.msg_namelen = to_.nativeLength();
      message_.msg_iov = &iovec_;
      message_.msg_iovlen = 1;
      IoOperation& op = operation();
      op.opcode = IoOpcode::kSendMessage;
      op.fd = a.fd_;
      op.message = &message_;
    }

    // The number of bytes sent (a datagram is sent whole). Errors: std::system_error
    // naming the operation and the destination; cancellation as IoAwaiter says.
    std::size_t await_resume() {
      const std::int64_t r = IoAwaiter::await_resume();
      if (r < 0) [[unlikely]] {
        throw std::system_error(static_cast<int>(-r), std::system_category(),
                                std::string("weft: ") + what_ + " " + to_.toString());
      }
      return static_cast<std::size_t>(r);
    }

   private:
    const char* what_;
    SocketAddress to_;
    iovec iovec_{};
    msghdr message_{};
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return Awaiter(*this, executor, token);
  }
  Awaiter operator co_await() const { return Awaiter(*this, nullptr, kNoCancellationToken); }

 private:
  const char* what_;
  int fd_;
  std::span<const std::byte> buffer_;
  SocketAddress to_;
};

// recvmsg(fd, {sender, one iovec}) as an awaitable returning a Datagram. As above, the
// msghdr, the iovec and the storage the kernel writes the sender's address into live in
// the awaiter.
class ReceiveMessageAwaitable {
 public:
  ReceiveMessageAwaitable(const char* what, int fd, std::span<std::byte> buffer) noexcept
      : what_(what), fd_(fd), buffer_(buffer) {}

  class Awaiter : public IoAwaiter {
   public:
    // Errors: std::system_error EBADF when the socket is closed (nothing is submitted).
    Awaiter(const ReceiveMessageAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token), what_(a.what_) {
      if (a.fd_ < 0) throwClosed(a.what_);
      iovec_.iov_base = a.buffer_.data();
      iovec_.iov_len = a.buffer_.size();
      message_.msg_name = from_.nativeBuffer();
      message_.msg_namelen = SocketAddress::kNativeCapacity;
      message_.msg_iov = &iovec_;
      message_.msg_iovlen = 1;
      IoOperation& op = operation();
      op.opcode = IoOpcode::kReceiveMessage;
      op.fd = a.fd_;
      op.message = &message_;
    }

    // Errors: std::system_error naming the operation; cancellation as IoAwaiter says.
    Datagram await_resume() {
      const std::int64_t r = IoAwaiter::await_resume();
      if (r < 0) [[unlikely]] throwIoError(r, what_);
      Datagram datagram;
      datagram.size = static_cast<std::size_t>(r);
      datagram.truncated = (message_.msg_flags & MSG_TRUNC) != 0;
      from_.setNativeLength(message_.msg_namelen);
      datagram.from = from_;
      return datagram;
    }

   private:
    const char* what_;
    SocketAddress from_;
    iovec iovec_{};
    msghdr message_{};
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return Awaiter(*this, executor, token);
  }
  Awaiter operator co_await() const { return Awaiter(*this, nullptr, kNoCancellationToken); }

 private:
  const char* what_;
  int fd_;
  std::span<std::byte> buffer_;
};

// recvmsg(fd, {sender, one iovec}) of one datagram into a buffer the loop lends
// (IoOpcode::kReceiveMessageLent), as an awaitable returning a LentDatagram. The msghdr,
// the iovec (which the loop points at the buffer it picks) and the sender's storage live
// in the awaiter, as for ReceiveMessageAwaitable.
class ReceiveMessageLentAwaitable {
 public:
  ReceiveMessageLentAwaitable(const char* what, int fd) noexcept : what_(what), fd_(fd) {}

  class Awaiter : public IoAwaiter {
   public:
    // Errors: std::system_error EBADF when the socket is closed (nothing is submitted).
    Awaiter(const ReceiveMessageLentAwaitable& a, Executor* executor,
            const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token), what_(a.what_) {
      if (a.fd_ < 0) throwClosed(a.what_);
      message_.msg_name = from_.nativeBuffer();
      message_.msg_namelen = SocketAddress::kNativeCapacity;
      message_.msg_iov = &iovec_;
      message_.msg_iovlen = 1;
      IoOperation& op = operation();
      op.opcode = IoOpcode::kReceiveMessageLent;
      op.fd = a.fd_;
      op.message = &message_;
    }

    // Errors: std::system_error naming the operation (ENOBUFS only when memory for
    // buffers runs out); cancellation as IoAwaiter says. A failed receive holds no buffer.
    LentDatagram await_resume() {
      const std::int64_t r = IoAwaiter::await_resume();
      if (r < 0) [[unlikely]] throwIoError(r, what_);
      LentDatagram datagram;
      datagram.data = std::move(operation().lent);
      datagram.truncated = (message_.msg_flags & MSG_TRUNC) != 0;
      from_.setNativeLength(message_.msg_namelen);
      datagram.from = from_;
      return datagram;
    }

   private:
    const char* what_;
    SocketAddress from_;
    iovec iovec_{};
    msghdr message_{};
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return Awaiter(*this, executor, token);
  }
  Awaiter operator co_await() const { return Awaiter(*this, nullptr, kNoCancellationToken); }

 private:
  const char* what_;
  int fd_;
};

}  // namespace detail
}  // namespace weft
