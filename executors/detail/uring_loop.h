#pragma once

// The io_uring event loop (IoBackend::kIoUring, through liburing), shared by its four files:
// executors/uring_loop.cc (how it works: the top comment; the loop's turn, set-up and
// shutdown), executors/uring_submit.cc (operations handed to the kernel: slots, lanes, time
// limits, cancellation, withdrawal), executors/uring_reap.cc (their completions, multishot
// arrivals and the buffers they fill) and executors/uring_setup.cc (the ring's set-up, the
// kernel's probe, the provided-buffer ring). Made by detail::makeUringLoop(). Only weft's
// own files, built with WEFT_HAVE_LIBURING, see its contents.

#if defined(WEFT_HAVE_LIBURING)

#include <liburing.h>
#include <pthread.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "weft/executors/detail/io_loop_base.h"

namespace weft::detail::uring {

constexpr std::uint32_t kWakeIndex = 0xffffffffu;
constexpr std::uint32_t kCancelIndex = 0xfffffffeu;
constexpr std::uint64_t kWakeKey = kWakeIndex;
constexpr std::uint64_t kCancelKey = kCancelIndex;
// In a key's index: the completion is that of the operation's own timer (a queued
// operation's time limit), not of the operation. Slot indices stay below it; kWakeIndex
// and kCancelIndex have it too (reap tests it once for all three).
constexpr std::uint32_t kTimerBit = 0x80000000u;
constexpr unsigned kEntries = 256;
// Completions the kernel can post before the loop reaps them: more (a burst from thousands
// of connections, each operation and its linked timeout) overflow into a list the kernel
// allocates entry by entry and flushes on later enters, which cost a 10,000-connection
// echo server 40 % of its CPU time (measured). 32,768 (512 KiB of ring) covers 16,000
// timed receives at once.
constexpr unsigned kCompletionEntries = 32768;
constexpr std::size_t kMaxTransfer = 0x7ffff000;  // Linux's MAX_RW_COUNT on 4 KiB pages
// The provided-buffer ring: its group id, its capacity (a power of two; 16 bytes each),
// and how many buffers it starts with. A buffer id is 16 bits: pool buffers numbered
// beyond kMaxRingId never enter the ring.
constexpr std::uint16_t kBufferGroup = 0;
constexpr unsigned kRingEntries = 4096;
constexpr std::uint32_t kInitialRingBuffers = 32;
constexpr std::uint32_t kMaxRingId = 0xffff;
// liburing's registered-ring index when the loop is destroyed on a thread other than the
// one that registered it: beyond the kernel's table (16 entries per thread), so that
// liburing's unregister fails there (EINVAL) instead of dropping that thread's own
// registration at the same index.
constexpr int kForeignRingIndex = 1 << 20;

// Per opcode: 0 for those not ordered (files), 1 for reads, 2 for writes, as the epoll
// loop's waiter lists (epoll_loop.cc's isWrite). A table of 256 so that any byte indexes it.
constexpr std::uint8_t direction(IoOpcode opcode) noexcept {
  switch (opcode) {
    case IoOpcode::kReceive:
    case IoOpcode::kReceiveMessage:
    case IoOpcode::kAccept:
    case IoOpcode::kPollReadable:
    case IoOpcode::kReceiveLent:
    case IoOpcode::kReceiveMessageLent:
      return 1;
    case IoOpcode::kSend:
    case IoOpcode::kSendMessage:
    case IoOpcode::kConnect:
    case IoOpcode::kPollWritable:
      return 2;
    case IoOpcode::kReadAt:
    case IoOpcode::kWriteAt:
    case IoOpcode::kSync:
    case IoOpcode::kReceiveMultishot:  // refused (IoArmedReceive instead)
    case IoOpcode::kWait:
      return 0;
  }
  return 0;
}
constexpr auto kDirections = [] {
  std::array<std::uint8_t, 256> table{};
  for (unsigned i = 0; i < table.size(); ++i) table[i] = direction(static_cast<IoOpcode>(i));
  return table;
}();

// The receives into lent buffers: a stream's recv and a datagram's recvmsg.
constexpr bool receivesLent(IoOpcode opcode) noexcept {
  return opcode == IoOpcode::kReceiveLent || opcode == IoOpcode::kReceiveMessageLent;
}

// Lanes are numbered 2 * fd for reads and 2 * fd + 1 for writes; an operation that is not
// ordered (a file's, or one with fd < 0) has kNoLane.
constexpr std::uint32_t kNoLane = 0xffffffffu;

// Which of the ring's features to leave out, for measuring each against the older way:
// WEFT_IO_URING_SETUP is a comma-separated list of `coop` (COOP_TASKRUN instead of
// DEFER_TASKRUN), `unregistered` (the ring entered by its descriptor, not registered) and
// `singleshot` (a recv submitted per receive() instead of one kept armed per stream).
// Another word is a misuse: weft says so and aborts.
struct LeftOut {
  bool deferTaskRun = false;
  bool registeredRing = false;
  bool multishotReceive = false;
};
const LeftOut& leftOut() noexcept;

// Whether the kernel takes a multishot recv (IORING_RECV_MULTISHOT, Linux 6.0): found by
// probeIoUring, which runs once per process before any loop is created (IoLoop::create
// resolves the backend first). Relaxed: written once, before the loops that read it.
extern std::atomic<bool> gKernelMultishotReceive;

// Sets `ring` up with the flags the kernel takes (see executors/uring_loop.cc); the
// result of io_uring_queue_init_params.
int setUpRing(io_uring& ring, unsigned entries, unsigned completionEntries) noexcept;

class UringLoop final : public IoLoopBase {
 public:
  UringLoop();
  ~UringLoop() override;

