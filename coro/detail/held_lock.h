#pragma once

#include <mutex>
#include <utility>

#include "weft/coro/detail/sync_waiter.h"

namespace weft::detail {

// What ScopedLock<M> (coro/mutex.h) and SharedLock<M> (coro/shared_mutex.h) are: the
// ownership of one hold of M, exclusive (released with M::unlock()) or shared (kShared:
// released with M::unlockShared()), released when destroyed.
//
// Move-only; an empty one (default-constructed, moved-from, released or unlocked) owns
// nothing. Thread safety: a single-owner value.
template <class M, bool kShared>
class HeldLock {
 public:
  HeldLock() noexcept = default;
  // Adopts a hold the caller already has.
  HeldLock(M& mutex, std::adopt_lock_t) noexcept : mutex_(&mutex) {}
  HeldLock(HeldLock&& other) noexcept : mutex_(std::exchange(other.mutex_, nullptr)) {}
  HeldLock& operator=(HeldLock&& other) noexcept {
    if (this != &other) {
      reset();
      mutex_ = std::exchange(other.mutex_, nullptr);
    }
    return *this;
  }
  ~HeldLock() { reset(); }

  bool ownsLock() const noexcept { return mutex_ != nullptr; }
  explicit operator bool() const noexcept { return ownsLock(); }
  M* mutex() const noexcept { return mutex_; }

  // Releases the hold now. Precondition: owns one (else a message and abort).
  void unlock() noexcept {
    if (mutex_ == nullptr) {
      abortSyncMisuse(kShared ? "SharedLock::unlock() on a SharedLock that owns no lock"
                              : "ScopedLock::unlock() on a ScopedLock that owns no lock");
    }
    releaseHold(std::exchange(mutex_, nullptr));
  }
  // Gives the hold up without releasing it: the caller must release it (unlock(), or
  // unlockShared() for a SharedLock).
  M* release() noexcept { return std::exchange(mutex_, nullptr); }

 private:
  static void releaseHold(M* mutex) noexcept {
    if constexpr (kShared) {
      mutex->unlockShared();
    } else {
      mutex->unlock();
    }
  }
  void reset() noexcept {
    if (mutex_ != nullptr) releaseHold(std::exchange(mutex_, nullptr));
  }

  M* mutex_ = nullptr;
};

}  // namespace weft::detail
