// The io_uring event loop (liburing): operations are submitted to the kernel, which
// performs them and posts their completions.
//
// Keys. Each in-flight operation holds a slot in slots_; its user_data (and its
// IoOperation::loopKey) is the slot index and the slot's generation. A completion whose
// generation no longer matches belongs to an operation that withdraw() took back: it is
// dropped without touching the (possibly freed) operation. Cancellation names the
// operation by that key, so it can never hit a later operation that reuses the memory.
//
// Submission is batched: submit() only fills a submission queue entry; run() hands them
// all to the kernel in the io_uring_enter that also waits for completions, so a worker
// that resumes many coroutines in a row makes one system call for all their I/O.
//
// Order. The kernel does not serve the operations waiting on one socket in the order they
// came: when room (data) appears, the writes (reads) waiting for it run in whatever order
// its wake-ups take, often the reverse. docs/io.md promises issue order, as the epoll
// loop keeps it, so each descriptor has two lanes (reads: receive, receive message,
// accept, wait for readable; writes: send, send message, connect, wait for writable, as
// epoll_loop.cc's isWrite) and only the head of a lane is in the kernel. The operations
// behind it wait in the lane, in arrival order, each in its slot (so cancel and withdraw
// find it), and the next is handed to the kernel when the head completes (a partial
// transfer completes it), before the head's completion function runs, as epoll retries
// its next waiter. A `whole` operation (IoOperation::whole: TcpStream::writeAll,
// readExactly) is the exception: after a partial transfer reap hands the rest to the
// kernel at once (continueWhole), and the lane moves on only when it is done. The common
// case, one operation per direction, costs a table lookup and a few loads and stores at
// submit and at completion (callgrind: +49 instructions per operation on benchmark/io's
// ping-pong, +6.7 %). IoLoop's contract keeps a descriptor open while an operation waits
// on it, so the table indexed by number cannot mix two sockets. File operations (read at,
// write at, sync) are not ordered. A queued operation with a time limit gets a timer of
// its own when it queues (its limit runs from submit, as on epoll, even while the head
// waits longer); once in the kernel, the timer's expiry cancels it (reported as
// ETIMEDOUT). An operation that ends without reaching the kernel (cancelled, timed out,
// or the loop shut down) waits on ready_ for run() to complete it.
//
// Lent buffers (kReceiveLent). A receive names a provided-buffer ring (registered with
// IORING_REGISTER_PBUF_RING the first time the loop receives), and the kernel picks a
// buffer only when data is there: a connection waiting to read holds none. The buffers
// come from the loop's BufferPool; one given back goes into the ring again while the ring
// holds fewer than it keeps (the buffers growRing added to it), else onto the pool's free
// list, where lendBuffer() (buffers lent whole, to be filled by the caller) and the plain
// recvs below take them. The ring starts with 32 buffers. When the kernel finds it empty
// (ENOBUFS: data arrived, no buffer), the receive is submitted again, in its place at the
// head of its lane so that no byte is skipped or reordered, as a plain recv into a buffer
// of its own from the pool (the data is there: it completes at once), and the ring
// doubles, once per batch of completions reaped, up to kRingEntries, so that the next
// burst finds enough.
// Resubmitting it to the ring instead would race it against every other receive the
// burst starved for the few buffers given back meanwhile: with 10,000 connections that
// took 20-70 submissions per request (measured). On kernels without buffer rings every
// receive is a plain recv (holding its buffer while it waits). A datagram socket's
// receive (kReceiveMessageLent) is the same with a single-shot recvmsg: the kernel picks a
// buffer from the same ring and writes the sender and MSG_TRUNC into the caller's msghdr,
// as a plain recvmsg does (the multishot form would put them at the start of the buffer
// instead, in io_uring_recvmsg_out's layout).
//
// Receives kept armed (kReceiveMultishot: io/detail/stream_reads.cc keeps one per stream
// that receive() reads). A recv with IORING_RECV_MULTISHOT names the same ring; each
// completion with IORING_CQE_F_MORE is an arrival, whose buffer is lent into op.lent and
// handed to op.complete at once (`more` set), the operation staying in flight in its slot,
// in no lane (its stream's owner sees to it that nothing else receives on the socket
// meanwhile); the completion without F_MORE ends it as any operation ends. A multishot
// that finds the ring empty ends with ENOBUFS, and is treated as a single receive is: it
// goes on in its place as a plain recv into a buffer of its own, whose completion is its
// last, and the ring grows; cancelled meanwhile, it ends with ECANCELED. Whether the kernel
// takes the multishot form is probed once per process (probeIoUring: a recv on a socket
// pair with a byte waiting); a kernel that rejects one anyway (EINVAL before any arrival)
// turns it off for the loop (EOPNOTSUPP, and multishotReceive() false), and
// WEFT_IO_URING_SETUP's `singleshot` leaves it out. What it saved is in
// docs/design/2026-11-io-uring-ring.md. A reader that waits for a stream's arrival with a
// time limit or a cancellable token is parked in a kWait: no entry in the kernel, a slot
// on parked_, with a timer of its own as a queued operation's, ended by cancel() (whoever
// has its arrival) or by the timer.
//
// Ring set-up asks for DEFER_TASKRUN (Linux 6.1: completion work runs only when the worker
// enters the kernel to wait or reap, in batches, never interrupting it) with SINGLE_ISSUER
// (only the worker submits), TASKRUN_FLAG and SUBMIT_ALL; a kernel that refuses (EINVAL)
// gets COOP_TASKRUN instead, then plain flags. The ring's descriptor is then registered
// (io_uring_register_ring_fd, Linux 5.18), so that liburing enters it by its index in the
// worker's table rather than by descriptor; a kernel without it is entered by descriptor.
// Each was kept on a measurement (docs/design/2026-11-io-uring-ring.md): DEFER_TASKRUN
// against COOP_TASKRUN on the echo benchmark, the registered descriptor on the cost of one
// io_uring_enter. WEFT_IO_URING_SETUP leaves them out, to measure them again.
//
// Measured and left out: a multishot accept (IORING_ACCEPT_MULTISHOT) kept armed for a
// listener made short connections no cheaper (0.85x requests per server CPU-second with one
// client connecting again and again, 1.00x with 10 and 100), and waiting for more than one
// completion per io_uring_enter would only delay the one client of a ping-pong, while 100
// and 1,000 connections already reap 3 and 18 requests' completions per enter.

#include <cerrno>
#include <memory>
#include <system_error>

#include "weft/executors/detail/io_loop_base.h"

#if defined(WEFT_HAVE_LIBURING)

#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace weft::detail {

