#pragma once

#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string_view>

namespace weft {

// IncompleteTransfer: thrown by a composed I/O operation (one that loops over partial
// transfers: TcpStream::readExactly and writeAll, File::readExactlyAt and writeAllAt) that
// had already transferred at least one byte when it failed. It says how many bytes were
// transferred, and why the operation stopped (cause()).
//
// Semantics:
//  - The rule: a composed operation that has transferred n >= 1 bytes and then fails in
//    any way (cancellation, withTimeout, the stream's time limit, an I/O error such as
//    ECONNRESET, the executor's shutdown) throws IncompleteTransfer with
//    bytesTransferred() == n. Those n bytes are buffer[0, n): read into it, or taken
//    from it and written (sent to the peer, written to the file). For a vectored writeAll
//    (several buffers) the buffer is their concatenation, and n may fall inside any one.
//    Nothing else of the buffer was transferred, so a reader continues with buffer[n..]
//    and a writer retries buffer[n..] only, without losing or duplicating a byte. When
//    nothing was transferred, the failure propagates unchanged (OperationCancelled,
//    std::system_error, ExecutorShutDown...).
//  - It is neither OperationCancelled nor TimeoutError: withTimeout passes it through
//    unchanged, so its TimeoutError keeps meaning "the work obtained nothing", and a
//    caller that asked for a timeout and got IncompleteTransfer knows what it obtained.
//    The cancellation or time limit that stopped the transfer is cause().
//  - The cause is kept as a std::nested_exception: cause() returns it, and
//    std::rethrow_if_nested(e) rethrows it (so generic printers of nested exceptions show
//    it). what() names the operation, both counts and the cause's what():
//    "weft: readExactly from a TcpStream stopped after 10 of 16 bytes: weft: operation
//    cancelled".
//  - EndOfStream (TcpStream::readExactly) and EndOfFile (File::readExactlyAt) are not
//    IncompleteTransfers: they report the end of the data, not a failure (there is no
//    cause), they are thrown with bytesRead() == 0 too, and the stream or file has
//    nothing more to give, whereas after an IncompleteTransfer caused by a timeout the
//    rest may still come. Each carries its own count (bytesRead()).
//
// Preconditions: construct it while handling the exception that stopped the transfer (in
// a catch block, as std::throw_with_nested does): that exception becomes the cause.
//
// Errors: the constructor throws std::logic_error when no exception is being handled
// (nothing to name as the cause), std::bad_alloc when the message cannot be built.
//
// Thread safety: an immutable value, as std::runtime_error.
//
// Example:
//   try {
//     co_await weft::withTimeout(stream.readExactly(header), 5s);
//   } catch (const weft::IncompleteTransfer& e) {
//     // header[0, e.bytesTransferred()) was read; e.cause() says why it stopped
//   }
class IncompleteTransfer : public std::runtime_error, public std::nested_exception {
 public:
  // `operation` names what stopped ("readExactly from a TcpStream"); `bytesTransferred`
  // of `bytesRequested` bytes were done. The cause is the exception being handled.
  IncompleteTransfer(std::string_view operation, std::size_t bytesTransferred,
                     std::size_t bytesRequested);

  // The bytes transferred before the failure: buffer[0, bytesTransferred()).
  std::size_t bytesTransferred() const noexcept { return bytesTransferred_; }
  // The size of the whole buffer the operation was asked to transfer.
  std::size_t bytesRequested() const noexcept { return bytesRequested_; }
  // The exception that stopped the transfer (never null).
  std::exception_ptr cause() const noexcept { return nested_ptr(); }

 private:
  std::size_t bytesTransferred_;
  std::size_t bytesRequested_;
};

}  // namespace weft
