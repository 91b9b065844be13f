#pragma once

#include <atomic>
#include <coroutine>
#include <exception>
#include <type_traits>

#include "coro/cancellation.h"
#include "coro/detail/lazy_promise.h"
#include "coro/detail/via_awaiter.h"
#include "coro/detail/wait_note.h"
#include "executors/executor.h"

namespace weft::detail {

class FiberCore;
struct AwaitLink;

// The promise of the coroutine that drives a fiber started by spawnFiber (its "driver",
// spawn_fiber.cc). A Lazy promise, so that awaiting through it behaves exactly as
// awaiting in a Lazy bound to the fiber's executor and token (a Lazy awaited from the
// fiber inherits both); plus the fiber it drives, which a hand-off finds through it
// (fiberOfDriver): directly, not through the fiber's AwaitLink, so that with many fibers
// that is one cache miss fewer before the switch.
class FiberDriverPromise final : public LazyPromiseBase {
 public:
  std::coroutine_handle<FiberDriverPromise> get_return_object() noexcept {
    return std::coroutine_handle<FiberDriverPromise>::from_promise(*this);
  }
  FiberDriverPromise() noexcept = default;
  FiberDriverPromise(const FiberDriverPromise&) = delete;
  FiberDriverPromise& operator=(const FiberDriverPromise&) = delete;
  // A driver frame destroyed before its body returned (its handle destroyed by whoever
  // held it while the fiber was parked, instead of resumed): its fiber has been unwound
  // with the frame, and `onAbandoned` tells the fiber's shared state, so that its future
  // learns the fiber will never finish (spawn_fiber.h). noexcept: a destructor.
  ~FiberDriverPromise() {
    if (!returned_ && onAbandoned_ != nullptr) [[unlikely]]
      onAbandoned_(abandonedArg_);
  }

  void return_void() noexcept { returned_ = true; }
  // noexcept: the driver's body throws nothing (its only await is noexcept).
  [[noreturn]] void unhandled_exception() noexcept { std::terminate(); }

  FiberCore* fiber() const noexcept { return fiber_; }
  void setFiber(FiberCore* fiber) noexcept { fiber_ = fiber; }

  // A coroutine awaited by the fiber records the fiber (its completion sink, the shared
  // state of spawnFiber) as its parent, not this driver: async backtraces show the fiber.
  AsyncParent asAsyncParent() const noexcept {
    const CompletionSink* sink = completionSink();  // spawnFiber's state, once it is set
    return sink != nullptr ? AsyncParent::sink(sink) : AsyncParent{};
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

// How a fiber started by spawnFiber talks to the code that runs it on its executor.
// Before switching out, the fiber leaves here what it wants done once it is off its
// stack: done off the stack because the moment an awaiter has the driver's handle,
// another thread may resume the driver, and with it the fiber (switch, then act).
//  - await(x): `awaiter` (on the fiber's stack) and `suspendOn`: the awaiter's
//    await_suspend is called with the driver's handle, exactly as a Lazy running on the
//    executor with the fiber's token would call it; the fiber continues when the awaiter
//    resumes the driver. If await_suspend throws, the exception goes to `suspendError`
//    and the fiber continues at once, to rethrow it.
//  - this_fiber::yield(): `yieldRequested`; the driver is rescheduled on the executor.
// Who does it: the thread's stack the fiber was resumed from, or, when the fiber hands
// the thread straight to the next fiber in the executor's queue (FiberCore::suspend),
// that fiber's stack just before it continues. `mayHandOff` says whether this park may
// do so: not when await_suspend returns a coroutine to run next (that one runs first).
// A fiber that acted on its park itself before switching (see ResumesOnlyThroughExecutor
// below) leaves `suspendOn` null: nothing is left to do.
// `pending`: a coroutine the fiber took from the executor's queue (takeNextHandle) but
// could not switch to directly; whoever acts on the park resumes it.
// Lives in the fiber's shared state (spawn_fiber.h), as long as the driver.
struct AwaitLink {
  Executor* executor = nullptr;
  const CancellationToken* token = &kNoCancellationToken;
  FiberDriverHandle driver;
  void* awaiter = nullptr;
  SuspendDriverOn suspendOn = nullptr;
  std::exception_ptr suspendError;
  std::coroutine_handle<> pending;
  // Where in the fiber's code its last park happened (a return address into the function
  // that called await()), for async backtraces of a parked fiber, and what it waits on,
  // for task dumps. Meaningful while the fiber is suspended.
  const void* parkSite = nullptr;
  WaitNote waitNote;
  bool yieldRequested = false;
  bool mayHandOff = false;
};

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

// True when the driver's suspension on `Awaiter` leaves nothing to run next, so the
// fiber may hand the thread straight to the next fiber: its await_suspend returns void or
// bool, not a coroutine to transfer to. A ViaAwaiter (a foreign awaitable) returns a
// coroutine, but only its awaiting one or std::noop_coroutine() when the awaitable's own
// await_suspend returns void or bool.
template <class Awaiter>
struct ParkMayHandOff
    : std::bool_constant<!std::is_convertible_v<decltype(std::declval<Awaiter&>().await_suspend(
                                                    std::declval<FiberDriverHandle>())),
                                                std::coroutine_handle<>>> {};
template <class Inner>
struct ParkMayHandOff<ViaAwaiter<Inner>> {
  static constexpr bool value = [] {
    using Plain = std::remove_reference_t<Inner>;
    if constexpr (requires(Plain& a, std::coroutine_handle<> h) { a.await_suspend(h); }) {
      using Result =
          decltype(std::declval<Plain&>().await_suspend(std::declval<std::coroutine_handle<>>()));
      return std::is_void_v<Result> || std::is_same_v<Result, bool>;
    } else {
      return false;
    }
  }();
};
template <class Awaiter>
inline constexpr bool kParkMayHandOff = ParkMayHandOff<std::remove_cv_t<Awaiter>>::value;

// Awaiters that declare `static constexpr bool kResumesOnlyThroughExecutor = true`
// promise, when made with an executor (coAwait(executor, ...)): await_suspend(h) returns
// void or bool, does not resume h itself, and h is resumed later only by scheduling it on
// that executor, from whichever thread completes or cancels the operation. Then, on
// ThreadPool(1)'s own thread, a fiber may call await_suspend itself before it switches
// out (await()): nobody can run the driver before this thread, busy with the switch,
// gets back to its queue. That saves the act after the switch (finishHandOff).
template <class Awaiter>
concept ResumesOnlyThroughExecutor =
    requires { requires bool(std::remove_cvref_t<Awaiter>::kResumesOnlyThroughExecutor); };

// The resume function of fiber drivers' frames (spawn_fiber.cc), how FiberCore's
// hand-off recognizes one in an executor's queue; null until the first spawnFiber.
extern constinit std::atomic<void*> gFiberDriverResume;

// Acts on the park of `parked` (see AwaitLink) on the stack of the fiber it handed the
// thread to (spawn_fiber.cc). noexcept: it runs on top of that fiber, where an exception
// has nowhere to go (a failure to requeue aborts with a message).
void finishHandOff(FiberCore* parked) noexcept;

}  // namespace weft::detail
