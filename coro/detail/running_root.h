#pragma once

#include <atomic>

#include "weft/coro/detail/config.h"
#include "weft/coro/detail/registry_slot.h"

namespace weft::detail {

// The root task whose coroutines the calling thread runs now, for ThreadPool's stall
// reports (executors/stall_task_hook.h; the hook is in coro/task_dump.cc): the task's
// record (registry_slot.h, in its completion sink), or null. Only with
// WEFT_TASK_TRACKING.
//
// A task's run on a thread starts where the task is started on that thread (runRootTask,
// or the job of scheduleRootTask: task_registry.h) or where its innermost coroutine
// resumes from a published wait (NotedAwaiter::await_resume), both enterRootRun; it ends
// where a coroutine of it publishes its next wait or the task ends on this thread (the task's
// completion sink, unregisterRootTask or SyncWaitSink::complete), both leaveRootRun. A
// store at each end, nothing elsewhere. Not seen: a task resumed inside another's run (an
// await that resumes a waiter inline): the word then names the inner task until it waits
// or ends, then nothing.
//
// The word never names a freed record: a run moves to another thread only through a
// published wait (every await of a root task's coroutines but a Lazy's, which runs on the
// same thread, is a NotedAwaiter), which leaves it first, and a task ends inside its run,
// on the thread that runs it, which leaves it before the record goes. So the stall
// signal's handler, on the same thread, may read the record it names.
//
// Read by the stall signal's handler on the same thread: an atomic, relaxed (a signal
// handler on the writing thread sees its stores in program order).
#if WEFT_INLINE_TLS_ADDRESS
[[gnu::used,
  gnu::tls_model("initial-exec")]] inline constinit thread_local std::atomic<TaskRecord*>
    tRunningRoot asm("weft_detail_running_root"){nullptr};
#else
inline constinit thread_local std::atomic<TaskRecord*> tRunningRoot{nullptr};
#endif

// The calling thread's word. The run is entered and left in a coroutine's body, which
// can continue on another thread after a co_await: the address is computed afresh at
// each call, as localRegistryCursor() does (registry_slot.h).
#if WEFT_INLINE_TLS_ADDRESS
inline std::atomic<TaskRecord*>& localRunningRoot() noexcept {
  std::atomic<TaskRecord*>* word;
#if defined(__x86_64__)
  asm volatile(
      "movq %%fs:0, %0\n\t"
      "addq weft_detail_running_root@gottpoff(%%rip), %0"
      : "=r"(word));
#else  // aarch64
  void* offset;
  asm volatile(
      "mrs %0, tpidr_el0\n\t"
      "adrp %1, :gottprel:weft_detail_running_root\n\t"
      "ldr %1, [%1, #:gottprel_lo12:weft_detail_running_root]\n\t"
      "add %0, %0, %1"
      : "=r"(word), "=r"(offset));
#endif
  return *word;
}
#else
WEFT_OPAQUE_CALL inline std::atomic<TaskRecord*>& localRunningRoot() noexcept {
  return tRunningRoot;
}
#endif

// The task of `record` runs on this thread from here. noexcept: a store.
[[gnu::always_inline]] inline void enterRootRun(TaskRecord* record) noexcept {
  // Relaxed: only this thread (and its signal handler) reads the word.
  localRunningRoot().store(record, std::memory_order_relaxed);
}
// The task of `record` stops running on this thread (it waits, or ends): the word is
// cleared if it names that task (else it names a task whose run this one's was inside,
// or nothing). noexcept: a load, a compare, a store.
[[gnu::always_inline]] inline void leaveRootRun(TaskRecord* record) noexcept {
  std::atomic<TaskRecord*>& word = localRunningRoot();
  // Relaxed: as above.
  if (word.load(std::memory_order_relaxed) == record) word.store(nullptr, std::memory_order_relaxed);
}

}  // namespace weft::detail
