#pragma once

#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/detail/socket_ops.h"
#include "weft/io/detail/vectored_ops.h"
#include "weft/io/detail/whole_transfer.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/io_operation_awaitable.h"
#include "weft/io/socket_address.h"

namespace weft {

namespace detail {

// A TcpStream read or write: its IoOperationAwaitable, except that an empty buffer
// completes at once with 0 without submitting anything (no system call, no wait). It
// still fails as any read or write does beforehand: EBADF on a closed stream,
// OperationCancelled when cancellation was requested already.
class StreamTransferAwaitable : public IoAwaitable<StreamTransferAwaitable> {
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
//    write). readExactly and writeAll go on until the whole buffer is done, as one
//    operation that resumes the coroutine once.
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
// order (on one thread), each read's or write's bytes contiguous, and so are
// readExactly's and writeAll's of one buffer, whole: none lets an operation issued after
// it move a byte before it is done. A vectored writeAll (several buffers) may have other
// writes interleaved at its partial transfers (serialize those, e.g. with a Mutex, when
// several coroutines write one stream). close() (and the destructor, and
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
  // The awaitables the operations return (co_await in a Lazy/Task, weft::await in a
  // fiber), named so that code can hold one; what each resumes with is said at the
  // operation. ReadinessOperation is the public IoOperationAwaitable.
  using TransferOperation = detail::StreamTransferAwaitable;  // read(), write(): std::size_t
  using ReceiveOperation = detail::ReceiveLentAwaitable;      // receive(): LentBuffer
  using ReadinessOperation = IoOperationAwaitable;            // readable(), writable()
  template <class Buffers>
  using VectoredWriteOperation = detail::VectoredSendAwaitable<Buffers>;  // write(a, b, ...)

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
  TransferOperation read(std::span<std::byte> buffer) const noexcept {
    return {IoOperationAwaitable("read from a TcpStream", IoOpcode::kReceive, fd_)
                .buffer(buffer.data(), buffer.size())
                .timeout(readTimeoutNs_),
            buffer.empty()};
  }
  TransferOperation read(void* data, std::size_t size) const noexcept {
    return read(std::span<std::byte>(static_cast<std::byte*>(data), size));
  }
  // Receives what has arrived, into a buffer the event loop lends: the LentBuffer holds
  // at least one byte (at most 64 KiB), or none at the end of the stream. The loop picks
  // the buffer only once data is there, so a connection waiting here holds no buffer;
  // the LentBuffer gives it back when destroyed (any thread, any time). The plain way to
  // write a server:
  //   for (;;) {
  //     weft::LentBuffer data = co_await stream.receive();
  //     if (data.empty()) break;
  //     co_await stream.writeAll(data);
  //   }
  // It takes its place among the reads (issue order) and honours the read time limit,
  // cancellation and close as read() does: a receive that got data returns it, even when
  // a cancellation raced it. On io_uring the first receive() arms one multishot receive
  // for the stream and keeps it armed: what arrives while no receive() waits is kept, in
  // order (at most 4 buffers or 256 KiB; then the socket holds the peer back), and the
  // next read of any kind takes it first, without a system call; a receive() on another
  // worker moves the armed receive there (io/detail/stream_reads.cc, docs/io.md).
  // Errors: as read(); ENOBUFS (std::system_error) only when memory for buffers runs out.
  ReceiveOperation receive() const noexcept {
    return {fd_, readTimeoutNs_};
  }

  // Reads until `buffer` is full, however many partial reads it takes: one operation on
  //   the loop, which goes on after each partial read in the read's place (no read issued
  //   after it takes a byte before it is done). An empty buffer completes at once (nothing
  //   is checked or waited for). Returns a Lazy (see writeAll below for why).
  //   Errors: EndOfStream if the stream ends first.
  //   Any other failure after some bytes were read (cancellation, withTimeout, the read
  //   time limit's ETIMEDOUT, ECONNRESET, ExecutorShutDown...) throws IncompleteTransfer:
  //   buffer[0, bytesTransferred()) holds them (a later read continues the stream from
  //   buffer[bytesTransferred()] on), and cause() is the failure. With nothing read, the
  //   failure propagates unchanged (withTimeout then throws TimeoutError). The read time
  //   limit applies to each wait for data, as it does to each read().
  Lazy<void> readExactly(std::span<std::byte> buffer) const {
    return detail::awaitWhole({"readExactly from a TcpStream", "read from a TcpStream",
                                  IoOpcode::kReceive, fd_, buffer.data(), buffer.size(),
                                  readTimeoutNs_});
  }

