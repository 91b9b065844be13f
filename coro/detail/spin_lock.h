#pragma once

#include <atomic>
#include <thread>

namespace weft::detail {

// A one-byte test-and-test-and-set lock for critical sections of a few dozen
// instructions (a channel's queues, the sync primitives' waiter queues). Not a general-purpose mutex:
//  - lock() spins briefly with a CPU pause, then yields the thread, so a holder that the
//    OS preempted (likely on an over-subscribed machine) gets the CPU back instead of
//    being starved by spinners;
//  - unlock() is a single release store and touches nothing afterwards, so the lock may
//    be destroyed by another thread the moment it is released (select relies on this:
//    see coro/select.h).
// It satisfies Lockable (lock/try_lock/unlock), so std::lock_guard works with it.
// Thread safety: that is its purpose; not recursive (relocking from the holder spins
// forever).
class SpinLock {
 public:
  SpinLock() noexcept = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  // noexcept: only atomic operations and sched_yield.
  void lock() noexcept {
    // acquire: the critical section must see what the previous holder wrote before its
    // release store in unlock().
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]] return;
    lockSlow();
  }

  bool try_lock() noexcept {
    // relaxed load: a mere hint that avoids a write (and a cache-line steal) when held;
    // the exchange is what acquires.
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }

  // release: publishes the critical section to the next holder's acquire.
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    asm volatile("yield" ::: "memory");
#endif
  }

  void lockSlow() noexcept {
    for (unsigned spins = 0;; ++spins) {
      if (try_lock()) return;
      if (spins < kSpinsBeforeYield) {
        pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

  // Enough to cover a critical section run by another core, few enough that a
  // preempted holder is not waited for at full speed for long.
  static constexpr unsigned kSpinsBeforeYield = 64;

  std::atomic<bool> locked_{false};
};

}  // namespace weft::detail
