#pragma once

#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/io/detail/pool_shutdown_guard.h"

namespace weft {

namespace detail {

// One coroutine (or fiber) waiting in weft::signal(): linked in the process-wide signal
// dispatcher (io/signal.cc) while it waits.
struct SignalWaiter {
  std::uint64_t mask = 0;  // bit n: signal n
  std::coroutine_handle<> handle;
  Executor* executor = nullptr;
  PoolShutdownGuard* guard = nullptr;  // the awaiter's: resumptions go through it
  // Guarded by the dispatcher's mutex:
  int delivered = 0;       // the signal, once delivered
  bool linked = false;     // in the dispatcher's list
  bool cancelled = false;  // its wait was cancelled (before or while linked)
  bool shutDown = false;   // its ThreadPool's shutdown took it out (or kept it from linking)
  SignalWaiter* next = nullptr;
  SignalWaiter* prev = nullptr;
};

// The dispatcher's side (io/signal.cc). Each is thread-safe.
// Installs weft's handler for every signal in `mask` (once per signal, for the rest of
// the process) and starts the dispatcher thread. Errors: std::system_error.
void installSignalHandlers(std::uint64_t mask);
// A signal of `mask` delivered while nobody waited for it (taken: it is no longer
// pending), else 0.
int takePendingSignal(std::uint64_t mask) noexcept;
// Links `waiter` and returns 0, unless a signal of its mask is pending (returns it,
// taken, and sets `delivered`), its wait was cancelled already (returns -1) or its
// ThreadPool's shutdown came first (returns -2); then links nothing.
int linkSignalWaiter(SignalWaiter* waiter) noexcept;
// Unlinks `waiter` if it is still linked (true); false if it is not (a signal was
// delivered to it and its resumption is under way, or it was never linked).
bool unlinkSignalWaiter(SignalWaiter* waiter) noexcept;
// Cancels `waiter`'s wait: unlinks it if linked (true: the caller resumes it); marks it
// cancelled if not linked yet, so that it never is (false). False if a signal or its
// pool's shutdown came first.
bool cancelSignalWaiter(SignalWaiter* waiter) noexcept;
// For the shutdown guard of the ThreadPool the waiter resumes on: unlinks a linked
// `waiter` (kTakenBack: the caller resumes it), keeps one not linked yet from linking
// (kBarred), or says that a signal or the cancellation took it (kClaimed).
PoolShutdownGuard::Claim shutDownSignalWaiter(SignalWaiter* waiter) noexcept;
// The number of waiters linked now (for tests).
std::size_t linkedSignalWaiterCount() noexcept;
// Resumes a waiter taken out of the list (on its executor, through its guard; inline
// without one).
void resumeSignalWaiter(SignalWaiter* waiter) noexcept;
// `signal`'s bit in a mask (bit n: signal n). Errors: std::invalid_argument naming the
// number for one that no handler can catch: outside 1..63, SIGKILL, SIGSTOP, or one the
// C library keeps for itself (glibc: 32 and 33, below SIGRTMIN).
std::uint64_t signalBit(int signal);

// The awaiter of weft::signal(). A signal (the dispatcher thread), the cancellation and,
// when the coroutine resumes on a ThreadPool, the pool's shutdown (its PoolShutdownGuard)
// may end the wait; the dispatcher's mutex decides: whoever unlinks the waiter resumes
// it, the first two through the guard.
class SignalWaitAwaiter final : private PoolShutdownGuard::Owner {
 public:
  SignalWaitAwaiter(std::uint64_t mask, Executor* executor, const CancellationToken* token) noexcept
      : token_(token) {
    waiter_.mask = mask;
    waiter_.executor = executor;
  }
  SignalWaitAwaiter(const SignalWaitAwaiter&) = delete;
  SignalWaitAwaiter& operator=(const SignalWaitAwaiter&) = delete;
  ~SignalWaitAwaiter();

  bool await_ready() noexcept {
    waiter_.delivered = takePendingSignal(waiter_.mask);
    return waiter_.delivered != 0;
  }
  bool await_suspend(std::coroutine_handle<> awaiting);
  int await_resume();

 private:
  // PoolShutdownGuard::Owner, on a worker of the waiter's pool during its shutdown.
  PoolShutdownGuard::Claim takeBackForShutdown() noexcept override;
  void resumeShutDown() noexcept override;

  SignalWaiter waiter_;
  const CancellationToken* token_;
  std::optional<CancellationCallback> onCancel_;
  bool suspended_ = false;  // between a successful link and the resumption
  PoolShutdownGuard guard_;
};

struct SignalWait {
  std::uint64_t mask;
  SignalWaitAwaiter coAwait(Executor* executor, const CancellationToken& token) const noexcept {
    return SignalWaitAwaiter(mask, executor, &token);
  }
  SignalWaitAwaiter operator co_await() const noexcept {
    return SignalWaitAwaiter(mask, nullptr, nullptr);
  }
};

}  // namespace detail

// SignalWaitOperation: what signal() returns, an awaitable that resumes with the signal's
// number (below).
using SignalWaitOperation = detail::SignalWait;

// `co_await weft::signal(SIGTERM, SIGINT)`: waits until one of the given signals is
// delivered to the process and returns its number: the one line a service needs to start
// a graceful shutdown. From a fiber: `weft::await(weft::signal(SIGTERM))`.
//
// Semantics: the first call for a signal installs weft's handler for it (sigaction), for
// the rest of the process; the handler only writes the signal's number to a pipe, which a
// process-wide dispatcher thread reads. Every coroutine waiting for that signal then
// resumes (on its executor) with it; a signal that arrives while nobody waits is kept
// (once per signal) for the next wait. So it works whenever it is called, on any thread,
// before or after the pool's threads exist; SignalSet (io/signal_set.h) is the same
// mechanism held in an object. Until the first signal() for a signal, that signal
// keeps its previous disposition (SIGTERM's default ends the process): call signal()
// early, e.g. `auto stop = weft::signal(SIGTERM);` in main, and co_await it later.
// When the coroutine resumes on a ThreadPool that shuts down (or is destroyed) while it
// waits, the wait ends with ExecutorShutDown on one of the pool's workers as the pool
// drains, as a sleep does (no signal is taken; one that comes later is kept for the next
// wait); awaited on a pool whose shutdown has begun, it throws that at once.
//
// Preconditions: none (a bad signal number is an error, below).
// Errors: std::invalid_argument, thrown by signal() itself, naming the number of a signal
// that cannot be caught: outside 1..63, SIGKILL, SIGSTOP, or one the C library keeps for
// its own use (glibc: 32 and 33, below SIGRTMIN); no handler is installed then, not even
// for the other signals of the call. std::system_error if the handler or the dispatcher
// cannot be installed;
// OperationCancelled when the awaiting coroutine is cancelled while it waits (no signal
// is taken then); ExecutorShutDown (above).
// Thread safety: any number of coroutines may wait at once, for any signals.
//
// Example:
//   int which = co_await weft::signal(SIGTERM, SIGINT);
//   std::printf("stopping on signal %d\n", which);
template <class... Signals>
  requires(sizeof...(Signals) > 0 && (std::same_as<Signals, int> && ...))
SignalWaitOperation signal(Signals... signals) {
  std::uint64_t mask = 0;
  for (int s : {signals...}) mask |= detail::signalBit(s);
  detail::installSignalHandlers(mask);
  return detail::SignalWait{mask};
}

}  // namespace weft