namespace {

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
constexpr std::uint32_t kMaxLentBuffers = 1u << 20;  // as epoll's: effectively unbounded
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
    case IoOpcode::kReceiveMultishot:  // alone on its stream's reads (see io_loop.h)
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
const LeftOut& leftOut() noexcept {
  static const LeftOut value = [] {
    LeftOut out;
    const char* env = std::getenv("WEFT_IO_URING_SETUP");
    std::string_view rest = env != nullptr ? env : "";
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      const std::string_view word = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (word == "coop") {
        out.deferTaskRun = true;
      } else if (word == "unregistered") {
        out.registeredRing = true;
      } else if (word == "singleshot") {
        out.multishotReceive = true;
      } else if (!word.empty()) {
        std::fprintf(stderr,
                     "weft: WEFT_IO_URING_SETUP: unknown word '%.*s' (expected a comma-separated "
                     "list of: coop, unregistered, singleshot)\n",
                     static_cast<int>(word.size()), word.data());
        std::abort();
      }
    }
    return out;
  }();
  return value;
}
bool deferTaskRunWanted() noexcept { return !leftOut().deferTaskRun; }

// Whether the kernel takes a multishot recv (IORING_RECV_MULTISHOT, Linux 6.0): found by
// probeIoUring, which runs once per process before any loop is created (IoLoop::create
// resolves the backend first). Relaxed: written once, before the loops that read it.
std::atomic<bool> gKernelMultishotReceive{false};

int setUpRing(io_uring& ring, unsigned entries, unsigned completionEntries) noexcept {
  io_uring_params params{};
  int r = -EINVAL;
  if (deferTaskRunWanted()) {
    // DEFER_TASKRUN (Linux 6.1): completion work runs only when the worker enters the
    // kernel to reap, never interrupting it, in batches. TASKRUN_FLAG tells liburing's
    // peek (run(0)) when there is such work to enter for.
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_DEFER_TASKRUN |
                   IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SINGLE_ISSUER;
    params.cq_entries = completionEntries;
    r = io_uring_queue_init_params(entries, &ring, &params);
  }
  if (r == -EINVAL) {
    // TASKRUN_FLAG: with COOP_TASKRUN, completions may wait as task work until the worker
    // enters the kernel; the flag tells liburing's peek (run(0)) to enter for them.
    params = {};
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
                   IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SINGLE_ISSUER;
    params.cq_entries = completionEntries;
    r = io_uring_queue_init_params(entries, &ring, &params);
  }
  if (r == -EINVAL) {
    params = {};
    params.flags = IORING_SETUP_CQSIZE;
    params.cq_entries = completionEntries;
    r = io_uring_queue_init_params(entries, &ring, &params);
  }
  return r;
}

class UringLoop final : public IoLoopBase {
 public:
  UringLoop() : pool_(BufferPool::create(kLentBufferSize, kMaxLentBuffers)) {
    const int r = setUpRing(ring_, kEntries, kCompletionEntries);
    if (r < 0) {
      pool_->retire();
      throw std::system_error(-r, std::generic_category(), "weft: io_uring set-up failed");
    }
    pool_->setRecycle(&UringLoop::recycleIntoRing, this);
    // A registered ring descriptor (Linux 5.18): liburing's io_uring_enter then names the
    // ring by its index in this thread's table, which spares the kernel a descriptor
    // lookup (an atomic get and put, the process being threaded) per system call: 36 ns of
    // 286 per enter, measured. Only this thread may use the index; SINGLE_ISSUER already
    // binds the ring to it. A kernel without it (EINVAL), or a thread whose table is full
    // (16 rings), enters by descriptor, as before.
    ringRegistered_ = !leftOut().registeredRing && io_uring_register_ring_fd(&ring_) == 1;
    owner_ = ::pthread_self();
    multishot_ = gKernelMultishotReceive.load(std::memory_order_relaxed) &&
                 !leftOut().multishotReceive;
  }
  ~UringLoop() override {
    if (ringRegistered_ && ::pthread_equal(owner_, ::pthread_self()) == 0) {
      // The registration lives in the creating thread's table and goes when that thread
      // exits (the ring's memory with it). Unregistering from here cannot reach it, and
      // would drop what this thread registered at the same index: the kernel refuses a
      // SINGLE_ISSUER ring's register calls from another thread (EEXIST), but a ring set up
      // without it (the last fallback) would not be protected.
      ring_.enter_ring_fd = kForeignRingIndex;
    }
    io_uring_queue_exit(&ring_);
    if (bufferRing_ != nullptr) ::munmap(bufferRing_, kRingEntries * sizeof(io_uring_buf));
    pool_->retire();
  }

  IoBackend backend() const noexcept override { return IoBackend::kIoUring; }

  bool multishotReceive() const noexcept override { return multishot_; }

  // Counted for the metrics (IoLoopBase::counted). start() leaves op.opcode as it is.
  bool submit(IoOperation& op) noexcept override { return counted(op.opcode, start(op)); }

  // submit() without the counting.
  bool start(IoOperation& op) noexcept {
    op.loopShutDown = false;
    if (shutDown_) {
      op.result = -ECANCELED;
      op.loopShutDown = true;
      return true;
    }
    op.loopBuffer = BufferPool::kNone;
    if (op.opcode >= IoOpcode::kReceiveMultishot) [[unlikely]] {
      return op.opcode == IoOpcode::kWait ? park(op) : submitMultishot(op);
    }
    if (receivesLent(op.opcode) && !ringReady_) [[unlikely]] {
      if (!setUpBufferRing()) {
        // No buffer ring on this kernel: a plain recv into a buffer held while it waits.
        op.loopBuffer = pool_->take();
        if (op.loopBuffer == BufferPool::kNone) {
          op.result = -ENOBUFS;
          return true;
        }
      }
    }
    std::uint32_t lane = kNoLane;
    if (const std::uint32_t direction = kDirections[static_cast<std::uint8_t>(op.opcode)];
        direction != 0 && op.fd >= 0) {
      lane = static_cast<std::uint32_t>(op.fd) * 2 + direction - 1;
      if (lane >= laneCount_ && !grow(lane)) [[unlikely]] {
        releaseHeldBuffer(op);
        op.result = -ENOMEM;
        return true;
      }
      if (lanes_[lane].head != nullptr) [[unlikely]] return enqueue(op, lane);
    }
    const bool timed = op.timeoutNs >= 0;
    // A linked timeout must follow its operation in the same submission.
    if (timed && io_uring_sq_space_left(&ring_) < 2) io_uring_submit(&ring_);
    io_uring_sqe* sqe = nextSqe();
    if (sqe == nullptr) {
      releaseHeldBuffer(op);
      op.result = -EBUSY;
      return true;
    }
    prepare(sqe, op);
    openSlot(op, lane);
    io_uring_sqe_set_data64(sqe, op.loopKey);
    if (timed) linkTimeout(sqe, op);  // room was made above
    if (lane != kNoLane) {  // alone in its lane
      op.loopNext = op.loopPrev = nullptr;
      lanes_[lane].head = lanes_[lane].tail = &op;
    }
    ++inFlight_;
    return false;
  }

