#include "weft/executors/executor.h"

#include "weft/executors/detail/timer_queue.h"

namespace weft {

void Executor::scheduleTimer(detail::TimerEntry& timer) {
  if (!detail::globalTimerQueue().add(timer)) throw ExecutorShutDown("weft-timer");
}

bool Executor::cancelTimer(detail::TimerEntry& timer) noexcept {
  return detail::globalTimerQueue().cancel(timer);
}

}  // namespace weft
