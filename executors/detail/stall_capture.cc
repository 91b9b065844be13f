#include "weft/executors/detail/stall_capture.h"

#include <execinfo.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <mutex>
#include <set>
#include <string>

namespace weft::detail {

namespace {

// The capture of the thread the handler runs on. constinit: a plain TLS access in the
// handler (no wrapper call); the worker set it when it started, so its TLS block exists.
constinit thread_local StallCapture* tlCapture = nullptr;

// Waits while `word` holds `expected`, at most `ns` nanoseconds. noexcept: a system call
// whose failures (a timeout, a signal, a changed word) all mean "look again".
void futexWaitFor(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                  std::int64_t ns) noexcept {
  timespec timeout{};
  timeout.tv_sec = static_cast<time_t>(ns / 1000000000);
  timeout.tv_nsec = static_cast<long>(ns % 1000000000);
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected,
                  &timeout, nullptr, 0);
}

// Async-signal-safe: a system call.
void futexWakeAll(std::atomic<std::uint32_t>& word) noexcept {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1 << 30,
                  nullptr, nullptr, 0);
}
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
              std::atomic<std::uint32_t>::is_always_lock_free);

void onStallSignal(int, siginfo_t*, void* context) {
  const int savedErrno = errno;
  StallCapture* capture = tlCapture;
  std::uint32_t expected = StallCapture::kRequested;
  // acquire: the request was stored before the signal was sent (nothing else to see; the
  // exchange only keeps a stale or foreign signal from writing).
  if (capture != nullptr && capture->state.compare_exchange_strong(
                                expected, StallCapture::kCapturing, std::memory_order_acquire)) {
    std::uintptr_t pc = 0;
#if defined(__x86_64__)
    pc = static_cast<std::uintptr_t>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
    pc = static_cast<std::uintptr_t>(static_cast<ucontext_t*>(context)->uc_mcontext.pc);
#else
    (void)context;
#endif
    capture->pc = pc;
    capture->count = ::backtrace(capture->frames, StallCapture::kMaxFrames);
    for (std::uintptr_t& word : capture->task) word = 0;
    if (const StallTaskHook* hook = stallTaskHook()) {
      // Relaxed: written by this very thread, which the signal interrupted.
      hook->capture(capture->item.load(std::memory_order_relaxed), capture->task);
    }
    // Release: the frames are visible to the watchdog's acquire load of kCaptured.
    capture->state.store(StallCapture::kCaptured, std::memory_order_release);
    futexWakeAll(capture->state);
  }
  errno = savedErrno;
}

// The hook of setStallTaskHook. constinit: read in the signal handler.
constinit std::atomic<const StallTaskHook*> gStallTaskHook{nullptr};
static_assert(std::atomic<const StallTaskHook*>::is_always_lock_free);

std::mutex gInstallMutex;
std::set<int>* gInstalled = nullptr;  // guarded by gInstallMutex; never freed

}  // namespace

void bindStallCapture(StallCapture* capture) noexcept { tlCapture = capture; }

// acquire: the hook's pointee as its setter made it (a static, so nothing in practice).
const StallTaskHook* stallTaskHook() noexcept {
  return gStallTaskHook.load(std::memory_order_acquire);
}

int defaultStallSignal() noexcept { return SIGRTMAX - 3; }

int prepareStallSignal(int requested, std::string& whyNot) {
  if (requested < 0) {
    whyNot = "native backtraces are off (ThreadPoolOptions::stallSignal < 0)";
    return -1;
  }
  const int signal = requested == 0 ? defaultStallSignal() : requested;
  if (std::string why = installStallSignal(signal); !why.empty()) {
    whyNot = "no native backtrace: " + why;
    return -1;
  }
  return signal;
}

void unblockStallSignal(int signal) noexcept {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal);
  (void)::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

