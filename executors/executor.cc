#include "weft/executors/executor.h"

#include "weft/executors/detail/timer_queue.h"

namespace weft {

namespace {

// Executor::current() of this thread.
thread_local Executor* tlCurrentExecutor = nullptr;

}  // namespace

Executor* Executor::current() noexcept { return tlCurrentExecutor; }

void Executor::setCurrent(Executor* executor) noexcept { tlCurrentExecutor = executor; }

void Executor::scheduleTimer(TimerEntry& timer) { scheduleProcessTimer(timer); }

bool Executor::cancelTimer(TimerEntry& timer) noexcept { return cancelProcessTimer(timer); }

bool Executor::scheduleShutdownTimer(TimerEntry& /*timer*/) { return false; }

void Executor::scheduleProcessTimer(TimerEntry& timer) {
  if (!detail::globalTimerQueue().add(timer)) throw ExecutorShutDown("weft-timer");
}

bool Executor::cancelProcessTimer(TimerEntry& timer) noexcept {
  return detail::globalTimerQueue().cancel(timer);
}

}  // namespace weft
