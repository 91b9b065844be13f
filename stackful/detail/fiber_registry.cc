#include "weft/stackful/detail/fiber_registry.h"

#include <cstdio>
#include <string>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/runtime_hooks.h"
#include "weft/stackful/detail/fiber_core.h"
#include "weft/stackful/detail/fiber_park.h"

namespace weft::detail {

namespace {

// A fiber in an async backtrace (a spawnFiber state's traceFiber_): where it is parked
// (the return address into the function that called await(), when it is), then the fiber.
void appendFiber(AsyncBacktrace& trace, const void* subject) noexcept {
  const auto* fiber = static_cast<const FiberCore*>(subject);
  const ParkLink* link = fiber->parkLink();
  if (fiber->stateForDump() == FiberCore::State::kSuspended && link != nullptr &&
      link->parkSite != nullptr) {
    trace.addNativeFrame(link->parkSite);
  }
  try {
    trace.addMarker(fiberLabel(fiber->id(), fiber->name()));
  } catch (...) {
    // No memory for the label: the frame is dropped (a diagnostic must not fail).
  }
}

// A fiber, then whoever awaits it: for a fiber of spawnFiber, the chain from its driver
// (whose sink brings the fiber in through appendFiber); a plain Fiber has none.
void appendFiberChain(AsyncBacktrace& trace, const FiberCore* fiber) noexcept {
  const ParkLink* link = fiber->parkLink();
  if (link != nullptr && link->driver) {
    appendAsyncChain(trace, link->driver.promise().asAsyncParent());
  } else {
    appendFiber(trace, fiber);
  }
}

// asyncBacktrace() called in a fiber: after the fiber's native frames, the fiber and who
// awaits it.
void appendRunningFiber(AsyncBacktrace& trace) noexcept {
  if (const FiberCore* fiber = FiberCore::current()) appendFiberChain(trace, fiber);
}

}  // namespace

// A task dump's entry for a fiber: its state, its stack, where it is parked and who
// awaits it. Called inside the dump's DumpRead of the fiber's registry slot, which keeps
// the fiber, its stack and its shared state alive (unregisterFiber waits for it), and a
// parked fiber parked, so that the awaiter on its stack is the one its note names
// (coro/detail/dump_gate.h).
namespace {
void dumpFiber(const void* subject, runtime::TaskDumpEntry& entry) noexcept {
  const auto* fiber = static_cast<const FiberCore*>(subject);
  try {
    entry.order = fiber->id();
    entry.title = fiberLabel(fiber->id(), fiber->name());
    const ParkLink* link = fiber->parkLink();
    const FiberCore::State state = fiber->stateForDump();
    switch (state) {
      case FiberCore::State::kCreated:
        entry.state = "created, not started yet";
        break;
      case FiberCore::State::kRunning:
        entry.state = "running";
        break;
      case FiberCore::State::kSuspended:
        if (link != nullptr && link->waitNote.describe != nullptr) {
          entry.state = "parked on ";
          link->waitNote.describe(link->waitNote.awaiter, entry.state);
        } else {
          entry.state = "suspended (a Fiber: its owner resumes it)";
        }
        break;
      case FiberCore::State::kDone:
        entry.state = "finished";
        break;
    }
    if (state == FiberCore::State::kSuspended) {
      char stack[96];
      std::snprintf(stack, sizeof(stack), ", stack %.1f KiB of %zu KiB in use",
                    static_cast<double>(fiber->stackInUse()) / 1024,
                    fiber->stack().size() / 1024);
      entry.state += stack;
    }
    appendFiberChain(entry.trace, fiber);
  } catch (...) {
    // No memory: the entry stays as far as it got.
  }
}
}  // namespace

// Installed when this file is linked: fiber_core.cc refers to this, so whenever fibers
// are used.
extern const bool gFiberHooksInstalled;
const bool gFiberHooksInstalled = [] {
  setRunningFiberTracer(&appendRunningFiber);
  setFiberTracer(&appendFiber);
  runtime::setFiberDumper(&dumpFiber);
  return true;
}();

std::string fiberLabel(std::uint64_t id, const char* name) {
  std::string label = "fiber " + std::to_string(id);
  if (name != nullptr) {
    label += " \"";
    label += name;
    label += '"';
  }
  return label;
}
}  // namespace weft::detail
