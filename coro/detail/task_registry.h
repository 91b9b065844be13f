#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

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

// A task number, unique in the process, from the process-wide sequence itself (not a
// thread's block): for a stall signal's handler, which numbers a task in its first run
// (task_dump.cc). noexcept and async-signal-safe: a lock-free atomic add.
std::uint64_t takeTaskNumber() noexcept;

// CLOCK_MONOTONIC_COARSE in milliseconds: what ages are read with.
std::int64_t coarseMilliseconds() noexcept;

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
// root's frame and `record` (a member of its sink) are destroyed. Both do nothing without
// WEFT_TASK_TRACKING.
//
// Cost: registering writes one word of the record and points the root at it; the task
// is listed (a slot of the ring of the thread it runs on claimed, a number and the coarse
// clock read) only when it first waits (TaskRecord::publishWait), so a task that ends
// without waiting never touches the registry. Unregistering loads the record's wait word,
// and if the task was listed, clears its slot's subject and passes the dump gate. No
// lock, no atomic read-modify-write.
//
// What dumps do not list, then: a root task that has not waited yet (one queued that has
// never run, or one running its first stretch).
//
// A task that never ran (its executor refused it) was never listed: it may be dropped
// without unregisterRootTask.
//
// noexcept: stores. Precondition of unregisterRootTask: `root` was registered with
// `record` and is not unregistered yet.
// What a root's sink holds: a TaskRecord with WEFT_TASK_TRACKING, else nothing (a member
// [[no_unique_address]]).
struct NoTaskRecord {};
using RootTaskRecord = std::conditional_t<WEFT_TASK_TRACKING != 0, TaskRecord, NoTaskRecord>;

[[gnu::always_inline]] inline void registerRootTask(LazyPromiseBase& root,
                                                    RootTaskRecord& record) noexcept {
#if WEFT_TASK_TRACKING
  // A plain store: nothing reads the record before the task is listed (publishFirstWait's
  // release), and the task's own coroutines run after this.
  record.wait = kNeverWaited;
  root.setRootRecord(&record);
#else
  (void)root;
  (void)record;
#endif
}
[[gnu::always_inline]] inline void unregisterRootTask(RootTaskRecord& record) noexcept {
#if WEFT_TASK_TRACKING
  // For stall reports (running_root.h): the task's run ends here when this is its
  // thread (a task that ends elsewhere, syncAwait's, left its run where it completed).
  leaveRootRun(&record);
  // Relaxed: written by the task's own threads, whose last write happens before this.
  // Odd: never waited, never listed (registry_slot.h).
  if ((record.loadWait(std::memory_order_relaxed) & 1) == 0) releaseSlot(*record.slot);
#else
  (void)record;
#endif
}

}  // namespace weft::detail
