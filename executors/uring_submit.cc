// The io_uring loop's (executors/detail/uring_loop.h) submission: an operation handed to
// the kernel (start, prepare), its slot and its lane, queued behind its lane's head or
// parked (a kWait), its time limit (a linked timeout or a timer of its own), the next in
// its lane promoted, a `whole` transfer or an ENOBUFS receive handed over again,
// cancellation and withdrawal. How the loop works: executors/uring_loop.cc.
#if defined(WEFT_HAVE_LIBURING)

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "weft/executors/detail/uring_loop.h"

namespace weft::detail::uring {

bool UringLoop::submit(IoOperation& op) noexcept { return counted(op.opcode, start(op)); }

// submit() without the counting.
[[gnu::always_inline]] inline bool UringLoop::start(IoOperation& op) noexcept {
  op.loopShutDown = false;
  if (shutDown_) {
    op.result = -ECANCELED;
    op.loopShutDown = true;
    return true;
  }
  op.loopBuffer = BufferPool::kNone;
  if (op.opcode >= IoOpcode::kReceiveMultishot) [[unlikely]] {
    if (op.opcode == IoOpcode::kWait) return park(op);
    op.result = -EOPNOTSUPP;  // an armed receive is an IoArmedReceive (armReceive)
    return true;
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
    lanes_[lane].start(op);
  }
  ++inFlight_;
  return false;
}

bool UringLoop::withdraw(IoOperation& op) noexcept {
  const std::uint32_t index = indexOf(op.loopKey);
  if (index >= slots_.size() || slots_[index].subject != &op ||
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
    unlist(slot, op);
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

// Grows the table of lanes to hold `lane`. False if that fails (std::bad_alloc).
bool UringLoop::grow(std::uint32_t lane) noexcept {
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
bool UringLoop::holdSlot(IoOperation& op, std::uint32_t lane, Where where) noexcept {
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
bool UringLoop::enqueue(IoOperation& op, std::uint32_t lane) noexcept {
  if (holdSlot(op, lane, Where::kQueued)) return true;
  lanes_[lane].append(op);
  ++inFlight_;
  return false;
}

// Submits a kWait: it holds a slot, on parked_, with a timer of its own for its time
// limit, until cancel() or the timer ends it.
[[gnu::noinline]] bool UringLoop::park(IoOperation& op) noexcept {
  if (holdSlot(op, kNoLane, Where::kParked)) return true;
  parked_.append(op);
  ++inFlight_;
  return false;
}

// Arms `request`: in no lane (its stream's owner sees to it that nothing else receives on
// the socket meanwhile), with no time limit, in a slot of its own (Where::kArmed).
int UringLoop::armReceive(IoArmedReceive& request) noexcept {
  const int r = arm(request);
  (void)counted(IoOpcode::kReceiveMultishot, r != 0);
  return r;
}

// armReceive() without the counting.
int UringLoop::arm(IoArmedReceive& request) noexcept {
  if (shutDown_) return -ECANCELED;
  if (!multishot_ || (!ringReady_ && !setUpBufferRing())) {
    multishot_ = false;  // no buffer ring: single receives, each into a buffer it holds
    return -EOPNOTSUPP;
  }
  request.loopBuffer = BufferPool::kNone;
  io_uring_sqe* sqe = nextSqe();
  if (sqe == nullptr) return -EBUSY;
  std::uint64_t key;
  try {
    key = takeSlot(&request, kNoLane, Where::kArmed);
  } catch (...) {
    io_uring_prep_nop(sqe);  // the entry is taken: it completes and is dropped
    io_uring_sqe_set_data64(sqe, kCancelKey);
    return -ENOMEM;
  }
  request.loopCancelled = false;
  request.loopState.store(0, std::memory_order_relaxed);  // not yet visible to other threads
  request.loopKey = key;
  prepareArmed(sqe, request);
  io_uring_sqe_set_data64(sqe, request.loopKey);
  ++inFlight_;
  return 0;
}

// The armed receive's entry: a multishot recv into the ring's buffers, or, after an
// ENOBUFS, a plain recv into the buffer it holds (uring_loop.cc).
void UringLoop::prepareArmed(io_uring_sqe* sqe, const IoArmedReceive& request) noexcept {
  if (request.loopBuffer != BufferPool::kNone) [[unlikely]] {
    io_uring_prep_recv(sqe, request.fd, pool_->address(request.loopBuffer),
                       pool_->bufferSize(), request.flags);
    return;
  }
  io_uring_prep_recv_multishot(sqe, request.fd, nullptr, 0, request.flags);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kBufferGroup;
}

void UringLoop::cancelArmedLocal(IoArmedReceive& request) noexcept {
  const std::uint32_t index = indexOf(request.loopKey);
  if (index >= slots_.size() || slots_[index].where != Where::kArmed ||
      slots_[index].subject != &request ||
      slots_[index].generation != static_cast<std::uint32_t>(request.loopKey >> 32)) {
    return;  // ended already
  }
  if (request.loopCancelled) return;  // once is enough
  io_uring_sqe* sqe = nextSqe();
  if (sqe == nullptr) return;  // cannot happen after nextSqe's submit; harmless
  io_uring_prep_cancel64(sqe, request.loopKey, 0);
  io_uring_sqe_set_data64(sqe, kCancelKey);
  request.loopCancelled = true;
}

// The head of `lane` goes to the kernel. One that finds no submission queue entry fails
// as submit would, and the next goes. Out of line: the common path (one operation per
// lane) never comes here.
[[gnu::noinline]] void UringLoop::promote(Lane& lane) noexcept {
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

// Frees the slot of `op`, which is leaving (its list is left already, except a lane's
// head, which leaves its lane here), and removes its timer from the kernel.
void UringLoop::retire(IoOperation& op, std::uint32_t index) noexcept {
  Slot& slot = slots_[index];
  const std::uint32_t lane = slot.where == Where::kKernel ? slot.lane : kNoLane;
  if (slot.timer) [[unlikely]] removeTimer(op);
  releaseSlot(index);  // a later completion of the operation or its timer is dropped
  if (lane != kNoLane) leaveLane(op, lane);
}

void UringLoop::removeTimer(const IoOperation& op) noexcept {
  if (io_uring_sqe* sqe = nextSqe(); sqe != nullptr) {  // else it fires, and is dropped
    io_uring_prep_timeout_remove(sqe, op.loopKey | kTimerBit, 0);
    io_uring_sqe_set_data64(sqe, kCancelKey);
  }
}

// Links a timeout for op.timeoutNs to `sqe`, op's entry just prepared: the timeout's
// entry must follow it in the same submission (the caller made room for two).
void UringLoop::linkTimeout(io_uring_sqe* sqe, IoOperation& op) noexcept {
  io_uring_sqe* timeout = io_uring_get_sqe(&ring_);
  sqe->flags |= IOSQE_IO_LINK;
  setTimespec(op);
  io_uring_prep_link_timeout(timeout, reinterpret_cast<__kernel_timespec*>(op.loopTime), 0);
  io_uring_sqe_set_data64(timeout, kCancelKey);
}

// always_inline: in submit's common path, as it was before promote() called it too.
[[gnu::always_inline]] inline void UringLoop::prepare(io_uring_sqe* sqe, IoOperation& op) noexcept {
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
      if (op.loopBuffer != BufferPool::kNone) [[unlikely]] {  // a plain recv (uring_loop.cc)
        io_uring_prep_recv(sqe, op.fd, pool_->address(op.loopBuffer), pool_->bufferSize(),
                           op.flags);
        return;
      }
      io_uring_prep_recv(sqe, op.fd, nullptr, pool_->bufferSize(), op.flags);
      sqe->flags |= IOSQE_BUFFER_SELECT;
      sqe->buf_group = kBufferGroup;
      return;
    case IoOpcode::kReceiveMultishot:  // refused by start (IoArmedReceive instead)
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

void UringLoop::cancelLocal(IoOperation& op) noexcept {
  const std::uint32_t index = indexOf(op.loopKey);
  if (index >= slots_.size() || slots_[index].subject != &op) return;  // completing already
  if (slots_[index].where != Where::kKernel) [[unlikely]] {
    if (slots_[index].where == Where::kReady) return;  // completing already
    // Queued or parked: it never reached the kernel, and ends now (its completion runs
    // from run()).
    unlist(slots_[index], op);
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

// A `whole` operation (IoOperation::whole), in the kernel at slot `index`, moved `moved`
// bytes, fewer than its length. Unless it is being cancelled (or the loop shuts down),
// the rest goes to the kernel at once, in its place at the head of its lane (the
// operations queued behind it keep waiting), under a new key: a cancellation the
// operation's own timer sent for the attempt that ended then finds nothing. The rest's
// wait has a time limit of its own (a linked timeout), as a new write would. Returns 0
// when it is in the kernel again, else the result it completes with: -ECANCELED, or
// -EBUSY without a submission queue entry (cannot happen after nextSqe's submit);
// `buffer` is past the bytes moved either way.
[[gnu::noinline]] int UringLoop::continueWhole(IoOperation& op, std::uint32_t index,
                                               int moved) noexcept {
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

// What both resubmissions after an ENOBUFS do first: nothing if the receive is being
// cancelled (`cancelled`) or the loop shuts down; else the ring grows (once per batch of
// completions) for the next burst, and `held` holds a pool buffer for the plain recv.
// False when the receive cannot be resubmitted.
bool UringLoop::holdBufferAfterEnobufs(bool cancelled, std::uint32_t& held) noexcept {
  if (cancelled || shutDown_) return false;
  if (!grewThisTurn_ && ringTarget_ < kRingEntries) {
    grewThisTurn_ = true;
    (void)growRing(ringTarget_);  // no memory: the plain recvs below still serve
  }
  if (held == BufferPool::kNone) held = pool_->take();
  return held != BufferPool::kNone;
}

// The kernel found the ring empty (ENOBUFS) for `op`, which took no byte. Unless it is
// being cancelled (or the loop shuts down), it goes to the kernel again at once, before
// any later receive on its socket, as a plain recv into a pool buffer it holds (see the
// top); the ring grows for the next burst. Its time limit starts again. False when it
// cannot (it then completes with ENOBUFS).
bool UringLoop::resubmitWithoutRingBuffer(IoOperation& op, const Slot& slot) noexcept {
  if (!holdBufferAfterEnobufs(op.loopCancelled, op.loopBuffer)) return false;
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

// resubmitWithoutRingBuffer's way for an armed receive (which has no time limit): its
// plain recv's completion is then its last.
bool UringLoop::resubmitArmedWithoutRingBuffer(IoArmedReceive& request) noexcept {
  if (!holdBufferAfterEnobufs(request.loopCancelled, request.loopBuffer)) return false;
  io_uring_sqe* sqe = nextSqe();
  if (sqe == nullptr) {  // cannot happen after nextSqe's submit
    releaseHeldBuffer(request.loopBuffer);
    return false;
  }
  prepareArmed(sqe, request);
  io_uring_sqe_set_data64(sqe, request.loopKey);
  return true;
}

}  // namespace weft::detail::uring

#endif  // WEFT_HAVE_LIBURING
