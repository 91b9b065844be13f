#include "weft/io/detail/fd_waits.h"

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "weft/io/detail/fd_entry.h"
#include "weft/io/detail/stream_inbox.h"

namespace weft::detail {

namespace {

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

// Whether the descriptor's stream has its receive in the kernel (armed, or cancelled and
// its last completion still to come): a wait of the descriptor's that is not in its list
// (stream_inbox.h), which a close waits for as for the others; so is a released stream's
// receive that is still ending (FdEntry::orphanedRequest). With the entry's lock held.
bool requestInFlightLocked(const FdEntry& entry) noexcept {
  if (entry.orphanedRequest) return true;
  const StreamInbox* in = entry.inbox.load(std::memory_order_relaxed);  // under the lock
  return in != nullptr && in->state != StreamInbox::State::kIdle;
}

}  // namespace

constinit std::atomic<FdEntry*> gFdChunks[kFdChunks] = {};

FdEntry& fdEntryFirstUse(int fd) noexcept {
  const auto number = static_cast<std::size_t>(fd);
  std::atomic<FdEntry*>& slot = gFdChunks[number >> kFdChunkBits];
  FdEntry* chunk = slot.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    FdEntry* fresh = new (std::nothrow) FdEntry[kFdChunkSize];
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
  return chunk[number & (kFdChunkSize - 1)];
}

void DeferredClose::run() noexcept {
  if (fd >= 0) retireAndClose(fd);
  if (inbox != nullptr) destroyInbox(inbox);
}

void trackLocked(FdEntry& entry, FdWait& wait) noexcept {
  wait.prev = nullptr;
  wait.next = entry.head;
  if (entry.head != nullptr) entry.head->prev = &wait;
  entry.head = &wait;
  if (entry.closing) cancelForClose(wait);
}

void unlinkLocked(FdEntry& entry, FdWait& wait) noexcept {
  (wait.prev == nullptr ? entry.head : wait.prev->next) = wait.next;
  if (wait.next != nullptr) wait.next->prev = wait.prev;
  wait.next = wait.prev = nullptr;
}

DeferredClose closeIfLastLocked(FdEntry& entry, int fd) noexcept {
  DeferredClose deferred;
  if (entry.head == nullptr && !requestInFlightLocked(entry)) {
    entry.closing = false;
    deferred.fd = fd;
    deferred.inbox = entry.inbox.exchange(nullptr, std::memory_order_relaxed);  // under the lock
  }
  return deferred;
}

void trackWait(FdWait& wait) noexcept {
  FdEntry& entry = fdEntry(wait.op->fd);
  FdEntryLock lock(entry);
  trackLocked(entry, wait);
}

void untrackWait(FdWait& wait) noexcept {
  FdEntry& entry = fdEntry(wait.op->fd);
  DeferredClose deferred;
  {
    FdEntryLock lock(entry);
    deferred = untrackLocked(entry, wait);
  }
  // After the lock: once closed, the number may be reused and tracked by another thread.
  deferred.run();
}

bool closeRequested(FdWait& wait) noexcept {
  FdEntry& entry = fdEntry(wait.op->fd);
  FdEntryLock lock(entry);
  return wait.closed;
}

constinit std::atomic<std::size_t> gStreamInboxes{0};

bool streamHasInbox(int fd) noexcept {
  // Acquire: pairs with the release that published the inbox (see FdEntry::inbox).
  return fd >= 0 && fdEntry(fd).inbox.load(std::memory_order_acquire) != nullptr;
}

void closeDescriptor(int fd) noexcept {
  if (fd < 0) return;
  FdEntry& entry = fdEntry(fd);
  DeferredClose deferred;
  {
    FdEntryLock lock(entry);
    if (entry.head != nullptr || requestInFlightLocked(entry)) {
      entry.closing = true;
      for (FdWait* wait = entry.head; wait != nullptr; wait = wait->next) cancelForClose(*wait);
      // The stream's armed receive ends too (one that is ending already was cancelled).
      if (StreamInbox* in = entry.inbox.load(std::memory_order_relaxed)) StreamReads::disarm(*in);
      return;  // the last untrackWait, or the request's last completion, closes it
    }
    deferred.fd = fd;
    deferred.inbox = entry.inbox.exchange(nullptr, std::memory_order_relaxed);  // under the lock
  }
  deferred.run();
}

}  // namespace weft::detail
