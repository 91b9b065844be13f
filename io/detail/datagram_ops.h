#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/detail/io_request.h"
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
class SendMessageAwaitable : public IoAwaitable<SendMessageAwaitable> {
 public:
  SendMessageAwaitable(const char* what, int fd, std::span<const std::byte> buffer,
                       const SocketAddress& to) noexcept
      : what_(what), fd_(fd), buffer_(buffer), to_(to) {}

  class Awaiter : public IoAwaiter {
   public:
    // Errors: std::system_error EBADF when the socket is closed (nothing is submitted).
    Awaiter(const SendMessageAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token), what_(a.what_), to_(a.to_) {
      // sendmsg(2) only reads through the iovec and the name: the const_casts never lead
      // to a write.
      describeOpen(operation(),
                   {.opcode = IoOpcode::kSendMessage,
                    .fd = a.fd_,
                    .message = message_.point(const_cast<std::byte*>(a.buffer_.data()),
                                              a.buffer_.size(),
                                              const_cast<sockaddr*>(to_.native()),
                                              to_.nativeLength())},
                   a.what_);
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
    OneBufferMessage message_;
  };

 private:
  const char* what_;
  int fd_;
  std::span<const std::byte> buffer_;
  SocketAddress to_;
};

// recvmsg(fd, {sender, one iovec}) of one datagram as an awaitable: into `buffer`,
// returning a Datagram (D = Datagram), or into a buffer the loop lends
// (IoOpcode::kReceiveMessageLent), returning a LentDatagram (D = LentDatagram). The
// awaiter holds the msghdr, its one iovec and the storage the kernel writes the sender's
// address into, for the reasons SendMessageAwaitable's holds its own.
template <class D>
class ReceiveMessageAwaitable : public IoAwaitable<ReceiveMessageAwaitable<D>> {
  static constexpr bool kLent = std::is_same_v<D, LentDatagram>;

 public:
  // `buffer`: where the datagram goes (none for a lent one: the loop points the iovec at
  // the buffer it lends).
  ReceiveMessageAwaitable(const char* what, int fd, std::span<std::byte> buffer = {}) noexcept
      : what_(what), fd_(fd), buffer_(buffer) {}

  class Awaiter : public IoAwaiter {
   public:
    // Errors: std::system_error EBADF when the socket is closed (nothing is submitted).
    Awaiter(const ReceiveMessageAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token), what_(a.what_) {
      describeOpen(operation(),
                   {.opcode = kLent ? IoOpcode::kReceiveMessageLent : IoOpcode::kReceiveMessage,
                    .fd = a.fd_,
                    .message = message_.point(a.buffer_.data(), a.buffer_.size(),
                                              from_.nativeBuffer(),
                                              SocketAddress::kNativeCapacity)},
                   a.what_);
    }

    // The datagram, with its sender and whether it was truncated. Errors: std::system_error
    // naming the operation (for a lent one, ENOBUFS only when memory for buffers runs out;
    // a failed receive holds no buffer); cancellation as IoAwaiter says.
    D await_resume() {
      const std::int64_t r = IoAwaiter::await_resume();
      if (r < 0) [[unlikely]] throwIoError(r, what_);
      D datagram;
      datagram.truncated = (message_.header.msg_flags & MSG_TRUNC) != 0;
      from_.setNativeLength(message_.header.msg_namelen);
      datagram.from = from_;
      if constexpr (kLent) {
        datagram.data = std::move(operation().lent);
      } else {
        datagram.size = static_cast<std::size_t>(r);
      }
      return datagram;
    }

   private:
    const char* what_;
    SocketAddress from_;
    OneBufferMessage message_;
  };

 private:
  const char* what_;
  int fd_;
  std::span<std::byte> buffer_;
};

}  // namespace detail
}  // namespace weft
