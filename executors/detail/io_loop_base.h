#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "weft/executors/detail/worker_counters.h"
#include "weft/executors/io_loop.h"

namespace weft::detail {

// The size of the buffers weft's loops lend for IoOpcode::kReceiveLent and
// kReceiveMessageLent, the same on both backends so that a stream's receive() returns as
// much on either. 64 KiB: on io_uring a stream moves 1.4x the bytes per CPU-second with
// them that it does with 16 KiB buffers (one completion per 64 KiB instead of four; epoll
// 1.18x); only the pages the kernel writes take memory, so small messages cost no more.
inline constexpr std::size_t kLentBufferSize = 65536;
// How much of a lent buffer a datagram receive uses: a longer datagram is cut to it
// (UdpSocket's contract says 16 KiB), on both backends.
inline constexpr std::size_t kLentDatagramSize = 16384;
static_assert(kLentDatagramSize <= kLentBufferSize);
// How many buffers a loop's pool lends at once at the most: effectively unbounded (16 GiB
// of buffers); memory running out fails the receive with ENOBUFS.
inline constexpr std::uint32_t kMaxLentBuffers = 1u << 20;

// The calling thread's current loop, without creating one. noexcept: a thread_local read.
IoLoop* currentIoLoopIfAny() noexcept;

// The table behind IoLoop::retireDescriptor and descriptorGeneration (io_loop.cc).
inline constexpr std::size_t kDescriptorGenerations = std::size_t{1} << 16;
extern std::atomic<std::uint64_t> gDescriptorGenerations[kDescriptorGenerations];

// The generation of descriptor number `fd` (>= 0): changed by every
// IoLoop::retireDescriptor(fd), never back to a value it had. Numbers share a counter
// when they are equal modulo kDescriptorGenerations: a retirement of one then also
// changes the others' generation, which costs a registration anew but is never taken for
// "same file". noexcept: an atomic load. Thread safety: any thread.
inline std::uint64_t descriptorGeneration(int fd) noexcept {
  // Acquire: pairs with retireDescriptor's release (see there).
  return gDescriptorGenerations[static_cast<std::size_t>(fd) & (kDescriptorGenerations - 1)]
      .load(std::memory_order_acquire);
}

// A `whole` operation (IoOperation::whole) moved `n` of its bytes, fewer than its length:
// what it still has to move is the rest. noexcept: two stores.
inline void advanceWhole(IoOperation& op, std::size_t n) noexcept {
  op.buffer = static_cast<std::byte*>(op.buffer) + n;
  op.length -= n;
}

// Operations linked through IoOperation::loopNext/loopPrev, in order: a loop's ready
// list, a descriptor's readers or writers on epoll, a lane or the parked operations on
// io_uring. An operation is in one list at a time. noexcept: pointer stores.
struct IoOperationList {
  IoOperation* head = nullptr;
  IoOperation* tail = nullptr;

  bool empty() const noexcept { return head == nullptr; }
  void append(IoOperation& op) noexcept {
    op.loopNext = nullptr;
    op.loopPrev = tail;
    (tail == nullptr ? head : tail->loopNext) = &op;
    tail = &op;
  }
  void remove(IoOperation& op) noexcept {
    (op.loopPrev == nullptr ? head : op.loopPrev->loopNext) = op.loopNext;
    (op.loopNext == nullptr ? tail : op.loopNext->loopPrev) = op.loopPrev;
    op.loopNext = op.loopPrev = nullptr;
  }
};

// What weft's two loops share: the eventfd that wake() writes, the pool of buffers they
// lend, cancellation requests from other threads, and the completion hand-off.
//
// Cancellation from another thread (cancel() off the loop's thread) cannot touch the
// kernel queue, which only the loop's thread uses. It queues the operation on
// `remote_` and wakes the loop, which cancels it on its own thread. The queue must never
// hold an operation that has completed (its memory may be gone): IoOperation::loopState
// arbitrates. The requester, under remoteMutex_, moves it 0 -> 1 and links the operation;
// the loop, completing an operation, exchanges it to 2, and if it was 1 unlinks it under
// remoteMutex_ (which waits for a requester still linking it). The loop, draining the
// queue, moves each back to 0 under the mutex before cancelling it.
class IoLoopBase : public IoLoop {
 public:
  ~IoLoopBase() override;

