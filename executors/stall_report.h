#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace weft {

// StallReport: what ThreadPool's stall detector says when a worker has been running one
// item for longer than ThreadPoolOptions::stallThreshold (a coroutine that computes or
// blocks without suspending, a callable that waits on a lock), or when every worker of
// the pool is in that state at once. ThreadPoolOptions::onStall receives it; the default
// prints toString() to stderr.
//
// A worker's stall is reported once, when it is first seen (for an item not preempted,
// between one and a half and two thresholds after it started; time its thread waits for
// a CPU does not count), and not again until the worker has moved on (run
// another item or I/O completion, or gone idle). The whole pool's stall is reported once
// too, when the last of its workers is seen stalled, and again only after one of them has
// moved on.
//
// Thread safety: a value.
struct StallReport {
  // The pool's name (ThreadPoolOptions::name).
  std::string pool;
  // False: one worker is stalled (the fields below describe it). True: every worker of
  // the pool is stalled (`stalledWorkers` lists them; the fields below describe the one
  // stalled for the shortest time, the last to stall).
  bool wholePool = false;
  std::vector<std::size_t> stalledWorkers;

  // The worker, by index (0 .. threads-1), and its thread's name ("<pool>-<index>", cut
  // to 15 characters as Linux names threads).
  std::size_t worker = 0;
  std::string thread;
  // How long the worker has been stalled in the item, at least: the wall time since the
  // watchdog's first look that found it there without progress (the item may have
  // started up to a threshold earlier), less the time its thread waited for a CPU
  // meanwhile (its run-queue wait, where the kernel shows it: docs/debugging.md, "Stall
  // detector"). Time blocked in a call counts.
  std::chrono::milliseconds stalledFor{0};
  // The worker's progress count (items run, I/O completions run) it is stuck at.
  std::uint64_t progress = 0;

  // The task the worker runs, when it can be named (with task tracking, the default in
  // every build type: WEFT_TASK_TRACKING), read when the native backtrace was taken: the
  // root task whose coroutines run on the worker ("task 7 (spawn())", as task dumps name
  // it), and its async backtrace as far as it can be known safely while the task runs:
  // the task's root coroutine, then its origin (innermost first, as in
  // AsyncBacktrace::functionNames(): {"handle(Request)", "spawn()"}). The coroutines
  // between the root and the one that stalls (the Lazys it awaits) are not known: a
  // running task records none of them, and their frames may be freed while the watchdog
  // reads; the native backtrace names the innermost one (the one that runs).
  // Empty `task`, with the reason in `asyncBacktraceMissing`, when no task is named:
  // tracking is off, the worker runs something other than a root task (a callable, a
  // collect's branch, a fiber, a Task awaited by another coroutine: syncAwait(lazy,
  // executor) runs one), the native backtrace (taken with it) is missing, or the
  // task moved on before the watchdog read it.
  std::string task;
  std::vector<std::string> asyncFunctions;
  std::string asyncBacktraceMissing;

  // The worker thread's native stack when the watchdog looked (innermost first): return
  // addresses and their function names (an unknown one is "??"). Empty, with the reason
  // in `nativeBacktraceMissing`, when it could not be taken: the signal is off
  // (ThreadPoolOptions::stallSignal < 0) or taken by another handler, or the thread did
  // not run the handler in time (under ThreadSanitizer, which delays signals until the
  // thread calls into the C library, for instance).
  std::vector<const void*> nativeFrames;
  std::vector<std::string> nativeFunctions;
  std::string nativeBacktraceMissing;

  // The report as text, one "weft: ..." line then the details, indented; ends with a new
  // line. Errors: std::bad_alloc.
  //
  // Example:
  //   weft: ThreadPool 'api': worker 1 (thread api-1) has been running one item for 312 ms
  //     task 7 (spawn()), async backtrace (root coroutine, then origin):
  //       #0 serve(Connection)
  //       #1 spawn()
  //     native backtrace (innermost first):
  //       #0 parse(std::string_view)
  //       #1 handle(Request)
  std::string toString() const;
};

}  // namespace weft
