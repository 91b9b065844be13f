#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>

#include "weft/executors/io_loop.h"
#include "weft/io/datagram.h"
#include "weft/io/detail/datagram_ops.h"
#include "weft/io/detail/socket_ops.h"
#include "weft/io/detail/vectored_ops.h"
#include "weft/io/io_operation_awaitable.h"
#include "weft/io/lent_datagram.h"
#include "weft/io/socket_address.h"

namespace weft {

struct UdpSocketOptions {
  bool reuseAddress = false;  // SO_REUSEADDR: several sockets may bind the address
  bool reusePort = false;     // SO_REUSEPORT: the kernel spreads datagrams across them
  bool broadcast = false;     // SO_BROADCAST: sendTo may target a broadcast address
};

// UdpSocket: a datagram socket (UDP over IPv4/IPv6, or a Unix domain datagram socket),
// sent to and received from with awaitables on the event loop of the thread that awaits.
//
// Semantics:
//  - bind() makes a socket that receives at an address (a server); open() an unbound one
//    (a client: sending binds it to an ephemeral port, and replies come back to that).
//    An AF_UNIX socket from open() is bound at once to a kernel-chosen abstract name
//    (Linux autobind), so that its peer can reply to it too.
//  - `co_await socket.sendTo(buffer, address)` sends one datagram and returns its size
//    (a datagram is sent whole, or fails: EMSGSIZE when it is too large).
//    `co_await socket.receiveFrom(buffer)` waits for one datagram and returns a Datagram:
//    the bytes stored, the sender, and whether the datagram was longer than the buffer
//    (its rest is lost then, as the kernel drops it: never silently, `truncated` says
//    so). An empty datagram is received as size 0.
//  - Empty buffers keep datagram meaning (a datagram socket has no end of stream, so a
//    size of 0 is never ambiguous): a receive into an empty buffer waits for the next
//    datagram and takes it whole, with size 0, its sender, and `truncated` unless the
//    datagram was empty (a way to skip one, or to wait for an empty one); a send of an
//    empty buffer sends an empty datagram. Unlike TcpStream::read of an empty buffer,
//    which returns 0 at once.
//  - `co_await socket.receiveFrom()` (no buffer) receives one datagram into a buffer the
//    event loop lends and returns a LentDatagram: the bytes in a LentBuffer (given back to
//    the loop when destroyed, on any thread), the sender, and `truncated`. A socket waiting
//    there holds no buffer (io_uring: the kernel picks one from the loop's provided-buffer
//    ring when a datagram arrives; epoll: the loop takes one from its pool once the socket
//    is readable). A datagram receive uses 16 KiB of the buffer: a longer datagram is cut to
//    16 KiB with `truncated` set, its rest lost, as receiveFrom(buffer) does with a 16 KiB
//    buffer (never silently). An empty datagram is an empty LentBuffer, `truncated` false.
//    receive() is the same for a connected socket.
//  - connect(address) sets the default peer (a synchronous connect(2): nothing goes on
//    the wire) and filters what is received to datagrams from it. send(buffer) and
//    receive(buffer) then need no address; receive() returns a Datagram like
//    receiveFrom() so that truncation is never silent. After an ICMP "port unreachable"
//    the next operation on a connected UDP socket fails with ECONNREFUSED.
//  - Each await is one operation (sendmsg/recvmsg) on the calling thread's event loop
//    (ThreadPool gives every worker one); the coroutine resumes on that thread. From a
//    fiber: `weft::await(socket.receiveFrom(buffer))`.
//  - Cancellation: every await honours the coroutine's token (a Task's, withCancellation,
//    withTimeout). An operation already in the kernel is cancelled there; the await then
//    throws OperationCancelled once the kernel let go of the buffer, unless the operation
//    completed first: a datagram received is returned, nothing is lost (nor is a lent
//    buffer: one that a cancelled or failed receive was lent goes back to the loop).
//  - Destroying the socket closes it. A Unix socket's path is not unlinked (by bind() or
//    the destructor), as for TcpListener.
//
// Preconditions: the buffer of an operation stays valid until its await returns. Several
// operations may be in flight at once (each datagram goes to one receive). close() (and
// the destructor, and move-assignment) may come while operations wait, from any thread:
// they end with std::system_error ECANCELED ("the socket was closed while the operation
// waited") unless they completed first, and the descriptor is closed once they have
// ended. close() must not race with the start of an operation.
//
// Errors: std::system_error with the errno and a message naming the operation (sendTo
// also names the destination): EMSGSIZE, ECONNREFUSED, ENETUNREACH, EACCES (broadcast
// without the option)...; EBADF for an operation on a closed socket; bind() and connect()
// name the address, and throw std::invalid_argument for an empty one;
// OperationCancelled; ExecutorShutDown when the pool shuts down with the operation in
// flight; std::logic_error when awaited on a thread without an event loop.
//
// Thread safety: distinct sockets are independent. Operations may be awaited on one socket
// from several threads at once; other members are not synchronised.
//
// Example:
//   auto socket = weft::UdpSocket::bind(weft::SocketAddress::parse("127.0.0.1:5353"));
//   weft::Datagram d = co_await socket.receiveFrom(buffer);
//   co_await socket.sendTo(std::span(buffer).first(d.size), d.from);  // echo it back
//   weft::LentDatagram lent = co_await socket.receiveFrom();           // no buffer of ours
//   co_await socket.sendTo(lent.data, lent.from);
class UdpSocket {
 public:
  // The awaitables the operations return (co_await in a Lazy/Task, weft::await in a
  // fiber), named so that code can hold one; what each resumes with is said at the
  // operation. SendOperation is the public IoOperationAwaitable.
  using SendOperation = IoOperationAwaitable;            // send(): std::size_t
  using SendToOperation = detail::SendMessageAwaitable;  // sendTo(): std::size_t
  // receive(b), receiveFrom(b); receive(), receiveFrom() (a lent buffer)
  using ReceiveFromOperation = detail::ReceiveMessageAwaitable<Datagram>;
  using ReceiveLentOperation = detail::ReceiveMessageAwaitable<LentDatagram>;
  template <class... Parameters>
  using VectoredSendOperation = detail::VectoredSendAwaitable<Parameters...>;  // send(buffers)

