#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/detail/socket_ops.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/socket_address.h"

namespace weft {

namespace detail {

// A TcpStream read or write: its IoOperationAwaitable, except that an empty buffer
// completes at once with 0 without submitting anything (no system call, no wait). It
// still fails as any read or write does beforehand: EBADF on a closed stream,
// OperationCancelled when cancellation was requested already.
class StreamTransferAwaitable {
 public:
  StreamTransferAwaitable(const IoOperationAwaitable& operation, bool empty) noexcept
      : operation_(operation), empty_(empty) {}

  class Awaiter : public IoOperationAwaitable::Awaiter {
   public:
    Awaiter(const StreamTransferAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoOperationAwaitable::Awaiter(a.operation_, executor, token), empty_(a.empty_) {}

    bool await_ready() const { return IoOperationAwaitable::Awaiter::await_ready() || empty_; }
    std::size_t await_resume() {
      return empty_ ? 0 : IoOperationAwaitable::Awaiter::await_resume();
    }

   private:
    bool empty_;
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return Awaiter(*this, executor, token);
  }
  Awaiter operator co_await() const { return Awaiter(*this, nullptr, kNoCancellationToken); }

 private:
  IoOperationAwaitable operation_;
  bool empty_;
};

}  // namespace detail

// Thrown by TcpStream::readExactly when the peer ends the stream before the buffer is
// full. bytesRead() says how much of the buffer was filled. Not an IncompleteTransfer
// (which reports a failure part-way; see io/incomplete_transfer.h for why).
class EndOfStream : public std::runtime_error {
 public:
  explicit EndOfStream(std::size_t bytesRead)
      : std::runtime_error("weft: the peer ended the stream before the read was complete"),
        bytesRead_(bytesRead) {}
  std::size_t bytesRead() const noexcept { return bytesRead_; }

