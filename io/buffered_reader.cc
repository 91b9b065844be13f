#include "weft/io/buffered_reader.h"

#include <algorithm>
#include <string>
#include <utility>

namespace weft {

namespace {

constexpr std::size_t kNotFound = std::string_view::npos;

// The end, as an offset in `next`, of the first match of `delimiter` that starts in
// `before` and ends in `next`; kNotFound if there is none. `before` holds no whole match,
// so such a match starts in its last delimiter.size() - 1 bytes: only those are looked at
// (the search never goes back over what was searched before).
std::size_t matchAcross(std::string_view before, std::string_view next,
                        std::string_view delimiter) noexcept {
  const std::size_t tail = std::min(before.size(), delimiter.size() - 1);
  for (std::size_t start = before.size() - tail; start < before.size(); ++start) {
    const std::string_view head = before.substr(start);  // shorter than the delimiter
    if (delimiter.substr(0, head.size()) != head) continue;
    const std::string_view rest = delimiter.substr(head.size());
    if (next.substr(0, rest.size()) == rest) return rest.size();
  }
  return kNotFound;
}

}  // namespace

FrameTooLarge::FrameTooLarge(std::size_t limit, std::size_t buffered)
    : std::length_error("weft: BufferedReader: a frame is longer than maxFrame (" +
                        std::to_string(limit) + " bytes)"),
      limit_(limit),
      buffered_(buffered) {}

// Marks the reader busy for the duration of one call (a coroutine's body: destroying a
// suspended call clears it too); a second call meanwhile is misuse.
class BufferedReader::CallGuard {
 public:
  CallGuard(BufferedReader& reader, const char* verb) : reader_(reader) {
    if (reader.busy_) {
      throw std::logic_error(std::string("weft: BufferedReader::") + verb +
                             " while another call on the same reader is in flight (one call "
                             "at a time: await each before the next)");
    }
    reader.busy_ = true;
  }
  ~CallGuard() { reader_.busy_ = false; }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  BufferedReader& reader_;
};

BufferedReader::BufferedReader(TcpStream& stream, std::size_t maxFrame)
    : stream_(&stream), maxFrame_(maxFrame) {
  if (maxFrame == 0) throw std::invalid_argument("weft: BufferedReader: maxFrame is 0");
}

std::string_view BufferedReader::buffered() const noexcept {
  return joinedSize() != 0 ? joinedView() : current_.text();
}

void BufferedReader::consume(std::size_t n) {
  if (busy_) {
    throw std::logic_error("weft: BufferedReader::consume while a call on the reader is in flight");
  }
  if (n > bufferedSize()) {
    throw std::out_of_range("weft: BufferedReader::consume of " + std::to_string(n) +
                            " bytes, more than the " + std::to_string(bufferedSize()) +
                            " buffered");
  }
  const std::size_t fromJoined = std::min(n, joinedSize());
  joinedStart_ += fromJoined;
  current_.consume(n - fromJoined);
}

// The start of every call: the views of the previous call expire, so what they alone kept
// goes: a joined frame's string (freed, not kept for the next one: an idle reader holds no
// memory) and a lent buffer that was all consumed (given back to the loop).
void BufferedReader::settle() noexcept {
  if (joinedSize() == 0 && !joined_.empty()) {
    std::string().swap(joined_);
    joinedStart_ = 0;
  }
  if (current_.empty()) current_.reset();
}

void BufferedReader::appendJoined(std::string_view bytes) {
  if (joinedStart_ != 0) {  // drop what was consumed (its views expired with settle())
    joined_.erase(0, joinedStart_);
    joinedStart_ = 0;
  }
  joined_.append(bytes);  // grows geometrically: each byte is copied once, amortised
}

void BufferedReader::joinCurrent() {
  appendJoined(current_.text());
  current_.reset();  // the lent buffer goes back to the loop at once
}

std::string_view BufferedReader::takeJoined(std::size_t n) noexcept {
  const std::string_view frame = std::string_view(joined_).substr(joinedStart_, n);
  joinedStart_ += n;
  return frame;
}

std::string_view BufferedReader::takeCurrent(std::size_t n) noexcept {
  const std::string_view frame = current_.text().substr(0, n);
  current_.consume(n);  // moves a pointer: the view stays valid
  return frame;
}

Lazy<std::optional<std::string_view>> BufferedReader::readUntil(std::string_view delimiter) {
  return readUntilDelimiter(delimiter, "readUntil", false);
}

Lazy<std::optional<std::string_view>> BufferedReader::readLine() {
  return readUntilDelimiter("\n", "readLine", true);
}

// The coroutines below keep only what must live across their receive (g++ gives every
// local of a coroutine a place in its frame, and a reader waiting in a call holds that
// frame): their searches and copies are the plain functions that follow them.

Lazy<std::optional<std::string_view>> BufferedReader::readUntilDelimiter(std::string_view delimiter,
                                                                         const char* verb,
                                                                         bool line) {
  CallGuard guard(*this, verb);
  if (delimiter.empty()) {
    throw std::invalid_argument(std::string("weft: BufferedReader::") + verb +
                                ": the delimiter is empty");
  }
  settle();
  std::optional<std::string_view> frame = frameInBuffered(delimiter);
  while (!frame) {
    current_ = co_await stream_->receive();  // on failure, what was joined stays
    if (current_.empty()) co_return endOfStream();
    frame = frameWithReceived(delimiter);
  }
  if (line) {
    frame->remove_suffix(1);  // "\n"
    if (frame->ends_with('\r')) frame->remove_suffix(1);
  }
  co_return frame;
}

// readUntil's search of what is buffered at the start of a call (one run of bytes,
// joined_'s or current_'s): the frame, or std::nullopt with what there is left in joined_
// (current_ empty) for the receives to extend.
std::optional<std::string_view> BufferedReader::frameInBuffered(std::string_view delimiter) {
  const bool joined = joinedSize() != 0;  // left by a call that failed: searched once more
  const std::string_view have = joined ? joinedView() : current_.text();
  const std::size_t at = have.find(delimiter);
  if (at != kNotFound ? at + delimiter.size() > maxFrame_ : have.size() >= maxFrame_) {
    throw FrameTooLarge(maxFrame_, bufferedSize());  // all of it stays buffered
  }
  if (at != kNotFound) {
    return joined ? takeJoined(at + delimiter.size())
                  : takeCurrent(at + delimiter.size());  // the common case: no copy
  }
  if (!joined) joinCurrent();
  return std::nullopt;
}

// readUntil's search after a receive into current_, joined_ holding the frame's start
// (which contains no delimiter): only the new bytes are searched, with the few where a
// delimiter may straddle joined_ and them. The frame, or std::nullopt with all of it
// joined for the next receive.
std::optional<std::string_view> BufferedReader::frameWithReceived(std::string_view delimiter) {
  const std::string_view before = joinedView();
  const std::string_view next = current_.text();
  std::size_t end = matchAcross(before, next, delimiter);
  if (end == kNotFound) {
    const std::size_t at = next.find(delimiter);
    if (at != kNotFound) end = at + delimiter.size();
  }
  const std::size_t total = before.size() + (end != kNotFound ? end : next.size());
  if (end != kNotFound ? total > maxFrame_ : total >= maxFrame_) {
    const std::size_t held = bufferedSize();
    joinCurrent();  // all of it stays buffered
    throw FrameTooLarge(maxFrame_, held);
  }
  if (end == kNotFound) {
    joinCurrent();
    return std::nullopt;
  }
  if (before.empty()) return takeCurrent(end);  // the frame lies in one receive: no copy
  appendJoined(next.substr(0, end));
  current_.consume(end);
  if (current_.empty()) current_.reset();  // the frame is all in joined_
  return takeJoined(joinedSize());
}

// After a receive that found the end of the stream: std::nullopt between frames, else
// EndOfStream with the bytes of the frame that arrived (they stay in joined_).
std::optional<std::string_view> BufferedReader::endOfStream() const {
  if (joinedSize() != 0) throw EndOfStream(joinedSize());
  return std::nullopt;
}

Lazy<std::optional<std::string_view>> BufferedReader::readExactly(std::size_t n) {
  CallGuard guard(*this, "readExactly");
  if (n > maxFrame_) throw FrameTooLarge(maxFrame_, bufferedSize());
  settle();
  std::optional<std::string_view> frame = exactlyInBuffered(n);
  while (!frame) {
    current_ = co_await stream_->receive();  // on failure, what was joined stays
    if (current_.empty()) co_return endOfStream();
    frame = exactlyWithReceived(n);
  }
  co_return frame;
}

// readExactly's part of what is buffered at the start of a call: the n bytes, or
// std::nullopt with what there is left in joined_ (current_ empty).
std::optional<std::string_view> BufferedReader::exactlyInBuffered(std::size_t n) {
  if (joinedSize() >= n) return takeJoined(n);
  if (joinedSize() == 0 && current_.size() >= n) return takeCurrent(n);  // no copy
  if (!current_.empty()) joinCurrent();
  return std::nullopt;
}

// readExactly after a receive into current_: the n bytes, or std::nullopt with all of
// them joined for the next receive.
std::optional<std::string_view> BufferedReader::exactlyWithReceived(std::size_t n) {
  if (joinedSize() == 0 && current_.size() >= n) return takeCurrent(n);  // no copy
  const std::size_t take = std::min(n - joinedSize(), current_.size());
  appendJoined(current_.text().substr(0, take));
  current_.consume(take);
  if (current_.empty()) current_.reset();  // given back before waiting again
  if (joinedSize() < n) return std::nullopt;
  return takeJoined(n);
}

Lazy<std::string_view> BufferedReader::peek(std::size_t atLeast) {
  CallGuard guard(*this, "peek");
  if (atLeast > maxFrame_) throw FrameTooLarge(maxFrame_, bufferedSize());
  settle();
  while (bufferedSize() < atLeast) {
    if (!current_.empty()) joinCurrent();    // the next receive goes after it
    current_ = co_await stream_->receive();  // on failure, what was joined stays
    if (current_.empty()) break;             // the end of the stream: what there is
    if (joinedSize() != 0) joinCurrent();    // a first receive stays where it is (no copy)
  }
  co_return buffered();
}

}  // namespace weft