  // Writes at most buffer.size() bytes; returns how many were written (at least 1 for a
  // non-empty buffer). An empty buffer returns 0 at once, without waiting for room or
  // for writes issued before it.
  TransferOperation write(std::span<const std::byte> buffer) const noexcept {
    return {IoOperationAwaitable("write to a TcpStream", IoOpcode::kSend, fd_)
                .buffer(const_cast<std::byte*>(buffer.data()), buffer.size())
                .timeout(writeTimeoutNs_),
            buffer.empty()};
  }
  TransferOperation write(const void* data, std::size_t size) const noexcept {
    return write(std::span<const std::byte>(static_cast<const std::byte*>(data), size));
  }
  // Writes all of `buffer`, however many partial writes it takes: one operation on the
  //   loop, which goes on after each partial write in the write's place, so no write
  //   issued after it (by this coroutine or another) puts a byte in between. An empty
  //   buffer completes at once (nothing is checked or waited for). The write time limit
  //   applies to each wait for room, as it does to each write().
  //   Returns a Lazy: the operation (about 400 bytes) lives in the Lazy's frame while the
  //   write runs, not in the frame of every coroutine that calls writeAll (an idle
  //   connection of the plain echo loop holds 0.95 KiB, not 1.44). writeAll takes the
  //   stream's descriptor and write time limit when it is called, as write() does; the
  //   bytes must stay valid until the await returns.
  //   Errors: EBADF when the stream is closed (non-empty buffer). A failure after some
  //   bytes were written (cancellation, withTimeout, the write time limit's ETIMEDOUT,
  //   EPIPE, ECONNRESET, ExecutorShutDown, a close while it waits...) throws
  //   IncompleteTransfer: buffer[0, bytesTransferred()) was sent, and only
  //   buffer[bytesTransferred()..] may be sent again (retrying the whole buffer would
  //   duplicate the prefix on the wire). With nothing written, the failure propagates
  //   unchanged.
  //   Example: co_await stream.writeAll(reply);   // weft::await(stream.writeAll(reply))
  Lazy<void> writeAll(std::span<const std::byte> buffer) const {
    return detail::awaitWhole({"writeAll to a TcpStream", "write to a TcpStream",
                                  IoOpcode::kSend, fd_, const_cast<std::byte*>(buffer.data()),
                                  buffer.size(), writeTimeoutNs_});
  }
  Lazy<void> writeAll(std::string_view text) const {
    return writeAll(std::as_bytes(std::span<const char>(text.data(), text.size())));
  }

