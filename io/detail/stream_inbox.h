#pragma once

// A stream's inbox on a loop that keeps a receive armed (io_uring's multishot recv), shared
// by its files: io/detail/stream_reads.cc (how it works: the top comment; the readers and
// the request, StreamReads), io/detail/stream_read_waits.cc (IoAwaiter's stream path: a
// read that waits, completes, is cancelled or withdrawn) and io/detail/stream_inbox.cc (the
// inbox seen from outside an awaiter: tryRead, release, its destruction).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>

#include "weft/io/detail/fd_entry.h"
#include "weft/io/io_awaiter.h"

namespace weft::detail {

// The bound on what an inbox keeps while no read waits (see the top of stream_reads.cc).
constexpr std::size_t kInboxBuffers = 4;
constexpr std::size_t kInboxBytes = 256 * 1024;

// The rings of kept arrivals that exist (keptArrivalRings).
extern std::atomic<std::size_t> gKeptArrivalRings;

// IoAwaiter::Reader::mode.
enum Mode : std::uint8_t { kNotReading = 0, kDirect, kParked, kKernel };

// The inbox is itself the stream's request (IoArmedReceive: the loop's slot and completions
// name it), so that an idle stream's state is one allocation with no pointer back. Its
// own fields follow. The request is not a wait in the descriptor's list (FdWait): while it
// is armed or ending, closeDescriptor finds it through the descriptor's inbox
// (FdEntry::inbox), which saves the 40 bytes of one in every idle stream. The arrivals
// kept while no reader waits live in a ring of their own (KeptArrivals), allocated when an
// arrival has to be kept and freed once the last kept one is taken: an idle stream, and
// one whose reader is back in receive() before the next arrival (the ping-pong case),
// holds none. What an idle connection costs: docs/design/2026-11-idle-connection-memory.md.
struct StreamInbox : IoArmedReceive {
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
  IoLoop* loop() const noexcept { return requestLoop; }

  // The kept arrivals (see KeptArrivals).
  std::uint32_t count() const noexcept { return kept == nullptr ? 0 : kept->count; }
  std::size_t keptBytes() const noexcept { return kept == nullptr ? 0 : kept->bytes; }
  void pushBack(LentBuffer arrival) noexcept {
    if (kept == nullptr || kept->count == kept->capacity) [[unlikely]] grow();
    kept->bytes += arrival.size();
    kept->at(kept->count) = std::move(arrival);
    ++kept->count;
  }
  void pushFront(LentBuffer arrival) noexcept {
    if (kept == nullptr || kept->count == kept->capacity) [[unlikely]] grow();
    kept->bytes += arrival.size();
    kept->first = (kept->first + kept->capacity - 1) & (kept->capacity - 1);
    kept->at(0) = std::move(arrival);
    ++kept->count;
  }
  // Preconditions for front, popFront and consumeFront: count() != 0.
  LentBuffer& front() noexcept { return kept->at(0); }
  LentBuffer popFront() noexcept {
    LentBuffer arrival = std::move(kept->at(0));
    kept->first = (kept->first + 1) & (kept->capacity - 1);
    kept->bytes -= arrival.size();
    if (--kept->count == 0) {  // drained: the ring goes (stream_reads.cc)
      KeptArrivals::destroy(std::exchange(kept, nullptr));
    }
    return arrival;
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
  IoLoop* requestLoop = nullptr;  // the request's loop while armed or ending, else nullptr
  std::uint32_t handouts = 0;  // arrivals given to readers so far (Reader::handout)
  int final = 0;               // the stream's end (0) or failure (-errno), when hasFinal
  State state = State::kIdle;
  bool hasFinal = false;  // `final` comes after the kept arrivals
  bool orphaned = false;  // released (TcpStream::release()): the request's end frees it
};
// 88 bytes (a 96-byte malloc chunk): every stream that receive() reads holds one, idle or
// not (docs/design/2026-11-idle-connection-memory.md).
static_assert(sizeof(StreamInbox) <= 88);

// The inbox logic; a friend of IoAwaiter. Every function runs with the entry's lock held.
struct StreamReads {
  using Reader = IoAwaiter::Reader;
  using State = StreamInbox::State;
  static std::int64_t takeFinal(StreamInbox& in) noexcept;
  static std::size_t copyOut(StreamInbox& in, void* data, std::size_t size) noexcept;
  static bool leave(StreamInbox& in, IoAwaiter& r) noexcept;
  static void wake(IoAwaiter& r) noexcept;
  static void disarm(StreamInbox& in) noexcept;
  static bool otherReadInFlight(const FdEntry& entry) noexcept;
  static int arm(StreamInbox& in, IoLoop& loop) noexcept;
  static bool submitTracked(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept;
  static bool park(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept;
  static bool wait(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept;
  static bool submitOwn(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept;
  static bool activate(FdEntry& entry, StreamInbox& in, IoAwaiter& r, IoLoop& loop) noexcept;
  static void serve(StreamInbox& in, IoAwaiter& h, LentBuffer* arrival = nullptr) noexcept;
  static void serveReaders(FdEntry& entry, StreamInbox& in, IoAwaiter*& direct, bool ended,
                           bool shutDown) noexcept;
  static void onRequest(IoArmedReceive& request, IoArmedReceive::Completion& c) noexcept;
};

}  // namespace weft::detail
