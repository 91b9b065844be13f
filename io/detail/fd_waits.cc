#include "weft/io/detail/fd_waits.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace weft::detail {

namespace {

// The waits on one descriptor number.
struct Entry {
  std::atomic<bool> locked{false};
  bool closing = false;     // closeDescriptor() came while waits were pending
  FdWait* head = nullptr;   // the waits, newest first
};

// A two-level table indexed by descriptor number: 2^19 chunk pointers (4 MiB of
// zero-initialised memory that only costs pages where used) of 2^12 entries each, so every
// number up to INT_MAX has a place and a chunk is allocated the first time a number in
// its range waits.
constexpr std::size_t kChunkBits = 12;
constexpr std::size_t kChunkSize = std::size_t{1} << kChunkBits;
constexpr std::size_t kChunks = (std::size_t{1} << 31) >> kChunkBits;

std::atomic<Entry*> gChunks[kChunks];

Entry& entryFor(int fd) noexcept {
  const auto number = static_cast<std::size_t>(fd);
  std::atomic<Entry*>& slot = gChunks[number >> kChunkBits];
  // Acquire: pairs with the release of the thread that installed the chunk, so its
  // entries are seen constructed.
  Entry* chunk = slot.load(std::memory_order_acquire);
  if (chunk == nullptr) [[unlikely]] {
    Entry* fresh = new (std::nothrow) Entry[kChunkSize];
    if (fresh == nullptr) {
      std::fprintf(stderr, "weft: out of memory for the table of I/O waits\n");
      std::abort();
    }
    // acq_rel: publishes `fresh` (release), or reads the winner's chunk (acquire).
    if (slot.compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel)) {
      chunk = fresh;
    } else {
      delete[] fresh;
    }
  }
  return chunk[number & (kChunkSize - 1)];
}

// A spin lock held for a few pointer updates (and, by closeDescriptor, for the
// cancellation requests of the waits it ends).
class EntryLock {
 public:
  explicit EntryLock(Entry& entry) noexcept : entry_(entry) {
    // Acquire: sees what the previous holder wrote before its release.
    while (entry_.locked.exchange(true, std::memory_order_acquire)) {
      while (entry_.locked.load(std::memory_order_relaxed)) sched_yield();
    }
  }
  ~EntryLock() { entry_.locked.store(false, std::memory_order_release); }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

 private:
  Entry& entry_;
};

// Gives the number back to the kernel. Retired first: an epoll loop must not trust its
// registration for the number once another file may get it (IoLoop::retireDescriptor).
void retireAndClose(int fd) noexcept {
  IoLoop::retireDescriptor(fd);
  ::close(fd);
}

void cancelForClose(FdWait& wait) noexcept {
  wait.closed = true;
  wait.loop->cancel(*wait.op);
}

}  // namespace

void trackWait(FdWait& wait) noexcept {
  Entry& entry = entryFor(wait.op->fd);
  EntryLock lock(entry);
  wait.prev = nullptr;
  wait.next = entry.head;
  if (entry.head != nullptr) entry.head->prev = &wait;
  entry.head = &wait;
  if (entry.closing) cancelForClose(wait);
}

void untrackWait(FdWait& wait) noexcept {
  const int fd = wait.op->fd;
  Entry& entry = entryFor(fd);
  bool closeNow = false;
  {
    EntryLock lock(entry);
    (wait.prev == nullptr ? entry.head : wait.prev->next) = wait.next;
    if (wait.next != nullptr) wait.next->prev = wait.prev;
    wait.next = wait.prev = nullptr;
    if (entry.closing && entry.head == nullptr) {
      entry.closing = false;
      closeNow = true;
    }
  }
  // After the lock: once closed, the number may be reused and tracked by another thread.
  if (closeNow) retireAndClose(fd);
}

bool closeRequested(FdWait& wait) noexcept {
  Entry& entry = entryFor(wait.op->fd);
  EntryLock lock(entry);
  return wait.closed;
}

void closeDescriptor(int fd) noexcept {
  if (fd < 0) return;
  Entry& entry = entryFor(fd);
  {
    EntryLock lock(entry);
    if (entry.head != nullptr) {
      entry.closing = true;
      for (FdWait* wait = entry.head; wait != nullptr; wait = wait->next) cancelForClose(*wait);
      return;  // the last untrackWait closes it
    }
  }
  retireAndClose(fd);
}

}  // namespace weft::detail
