#include "weft/coro/detail/dump_gate.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <thread>

namespace weft::detail {

constinit DumpGateWords gDumpGate;

namespace {

enum class Barrier { kNone, kExpedited, kGlobal };

// The membarrier command this process uses, chosen once: the expedited one (IPIs to the
// CPUs that run this process's threads: microseconds), which needs registering first;
// else the global one (waits for every CPU to pass through the scheduler: milliseconds,
// acceptable for a dump); else none (a kernel before 4.3, or a seccomp filter).
Barrier chooseBarrier() noexcept {
#ifdef __NR_membarrier
  const long commands = ::syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (commands < 0) return Barrier::kNone;
  if ((commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
      (commands & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0 &&
      ::syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0) {
    return Barrier::kExpedited;
  }
  if ((commands & MEMBARRIER_CMD_GLOBAL) != 0) return Barrier::kGlobal;
#endif
  return Barrier::kNone;
}

// Makes every thread of the process execute a full memory barrier (see dump_gate.h).
// False when it cannot.
bool heavyBarrier() noexcept {
#ifdef __NR_membarrier
  static const Barrier barrier = chooseBarrier();
  switch (barrier) {
    case Barrier::kExpedited:
      return ::syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
    case Barrier::kGlobal:
      return ::syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0;
    case Barrier::kNone:
      break;
  }
#endif
  return false;
}

void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#endif
}

std::mutex gSessionMutex;  // one dump at a time
bool gCanRead = false;     // the current session's; written and read under gSessionMutex

}  // namespace

void waitForDumpRead() noexcept {
  // seq_cst: the owner's unpublishing store (before this call) and the load below against
  // the dump's store of an odd `reading` and its loads of notes (DumpRead): one of the
  // two sides sees the other's store.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // acquire: once `reading` is even past the read, what the read did happens-before what
  // the owner does next (free the frame).
  const std::uint64_t seen = gDumpGate.reading.load(std::memory_order_acquire);
  if ((seen & 1) == 0) return;  // no read in progress: a later one sees the note cleared
  for (unsigned spins = 0; gDumpGate.reading.load(std::memory_order_acquire) == seen; ++spins) {
    // A read lasts microseconds, unless the OS preempted the dump's thread: then yield.
    if (spins < 128) {
      pause();
    } else {
      std::this_thread::yield();
    }
  }
}

DumpSession::DumpSession() noexcept {
  gSessionMutex.lock();
  // Relaxed: the barrier below publishes it to every thread.
  gDumpGate.dumping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  gCanRead = heavyBarrier();
}

DumpSession::~DumpSession() {
  // Relaxed: an owner that still sees 1 takes the slow path, which finds no read going on.
  gDumpGate.dumping.store(0, std::memory_order_relaxed);
  gSessionMutex.unlock();
}

bool DumpSession::canRead() noexcept { return gCanRead; }

DumpRead::DumpRead() noexcept {
  // Relaxed load: only dumps write `reading`, one at a time. The seq_cst fence orders the
  // odd value before the read's loads (see waitForDumpRead).
  gDumpGate.reading.store(gDumpGate.reading.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

DumpRead::~DumpRead() {
  // release: the read's loads happen-before what a waiting owner does once it sees this.
  gDumpGate.reading.store(gDumpGate.reading.load(std::memory_order_relaxed) + 1,
                          std::memory_order_release);
}

}  // namespace weft::detail
