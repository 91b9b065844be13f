#pragma once

// The park of a fiber started by spawnFiber: how it suspends in await(x) or
// this_fiber::yield() and is resumed through its executor. docs/stackful.md, "The park",
// tells it in one page; the words used here (driver, park, link, act, hand-off) are
// defined in its glossary.
//
//  - The driver (FiberDriverPromise, driveFiber in fiber_park.cc) is a coroutine on the
//    executor. Resuming it switches into the fiber, from the thread's stack.
//  - A fiber parks by leaving in its ParkLink what is to be done with its driver (suspend
//    it on the awaiter, or requeue it for a yield), then switching back to the driver,
//    which acts on the park on the thread's stack and returns to the executor's loop.
//    The awaiter must not get the driver's handle while the fiber is still on its stack:
//    another thread could resume it at once.
//  - Acting first: on a thread that offers its run queue (executors/thread_run_queue.h:
//    ThreadPool(1)'s worker), nobody can resume the driver before this thread is back at
//    its queue, provided the awaiter resumes only through the executor
//    (ResumesOnlyThroughExecutor) or the park is a yield. The fiber then acts on its own
//    park before it switches, and when the next item of the queue is another suspended
//    fiber's driver, it takes it and switches straight into that fiber (the hand-off:
//    one switch per park instead of two, and no trip through the loop). Without a
//    fiber next, it switches back to its driver as above, with nothing left to act on.

#include <atomic>
#include <coroutine>
#include <exception>
#include <memory>
#include <type_traits>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/runtime_hooks.h"
#include "weft/executors/executor.h"
#include "weft/executors/thread_run_queue.h"
#include "weft/stackful/detail/fiber_core.h"

namespace weft::detail {

// The promise of a fiber's driver. A Lazy promise, so that awaiting through it behaves
// exactly as awaiting in a Lazy bound to the fiber's executor and token (a Lazy awaited
// from the fiber inherits both); plus the fiber it drives, which a hand-off finds
// through it directly (fiberOfDriver): with many fibers, one cache miss fewer before the
// switch than through the fiber's ParkLink.
class FiberDriverPromise final : public runtime::PromiseBase {
 public:
  // Its resumptions are queued as tagged work items where weft queues them itself (a
  // yield's requeue, the wake-ups of channels and sync primitives): how a hand-off
  // recognises a driver in a run queue (suspendedFiberOf).
  static constexpr bool kTagWorkItems = true;
  // A fiber stays on the executor it was spawned on (coro/resume_on.h, RefusesResumeOn).
  static constexpr const char* kRefusesResumeOn =
      "weft: resumeOn in a fiber: a fiber stays on the executor it was spawned on "
      "(spawn a new one there, or await a Lazy that runs there with .via())";

  std::coroutine_handle<FiberDriverPromise> get_return_object() noexcept {
    return std::coroutine_handle<FiberDriverPromise>::from_promise(*this);
  }
  FiberDriverPromise() noexcept = default;
  FiberDriverPromise(const FiberDriverPromise&) = delete;
  FiberDriverPromise& operator=(const FiberDriverPromise&) = delete;
  // A driver frame destroyed before its body returned (its handle destroyed by whoever
  // held it while the fiber was parked, instead of resumed): `onAbandoned` tells the
  // fiber's shared state, so that its future learns the fiber will never finish
  // (spawn_fiber.h); the fiber is unwound and freed just after, with the frame's
  // parameter that owns it. It is taken off the fiber registry first: the shared state,
  // which task dumps reach through the fiber, may be freed by onAbandoned, and the
  // coroutine awaiting the future, which they reach through the state, resumed.
  // noexcept: a destructor.
  ~FiberDriverPromise() {
    if (!returned_ && onAbandoned_ != nullptr) [[unlikely]] {
      if (fiber_ != nullptr) fiber_->unregister();
      onAbandoned_(abandonedArg_);
    }
  }

  void return_void() noexcept { returned_ = true; }
  // noexcept: the driver's body throws nothing (its only await is noexcept).
  [[noreturn]] void unhandled_exception() noexcept { std::terminate(); }

  FiberCore* fiber() const noexcept { return fiber_; }
  void setFiber(FiberCore* fiber) noexcept { fiber_ = fiber; }

  // A coroutine awaited by the fiber records the fiber (its completion sink, the shared
  // state of spawnFiber) as its parent, not this driver: async backtraces show the fiber.
  runtime::AsyncParent asAsyncParent() const noexcept {
    const runtime::CompletionSink* sink = completionSink();  // spawnFiber's state, once it is set
    return sink != nullptr ? runtime::AsyncParent::sink(sink) : runtime::AsyncParent{};
  }

  // What the destructor calls if the body never returned (null: nothing).
  using OnAbandoned = void (*)(void* arg) noexcept;
  void setOnAbandoned(OnAbandoned onAbandoned, void* arg) noexcept {
    onAbandoned_ = onAbandoned;
    abandonedArg_ = arg;
  }

