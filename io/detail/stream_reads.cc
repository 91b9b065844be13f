// A stream's reads on a loop that keeps a receive armed (IoLoop::multishotReceive():
// io_uring's multishot recv). This file holds how they work (below) and StreamReads, the
// readers and the request; io/detail/stream_inbox.h declares the inbox,
// stream_read_waits.cc holds IoAwaiter's stream path and stream_inbox.cc the inbox seen
// from outside an awaiter.
//
// The inbox. The first receive() without a time limit of a stream on such a loop gives the
// stream an inbox, in the table of waits (FdEntry::inbox, under the entry's lock), which
// lives until the descriptor is closed (or released). A receive() with a time limit on a
// stream that has none arms nothing: it is a single receive of its own, as on a loop that
// keeps none (IoAwaiter::readsStream), so that a stream read only with time limits holds
// neither an inbox nor a second slot in the loop (its reader's kWait beside the request):
// docs/design/2026-11-idle-connection-memory.md. The inbox holds:
//  - at most one request (IoArmedReceive, IoLoop::armReceive) armed in the kernel, by the
//    loop of the receive() that armed it; each arrival is a completion on that loop;
//  - the arrivals no read has taken yet, in order, and after them the stream's end or
//    failure (the request's last completion): the next read takes them at once, without a
//    system call. An arrival that a waiting receive() can take is handed to it without
//    being kept; the ring that keeps the others is allocated for the first one kept and
//    freed when the last is taken, so that an idle stream holds no ring;
//  - the readers waiting, in the order they came.
//
// Readers. Only the first waiting reader (the head) acts; those behind it wait (parked)
// until it has its result, so reads are served in the order they were issued and a
// stream never has two receives in the kernel. The head, on its own loop's thread
// (activate):
//  - takes from the inbox when something is there: receive() the first arrival (its
//    LentBuffer as it came), read() copies as much as fits (readExactly as much as there
//    is, then goes on below for the rest), readable() completes;
//  - else receive() arms a request on its loop when none is armed (unless another read of
//    the descriptor is in flight outside the inbox: then a single-shot receive of its own),
//    and waits for an arrival;
//  - read() and readable() find no request: their own operation goes to the loop as
//    always (the head while it is there). read() finding one armed cancels it (nothing is
//    reordered: its arrivals until the end come first) and waits for it to end; readable()
//    waits for the next arrival instead, leaving it armed.
//
// Hand-over. A receive() whose head is on another loop than the armed request's (its
// coroutine moved to another worker) cancels that request and waits on its own loop; the
// arrivals that come until the request ends are its (in order), and when the request has
// ended it arms a new one on its own loop. A receive() therefore always completes on the
// loop of the thread that awaited it, and the request follows its reader.
//
// How a reader waits. Directly (kDirect: no operation at all; the request's completion on
// the same thread hands it its arrival and resumes it) when it is the head, on the
// request's loop, with no time limit: the plain echo loop's case, the common one. Its
// cancellation (IoAwaiter::cancelStreamRead, from any thread, under the lock) cancels the
// request: the request's last completion then finds the reader's token cancelled and ends
// it with -ECANCELED (activate), after handing it any arrival that came first; the
// arrivals after it stay for the next read. A direct wait costs no operation, slot or
// list entry in the loop, which matters most when thousands of connections each wait
// (their parked operations' loop state is cold memory by the time each is touched again).
// Otherwise parked (kParked): its operation becomes a kWait
// on its own loop, which carries its time limit, its cancellation and closeDescriptor's
// (it is tracked as a wait on the descriptor), and is completed (cancelled) by whoever
// has something for it: the request's completion (on its loop's thread, perhaps another)
// gives it its arrival under the lock and wakes it, and its own completion then lands the
// result on its loop.
// A head whose own operation went to the loop is kKernel until that completes.
//
// Bound. Arrivals kept while no read waits pin the loop's buffers: past kInboxBuffers of
// them (or kInboxBytes) the request is cancelled, and the socket's own buffer, then TCP's
// window, hold the rest back until a receive() has emptied the inbox and arms again.
//
// Ends. The request ends by itself at the end of the stream, on an error, or when the
// loop's buffers ran out (the loop then receives with a plain recv into a buffer of its
// own, so that no byte is skipped, and that is its last arrival): what it received is
// kept in order; the next receive() arms again. Cancelled (the bound, a read(), a hand-
// over, close, the loop's shutdown), it ends with what arrived before. close() cancels it
// like every wait on the descriptor (it is not in the descriptor's list of waits, which
// would cost an idle stream an FdWait: closeDescriptor finds it through the inbox, and a
// released stream's through FdEntry::orphanedRequest) and the descriptor is closed, and
// the inbox freed with the buffers it held, when the last wait and the request have
// ended; a direct reader then ends with ECANCELED, and one of a loop that shut down with
// ExecutorShutDown.
//
// Thread safety: everything in an inbox is read and written under its entry's lock; a
// reader's own operation is only submitted, withdrawn and completed on its loop's thread.

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "weft/io/detail/fd_entry.h"
#include "weft/io/detail/stream_inbox.h"
#include "weft/io/io_awaiter.h"

