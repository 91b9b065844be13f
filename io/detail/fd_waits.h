#pragma once

#include <atomic>
#include <cstddef>

#include "weft/executors/io_loop.h"

namespace weft::detail {

// FdWait: one I/O operation that waits on a descriptor, as the process-wide table of
// waits knows it (an IoAwaiter holds one).
//
// Why the table: closing a descriptor while an operation waits on it must neither hang
// that operation (io_uring keeps the file alive for the request, so a read waits for data
// that never comes; epoll forgets the registration, so the waiter is never woken) nor let
// the number's next owner inherit it (the epoll loop keys its waiters and registrations
// by number: a new socket with the same number would queue behind a dead waiter, or have
// its bytes read into the dead waiter's buffer). So closeDescriptor() cancels every wait
// on the descriptor, and the number is given back to the kernel (close(2)) only when the
// last of them has ended: until then no other socket can get it. Go's poller has the same
// rule (the fd is closed when its last reference is dropped). Every close here retires the
// number first (IoLoop::retireDescriptor), so that no epoll loop keeps trusting the
// registration it made for the closed file.
struct FdWait {
  IoLoop* loop = nullptr;       // the loop the operation is in flight on
  IoOperation* op = nullptr;    // its operation (op->fd is the descriptor)
  FdWait* next = nullptr;       // the table's list of waits on op->fd
  FdWait* prev = nullptr;
  bool closed = false;          // closeDescriptor() cancelled it (read after it ended)
};

// Records `wait` (loop, op set; op in flight on loop) as waiting on wait.op->fd. If the
// descriptor is being closed already (a close that came while the operation was being
// started), the operation is cancelled at once and `closed` is set.
// noexcept: a spin lock and a list insertion; the table's storage is allocated on first
// use of a range of descriptor numbers, and weft aborts with a message if that fails.
// Thread safety: any thread; between trackWait and untrackWait, `wait` must stay alive.
void trackWait(FdWait& wait) noexcept;

// Removes `wait` (the operation has ended: completed, failed, cancelled or withdrawn).
// If a close of its descriptor waits for it and it was the last wait, closes the
// descriptor now. noexcept: close(2)'s failure leaves nothing to do.
// Thread safety: any thread (in practice the loop's).
void untrackWait(FdWait& wait) noexcept;

// Whether closeDescriptor() has cancelled `wait` (its `closed`), read under the table's
// lock: for an awaiter that submits its operation again while tracked (a `whole`
// operation's rest on a loop that ignores IoOperation::whole), whose earlier cancellation
// found nothing in flight. noexcept: a spin lock. Thread safety: any thread, while `wait`
// is tracked.
bool closeRequested(FdWait& wait) noexcept;

// How many streams have an inbox (stream_reads.cc), process-wide: while none has, no
// read needs to look for one (epoll, or io_uring with multishot receive left out).
extern std::atomic<std::size_t> gStreamInboxes;
bool streamHasInbox(int fd) noexcept;

// Whether a stream's reads on `fd` go through its inbox (stream_reads.cc: a receive() on
// io_uring kept a receive armed, whose arrivals read(), readable() and tryRead must see
// first). Once true it stays so until the descriptor is closed or released. noexcept: a
// load, and two more where inboxes exist. Thread safety: any thread; a hint unless the
// caller's reads are ordered after the receive() that made it true (one reader at a
// time, as streams are read).
inline bool streamReadsActive(int fd) noexcept {
  // Relaxed: the receive() that gave `fd` its inbox happened before this read (see above),
  // which orders the count's increment before it too.
  return gStreamInboxes.load(std::memory_order_relaxed) != 0 && streamHasInbox(fd);
}

// Gives up `fd` (TcpStream::release()): ends a receive its stream kept armed and forgets
// its inbox, then retires the number (IoLoop::retireDescriptor). Bytes the stream received
// and no read returned cannot be handed over with the descriptor: weft reports that as a
// misuse and aborts (bytes that arrive while the armed receive is being cancelled are
// dropped). Precondition: no operation in flight on `fd`. noexcept. Does nothing for fd < 0.
void releaseDescriptor(int fd) noexcept;

// Closes `fd` (a descriptor that weft's awaitables use): at once when no operation
// waits on it; otherwise every waiting operation is cancelled (each ends with its own
// result if it completed first, else as cancelled, with FdWait::closed set) and the
// descriptor is closed when the last of them has ended. A stream's armed receive
// (stream_reads.cc) is one of them; its inbox, with the buffers it kept, is freed with the
// descriptor. Does nothing for fd < 0.
// noexcept: cancellation requests and close(2) cannot fail in a way worth reporting.
// Thread safety: any thread, concurrently with the operations on `fd` that wait.
void closeDescriptor(int fd) noexcept;

}  // namespace weft::detail
