#include "stackful/spawn_fiber.h"

#include <atomic>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

// How a fiber of spawnFiber runs on its executor
// ===============================================
// Its driver (driveFiber) is a coroutine on the executor. Resuming the driver switches
// into the fiber (RunFiber), from the thread's stack; the driver is suspended the whole
// time the fiber runs, so its handle may be handed out while the fiber still runs.
//
// A fiber parks (await(x), this_fiber::yield()) in FiberCore::prepareSuspend() and
// switchOut(). Its awaiter must not see the driver's handle before the fiber is off its
// stack (another thread could resume it at once), so the park is acted on after the
// switch (actOnPark): the awaiter's await_suspend gets the driver's handle, or the driver
// is requeued.
//  - The plain way: the fiber switches back to the thread's stack, where the driver's
//    RunFiber::await_suspend acts on the park and returns to the executor's loop, which
//    resumes the next driver, which switches into its fiber: two switches per park.
//  - The hand-off: before switching, the fiber takes the next coroutine of its executor's
//    queue (Executor::takeNextHandle). If that is the driver of a suspended fiber, it
//    switches straight into that fiber (FiberCore::handOffTo), which inherits its
//    resumer, and the park is acted on from that fiber's stack before it continues (an
//    ontop switch): one switch per park, and no trip through the loop. The driver taken
//    from the queue stays suspended where it was: switching into its fiber is what
//    resuming it would have done. Anything else that was taken is resumed by whoever
//    acts on the park, right after it (AwaitLink::pending), as the loop would have.
//  - Not when await_suspend returns a coroutine to run next (await(lazy) starts the Lazy
//    at once, by symmetric transfer from the thread's stack). Under ASan and TSan the
//    hand-off runs too, with their switch hooks in the frame of the switch
//    (FiberCore::switchOut).
//  - Acting first: on ThreadPool(1)'s own thread, an awaiter that resumes only through
//    the executor (ResumesOnlyThroughExecutor: channel operations) has its await_suspend
//    called by the fiber itself before it switches out (await(), parkActingFirst):
//    nobody can run the driver before this thread is back at its queue. The hand-off is
//    then a plain switch, with nothing to do on the other side, as for a yield whose
//    requeue was done with the take.
// Order is the executor's: the fiber runs what the loop would have run next (the
// executor declines when a due timer comes first), and a yield requeues the fiber behind
// everything already queued, as the loop would.

namespace weft::detail {

// What tells a fiber's driver apart from any other coroutine in an executor's queue:
// the first word of a coroutine frame is the address of the coroutine's resume function
// with gcc, clang and MSVC (the layout std::coroutine_handle::resume relies on), and
// driveFiber has one. Null until the first fiber is spawned, and on other compilers
// (then fibers never hand off).
constinit std::atomic<void*> gFiberDriverResume{nullptr};

namespace {

void* resumeFunctionOf(std::coroutine_handle<> h) noexcept {
  return *static_cast<void* const*>(h.address());
}

[[noreturn]] void abortRequeue(Executor* executor, const char* what) noexcept {
  std::fprintf(stderr,
               "weft: a parked fiber could not be requeued on executor '%.*s' after it "
               "handed the thread to another fiber: %s\n",
               static_cast<int>(executor->name().size()), executor->name().data(), what);
  std::abort();
}

// Called on one of `executor`'s threads right after a coroutine was taken from its
// queue: a local push, which a ThreadPool never refuses. noexcept: it runs where an
// exception cannot go; a failure (memory) aborts with a message.
void requeue(Executor* executor, std::coroutine_handle<> h) noexcept {
  try {
    executor->schedule(h);
  } catch (const std::exception& e) {
    abortRequeue(executor, e.what());
  } catch (...) {
    abortRequeue(executor, "unknown exception");
  }
}

// Does what `parked` asked for when it switched out (AwaitLink) and returns the
// coroutine to run now on its behalf: a null handle for none, its driver when it is to
// continue at once (finished, await_suspend declined or threw, a yield that cannot be
// requeued). Once the driver's handle is out, another thread may run the fiber: nothing
// of `parked` or its link is read after that. noexcept: await_suspend's exception goes
// to the fiber.
inline std::coroutine_handle<> actOnPark(FiberCore* parked) noexcept {
  AwaitLink& link = *parked->awaitLink();
  if (parked->done()) return link.driver;  // the driver finishes
  if (link.yieldRequested) {
    link.yieldRequested = false;
    const FiberDriverHandle driver = link.driver;
    try {
      link.executor->schedule(driver);
      return {};
    } catch (...) {
      // Cannot requeue (the executor is shut down): the yield is simply over.
      return driver;
    }
  }
  if (link.suspendOn == nullptr) return {};  // await() acted on it before switching out
  try {
    return link.suspendOn(link.awaiter, link.driver);
  } catch (...) {
    link.suspendError = std::current_exception();  // rethrown by await() in the fiber
    return link.driver;
  }
}

// The driver's side of a run: switches into the fiber from the thread's stack, then acts
// on the park of the fiber that comes back (this one or, after hand-offs, another), and
// returns the coroutine to transfer to. noexcept: the switch and actOnPark cannot throw
// (an executor fiber's stack is never shared, so enter() allocates nothing).
std::coroutine_handle<> runExecutorFiber(FiberCore* core) noexcept {
  FiberCore* parked = core->resumeUntilParked();
  AwaitLink& link = *parked->awaitLink();
  Executor* const executor = link.executor;
  const std::coroutine_handle<> pending = std::exchange(link.pending, nullptr);
  const std::coroutine_handle<> next = actOnPark(parked);
  if (!pending) return next ? next : std::noop_coroutine();
  // The fiber took `pending` from the queue: it runs now, as the loop would have run it.
  // A fiber that is to continue at once goes behind it (rare: await_suspend declined).
  if (next) requeue(executor, next);
  return pending;
}

// The driver's only await: switches into the fiber. Suspends the driver first, so that
// its handle may be resumed (on any thread) as soon as the fiber's park is acted on.
class RunFiber {
 public:
  explicit RunFiber(FiberCore* core) noexcept : core_(core) {}
  // Passed through the driver's await_transform as it is.
  RunFiber coAwait(Executor* /*executor*/) && noexcept { return *this; }
  bool await_ready() const noexcept { return false; }
  // Reads nothing of *this after the switch: by then the driver may be running again.
  std::coroutine_handle<> await_suspend(FiberDriverHandle /*driver*/) const noexcept {
    return runExecutorFiber(core_);
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

void noteFiberDriver(FiberDriverHandle driver) noexcept {
#if defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER)
  void* resume = resumeFunctionOf(driver);
  // Relaxed: a thread that does not see it yet just does not hand off.
  if (gFiberDriverResume.load(std::memory_order_relaxed) != resume) {
    gFiberDriverResume.store(resume, std::memory_order_relaxed);
  }
#else
  (void)driver;
#endif
}

void rethrowSuspendError(AwaitLink& link) {
  std::rethrow_exception(std::exchange(link.suspendError, nullptr));
}

void finishHandOff(FiberCore* parked) noexcept {
  Executor* const executor = parked->awaitLink()->executor;
  if (std::coroutine_handle<> next = actOnPark(parked)) requeue(executor, next);
}

}  // namespace weft::detail