  IoBackend backend() const noexcept override { return IoBackend::kIoUring; }

  bool multishotReceive() const noexcept override { return multishot_; }

  // Counted for the metrics (IoLoopBase::counted). start() leaves op.opcode as it is.
  bool submit(IoOperation& op) noexcept override;
  int armReceive(IoArmedReceive& request) noexcept override;

  // Declared inline, as are armedCompletion, takeReceived and ringBufferBack: each is
  // defined in the one file that calls it (uring_submit.cc, uring_reap.cc), and start,
  // takeSlot and takeReceived are always inlined, so that the hot path is folded as it was
  // when the loop was one file whose class the compiler saw whole (out of line, the echo
  // request's path grew: docs/design/2026-11-idle-connection-memory.md).
  [[gnu::always_inline]] inline bool start(IoOperation& op) noexcept;
  bool withdraw(IoOperation& op) noexcept override;
  std::size_t run(int timeoutMs) noexcept override;
  std::size_t runFor(std::int64_t timeoutNs) noexcept override;
  void shutdown() noexcept override;

 private:
  // Where an operation that holds a slot is.
  enum class Where : std::uint8_t {
    kKernel,  // its entry is in the kernel (or in the submission queue, bound for it)
    kQueued,  // in its lane, behind the head
    kParked,  // a kWait, on parked_
    kReady,   // on ready_: ended without reaching the kernel, completion not yet run
    kArmed,   // an armed receive (IoArmedReceive, the slot's `armed`), in the kernel
  };
  // 24 bytes: every operation in flight holds one, and the table keeps as many as were
  // ever in flight at once (an idle connection's armed receive holds one).
  struct Slot {
    // An operation, or (where == kArmed) an armed receive; null when the slot is free.
    // One untyped pointer, so that reap and withdraw test and compare it whichever it
    // holds; op() and armed() give it its type.
    void* subject = nullptr;
    IoOperation* op() const noexcept { return static_cast<IoOperation*>(subject); }
    IoArmedReceive* armed() const noexcept { return static_cast<IoArmedReceive*>(subject); }
    std::uint32_t generation = 0;
    union {
      std::uint32_t nextFree = 0;  // free (subject null): the next free slot
      std::uint32_t timerTail;     // in use, `timer` set: the submission queue's tail just
                                   // past its timer's entry
    };
    std::uint32_t lane = kNoLane;  // the operation's lane, or kNoLane
    Where where = Where::kKernel;
    bool timer = false;  // the operation's own timer is in the kernel (kTimerBit)
    bool arrived = false;  // an armed receive has delivered an arrival
  };
  static_assert(sizeof(Slot) == 24);
  // Operations linked through loopNext/loopPrev: ready_ or parked_.
  using List = IoOperationList;
  // A lane: its head in the kernel, the others queued behind it, in order, linked through
  // loopNext (forward, ending in nullptr) and loopPrev (backward, and the head's loopPrev is
  // the tail: the backward links are a ring). The head alone is kept: the table holds two
  // lanes per descriptor number whether they are used or not, and the tail is one step
  // from the head.
  struct Lane {
    IoOperation* head = nullptr;

