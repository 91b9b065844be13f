#pragma once

#include <atomic>

#include "weft/coro/detail/config.h"
#include "weft/coro/detail/registry_slot.h"

namespace weft::detail {

// The root task whose coroutines the calling thread runs now, for ThreadPool's stall
// reports (executors/stall_task_hook.h; the hook is in coro/task_dump.cc): the registry
// slot (registry_slot.h) of the task, or null. Only with WEFT_TASK_TRACKING.
//
// A task's run on a thread starts where its innermost coroutine resumes from a published
// wait (NotedAwaiter::await_resume: enterRootRun) and ends where a coroutine of it
// publishes its next wait or the task ends (leaveRootRun): a store at each end, on the
// paths that publish and withdraw, nothing elsewhere. Not seen: a root task's first run up
// to its first wait (the stall hook finds that one from the pool item that started it),
// and a task resumed inside another's run (an await that resumes a waiter inline): the
// word then names the outer task until the inner one waits, then nothing.
//
// Read by the stall signal's handler on the same thread: an atomic, relaxed (a signal
// handler on the writing thread sees its stores in program order).
#if WEFT_INLINE_TLS_ADDRESS
[[gnu::used,
  gnu::tls_model("initial-exec")]] inline constinit thread_local std::atomic<RegistrySlot*>
    tRunningRoot asm("weft_detail_running_root"){nullptr};
#else
inline constinit thread_local std::atomic<RegistrySlot*> tRunningRoot{nullptr};
#endif

// The calling thread's word. The run is entered and left in a coroutine's body, which
// can continue on another thread after a co_await: the address is computed afresh at
// each call, as localRegistryCursor() does (registry_slot.h).
#if WEFT_INLINE_TLS_ADDRESS
inline std::atomic<RegistrySlot*>& localRunningRoot() noexcept {
  std::atomic<RegistrySlot*>* word;
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
WEFT_OPAQUE_CALL inline std::atomic<RegistrySlot*>& localRunningRoot() noexcept {
  return tRunningRoot;
}
#endif

// The task of `slot` runs on this thread from here. noexcept: a store.
[[gnu::always_inline]] inline void enterRootRun(RegistrySlot* slot) noexcept {
  // Relaxed: only this thread (and its signal handler) reads the word.
  localRunningRoot().store(slot, std::memory_order_relaxed);
}
// The task of `slot` stops running on this thread (it waits, or ends): the word is
// cleared if it names that task (else it names a task whose run this one's was inside,
// or nothing). noexcept: a load, a compare, a store.
[[gnu::always_inline]] inline void leaveRootRun(RegistrySlot* slot) noexcept {
  std::atomic<RegistrySlot*>& word = localRunningRoot();
  // Relaxed: as above.
  if (word.load(std::memory_order_relaxed) == slot) word.store(nullptr, std::memory_order_relaxed);
}

}  // namespace weft::detail
