// IoAwaiter's stream path (io/io_awaiter.h), for a read in its stream's inbox
// (io/detail/stream_inbox.h): suspending on the stream, completing, being cancelled and
// being withdrawn. How the inbox works: io/detail/stream_reads.cc.

#include <cerrno>
#include <utility>

#include "weft/io/detail/fd_entry.h"
#include "weft/io/detail/stream_inbox.h"
#include "weft/io/io_awaiter.h"

// IoAwaiter's stream path (io/io_awaiter.h): a public class, defined in namespace weft.
namespace weft {

void IoAwaiter::cancelStreamRead() noexcept {
  using namespace detail;  // the inbox machinery above
  FdEntry& entry = fdEntry(op_.fd);
  FdEntryLock lock(entry);
  switch (reader_.mode) {
    case kDirect:
      // The head, on the request's loop: only the request's completions can end it.
      if (StreamInbox* in = entry.inbox.load(std::memory_order_relaxed); in != nullptr) {
        StreamReads::disarm(*in);
      }
      break;
    case kParked:
    case kKernel:
      fdWait_.loop->cancel(op_);  // under the lock: it cannot complete meanwhile
      break;
    default:
      break;  // done, or between two waits: the next wait sees the cancellation (activate)
  }
}

IoAwaiter::StreamStep IoAwaiter::suspendOnStream(IoLoop& loop) {
  using namespace detail;  // the inbox machinery above
  FdEntry& entry = fdEntry(op_.fd);
  StreamInbox* fresh = nullptr;
  if (op_.opcode == IoOpcode::kReceiveLent &&
      entry.inbox.load(std::memory_order_acquire) == nullptr) {
    fresh = new StreamInbox(op_.fd);  // std::bad_alloc from co_await, nothing started
  }
  reader_ = Reader{nullptr, nullptr, 0, 0, op_.opcode, kNotReading, false, false};
  fdWait_.loop = &loop;
  bool done;
  {
    FdEntryLock lock(entry);
    StreamInbox* in = entry.inbox.load(std::memory_order_relaxed);
    if (in == nullptr) {
      if (fresh == nullptr) return StreamStep::kNotStream;  // closed meanwhile (a misuse)
      in = std::exchange(fresh, nullptr);
      // Release: a reader that finds it without the lock (streamReadsActive) sees it built.
      entry.inbox.store(in, std::memory_order_release);
    }
    if (in->head == nullptr && in->count() == 0 && !in->hasFinal && in->loop() == &loop &&
        in->state == StreamInbox::State::kArmed && op_.opcode == IoOpcode::kReceiveLent &&
        op_.timeoutNs < 0 && !entry.closing) [[likely]] {
      // The plain loop's receive: the request armed here, nothing kept, nobody waiting:
      // wait directly (activate's way, in short).
      in->head = in->tail = this;
      reader_.mode = kDirect;
      inFlight_ = true;
      return StreamStep::kWaiting;
    }
    in->link(*this);
    done = in->head == this ? StreamReads::activate(entry, *in, *this, loop)
                            : StreamReads::park(entry, *in, *this, loop);
  }
  delete fresh;  // another receive installed one first
  return done ? StreamStep::kDone : StreamStep::kWaiting;
}

bool IoAwaiter::streamCompleted(IoAwaiter& self) noexcept {
  using namespace detail;  // the inbox machinery above
  Reader& reader = self.reader_;
  FdEntry& entry = fdEntry(self.op_.fd);
  DeferredClose deferred;
  bool resume = true;
  {
    FdEntryLock lock(entry);
    StreamInbox* in = entry.inbox.load(std::memory_order_relaxed);
    deferred = untrackLocked(entry, self.fdWait_);
    self.inFlight_ = false;
    if (reader.mode == kParked) {
      self.op_.opcode = reader.opcode;
      if (reader.served) {  // given its result (and left the readers) by the request
        self.op_.result = reader.result;
        reader.served = false;
        reader.mode = kNotReading;
      } else if (in != nullptr && self.op_.result == -ECANCELED && reader.retry &&
                 !self.op_.loopShutDown && !self.fdWait_.closed &&
                 !self.token_->isCancellationRequested()) {
        reader.retry = false;  // woken to act: the head now
        resume = StreamReads::activate(entry, *in, self, *self.fdWait_.loop);
      } else {
        // Its own end: cancelled, timed out, closed, or the loop shut down. The result is
        // its kWait's (await_resume tells which).
        if (in != nullptr) {
          StreamReads::leave(*in, self);
        } else {
          reader.mode = kNotReading;
        }
      }
    } else {  // kKernel: its own operation completed, with its own result
      if (in != nullptr) {
        StreamReads::leave(*in, self);
      } else {
        reader.mode = kNotReading;
      }
    }
  }
  deferred.run();
  // A cancellation that came while it was between two waits found nothing to stop.
  if (!resume && reader.mode != kDirect && self.token_->isCancellationRequested()) {
    self.fdWait_.loop->cancel(self.op_);
  }
  return resume;
}

void IoAwaiter::withdrawFromStream() noexcept {
  using namespace detail;  // the inbox machinery above
  FdEntry& entry = fdEntry(op_.fd);
  DeferredClose deferred;
  {
    FdEntryLock lock(entry);
    StreamInbox* in = entry.inbox.load(std::memory_order_relaxed);
    switch (reader_.mode) {
      case kDirect:
        break;
      case kParked:
        (void)fdWait_.loop->withdraw(op_);  // a kWait: never in the kernel
        op_.opcode = reader_.opcode;
        deferred = untrackLocked(entry, fdWait_);
        if (reader_.served) {
          // Given its result, and out of the readers already. An arrival goes back to the
          // front of the inbox for the next read, if no later one was given to another
          // reader meanwhile (readable() and the end took nothing).
          if (!op_.lent.empty()) {
            if (in == nullptr || reader_.handout != in->handouts) {
              abortDestroyedWhileResuming(
                  what_, "it had been given bytes, and a later read took the next ones");
            }
            --in->handouts;
            in->pushFront(std::move(op_.lent));
            // A reader that waits meanwhile must see it: a parked one is woken; a direct
            // one (on the request's thread, perhaps not this one) hears of it from the
            // request's end.
            if (IoAwaiter* h = in->head; h != nullptr) {
              if (h->reader_.mode == kDirect) {
                StreamReads::disarm(*in);
              } else {
                StreamReads::wake(*h);
              }
            }
          }
          reader_.served = false;
          reader_.mode = kNotReading;
          inFlight_ = false;
          in = nullptr;  // not to leave the readers again below
        }
        break;
      case kKernel:
        if (!fdWait_.loop->withdraw(op_)) {
          abortDestroyedWhileResuming(what_, "its I/O operation had already completed");
        }
        deferred = untrackLocked(entry, fdWait_);
        break;
      default:
        break;
    }
    if (in != nullptr) {
      StreamReads::leave(*in, *this);
    } else {
      reader_.mode = kNotReading;
      inFlight_ = false;
    }
  }
  deferred.run();
}

}  // namespace weft
