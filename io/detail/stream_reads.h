#pragma once

#include <cstddef>
#include <span>

namespace weft::detail {

// What TcpStream::tryRead finds in its stream's inbox (stream_reads.cc), when the stream
// has one (streamReadsActive): bytes (copied out), the stream's end or failure, nothing it
// may take now (a receive is armed, whose arrivals come first, or reads wait, which go
// first), or nothing in the way of reading the socket itself.
enum class InboxRead : unsigned char { kSocket, kNothing, kBytes, kFinal };

// For tryRead of `buffer` (non-empty) on descriptor `fd`: kBytes sets `n` (>= 1); kFinal
// sets `error` (0 for the end of the stream, else an errno to report, once).
// noexcept: a copy under the inbox's lock. Thread safety: any thread.
InboxRead readInbox(int fd, std::span<std::byte> buffer, std::size_t& n, int& error) noexcept;

// How many streams' inboxes hold a ring of kept arrivals, process-wide: a ring exists only
// while arrivals wait in it for a read (stream_reads.cc), so an idle stream holds none. For
// tests. noexcept: a relaxed load. Thread safety: any thread (a snapshot).
std::size_t keptArrivalRings() noexcept;

}  // namespace weft::detail