  bool withdraw(IoOperation& op) noexcept override {
    const std::uint32_t index = indexOf(op.loopKey);
    if (index >= slots_.size() || slots_[index].op != &op ||
        slots_[index].generation != static_cast<std::uint32_t>(op.loopKey >> 32)) {
      return true;  // not in flight
    }
    Slot& slot = slots_[index];
    if (slot.where != Where::kKernel) [[unlikely]] {
      // Queued behind another operation, parked (kWait), or ended without reaching the
      // kernel (cancelled, timed out) with its completion waiting for this loop's turn, as
      // epoll's ready ops.
      const bool neverTookEffect = slot.where != Where::kReady;
      const bool timer = slot.timer && !consumed(slot.timerTail);
      listOf(slot).remove(op);
      retire(op, index);
      releaseHeldBuffer(op);
      // The kernel may not have read its timer's entry yet, which points into `op`.
      if (timer) io_uring_submit(&ring_);
      settle(op);
      return neverTookEffect;
    }
    // Its entry may still wait in the submission queue: hand it over first, so that the
    // synchronous cancellation finds it in the kernel.
    io_uring_submit(&ring_);
    io_uring_sync_cancel_reg reg{};
    reg.addr = op.loopKey;
    reg.fd = -1;
    reg.timeout.tv_sec = -1;
    reg.timeout.tv_nsec = -1;
    const int r = io_uring_register_sync_cancel(&ring_, &reg);
    // 0: cancelled before it took effect; -ENOENT: it had completed (its completion
    // waits in the queue, and what it did, a read's bytes taken or an accepted
    // connection, cannot be undone); -EALREADY: it was completing.
    if (r < 0 && r != -ENOENT && r != -EALREADY) fail("io_uring synchronous cancellation", -r);
    retire(op, index);  // its completion, if any, is dropped; the next in its lane goes
    // The kernel is done with it now; a buffer it picked from the ring comes back with
    // the dropped completion (reap).
    releaseHeldBuffer(op);
    settle(op);
    return r == 0;
  }

  std::size_t lentBuffers() const noexcept override {
    pool_->drainReturned();  // the pool is not part of the loop's const state
    return pool_->lentCount();
  }

  LentBuffer lendBuffer() noexcept override {
    const std::uint32_t id = pool_->take();
    if (id == BufferPool::kNone) return {};
    return pool_->lend(id, pool_->bufferSize());
  }

  std::size_t run(int timeoutMs) noexcept override {
    return runFor(timeoutMs < 0 ? -1 : std::int64_t{timeoutMs} * 1000000);
  }