  // Readiness, for servers that keep no buffer per idle connection (as tokio's
  // `readable()` + `try_read`): `co_await stream.readable()` waits until a read would not
  // block (data, the end of the stream, or an error is pending), then tryRead reads
  // without waiting into a buffer taken only then. writable() and tryWrite likewise.
  // Readiness is a hint: another reader may take the data first, so tryRead may still
  // find nothing (std::nullopt) and the caller waits again. Both waits honour
  // cancellation and the stream's read (write) timeout, failing with ETIMEDOUT; they
  // resume with 0.
  // Errors: as read() and write(): EBADF when closed, OperationCancelled, ExecutorShutDown.
  ReadinessOperation readable() const noexcept {
    return IoOperationAwaitable("wait until a TcpStream is readable",
                                        IoOpcode::kPollReadable, fd_)
        .timeout(readTimeoutNs_);
  }
  ReadinessOperation writable() const noexcept {
    return IoOperationAwaitable("wait until a TcpStream is writable",
                                        IoOpcode::kPollWritable, fd_)
        .timeout(writeTimeoutNs_);
  }
  // Reads at most buffer.size() bytes that are there now, without waiting and without the
  // event loop (any thread may call it): the bytes read, 0 at the end of the stream, or
  // std::nullopt when nothing is there yet. Bytes that receive()'s armed receive kept
  // (io_uring) come first; while it is armed, nothing else is there for tryRead (it returns
  // std::nullopt until an arrival is kept: readable() waits for one). An empty buffer returns 0 at once (not the
  // end of the stream, as for read()), without a system call.
  // Errors: std::system_error with the errno (ECONNRESET...), EBADF when closed.
  std::optional<std::size_t> tryRead(std::span<std::byte> buffer) const;
  // Writes what fits now, without waiting (any thread): the bytes written (at least 1 for
  // a non-empty buffer), or std::nullopt when the socket's send buffer is full. An empty
  // buffer returns 0 at once, without a system call.
  // Errors: std::system_error (EPIPE, ECONNRESET...; never SIGPIPE), EBADF when closed.
  std::optional<std::size_t> tryWrite(std::span<const std::byte> buffer) const;

  // ---- Vectored writes; char and text buffers -------------------------------------------
  //
  // A vectored write sends several buffers as one stream of bytes, their concatenation,
  // with one sendmsg(2) per partial transfer: a header and a body go out without being
  // copied together and without a system call (or, with TCP_NODELAY, a packet) each.
  // Either name the buffers (two or more; each bytes or text, as detail::WriteBuffer
  // says: a std::vector<std::byte>, a std::span<const std::byte>, a std::string, a string
  // literal...), or pass a list of them made at run time (a span of byte spans, or of
  // std::string_views). Empty buffers are skipped.
  //   co_await stream.writeAll(header, body);
  //   co_await stream.writeAll("HTTP/1.1 200 OK\r\nContent-Length: ", length, "\r\n\r\n", body);
  //   std::vector<std::span<const std::byte>> parts = ...;  co_await stream.writeAll(parts);
  // (No std::initializer_list forms: g++ 12 cannot compile a braced list inside a co_await
  // expression, and a write's list would dangle once the full expression ends.)
  // Thread safety: as write() and writeAll() of one buffer.
  //
  // write(buffers...): one sendmsg of what fits now; returns how many bytes were written,
  //   counted from the start of the first buffer (at least 1 when there are any; a partial
  //   write may end inside any buffer). An empty total returns 0 at once, as write() of an
  //   empty buffer does (a closed stream is still EBADF, a cancelled coroutine still
  //   OperationCancelled).
  //   Preconditions: the bytes, and a list passed as a span, stay valid until the await
  //   returns (the named buffers' addresses and sizes are taken when write() is called).
  //   Errors: as write(); also std::invalid_argument, from the co_await and with nothing
  //   sent, for more than IOV_MAX (1024 on Linux) non-empty buffers, which one sendmsg
  //   does not take (writeAll takes any number); std::bad_alloc for more than 8.
  template <detail::WriteBuffer... Buffers>
    requires(sizeof...(Buffers) >= 2)
  VectoredWriteOperation<std::array<iovec, sizeof...(Buffers)>> write(
      const Buffers&... buffers) const noexcept {
    return {"write to a TcpStream", fd_, {detail::toIovec(buffers)...}, true, writeTimeoutNs_};
  }
  VectoredWriteOperation<std::span<const std::span<const std::byte>>> write(
      std::span<const std::span<const std::byte>> buffers) const noexcept {
    return {"write to a TcpStream", fd_, buffers, true, writeTimeoutNs_};
  }
  VectoredWriteOperation<std::span<const std::string_view>> write(
      std::span<const std::string_view> texts) const noexcept {
    return {"write to a TcpStream", fd_, texts, true, writeTimeoutNs_};
  }
  // writeAll(buffers...): writes the whole concatenation, one sendmsg per partial
  //   transfer, each going on from where the last stopped (inside a buffer if need be).
  //   Any number of buffers: more than IOV_MAX go out IOV_MAX at a time. The list is
  //   copied when writeAll is called, so a span passed may be a temporary even when the
  //   Lazy is awaited later (spawned, or passed along); the bytes must stay valid until the
  //   Lazy completes. An empty total completes at once, as writeAll of an empty buffer.
  //   Errors: as writeAll(buffer), with bytesTransferred() counted in the concatenation:
  //   a failure after n >= 1 bytes throws IncompleteTransfer(n), the first n bytes of the
  //   concatenation were sent, and only the rest may be sent again. The call itself
  //   throws std::bad_alloc when the list (more than 8 buffers) cannot be copied.
  template <detail::WriteBuffer... Buffers>
    requires(sizeof...(Buffers) >= 2)
  Lazy<void> writeAll(const Buffers&... buffers) {
    const std::array<iovec, sizeof...(Buffers)> list{detail::toIovec(buffers)...};
    return writeAllBuffers(detail::IovecList(std::span<const iovec>(list)));
  }
  Lazy<void> writeAll(std::span<const std::span<const std::byte>> buffers);
  Lazy<void> writeAll(std::span<const std::string_view> texts);

