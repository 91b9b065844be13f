// The io_uring event loop (liburing): operations are submitted to the kernel, which
// performs them and posts their completions. This file holds how it works (below) and the
// loop's creation, turn and shutdown; executors/detail/uring_loop.h declares it, and
// uring_submit.cc, uring_reap.cc and uring_setup.cc hold the rest.
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
// Receives kept armed (IoArmedReceive, armReceive: io/detail/stream_reads.cc keeps one per
// stream that receive() reads). A record of its own, not an IoOperation (40 bytes instead
// of 168: every stream read holds one, idle or not), in a slot of its own kind
// (Where::kArmed), never in a lane or list; cross-thread cancellation goes through
// IoLoopBase's queue as an operation's does, and shutdown's cancellation of everything in
// the kernel ends it. A recv with IORING_RECV_MULTISHOT names the same ring; each
// completion with IORING_CQE_F_MORE is an arrival, whose buffer is lent into the
// completion's `received` and handed to the record's complete at once (`more` set), the
// request staying in its slot, in no lane (its stream's owner sees to it that nothing
// else receives on the socket meanwhile); the completion without F_MORE frees the slot
// and runs the last completion. A multishot
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

#include <sys/mman.h>

#include "weft/executors/detail/uring_loop.h"

namespace weft::detail::uring {

// A throw below destroys the IoLoopBase, which retires the buffer pool.
UringLoop::UringLoop() {
  const int r = setUpRing(ring_, kEntries, kCompletionEntries);
  if (r < 0) {
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

UringLoop::~UringLoop() {
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
  // ~IoLoopBase retires the buffer pool, after this loop's members are gone: a buffer
  // given back until then goes to the pool's own free list, not into the ring.
  pool_->setRecycle(nullptr, nullptr);
}

std::size_t UringLoop::run(int timeoutMs) noexcept {
  return runFor(timeoutMs < 0 ? -1 : std::int64_t{timeoutMs} * 1000000);
}

std::size_t UringLoop::runFor(std::int64_t timeoutNs) noexcept {
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

void UringLoop::shutdown() noexcept {
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
  for (Lane& lane : lanes_) {
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

void UringLoop::armWake() noexcept {
  io_uring_sqe* sqe = nextSqe();
  if (sqe == nullptr) return;  // retried by the next run()
  io_uring_prep_read(sqe, wakeFd_, &wakeValue_, sizeof wakeValue_, 0);
  io_uring_sqe_set_data64(sqe, kWakeKey);
  wakeArmed_ = true;
}

}  // namespace weft::detail::uring

namespace weft::detail {

std::unique_ptr<IoLoop> makeUringLoop() { return std::make_unique<uring::UringLoop>(); }

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