  std::size_t runFor(std::int64_t timeoutNs) noexcept override {
    grewThisTurn_ = false;
    drainRemoteCancels();
    pool_->drainReturned();
    if (!wakeArmed_) armWake();
    if (timeoutNs != 0 && io_uring_cq_ready(&ring_) == 0 && ready_.head == nullptr) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{};
      ts.tv_sec = timeoutNs / 1000000000;
      ts.tv_nsec = timeoutNs % 1000000000;
      const int r =
          io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, timeoutNs > 0 ? &ts : nullptr, nullptr);
      if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY) fail("io_uring_enter", -r);
    } else if (io_uring_sq_ready(&ring_) != 0) {
      const int r = io_uring_submit(&ring_);
      if (r < 0 && r != -EINTR && r != -EBUSY) fail("io_uring_submit", -r);
    }
    return reap();
  }

  void shutdown() noexcept override {
    if (shutDown_) return;
    shutDown_ = true;
    // Operations queued behind a lane's head, and parked ones (kWait), never reached the
    // kernel: they end now.
    while (parked_.head != nullptr) {
      IoOperation& op = *parked_.head;
      parked_.remove(op);
      op.result = -ECANCELED;
      op.loopShutDown = true;
      makeReady(op);
    }
    for (List& lane : lanes_) {
      while (lane.head != nullptr && lane.head->loopNext != nullptr) {
        IoOperation& op = *lane.head->loopNext;
        lane.remove(op);
        op.result = -ECANCELED;
        op.loopShutDown = true;
        makeReady(op);
      }
    }
    if (inFlight_ == 0) return;
    io_uring_sqe* sqe = nextSqe();
    if (sqe == nullptr) fail("io_uring cancellation of every operation (no queue entry)", EBUSY);
    io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data64(sqe, kCancelKey);
  }

 private:
  // Where an operation that holds a slot is.
  enum class Where : std::uint8_t {
    kKernel,  // its entry is in the kernel (or in the submission queue, bound for it)
    kQueued,  // in its lane, behind the head
    kParked,  // a kWait, on parked_
    kReady,   // on ready_: ended without reaching the kernel, completion not yet run
  };
  struct Slot {
    IoOperation* op = nullptr;
    std::uint32_t generation = 0;
    std::uint32_t nextFree = 0;
    std::uint32_t lane = kNoLane;  // the operation's lane, or kNoLane
    Where where = Where::kKernel;
    bool timer = false;  // the operation's own timer is in the kernel (kTimerBit)
    bool arrived = false;  // a kReceiveMultishot has delivered an arrival
    std::uint32_t timerTail = 0;  // the submission queue's tail just past its timer's entry
  };
  // Operations linked through loopNext/loopPrev: a lane (the head in the kernel, the
  // others queued behind it) or ready_.
  using List = IoOperationList;

  static std::uint32_t indexOf(std::uint64_t key) noexcept {
    return static_cast<std::uint32_t>(key);
  }

  // Starts `op`'s life in the loop: not cancelled, no state yet, a slot of its own (its
  // key in op.loopKey). Throws std::bad_alloc if the slot table cannot grow.
  void openSlot(IoOperation& op, std::uint32_t lane) {
    op.loopCancelled = false;
    op.loopState.store(0, std::memory_order_relaxed);  // not yet visible to other threads
    op.loopKey = takeSlot(op, lane);
  }

  std::uint64_t takeSlot(IoOperation& op, std::uint32_t lane) {
    std::uint32_t index;
    if (freeHead_ != kNoFree) {
      index = freeHead_;
      freeHead_ = slots_[index].nextFree;
    } else {
      index = static_cast<std::uint32_t>(slots_.size());
      slots_.push_back({});
    }
    Slot& slot = slots_[index];
    slot.op = &op;
    slot.lane = lane;
    slot.where = Where::kKernel;
    slot.timer = false;
    slot.arrived = false;
    return (std::uint64_t{slot.generation} << 32) | index;
  }
  void releaseSlot(std::uint32_t index) noexcept {
    Slot& slot = slots_[index];
    slot.op = nullptr;
    ++slot.generation;
    slot.nextFree = freeHead_;
    freeHead_ = index;
  }

  // Grows the table of lanes to hold `lane`. False if that fails (std::bad_alloc).
  bool grow(std::uint32_t lane) noexcept {
    try {
      lanes_.resize(std::max<std::size_t>(std::size_t{lane} + 2, lanes_.size() * 2));
      laneCount_ = static_cast<std::uint32_t>(std::min<std::size_t>(lanes_.size(), kNoLane));
      return true;
    } catch (...) {
      return false;
    }
  }

  // Gives `op` a slot (`where`, in `lane`) and, when it has a time limit, a timer of its own
  // that starts now (loopTime holds the timespec until the kernel has read it). True when
  // no submission entry was left for the timer: `op` is then done, with -EBUSY.
  bool holdSlot(IoOperation& op, std::uint32_t lane, Where where) noexcept {
    openSlot(op, lane);
    Slot& slot = slots_[indexOf(op.loopKey)];
    slot.where = where;
    if (op.timeoutNs >= 0) {
      io_uring_sqe* sqe = nextSqe();
      if (sqe == nullptr) {
        releaseSlot(indexOf(op.loopKey));
        op.result = -EBUSY;
        return true;
      }
      setTimespec(op);
      io_uring_prep_timeout(sqe, reinterpret_cast<__kernel_timespec*>(op.loopTime), 0, 0);
      io_uring_sqe_set_data64(sqe, op.loopKey | kTimerBit);
      slot.timer = true;
      slot.timerTail = ring_.sq.sqe_tail;
    }
    return false;
  }

  // Queues `op` behind its lane's head (holdSlot).
  bool enqueue(IoOperation& op, std::uint32_t lane) noexcept {
    if (holdSlot(op, lane, Where::kQueued)) return true;
    lanes_[lane].append(op);
    ++inFlight_;
    return false;
  }

  // The list an operation that holds a slot but is not in the kernel is on.
  List& listOf(const Slot& slot) noexcept {
    switch (slot.where) {
      case Where::kQueued: return lanes_[slot.lane];
      case Where::kParked: return parked_;
      default: return ready_;
    }
  }

  // Submits a kWait: it holds a slot, on parked_, with a timer of its own for its time
  // limit, until cancel() or the timer ends it.
  [[gnu::noinline]] bool park(IoOperation& op) noexcept {
    if (holdSlot(op, kNoLane, Where::kParked)) return true;
    parked_.append(op);
    ++inFlight_;
    return false;
  }

  // Submits a kReceiveMultishot: in no lane (its stream's owner sees to it that nothing
  // else receives on the socket meanwhile), with no time limit.
  [[gnu::noinline]] bool submitMultishot(IoOperation& op) noexcept {
    if (!multishot_ || (!ringReady_ && !setUpBufferRing())) {
      multishot_ = false;  // no buffer ring: single receives, each into a buffer it holds
      op.result = -EOPNOTSUPP;
      return true;
    }
    io_uring_sqe* sqe = nextSqe();
    if (sqe == nullptr) {
      op.result = -EBUSY;
      return true;
    }
    prepare(sqe, op);
    openSlot(op, kNoLane);
    io_uring_sqe_set_data64(sqe, op.loopKey);
    ++inFlight_;
    return false;
  }

  // A completion of the kReceiveMultishot `op` (in the kernel at `slot`). An arrival that
  // leaves the request armed (IORING_CQE_F_MORE) is delivered now (`more` set) and true is
  // returned. So is true when the request ended with ENOBUFS (the ring was empty) and
  // goes on as a plain recv into a buffer of its own, in its place (the rule of
  // kReceiveLent, see the top), whose completion is then the last. Otherwise the request
  // has ended: false, with the bytes of the last arrival lent into op.lent and `res` the
  // result to complete it with (-ECANCELED for an ENOBUFS that a cancellation stopped,
  // -EOPNOTSUPP when the kernel refused the multishot form: the loop then offers it no
  // more).
  bool multishotCompletion(IoOperation& op, Slot& slot, int& res, std::uint32_t flags) noexcept {
    if ((flags & IORING_CQE_F_MORE) != 0) [[likely]] {
      takeReceived(op, res, flags);
      op.result = res;
      op.more = true;
      slot.arrived = true;
      op.complete(op);  // may cancel `op`, never withdraws or resubmits it
      return true;
    }
    op.more = false;
    if (res == -ENOBUFS && (flags & IORING_CQE_F_BUFFER) == 0) [[unlikely]] {
      if (resubmitWithoutRingBuffer(op, slot)) return true;
      if (op.loopCancelled || shutDown_) res = -ECANCELED;
    } else if (res == -EINVAL && !slot.arrived && op.loopBuffer == BufferPool::kNone) [[unlikely]] {
      multishot_ = false;  // a kernel that refuses IORING_RECV_MULTISHOT after all
      res = -EOPNOTSUPP;
    }
    takeReceived(op, res, flags);
    return false;
  }

  // `op`, the head of lane `index`, leaves it (completed, or withdrawn).
  void leaveLane(IoOperation& op, std::uint32_t index) noexcept {
    List& lane = lanes_[index];
    IoOperation* next = op.loopNext;
    lane.head = next;
    if (next == nullptr) [[likely]] {
      lane.tail = nullptr;
      return;
    }
    next->loopPrev = nullptr;
    op.loopNext = nullptr;
    promote(lane);
  }

  // The head of `lane` goes to the kernel. One that finds no submission queue entry fails
  // as submit would, and the next goes. Out of line: the common path (one operation per
  // lane) never comes here.
  [[gnu::noinline]] void promote(List& lane) noexcept {
    while (IoOperation* next = lane.head) {
      // No linked timeout: its own timer, armed when it queued, keeps running.
      if (io_uring_sqe* sqe = nextSqe(); sqe != nullptr) {
        prepare(sqe, *next);
        io_uring_sqe_set_data64(sqe, next->loopKey);
        slots_[indexOf(next->loopKey)].where = Where::kKernel;
        return;
      }
      lane.remove(*next);
      next->result = -EBUSY;
      makeReady(*next);
    }
  }

  // Puts `op` (holding a slot, in no list) on ready_ with its result set.
  void makeReady(IoOperation& op) noexcept {
    slots_[indexOf(op.loopKey)].where = Where::kReady;
    ready_.append(op);
  }

  // Frees the slot of `op`, which is leaving (its list is left already, except a lane's
  // head, which leaves its lane here), and removes its timer from the kernel.
  void retire(IoOperation& op, std::uint32_t index) noexcept {
    Slot& slot = slots_[index];
    const std::uint32_t lane = slot.where == Where::kKernel ? slot.lane : kNoLane;
    if (slot.timer) [[unlikely]] removeTimer(op);
    releaseSlot(index);  // a later completion of the operation or its timer is dropped
    if (lane != kNoLane) leaveLane(op, lane);
  }
  void removeTimer(const IoOperation& op) noexcept {
    if (io_uring_sqe* sqe = nextSqe(); sqe != nullptr) {  // else it fires, and is dropped
      io_uring_prep_timeout_remove(sqe, op.loopKey | kTimerBit, 0);
      io_uring_sqe_set_data64(sqe, kCancelKey);
    }
  }

  // Links a timeout for op.timeoutNs to `sqe`, op's entry just prepared: the timeout's
  // entry must follow it in the same submission (the caller made room for two).
  void linkTimeout(io_uring_sqe* sqe, IoOperation& op) noexcept {
    io_uring_sqe* timeout = io_uring_get_sqe(&ring_);
    sqe->flags |= IOSQE_IO_LINK;
    setTimespec(op);
    io_uring_prep_link_timeout(timeout, reinterpret_cast<__kernel_timespec*>(op.loopTime), 0);
    io_uring_sqe_set_data64(timeout, kCancelKey);
  }

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

  // always_inline: in submit's common path, as it was before promote() called it too.
  [[gnu::always_inline]] void prepare(io_uring_sqe* sqe, IoOperation& op) noexcept {
    // The ring's length field is 32 bits; Linux transfers at most kMaxTransfer bytes per
    // call anyway (as read(2) does), so a longer buffer is a partial transfer, not a
    // length truncated to its low bits. op.length keeps the whole: a `whole` operation
    // goes on with the rest.
    const std::size_t length = std::min<std::size_t>(op.length, kMaxTransfer);
    switch (op.opcode) {
      case IoOpcode::kReceive:
        io_uring_prep_recv(sqe, op.fd, op.buffer, length, op.flags);
        return;
      case IoOpcode::kSend:
        io_uring_prep_send(sqe, op.fd, op.buffer, length, op.flags | MSG_NOSIGNAL);
        return;
      case IoOpcode::kAccept:
        io_uring_prep_accept(sqe, op.fd, op.address,
                             op.address != nullptr ? &op.addressLength : nullptr,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
        return;
      case IoOpcode::kConnect:
        io_uring_prep_connect(sqe, op.fd, op.address, op.addressLength);
        return;
      case IoOpcode::kReceiveMessage:
        io_uring_prep_recvmsg(sqe, op.fd, op.message, static_cast<unsigned>(op.flags));
        return;
      case IoOpcode::kSendMessage:
        io_uring_prep_sendmsg(sqe, op.fd, op.message, static_cast<unsigned>(op.flags | MSG_NOSIGNAL));
        return;
      case IoOpcode::kReadAt:
        io_uring_prep_read(sqe, op.fd, op.buffer, static_cast<unsigned>(length), op.offset);
        return;
      case IoOpcode::kWriteAt:
        io_uring_prep_write(sqe, op.fd, op.buffer, static_cast<unsigned>(length), op.offset);
        return;
      case IoOpcode::kSync:
        io_uring_prep_fsync(sqe, op.fd,
                            op.flags == IoOperation::kSyncDataOnly ? IORING_FSYNC_DATASYNC : 0);
        return;
      case IoOpcode::kPollReadable:
        io_uring_prep_poll_add(sqe, op.fd, POLLIN);
        return;
      case IoOpcode::kPollWritable:
        io_uring_prep_poll_add(sqe, op.fd, POLLOUT);
        return;
      case IoOpcode::kReceiveLent:
        if (op.loopBuffer != BufferPool::kNone) [[unlikely]] {  // a plain recv (see the top)
          io_uring_prep_recv(sqe, op.fd, pool_->address(op.loopBuffer), pool_->bufferSize(),
                             op.flags);
          return;
        }
        io_uring_prep_recv(sqe, op.fd, nullptr, pool_->bufferSize(), op.flags);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = kBufferGroup;
        return;
      case IoOpcode::kReceiveMultishot:
        if (op.loopBuffer != BufferPool::kNone) [[unlikely]] {  // after ENOBUFS (see the top)
          io_uring_prep_recv(sqe, op.fd, pool_->address(op.loopBuffer), pool_->bufferSize(),
                             op.flags);
          return;
        }
        io_uring_prep_recv_multishot(sqe, op.fd, nullptr, 0, op.flags);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = kBufferGroup;
        return;
      case IoOpcode::kWait:
        break;  // never prepared: parked (see park)
      case IoOpcode::kReceiveMessageLent:
        // A single-shot recvmsg: the kernel writes the sender, its length and msg_flags
        // (MSG_TRUNC) into the caller's msghdr, as for kReceiveMessage. With a ring
        // buffer, the one iovec only gives the length (the kernel picks the address);
        // the kernel reads the msghdr and the iovec when it issues the request.
        op.message->msg_iov[0].iov_len = kLentDatagramSize;
        io_uring_prep_recvmsg(sqe, op.fd, op.message, static_cast<unsigned>(op.flags));
        if (op.loopBuffer != BufferPool::kNone) [[unlikely]] {  // a plain recvmsg
          op.message->msg_iov[0].iov_base = pool_->address(op.loopBuffer);
          return;
        }
        op.message->msg_iov[0].iov_base = nullptr;
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = kBufferGroup;
        return;
    }
    io_uring_prep_nop(sqe);
  }

  void armWake() noexcept {
    io_uring_sqe* sqe = nextSqe();
    if (sqe == nullptr) return;  // retried by the next run()
    io_uring_prep_read(sqe, wakeFd_, &wakeValue_, sizeof wakeValue_, 0);
    io_uring_sqe_set_data64(sqe, kWakeKey);
    wakeArmed_ = true;
  }

  void cancelLocal(IoOperation& op) noexcept override {
    const std::uint32_t index = indexOf(op.loopKey);
    if (index >= slots_.size() || slots_[index].op != &op) return;  // completing already
    if (slots_[index].where != Where::kKernel) [[unlikely]] {
      if (slots_[index].where == Where::kReady) return;  // completing already
      // Queued or parked: it never reached the kernel, and ends now (its completion runs
      // from run()).
      listOf(slots_[index]).remove(op);
      op.result = -ECANCELED;
      op.loopCancelled = true;
      makeReady(op);
      return;
    }
    io_uring_sqe* sqe = nextSqe();
    if (sqe == nullptr) return;  // cannot happen after nextSqe's submit; harmless
    io_uring_prep_cancel64(sqe, op.loopKey, 0);
    io_uring_sqe_set_data64(sqe, kCancelKey);
    op.loopCancelled = true;
  }

  // Runs the completions that are ready, in batches, until none is left: first those of
  // ready_, then the kernel's.
  std::size_t reap() noexcept {
    std::size_t n = 0;
    for (;;) {
      drainRemoteCancels();
      if (ready_.head != nullptr) [[unlikely]] {
        finishReady();
        ++n;
        continue;
      }
      io_uring_cqe* cqes[64];
      const unsigned count = io_uring_peek_batch_cqe(&ring_, cqes, 64);
      if (count == 0) return n;
      // The ring may grow again for an ENOBUFS in this batch: a turn that reaps the
      // arrivals of thousands of connections is many batches long, and growing once per
      // turn left a 10,000-connection echo server's ring at 64 buffers, one receive in
      // three falling back to a plain recv (docs/design/2026-11-c10k.md).
      grewThisTurn_ = false;
      struct Done {
        std::uint64_t key;
        int res;
        std::uint32_t flags;
      } done[64];
      for (unsigned i = 0; i < count; ++i) {
        done[i] = {cqes[i]->user_data, cqes[i]->res, cqes[i]->flags};
      }
      // Consumed before any completion function runs (they may submit and reap).
      io_uring_cq_advance(&ring_, count);
      for (unsigned i = 0; i < count; ++i) {
        const auto index = static_cast<std::uint32_t>(done[i].key);
        if ((index & kTimerBit) != 0) [[unlikely]] {  // the wake-up, a cancel, or a timer
          if (index == kWakeIndex) {
            wakeArmed_ = false;
          } else if (index != kCancelIndex) {
            timerExpired(done[i].key & ~std::uint64_t{kTimerBit}, done[i].res);
          }
          continue;
        }
        if (index >= slots_.size() ||
            slots_[index].generation != static_cast<std::uint32_t>(done[i].key >> 32) ||
            slots_[index].op == nullptr) {
          // Withdrawn. A buffer the kernel picked for it goes back to the ring.
          if ((done[i].flags & IORING_CQE_F_BUFFER) != 0) [[unlikely]] {
            ringBufferBack(done[i].flags, -1, nullptr);
          }
          continue;
        }
        // retire(), for an operation in the kernel: the next in its lane goes to the
        // kernel before `op` resumes.
        Slot& slot = slots_[index];
        IoOperation& op = *slot.op;
        if (op.opcode == IoOpcode::kReceiveMultishot) {
          if (multishotCompletion(op, slot, done[i].res, done[i].flags)) {
            ++n;
            continue;  // an arrival (the request stays armed), or in the kernel again
          }
        } else if (receivesLent(op.opcode)) {
          if (done[i].res == -ENOBUFS && (done[i].flags & IORING_CQE_F_BUFFER) == 0 &&
              resubmitWithoutRingBuffer(op, slot)) [[unlikely]] {
            continue;  // in the kernel again, still at the head of its lane
          }
          takeReceived(op, done[i].res, done[i].flags);
        }
        int res = done[i].res;
        if (op.whole && res > 0 && static_cast<std::size_t>(res) < op.length) [[unlikely]] {
          res = continueWhole(op, index, res);
          if (res == 0) continue;  // in the kernel again, still at the head of its lane
        }
        const std::uint32_t lane = slot.lane;
        if (slot.timer) [[unlikely]] removeTimer(op);
        releaseSlot(index);  // before `op` resumes: it may be submitted again
        if (lane != kNoLane) leaveLane(op, lane);
        if ((op.opcode == IoOpcode::kPollReadable || op.opcode == IoOpcode::kPollWritable) &&
            res > 0) {
          res = 0;
        }
        if (res == -ECANCELED && op.timeoutNs >= 0 && !op.loopCancelled && !shutDown_) {
          res = -ETIMEDOUT;  // its linked timeout fired, or its own timer cancelled it
        }
        op.result = res;
        if (shutDown_ && res == -ECANCELED) op.loopShutDown = true;
        finish(op);
        ++n;
      }
    }
  }

  // A `whole` operation (IoOperation::whole), in the kernel at slot `index`, moved `moved`
  // bytes, fewer than its length. Unless it is being cancelled (or the loop shuts down),
  // the rest goes to the kernel at once, in its place at the head of its lane (the
  // operations queued behind it keep waiting), under a new key: a cancellation the
  // operation's own timer sent for the attempt that ended then finds nothing. The rest's
  // wait has a time limit of its own (a linked timeout), as a new write would. Returns 0
  // when it is in the kernel again, else the result it completes with: -ECANCELED, or
  // -EBUSY without a submission queue entry (cannot happen after nextSqe's submit);
  // `buffer` is past the bytes moved either way.
  [[gnu::noinline]] int continueWhole(IoOperation& op, std::uint32_t index, int moved) noexcept {
    advanceWhole(op, static_cast<std::size_t>(moved));
    if (op.loopCancelled || shutDown_) return -ECANCELED;
    Slot& slot = slots_[index];
    if (slot.timer) {
      removeTimer(op);  // named by the key that ends here
      slot.timer = false;
    }
    ++slot.generation;
    op.loopKey = (std::uint64_t{slot.generation} << 32) | index;
    const bool timed = op.timeoutNs >= 0;
    if (timed && io_uring_sq_space_left(&ring_) < 2) io_uring_submit(&ring_);
    io_uring_sqe* sqe = nextSqe();
    if (sqe == nullptr) return -EBUSY;
    prepare(sqe, op);
    io_uring_sqe_set_data64(sqe, op.loopKey);
    if (timed) linkTimeout(sqe, op);  // room was made above
    return 0;
  }

  // Runs the completion of the first operation on ready_.
  void finishReady() noexcept {
    IoOperation& op = *ready_.head;
    ready_.remove(op);
    const std::uint32_t index = indexOf(op.loopKey);
    const bool timer = slots_[index].timer && !consumed(slots_[index].timerTail);
    retire(op, index);
    releaseHeldBuffer(op);
    // The kernel may not have read its timer's entry yet, which points into `op`, and the
    // completion may free `op`.
    if (timer) io_uring_submit(&ring_);
    finish(op);
  }

  // The timer of a queued operation (key: its slot) completed with `res`. -ETIME: its
  // time limit passed. Queued still, it ends with ETIMEDOUT; in the kernel since, it is
  // cancelled there (reap reads the -ECANCELED as ETIMEDOUT). Any other result (the timer
  // was removed, or cancelled at shutdown) or a slot that moved on: nothing to do.
  void timerExpired(std::uint64_t key, int res) noexcept {
    const std::uint32_t index = indexOf(key);
    if (res != -ETIME || index >= slots_.size() || slots_[index].op == nullptr ||
        slots_[index].generation != static_cast<std::uint32_t>(key >> 32)) {
      return;
    }
    Slot& slot = slots_[index];
    slot.timer = false;
    IoOperation& op = *slot.op;
    if (slot.where == Where::kQueued || slot.where == Where::kParked) {
      listOf(slot).remove(op);
      op.result = -ETIMEDOUT;
      makeReady(op);
    } else if (slot.where == Where::kKernel) {
      if (io_uring_sqe* sqe = nextSqe(); sqe != nullptr) {  // cannot fail after a submit
        io_uring_prep_cancel64(sqe, key, 0);
        io_uring_sqe_set_data64(sqe, kCancelKey);
      }
    }
  }

  // --- lent buffers (kReceiveLent, kReceiveMessageLent) --------------------------------

  // Registers the provided-buffer ring and fills it with kInitialRingBuffers. False (once
  // and for all) when the kernel has no buffer rings (before Linux 5.19) or memory is
  // short: receives then use plain recvs into pool buffers.
  [[gnu::noinline]] bool setUpBufferRing() noexcept {
    if (ringFailed_) return false;
    void* memory = ::mmap(nullptr, kRingEntries * sizeof(io_uring_buf), PROT_READ | PROT_WRITE,
                          MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (memory == MAP_FAILED) {
      ringFailed_ = true;
      return false;
    }
    bufferRing_ = static_cast<io_uring_buf_ring*>(memory);
    io_uring_buf_ring_init(bufferRing_);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uint64_t>(bufferRing_);
    reg.ring_entries = kRingEntries;
    reg.bgid = kBufferGroup;
    if (io_uring_register_buf_ring(&ring_, &reg, 0) != 0) {
      ::munmap(bufferRing_, kRingEntries * sizeof(io_uring_buf));
      bufferRing_ = nullptr;
      ringFailed_ = true;
      return false;
    }
    ringReady_ = true;
    if (!growRing(kInitialRingBuffers)) {
      // No memory for the first buffers: the ring stays empty and every receive falls
      // back (ENOBUFS) to a plain recv, which then fails the same way if memory is short.
    }
    return true;
  }

  // Adds `n` new pool buffers to the ring (the pool's limit permitting), and as many to
  // the number it keeps. False when none could be added.
  bool growRing(std::uint32_t n) noexcept {
    const std::uint32_t first = pool_->grow(n);
    if (first == BufferPool::kNone) return false;
    ringTarget_ += pool_->end() - first;
    for (std::uint32_t id = first; id < pool_->end(); ++id) pool_->recycle(id);
    return true;
  }

  // BufferPool's recycle function: a buffer coming back goes into the ring if the ring
  // holds fewer than it keeps (ringTarget_), else onto the pool's free list. So buffers
  // lent whole (lendBuffer, which takes from the free list) go back to the free list once
  // the ring is full again, instead of each growing the ring for good.
  static bool recycleIntoRing(void* context, std::uint32_t id) noexcept {
    auto* self = static_cast<UringLoop*>(context);
    if (!self->ringReady_ || id > kMaxRingId || self->ringHeld_ >= self->ringTarget_ ||
        self->ringHeld_ >= kRingEntries) {
      return false;
    }
    io_uring_buf_ring_add(self->bufferRing_, self->pool_->address(id), self->pool_->bufferSize(),
                          static_cast<std::uint16_t>(id), io_uring_buf_ring_mask(kRingEntries), 0);
    io_uring_buf_ring_advance(self->bufferRing_, 1);
    ++self->ringHeld_;
    return true;
  }

  // A completion that names a ring buffer (IORING_CQE_F_BUFFER): the buffer left the ring.
  // With res > 0 bytes it is lent into *lent; otherwise it goes back.
  void ringBufferBack(std::uint32_t flags, int res, LentBuffer* lent) noexcept {
    const std::uint32_t id = flags >> IORING_CQE_BUFFER_SHIFT;
    --ringHeld_;
    if (res > 0 && lent != nullptr) {
      *lent = pool_->lend(id, static_cast<std::size_t>(res));
    } else {
      pool_->recycle(id);
    }
  }

  // A kReceiveLent's or kReceiveMessageLent's completion: the received bytes (in a ring
  // buffer or the buffer it held) are lent into op.lent; a buffer with nothing in it (the
  // end of a stream, an empty datagram, a failure) goes back.
  void takeReceived(IoOperation& op, int res, std::uint32_t flags) noexcept {
    if ((flags & IORING_CQE_F_BUFFER) != 0) {
      ringBufferBack(flags, res, &op.lent);
    } else if (op.loopBuffer != BufferPool::kNone) {
      if (res > 0) {
        op.lent = pool_->lend(op.loopBuffer, static_cast<std::size_t>(res));
        op.loopBuffer = BufferPool::kNone;
      } else {
        releaseHeldBuffer(op);
      }
    }
  }

  // Gives back the buffer `op` holds for a plain recv, if any.
  void releaseHeldBuffer(IoOperation& op) noexcept {
    if (op.loopBuffer != BufferPool::kNone) [[unlikely]] {
      pool_->recycle(op.loopBuffer);
      op.loopBuffer = BufferPool::kNone;
    }
  }

  // The kernel found the ring empty (ENOBUFS) for `op`, which took no byte. Unless it is
  // being cancelled (or the loop shuts down), it goes to the kernel again at once, before
  // any later receive on its socket, as a plain recv into a pool buffer it holds (see the
  // top); the ring grows for the next burst. Its time limit starts again. False when it
  // cannot (it then completes with ENOBUFS).
  bool resubmitWithoutRingBuffer(IoOperation& op, const Slot& slot) noexcept {
    if (op.loopCancelled || shutDown_) return false;
    if (!grewThisTurn_ && ringTarget_ < kRingEntries) {
      grewThisTurn_ = true;
      (void)growRing(ringTarget_);  // no memory: the plain recvs below still serve
    }
    if (op.loopBuffer == BufferPool::kNone) {
      op.loopBuffer = pool_->take();
      if (op.loopBuffer == BufferPool::kNone) return false;
    }
    const bool linked = op.timeoutNs >= 0 && !slot.timer;  // its linked timeout ended with it
    if (linked && io_uring_sq_space_left(&ring_) < 2) io_uring_submit(&ring_);
    io_uring_sqe* sqe = nextSqe();
    if (sqe == nullptr) {  // cannot happen after nextSqe's submit
      releaseHeldBuffer(op);
      return false;
    }
    prepare(sqe, op);
    io_uring_sqe_set_data64(sqe, op.loopKey);
    if (linked) linkTimeout(sqe, op);  // room was made above
    return true;
  }

  static constexpr std::uint32_t kNoFree = 0xffffffffu;

  BufferPool* pool_;  // retired, not deleted: lent buffers may outlive the loop
  io_uring_buf_ring* bufferRing_ = nullptr;
  std::uint32_t ringHeld_ = 0;  // buffers in the ring (the kernel may pick them)
  std::uint32_t ringTarget_ = 0;  // how many the ring keeps: those growRing added
  bool ringReady_ = false;      // registered
  bool ringFailed_ = false;     // cannot be: plain recvs
  bool grewThisTurn_ = false;   // the ring grew for an ENOBUFS in this batch of completions
  bool multishot_ = false;      // kReceiveMultishot is served (multishotReceive())
  io_uring ring_{};
  std::vector<Slot> slots_;
  std::vector<List> lanes_;  // indexed by lane number (2 * fd + direction)
  std::uint32_t laneCount_ = 0;  // lanes_.size()
  List ready_;
  List parked_;  // kWait operations
  std::uint32_t freeHead_ = kNoFree;
  std::uint64_t wakeValue_ = 0;
  bool wakeArmed_ = false;
  bool ringRegistered_ = false;  // io_uring_register_ring_fd succeeded, on owner_
  pthread_t owner_{};            // the thread that created the loop (and the ring)
};

}  // namespace

