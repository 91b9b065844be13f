#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "weft/coro/lazy.h"
#include "weft/executors/lent_buffer.h"
#include "weft/io/tcp_stream.h"

namespace weft {

// Thrown by BufferedReader when a frame would be longer than the reader's maxFrame (a
// line that never ends, a length prefix beyond the limit). limit() is maxFrame;
// buffered() how many bytes the reader held when it gave up. Those bytes stay buffered
// (nothing is dropped); the usual answer is to close the connection.
class FrameTooLarge : public std::length_error {
 public:
  FrameTooLarge(std::size_t limit, std::size_t buffered);
  std::size_t limit() const noexcept { return limit_; }
  std::size_t buffered() const noexcept { return buffered_; }

 private:
  std::size_t limit_;
  std::size_t buffered_;
};

// BufferedReader: reads a TcpStream the way protocols are written, frame by frame (Go's
// bufio.Reader, Asio's read_until, tokio-util's codecs): readUntil a delimiter, readLine,
// readExactly n bytes, peek at what has arrived and consume it.
//
// It holds no buffer of its own. It keeps the LentBuffer of the last receive()
// (executors/lent_buffer.h) until all of it is consumed, and returns frames that lie in
// it as views into it, without a copy: pipelined frames that came in one receive are all
// served from that receive. A frame that spans several receives is joined in a string
// that grows geometrically (each byte copied once; the search for the delimiter goes on
// from where it stopped, never from the start, except that a call after a cancelled one
// searches what that one left once more); that string is freed once the frame has been
// consumed. So a reader waiting for the next frame, everything before it consumed, holds
// no lent buffer and no heap memory: an idle connection costs the reader (about 100
// bytes) and the waiting call's coroutine frame, not a read buffer.
//
// Frames and lifetimes: readUntil, readLine, readExactly and peek return a
// std::string_view into the reader, valid until the next of these calls on the reader,
// or its destruction (consume() and buffered() leave it valid). Copy what must outlive
// that. Until that next call the reader keeps the buffer the view points into.
//
// End of the stream: std::nullopt when the stream ends cleanly between frames (nothing
// buffered); EndOfStream (io/tcp_stream.h) when it ends inside a frame, bytesRead()
// saying how many bytes of it arrived (they stay buffered: buffered() shows them).
//
// Limit: no frame (delimiter included) may be longer than maxFrame bytes (a constructor
// argument, 64 KiB by default); a longer one throws FrameTooLarge instead of growing the
// reader without bound. At most maxFrame bytes plus one receive (64 KiB) are buffered.
//
// Cancellation and time limits: every call honours the coroutine's cancellation
// (withTimeout, withCancellation, a Task's token) and the stream's read time limit
// (setReadTimeout), which end it with OperationCancelled, TimeoutError or
// std::system_error ETIMEDOUT as a receive() does. Whatever had arrived stays buffered for
// the next call: no byte is lost, and the failure is not wrapped (contrast
// TcpStream::readExactly's IncompleteTransfer: here nothing left the reader).
//
// Preconditions: the stream outlives the reader, the reader outlives its calls (a call in
// flight refers to it), and once a reader reads a stream, the stream is read only through
// it (bytes the reader buffered are not in the socket any more); writing the stream
// directly is fine. A delimiter stays valid until its call completes (a string literal is
// the usual delimiter).
//
// Errors: as TcpStream::receive() (std::system_error ECONNRESET..., OperationCancelled,
// ExecutorShutDown...); EndOfStream and FrameTooLarge as above; std::invalid_argument for
// an empty delimiter or a zero maxFrame; std::out_of_range from consume() of more than is
// buffered; std::logic_error for a call while another call on the same reader is in
// flight; std::bad_alloc.
//
// Thread safety: one call at a time (await each before the next), from one coroutine or
// fiber at a time, like the stream's reads. Distinct readers are independent.
//
// Example:
//   weft::BufferedReader reader(stream);
//   while (std::optional<std::string_view> line = co_await reader.readLine()) {
//     co_await stream.writeAll(answer(*line));
//   }
class BufferedReader {
 public:
  static constexpr std::size_t kDefaultMaxFrame = 64 * 1024;

