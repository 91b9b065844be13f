// A stream's reads on a loop that keeps a receive armed (IoLoop::multishotReceive():
// io_uring's multishot recv).
//
// The inbox. The first receive() of a stream on such a loop gives the stream an inbox, in
// the table of waits (FdEntry::inbox, under the entry's lock), which lives until the
// descriptor is closed (or released). It holds:
//  - at most one request (IoOpcode::kReceiveMultishot) armed in the kernel, by the loop of
//    the receive() that armed it; each arrival is a completion on that loop;
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
// like every wait on the descriptor (it is tracked as one) and the descriptor is closed,
// and the inbox freed with the buffers it held, when the last wait has ended; a direct
// reader then ends with ECANCELED, and one of a loop that shut down with ExecutorShutDown.
//
// Thread safety: everything in an inbox is read and written under its entry's lock; a
// reader's own operation is only submitted, withdrawn and completed on its loop's thread.

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>

#include "weft/io/detail/fd_entry.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/detail/stream_reads.h"

namespace weft::detail {

namespace {

// The bound on what an inbox keeps while no read waits (see the top).
constexpr std::size_t kInboxBuffers = 4;
constexpr std::size_t kInboxBytes = 256 * 1024;

// The rings of kept arrivals that exist (keptArrivalRings).
std::atomic<std::size_t> gKeptArrivalRings{0};

// IoAwaiter::Reader::mode.
enum Mode : std::uint8_t { kNotReading = 0, kDirect, kParked, kKernel };

// The operations that take bytes (or readiness) from a socket's receive side.
bool isRead(IoOpcode opcode) noexcept {
  switch (opcode) {
    case IoOpcode::kReceive:
    case IoOpcode::kReceiveMessage:
    case IoOpcode::kPollReadable:
    case IoOpcode::kReceiveLent:
    case IoOpcode::kReceiveMessageLent:
    case IoOpcode::kReceiveMultishot:
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

// The inbox is itself the stream's request (IoOperation: the loop's slot and completions
// name it), so that an idle stream's state is one allocation with no pointer back. Its
// own fields follow, those every arrival touches first (readers, kept arrivals, state),
// the descriptor's wait (touched when the request is armed and ends) last. The arrivals
// kept while no reader waits live in a ring of their own (KeptArrivals), allocated when an
// arrival has to be kept and freed once the last kept one is taken: an idle stream, and
// one whose reader is back in receive() before the next arrival (the ping-pong case),
// holds none. What an idle connection costs: docs/design/2026-11-idle-connection-memory.md.
struct StreamInbox : IoOperation {
  enum class State : std::uint8_t {
    kIdle,    // no request
    kArmed,   // a request in the kernel, on loop()
    kEnding,  // cancelled, its last completion still to come
  };

  // The arrivals no reader has taken, in order: a ring of `capacity` (a power of two)
  // LentBuffers after the header.
  struct KeptArrivals {
    std::uint32_t capacity;
    std::uint32_t first = 0;
    std::uint32_t count = 0;
    std::size_t bytes = 0;
    LentBuffer* buffers() noexcept { return reinterpret_cast<LentBuffer*>(this + 1); }
    LentBuffer& at(std::uint32_t i) noexcept { return buffers()[(first + i) & (capacity - 1)]; }

    // With `capacity` empty buffers. Aborts with a message when memory runs out (an
    // arrival cannot be dropped, nor refused by the kernel that already received it).
    static KeptArrivals* create(std::uint32_t capacity) noexcept {
      static_assert(sizeof(KeptArrivals) % alignof(LentBuffer) == 0);
      void* memory =
          ::operator new(sizeof(KeptArrivals) + capacity * sizeof(LentBuffer), std::nothrow);
      if (memory == nullptr) {
        std::fprintf(stderr, "weft: out of memory for a stream's received bytes\n");
        std::abort();
      }
      // Relaxed: a counter for tests (keptArrivalRings), ordered by nothing else.
      gKeptArrivalRings.fetch_add(1, std::memory_order_relaxed);
      auto* kept = ::new (memory) KeptArrivals{capacity};
      std::uninitialized_default_construct_n(kept->buffers(), capacity);
      return kept;
    }
    // Gives the buffers still held back to their loops and frees the ring.
    static void destroy(KeptArrivals* kept) noexcept {
      if (kept == nullptr) return;
      std::destroy_n(kept->buffers(), kept->capacity);
      kept->~KeptArrivals();
      ::operator delete(kept);
      gKeptArrivalRings.fetch_sub(1, std::memory_order_relaxed);
    }
  };

  explicit StreamInbox(int descriptor) noexcept {
    fd = descriptor;
    // Relaxed: a counter (see gStreamInboxes); it is published with the inbox.
    gStreamInboxes.fetch_add(1, std::memory_order_relaxed);
  }
  ~StreamInbox() {
    KeptArrivals::destroy(kept);
    gStreamInboxes.fetch_sub(1, std::memory_order_relaxed);
  }
  StreamInbox(const StreamInbox&) = delete;
  StreamInbox& operator=(const StreamInbox&) = delete;

  // The request's loop (kArmed, kEnding), else nullptr.
  IoLoop* loop() const noexcept { return requestWait.loop; }

  // The kept arrivals (see KeptArrivals).
  std::uint32_t count() const noexcept { return kept == nullptr ? 0 : kept->count; }
  std::size_t keptBytes() const noexcept { return kept == nullptr ? 0 : kept->bytes; }
  void pushBack(LentBuffer buffer) noexcept {
    if (kept == nullptr || kept->count == kept->capacity) [[unlikely]] grow();
    kept->bytes += buffer.size();
    kept->at(kept->count) = std::move(buffer);
    ++kept->count;
  }
  void pushFront(LentBuffer buffer) noexcept {
    if (kept == nullptr || kept->count == kept->capacity) [[unlikely]] grow();
    kept->bytes += buffer.size();
    kept->first = (kept->first + kept->capacity - 1) & (kept->capacity - 1);
    kept->at(0) = std::move(buffer);
    ++kept->count;
  }
  // Preconditions for front, popFront and consumeFront: count() != 0.
  LentBuffer& front() noexcept { return kept->at(0); }
  LentBuffer popFront() noexcept {
    LentBuffer buffer = std::move(kept->at(0));
    kept->first = (kept->first + 1) & (kept->capacity - 1);
    kept->bytes -= buffer.size();
    if (--kept->count == 0) {  // drained: the ring goes (see the top)
      KeptArrivals::destroy(std::exchange(kept, nullptr));
    }
    return buffer;
  }
  void consumeFront(std::size_t n) noexcept {
    kept->at(0).consume(n);
    kept->bytes -= n;
  }
  [[gnu::noinline]] void grow() noexcept {
    const std::uint32_t capacity =
        kept == nullptr ? static_cast<std::uint32_t>(kInboxBuffers) : kept->capacity * 2;
    KeptArrivals* larger = KeptArrivals::create(capacity);
    if (kept != nullptr) {
      for (std::uint32_t i = 0; i < kept->count; ++i) larger->buffers()[i] = std::move(kept->at(i));
      larger->count = kept->count;
      larger->bytes = kept->bytes;
      KeptArrivals::destroy(kept);
    }
    kept = larger;
  }

  // The readers, in arrival order.
  void link(IoAwaiter& r) noexcept {
    r.reader_.next = nullptr;
    r.reader_.prev = tail;
    (tail == nullptr ? head : tail->reader_.next) = &r;
    tail = &r;
  }
  void unlink(IoAwaiter& r) noexcept {
    (r.reader_.prev == nullptr ? head : r.reader_.prev->reader_.next) = r.reader_.next;
    (r.reader_.next == nullptr ? tail : r.reader_.next->reader_.prev) = r.reader_.prev;
    r.reader_.next = r.reader_.prev = nullptr;
  }

  IoAwaiter* head = nullptr;
  IoAwaiter* tail = nullptr;
  KeptArrivals* kept = nullptr;
  std::uint32_t handouts = 0;  // arrivals given to readers so far (Reader::handout)
  int final = 0;               // the stream's end (0) or failure (-errno), when hasFinal
  State state = State::kIdle;
  bool hasFinal = false;  // `final` comes after the kept arrivals
  bool orphaned = false;  // released (TcpStream::release()): the request's end frees it
  // The request, as a wait on the descriptor (closeDescriptor), while armed or ending; its
  // `loop` is the request's loop then, nullptr otherwise.
  FdWait requestWait;
};

void destroyInbox(StreamInbox* inbox) noexcept { delete inbox; }

// The inbox logic; a friend of IoAwaiter. Every function runs with the entry's lock held.
struct StreamReads {
  using Reader = IoAwaiter::Reader;
  using State = StreamInbox::State;

  // The stream's end or failure, taken (later reads ask the socket again, which reports
  // the end again; a failure is reported once, as by the socket).
  static std::int64_t takeFinal(StreamInbox& in) noexcept {
    in.hasFinal = false;
    return in.final;
  }

  // Copies arrivals into [data, data + size) (a part of the first one may stay). Returns
  // the bytes copied.
  static std::size_t copyOut(StreamInbox& in, void* data, std::size_t size) noexcept {
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
  static bool leave(StreamInbox& in, IoAwaiter& r) noexcept {
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
  static void wake(IoAwaiter& r) noexcept {
    if (r.reader_.mode != kParked) return;
    r.reader_.retry = true;
    r.fdWait_.loop->cancel(r.op_);  // under the lock: `r` cannot complete meanwhile
  }

  // Cancels the armed request: its arrivals until its last completion still come.
  static void disarm(StreamInbox& in) noexcept {
    if (in.state != State::kArmed) return;
    in.state = State::kEnding;
    in.loop()->cancel(in);
  }

  // Whether a read of the descriptor is in flight outside the inbox (issued before it
  // existed): the head then receives with an operation of its own, ordered after it on
  // the same loop, rather than arming a request that the kernel would serve beside it.
  static bool otherReadInFlight(const FdEntry& entry) noexcept {
    for (const FdWait* wait = entry.head; wait != nullptr; wait = wait->next) {
      if (isRead(wait->op->opcode)) return true;
    }
    return false;
  }

  // Arms a request on `loop`. 0 when armed; else the loop refused it at once: its result
  // (-EOPNOTSUPP: the loop keeps no requests after all; -ECANCELED after its shutdown).
  static int arm(FdEntry& entry, StreamInbox& in, IoLoop& loop) noexcept {
    IoOperation& request = in;  // the inbox is its stream's request
    request.opcode = IoOpcode::kReceiveMultishot;
    request.flags = 0;
    request.timeoutNs = -1;
    request.whole = false;
    request.ownerRetiresFd = true;
    request.complete = &StreamReads::onRequest;
    if (loop.submit(request)) return request.result < 0 ? static_cast<int>(request.result) : -EIO;
    in.state = State::kArmed;
    in.requestWait.loop = &loop;
    in.requestWait.op = &request;
    in.requestWait.closed = false;
    trackLocked(entry, in.requestWait);
    return 0;
  }

  // Submits the operation of `r` (its opcode set) to `loop` as a wait on the descriptor,
  // known to closeDescriptor(). False while it waits; true when the loop completed it at
  // once (done: its result is the loop's; its own opcode restored).
  static bool submitTracked(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
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
  static bool park(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
    r.reader_.mode = kParked;
    r.reader_.retry = false;
    r.reader_.served = false;
    r.op_.opcode = IoOpcode::kWait;
    return submitTracked(entry, in, r, loop);
  }

  // The head waits for the inbox: directly when it may (see the top), else parked.
  static bool wait(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
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
  static bool submitOwn(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
    r.reader_.mode = kKernel;
    r.op_.opcode = r.reader_.opcode;
    return submitTracked(entry, in, r, loop);
  }

  // The head `r` acts, on its loop's thread (`loop`): see the top. True when it is done
  // (its result in its operation; it has left the readers), false while it waits.
  static bool activate(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept {
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
        const int armed = arm(entry, in, loop);
        if (armed == 0) return wait(entry, in, r, loop);
        if (armed != -EOPNOTSUPP) {
          op.result = armed;
          op.loopShutDown = in.loopShutDown;
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
  static void serve(StreamInbox& in, IoAwaiter& h, LentBuffer* arrival = nullptr) noexcept {
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
  static void serveReaders(FdEntry& entry, StreamInbox& in, IoAwaiter*& direct, bool ended,
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

  // The request's completions (IoOperation::complete), on its loop's thread.
  static void onRequest(IoOperation& op) noexcept {
    StreamInbox* in = static_cast<StreamInbox*>(&op);  // the inbox is its request
    FdEntry& entry = fdEntry(in->fd);
    IoAwaiter* direct = nullptr;
    DeferredClose deferred;
    bool destroy = false;
    {
      FdEntryLock lock(entry);
      IoAwaiter* h = in->head;
      if (op.more && h != nullptr && h == in->tail && h->reader_.mode == kDirect &&
          h->reader_.opcode == IoOpcode::kReceiveLent && in->count() == 0) [[likely]] {
        // The plain loop's receive waits directly, alone: the arrival is its (serve's way,
        // in short).
        h->op_.lent = std::move(op.lent);
        h->op_.result = op.result;
        h->reader_.mode = kNotReading;
        h->inFlight_ = false;
        ++in->handouts;
        in->head = in->tail = nullptr;
        direct = h;
      } else if (op.more && h != nullptr && h->reader_.mode == kParked &&
                 h->reader_.opcode == IoOpcode::kReceiveLent && in->count() == 0 && !in->hasFinal &&
                 !in->orphaned) {
        // A receive() parked (a time limit, a cancellable token, or another loop's reader):
        // the arrival is its without being kept, which would allocate the ring (serveReaders'
        // way, in short: the readers behind it find nothing).
        serve(*in, *h, &op.lent);
      } else if (op.more) {
        if (in->orphaned) {
          lostAfterRelease(in->fd, op.result);
        } else {
          in->pushBack(std::move(op.lent));
          serveReaders(entry, *in, direct, false, false);
        }
      } else {
        in->state = State::kIdle;
        // Unlinked now (a reader may arm the request again below), the close decided after
        // the readers have seen that the descriptor is closing.
        unlinkLocked(entry, in->requestWait);
        in->requestWait.loop = nullptr;
        if (in->orphaned) {
          if (op.result > 0) lostAfterRelease(in->fd, op.result);
          op.lent.reset();
          destroy = true;
        } else {
          if (op.result > 0) {
            in->pushBack(std::move(op.lent));
          } else if (op.result != -ECANCELED && op.result != -EOPNOTSUPP) {
            in->hasFinal = true;  // the end (0) or a failure: after what arrived
            in->final = static_cast<int>(op.result);
          }
          serveReaders(entry, *in, direct, true, op.loopShutDown);
        }
        deferred = closeIfDoneLocked(entry, in->fd);
      }
    }
    // Once the lock is released: `in` may be freed by the close (deferred) or here.
    if (destroy) destroyInbox(in);
    deferred.run();
    if (direct != nullptr) direct->waiter_.resume();
  }
};

}  // namespace weft::detail

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

namespace weft::detail {

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
        StreamReads::disarm(*in);
      }
    }
  }
  destroyInbox(drop);
  IoLoop::retireDescriptor(fd);
}

}  // namespace weft::detail