std::unique_ptr<IoLoop> makeUringLoop() { return std::make_unique<UringLoop>(); }

namespace {

// Whether `ring` takes a multishot recv: one byte waits in a socket pair, and a multishot
// recv into a ring of one buffer must receive it and stay armed (IORING_CQE_F_MORE); a
// kernel without it fails the request with EINVAL. A few system calls, once per process.
bool probeMultishotReceive(io_uring& ring) noexcept {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) return false;
  constexpr unsigned kProbeEntries = 1;
  constexpr std::uint16_t kProbeGroup = 1;
  void* memory = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  bool supported = false;
  if (memory != MAP_FAILED) {
    auto* bufferRing = static_cast<io_uring_buf_ring*>(memory);
    io_uring_buf_ring_init(bufferRing);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uint64_t>(bufferRing);
    reg.ring_entries = kProbeEntries;
    reg.bgid = kProbeGroup;
    const char byte = 1;
    if (io_uring_register_buf_ring(&ring, &reg, 0) == 0 && ::write(fds[1], &byte, 1) == 1) {
      io_uring_buf_ring_add(bufferRing, static_cast<char*>(memory) + 2048, 16, 0,
                            io_uring_buf_ring_mask(kProbeEntries), 0);
      io_uring_buf_ring_advance(bufferRing, 1);
      if (io_uring_sqe* sqe = io_uring_get_sqe(&ring); sqe != nullptr) {
        io_uring_prep_recv_multishot(sqe, fds[0], nullptr, 0, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = kProbeGroup;
        io_uring_sqe_set_data64(sqe, 1);
        io_uring_cqe* cqe = nullptr;
        __kernel_timespec limit{};
        limit.tv_sec = 5;  // the byte is there: the answer comes at once
        if (io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &limit, nullptr) >= 0 &&
            cqe != nullptr) {
          supported = cqe->res == 1 && (cqe->flags & IORING_CQE_F_MORE) != 0;
          io_uring_cqe_seen(&ring, cqe);
        }
        // Ended before the buffer ring goes (its final completion is left in the ring).
        io_uring_sync_cancel_reg cancel{};
        cancel.addr = 1;
        cancel.fd = -1;
        cancel.timeout.tv_sec = -1;
        cancel.timeout.tv_nsec = -1;
        (void)io_uring_register_sync_cancel(&ring, &cancel);
      }
    }
  }
  ::close(fds[0]);
  ::close(fds[1]);
  if (memory != MAP_FAILED) {
    (void)io_uring_unregister_buf_ring(&ring, kProbeGroup);
    ::munmap(memory, 4096);
  }
  return supported;
}

}  // namespace

