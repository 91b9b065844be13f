#pragma once

#include <coroutine>
#include <exception>
#include <type_traits>

#include "coro/cancellation.h"
#include "coro/detail/lazy_promise.h"
#include "executors/executor.h"

namespace weft::detail {

// The driver of an executor fiber (spawn_fiber.h) is a Lazy<void>; this is its handle.
using FiberDriverHandle = std::coroutine_handle<LazyPromise<void>>;

// Suspends the driver on an awaiter that lives on the parked fiber's stack: calls its
// await_suspend(driver) and maps the three return forms to the handle to transfer to.
// May throw what await_suspend throws (the await did not suspend then).
using SuspendDriverOn = std::coroutine_handle<> (*)(void* awaiter, FiberDriverHandle driver);

// How a fiber started by spawnFiber talks to its driver (the Lazy that runs it on its
// executor): before switching out, the fiber leaves here what it wants done once it is
// off its stack. Done off the stack because the moment an awaiter has the driver's
// handle, another thread may resume the driver, and with it the fiber.
//  - await(x): `awaiter` (on the fiber's stack) and `suspendOn`; the driver co_awaits
//    them, exactly as a Lazy running on the driver's executor with its token would, and
//    resumes the fiber when the awaiter resumes it. If await_suspend throws, the driver
//    puts the exception in `suspendError` and resumes the fiber, which rethrows it.
//  - this_fiber::yield(): `yieldRequested`; the driver reschedules itself on the executor.
// Lives in the driver's coroutine frame; the fiber points at it (FiberCore::awaitLink()).
struct AwaitLink {
  Executor* executor = nullptr;
  const CancellationToken* token = &kNoCancellationToken;
  void* awaiter = nullptr;
  SuspendDriverOn suspendOn = nullptr;
  std::exception_ptr suspendError;
  bool yieldRequested = false;
};

template <class Awaiter>
std::coroutine_handle<> suspendDriverOn(void* awaiter, FiberDriverHandle driver) {
  auto& a = *static_cast<Awaiter*>(awaiter);
  using Result = decltype(a.await_suspend(driver));
  if constexpr (std::is_void_v<Result>) {
    a.await_suspend(driver);
    return std::noop_coroutine();
  } else if constexpr (std::is_same_v<Result, bool>) {
    // false: not suspended after all; the driver continues at once (and resumes us).
    if (a.await_suspend(driver)) return std::noop_coroutine();
    return driver;
  } else {
    return a.await_suspend(driver);
  }
}

// What the driver co_awaits for an await(): the awaiter the fiber left in the link.
// coAwait(Executor*) makes the driver's await_transform pass it through unwrapped (the
// fiber's awaiter was already chosen with the executor in mind).
class LinkedAwaiter {
 public:
  explicit LinkedAwaiter(AwaitLink* link) noexcept : link_(link) {}
  LinkedAwaiter coAwait(Executor* /*executor*/) && noexcept { return *this; }
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(FiberDriverHandle driver) {
    return link_->suspendOn(link_->awaiter, driver);
  }
  void await_resume() const noexcept {}

 private:
  AwaitLink* link_;
};

}  // namespace weft::detail
