// The epoll event loop: readiness, then the system call made by the loop.
//
// Every operation is first tried at once (sockets are non-blocking; recv and send also
// pass MSG_DONTWAIT), unless an earlier one in its direction waits on the fd (order is
// kept) or the loop knows that the direction is not ready: most sends and many receives
// complete there, with no wait at all. One that would block (EAGAIN, or EINPROGRESS for
// connect) is queued on its fd: a list of readers and one of writers, in arrival order, in
// a table indexed by fd. When an event reports the fd ready, the loop retries the waiters
// of the ready directions in order until one would block again.
//
// Registration, once: the first time an operation on a descriptor has to wait, the loop
// registers it with its epoll for both directions, edge-triggered (EPOLLIN | EPOLLOUT |
// EPOLLRDHUP | EPOLLET), and leaves it registered: later waits make no epoll_ctl. What the
// loop knows of the fd's readiness is kept per direction (Fd::readable, Fd::writable):
// set by an event, cleared when a system call of this loop returns EAGAIN. Cleared means
// "not ready since this loop's last try": data or room that comes after that try is an
// edge, which the next epoll_wait reports (events wait in the kernel until harvested), so
// an operation can queue without trying. Set means "may be ready": the operation is tried
// (the bytes may have been taken by a tryRead outside the loop, or by another loop).
//
// Registration and reused numbers: the kernel drops a registration when the file is
// closed, but the loop's entry for the number stays, and a new descriptor that gets the
// number must not be taken for registered (it would never get an event: a hang). So a
// registration is trusted only while an operation waits on the fd (IoLoop's contract
// keeps the descriptor open then), or for an operation whose owner retires its descriptor
// (IoOperation::ownerRetiresFd: weft's sockets) when the number's generation
// (detail::descriptorGeneration, changed by IoLoop::retireDescriptor before every close
// and release in weft) is still the one it was registered in. Otherwise the loop forgets
// what it knew of the fd and registers it anew when an operation has to wait: EPOLL_CTL_ADD
// (EEXIST: the same file, registered before; MOD then), or for a descriptor whose owner
// does not retire it (a user's raw fd, closed and reused without the loop knowing) MOD,
// then ADD on ENOENT, as the one-shot arming of earlier versions did on every wait. An
// event carries its registration's generation and is ignored when that is not the
// entry's: a stale registration (in this loop, of a file closed here but kept open by a
// dup or a child process) only wakes the loop. Several loops may register one fd (a
// stream whose coroutine moved between workers): each registration is that loop's own,
// and an event for an fd without waiters only updates the readiness it knows.
//
// A `whole` operation (IoOperation::whole: TcpStream::writeAll, readExactly) that moves
// part of its buffer tries the rest at once; if that would block it waits first among its
// fd's waiters (queued, or where it was), so no later operation in its direction moves a
// byte before it is done, and its deadline starts again from the new wait.
//
// kReceiveLent and kReceiveMessageLent take a buffer from the loop's pool for each attempt
// and put it back at once when the socket has nothing (EAGAIN): a waiting receive holds no
// buffer.
//
// Files are always "ready" to epoll: their operations run at once, blocking this thread
// (io/File uses weft::blocking on this backend instead). A wait on one fails with EPERM.

#include "weft/executors/detail/epoll_loop.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <limits>
#include <memory>
#include <system_error>
#include <vector>

#include "weft/executors/detail/io_loop_base.h"
#include "weft/executors/detail/timer_heap.h"

