#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "weft/executors/io_loop.h"
#include "weft/io/detail/io_errors.h"

namespace weft::detail {

// IoRequest: the description of one I/O operation (the opcode and the descriptor, then
// what the opcode needs: buffer, flags, offset, address, message, and a time limit), and
// describe() below, the one place that turns a description into the IoOperation an
// awaiter submits (describeOpen() when the descriptor is a socket's, which may be closed).
// Every weft awaiter that fills in its IoOperation goes through it
// (IoOperationAwaitable, File's operations on io_uring, the whole transfers, the datagram
// and vectored sends), so what a description sets, and the check that comes before
// anything is submitted, are written once.
//
// A field left out keeps the value IoOperation has by default (no buffer, flags 0, offset
// 0, no address or message, no time limit). The fields are in the order a designated
// initializer names them, packed (no holes), so that an awaitable may hold one:
//   describeOpen(operation(), {.opcode = IoOpcode::kSend, .fd = fd, .buffer = p, .length = n},
//                "write to a TcpStream");
//
// Thread safety: a value.
struct IoRequest {
  IoOpcode opcode = IoOpcode::kReceive;
  int fd = -1;
  int flags = 0;
  socklen_t addressLength = 0;  // kAccept: the capacity of `address`; kConnect: its length
  void* buffer = nullptr;
  std::size_t length = 0;
  std::uint64_t offset = 0;
  sockaddr* address = nullptr;
  msghdr* message = nullptr;    // kReceiveMessage(Lent), kSendMessage
  std::int64_t timeoutNs = -1;  // >= 0: fails with ETIMEDOUT after this many ns
};

// Sets `op` (an awaiter's operation, before it is submitted) to do what `request` says.
// Inline and noexcept (stores only): an awaiter's constructor describes its operation in
// place, and the compiler stores each field once, over the defaults IoAwaiter set.
inline void describe(IoOperation& op, const IoRequest& request) noexcept {
  op.opcode = request.opcode;
  op.fd = request.fd;
  op.flags = request.flags;
  op.addressLength = request.addressLength;
  op.buffer = request.buffer;
  op.length = request.length;
  op.offset = request.offset;
  op.address = request.address;
  op.message = request.message;
  op.timeoutNs = request.timeoutNs;
}

// describe() of an operation on a socket's descriptor, which is -1 once the socket is
// closed. Errors: std::system_error EBADF naming `what` ("... on a closed socket") when
// request.fd is -1: `op` is then left as it was and must not be submitted.
inline void describeOpen(IoOperation& op, const IoRequest& request, const char* what) {
  if (request.fd < 0) [[unlikely]] throwClosed(what);
  describe(op, request);
}

// The msghdr of a datagram operation on one buffer (sendmsg to an address, recvmsg with
// the sender's): the header and its one iovec, which live in the awaiter (the kernel reads
// them while the operation is in flight; io_uring may read the header after await_suspend
// returned). Thread safety: none (the awaiter's).
struct OneBufferMessage {
  // Points the header at `size` bytes at `data` and at the address `name` (`nameLength`:
  // its length to send to, or the capacity to receive the sender's into); returns it, for
  // IoRequest::message.
  msghdr* point(void* data, std::size_t size, sockaddr* name, socklen_t nameLength) noexcept {
    part.iov_base = data;
    part.iov_len = size;
    header.msg_name = name;
    header.msg_namelen = nameLength;
    header.msg_iov = &part;
    header.msg_iovlen = 1;
    return &header;
  }

  iovec part{};
  msghdr header{};
};

}  // namespace weft::detail