    // `op` alone in the lane (an empty one).
    void start(IoOperation& op) noexcept {
      op.loopNext = nullptr;
      op.loopPrev = &op;
      head = &op;
    }
    void append(IoOperation& op) noexcept {
      if (head == nullptr) return start(op);
      IoOperation* tail = head->loopPrev;
      op.loopNext = nullptr;
      op.loopPrev = tail;
      tail->loopNext = &op;
      head->loopPrev = &op;
    }
    void remove(IoOperation& op) noexcept {
      IoOperation* next = op.loopNext;
      if (&op == head) {
        head = next;
        if (next != nullptr) next->loopPrev = op.loopPrev;  // the tail
      } else {
        op.loopPrev->loopNext = next;
        (next != nullptr ? next : head)->loopPrev = op.loopPrev;  // the tail, if `op` was
      }
      op.loopNext = op.loopPrev = nullptr;
    }
  };

  static std::uint32_t indexOf(std::uint64_t key) noexcept {
    return static_cast<std::uint32_t>(key);
  }

  // Starts `op`'s life in the loop: not cancelled, no state yet, a slot of its own (its
  // key in op.loopKey). Throws std::bad_alloc if the slot table cannot grow.
  [[gnu::always_inline]] void openSlot(IoOperation& op, std::uint32_t lane) {
    op.loopCancelled = false;
    op.loopState.store(0, std::memory_order_relaxed);  // not yet visible to other threads
    op.loopKey = takeSlot(&op, lane);
  }

  // A slot for `subject` (an IoOperation, or with kArmed an IoArmedReceive); its key.
  // Throws std::bad_alloc, changing nothing, if the table cannot grow.
  [[gnu::always_inline]] std::uint64_t takeSlot(void* subject, std::uint32_t lane,
                                                Where where = Where::kKernel) {
    std::uint32_t index;
    if (freeHead_ != kNoFree) {
      index = freeHead_;
      freeHead_ = slots_[index].nextFree;
    } else {
      index = static_cast<std::uint32_t>(slots_.size());
      slots_.push_back({});
    }
    Slot& slot = slots_[index];
    slot.subject = subject;
    slot.lane = lane;
    slot.where = where;
    slot.timer = false;
    slot.arrived = false;
    return (std::uint64_t{slot.generation} << 32) | index;
  }
  void releaseSlot(std::uint32_t index) noexcept {
    Slot& slot = slots_[index];
    slot.subject = nullptr;
    ++slot.generation;
    slot.nextFree = freeHead_;
    freeHead_ = index;
  }

  bool grow(std::uint32_t lane) noexcept;
  bool holdSlot(IoOperation& op, std::uint32_t lane, Where where) noexcept;
  bool enqueue(IoOperation& op, std::uint32_t lane) noexcept;

  // Takes `op`, which holds `slot` but is not in the kernel, off the lane or list it is on.
  void unlist(const Slot& slot, IoOperation& op) noexcept {
    switch (slot.where) {
      case Where::kQueued: lanes_[slot.lane].remove(op); return;
      case Where::kParked: parked_.remove(op); return;
      default: ready_.remove(op); return;
    }
  }

  [[gnu::noinline]] bool park(IoOperation& op) noexcept;
  int arm(IoArmedReceive& request) noexcept;
  inline void armedCompletion(Slot& slot, std::uint32_t index, int res,
                              std::uint32_t flags) noexcept;
  [[gnu::noinline]] void armedCompletionOther(Slot& slot, std::uint32_t index, int res,
                                              std::uint32_t flags) noexcept;
  void prepareArmed(io_uring_sqe* sqe, const IoArmedReceive& request) noexcept;
  bool resubmitArmedWithoutRingBuffer(IoArmedReceive& request) noexcept;
  bool holdBufferAfterEnobufs(bool cancelled, std::uint32_t& held) noexcept;
  // `op`, the head of lane `index`, leaves it (completed, or withdrawn); the next in the
  // lane, if any, goes to the kernel (out of line: an operation rarely has one behind it).
  [[gnu::always_inline]] void leaveLane(IoOperation& op, std::uint32_t index) noexcept {
    if (op.loopNext == nullptr) [[likely]] {  // alone
      lanes_[index].head = nullptr;
      return;
    }
    leaveLaneToNext(op, index);
  }
  [[gnu::noinline]] void leaveLaneToNext(IoOperation& op, std::uint32_t index) noexcept;
  [[gnu::noinline]] void promote(Lane& lane) noexcept;