  // A reader of `stream` (which must outlive it), with frames of at most `maxFrame` bytes.
  // Holds nothing until the first call. Errors: std::invalid_argument for maxFrame 0.
  explicit BufferedReader(TcpStream& stream, std::size_t maxFrame = kDefaultMaxFrame);

  // Neither copied nor moved: frames point into it, and it refers to its stream.
  BufferedReader(const BufferedReader&) = delete;
  BufferedReader& operator=(const BufferedReader&) = delete;

  // The next frame: the bytes up to and including the first `delimiter` (e.g. "\r\n\r\n"
  // for an HTTP header), receiving until it arrives. std::nullopt at the end of the stream
  // with nothing buffered. Errors: EndOfStream, FrameTooLarge, as the class comment says.
  Lazy<std::optional<std::string_view>> readUntil(std::string_view delimiter);

  // The next line, without its "\n" or "\r\n" (the limit counts them). As readUntil("\n").
  Lazy<std::optional<std::string_view>> readLine();

  // The next `n` bytes (a length-prefixed body, a fixed header), receiving until they are
  // all there; n == 0 returns an empty view at once. std::nullopt at the end of the stream
  // with nothing buffered. Errors: FrameTooLarge for n > maxFrame (at once, nothing read);
  // EndOfStream when the stream ends after some of them.
  Lazy<std::optional<std::string_view>> readExactly(std::size_t n);

  // What is buffered, without consuming it, after receiving until at least `atLeast`
  // bytes are (none when that many are already there): a custom decoder's view. Fewer at
  // the end of the stream (empty: nothing more will come). Consume what was decoded with
  // consume(). Errors: FrameTooLarge for atLeast > maxFrame.
  Lazy<std::string_view> peek(std::size_t atLeast = 1);

  // Drops the first `n` buffered bytes (what a decoder has used). Frames already returned
  // stay valid. Errors: std::out_of_range for n > buffered().size(); std::logic_error while
  // a call is in flight.
  void consume(std::size_t n);

  // What is buffered now, not yet returned or consumed (no receive; empty when nothing
  // is): e.g. to see whether another whole request arrived with the last one. Valid as a
  // frame is. noexcept: returns a view.
  std::string_view buffered() const noexcept;

  std::size_t maxFrame() const noexcept { return maxFrame_; }
  TcpStream& stream() const noexcept { return *stream_; }

 private:
  class CallGuard;

  Lazy<std::optional<std::string_view>> readUntilDelimiter(std::string_view delimiter,
                                                           const char* verb, bool line);
  std::optional<std::string_view> frameInBuffered(std::string_view delimiter);
  std::optional<std::string_view> frameWithReceived(std::string_view delimiter);
  std::optional<std::string_view> exactlyInBuffered(std::size_t n);
  std::optional<std::string_view> exactlyWithReceived(std::size_t n);
  std::optional<std::string_view> endOfStream() const;
  void settle() noexcept;
  std::size_t joinedSize() const noexcept { return joined_.size() - joinedStart_; }
  std::string_view joinedView() const noexcept {
    return std::string_view(joined_).substr(joinedStart_);
  }
  std::size_t bufferedSize() const noexcept { return joinedSize() + current_.size(); }
  void appendJoined(std::string_view bytes);
  void joinCurrent();
  std::string_view takeJoined(std::size_t n) noexcept;
  std::string_view takeCurrent(std::size_t n) noexcept;

  TcpStream* stream_;
  std::size_t maxFrame_;
  // The bytes buffered are joined_[joinedStart_..] (a frame being joined across receives)
  // followed by current_ (the rest of the last receive); between calls at most one of the
  // two is non-empty. joined_[..joinedStart_] and the consumed bytes before current_ are
  // kept until the next call only for the views returned.
  std::string joined_;
  std::size_t joinedStart_ = 0;
  LentBuffer current_;
  bool busy_ = false;  // a call is in flight
};

}  // namespace weft
