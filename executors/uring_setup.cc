// The io_uring loop's (executors/detail/uring_loop.h) set-up: which of the ring's features
// WEFT_IO_URING_SETUP leaves out, the ring's set-up flags, the probe of the kernel
// (probeIoUring, once per process), and the provided-buffer ring that lent receives use
// (registered, grown, refilled). How the loop works: executors/uring_loop.cc.
#if defined(WEFT_HAVE_LIBURING)

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include "weft/executors/detail/uring_loop.h"

namespace weft::detail::uring {

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

namespace {

bool deferTaskRunWanted() noexcept { return !leftOut().deferTaskRun; }

}  // namespace

// Whether the kernel takes a multishot recv (IORING_RECV_MULTISHOT, Linux 6.0): found by
// probeIoUring, which runs once per process before any loop is created (IoLoop::create
// resolves the backend first). Relaxed: written once, before the loops that read it.
std::atomic<bool> gKernelMultishotReceive{false};

int setUpRing(io_uring& ring, unsigned entries, unsigned completionEntries) noexcept {
  // The set-ups to try, best first; each kernel that refuses one (EINVAL) gets the next.
  // DEFER_TASKRUN (Linux 6.1): completion work runs only when the worker enters the kernel
  // to reap, never interrupting it, in batches. COOP_TASKRUN: completions may wait as task
  // work until the worker enters the kernel. TASKRUN_FLAG, with either, tells liburing's
  // peek (run(0)) when there is such work to enter for.
  static constexpr unsigned kFlagSets[] = {
      IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_DEFER_TASKRUN |
          IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SINGLE_ISSUER,
      IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
          IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SINGLE_ISSUER,
      IORING_SETUP_CQSIZE,
  };
  int r = -EINVAL;
  for (std::size_t i = deferTaskRunWanted() ? 0 : 1; i < std::size(kFlagSets) && r == -EINVAL;
       ++i) {
    io_uring_params params{};
    params.flags = kFlagSets[i];
    params.cq_entries = completionEntries;
    r = io_uring_queue_init_params(entries, &ring, &params);
  }
  return r;
}

// Registers the provided-buffer ring and fills it with kInitialRingBuffers. False (once
// and for all) when the kernel has no buffer rings (before Linux 5.19) or memory is
// short: receives then use plain recvs into pool buffers.
[[gnu::noinline]] bool UringLoop::setUpBufferRing() noexcept {
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
bool UringLoop::growRing(std::uint32_t n) noexcept {
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
bool UringLoop::recycleIntoRing(void* context, std::uint32_t id) noexcept {
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

}  // namespace weft::detail::uring

namespace weft::detail {

namespace {

using uring::gKernelMultishotReceive;
using uring::setUpRing;

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

#endif  // WEFT_HAVE_LIBURING