namespace weft::detail {

namespace epoll {

namespace {

// Whether epoll_pwait2 (Linux 5.11: a timeout in nanoseconds) works here; cleared by the
// first ENOSYS (an older kernel, or an emulator without it). Relaxed: every loop finds
// the same answer; a stale true costs one more ENOSYS.
std::atomic<bool> gPwait2Works{true};

}  // namespace

// A throw below destroys the IoLoopBase, which retires the buffer pool.
EpollLoop::EpollLoop() {
  epollFd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epollFd_ < 0) {
    throw std::system_error(errno, std::generic_category(), "weft: epoll_create1 failed");
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeData;
  if (::epoll_ctl(epollFd_, EPOLL_CTL_ADD, wakeFd_, &event) != 0) {
    const int error = errno;
    ::close(epollFd_);
    throw std::system_error(error, std::generic_category(),
                            "weft: epoll_ctl cannot watch the loop's eventfd");
  }
}

EpollLoop::~EpollLoop() { ::close(epollFd_); }

bool EpollLoop::submit(IoOperation& op) noexcept { return counted(op.opcode, start(op)); }

// always_inline: submit()'s body, as when the class was in one file (an inline function
// with external linkage is not "called once" to the compiler, which would call it).
[[gnu::always_inline]] inline bool EpollLoop::start(IoOperation& op) noexcept {
  op.loopShutDown = false;
  op.loopTime[0] = 0;  // not in the deadline heap
  if (shutDown_) {
    op.result = -ECANCELED;
    op.loopShutDown = true;
    return true;
  }
  op.loopKey = 0;
  if (op.opcode == IoOpcode::kReceiveMultishot || op.opcode == IoOpcode::kWait) [[unlikely]] {
    op.result = -EOPNOTSUPP;  // multishotReceive() is false: not submitted by weft
    return true;
  }
  if (op.fd < 0) {
    op.result = -EBADF;
    return true;
  }
  const bool write = isWrite(op.opcode);
  const auto index = static_cast<std::size_t>(op.fd);
  Fd* known = index < fds_.size() ? &fds_[index] : nullptr;
  // Tried at once unless an earlier operation in the same direction waits on the fd
  // (operations are served in order, so a later write never overtakes a waiting one), or
  // the loop knows the direction is not ready (an event will say when it is). What the
  // loop knows is checked (validate) only where it matters: before trusting "not ready",
  // and before trusting the registration of an fd it queues on; a send that completes
  // at once checks nothing.
  bool notReady = false;
  if (known == nullptr || (write ? known->writers : known->readers).empty()) {
    if (isReadinessWait(op.opcode)) {
      // Registered and maybe ready: ask the kernel now, as an edge may have come and
      // gone (its bytes taken outside the loop). Not registered: the registration below
      // reports the fd's state as an event.
      if (known != nullptr && known->registered && readiness(*known, write)) {
        const int r = readyNow(op.fd, write);
        if (r != 0) {
          op.result = r < 0 ? r : 0;
          return true;
        }
        notReady = true;
      }
    } else if (known == nullptr || mayBeReady(*known, op, write)) {
      const std::int64_t r = attemptWhole(op);
      if (!wouldBlock(op, r)) {
        if (known != nullptr && !known->hungUp && drained(op, r)) known->readable = false;
        op.result = r;
        return true;
      }
      if (op.opcode == IoOpcode::kConnect) op.loopKey = kConnecting;
      notReady = true;
    }
  }
  Fd* fd = known;
  if (fd == nullptr) {
    try {
      fd = &entry(op.fd);
    } catch (...) {  // std::bad_alloc growing the table: the operation fails instead
      op.loopKey = 0;
      op.result = -ENOMEM;
      return true;
    }
  }
  validate(*fd, op);
  if (!fd->registered) {
    if (const int r = registerFd(op.fd, *fd, op); r != 0) {
      // Not pollable (EPERM: a regular file), closed (EBADF), or the kernel's limits
      // (ENOMEM, ENOSPC: max_user_watches): the operation fails with it.
      op.loopKey = 0;
      op.result = r;
      return true;
    }
  }
  if (notReady) readiness(*fd, write) = false;
  op.loopState.store(0, std::memory_order_relaxed);  // not yet visible to other threads
  op.loopKey |= kQueued;
  (write ? fd->writers : fd->readers).append(op);
  ++inFlight_;
  if (op.timeoutNs >= 0) {
    deadlineOf(op) = nowNs() + op.timeoutNs;
    try {
      heapPush(op);
    } catch (...) {  // std::bad_alloc growing the heap: the operation fails instead
      (write ? fd->writers : fd->readers).remove(op);
      --inFlight_;
      op.loopKey = 0;
      op.result = -ENOMEM;
      return true;
    }
  }
  return false;
}

bool EpollLoop::withdraw(IoOperation& op) noexcept {
  bool neverTookEffect = true;
  if ((op.loopKey & kQueued) != 0) {
    unqueue(op);
  } else if ((op.loopKey & kReady) != 0) {
    // Complete (or cancelled, or timed out): its result waits for this turn.
    ready_.remove(op);
    neverTookEffect = false;
  } else {
    return true;  // not in flight
  }
  op.loopKey = 0;
  settle(op);
  return neverTookEffect;
}

std::size_t EpollLoop::run(int timeoutMs) noexcept {
  return runFor(timeoutMs < 0 ? -1 : std::int64_t{timeoutMs} * 1000000);
}

std::size_t EpollLoop::runFor(std::int64_t timeoutNs) noexcept {
  drainRemoteCancels();
  pool_->drainReturned();
  if (!ready_.empty()) timeoutNs = 0;
  if (!heap_.empty() && timeoutNs != 0) {
    // Wake for the earliest deadline.
    const std::int64_t untilDeadline =
        std::max<std::int64_t>(deadlineOf(*heap_.top()) - nowNs(), 0);
    timeoutNs = timeoutNs < 0 ? untilDeadline : std::min(timeoutNs, untilDeadline);
  }
  epoll_event events[kMaxEvents];
  int n = wait(events, timeoutNs);
  if (n < 0) {
    if (errno != EINTR) fail("epoll_wait", errno);
    n = 0;
  }
  for (int i = 0; i < n; ++i) {
    const std::uint64_t data = events[i].data.u64;
    if (data == kWakeData) {
      consumeWake();
      continue;
    }
    Fd& fd = fds_[static_cast<std::uint32_t>(data)];
    // From a registration that is not the entry's current one (forgotten, or of a file
    // closed here but kept open elsewhere): it says nothing of the fd the number names.
    if (!fd.registered || (data >> 32) != static_cast<std::uint32_t>(fd.generation)) continue;
    const std::uint32_t e = events[i].events;
    // An event marks a direction ready; it stays so unless a waiter would block again.
    // fds_ does not move here: nothing above submits (completions run below, after).
    if ((e & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) != 0) fd.hungUp = true;
    if ((e & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) != 0) {
      fd.readable = retry(fd.readers, /*mayDrain=*/!fd.hungUp);
    }
    if ((e & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) fd.writable = retry(fd.writers);
  }
  expireDeadlines();
  return runReady();
}

void EpollLoop::shutdown() noexcept {
  if (shutDown_) return;
  shutDown_ = true;
  for (Fd& fd : fds_) {
    for (List* list : {&fd.readers, &fd.writers}) {
      while (!list->empty()) {
        IoOperation& op = *list->head;
        list->remove(op);
        untime(op);
        op.result = -ECANCELED;
        op.loopShutDown = true;
        op.loopKey = kReady;
        ready_.append(op);
      }
    }
  }
}

inline bool EpollLoop::retry(List& list, bool mayDrain) noexcept {
  while (!list.empty()) {
    IoOperation& op = *list.head;
    const void* const from = op.buffer;
    const std::int64_t r = isReadinessWait(op.opcode) ? 0 : attemptWhole(op);
    if (wouldBlock(op, r)) {
      // A `whole` operation that moved bytes waits again, still first: for room (data)
      // from now on, so its time limit starts anew (as a new write's would).
      if (op.buffer != from && DeadlineHeap::contains(op)) [[unlikely]] {
        deadlineOf(op) = nowNs() + op.timeoutNs;
        heap_.update(op);
      }
      return false;
    }
    list.remove(op);
    untime(op);
    op.result = r;
    op.loopKey = kReady;
    ready_.append(op);
    if (mayDrain && drained(op, r)) return false;
  }
  return true;
}

inline int EpollLoop::wait(epoll_event* events, std::int64_t timeoutNs) noexcept {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
  if (timeoutNs > 0 && gPwait2Works.load(std::memory_order_relaxed)) {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(timeoutNs / 1000000000);
    ts.tv_nsec = static_cast<long>(timeoutNs % 1000000000);
    const int n = ::epoll_pwait2(epollFd_, events, kMaxEvents, &ts, nullptr);
    if (n >= 0 || errno != ENOSYS) return n;
    gPwait2Works.store(false, std::memory_order_relaxed);
  }
#endif
  int timeoutMs = -1;
  if (timeoutNs >= 0) {
    const std::int64_t ms = timeoutNs / 1000000 + (timeoutNs % 1000000 != 0 ? 1 : 0);
    timeoutMs = static_cast<int>(std::min<std::int64_t>(ms, 1 << 30));
  }
  return ::epoll_wait(epollFd_, events, kMaxEvents, timeoutMs);
}

inline void EpollLoop::expireDeadlines() noexcept {
  if (heap_.empty()) return;
  const std::int64_t now = nowNs();
  while (!heap_.empty() && deadlineOf(*heap_.top()) <= now) {
    IoOperation& op = *heap_.top();
    unqueue(op);
    op.result = -ETIMEDOUT;
    op.loopKey = kReady;
    ready_.append(op);
  }
}

void EpollLoop::cancelLocal(IoOperation& op) noexcept {
  if ((op.loopKey & kQueued) == 0) return;  // completing already, or not in flight
  unqueue(op);
  op.result = -ECANCELED;
  op.loopKey = kReady;
  ready_.append(op);
}

inline void EpollLoop::unqueue(IoOperation& op) noexcept {
  Fd& fd = fds_[static_cast<std::size_t>(op.fd)];
  (isWrite(op.opcode) ? fd.writers : fd.readers).remove(op);
  untime(op);
}

inline std::size_t EpollLoop::runReady() noexcept {
  std::size_t n = 0;
  for (;;) {
    drainRemoteCancels();
    if (ready_.empty()) return n;
    IoOperation& op = *ready_.head;
    ready_.remove(op);
    op.loopKey = 0;
    finish(op);
    ++n;
  }
}

}  // namespace epoll

std::unique_ptr<IoLoop> makeEpollLoop() { return std::make_unique<epoll::EpollLoop>(); }

}  // namespace weft::detail
