#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "weft/executors/stall_task_hook.h"

namespace weft::detail {

// Taking the native backtrace of a stalled ThreadPool worker (executors/detail/
// stall_watchdog.cc) from another thread: the watchdog asks for it in the worker's
// StallCapture, sends the worker a signal, and waits, for a bounded time, for the
// handler (which runs on the worker, interrupting the item that stalls it) to write the
// return addresses there.
//
// The handler is async-signal-safe: it reads a thread_local pointer set when the thread
// bound its capture, moves the capture's state with a compare-exchange, calls glibc's
// backtrace() (warmed up when the handler is installed, so that its one-time loading of
// the unwinder, which allocates, is done by then), and wakes the watchdog with a futex
// system call. It saves and restores errno.
//
// States (`state`, a futex word): kIdle -> kRequested (the watchdog, before the signal)
// -> kCapturing (the handler, by compare-exchange: only a requested capture is written)
// -> kCaptured (the handler, when the frames are in) -> kIdle (the watchdog, once it has
// copied them). A watchdog that stops waiting takes kRequested back to kIdle by
// compare-exchange; if the handler got there first, it waits for kCaptured a little
// longer, and a handler that ends later leaves kCaptured, which the next request clears.
struct alignas(64) StallCapture {
  static constexpr std::uint32_t kIdle = 0;
  static constexpr std::uint32_t kRequested = 1;
  static constexpr std::uint32_t kCapturing = 2;
  static constexpr std::uint32_t kCaptured = 3;
  static constexpr int kMaxFrames = 64;

  std::atomic<std::uint32_t> state{kIdle};
  // The bits of the WorkItem the worker started last, stored by the worker before it
  // runs each item (relaxed: only this thread's signal handler reads it). What the stall
  // task hook (executors/stall_task_hook.h) is given.
  std::atomic<std::uintptr_t> item{0};
  // Written by the handler between kCapturing and kCaptured; read by the watchdog after
  // it saw kCaptured (acquire).
  int count = 0;
  void* frames[kMaxFrames] = {};
  // The instruction the signal interrupted (0 where the platform's context is not read).
  std::uintptr_t pc = 0;
  // What the stall task hook's capture wrote (zero without a hook), read with the frames.
  std::uintptr_t task[StallTaskHook::kWords] = {};
};

// Makes `capture` the calling thread's (nullptr: none): the handler writes there.
// noexcept: a thread_local store.
void bindStallCapture(StallCapture* capture) noexcept;

// Installs the capture handler for `signal` (once per signal per process; SA_RESTART, so
// that most system calls the worker is blocked in resume after it). Returns an empty
// string when it is installed, else why not: the signal is not one a handler can be
// installed for, or the program has its own handler for it (weft never replaces one).
// Errors: none thrown (std::bad_alloc aside). Thread safety: any thread.
std::string installStallSignal(int signal);

// ThreadPoolOptions::stallSignal made ready: the signal to use, installed (0 in
// `requested` is defaultStallSignal()), or -1 with the reason in `whyNot` (a negative
// request: none; or installStallSignal's answer). Errors: std::bad_alloc.
int prepareStallSignal(int requested, std::string& whyNot);

// Unblocks `signal` in the calling thread (a worker started by a thread that blocked
// every signal, as programs that take signals on one thread of their own do, inherits
// that mask: the stall signal, sent to this thread alone, would wait forever).
// noexcept: pthread_sigmask, whose failure leaves the mask as it was.
void unblockStallSignal(int signal) noexcept;

// The default stall signal: SIGRTMAX - 3 (a real-time signal: it is queued, never merged
// with one the program sends, and its default action, should the handler be missing,
// would end the process, which is why installStallSignal checks first).
int defaultStallSignal() noexcept;

// Takes the backtrace of `thread`, whose capture is `capture`, by sending it `signal`
// (installed), waiting at most `limit` for the handler. True with capture.count frames in
// capture.frames (left in kCaptured: call releaseStallCapture once they are copied);
// false with the reason in `whyNot` (a static string). Precondition: `thread` is alive for the call
// to pthread_sigqueue (the caller holds the lock that the thread takes before it exits). Split in
// two (request, then wait) so that the caller can drop that lock while waiting.
bool requestStallCapture(pthread_t thread, int signal, StallCapture& capture,
                         const char*& whyNot) noexcept;
bool awaitStallCapture(StallCapture& capture, std::chrono::milliseconds limit,
                       const char*& whyNot) noexcept;
// Back to kIdle after a capture was read. noexcept: a store.
void releaseStallCapture(StallCapture& capture) noexcept;

}  // namespace weft::detail