namespace weft::detail {

namespace {

// The operations that take bytes (or readiness) from a socket's receive side.
bool isRead(IoOpcode opcode) noexcept {
  switch (opcode) {
    case IoOpcode::kReceive:
    case IoOpcode::kReceiveMessage:
    case IoOpcode::kPollReadable:
    case IoOpcode::kReceiveLent:
    case IoOpcode::kReceiveMessageLent:
      return true;
    default:
      return false;
  }
}

// Bytes the armed receive took from the socket after TcpStream::release() gave the
// descriptor away: they cannot follow it, and dropping them would corrupt the new owner's
// stream silently. Reported, and the process aborts (the misuse rule).
[[noreturn]] void lostAfterRelease(int fd, std::int64_t bytes) noexcept {
  std::fprintf(stderr,
               "weft: %lld bytes arrived on descriptor %d after TcpStream::release(): the "
               "receive that receive() kept armed (io_uring) took them while it was being "
               "cancelled, and they cannot follow the descriptor. Release a stream read "
               "with receive() only when its peer sends nothing more, or read it with read()\n",
               static_cast<long long>(bytes), fd);
  std::abort();
}

}  // namespace

// The stream's end or failure, taken (later reads ask the socket again, which reports
// the end again; a failure is reported once, as by the socket).
std::int64_t StreamReads::takeFinal(StreamInbox& in) noexcept {
  in.hasFinal = false;
  return in.final;
}

// Copies arrivals into [data, data + size) (a part of the first one may stay). Returns
// the bytes copied.
std::size_t StreamReads::copyOut(StreamInbox& in, void* data, std::size_t size) noexcept {
  auto* out = static_cast<std::byte*>(data);
  std::size_t copied = 0;
  while (copied < size && in.count() != 0) {
    LentBuffer& buffer = in.front();
    const std::size_t n = std::min(size - copied, buffer.size());
    std::memcpy(out + copied, buffer.data(), n);
    copied += n;
    if (n == buffer.size()) {
      in.popFront();  // given back to its loop
    } else {
      in.consumeFront(n);
    }
  }
  return copied;
}

// `r` leaves the readers (done, or gone); if it was the head, the next one is woken to
// act (see the top). Returns true (for activate's callers: done).
bool StreamReads::leave(StreamInbox& in, IoAwaiter& r) noexcept {
  const bool wasHead = in.head == &r;
  in.unlink(r);
  r.reader_.mode = kNotReading;
  r.inFlight_ = false;
  if (wasHead && in.head != nullptr) wake(*in.head);
  return true;
}

// Wakes a parked reader (from any thread): its kWait completes on its loop, where it
// looks at the inbox again. A direct reader is only ever woken by the request's own
// completions, on its thread; a kKernel one by its operation.
void StreamReads::wake(IoAwaiter& r) noexcept {
  if (r.reader_.mode != kParked) return;
  r.reader_.retry = true;
  r.fdWait_.loop->cancel(r.op_);  // under the lock: `r` cannot complete meanwhile
}

// Cancels the armed request: its arrivals until its last completion still come.
void StreamReads::disarm(StreamInbox& in) noexcept {
  if (in.state != State::kArmed) return;
  in.state = State::kEnding;
  in.loop()->cancelArmed(in);
}

// Whether a read of the descriptor is in flight outside the inbox (issued before it
// existed): the head then receives with an operation of its own, ordered after it on
// the same loop, rather than arming a request that the kernel would serve beside it.
bool StreamReads::otherReadInFlight(const FdEntry& entry) noexcept {
  if (entry.orphanedRequest) return true;  // a released stream's receive, still ending
  for (const FdWait* wait = entry.head; wait != nullptr; wait = wait->next) {
    if (isRead(wait->op->opcode)) return true;
  }
  return false;
}

// Arms a request on `loop`. 0 when armed; else the loop refused it at once: its result
// (-EOPNOTSUPP: the loop keeps no requests after all; -ECANCELED after its shutdown).
int StreamReads::arm(StreamInbox& in, IoLoop& loop) noexcept {
  in.flags = 0;  // the inbox is its stream's request (its fd set when it was made)
  in.complete = &StreamReads::onRequest;
  if (const int refused = loop.armReceive(in); refused != 0) return refused;
  // Not tracked as a wait on the descriptor: closeDescriptor finds it through the entry's
  // inbox (requestInFlightLocked), and activate, the only caller, never arms once a close
  // has come (entry.closing).
  in.state = State::kArmed;
  in.requestLoop = &loop;
  return 0;
}

// Submits the operation of `r` (its opcode set) to `loop` as a wait on the descriptor,
// known to closeDescriptor(). False while it waits; true when the loop completed it at
// once (done: its result is the loop's; its own opcode restored).
bool StreamReads::submitTracked(FdEntry& entry, StreamInbox& in, IoAwaiter& r,
                                IoLoop& loop) noexcept {
  if (loop.submit(r.op_)) {
    r.op_.opcode = r.reader_.opcode;
    return leave(in, r);
  }
  r.inFlight_ = true;
  r.fdWait_.loop = &loop;
  r.fdWait_.op = &r.op_;
  trackLocked(entry, r.fdWait_);
  return false;
}

// Parks `r` on `loop`: its operation becomes a kWait there (see the top). At once when
// the loop shut down (-ECANCELED) or has no kWait.
bool StreamReads::park(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
  r.reader_.mode = kParked;
  r.reader_.retry = false;
  r.reader_.served = false;
  r.op_.opcode = IoOpcode::kWait;
  return submitTracked(entry, in, r, loop);
}

// The head waits for the inbox: directly when it may (see the top), else parked.
bool StreamReads::wait(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
  if (in.loop() == &loop && r.op_.timeoutNs < 0) {
    r.reader_.mode = kDirect;
    r.fdWait_.loop = &loop;
    r.inFlight_ = true;
    return false;
  }
  return park(entry, in, r, loop);
}

// The head's own operation goes to `loop` (it stays the head until it completes); epoll
// tries it first, so it may be done at once.
bool StreamReads::submitOwn(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
  r.reader_.mode = kKernel;
  r.op_.opcode = r.reader_.opcode;
  return submitTracked(entry, in, r, loop);
}

// The head `r` acts, on its loop's thread (`loop`): see the top. True when it is done
// (its result in its operation; it has left the readers), false while it waits.
bool StreamReads::activate(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
  IoOperation& op = r.op_;
  const IoOpcode opcode = r.reader_.opcode;
  if (entry.closing) {  // a close came: the wait ends as the close's
    op.result = -ECANCELED;
    r.fdWait_.closed = true;
    return leave(in, r);
  }
  if (in.count() != 0 || in.hasFinal) {
    if (opcode == IoOpcode::kPollReadable) {
      op.result = 0;
      return leave(in, r);
    }
    if (in.count() == 0) {
      op.result = takeFinal(in);
      return leave(in, r);
    }
    if (opcode == IoOpcode::kReceiveLent) {
      op.lent = in.popFront();
      op.result = static_cast<std::int64_t>(op.lent.size());
      ++in.handouts;
      return leave(in, r);
    }
    const std::size_t n = copyOut(in, op.buffer, op.length);  // kReceive
    if (!op.whole || n == op.length) {
      op.result = static_cast<std::int64_t>(n);
      return leave(in, r);
    }
    op.buffer = static_cast<std::byte*>(op.buffer) + n;  // readExactly: the rest from the
    op.length -= n;                                      // socket, as a `whole` goes on
    if (in.hasFinal) {
      op.result = takeFinal(in);
      return leave(in, r);
    }
  }
  // Nothing to take: it would wait. A cancellation that came meanwhile stops it here
  // (its callback, which has run, found no wait to stop, or stopped one that has ended:
  // the request's, for a direct wait).
  if (r.token_->isCancellationRequested()) [[unlikely]] {
    op.result = -ECANCELED;
    return leave(in, r);
  }
  if (in.state == State::kIdle) {
    if (opcode == IoOpcode::kReceiveLent && loop.multishotReceive() &&
        !otherReadInFlight(entry)) {
      const int armed = arm(in, loop);
      if (armed == 0) return wait(entry, in, r, loop);
      if (armed != -EOPNOTSUPP) {
        op.result = armed;
        op.loopShutDown = armed == -ECANCELED;  // armReceive's answer after a shutdown
        return leave(in, r);
      }
    }
    return submitOwn(entry, in, r, loop);
  }
  // A request is armed (or ending). read() needs it to end first; so does a receive()
  // on another loop (the hand-over).
  if (opcode == IoOpcode::kReceive || (opcode == IoOpcode::kReceiveLent && in.loop() != &loop)) {
    disarm(in);
  }
  return wait(entry, in, r, loop);
}

// Gives the head `h` (receive() or readable(), parked or direct) its result from the
// inbox, on the request's thread: for a receive(), `arrival` when there is one (the
// request's, which nothing kept comes before: handed over without being kept), else
// the first arrival kept, else the stream's end. A parked one is woken to land it on
// its loop.
void StreamReads::serve(StreamInbox& in, IoAwaiter& h, LentBuffer* arrival) noexcept {
  Reader& reader = h.reader_;
  std::int64_t result = 0;
  if (reader.opcode == IoOpcode::kReceiveLent) {
    if (arrival != nullptr) {
      h.op_.lent = std::move(*arrival);
      result = static_cast<std::int64_t>(h.op_.lent.size());
      reader.handout = ++in.handouts;
    } else if (in.count() != 0) {
      h.op_.lent = in.popFront();
      result = static_cast<std::int64_t>(h.op_.lent.size());
      reader.handout = ++in.handouts;
    } else {
      result = takeFinal(in);
    }
  }
  in.unlink(h);
  if (in.head != nullptr) wake(*in.head);
  if (reader.mode == kDirect) {  // on this thread: the caller resumes it
    h.op_.result = result;
    reader.mode = kNotReading;
    h.inFlight_ = false;
    return;
  }
  reader.result = result;
  reader.served = true;
  h.fdWait_.loop->cancel(h.op_);  // its kWait: `h` cannot complete before the lock is released
}

// After the request delivered (an arrival, or its end): the readers take what they can,
// in order. `ended`: the request has ended (`shutDown`: by its loop's shutdown). Sets
// `direct` to a direct reader to resume once the lock is released (at most one: a direct
// reader is one that found no other waiting).
void StreamReads::serveReaders(FdEntry& entry, StreamInbox& in, IoAwaiter*& direct, bool ended,
                               bool shutDown) noexcept {
  while (IoAwaiter* h = in.head) {
    Reader& reader = h->reader_;
    if (reader.mode == kKernel) return;  // its own operation decides
    const bool something = in.count() != 0 || in.hasFinal;
    if (something && reader.opcode != IoOpcode::kReceive) {
      const bool wasDirect = reader.mode == kDirect;
      serve(in, *h);
      if (wasDirect) direct = h;
      continue;
    }
    if (!something && !ended) break;  // waits for the next arrival
    if (reader.mode == kParked) {
      wake(*h);  // read() copies on its own thread; anyone acts anew after the end
      break;
    }
    // Direct, on this thread (the request's, which has just ended or has bytes for a
    // read()).
    if (ended && shutDown) {
      h->op_.result = -ECANCELED;
      h->op_.loopShutDown = true;
      leave(in, *h);
      direct = h;
      continue;
    }
    if (activate(entry, in, *h, *h->fdWait_.loop)) {
      direct = h;
      continue;
    }
    break;
  }
  if (in.state == State::kArmed && in.head == nullptr &&
      (in.count() >= kInboxBuffers || in.keptBytes() >= kInboxBytes)) {
    disarm(in);  // the bound: the socket holds the rest back
  }
}

// The request's completions (IoArmedReceive::complete), on its loop's thread.
void StreamReads::onRequest(IoArmedReceive& request, IoArmedReceive::Completion& c) noexcept {
  StreamInbox* in = static_cast<StreamInbox*>(&request);  // the inbox is its request
  FdEntry& entry = fdEntry(in->fd);
  IoAwaiter* direct = nullptr;
  DeferredClose deferred;
  bool destroy = false;
  {
    FdEntryLock lock(entry);
    IoAwaiter* h = in->head;
    if (c.more && h != nullptr && h == in->tail && h->reader_.mode == kDirect &&
        h->reader_.opcode == IoOpcode::kReceiveLent && in->count() == 0) [[likely]] {
      // The plain loop's receive waits directly, alone: the arrival is its (serve's way,
      // in short).
      h->op_.lent = std::move(c.received);
      h->op_.result = c.result;
      h->reader_.mode = kNotReading;
      h->inFlight_ = false;
      ++in->handouts;
      in->head = in->tail = nullptr;
      direct = h;
    } else if (c.more && h != nullptr && h->reader_.mode == kParked &&
               h->reader_.opcode == IoOpcode::kReceiveLent && in->count() == 0 && !in->hasFinal &&
               !in->orphaned) {
      // A receive() parked (a time limit, a cancellable token, or another loop's reader):
      // the arrival is its without being kept, which would allocate the ring (serveReaders'
      // way, in short: the readers behind it find nothing).
      serve(*in, *h, &c.received);
    } else if (c.more) {
      if (in->orphaned) {
        lostAfterRelease(in->fd, c.result);
      } else {
        in->pushBack(std::move(c.received));
        serveReaders(entry, *in, direct, false, false);
      }
    } else {
      // Idle now (a reader may arm the request again below), the close decided after the
      // readers have seen that the descriptor is closing.
      in->state = State::kIdle;
      in->requestLoop = nullptr;
      if (in->orphaned) {
        if (c.result > 0) lostAfterRelease(in->fd, c.result);
        c.received.reset();
        entry.orphanedRequest = false;
        destroy = true;
      } else {
        if (c.result > 0) {
          in->pushBack(std::move(c.received));
        } else if (c.result != -ECANCELED && c.result != -EOPNOTSUPP) {
          in->hasFinal = true;  // the end (0) or a failure: after what arrived
          in->final = static_cast<int>(c.result);
        }
        serveReaders(entry, *in, direct, true, c.shutDown);
      }
      deferred = closeIfDoneLocked(entry, in->fd);
    }
  }
  // Once the lock is released: `in` may be freed by the close (deferred) or here.
  if (destroy) destroyInbox(in);
  deferred.run();
  if (direct != nullptr) direct->waiter_.resume();
}

}  // namespace weft::detail
