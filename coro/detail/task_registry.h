#pragma once

#include <cstdint>
#include <string>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/registry_slot.h"
#include "weft/coro/detail/running_root.h"

namespace weft::detail {

// What weft::dumpTasks() and gdb's `weft tasks` list: the registry of root tasks and
// fibers (coro/detail/registry_slot.h tells how it works). Root tasks are registered only
// with WEFT_TASK_TRACKING (coro/detail/config.h); fibers always.

// What a dump shows of one task or fiber.
struct TaskDumpEntry {
  std::string title;    // "task 12 (start())", "fiber 3 \"reader\""
  std::string state;    // "waiting on Mutex::lock", "parked on ...", "running or runnable"
  AsyncBacktrace trace;  // from what it waits on up to its root
  std::uint64_t order = 0;   // tasks by number, fibers by id, in the dump
  std::int64_t firstWaitMs = 0;  // a task that has waited: when it first did (its age)
};

// CLOCK_MONOTONIC_COARSE in milliseconds: what ages are read with.
std::int64_t coarseMilliseconds() noexcept;

// The number of the root task in `slot`, whose subject a dump read as `subject`, inside
// its DumpRead: the one it took at its first wait, else the one a dump gave it, else a
// new one (the first dump that lists a task which has not waited numbers it). noexcept:
// loads, an exchange, and an atomic add per block of numbers.
std::uint64_t numberTask(RegistrySlot& slot, std::uintptr_t subject) noexcept;

// Calls visitTask(slot, context) for every task slot and visitFiber(slot, context) for
// every fiber slot of every thread's rings that is not free, in a DumpSession; each makes
// its own DumpRead and reads the slot's subject again inside it (the slot may have been
// released, or claimed by something else, since).
void forEachRegistrySlot(void (*visitTask)(RegistrySlot& slot, void* context),
                         void (*visitFiber)(FiberSlot& slot, void* context), void* context);

// Set by weft::stackful: fills the entry of a fiber (a fiber slot's subject), inside the
// caller's DumpRead, which keeps it alive. noexcept: a diagnostic.
using DumpFiber = void (*)(const void* fiber, TaskDumpEntry& entry) noexcept;
void setFiberDumper(DumpFiber dumper) noexcept;
DumpFiber fiberDumper() noexcept;

// A root task's registration, from registerRootTask(), called once the root's completion
// sink is set (the sink's trace label names the task's origin: "syncAwait", "start()",
// "spawn()", "TaskGroup::spawn()"), to unregisterRootTask(), called once, before the
// root's frame is destroyed. Both do nothing without WEFT_TASK_TRACKING.
//
// Cost: registering claims a slot of the calling thread's ring (registry_slot.h), writes
// two words and points the root at the slot, where the coroutines of the task publish
// what they wait on; unregistering clears one word and passes the dump gate. No lock, no
// atomic read-modify-write, no clock: the task gets its number and its age when it first
// waits (or from the first dump that lists it, a number).
//
// noexcept: stores (the slow path of a claim aborts when out of memory). Precondition of
// unregisterRootTask: `root` was registered and is not unregistered yet.
[[gnu::always_inline]] inline void registerRootTask(LazyPromiseBase& root) noexcept {
#if WEFT_TASK_TRACKING
  RegistrySlot* slot = claimSlot<RegistrySlot>(localRegistryCursor());
  slot->wait.store(kNeverWaited, std::memory_order_relaxed);
  // release: a dump that reads the subject (acquire) reads `wait` as written here.
  slot->subject.store(reinterpret_cast<std::uintptr_t>(&root), std::memory_order_release);
  root.setRootSlot(slot);
#else
  (void)root;
#endif
}
[[gnu::always_inline]] inline void unregisterRootTask(LazyPromiseBase& root) noexcept {
#if WEFT_TASK_TRACKING
  leaveRootRun(root.rootSlot());  // for stall reports (running_root.h)
  releaseSlot(*root.rootSlot());
#else
  (void)root;
#endif
}

}  // namespace weft::detail
