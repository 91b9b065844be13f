#pragma once

#include <signal.h>

#include <initializer_list>

#include "weft/coro/lazy.h"

namespace weft {

// SignalSet: POSIX signals as an awaitable: `co_await signals.wait()` returns the number
// of the next of its signals delivered to the process (SIGINT, SIGTERM...), through a
// signalfd read on the calling thread's event loop.
//
// Semantics: the constructor blocks the signals in the calling thread, so that they stay
// pending for the signalfd instead of running their default action. Threads started
// afterwards inherit that mask: construct the SignalSet in main() before the ThreadPool.
// The destructor closes the signalfd and, on the constructing thread, restores its mask.
//
// Preconditions: no other thread (started before the SignalSet) leaves the signals
// unblocked, or the kernel may deliver them there instead.
//
// Errors: the constructor throws std::invalid_argument for a number that is not a
// signal and for SIGKILL or SIGSTOP (which cannot be caught: a signalfd would never see
// them), std::system_error when the kernel refuses (EMFILE); wait() throws as the I/O awaitables do (OperationCancelled, ExecutorShutDown,
// std::logic_error on a thread without an event loop).
//
// Thread safety: one wait() at a time.
//
// Example:
//   weft::SignalSet signals{SIGINT, SIGTERM};  // before the pool
//   weft::ThreadPool pool(1);
//   int signal = weft::syncAwait(signals.wait().via(&pool));
class SignalSet {
 public:
  SignalSet(std::initializer_list<int> signals);
  ~SignalSet();
  SignalSet(const SignalSet&) = delete;
  SignalSet& operator=(const SignalSet&) = delete;

  // The next signal of the set (its number).
  Lazy<int> wait();

 private:
  int fd_ = -1;
  sigset_t previousMask_;
  pthread_t owner_;
};

}  // namespace weft