  // Not open: isOpen() is false.
  UdpSocket() noexcept = default;
  // Adopts `fd`, a non-blocking datagram socket.
  explicit UdpSocket(int fd) noexcept : fd_(fd) {}
  UdpSocket(UdpSocket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UdpSocket& operator=(UdpSocket&& other) noexcept;
  ~UdpSocket();

  // A socket bound to `address` (IPv4 or IPv6 with port 0 for an ephemeral port, or a
  // Unix path or abstract name). The options apply to IP sockets only.
  // Errors: std::system_error (EADDRINUSE, EACCES, EADDRNOTAVAIL...) naming the address;
  // std::invalid_argument for an empty address.
  static UdpSocket bind(const SocketAddress& address, UdpSocketOptions options = {});

  // An unbound socket of `family` (AF_INET, AF_INET6 or AF_UNIX; see above for AF_UNIX).
  // Errors: std::system_error (EAFNOSUPPORT for another family, EMFILE...).
  static UdpSocket open(int family);

  // Sets the default peer: send() goes there, and only its datagrams are received.
  // Errors: std::system_error naming the address (EAFNOSUPPORT for another family,
  // ENOENT/ECONNREFUSED for a Unix address nobody is bound to); EBADF when closed;
  // std::invalid_argument for an empty address.
  void connect(const SocketAddress& address);

  // Sends `buffer` as one datagram to `to`; returns its size.
  SendToOperation sendTo(std::span<const std::byte> buffer,
                                      const SocketAddress& to) const noexcept {
    return detail::SendMessageAwaitable("sendTo on a UdpSocket to", fd_, buffer, to);
  }
  // Waits for the next datagram; stores what fits of it in `buffer`.
  ReceiveFromOperation receiveFrom(std::span<std::byte> buffer) const noexcept {
    return ReceiveFromOperation("receiveFrom on a UdpSocket", fd_, buffer);
  }

  // Waits for the next datagram; returns it in a buffer the loop lends (see above: at most
  // 16 KiB kept, `truncated` for a longer one; an empty datagram is an empty `data`).
  // Errors: as receiveFrom(buffer); ENOBUFS (std::system_error) only when memory for
  // buffers runs out.
  //   for (;;) {
  //     weft::LentDatagram d = co_await socket.receiveFrom();
  //     co_await socket.sendTo(d.data, d.from);  // echo
  //   }
  ReceiveLentOperation receiveFrom() const noexcept {
    return {"receiveFrom on a UdpSocket", fd_};
  }

  // Connected sockets: send to the peer (EDESTADDRREQ when not connected), receive from it.
  SendOperation send(std::span<const std::byte> buffer) const noexcept {
    return IoOperationAwaitable("send on a UdpSocket", IoOpcode::kSend, fd_)
        .buffer(const_cast<std::byte*>(buffer.data()), buffer.size());
  }
  ReceiveFromOperation receive(std::span<std::byte> buffer) const noexcept {
    return ReceiveFromOperation("receive on a UdpSocket", fd_, buffer);
  }
  // receiveFrom() for a connected socket (`from` is the peer). Errors: as receiveFrom().
  ReceiveLentOperation receive() const noexcept {
    return {"receive on a UdpSocket", fd_};
  }

  // ---- Gathered datagrams; char and text buffers -----------------------------------------
  //
  // sendTo(buffers, to) and send(buffers) send ONE datagram made of the concatenation of
  // a list of buffers (a header and a payload, without copying them together), with one
  // sendmsg(2); they return its size. Empty buffers are skipped; an empty total sends an
  // empty datagram, as an empty buffer does.
  //   const std::span<const std::byte> parts[] = {header, payload};
  //   co_await socket.sendTo(parts, peer);
  // Preconditions: the list and the bytes stay valid until the await returns.
  // Errors: as sendTo(buffer) and send(buffer); also std::invalid_argument, from the
  // co_await and with nothing sent, for more than IOV_MAX (1024 on Linux) non-empty
  // buffers (a datagram cannot be split over several calls); std::bad_alloc for more
  // than 8.
  // Thread safety: as sendTo(buffer) and send(buffer).
  VectoredSendOperation<std::span<const std::span<const std::byte>>, SocketAddress>
  sendTo(std::span<const std::span<const std::byte>> buffers,
         const SocketAddress& to) const noexcept {
    return {"sendTo on a UdpSocket to", fd_, buffers, false, -1, to};
  }
  VectoredSendOperation<std::span<const std::span<const std::byte>>> send(
      std::span<const std::span<const std::byte>> buffers) const noexcept {
    return {"send on a UdpSocket", fd_, buffers, false, -1};
  }

  // Text and chars, as the byte forms (same results and errors): sendTo and send of text
  // (a string literal is sent without its terminating NUL), receiveFrom and receive into
  // a span of char (a char array, a std::string or std::vector<char>, at its size).
  SendToOperation sendTo(std::string_view text,
                                      const SocketAddress& to) const noexcept {
    return sendTo(std::as_bytes(std::span<const char>(text.data(), text.size())), to);
  }
  SendOperation send(std::string_view text) const noexcept {
    return send(std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  ReceiveFromOperation receiveFrom(std::span<char> buffer) const noexcept {
    return receiveFrom(std::as_writable_bytes(buffer));
  }
  ReceiveFromOperation receive(std::span<char> buffer) const noexcept {
    return receive(std::as_writable_bytes(buffer));
  }
  // ---- end of gathered datagrams; char and text buffers ----------------------------------

  // SO_BROADCAST. Errors: std::system_error; EBADF when closed.
  void setBroadcast(bool on);

  // getsockname / getpeername (ENOTCONN when not connected). Errors: std::system_error.
  SocketAddress localAddress() const;
  SocketAddress peerAddress() const;

  // Closes the socket now. Idempotent. Precondition: no operation in flight.
  void close() noexcept;
  bool isOpen() const noexcept { return fd_ >= 0; }
  int nativeHandle() const noexcept { return fd_; }
  // Gives up ownership of the socket (this one is closed, the fd is not): the caller
  // closes it. The event loops forget what they knew of it (IoLoop::retireDescriptor).
  // Precondition: no operation in flight. noexcept.
  int release() noexcept {
    const int fd = std::exchange(fd_, -1);
    IoLoop::retireDescriptor(fd);
    return fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace weft
