#include "weft/io/signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"

namespace weft::detail {

namespace {

// The process-wide state behind weft::signal(). Created on first use and never destroyed
// (its thread runs until the process ends; static destruction would race with it).
class SignalDispatcher {
 public:
  static SignalDispatcher& instance() {
    static SignalDispatcher* dispatcher = new SignalDispatcher();
    return *dispatcher;
  }

  void install(std::uint64_t mask) {
    std::lock_guard guard(installMutex_);
    for (int s = 1; s < 64; ++s) {
      const std::uint64_t bit = std::uint64_t{1} << s;
      if ((mask & bit) == 0 || (installed_ & bit) != 0) continue;
      struct sigaction action {};
      action.sa_handler = &SignalDispatcher::onSignal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;
      if (::sigaction(s, &action, nullptr) != 0) {
        throw std::system_error(errno, std::system_category(),
                                "weft: signal(): sigaction for signal " + std::to_string(s));
      }
      installed_ |= bit;
    }
  }

  int takePending(std::uint64_t mask) noexcept {
    std::lock_guard guard(mutex_);
    return takePendingLocked(mask);
  }

  int link(SignalWaiter* waiter) noexcept {
    std::lock_guard guard(mutex_);
    if (waiter->cancelled) return -1;
    if (waiter->shutDown) return -2;
    if (const int s = takePendingLocked(waiter->mask)) {
      waiter->delivered = s;
      return s;
    }
    waiter->linked = true;
    waiter->prev = tail_;
    waiter->next = nullptr;
    (tail_ != nullptr ? tail_->next : head_) = waiter;
    tail_ = waiter;
    return 0;
  }

  bool unlink(SignalWaiter* waiter) noexcept {
    std::lock_guard guard(mutex_);
    if (!waiter->linked) return false;
    unlinkLocked(waiter);
    return true;
  }

  std::size_t linkedCount() noexcept {
    std::lock_guard guard(mutex_);
    std::size_t count = 0;
    for (SignalWaiter* w = head_; w != nullptr; w = w->next) ++count;
    return count;
  }

  bool cancel(SignalWaiter* waiter) noexcept {
    std::lock_guard guard(mutex_);
    // A signal (or the pool's shutdown) came first: it wins.
    if (waiter->delivered != 0 || waiter->shutDown) return false;
    waiter->cancelled = true;
    if (!waiter->linked) return false;
    unlinkLocked(waiter);
    return true;
  }

  PoolShutdownGuard::Claim shutDown(SignalWaiter* waiter) noexcept {
    std::lock_guard guard(mutex_);
    if (waiter->linked) {
      unlinkLocked(waiter);
      waiter->shutDown = true;
      return PoolShutdownGuard::Claim::kTakenBack;
    }
    // A signal or the cancellation took it (its resumption is under way, or the awaiter
    // goes on without suspending).
    if (waiter->delivered != 0 || waiter->cancelled) return PoolShutdownGuard::Claim::kClaimed;
    waiter->shutDown = true;  // not linked yet: link() refuses it
    return PoolShutdownGuard::Claim::kBarred;
  }

 private:
  SignalDispatcher() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::system_category(), "weft: signal(): pipe");
    }
    readFd_ = fds[0];
    writeFd_.store(fds[1], std::memory_order_release);
    // A handler never blocks: a full pipe (a storm of signals nobody reads) drops bytes.
    ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
    std::thread([this] { run(); }).detach();
  }

  // Async-signal-safe: an atomic load, write(2), and errno saved around it.
  static void onSignal(int s) {
    const int savedErrno = errno;
    const int fd = instance().writeFd_.load(std::memory_order_acquire);
    const unsigned char byte = static_cast<unsigned char>(s);
    [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);
    errno = savedErrno;
  }

  // The dispatcher thread: each byte is a signal; every waiter for it is resumed, or it
  // is kept pending when nobody waits.
  void run() {
    for (;;) {
      unsigned char byte;
      const ssize_t n = ::read(readFd_, &byte, 1);
      if (n != 1) {
        if (n < 0 && errno == EINTR) continue;
        return;  // the pipe is gone: nothing more will come
      }
      const int s = byte;
      const std::uint64_t bit = std::uint64_t{1} << s;
      SignalWaiter* ready = nullptr;
      {
        std::lock_guard guard(mutex_);
        for (SignalWaiter* w = head_; w != nullptr;) {
          SignalWaiter* next = w->next;
          if ((w->mask & bit) != 0) {
            unlinkLocked(w);
            w->delivered = s;
            w->next = ready;
            ready = w;
          }
          w = next;
        }
        if (ready == nullptr) pending_ |= bit;
      }
      while (ready != nullptr) {
        SignalWaiter* w = ready;
        ready = w->next;
        resumeSignalWaiter(w);
      }
    }
  }

  int takePendingLocked(std::uint64_t mask) noexcept {
    const std::uint64_t hits = pending_ & mask;
    if (hits == 0) return 0;
    const int s = __builtin_ctzll(hits);
    pending_ &= ~(std::uint64_t{1} << s);
    return s;
  }

  void unlinkLocked(SignalWaiter* waiter) noexcept {
    (waiter->prev != nullptr ? waiter->prev->next : head_) = waiter->next;
    (waiter->next != nullptr ? waiter->next->prev : tail_) = waiter->prev;
    waiter->next = waiter->prev = nullptr;
    waiter->linked = false;
  }

  std::mutex installMutex_;
  std::uint64_t installed_ = 0;  // guarded by installMutex_
  int readFd_ = -1;
  std::atomic<int> writeFd_{-1};
  std::mutex mutex_;
  SignalWaiter* head_ = nullptr;  // guarded by mutex_
  SignalWaiter* tail_ = nullptr;  // guarded by mutex_
  std::uint64_t pending_ = 0;     // guarded by mutex_
};

}  // namespace

