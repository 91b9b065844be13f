#pragma once

// The hand-off between the fibers of spawnFiber (see stackful/spawn_fiber.cc): finding,
// in an executor's queue, the driver of a suspended fiber, and switching the thread
// straight to that fiber. Inline here rather than in stackful/fiber.cc because await()'s
// out-of-line park (detail::parkOn, stackful/await.h) runs these steps around the
// awaiter's await_suspend on every park that acts first: as calls, they cost about a
// quarter of that park's instructions.

#include <atomic>
#include <cassert>
#include <coroutine>
#include <cstdint>

#include "executors/detail/solo_run_queue.h"
#include "stackful/detail/await_link.h"
#include "stackful/detail/fiber_core.h"

namespace weft::detail {

// The fiber that `driver`, a fiber driver's handle, drives.
inline FiberCore* fiberOfDriver(std::coroutine_handle<> driver) noexcept {
  return FiberDriverHandle::from_address(driver.address()).promise().fiber();
}

// If `next` (a coroutine taken from an executor's queue) is the driver of a suspended
// fiber of spawnFiber, that fiber; else nullptr. noexcept: loads and compares.
[[gnu::always_inline]] inline FiberCore* fiberToSwitchTo(std::coroutine_handle<> next) noexcept {
  // Relaxed: a thread that does not see the value yet just does not hand off.
  void* const driverResume = gFiberDriverResume.load(std::memory_order_relaxed);
  if (driverResume == nullptr || *static_cast<void* const*>(next.address()) != driverResume) {
    return nullptr;
  }
  FiberCore* fiber = fiberOfDriver(next);
  // A fiber's first run goes through its driver, which makes its context. (A fiber of
  // spawnFiber never runs on a shared stack; checked all the same, since handOffTo does
  // not swap stack contents.)
  if (fiber->state() != FiberCore::State::kSuspended || fiber->onSharedStack()) return nullptr;
  return fiber;
}

inline FiberCore::ParkSwitch FiberCore::handOffTo(FiberCore* next, bool actOnTop) noexcept {
  // What leave() and enter() would do around a switch back to the resumer and into
  // `next`, done at once: the exception state goes from this fiber to next, next becomes
  // the running fiber and inherits our resumer (its suspended context is read first).
  EhState* const eh = ehGlobals();
  ehCaught_ = eh->caughtExceptions;
  ehUncaught_ = eh->uncaughtExceptions;
  eh->caughtExceptions = next->ehCaught_;
  eh->uncaughtExceptions = next->ehUncaught_;
  void* const to = next->context_;
  assert((reinterpret_cast<std::uintptr_t>(to) & ParkSwitch::kActOnTarget) == 0);
  next->context_ = context_;
  next->state_ = State::kRunning;
  running_ = next;
  // The sanitizers: next inherits what they know of our resumer too (its stack's bounds,
  // its TSan fiber), and the switch goes to next (its stack, its TSan fiber).
#if WEFT_ASAN
  next->asanCallerBottom_ = asanCallerBottom_;
  next->asanCallerSize_ = asanCallerSize_;
  asanSwitchBottom_ = next->stackBottom();
  asanSwitchSize_ = static_cast<std::size_t>(static_cast<const char*>(next->contextTop()) -
                                             static_cast<const char*>(asanSwitchBottom_));
#endif
#if WEFT_TSAN
  next->tsanCaller_ = tsanCaller_;
  tsanSwitchTarget_ = next->tsanFiber_;
#endif
  return ParkSwitch{this, reinterpret_cast<std::uintptr_t>(to) |
                              (actOnTop ? ParkSwitch::kActOnTarget : std::uintptr_t{0})};
}

inline FiberCore::NextRun FiberCore::takeNextRun(SoloRunQueue& solo) noexcept {
  if (std::coroutine_handle<> next = solo.takeNextHandle()) {
    FiberCore* const fiber = fiberToSwitchTo(next);
    if (fiber != nullptr) {
      // Where its switch-in pops its registers from, and the frame it returns into: 5
      // cache lines. Chosen on the echo ring of 30,000 fibers (medians of 8 interleaved
      // runs): 4 and 5 lines were alike with g++ (79, 84 ns), 5 much better with clang++
      // (87 against 120 ns); 2, 3, 6 or 8 lines did worse.
      const auto* sp = static_cast<const char*>(fiber->context_);
      for (int line = 0; line < 5; ++line) __builtin_prefetch(sp + 64 * line);
    }
    return NextRun{next, fiber};
  }
  return NextRun{};
}

inline FiberCore::ParkSwitch FiberCore::prepareSuspendActedOn(NextRun next) noexcept {
  state_ = State::kSuspended;
  AwaitLink& link = *awaitLink_;
  link.suspendOn = nullptr;  // acted on: nothing is left for whoever runs the driver next
  // (Our own driver cannot be `next`: it was running when `next` was taken.)
  if (next.fiber != nullptr) return handOffTo(next.fiber, false);
  link.pending = next.handle;
  sanitizerTargetIsResumer();
  return ParkSwitch{this, reinterpret_cast<std::uintptr_t>(context_)};
}

}  // namespace weft::detail