 private:
  FiberCore* fiber_ = nullptr;
  OnAbandoned onAbandoned_ = nullptr;
  void* abandonedArg_ = nullptr;
  bool returned_ = false;
};

using FiberDriverHandle = std::coroutine_handle<FiberDriverPromise>;

// Suspends the driver on an awaiter that lives on the parked fiber's stack: calls its
// await_suspend(driver) and maps the three return forms to the coroutine to run next: a
// null handle when the driver is suspended and nothing is to run, the driver itself when
// await_suspend declined to suspend (returned false), else what await_suspend returned.
// May throw what await_suspend throws (the await did not suspend then).
using SuspendDriverOn = std::coroutine_handle<> (*)(void* awaiter, FiberDriverHandle driver);

template <class Awaiter>
std::coroutine_handle<> suspendDriverOn(void* awaiter, FiberDriverHandle driver) {
  auto& a = *static_cast<Awaiter*>(awaiter);
  using Result = decltype(a.await_suspend(driver));
  if constexpr (std::is_void_v<Result>) {
    a.await_suspend(driver);
    return {};
  } else if constexpr (std::is_same_v<Result, bool>) {
    // false: not suspended after all; the driver continues at once (and resumes us).
    if (a.await_suspend(driver)) return {};
    return driver;
  } else {
    std::coroutine_handle<> next = a.await_suspend(driver);
    // std::noop_coroutine() says "suspended, nothing to run" (ViaAwaiter returns it).
    if (next.address() == std::noop_coroutine().address()) return {};
    return next;
  }
}

// What a fiber leaves for its driver when it parks, and what they share for its whole
// life (it lives in the fiber's shared state, spawn_fiber.h, as long as the driver):
//  - await(x) acted on by the driver: `awaiter` (on the fiber's stack) and `suspendOn`;
//    the driver calls the awaiter's await_suspend with its own handle, exactly as a Lazy
//    on the executor with the fiber's token would, and the fiber continues when the
//    awaiter resumes the driver. If await_suspend throws, the exception goes to
//    `suspendError` and the fiber continues at once, to rethrow it. A park acted on
//    first leaves `suspendOn` null: nothing is left to do.
//  - this_fiber::yield() acted on by the driver: `yieldRequested`; the driver requeues
//    itself on the executor.
struct ParkLink {
  Executor* executor = nullptr;
  const CancellationToken* token = &kNoCancellationToken;
  FiberDriverHandle driver;
  void* awaiter = nullptr;
  SuspendDriverOn suspendOn = nullptr;
  std::exception_ptr suspendError;
  // Where in the fiber's code its last park happened (a return address into the function
  // that called await()), for async backtraces of a parked fiber, and what it waits on,
  // for task dumps. Meaningful while the fiber is suspended.
  const void* parkSite = nullptr;
  runtime::WaitNote waitNote;
  bool yieldRequested = false;
};

// The fiber that `driver`, a fiber driver's handle, drives.
inline FiberCore* fiberOfDriver(std::coroutine_handle<> driver) noexcept {
  return FiberDriverHandle::from_address(driver.address()).promise().fiber();
}

// If `item` (the next item of a run queue) is the driver of a suspended fiber that can be
// switched into directly, that fiber; else nullptr. A driver is recognised by its tag
// (FiberDriverPromise::kTagWorkItems): one queued untagged (through
// Executor::schedule by an awaitable of another library) is resumed by the loop instead. When it is one, starts loading the
// fiber's stack top, where its switch-in pops its registers from and the frame it
// returns into, so that these cache misses overlap with the park's remaining work.
// noexcept: loads and compares.
[[gnu::always_inline]] inline FiberCore* suspendedFiberOf(WorkItem item) noexcept {
  if (!item.isTaggedHandle()) return nullptr;
  FiberCore* fiber = fiberOfDriver(item.handle());
  // A fiber's first run goes through its driver, which makes its context; a fiber on a
  // shared stack (never one of spawnFiber: checked all the same) must copy its stack in.
  if (fiber->state() != FiberCore::State::kSuspended || fiber->onSharedStack()) return nullptr;
  // 5 cache lines: measured best of 2 to 8 on the channel echo ring (docs/stackful.md).
  const auto* sp = static_cast<const char*>(fiber->suspendedContext());
  for (int line = 0; line < 5; ++line) __builtin_prefetch(sp + 64 * line);
  return fiber;
}

// Owns a fiber: destroying the owner destroys the fiber, unwinding it if it is suspended.
// The driver takes it as a parameter, so even a driver frame destroyed before it ever
// ran frees its fiber.
struct FiberDestroyer {
  void operator()(FiberCore* core) const noexcept { core->destroy(); }
};
using FiberPtr = std::unique_ptr<FiberCore, FiberDestroyer>;

// The coroutine that runs a fiber on its executor (fiber_park.cc): resumes it until it
// finishes. In between, the fiber's parks are acted on (ParkLink) and the driver waits
// in the awaiter the fiber parked on, so that resuming the driver resumes the fiber.
// Bound by spawnFiber to the executor and the fiber's token, so the awaits inherit both.
struct FiberDriver {
  using promise_type = FiberDriverPromise;
  FiberDriver(FiberDriverHandle h) noexcept : handle(h) {}  // NOLINT: the promise's return
  FiberDriverHandle handle;
};
FiberDriver driveFiber(FiberPtr fiber);

// The filter of a run queue's takeNextIf/exchangeNextIf for a hand-off: accepts the
// driver of a suspended fiber (suspendedFiberOf) and keeps that fiber in `fiber`. A
// functor with a forced-inline call, not a lambda: clang++ calls a lambda out of line
// here.
struct TakeSuspendedFiber {
  FiberCore*& fiber;
  [[gnu::always_inline]] bool operator()(WorkItem item) const noexcept {
    fiber = suspendedFiberOf(item);
    return fiber != nullptr;
  }
};

[[noreturn]] void throwAwaitOutsideExecutorFiber(bool inFiber);

// The park of await() acted on first (see the top of this file), when the calling thread
// offers `link.executor` its run queue; false, having done nothing, otherwise. Takes the
// next suspended fiber from the queue before await_suspend, so that loading its stack
// overlaps await_suspend's work, and puts it back if await_suspend declines or throws.
// True with no switch (park.fiber null) when await_suspend declined: the fiber goes on.
// Errors: as FiberCore::refuseParkWhileUnwinding when the fiber is being destroyed; what
// await_suspend throws (the await did not suspend then).
template <class Awaiter>
[[gnu::always_inline]] inline bool parkActingFirst(FiberCore* core, ParkLink& link,
                                                   Awaiter& awaiter, FiberCore::ParkSwitch& park) {
  ThreadRunQueue* const queue = ThreadRunQueue::currentFor(link.executor);
  if (queue == nullptr) return false;
  core->throwIfUnwinding();  // before the driver's handle is out
  FiberCore* nextFiber = nullptr;
  const WorkItem next = queue->takeNextIf(TakeSuspendedFiber{nextFiber});
  using Result = decltype(awaiter.await_suspend(link.driver));
  static_assert(std::is_void_v<Result> || std::is_same_v<Result, bool>,
                "kResumesOnlyThroughExecutor: await_suspend returns void or bool");
  // suspendDriverOn answers null when the driver is suspended, the driver when declined.
  bool suspended;
  try {
    suspended = !suspendDriverOn<Awaiter>(std::addressof(awaiter), link.driver);
  } catch (...) {
    if (!next.empty()) queue->putBack(next);
    throw;
  }
  if (!suspended) {
    if (!next.empty()) queue->putBack(next);
    return true;  // the fiber goes on at once
  }
  link.suspendOn = nullptr;  // acted on: nothing is left for the driver to do
  park = nextFiber != nullptr ? core->handOffTo(nextFiber) : core->prepareSuspend();
  return true;
}

// What await() does between a false await_ready and the switch, out of line (one copy
// per awaiter type, not one per await): parks the fiber on `awaiter` and answers the
// switch out of it, which await() makes in its own frame. park.fiber is null when there
// is no switch to make: await_suspend declined (the fiber goes on at once).
// Errors: as FiberCore::refuseParkWhileUnwinding when the fiber is being destroyed; what
// await_suspend throws when the fiber calls it itself (parkActingFirst).
template <class Awaiter>
[[gnu::noinline]] FiberCore::ParkSwitch parkOn(FiberCore* core, ParkLink& link, Awaiter& awaiter) {
  FiberCore::ParkSwitch park{};
  // Out of line, so this is an address in the fiber's function that called await().
  link.parkSite = __builtin_return_address(0);
  link.waitNote = runtime::WaitNote{&runtime::describeAwaiter<Awaiter>, std::addressof(awaiter)};
  if constexpr (weft::ResumesOnlyThroughExecutor<Awaiter>) {  // coro/awaitable_support.h
    if (parkActingFirst(core, link, awaiter, park)) return park;
  }
  // Acted on by the driver once the fiber is off its stack.
  link.awaiter = static_cast<void*>(std::addressof(awaiter));
  link.suspendOn = &suspendDriverOn<Awaiter>;
  return core->prepareSuspend();
}

// this_fiber::yield()'s park, for the fiber running on this thread (found out of line: a
// thread_local). Acted on first where the thread offers its run queue and the next item
// is a suspended fiber (its driver requeued and that fiber taken in one step: a
// hand-off), else by the driver (yieldRequested). Throws NotInFiber outside a fiber.
// When the fiber is being destroyed: inside a destructor run by the forced unwind,
// answers no switch (park.fiber null: the yield returns at once, since nobody will resume
// the fiber and throwing there would call std::terminate); elsewhere (ForcedUnwind was
// caught and not rethrown) throws ForcedUnwind again.
FiberCore::ParkSwitch parkForYield();

// Rethrows link.suspendError and clears it: the cold end of await(), out of line.
[[noreturn]] void rethrowSuspendError(ParkLink& link);

}  // namespace weft::detail
