#include "weft/stackful/detail/stack_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "weft/stackful/detail/fiber_core.h"

namespace weft::detail {

namespace {

struct sigaction gPreviousAction;
std::once_flag gInstallOnce;

// The stack pointer at the fault, or 0 where we do not know how to read it.
std::uintptr_t faultStackPointer(void* ucontext) noexcept {
  if (ucontext == nullptr) return 0;
  auto* uc = static_cast<ucontext_t*>(ucontext);
#if defined(__x86_64__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.sp);
#else
  (void)uc;
  return 0;
#endif
}

// True when a fault at `address` with stack pointer `sp` is the running fiber running
// off its stack: the address is in the guard, or the stack pointer has left the stack
// downwards by less than 64 KiB (a frame bigger than the guard jumped over it).
bool isOverflow(const RunningStackInfo& info, std::uintptr_t address, std::uintptr_t sp) noexcept {
  const auto guardBegin = reinterpret_cast<std::uintptr_t>(info.guardBegin);
  const auto bottom = reinterpret_cast<std::uintptr_t>(info.stackBottom);
  if (address >= guardBegin && address < bottom) return true;
  constexpr std::uintptr_t kSlack = 64 * 1024;
  return sp != 0 && sp < bottom && sp + kSlack >= guardBegin && address < bottom &&
         address + kSlack >= guardBegin;
}

void writeAll(const char* text, std::size_t size) noexcept {
  while (size > 0) {
    ssize_t written = ::write(STDERR_FILENO, text, size);
    if (written <= 0) return;
    text += written;
    size -= static_cast<std::size_t>(written);
  }
}

// Appends the decimal form of `value` at `out`; returns the end.
char* appendNumber(char* out, std::uint64_t value) noexcept {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

void onSegv(int signal, siginfo_t* info, void* ucontext) {
  RunningStackInfo running;
  if (describeRunningFiber(running) && info != nullptr &&
      isOverflow(running, reinterpret_cast<std::uintptr_t>(info->si_addr),
                 faultStackPointer(ucontext))) {
    writeOverflowMessage(running);
    std::abort();
  }
  // Not ours: behave as if weft had never installed a handler.
  const struct sigaction& previous = gPreviousAction;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(signal, info, ucontext);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
      previous.sa_handler != nullptr) {
    previous.sa_handler(signal);
    return;
  }
  // Default action: restore it and re-raise. The signal is blocked while we run, so it is
  // delivered (and kills the process) as soon as this handler returns; a fault that was
  // not raised by kill() would also simply recur at the faulting instruction.
  struct sigaction defaultAction;
  std::memset(&defaultAction, 0, sizeof defaultAction);
  defaultAction.sa_handler = SIG_DFL;
  sigemptyset(&defaultAction.sa_mask);
  ::sigaction(signal, &defaultAction, nullptr);
  ::raise(signal);
}

// The calling thread's alternate signal stack, when weft made it: unmapped at thread
// exit (after making sure it is no longer the thread's alternate stack).
class SignalStackOwner {
 public:
  SignalStackOwner() noexcept {
    stack_t current;
    if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) == 0) {
      return;  // the thread has one already (its own, or a sanitizer's): keep it
    }
    // 64 KiB: comfortably above MINSIGSTKSZ/SIGSTKSZ, and the handler uses a few hundred
    // bytes (more if it chains to a sanitizer's handler, which symbolizes).
    size_ = 64 * 1024;
    void* memory =
        ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return;
    stack_t stack;
    stack.ss_sp = memory;
    stack.ss_size = size_;
    stack.ss_flags = 0;
    if (::sigaltstack(&stack, nullptr) != 0) {
      ::munmap(memory, size_);
      return;
    }
    memory_ = memory;
  }
  ~SignalStackOwner() {
    if (memory_ == nullptr) return;
    stack_t current;
    if (::sigaltstack(nullptr, &current) == 0 && current.ss_sp == memory_) {
      stack_t disable;
      std::memset(&disable, 0, sizeof disable);
      disable.ss_flags = SS_DISABLE;
      if (::sigaltstack(&disable, nullptr) != 0) return;  // cannot free what is in use
    }
    ::munmap(memory_, size_);
  }
  SignalStackOwner(const SignalStackOwner&) = delete;
  SignalStackOwner& operator=(const SignalStackOwner&) = delete;

 private:
  void* memory_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace

void installStackOverflowHandler() noexcept {
  std::call_once(gInstallOnce, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_sigaction = &onSegv;
    // SA_ONSTACK: the overflowing stack has no room for the handler.
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGSEGV, &action, &gPreviousAction);
  });
}

void installSignalStack() noexcept {
  tSignalStackChecked = true;
  static thread_local SignalStackOwner owner;
  (void)owner;
}

void writeOverflowMessage(const RunningStackInfo& info) noexcept {
  char buffer[256];
  char* out = buffer;
  // 30 + 160 + 8 + 20 + 8 bytes at most: names are cut at 160 characters.
  auto append = [&](const char* text) {
    std::size_t length = ::strnlen(text, 160);
    std::memcpy(out, text, length);
    out += length;
  };
  append("weft: stack overflow in fiber ");
  if (info.name != nullptr && info.name[0] != '\0') {
    append(info.name);
  } else {
    out = appendNumber(out, info.id);
  }
  append(" (stack ");
  out = appendNumber(out, info.stackSize);
  append(" bytes)\n");
  writeAll(buffer, static_cast<std::size_t>(out - buffer));
}

bool describeRunningFiber(RunningStackInfo& info) noexcept {
  const FiberCore* fiber = FiberCore::current();
  if (fiber == nullptr) return false;
  info.guardBegin = fiber->stack().guardBegin();
  info.stackBottom = fiber->stack().bottom();
  info.stackSize = fiber->stack().size();
  info.id = fiber->id();
  info.name = fiber->name();
  return true;
}

}  // namespace weft::detail
