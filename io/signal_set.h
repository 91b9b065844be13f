#pragma once

#include <csignal>  // SIGINT, SIGTERM...: what a SignalSet is made of
#include <cstdint>
#include <initializer_list>

#include "weft/coro/lazy.h"

namespace weft {

// SignalSet: a named set of POSIX signals to wait for: `co_await signals.wait()` returns
// the number of the next of its signals delivered to the process (SIGINT, SIGTERM...).
// The same mechanism as weft::signal() (io/signal.h), held in an object: construct it early
// in main() and pass it to whatever waits.
//
// Semantics: the constructor installs weft's handler for each signal, as the first
// weft::signal() for it does, for the rest of the process (the destructor removes nothing:
// a signal that comes after it is kept for a later wait). Until the SignalSet (or a
// weft::signal()) exists, a signal keeps its previous disposition (SIGTERM's default ends
// the process). It may be made before or after the pool's threads start; no signal mask
// is changed. A signal delivered while nobody waits is kept (once per signal) for the next
// wait; a signal resumes every wait for it, in every SignalSet and weft::signal() wait.
// wait() resumes on the awaiting coroutine's executor; it ends with OperationCancelled when
// the coroutine is cancelled, and with ExecutorShutDown when that executor is a ThreadPool
// that shuts down while it waits (no signal is taken then).
//
// Errors: the constructor throws std::invalid_argument naming a signal no handler can
// catch (outside 1..63, SIGKILL, SIGSTOP, or one the C library keeps below SIGRTMIN),
// installing nothing then; std::system_error if the handler or the dispatcher thread
// cannot be installed.
//
// Thread safety: wait() may be called by any number of coroutines at once, on any thread.
//
// Example:
//   weft::SignalSet signals{SIGINT, SIGTERM};  // early: Ctrl-C no longer ends the process
//   weft::ThreadPool pool(1);
//   int signal = weft::syncAwait(signals.wait().via(&pool));
class SignalSet {
 public:
  SignalSet(std::initializer_list<int> signals);
  SignalSet(const SignalSet&) = delete;
  SignalSet& operator=(const SignalSet&) = delete;

  // The next signal of the set (its number).
  Lazy<int> wait() const;

 private:
  std::uint64_t mask_ = 0;  // bit n: signal n
};

}  // namespace weft