 private:
  std::size_t bytesRead_;
};

// TcpStream: a connected stream socket (TCP over IPv4/IPv6, or a Unix domain stream
// socket), read and written with awaitables on the event loop of the thread that awaits.
//
// Semantics:
//  - `co_await stream.read(buffer)` returns the number of bytes read, 0 at the end of the
//    stream; `write(buffer)` the number written (possibly fewer than asked: a partial
//    write). readExactly and writeAll loop until the whole buffer is done.
//  - An empty buffer (read, write, tryRead, tryWrite) transfers nothing and returns 0 at
//    once, as read(2) and write(2) of 0 bytes do: it never waits (for data, for room, or
//    behind another operation) and never takes a byte, and its 0 is not the end of the
//    stream. A closed stream still fails with EBADF, a cancelled coroutine with
//    OperationCancelled.
//  - Each await is one operation on the calling thread's event loop (ThreadPool gives
//    every worker one); the coroutine resumes on that thread. From a fiber:
//    `weft::await(stream.read(buffer))`.
//  - TCP streams have TCP_NODELAY set (as Go does): small writes go out at once.
//  - Cancellation: every await honours the coroutine's token (a Task's, withCancellation,
//    withTimeout). An operation already in the kernel is cancelled there; the await then
//    throws OperationCancelled once the kernel let go of the buffer, unless the operation
//    completed first: a read that got data returns it, nothing is lost. readExactly and
//    writeAll stopped part-way throw IncompleteTransfer, which says how much was done.
//  - Destroying the stream closes the socket. SIGPIPE is never raised (MSG_NOSIGNAL): a
//    write to a peer that closed fails with EPIPE or ECONNRESET.
//
// Preconditions: the buffer of an operation stays valid until its await returns. At most
// one read and one write in flight at a time is the usual use; several are served in
// order, each read's or write's bytes contiguous, but two readExactly or writeAll calls
// in flight may interleave at their partial transfers (serialize them, e.g. with a
// Mutex, when several coroutines write one stream). close() (and the destructor, and
// move-assignment) may come while operations wait, from any thread (a timeout handler
// closing a connection whose reader waits): each waiting operation ends with
// std::system_error ECANCELED ("the socket was closed while the operation waited") unless
// it completed first (a read that got data returns it), and the descriptor is closed when
// the last of them has ended, so no other socket can take its number meanwhile. close()
// must not race with the start of an operation (the closer knows it began); one started
// after close() fails with EBADF.
//
// Errors: std::system_error with the errno (ECONNRESET, EPIPE, ECONNREFUSED, ETIMEDOUT...)
// and a message naming the operation; EBADF for an operation on a closed stream; ECANCELED
// for one that waited when the stream was closed;
// EndOfStream from readExactly; OperationCancelled; ExecutorShutDown when the pool shuts
// down with the operation in flight; std::logic_error when awaited on a thread without an
// event loop. readExactly and writeAll throw IncompleteTransfer instead (its cause() one
// of the above) when they fail after transferring some of the buffer.
//
// Thread safety: distinct streams are independent. One stream may have a read in flight
// on one thread and a write on another; other members are not synchronised.
//
// Example:
//   weft::TcpStream stream = co_await weft::TcpStream::connect(weft::SocketAddress::parse("127.0.0.1:8080"));
//   co_await stream.writeAll("ping");
//   std::size_t n = co_await stream.read(buffer);
class TcpStream {
 public:
  // Not connected: isOpen() is false.
  TcpStream() noexcept = default;
  // Adopts `fd`, a connected non-blocking stream socket (as accept returns).
  explicit TcpStream(int fd) noexcept : fd_(fd) {}
  TcpStream(TcpStream&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        readTimeoutNs_(other.readTimeoutNs_),
        writeTimeoutNs_(other.writeTimeoutNs_) {}
  TcpStream& operator=(TcpStream&& other) noexcept;
  ~TcpStream();

  // Connects to `address` (IPv4, IPv6 or a Unix domain path).
  // Errors: std::system_error (ECONNREFUSED, ENETUNREACH, ...) naming the address;
  // cancellation as above.
  static Lazy<TcpStream> connect(SocketAddress address);

  // Reads at most buffer.size() bytes; for a non-empty buffer, 0 means the peer ended the
  // stream. An empty buffer returns 0 at once, as read(2) of 0 bytes does: nothing is
  // read or waited for, and that 0 says nothing of the end of the stream.
  detail::StreamTransferAwaitable read(std::span<std::byte> buffer) const noexcept {
    return {detail::IoOperationAwaitable("read from a TcpStream", IoOpcode::kReceive, fd_)
                .buffer(buffer.data(), buffer.size())
                .timeout(readTimeoutNs_),
            buffer.empty()};
  }
  detail::StreamTransferAwaitable read(void* data, std::size_t size) const noexcept {
    return read(std::span<std::byte>(static_cast<std::byte*>(data), size));
  }
  // Reads until `buffer` is full. Errors: EndOfStream if the stream ends first.
  //   Any other failure after some bytes were read (cancellation, withTimeout, the read
  //   time limit's ETIMEDOUT, ECONNRESET, ExecutorShutDown...) throws IncompleteTransfer:
  //   buffer[0, bytesTransferred()) holds them (a later read continues the stream from
  //   buffer[bytesTransferred()] on), and cause() is the failure. With nothing read, the
  //   failure propagates unchanged (withTimeout then throws TimeoutError).
  Lazy<void> readExactly(std::span<std::byte> buffer);

  // Writes at most buffer.size() bytes; returns how many were written (at least 1 for a
  // non-empty buffer). An empty buffer returns 0 at once, without waiting for room or
  // for writes issued before it.
  detail::StreamTransferAwaitable write(std::span<const std::byte> buffer) const noexcept {
    return {detail::IoOperationAwaitable("write to a TcpStream", IoOpcode::kSend, fd_)
                .buffer(const_cast<std::byte*>(buffer.data()), buffer.size())
                .timeout(writeTimeoutNs_),
            buffer.empty()};
  }
  detail::StreamTransferAwaitable write(const void* data, std::size_t size) const noexcept {
    return write(std::span<const std::byte>(static_cast<const std::byte*>(data), size));
  }
  // Writes all of `buffer`, however many partial writes it takes.
  //   Errors: a failure after some bytes were written (cancellation, withTimeout, the
  //   write time limit's ETIMEDOUT, EPIPE, ECONNRESET, ExecutorShutDown...) throws
  //   IncompleteTransfer: buffer[0, bytesTransferred()) was sent, and only
  //   buffer[bytesTransferred()..] may be sent again (retrying the whole buffer would
  //   duplicate the prefix on the wire). With nothing written, the failure propagates
  //   unchanged.
  Lazy<void> writeAll(std::span<const std::byte> buffer);
  Lazy<void> writeAll(std::string_view text);

  // Readiness, for servers that keep no buffer per idle connection (as tokio's
  // `readable()` + `try_read`): `co_await stream.readable()` waits until a read would not
  // block (data, the end of the stream, or an error is pending), then tryRead reads
  // without waiting into a buffer taken only then. writable() and tryWrite likewise.
  // Readiness is a hint: another reader may take the data first, so tryRead may still
  // find nothing (std::nullopt) and the caller waits again. Both waits honour
  // cancellation and the stream's read (write) timeout, failing with ETIMEDOUT; they
  // resume with 0.
  // Errors: as read() and write(): EBADF when closed, OperationCancelled, ExecutorShutDown.
  detail::IoOperationAwaitable readable() const noexcept {
    return detail::IoOperationAwaitable("wait until a TcpStream is readable",
                                        IoOpcode::kPollReadable, fd_)
        .timeout(readTimeoutNs_);
  }
  detail::IoOperationAwaitable writable() const noexcept {
    return detail::IoOperationAwaitable("wait until a TcpStream is writable",
                                        IoOpcode::kPollWritable, fd_)
        .timeout(writeTimeoutNs_);
  }
  // Reads at most buffer.size() bytes that are there now, without waiting and without the
  // event loop (any thread may call it): the bytes read, 0 at the end of the stream, or
  // std::nullopt when nothing is there yet. An empty buffer returns 0 at once (not the
  // end of the stream, as for read()), without a system call.
  // Errors: std::system_error with the errno (ECONNRESET...), EBADF when closed.
  std::optional<std::size_t> tryRead(std::span<std::byte> buffer) const;
  // Writes what fits now, without waiting (any thread): the bytes written (at least 1 for
  // a non-empty buffer), or std::nullopt when the socket's send buffer is full. An empty
  // buffer returns 0 at once, without a system call.
  // Errors: std::system_error (EPIPE, ECONNRESET...; never SIGPIPE), EBADF when closed.
  std::optional<std::size_t> tryWrite(std::span<const std::byte> buffer) const;

  // Ends our direction of the stream (the peer reads end of stream); reads still work.
  // Errors: std::system_error (ENOTCONN), EBADF when closed.
  void shutdownWrite();
  // Closes the socket. Idempotent. Operations waiting on it end as the class comment
  // says (the descriptor itself is closed once they have ended).
  void close() noexcept;
  bool isOpen() const noexcept { return fd_ >= 0; }
  int nativeHandle() const noexcept { return fd_; }
  // Gives up ownership of the socket (the stream is closed, the fd is not): the caller
  // closes it. The event loops forget what they knew of it (IoLoop::retireDescriptor), so
  // the number may be closed and reused freely; adopting the fd again (TcpStream(fd)) is
  // fine too. Precondition: no operation in flight. noexcept.
  int release() noexcept {
    const int fd = std::exchange(fd_, -1);
    IoLoop::retireDescriptor(fd);
    return fd;
  }

  // Per-stream time limits, as Go's read and write deadlines renewed before each call:
  // every later read (write) that waits longer than `limit` for data (for room) fails with
  // std::system_error ETIMEDOUT, once the kernel has let go of the buffer; a read that got
  // data first returns it. The stream stays usable. Zero or negative: no limit (the
  // default). Enforced by the event loop (io_uring: a linked timeout; epoll: the loop's
  // deadlines), with no timer thread and no allocation. noexcept: stores a number.
  void setReadTimeout(std::chrono::nanoseconds limit) noexcept {
    readTimeoutNs_ = limit.count() > 0 ? limit.count() : -1;
  }
  void setWriteTimeout(std::chrono::nanoseconds limit) noexcept {
    writeTimeoutNs_ = limit.count() > 0 ? limit.count() : -1;
  }

  // TCP_NODELAY (on by default for TCP) and SO_KEEPALIVE. Errors: std::system_error;
  // EBADF when closed; setNoDelay fails with EOPNOTSUPP on a Unix domain stream.
  void setNoDelay(bool on);
  void setKeepAlive(bool on);

  // getsockname / getpeername. Errors: std::system_error.
  SocketAddress localAddress() const;
  SocketAddress peerAddress() const;

 private:
  int fd_ = -1;
  std::int64_t readTimeoutNs_ = -1;
  std::int64_t writeTimeoutNs_ = -1;
};

}  // namespace weft