void installSignalHandlers(std::uint64_t mask) { SignalDispatcher::instance().install(mask); }

int takePendingSignal(std::uint64_t mask) noexcept {
  return SignalDispatcher::instance().takePending(mask);
}

int linkSignalWaiter(SignalWaiter* waiter) noexcept {
  return SignalDispatcher::instance().link(waiter);
}

bool unlinkSignalWaiter(SignalWaiter* waiter) noexcept {
  return SignalDispatcher::instance().unlink(waiter);
}

bool cancelSignalWaiter(SignalWaiter* waiter) noexcept {
  return SignalDispatcher::instance().cancel(waiter);
}

std::size_t linkedSignalWaiterCount() noexcept {
  return SignalDispatcher::instance().linkedCount();
}

PoolShutdownGuard::Claim shutDownSignalWaiter(SignalWaiter* waiter) noexcept {
  return SignalDispatcher::instance().shutDown(waiter);
}

void resumeSignalWaiter(SignalWaiter* waiter) noexcept {
  // Read first: once the guard has scheduled the coroutine, the waiter may be gone.
  Executor* const executor = waiter->executor;
  const std::coroutine_handle<> handle = waiter->handle;
  if (waiter->guard->schedule(executor, handle)) return;
  if (executor == nullptr) {
    handle.resume();
    return;
  }
  abortExecutorGone(executor);  // refused under a suspended coroutine (as resumeWaiterOn)
}

std::uint64_t signalBit(int signal) {
  auto reject = [signal](const std::string& why) {
    throw std::invalid_argument("weft: signal(): signal " + std::to_string(signal) + why);
  };
  if (signal <= 0 || signal >= 64) reject(" is not a signal number weft can wait for (1..63)");
  if (signal == SIGKILL) reject(" (SIGKILL) cannot be caught");
  if (signal == SIGSTOP) reject(" (SIGSTOP) cannot be caught");
  // Linux's real-time signals start at 32; glibc keeps the first ones for its threads
  // (its sigaction refuses them with EINVAL) and SIGRTMIN is the first it leaves to us.
  if (signal >= 32 && signal < SIGRTMIN) {
    reject(" is reserved by the C library (below SIGRTMIN, " + std::to_string(SIGRTMIN) + ")");
  }
  return std::uint64_t{1} << signal;
}

SignalWaitAwaiter::~SignalWaitAwaiter() {
  onCancel_.reset();
  // First: once settled, the pool's shutdown can no longer unlink us (or hold for us).
  guard_.settle();
  // Destroyed while waiting (its coroutine destroyed): leave the list, unless a signal
  // (or the cancellation, or the pool's shutdown) took us out to resume us.
  if (suspended_ && !unlinkSignalWaiter(&waiter_)) {
    abortDestroyedWhileResuming("weft::signal()",
                                "a delivered signal, the cancellation or its executor's shutdown");
  }
}

PoolShutdownGuard::Claim SignalWaitAwaiter::takeBackForShutdown() noexcept {
  return shutDownSignalWaiter(&waiter_);
}

// Taken back while linked: await_suspend has returned true (or returns it without touching
// the awaiter again), and this is a worker of the pool the coroutine resumes on.
void SignalWaitAwaiter::resumeShutDown() noexcept { waiter_.handle.resume(); }

bool SignalWaitAwaiter::await_suspend(std::coroutine_handle<> awaiting) {
  waiter_.handle = awaiting;
  waiter_.guard = &guard_;
  // On a ThreadPool: its shutdown ends the wait with ExecutorShutDown (see
  // PoolShutdownGuard). Throws ExecutorShutDown once that shutdown has begun: nothing is
  // linked.
  guard_.arm(waiter_.executor, *this);
  // Registered before linking; the dispatcher's lock decides between a signal, the
  // cancellation and the pool's shutdown: a linked waiter is resumed by whichever unlinks
  // it, and one cancelled (or shut down) before it is linked is never linked.
  if (token_ != nullptr && token_->canBeCancelled()) {
    onCancel_.emplace(*token_, [this] {
      if (cancelSignalWaiter(&waiter_)) resumeSignalWaiter(&waiter_);
    });
  }
  suspended_ = true;  // before linking: once linked, we may be resumed at any moment
  if (linkSignalWaiter(&waiter_) == 0) return true;
  suspended_ = false;
  // A signal came in since await_ready (link set `delivered`), or the wait was cancelled,
  // or the pool's shutdown came first: await_resume says which.
  return false;
}

int SignalWaitAwaiter::await_resume() {
  onCancel_.reset();  // waits for a callback running on another thread
  guard_.settle();    // and for the shutdown guard; after this nothing refers to us
  suspended_ = false;
  // Read without the lock: written under it before our resumption (or before link()
  // refused us, under the same lock).
  if (waiter_.shutDown) throw ExecutorShutDown(waiter_.executor->name());
  if (waiter_.delivered == 0) throw OperationCancelled();
  return waiter_.delivered;
}

}  // namespace weft::detail