std::string installStallSignal(int signal) {
  std::lock_guard<std::mutex> lock(gInstallMutex);
  if (gInstalled == nullptr) gInstalled = new std::set<int>();
  if (gInstalled->count(signal) != 0) return {};
  if (signal < SIGRTMIN || signal > SIGRTMAX) {
    return "signal " + std::to_string(signal) + " is not a real-time signal (SIGRTMIN " +
           std::to_string(SIGRTMIN) + " .. SIGRTMAX " + std::to_string(SIGRTMAX) + ")";
  }
  struct sigaction old {};
  if (::sigaction(signal, nullptr, &old) != 0) {
    return "sigaction(" + std::to_string(signal) + ") failed: errno " + std::to_string(errno);
  }
  const bool custom = (old.sa_flags & SA_SIGINFO) != 0
                          ? old.sa_sigaction != nullptr
                          : (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN);
  if (custom) {
    return "signal " + std::to_string(signal) + " has a handler of the program's";
  }
  // backtrace() loads the unwinder (libgcc_s) on its first call, which allocates: done
  // here, outside any signal handler.
  void* warmUp[2];
  (void)::backtrace(warmUp, 2);
  struct sigaction action {};
  action.sa_sigaction = &onStallSignal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (::sigaction(signal, &action, nullptr) != 0) {
    return "sigaction(" + std::to_string(signal) + ") failed: errno " + std::to_string(errno);
  }
  gInstalled->insert(signal);
  return {};
}

bool requestStallCapture(pthread_t thread, int signal, StallCapture& capture,
                         const char*& whyNot) noexcept {
  std::uint32_t state = capture.state.load(std::memory_order_acquire);
  if (state == StallCapture::kCaptured) {
    // A handler that ran after the last request was given up: its frames are stale.
    capture.state.store(StallCapture::kIdle, std::memory_order_relaxed);
    state = StallCapture::kIdle;
  }
  if (state != StallCapture::kIdle) {
    whyNot = "the worker has not yet run the handler for the previous stall's signal";
    return false;
  }
  // seq_cst: stored before the signal is sent (the handler's compare-exchange must see it).
  capture.state.store(StallCapture::kRequested, std::memory_order_seq_cst);
  union sigval value {};
  if (::pthread_sigqueue(thread, signal, value) != 0) {
    std::uint32_t requested = StallCapture::kRequested;
    capture.state.compare_exchange_strong(requested, StallCapture::kIdle);
    whyNot = "the signal could not be sent to the worker";
    return false;
  }
  return true;
}

bool awaitStallCapture(StallCapture& capture, std::chrono::milliseconds limit,
                       const char*& whyNot) noexcept {
  using Clock = std::chrono::steady_clock;
  auto waitWhile = [&](std::uint32_t from, Clock::time_point deadline) {
    for (;;) {
      // Acquire: pairs with the handler's release store of kCaptured.
      const std::uint32_t now = capture.state.load(std::memory_order_acquire);
      if (now != from) return now;
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) return now;
      futexWaitFor(capture.state, from,
                   std::chrono::duration_cast<std::chrono::nanoseconds>(left).count());
    }
  };
  std::uint32_t state = waitWhile(StallCapture::kRequested, Clock::now() + limit);
  if (state == StallCapture::kRequested) {
    std::uint32_t requested = StallCapture::kRequested;
    if (capture.state.compare_exchange_strong(requested, StallCapture::kIdle)) {
      whyNot =
          "the worker did not run the signal handler in time (blocked signals, or a "
          "sanitizer that delays them)";
      return false;
    }
    state = requested;  // the handler took it meanwhile
  }
  // The handler runs: backtrace() takes microseconds. Bounded all the same.
  if (state == StallCapture::kCapturing) {
    state = waitWhile(StallCapture::kCapturing, Clock::now() + limit);
  }
  if (state != StallCapture::kCaptured) {
    whyNot = "the worker's signal handler did not finish in time";
    return false;
  }
  return true;
}

void releaseStallCapture(StallCapture& capture) noexcept {
  // Relaxed: the next request's store orders what matters.
  capture.state.store(StallCapture::kIdle, std::memory_order_relaxed);
}

}  // namespace weft::detail

namespace weft {

void setStallTaskHook(const StallTaskHook* hook) noexcept {
  // release: pairs with stallTaskHook's acquire.
  detail::gStallTaskHook.store(hook, std::memory_order_release);
}

}  // namespace weft
