#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>

#include "weft/io/detail/fd_waits.h"

namespace weft::detail {

struct StreamInbox;

// FdEntry: what io/ knows of one descriptor number, in the process-wide table that
// fd_waits.cc keeps (indexed by number): the operations waiting on it (FdWait, for
// closeDescriptor) and, for a stream whose receive() kept a receive armed, its inbox
// (stream_inbox.h). One spin lock guards both. Private to io/detail (fd_waits.cc and
// stream_reads.cc).
struct FdEntry {
  std::atomic<bool> locked{false};
  bool closing = false;     // closeDescriptor() came while waits were pending
  // A released stream's receive (TcpStream::release()) is still ending: its inbox is no
  // longer `inbox`, and until its last completion it counts as a read in flight (a new
  // owner's receive() arms none beside it) and as a wait that a close waits for. At most
  // one: a new owner cannot arm, and so cannot release, another while it is set.
  bool orphanedRequest = false;
  FdWait* head = nullptr;   // the waits, newest first
  // The stream's inbox, or nullptr. Written under the lock; read without it only as a
  // hint (streamReadsActive): acquire/release so that a reader that sees it sees it built.
  std::atomic<StreamInbox*> inbox{nullptr};
};

// The table: 2^19 chunk pointers (4 MiB of zero-initialised memory that only costs pages
// where used) of 2^12 entries each, so every number up to INT_MAX has a place and a chunk
// is allocated the first time a number in its range is used (fdEntryFirstUse).
inline constexpr std::size_t kFdChunkBits = 12;
inline constexpr std::size_t kFdChunkSize = std::size_t{1} << kFdChunkBits;
inline constexpr std::size_t kFdChunks = (std::size_t{1} << 31) >> kFdChunkBits;
extern std::atomic<FdEntry*> gFdChunks[kFdChunks];
FdEntry& fdEntryFirstUse(int fd) noexcept;

// The entry of `fd` (>= 0). noexcept: weft aborts with a message when the table cannot
// get the memory for a new range of numbers.
inline FdEntry& fdEntry(int fd) noexcept {
  const auto number = static_cast<std::size_t>(fd);
  // Acquire: pairs with the release of the thread that installed the chunk, so its
  // entries are seen constructed.
  FdEntry* chunk = gFdChunks[number >> kFdChunkBits].load(std::memory_order_acquire);
  if (chunk == nullptr) [[unlikely]] return fdEntryFirstUse(fd);
  return chunk[number & (kFdChunkSize - 1)];
}

// Holds an entry's spin lock (held for a few pointer updates, and for the cancellation
// requests and submissions of the operations it decides on).
class FdEntryLock {
 public:
  explicit FdEntryLock(FdEntry& entry) noexcept : entry_(entry) {
    // Acquire: sees what the previous holder wrote before its release.
    while (entry_.locked.exchange(true, std::memory_order_acquire)) {
      while (entry_.locked.load(std::memory_order_relaxed)) sched_yield();
    }
  }
  ~FdEntryLock() { entry_.locked.store(false, std::memory_order_release); }
  FdEntryLock(const FdEntryLock&) = delete;
  FdEntryLock& operator=(const FdEntryLock&) = delete;

 private:
  FdEntry& entry_;
};

// What is left to do, after the entry's lock is released, when the last wait on a
// descriptor being closed has ended: close it (retired first) and free its inbox (whose
// lent buffers go back to their loops). run() does it; a default one does nothing.
struct DeferredClose {
  int fd = -1;
  StreamInbox* inbox = nullptr;
  void run() noexcept;
};

// trackWait and untrackWait with the entry's lock held. untrackLocked returns what to do
// once the lock is released (the descriptor's close, if this was the last wait of one). It
// is unlinkLocked (the wait leaves the list) then closeIfDoneLocked (the close decision,
// for descriptor number `fd`), which a caller may separate to decide, in between, with the
// entry still closing.
void trackLocked(FdEntry& entry, FdWait& wait) noexcept;
void unlinkLocked(FdEntry& entry, FdWait& wait) noexcept;
// closeIfDoneLocked's work once the entry is closing (out of line: every wait that ends
// asks, and almost none finds a close pending).
[[nodiscard]] DeferredClose closeIfLastLocked(FdEntry& entry, int fd) noexcept;
[[nodiscard]] inline DeferredClose closeIfDoneLocked(FdEntry& entry, int fd) noexcept {
  if (!entry.closing) [[likely]] return {};
  return closeIfLastLocked(entry, fd);
}
[[nodiscard]] inline DeferredClose untrackLocked(FdEntry& entry, FdWait& wait) noexcept {
  unlinkLocked(entry, wait);
  return closeIfDoneLocked(entry, wait.op->fd);
}

// Frees an inbox (stream_reads.cc): its queued bytes' buffers go back. Any thread.
void destroyInbox(StreamInbox* inbox) noexcept;

}  // namespace weft::detail
