#include "weft/executors/io_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "weft/executors/detail/io_loop_base.h"

namespace weft {

namespace {

// The calling thread's loop, and the factory its executor left for creating one.
constinit thread_local IoLoop* tlLoop = nullptr;
constinit thread_local IoLoop::LoopFactory tlFactory = nullptr;
constinit thread_local void* tlFactoryContext = nullptr;

int probeResult() noexcept {
  // A function-local static: the probe runs once per process, thread-safely.
  static const int result = detail::probeIoUring();
  return result;
}

IoBackend requireIoUring(const char* why) {
  if (const int result = probeResult(); result != 0) {
    throw std::system_error(result, std::generic_category(),
                            std::string("weft: io_uring was asked for (") + why +
                                ") but this process cannot use it");
  }
  return IoBackend::kIoUring;
}

}  // namespace

std::string_view ioBackendName(IoBackend backend) noexcept {
  return backend == IoBackend::kIoUring ? "io_uring" : "epoll";
}

IoBackend IoLoop::resolveBackend(IoBackendChoice choice) {
  if (choice == IoBackendChoice::kIoUring) return requireIoUring("IoBackendChoice::kIoUring");
  if (choice == IoBackendChoice::kEpoll) return IoBackend::kEpoll;
  if (const char* env = std::getenv("WEFT_IO_BACKEND"); env != nullptr && *env != '\0') {
    const std::string_view value(env);
    if (value == "io_uring") return requireIoUring("WEFT_IO_BACKEND=io_uring");
    if (value == "epoll") return IoBackend::kEpoll;
    if (value != "auto") {
      throw std::invalid_argument("weft: WEFT_IO_BACKEND='" + std::string(value) +
                                  "' names no I/O backend (io_uring, epoll or auto)");
    }
  }
  // epoll: on the kernels measured it costs less CPU per request than io_uring, and reads
  // of cached files take one RWF_NOWAIT system call (docs/io.md, "Which backend").
  return IoBackend::kEpoll;
}

bool IoLoop::available(IoBackend backend) noexcept {
  return backend == IoBackend::kEpoll || probeResult() == 0;
}

std::unique_ptr<IoLoop> IoLoop::create(IoBackendChoice choice) {
  const IoBackend backend = resolveBackend(choice);
  if (backend == IoBackend::kEpoll) return detail::makeEpollLoop();
  return detail::makeUringLoop();
}

IoLoop* IoLoop::current() {
  if (tlLoop != nullptr) [[likely]]
    return tlLoop;
  if (tlFactory == nullptr) return nullptr;
  tlLoop = tlFactory(tlFactoryContext);
  return tlLoop;
}

IoLoop* IoLoop::currentIfAny() noexcept { return tlLoop; }

void IoLoop::setCurrentFactory(LoopFactory make, void* context) noexcept {
  tlFactory = make;
  tlFactoryContext = context;
  if (make == nullptr) tlLoop = nullptr;
}

void IoLoop::retireDescriptor(int fd) noexcept {
  if (fd < 0) return;
  // Release: pairs with descriptorGeneration's acquire. What must be ordered is the bump
  // before the close(2) that follows it in this thread, against a loop's load after the
  // number's next owner got it from the kernel: the system calls in between order them in
  // practice, and release/acquire states the intent (the load is free on x86).
  detail::gDescriptorGenerations[static_cast<std::size_t>(fd) &
                                 (detail::kDescriptorGenerations - 1)]
      .fetch_add(1, std::memory_order_release);
}

IoLoop::CurrentScope::CurrentScope(IoLoop* loop) noexcept : previous_(tlLoop) { tlLoop = loop; }

IoLoop::CurrentScope::~CurrentScope() { tlLoop = previous_; }

namespace detail {

IoLoop* currentIoLoopIfAny() noexcept { return tlLoop; }

// Descriptor generations (IoLoop::retireDescriptor, descriptorGeneration): one 64-bit
// counter per number modulo kDescriptorGenerations, zero-initialised (512 KiB of bss whose
// pages are only paid for where numbers are retired). A fixed table cannot fail to grow;
// two numbers that share a counter only ever see it change too often, which is safe (a
// registration anew).
constinit std::atomic<std::uint64_t> gDescriptorGenerations[kDescriptorGenerations] = {};

IoLoopBase::IoLoopBase() : pool_(BufferPool::create(kLentBufferSize, kMaxLentBuffers)) {
  wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) {
    const int error = errno;
    pool_->retire();
    throw std::system_error(error, std::generic_category(),
                            "weft: cannot create the event loop's eventfd");
  }
}

IoLoopBase::~IoLoopBase() {
  if (wakeFd_ >= 0) ::close(wakeFd_);
  pool_->retire();
}

std::size_t IoLoopBase::lentBuffers() const noexcept {
  pool_->drainReturned();  // the pool is not part of the loop's const state
  return pool_->lentCount();
}

LentBuffer IoLoopBase::lendBuffer() noexcept {
  const std::uint32_t id = pool_->take();
  if (id == BufferPool::kNone) return {};
  return pool_->lend(id, pool_->bufferSize());
}

void IoLoopBase::fail(const char* what, int error) noexcept {
  std::fprintf(stderr, "weft: event loop: %s failed: %s\n", what, std::strerror(error));
  std::abort();
}

void IoLoopBase::wake() noexcept {
  const std::uint64_t one = 1;
  // EAGAIN (the counter is full) still leaves the eventfd readable: the wake is there.
  [[maybe_unused]] ssize_t n = ::write(wakeFd_, &one, sizeof one);
}

void IoLoopBase::consumeWake() noexcept {
  std::uint64_t value;
  [[maybe_unused]] ssize_t n = ::read(wakeFd_, &value, sizeof value);
}

void IoLoopBase::cancel(IoOperation& op) noexcept {
  if (currentIoLoopIfAny() == this) {
    cancelLocal(op);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    std::uint8_t expected = 0;
    // acq_rel: orders against the loop's exchange in finish(); a failed exchange means
    // the operation completed (2) or a cancellation is already queued (1).
    if (!op.loopState.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
    op.cancelNext = remoteHead_;
    remoteHead_ = &op;
    // Release: the loop's acquire load then finds the queue under the mutex anyway; the
    // flag only spares it the lock when nothing is queued.
    remotePending_.store(true, std::memory_order_release);
  }
  wake();
}

void IoLoopBase::cancelArmed(IoArmedReceive& request) noexcept {
  if (currentIoLoopIfAny() == this) {
    cancelArmedLocal(request);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    std::uint8_t expected = 0;
    // acq_rel: as in cancel(), against settleArmed's exchange.
    if (!request.loopState.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      return;
    }
    request.cancelNext = remoteArmedHead_;
    remoteArmedHead_ = &request;
    remotePending_.store(true, std::memory_order_release);  // as in cancel()
  }
  wake();
}

void IoLoopBase::drainRemoteCancels() noexcept {
  // Acquire: pairs with the requester's release store.
  if (!remotePending_.load(std::memory_order_acquire)) return;
  IoOperation* list;
  IoArmedReceive* armed;
  {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    list = remoteHead_;
    remoteHead_ = nullptr;
    armed = remoteArmedHead_;
    remoteArmedHead_ = nullptr;
    remotePending_.store(false, std::memory_order_relaxed);  // under the mutex
    for (IoOperation* op = list; op != nullptr; op = op->cancelNext) {
      // Relaxed: under the mutex that every 0 -> 1 transition holds.
      op->loopState.store(0, std::memory_order_relaxed);
    }
    for (IoArmedReceive* request = armed; request != nullptr; request = request->cancelNext) {
      request->loopState.store(0, std::memory_order_relaxed);  // as above
    }
  }
  while (list != nullptr) {
    IoOperation* op = list;
    list = op->cancelNext;
    op->cancelNext = nullptr;
    cancelLocal(*op);
  }
  while (armed != nullptr) {
    IoArmedReceive* request = armed;
    armed = request->cancelNext;
    request->cancelNext = nullptr;
    cancelArmedLocal(*request);
  }
}

void IoLoopBase::finish(IoOperation& op) noexcept {
  settle(op);
  op.complete(op);
}

void IoLoopBase::settle(IoOperation& op) noexcept {
  --inFlight_;
  bump(counters_->completed[static_cast<std::size_t>(op.opcode)]);
  bump(counters_->completedAll);
  // acq_rel: see the class comment; pairs with the requester's compare-exchange.
  if (op.loopState.exchange(2, std::memory_order_acq_rel) == 1) [[unlikely]] {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    IoOperation** link = &remoteHead_;
    while (*link != nullptr && *link != &op) link = &(*link)->cancelNext;
    if (*link == &op) *link = op.cancelNext;
    op.cancelNext = nullptr;
  }
}

void IoLoopBase::settleArmed(IoArmedReceive& request) noexcept {
  --inFlight_;
  bump(counters_->completed[static_cast<std::size_t>(IoOpcode::kReceiveMultishot)]);
  bump(counters_->completedAll);
  // acq_rel: as in settle().
  if (request.loopState.exchange(2, std::memory_order_acq_rel) == 1) [[unlikely]] {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    IoArmedReceive** link = &remoteArmedHead_;
    while (*link != nullptr && *link != &request) link = &(*link)->cancelNext;
    if (*link == &request) *link = request.cancelNext;
    request.cancelNext = nullptr;
  }
}

}  // namespace detail

}  // namespace weft
