#pragma once

#include <atomic>
#include <cstdint>

#include "weft/coro/detail/config.h"
#include "weft/coro/detail/registry_slot.h"

namespace weft::detail {

// The root task whose coroutines the calling thread runs now, for ThreadPool's stall
// reports (executors/stall_task_hook.h; the hook is in coro/task_dump.cc): the task's
// record (registry_slot.h, in its completion sink), or in the task's first run its root
// coroutine's promise tagged kFirstRun (below), or null. Only with WEFT_TASK_TRACKING.
//
// A task's run on a thread starts where the task is started on that thread (runRootTask, or the
// job of scheduleRootTask: task_registry.h), enterFirstRun, or where its innermost coroutine
// resumes from a published wait (NotedAwaiter::await_resume), enterRootRun; it ends where a
// coroutine of it publishes its next wait or the task ends on this thread (the task's completion
// sink, unregisterRootTask or SyncWaitSink::complete), publishWaitAndLeaveRun (monitored_task.h)
// and endRootRun. A store at each end, nothing elsewhere. Not seen: a task resumed inside
// another's run (an await that resumes a waiter inline): the word then names the inner task
// until it waits or ends, then nothing.
//
// The word never names a freed record or frame: a run moves to another thread only through a
// published wait (every await of a root task's coroutines but a Lazy's, which runs on the
// same thread, is a NotedAwaiter), which leaves it first, and a task ends inside its run,
// on the thread that runs it, which leaves it before the record goes. So the stall
// signal's handler, on the same thread, may read the record (or promise) it names.
//
// While the run is a poll of a task under a TaskMonitor (monitored_task.h), the word
// names it marked (kMonitoredRun set): a wait it publishes then takes the cold path that
// ends the poll (publishWaitAndLeaveRun, monitored_task.h), and every other task's skips the
// monitor's check.
inline constexpr std::uintptr_t kMonitoredRun = 1;

// In a task's first run (it has not waited yet) the word names the task by its root coroutine's
// promise (a LazyPromiseBase*, whose rootRecord() is the task's record), tagged kFirstRun: where
// the task is started, its record's root is not stored (the first wait finds it), and the word
// it starts with is one store. The tag also makes the task's first wait take
// publishWaitAndLeaveRun's cold path, the one that lists the task (monitored_task.h), so that
// the common path publishes a wait with a single store. Marked kMonitoredRun too while the first
// run is a monitored poll.
inline constexpr std::uintptr_t kFirstRun = 2;
inline constexpr std::uintptr_t kRunTags = kMonitoredRun | kFirstRun;

// Read by the stall signal's handler on the same thread: an atomic, relaxed (a signal
// handler on the writing thread sees its stores in program order). A TaskRecord* or a
// tagged promise, marked or not, as an integer.
WEFT_FIXED_TLS inline constinit thread_local std::atomic<std::uintptr_t> tRunningRoot
    WEFT_TLS_SYMBOL("weft_detail_running_root"){0};

// The calling thread's word. The run is entered and left in a coroutine's body, which
// can continue on another thread after a co_await: the address is computed afresh at
// each call, as localRegistryCursor()'s is (registry_slot.h).
WEFT_THREAD_LOCAL_ACCESSOR(std::atomic<std::uintptr_t>, localRunningRoot, tRunningRoot,
                           "weft_detail_running_root")

// The calling thread's word, loaded and stored. On x86-64 (with WEFT_INLINE_TLS_ADDRESS)
// each access is one instruction addressed from the thread pointer (`%fs`) plus the
// word's initial-exec TLS offset, the same on every thread (so an asm that is not
// volatile loads it, which the compiler may keep across a co_await: the access adds the
// thread pointer of the thread that makes it): an instruction fewer than through
// localRunningRoot(), on the path of every published wait. Volatile asm statements, kept
// in their order; relaxed, as above: only this thread and its signal handler read the
// word.
#if WEFT_INLINE_TLS_ADDRESS && defined(__x86_64__)
[[gnu::always_inline]] inline std::uintptr_t runningRootOffset() noexcept {
  std::uintptr_t offset;
  asm("movq weft_detail_running_root@gottpoff(%%rip), %0" : "=r"(offset));
  return offset;
}
[[gnu::always_inline]] inline std::uintptr_t loadRunningRoot() noexcept {
  std::uintptr_t word;
  asm volatile("movq %%fs:(%1), %0" : "=r"(word) : "r"(runningRootOffset()));
  return word;
}
// The "memory" clobber keeps the store where the program puts it among the other
// memory accesses and calls: a record's root stored before the word names it (the
// signal's handler reads it), the word cleared before the wait that ends the run can let
// another thread end the task and free the record.
[[gnu::always_inline]] inline void storeRunningRoot(std::uintptr_t word) noexcept {
  asm volatile("movq %1, %%fs:(%0)" : : "r"(runningRootOffset()), "re"(word) : "memory");
}
#else
[[gnu::always_inline]] inline std::uintptr_t loadRunningRoot() noexcept {
  return localRunningRoot().load(std::memory_order_relaxed);
}
[[gnu::always_inline]] inline void storeRunningRoot(std::uintptr_t word) noexcept {
  localRunningRoot().store(word, std::memory_order_relaxed);
}
#endif

// The task of `record` runs on this thread from here (`record` marked kMonitoredRun when
// the run is a monitored poll). noexcept: a store.
[[gnu::always_inline]] inline void enterRootRun(TaskRecord* record) noexcept {
  storeRunningRoot(reinterpret_cast<std::uintptr_t>(record));
}
// The first run of the task whose root coroutine's promise is `root` starts here (the
// task's start: task_registry.h). noexcept: a store.
[[gnu::always_inline]] inline void enterFirstRun(const void* root) noexcept {
  storeRunningRoot(reinterpret_cast<std::uintptr_t>(root) | kFirstRun);
}
// The task whose run this thread is in ends here (a root task ends inside its run, on the
// thread that runs it): the word is cleared without a test, since it names that task
// (marked or not) or nothing (a run nested in this one has ended it: see above; a run
// that starts inside this one ends, by a wait or its own end, before control comes back
// to this one). noexcept: a store.
[[gnu::always_inline]] inline void endRootRun() noexcept { storeRunningRoot(0); }

}  // namespace weft::detail