  // Chars and text, as the byte forms above do it (same results, errors and thread
  // safety), so that no caller spells std::as_writable_bytes: read, tryRead and
  // readExactly into a span of char (a char array, a std::string or std::vector<char>,
  // at its current size); write and tryWrite of text (a string literal is written
  // without its terminating NUL; writeAll(std::string_view) is with writeAll above).
  // Text is a std::string_view: a char array given as text is taken as a C string (up to
  // its first NUL), so pass chars that are not one as std::string_view(data, size).
  TransferOperation read(std::span<char> buffer) const noexcept {
    return read(std::as_writable_bytes(buffer));
  }
  std::optional<std::size_t> tryRead(std::span<char> buffer) const {
    return tryRead(std::as_writable_bytes(buffer));
  }
  Lazy<void> readExactly(std::span<char> buffer) const {
    return readExactly(std::as_writable_bytes(buffer));
  }
  TransferOperation write(std::string_view text) const noexcept {
    return write(std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  std::optional<std::size_t> tryWrite(std::string_view text) const {
    return tryWrite(std::as_bytes(std::span<const char>(text.data(), text.size())));
  }

  // Reads at most `max` bytes, as read() does, and appends them to `out`; returns how
  // many (0 for max > 0: the end of the stream). A line or message reader's loop:
  //   while (line.find('\n') == std::string::npos)
  //     if (co_await stream.readSome(line, 4096) == 0) break;  // the end of the stream
  // `out` grows by `max` during the read (zero-filled) and is cut back to what was read
  // after; if the read fails, `out` is as it was. max == 0 returns 0 at once, as read()
  // of an empty buffer does (not the end of the stream).
  // Preconditions: `out` stays valid, and unused by others, until the Lazy completes.
  // Errors: as read(); std::length_error or std::bad_alloc from growing `out`.
  Lazy<std::size_t> readSome(std::string& out, std::size_t max);
  // ---- end of vectored writes; char and text buffers ------------------------------------

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
  // fine too. A receive that receive() kept armed (io_uring) is cancelled; bytes it had
  // kept for the next read cannot go with the descriptor: weft reports that misuse and
  // aborts (read them first), and so it does if bytes arrive while the request is being
  // cancelled (they are never dropped silently): release a stream read with receive() only
  // when its peer sends nothing more, or read it with read(). Precondition: no operation
  // in flight. noexcept.
  int release() noexcept {
    const int fd = std::exchange(fd_, -1);
    detail::releaseDescriptor(fd);
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
  // writeAll of a list of buffers, copied (see writeAll(buffers)).
  Lazy<void> writeAllBuffers(detail::IovecList buffers);

  int fd_ = -1;
  std::int64_t readTimeoutNs_ = -1;
  std::int64_t writeTimeoutNs_ = -1;
};

}  // namespace weft
