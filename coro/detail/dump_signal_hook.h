#pragma once

namespace weft::detail {

// WEFT_DUMP_SIGNAL at start-up (docs/debugging.md): the first call reads the variable
// and, when it is set, calls installDumpOnSignal() (coro/task_dump.h) with the signal it
// names (a number, or one of QUIT, USR1, USR2, HUP, INT, TERM, PWR, URG, with or without
// SIG). A value that names no signal that can be caught, or a failure to install, is
// reported on stderr ("weft: WEFT_DUMP_SIGNAL=... ...") and the program goes on without
// the dump.
// Returns whether the variable's signal now dumps; later calls return the first one's
// answer. Defined in coro/task_dump.cc.
// Errors: none thrown (noexcept: it runs during static initialization, where an
// exception would terminate the program). Thread safety: any thread.
bool dumpSignalFromEnvironment() noexcept;

// Why the call is made from a header. weft::coro is a static library, and a linker takes
// an object file out of a static library only when the program refers to something in
// it. A start-up initializer on its own in coro/task_dump.cc would be left out of every
// program that never names the task dump (a Release build's Lazys do not), and
// WEFT_DUMP_SIGNAL=QUIT would leave SIGQUIT to end the process. Every translation unit
// that includes this header (through coro/detail/lazy_promise.h: every Lazy, Task,
// syncAwait, spawn, fiber and I/O operation) gets this variable, whose dynamic
// initializer calls the function: every program that uses weft refers to
// coro/task_dump.o, which the linker then keeps (--gc-sections keeps what runs at
// start-up; --as-needed keeps a library that is referred to), and runs the hook once,
// before main(). The variable is inline: one per program, initialized once.
inline const bool gDumpSignalFromEnvironment = dumpSignalFromEnvironment();

// The same way, and for the same reason: makes ThreadPool's stall reports name the task a
// stalled worker runs (setStallTaskHook, executors/stall_task_hook.h; the hook is in
// coro/task_dump.cc). Returns true. noexcept: a store.
bool installStallTaskHook() noexcept;
inline const bool gStallTaskHookInstalled = installStallTaskHook();

}  // namespace weft::detail
