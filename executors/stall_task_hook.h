#pragma once

#include <cstdint>

#include "weft/executors/stall_report.h"

namespace weft {

// StallTaskHook: how ThreadPool's stall detector (executors/stall_report.h) learns which
// task a stalled worker runs, from a layer above the executors. weft::coro sets it at
// start-up (coro/task_dump.cc) to name the root task of the coroutine that stalls, with
// its async backtrace; an executor knows only items and coroutine handles.
//
// The detector uses the hook in two steps:
//  - `capture` runs in the stall signal's handler, on the stalled worker, which it
//    interrupts at any instruction: it must be async-signal-safe (loads and stores of
//    memory that is never freed, no lock, no allocation). `item` is the bits of the
//    WorkItem the worker started last (executors/work_item.h; 0 before its first). It
//    fills `words` (zeroed before the call) with whatever `describe` needs.
//  - `describe` runs on the watchdog thread, after the handler is done: it fills the
//    report's task fields (StallReport::task, asyncFunctions, asyncBacktraceMissing)
//    from `words`. It may allocate and take locks; it must not wait for the stalled
//    worker (which may never return), and must read what the words point to only where
//    it knows it is alive.
//
// Errors: `describe` may throw std::bad_alloc; the report then goes without the task.
// Thread safety: setStallTaskHook from any thread, any time; the hook must live for the
// rest of the process (a static).
struct StallTaskHook {
  static constexpr int kWords = 4;
  void (*capture)(std::uintptr_t item, std::uintptr_t (&words)[kWords]) noexcept;
  void (*describe)(const std::uintptr_t (&words)[kWords], StallReport& report);
};

// Makes `hook` the one stall reports use (nullptr: none; the reports then say that no
// task could be named). noexcept: an atomic store.
void setStallTaskHook(const StallTaskHook* hook) noexcept;

namespace detail {
// The hook set, or nullptr. Async-signal-safe: an atomic load. noexcept.
const StallTaskHook* stallTaskHook() noexcept;
}  // namespace detail

}  // namespace weft
