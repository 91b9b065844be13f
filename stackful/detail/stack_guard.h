#pragma once

// Stack-overflow diagnostics for fibers: a process-wide SIGSEGV handler, running on a
// per-thread alternate signal stack (sigaltstack), that recognises a fault in the guard
// page of the running fiber's stack, prints
//   weft: stack overflow in fiber <name or id> (stack <N> bytes)
// and aborts. Every other SIGSEGV goes to the handler that was installed before weft's
// (or, if that was the default, gets the default action: the process dies of SIGSEGV).

#include <cstddef>
#include <cstdint>

namespace weft::detail {

// What the handler needs to know about the fiber running on a thread.
struct RunningStackInfo {
  const void* guardBegin = nullptr;   // lowest address of the guard
  const void* stackBottom = nullptr;  // lowest usable address (the guard ends here)
  std::size_t stackSize = 0;          // usable bytes, as printed
  std::uint64_t id = 0;               // printed when there is no name
  const char* name = nullptr;         // nullptr: unnamed
};

// Describes the fiber running on the calling thread; false on a thread's own stack.
// Called from the signal handler: reads a constinit thread_local and the fiber's own
// fields only (async-signal-safe). Defined in stack_guard.cc.
bool describeRunningFiber(RunningStackInfo& info) noexcept;

// Installs the SIGSEGV handler, once per process (later calls return at once).
// Thread-safe. Errors: none; if sigaction fails, overflows are plain SIGSEGVs.
void installStackOverflowHandler() noexcept;

// Gives the calling thread an alternate signal stack if it has none (the handler cannot
// run on the stack that just overflowed); the stack is freed when the thread exits. Why
// noexcept: on failure the thread simply has no alternate stack, and an overflow there
// dies of a plain SIGSEGV.
void installSignalStack() noexcept;

// True once installSignalStack() ran on this thread. constinit: a plain TLS flag.
inline constinit thread_local bool tSignalStackChecked = false;

// installSignalStack() once per thread: one thread-local load on every later call, so it
// is called before every switch into a fiber (a fiber may be resumed on a thread that
// never started one).
inline void ensureSignalStack() noexcept {
  if (!tSignalStackChecked) [[unlikely]]
    installSignalStack();
}

// Writes the overflow message for `info` to stderr with write(2) (async-signal-safe).
// Exposed for tests of the formatting.
void writeOverflowMessage(const RunningStackInfo& info) noexcept;

}  // namespace weft::detail
