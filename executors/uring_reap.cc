// The io_uring loop's (executors/detail/uring_loop.h) completions: reaping them in
// batches, the operations that ended without reaching the kernel (ready_), the timers of
// queued and parked operations, a multishot receive's arrivals, and the buffers a receive
// was given (lent to the caller, or back to the ring). How the loop works:
// executors/uring_loop.cc.
#if defined(WEFT_HAVE_LIBURING)

#include <cerrno>

#include "weft/executors/detail/uring_loop.h"

namespace weft::detail::uring {

// A completion of the armed receive at `slot` (slot index `index`). An arrival that leaves
// the request armed (IORING_CQE_F_MORE) is delivered with `more` set. A request that ended
// with ENOBUFS (the ring was empty) goes on as a plain recv into a buffer of its own, in
// its place (the rule of kReceiveLent, uring_loop.cc), whose completion is then the
// last. Otherwise the request has ended: its slot is freed and its last completion runs,
// with the bytes of a last arrival and `res` (-ECANCELED for an ENOBUFS that a
// cancellation stopped, or at shutdown; -EOPNOTSUPP when the kernel refused the multishot
// form: the loop then arms no more).
inline void UringLoop::armedCompletion(Slot& slot, std::uint32_t index, int res,
                                       std::uint32_t flags) noexcept {
  constexpr std::uint32_t kArrival = IORING_CQE_F_MORE | IORING_CQE_F_BUFFER;
  if ((flags & kArrival) == kArrival && res > 0) [[likely]] {
    // An arrival in a ring buffer: built in place, the rest out of line (the echo
    // request's path, measured: docs/design/2026-11-idle-connection-memory.md).
    IoArmedReceive& request = *slot.armed();
    slot.arrived = true;
    --ringHeld_;
    IoArmedReceive::Completion arrival{
        res, pool_->lend(flags >> IORING_CQE_BUFFER_SHIFT, static_cast<std::size_t>(res)), true,
        false};
    request.complete(request, arrival);  // may cancel `request`, never arms it again
    return;
  }
  armedCompletionOther(slot, index, res, flags);
}

// armedCompletion's other cases: an arrival without a ring buffer (which the kernel does
// not post), and the request's end.
void UringLoop::armedCompletionOther(Slot& slot, std::uint32_t index, int res,
                                     std::uint32_t flags) noexcept {
  IoArmedReceive& request = *slot.armed();
  IoArmedReceive::Completion completion;
  if ((flags & IORING_CQE_F_MORE) != 0) {
    slot.arrived = true;
    takeReceivedInto(completion.received, request.loopBuffer, res, flags);
    completion.result = res;
    completion.more = true;
    request.complete(request, completion);
    return;
  }
  if (res == -ENOBUFS && (flags & IORING_CQE_F_BUFFER) == 0) [[unlikely]] {
    if (resubmitArmedWithoutRingBuffer(request)) return;
    if (request.loopCancelled || shutDown_) res = -ECANCELED;
  } else if (res == -EINVAL && !slot.arrived && request.loopBuffer == BufferPool::kNone)
      [[unlikely]] {
    multishot_ = false;  // a kernel that refuses IORING_RECV_MULTISHOT after all
    res = -EOPNOTSUPP;
  }
  takeReceivedInto(completion.received, request.loopBuffer, res, flags);
  releaseSlot(index);  // before `request` completes: it may be armed again
  completion.result = res;
  completion.shutDown = shutDown_ && res == -ECANCELED;
  settleArmed(request);
  request.complete(request, completion);
}

// leaveLane's case of a lane with operations queued behind its head `op`.
void UringLoop::leaveLaneToNext(IoOperation& op, std::uint32_t index) noexcept {
  Lane& lane = lanes_[index];
  lane.remove(op);
  promote(lane);
}

// Runs the completions that are ready, in batches, until none is left: first those of
// ready_, then the kernel's.
std::size_t UringLoop::reap() noexcept {
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
          slots_[index].subject == nullptr) {
        // Withdrawn. A buffer the kernel picked for it goes back to the ring.
        if ((done[i].flags & IORING_CQE_F_BUFFER) != 0) [[unlikely]] {
          ringBufferBack(done[i].flags, -1, nullptr);
        }
        continue;
      }
      // retire(), for an operation in the kernel: the next in its lane goes to the
      // kernel before `op` resumes.
      Slot& slot = slots_[index];
      if (slot.where == Where::kArmed) {
        armedCompletion(slot, index, done[i].res, done[i].flags);
        ++n;
        continue;
      }
      IoOperation& op = *slot.op();
      if (receivesLent(op.opcode)) {
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

// Runs the completion of the first operation on ready_.
void UringLoop::finishReady() noexcept {
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
void UringLoop::timerExpired(std::uint64_t key, int res) noexcept {
  const std::uint32_t index = indexOf(key);
  if (res != -ETIME || index >= slots_.size() || slots_[index].subject == nullptr ||
      slots_[index].generation != static_cast<std::uint32_t>(key >> 32)) {
    return;
  }
  Slot& slot = slots_[index];
  if (slot.where == Where::kArmed) return;  // has no timer
  slot.timer = false;
  IoOperation& op = *slot.op();
  if (slot.where == Where::kQueued || slot.where == Where::kParked) {
    unlist(slot, op);
    op.result = -ETIMEDOUT;
    makeReady(op);
  } else if (slot.where == Where::kKernel) {
    if (io_uring_sqe* sqe = nextSqe(); sqe != nullptr) {  // cannot fail after a submit
      io_uring_prep_cancel64(sqe, key, 0);
      io_uring_sqe_set_data64(sqe, kCancelKey);
    }
  }
}

// A completion that names a ring buffer (IORING_CQE_F_BUFFER): the buffer left the ring.
// With res > 0 bytes it is lent into *lent; otherwise it goes back.
inline void UringLoop::ringBufferBack(std::uint32_t flags, int res, LentBuffer* lent) noexcept {
  const std::uint32_t id = flags >> IORING_CQE_BUFFER_SHIFT;
  --ringHeld_;
  if (res > 0 && lent != nullptr) {
    *lent = pool_->lend(id, static_cast<std::size_t>(res));
  } else {
    pool_->recycle(id);
  }
}

// A receive's completion (kReceiveLent, kReceiveMessageLent, an armed receive's): the
// received bytes (in a ring buffer or the buffer it held, `held`) are lent into `lent`; a
// buffer with nothing in it (the end of a stream, an empty datagram, a failure) goes back.
[[gnu::always_inline]] inline void UringLoop::takeReceivedInto(LentBuffer& lent,
                                                              std::uint32_t& held, int res,
                                                              std::uint32_t flags) noexcept {
  if ((flags & IORING_CQE_F_BUFFER) != 0) {
    ringBufferBack(flags, res, &lent);
  } else if (held != BufferPool::kNone) {
    if (res > 0) {
      lent = pool_->lend(held, static_cast<std::size_t>(res));
      held = BufferPool::kNone;
    } else {
      releaseHeldBuffer(held);
    }
  }
}

[[gnu::always_inline]] inline void UringLoop::takeReceived(IoOperation& op, int res,
                                                          std::uint32_t flags) noexcept {
  takeReceivedInto(op.lent, op.loopBuffer, res, flags);
}

}  // namespace weft::detail::uring

#endif  // WEFT_HAVE_LIBURING
