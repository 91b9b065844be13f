#include "weft/stackful/detail/fiber_park.h"

#include <atomic>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>

#include "weft/stackful/not_in_fiber.h"

namespace weft::detail {

namespace {

// What a task dump says of a fiber parked in a yield.
void describeYield(const void* /*unused*/, std::string& out) {
  out += "this_fiber::yield(), queued to run";
}

// Acts on the park of `parked` (see ParkLink), on the thread's stack, and returns the
// coroutine to run now on its behalf: a null handle for none, its driver when it is to
// continue at once (finished, await_suspend declined or threw, a yield that cannot be
// requeued). Once the driver's handle is out, another thread may run the fiber: nothing
// of `parked` or its link is read after that. noexcept: await_suspend's exception goes
// to the fiber.
std::coroutine_handle<> actOnPark(FiberCore* parked) noexcept {
  ParkLink& link = *parked->parkLink();
  if (parked->done()) return link.driver;  // the driver finishes
  if (link.yieldRequested) {
    link.yieldRequested = false;
    const FiberDriverHandle driver = link.driver;
    try {
      scheduleLocalFirst(link.executor, WorkItem::forHandle(driver));
      return {};
    } catch (...) {
      // Cannot requeue (the executor is shut down): the yield is simply over.
      return driver;
    }
  }
  if (link.suspendOn == nullptr) return {};  // acted on first, before the switch
  try {
    return link.suspendOn(link.awaiter, link.driver);
  } catch (...) {
    link.suspendError = std::current_exception();  // rethrown by await() in the fiber
    return link.driver;
  }
}

// The driver's only await: switches into the fiber from the thread's stack, then acts on
// the park of the fiber that comes back (this one or, after hand-offs, another), and
// transfers to what that asks to run. Suspends the driver first, so that its handle may
// be resumed (on any thread) as soon as the park is acted on.
class RunFiber {
 public:
  explicit RunFiber(FiberCore* core) noexcept : core_(core) {}
  // Passed through the driver's await_transform as it is.
  RunFiber coAwait(Executor* /*executor*/) && noexcept { return *this; }
  bool await_ready() const noexcept { return false; }
  // Reads nothing of *this after the switch: by then the driver may be running again.
  // noexcept: the switch and actOnPark cannot throw (an executor fiber's stack is never
  // shared, so entering it allocates nothing).
  std::coroutine_handle<> await_suspend(FiberDriverHandle /*driver*/) const noexcept {
    const std::coroutine_handle<> next = actOnPark(core_->resumeUntilParked());
    return next ? next : std::noop_coroutine();
  }
  void await_resume() const noexcept {}

 private:
  FiberCore* core_;
};

}  // namespace

FiberDriver driveFiber(FiberPtr fiber) {
  FiberCore* const core = fiber.get();
  do {
    co_await RunFiber(core);
  } while (!core->done());
  fiber.reset();  // gives the stack back before the awaiter runs
}

FiberCore::ParkSwitch parkForYield() {
  FiberCore* const core = FiberCore::current();
  if (core == nullptr) throw NotInFiber("weft::this_fiber::yield() called outside a fiber");
  if (core->unwinding()) [[unlikely]] {
    if (core->unwoundByDestructor()) return FiberCore::ParkSwitch{};
    throw ForcedUnwind{};
  }
  if (ParkLink* const link = core->parkLink(); link != nullptr) {
    link->parkSite = __builtin_return_address(0);
    link->waitNote = runtime::WaitNote{&describeYield, nullptr};
    link->suspendOn = nullptr;
    if (ThreadRunQueue* const queue = ThreadRunQueue::currentFor(link->executor)) {
      // Acted on first: the driver is requeued and the next suspended fiber taken in one
      // step, then the thread is handed to that fiber.
      FiberCore* nextFiber = nullptr;
      const WorkItem next = queue->exchangeNextIf(TakeSuspendedFiber{nextFiber},
                                                  WorkItem::forHandle(link->driver));
      if (!next.empty()) return core->handOffTo(nextFiber);
    }
    link->yieldRequested = true;  // acted on by the driver
  }
  return core->prepareSuspend();
}

void rethrowSuspendError(ParkLink& link) {
  std::rethrow_exception(std::exchange(link.suspendError, nullptr));
}

void throwAwaitOutsideExecutorFiber(bool inFiber) {
  if (!inFiber) throw NotInFiber("weft::await() called outside a fiber");
  throw NotInFiber(
      "weft::await() called in a plain Fiber, which has no executor to resume it: start "
      "the fiber with weft::spawnFiber to await");
}

}  // namespace weft::detail
