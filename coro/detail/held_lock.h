#pragma once

#include <memory>
#include <mutex>

#include "weft/coro/detail/misuse.h"

namespace weft::detail {

// What a HeldLock holds, and how it gives it back: an exclusive lock (M::unlock(): the
// ScopedLock of coro/mutex.h), a shared one (M::unlockShared(): SharedLock,
// coro/shared_mutex.h), or a semaphore's permit (M::release(): SemaphorePermit,
// coro/semaphore.h).
enum class HoldKind : unsigned char { kExclusive, kShared, kPermit };

// The ownership of one hold of M, given back when destroyed: what ScopedLock, SharedLock
// and SemaphorePermit are (the first two with these names, SemaphorePermit under its own).
//
// Move-only; an empty one (default-constructed, moved-from, released or unlocked) owns
// nothing. Thread safety: a single-owner value.
template <class M, HoldKind kKind>
class HeldLock {
 public:
  HeldLock() noexcept = default;
  // Adopts a hold the caller already has.
  HeldLock(M& mutex, std::adopt_lock_t) noexcept : mutex_(&mutex) {}

  bool ownsLock() const noexcept { return mutex_ != nullptr; }
  explicit operator bool() const noexcept { return ownsLock(); }
  M* mutex() const noexcept { return mutex_.get(); }

  // Gives the hold back now. Precondition: owns one (else a message and abort).
  void unlock() noexcept {
    if (mutex_ == nullptr) {
      abortMisuse(kKind == HoldKind::kShared  ? "SharedLock::unlock() on a SharedLock that owns no lock"
                  : kKind == HoldKind::kPermit ? "SemaphorePermit::release() on a permit that owns none"
                                               : "ScopedLock::unlock() on a ScopedLock that owns no lock");
    }
    mutex_.reset();
  }
  // Gives the hold up without giving it back: the caller must (unlock(), unlockShared() or
  // release() of M).
  M* release() noexcept { return mutex_.release(); }

 private:
  // Gives a hold back: what the owner does when it is destroyed, reset or assigned over.
  struct GiveBack {
    void operator()(M* mutex) const noexcept {
      if constexpr (kKind == HoldKind::kShared) {
        mutex->unlockShared();
      } else if constexpr (kKind == HoldKind::kPermit) {
        // Throws only if other code released past max() meanwhile: then std::terminate,
        // with the semaphore's std::overflow_error as the message.
        mutex->release();
      } else {
        mutex->unlock();
      }
    }
  };

  std::unique_ptr<M, GiveBack> mutex_;
};

}  // namespace weft::detail