  // Puts `op` (holding a slot, in no list) on ready_ with its result set.
  void makeReady(IoOperation& op) noexcept {
    slots_[indexOf(op.loopKey)].where = Where::kReady;
    ready_.append(op);
  }

  void retire(IoOperation& op, std::uint32_t index) noexcept;
  void removeTimer(const IoOperation& op) noexcept;
  void linkTimeout(io_uring_sqe* sqe, IoOperation& op) noexcept;

  // Whether the kernel has taken in the submission queue's entries up to `tail` (an entry
  // it has taken, it has read: a timer's timespec is copied when its entry is prepared in
  // the kernel), so that memory they point to may go. Acquire: pairs with the kernel's
  // release of its head.
  bool consumed(std::uint32_t tail) const noexcept {
    const unsigned head = __atomic_load_n(ring_.sq.khead, __ATOMIC_ACQUIRE);
    return static_cast<std::int32_t>(head - tail) >= 0;
  }

  static void setTimespec(IoOperation& op) noexcept {
    op.loopTime[0] = op.timeoutNs / 1000000000;
    op.loopTime[1] = op.timeoutNs % 1000000000;
    static_assert(sizeof op.loopTime == sizeof(__kernel_timespec));
  }

  io_uring_sqe* nextSqe() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      // The submission queue is full: hand it to the kernel and take a fresh entry.
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  [[gnu::always_inline]] inline void prepare(io_uring_sqe* sqe, IoOperation& op) noexcept;
  void armWake() noexcept;
  void cancelLocal(IoOperation& op) noexcept override;
  void cancelArmedLocal(IoArmedReceive& request) noexcept override;
  std::size_t reap() noexcept;
  [[gnu::noinline]] int continueWhole(IoOperation& op, std::uint32_t index, int moved) noexcept;
  void finishReady() noexcept;
  void timerExpired(std::uint64_t key, int res) noexcept;

  // --- lent buffers (kReceiveLent, kReceiveMessageLent) --------------------------------

  [[gnu::noinline]] bool setUpBufferRing() noexcept;
  bool growRing(std::uint32_t n) noexcept;
  static bool recycleIntoRing(void* context, std::uint32_t id) noexcept;
  inline void ringBufferBack(std::uint32_t flags, int res, LentBuffer* lent) noexcept;
  [[gnu::always_inline]] inline void takeReceived(IoOperation& op, int res,
                                                std::uint32_t flags) noexcept;
  [[gnu::always_inline]] inline void takeReceivedInto(LentBuffer& lent, std::uint32_t& held,
                                                    int res, std::uint32_t flags) noexcept;

  // Gives back the buffer `op` (or an armed receive) holds for a plain recv, if any.
  void releaseHeldBuffer(IoOperation& op) noexcept { releaseHeldBuffer(op.loopBuffer); }
  void releaseHeldBuffer(std::uint32_t& held) noexcept {
    if (held != BufferPool::kNone) [[unlikely]] {
      pool_->recycle(held);
      held = BufferPool::kNone;
    }
  }

  bool resubmitWithoutRingBuffer(IoOperation& op, const Slot& slot) noexcept;

  static constexpr std::uint32_t kNoFree = 0xffffffffu;

  io_uring_buf_ring* bufferRing_ = nullptr;
  std::uint32_t ringHeld_ = 0;  // buffers in the ring (the kernel may pick them)
  std::uint32_t ringTarget_ = 0;  // how many the ring keeps: those growRing added
  bool ringReady_ = false;      // registered
  bool ringFailed_ = false;     // cannot be: plain recvs
  bool grewThisTurn_ = false;   // the ring grew for an ENOBUFS in this batch of completions
  bool multishot_ = false;      // receives are armed (armReceive, multishotReceive())
  io_uring ring_{};
  std::vector<Slot> slots_;
  std::vector<Lane> lanes_;  // indexed by lane number (2 * fd + direction)
  std::uint32_t laneCount_ = 0;  // lanes_.size()
  List ready_;
  List parked_;  // kWait operations
  std::uint32_t freeHead_ = kNoFree;
  std::uint64_t wakeValue_ = 0;
  bool wakeArmed_ = false;
  bool ringRegistered_ = false;  // io_uring_register_ring_fd succeeded, on owner_
  pthread_t owner_{};            // the thread that created the loop (and the ring)
};

}  // namespace weft::detail::uring

#endif  // WEFT_HAVE_LIBURING
