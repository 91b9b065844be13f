#pragma once

#include "coro/lazy.h"
#include "executors/executor.h"

namespace weft::detail {

// How a fiber started by spawnFiber talks to its driver (the Lazy that runs it on its
// executor, spawn_fiber.h): before switching out, the fiber leaves here what it wants
// done once it is off its stack.
//  - await(x): `pending` is a Lazy that awaits x and stores its result on the fiber's
//    stack; the driver co_awaits it (so it inherits the driver's executor, exactly like
//    a Lazy awaited inside a Task) and resumes the fiber when it completes.
//  - this_fiber::yield(): `yieldRequested`; the driver reschedules itself on the executor.
// Lives in the driver's coroutine frame; the fiber points at it (FiberCore::awaitLink()).
struct AwaitLink {
  Executor* executor = nullptr;
  Lazy<void> pending;
  bool yieldRequested = false;
};

}  // namespace weft::detail
