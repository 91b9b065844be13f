// The stream inbox (io/detail/stream_inbox.h) seen from outside an awaiter: TcpStream's
// tryRead (readInbox) and release (releaseDescriptor), its destruction, and the count of
// rings of kept arrivals for tests. How the inbox works: io/detail/stream_reads.cc.

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "weft/io/detail/fd_entry.h"
#include "weft/io/detail/stream_inbox.h"
#include "weft/io/detail/stream_reads.h"

namespace weft::detail {

// The rings of kept arrivals that exist (keptArrivalRings).
std::atomic<std::size_t> gKeptArrivalRings{0};

void destroyInbox(StreamInbox* inbox) noexcept { delete inbox; }

// ---- outside awaiters: tryRead, release ----------------------------------------------

std::size_t keptArrivalRings() noexcept {
  return gKeptArrivalRings.load(std::memory_order_relaxed);
}

InboxRead readInbox(int fd, std::span<std::byte> buffer, std::size_t& n, int& error) noexcept {
  FdEntry& entry = fdEntry(fd);
  FdEntryLock lock(entry);
  StreamInbox* in = entry.inbox.load(std::memory_order_relaxed);
  if (in == nullptr) return InboxRead::kSocket;
  if (in->count() != 0) {
    n = StreamReads::copyOut(*in, buffer.data(), buffer.size());
    return InboxRead::kBytes;
  }
  if (in->hasFinal) {
    error = -static_cast<int>(StreamReads::takeFinal(*in));
    return InboxRead::kFinal;
  }
  // A request armed (its arrivals come first) or readers waiting (they go first).
  if (in->state != StreamInbox::State::kIdle || in->head != nullptr) return InboxRead::kNothing;
  return InboxRead::kSocket;
}

void releaseDescriptor(int fd) noexcept {
  if (fd < 0) return;
  FdEntry& entry = fdEntry(fd);
  StreamInbox* drop = nullptr;
  {
    FdEntryLock lock(entry);
    if (StreamInbox* in = entry.inbox.load(std::memory_order_relaxed); in != nullptr) {
      if (in->count() != 0 || in->head != nullptr) {
        std::fprintf(stderr,
                     "weft: TcpStream::release() of descriptor %d while %s: on io_uring, "
                     "receive() keeps a receive armed whose arrivals wait for the next read, "
                     "and they cannot be handed over with the descriptor. Read them first, "
                     "or use read() on a stream that is to be released\n",
                     fd,
                     in->head != nullptr ? "a read waits on it"
                                         : "bytes it received were not read yet");
        std::abort();
      }
      entry.inbox.store(nullptr, std::memory_order_relaxed);  // under the lock
      if (in->state == StreamInbox::State::kIdle) {
        drop = in;
      } else {
        in->orphaned = true;  // its last completion frees it
        entry.orphanedRequest = true;  // a read in flight until then (FdEntry)
        StreamReads::disarm(*in);
      }
    }
  }
  destroyInbox(drop);
  IoLoop::retireDescriptor(fd);
}

}  // namespace weft::detail
