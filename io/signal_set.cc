#include "weft/io/signal_set.h"

#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>

#include "weft/io/detail/fd_waits.h"
#include "weft/io/detail/socket_ops.h"

namespace weft {

SignalSet::SignalSet(std::initializer_list<int> signals) : owner_(pthread_self()) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int signal : signals) {
    // signalfd silently never reports SIGKILL and SIGSTOP: refused, as signal() does.
    if (signal == SIGKILL || signal == SIGSTOP || sigaddset(&mask, signal) != 0) {
      throw std::invalid_argument("weft: SignalSet: signal " + std::to_string(signal) +
                                  (signal == SIGKILL || signal == SIGSTOP
                                       ? " cannot be caught"
                                       : " is not a signal number"));
    }
  }
  if (const int r = pthread_sigmask(SIG_BLOCK, &mask, &previousMask_); r != 0) {
    throw std::system_error(r, std::system_category(), "weft: SignalSet: pthread_sigmask");
  }
  fd_ = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) {
    const int error = errno;
    pthread_sigmask(SIG_SETMASK, &previousMask_, nullptr);
    throw std::system_error(error, std::system_category(), "weft: SignalSet: signalfd");
  }
}

SignalSet::~SignalSet() {
  detail::closeDescriptor(fd_);
  if (pthread_equal(owner_, pthread_self())) pthread_sigmask(SIG_SETMASK, &previousMask_, nullptr);
}

Lazy<int> SignalSet::wait() {
  for (;;) {
    signalfd_siginfo info;
    const ssize_t n = ::read(fd_, &info, sizeof info);
    if (n == static_cast<ssize_t>(sizeof info)) co_return static_cast<int>(info.ssi_signo);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      throw std::system_error(errno, std::system_category(), "weft: SignalSet: read");
    }
    co_await detail::IoOperationAwaitable("SignalSet::wait", IoOpcode::kPollReadable, fd_);
  }
}

}  // namespace weft