  void cancel(IoOperation& op) noexcept final;
  // The same queue's way for an armed receive (IoArmedReceive::loopState as above).
  void cancelArmed(IoArmedReceive& request) noexcept final;
  void wake() noexcept final;
  bool hasWork() const noexcept final { return inFlight_ != 0; }
  std::size_t lentBuffers() const noexcept final;
  LentBuffer lendBuffer() noexcept final;

  // Where the loop counts the operations it serves (its executor's metrics: ThreadPool
  // hands each worker's loop the worker's counters); until called, into counters of its
  // own that nobody reads. On the loop's thread, before its first submit. `counters` must
  // outlive the loop. noexcept: a store.
  void countInto(IoOpCounters* counters) noexcept { counters_ = counters; }

 protected:
  // Errors: std::system_error if the eventfd cannot be created; std::bad_alloc.
  IoLoopBase();

  // Cancels `op`, in flight on this loop, on the loop's own thread.
  virtual void cancelLocal(IoOperation& op) noexcept = 0;
  // Cancels `request`, armed on this loop, on the loop's own thread. A loop that arms
  // none (epoll) never gets one: the default does nothing.
  virtual void cancelArmedLocal(IoArmedReceive& request) noexcept { (void)request; }

  // Counts a submission of `opcode`, and its completion when it completed at once (the
  // loops' submit: `return counted(op.opcode, start(op))`). noexcept: three relaxed bumps
  // at most (the loop's thread is the counters' only writer).
  bool counted(IoOpcode opcode, bool completedAtOnce) noexcept {
    const auto index = static_cast<std::size_t>(opcode);
    bump(counters_->submitted[index]);
    if (completedAtOnce) {
      bump(counters_->completed[index]);
      bump(counters_->completedAll);
    }
    return completedAtOnce;
  }

  // Runs the cancellations other threads queued. Returns at once when there are none.
  void drainRemoteCancels() noexcept;
  // Called by the loop for every in-flight operation that is complete: settles a queued
  // cancellation, then runs op.complete.
  void finish(IoOperation& op) noexcept;
  // finish() without running op.complete: for withdraw().
  void settle(IoOperation& op) noexcept;
  // settle() for an armed receive's last completion (the loop then runs its complete).
  void settleArmed(IoArmedReceive& request) noexcept;
  // Reads the eventfd (resets it). noexcept: a read(2) whose failure changes nothing.
  void consumeWake() noexcept;
  // Reports a kernel failure that leaves the loop unusable and aborts.
  [[noreturn]] static void fail(const char* what, int error) noexcept;

  // The buffers the loop lends (kReceiveLent, kReceiveMessageLent, lendBuffer()).
  // Retired, not deleted, by the destructor: lent buffers may outlive the loop.
  BufferPool* pool_;
  int wakeFd_ = -1;
  std::size_t inFlight_ = 0;  // operations submitted and not yet finished (loop thread)
  bool shutDown_ = false;     // loop thread
  // Where the operations are counted (never null: see countInto).
  IoOpCounters ownCounters_;
  IoOpCounters* counters_ = &ownCounters_;

 private:
  std::atomic<bool> remotePending_{false};
  std::mutex remoteMutex_;
  IoOperation* remoteHead_ = nullptr;  // guarded by remoteMutex_, through cancelNext
  IoArmedReceive* remoteArmedHead_ = nullptr;  // likewise, the armed receives
};

}  // namespace weft::detail

namespace weft::detail {

// The two loops (executors/epoll_loop.cc, executors/uring_loop.cc). Errors: as
// IoLoop::create.
std::unique_ptr<IoLoop> makeEpollLoop();
std::unique_ptr<IoLoop> makeUringLoop();
// 0 when this process can run weft's io_uring loop (a ring can be set up and offers the
// operations weft uses), else the errno that says why not (ENOSYS when weft was built
// without liburing). noexcept: failures are the result.
int probeIoUring() noexcept;

}  // namespace weft::detail
