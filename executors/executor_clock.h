#pragma once

#include <chrono>

namespace weft {

// ExecutorClock: the clock that weft's timers and deadlines read (sleep, sleepUntil,
// withTimeout, select's timeoutCase): std::chrono::steady_clock, except on a thread that
// is running an executor with virtual time (weft::testing::Simulation), where now() is
// that executor's virtual time. A std::chrono Clock whose time_point is steady_clock's,
// so deadlines computed from it are what TimerEntry::deadline holds.
//
// Read time with ExecutorClock::now() rather than steady_clock::now() in code whose
// timing a test should control (an idle timeout measured from the last request, a backoff
// that sleeps until a computed time point): in a simulation it then moves exactly as the
// simulation's timers do, and outside one it is steady_clock.
//
// For executors that keep virtual time: while a VirtualTimeScope lives on a thread, now()
// on that thread returns `*time` (the executor advances it); the scope puts back the
// previous value when it ends. Such an executor must fire its TimerEntries by that time,
// never by steady_clock.
//
// Cost: one thread_local load and a branch before steady_clock::now() (constinit: no
// TLS wrapper call); nothing is done per timer.
//
// Thread safety: now() from any thread. A scope belongs to the thread that made it; the
// time it points at is read without synchronisation, so only that thread may change it
// while the scope lives.
//
// Example:
//   const auto start = weft::ExecutorClock::now();
//   co_await weft::sleep(30s);
//   auto waited = weft::ExecutorClock::now() - start;  // 30 s, exactly, in a simulation
struct ExecutorClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;

  // The calling thread's virtual time if it has one, else steady_clock::now(). noexcept:
  // a load, a branch and the vDSO clock read.
  static time_point now() noexcept {
    if (const time_point* time = tlVirtualTime) [[unlikely]]
      return *time;
    return std::chrono::steady_clock::now();
  }

  // The virtual time of the calling thread, or nullptr when it reads steady_clock.
  // noexcept: a thread_local load.
  static const time_point* virtualTime() noexcept { return tlVirtualTime; }

  // Makes `*time` the calling thread's now() for the scope's lifetime (nullptr: steady
  // clock again), then restores the previous source. noexcept: thread_local stores.
  class VirtualTimeScope {
   public:
    explicit VirtualTimeScope(const time_point* time) noexcept : previous_(tlVirtualTime) {
      tlVirtualTime = time;
    }
    ~VirtualTimeScope() { tlVirtualTime = previous_; }
    VirtualTimeScope(const VirtualTimeScope&) = delete;
    VirtualTimeScope& operator=(const VirtualTimeScope&) = delete;

   private:
    const time_point* previous_;
  };

 private:
  static constinit inline thread_local const time_point* tlVirtualTime = nullptr;
};

}  // namespace weft