int probeIoUring() noexcept {
  io_uring ring{};
  int r = setUpRing(ring, 8, 16);
  if (r < 0) return -r;
  int result = 0;
  if (io_uring_probe* probe = io_uring_get_probe_ring(&ring); probe != nullptr) {
    for (int opcode : {IORING_OP_RECV, IORING_OP_SEND, IORING_OP_ACCEPT, IORING_OP_CONNECT,
                       IORING_OP_RECVMSG, IORING_OP_SENDMSG, IORING_OP_READ, IORING_OP_WRITE,
                       IORING_OP_FSYNC, IORING_OP_POLL_ADD, IORING_OP_ASYNC_CANCEL}) {
      if (!io_uring_opcode_supported(probe, opcode)) result = EOPNOTSUPP;
    }
    io_uring_free_probe(probe);
  } else {
    result = EOPNOTSUPP;
  }
  if (result == 0) {
    // withdraw() needs synchronous cancellation (Linux 6.0): ENOENT means it is there.
    io_uring_sync_cancel_reg reg{};
    reg.addr = 1;
    reg.fd = -1;
    reg.timeout.tv_sec = -1;
    reg.timeout.tv_nsec = -1;
    r = io_uring_register_sync_cancel(&ring, &reg);
    if (r != -ENOENT) result = r < 0 ? -r : EOPNOTSUPP;
    if (result == EINVAL) result = EOPNOTSUPP;
  }
  if (result == 0) {
    gKernelMultishotReceive.store(probeMultishotReceive(ring), std::memory_order_relaxed);
  }
  io_uring_queue_exit(&ring);
  return result;
}

}  // namespace weft::detail

#else  // !WEFT_HAVE_LIBURING

namespace weft::detail {

std::unique_ptr<IoLoop> makeUringLoop() {
  throw std::system_error(ENOSYS, std::generic_category(),
                          "weft: this weft was built without liburing: no io_uring loop");
}

int probeIoUring() noexcept { return ENOSYS; }

}  // namespace weft::detail

#endif
