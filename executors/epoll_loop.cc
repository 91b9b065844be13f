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

namespace {

constexpr std::uint64_t kWakeData = ~std::uint64_t{0};
constexpr int kMaxEvents = 256;
// kReceiveLent's pool: effectively unbounded (16 GiB of buffers lent at once); memory
// running out fails the receive with ENOBUFS.
constexpr std::uint32_t kMaxLentBuffers = 1u << 20;

// Where an operation is (IoOperation::loopKey).
constexpr std::uint64_t kQueued = 1;     // on its fd's readers or writers
constexpr std::uint64_t kReady = 2;      // on ready_: complete, its function not yet run
constexpr std::uint64_t kConnecting = 4;  // a kConnect that returned EINPROGRESS (flag)

// Fd::generation of a registration made for an operation whose owner does not retire its
// descriptor: trusted by no later operation (a generation never reaches it).
constexpr std::uint64_t kUntrusted = ~std::uint64_t{0};

// epoll_event::data of a registration: the number, and the low half of its generation.
std::uint64_t eventData(int fd, std::uint64_t generation) noexcept {
  return (generation << 32) | static_cast<std::uint32_t>(fd);
}

// The deadline heap's view of an operation: by loopDeadline; loopHeapIndex is the
// position + 1 (0: not in the heap, what submit sets).
struct DeadlineOrder {
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  static bool before(const IoOperation& a, const IoOperation& b) noexcept {
    return a.loopDeadline < b.loopDeadline;
  }
  static void setPosition(IoOperation& op, std::size_t i) noexcept {
    op.loopHeapIndex = i == kNone ? 0 : i + 1;
  }
  static std::size_t position(const IoOperation& op) noexcept {
    return op.loopHeapIndex == 0 ? kNone : op.loopHeapIndex - 1;
  }
};
using DeadlineHeap = IntrusiveHeap<IoOperation, DeadlineOrder>;
static_assert(DeadlineHeap::kNotInHeap == DeadlineOrder::kNone);

// Whether epoll_pwait2 (Linux 5.11: a timeout in nanoseconds) works here; cleared by the
// first ENOSYS (an older kernel, or an emulator without it). Relaxed: every loop finds
// the same answer; a stale true costs one more ENOSYS.
std::atomic<bool> gPwait2Works{true};

bool isWrite(IoOpcode opcode) noexcept {
  return opcode == IoOpcode::kSend || opcode == IoOpcode::kSendMessage ||
         opcode == IoOpcode::kConnect || opcode == IoOpcode::kPollWritable;
}

// kPollReadable/kPollWritable: the loop only waits for readiness, it makes no transfer.
bool isReadinessWait(IoOpcode opcode) noexcept {
  return opcode == IoOpcode::kPollReadable || opcode == IoOpcode::kPollWritable;
}

std::int64_t result(ssize_t r) noexcept { return r < 0 ? -errno : r; }

// The system call's result says the operation would block: it waits for an event.
bool wouldBlock(const IoOperation& op, std::int64_t r) noexcept {
  return r == -EAGAIN || (op.opcode == IoOpcode::kConnect && r == -EINPROGRESS);
}

class EpollLoop final : public IoLoopBase {
 public:
  EpollLoop() : pool_(BufferPool::create(kLentBufferSize, kMaxLentBuffers)) {
    epollFd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epollFd_ < 0) {
      pool_->retire();
      throw std::system_error(errno, std::generic_category(), "weft: epoll_create1 failed");
    }
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = kWakeData;
    if (::epoll_ctl(epollFd_, EPOLL_CTL_ADD, wakeFd_, &event) != 0) {
      const int error = errno;
      ::close(epollFd_);
      pool_->retire();
      throw std::system_error(error, std::generic_category(),
                              "weft: epoll_ctl cannot watch the loop's eventfd");
    }
  }
  ~EpollLoop() override {
    ::close(epollFd_);
    pool_->retire();
  }

  IoBackend backend() const noexcept override { return IoBackend::kEpoll; }

  // Counted for the metrics (IoLoopBase::counted). start() leaves op.opcode as it is.
  bool submit(IoOperation& op) noexcept override { return counted(op.opcode, start(op)); }

  // submit() without the counting.
  bool start(IoOperation& op) noexcept {
    op.loopShutDown = false;
    op.loopHeapIndex = 0;
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
    append(write ? fd->writers : fd->readers, op);
    ++inFlight_;
    if (op.timeoutNs >= 0) {
      op.loopDeadline = nowNs() + op.timeoutNs;
      try {
        heapPush(op);
      } catch (...) {  // std::bad_alloc growing the heap: the operation fails instead
        remove(write ? fd->writers : fd->readers, op);
        --inFlight_;
        op.loopKey = 0;
        op.result = -ENOMEM;
        return true;
      }
    }
    return false;
  }

  bool withdraw(IoOperation& op) noexcept override {
    bool neverTookEffect = true;
    if ((op.loopKey & kQueued) != 0) {
      unqueue(op);
    } else if ((op.loopKey & kReady) != 0) {
      // Complete (or cancelled, or timed out): its result waits for this turn.
      remove(ready_, op);
      neverTookEffect = false;
    } else {
      return true;  // not in flight
    }
    op.loopKey = 0;
    settle(op);
    return neverTookEffect;
  }

  std::size_t lentBuffers() const noexcept override {
    pool_->drainReturned();  // the pool is not part of the loop's const state
    return pool_->lentCount();
  }

  LentBuffer lendBuffer() noexcept override {
    const std::uint32_t id = pool_->take();
    if (id == BufferPool::kNone) return {};
    return pool_->lend(id, pool_->bufferSize());
  }

  std::size_t run(int timeoutMs) noexcept override {
    return runFor(timeoutMs < 0 ? -1 : std::int64_t{timeoutMs} * 1000000);
  }

  std::size_t runFor(std::int64_t timeoutNs) noexcept override {
    drainRemoteCancels();
    pool_->drainReturned();
    if (!ready_.empty()) timeoutNs = 0;
    if (!heap_.empty() && timeoutNs != 0) {
      // Wake for the earliest deadline.
      const std::int64_t untilDeadline =
          std::max<std::int64_t>(heap_.top()->loopDeadline - nowNs(), 0);
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

  void shutdown() noexcept override {
    if (shutDown_) return;
    shutDown_ = true;
    for (Fd& fd : fds_) {
      for (List* list : {&fd.readers, &fd.writers}) {
        while (!list->empty()) {
          IoOperation& op = *list->head;
          remove(*list, op);
          untime(op);
          op.result = -ECANCELED;
          op.loopShutDown = true;
          op.loopKey = kReady;
          append(ready_, op);
        }
      }
    }
  }

 private:
  struct List {
    IoOperation* head = nullptr;
    IoOperation* tail = nullptr;
    bool empty() const noexcept { return head == nullptr; }
  };
  // What the loop knows of one descriptor number.
  struct Fd {
    List readers;
    List writers;
    // The descriptor's generation when it was registered (kUntrusted: for an operation
    // whose owner does not retire it). Meaningful while `registered`.
    std::uint64_t generation = 0;
    // The loop's epoll has a registration for the file this number named when it was
    // made; true from a registration until forget(), which trusted() decides.
    bool registered = false;
    // This number was registered once (a hint: MOD rather than ADD for a raw fd).
    bool everRegistered = false;
    // Readiness per direction while registered: false when the loop's last try would have
    // blocked and no event came since; true when an operation may succeed.
    bool readable = true;
    bool writable = true;
    // An event reported EPOLLRDHUP, EPOLLHUP or EPOLLERR: the end of the stream or an error
    // is pending, and no edge will come for it, so a short receive does not mean that
    // nothing is left to report (drained() is not trusted).
    bool hungUp = false;

    bool idle() const noexcept { return readers.empty() && writers.empty(); }
  };

  static void append(List& list, IoOperation& op) noexcept {
    op.loopNext = nullptr;
    op.loopPrev = list.tail;
    (list.tail == nullptr ? list.head : list.tail->loopNext) = &op;
    list.tail = &op;
  }
  static void remove(List& list, IoOperation& op) noexcept {
    (op.loopPrev == nullptr ? list.head : op.loopPrev->loopNext) = op.loopNext;
    (op.loopNext == nullptr ? list.tail : op.loopNext->loopPrev) = op.loopPrev;
    op.loopNext = op.loopPrev = nullptr;
  }

  static bool& readiness(Fd& fd, bool write) noexcept { return write ? fd.writable : fd.readable; }

  // Whether the registration of `fd` (registered, no waiter on it) still names the file
  // that op.fd names: only for an owner that retires its descriptor, and while no
  // retirement came since (the generation is unchanged).
  static bool trusted(const Fd& fd, const IoOperation& op) noexcept {
    return op.ownerRetiresFd && fd.generation == descriptorGeneration(op.fd);
  }

  // The number may name another file: nothing known of its registration or readiness.
  static void forget(Fd& fd) noexcept {
    fd.registered = false;
    fd.readable = fd.writable = true;
    fd.hungUp = false;
  }

  // Forgets what the loop knows of `fd` unless it still holds for `op`: while an
  // operation waits on the fd (it is open: IoLoop's contract), or when trusted().
  static void validate(Fd& fd, const IoOperation& op) noexcept {
    if (fd.registered && fd.idle() && !trusted(fd, op)) forget(fd);
  }

  // Whether an operation in direction `write` may succeed now: the loop's last word on
  // it is "ready", or the loop knows nothing (not registered, or no longer: a "not ready"
  // is believed only while it is still about this file).
  static bool mayBeReady(Fd& fd, const IoOperation& op, bool write) noexcept {
    if (readiness(fd, write)) return true;
    validate(fd, op);
    return !fd.registered;
  }

  // Registers `number` with the loop's epoll for both directions, edge-triggered, in the
  // generation `op` trusts. Returns 0, or -errno.
  int registerFd(int number, Fd& fd, const IoOperation& op) noexcept {
    const std::uint64_t generation = op.ownerRetiresFd ? descriptorGeneration(number) : kUntrusted;
    epoll_event event{};
    event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    event.data.u64 = eventData(number, generation);
    // A retired number is most likely a new file: ADD, and MOD on EEXIST (the same file,
    // released and adopted again). A raw fd is most likely the file registered last time:
    // MOD, and ADD on ENOENT (closed and reused behind the loop's back).
    const bool modifyFirst = !op.ownerRetiresFd && fd.everRegistered;
    int r = ::epoll_ctl(epollFd_, modifyFirst ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, number, &event);
    if (r != 0 && errno == (modifyFirst ? ENOENT : EEXIST)) {
      r = ::epoll_ctl(epollFd_, modifyFirst ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, number, &event);
    }
    if (r != 0) return -errno;
    fd.registered = fd.everRegistered = true;
    fd.generation = generation;
    fd.readable = fd.writable = true;  // the registration reports the state as an event
    fd.hungUp = false;
    return 0;
  }

  // For a readiness wait on a registered fd that may be ready: 1 when `fd` is ready for
  // the direction now (or has an error or a hang-up), 0 when not, -EBADF when closed.
  static int readyNow(int fd, bool write) noexcept {
    pollfd p{};
    p.fd = fd;
    p.events = static_cast<short>(write ? POLLOUT : (POLLIN | POLLRDHUP));
    int r;
    do {
      r = ::poll(&p, 1, 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return -errno;
    if (r == 0) return 0;
    return (p.revents & POLLNVAL) != 0 ? -EBADF : 1;
  }

  Fd& entry(int fd) {
    const auto index = static_cast<std::size_t>(fd);
    if (index >= fds_.size()) fds_.resize(std::max(index + 1, fds_.size() * 2));
    return fds_[index];
  }

  // The system call, non-blocking. -errno on failure.
  std::int64_t attempt(IoOperation& op) noexcept {
    switch (op.opcode) {
      case IoOpcode::kReceiveLent: {
        const std::uint32_t id = pool_->take();
        if (id == BufferPool::kNone) return -ENOBUFS;
        const ssize_t r =
            ::recv(op.fd, pool_->address(id), pool_->bufferSize(), op.flags | MSG_DONTWAIT);
        if (r > 0) {
          op.lent = pool_->lend(id, static_cast<std::size_t>(r));
          return r;
        }
        pool_->recycle(id);  // nothing received: the next attempt takes it again
        return result(r);
      }
      case IoOpcode::kReceiveMessageLent: {
        const std::uint32_t id = pool_->take();
        if (id == BufferPool::kNone) return -ENOBUFS;
        op.message->msg_iov[0].iov_base = pool_->address(id);
        op.message->msg_iov[0].iov_len = kLentDatagramSize;
        const ssize_t r = ::recvmsg(op.fd, op.message, op.flags | MSG_DONTWAIT);
        if (r > 0) {
          op.lent = pool_->lend(id, static_cast<std::size_t>(r));
          return r;
        }
        pool_->recycle(id);  // an empty datagram, or none yet: the buffer goes back
        return result(r);
      }
      case IoOpcode::kReceive:
        return result(::recv(op.fd, op.buffer, op.length, op.flags | MSG_DONTWAIT));
      case IoOpcode::kSend:
        return result(::send(op.fd, op.buffer, op.length, op.flags | MSG_DONTWAIT | MSG_NOSIGNAL));
      case IoOpcode::kAccept:
        return result(::accept4(op.fd, op.address, op.address != nullptr ? &op.addressLength : nullptr,
                                SOCK_NONBLOCK | SOCK_CLOEXEC));
      case IoOpcode::kConnect: {
        if ((op.loopKey & kConnecting) != 0) {
          int error = 0;
          socklen_t length = sizeof error;
          if (::getsockopt(op.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return -errno;
          if (error == 0) {
            // Writable without an error can still mean "not yet" for a spurious wake-up.
            sockaddr_storage peer;
            socklen_t peerLength = sizeof peer;
            if (::getpeername(op.fd, reinterpret_cast<sockaddr*>(&peer), &peerLength) != 0) {
              return errno == ENOTCONN ? -EAGAIN : -errno;
            }
            return 0;
          }
          return -error;
        }
        return ::connect(op.fd, op.address, op.addressLength) == 0 ? 0 : -errno;
      }
      case IoOpcode::kReceiveMessage:
        return result(::recvmsg(op.fd, op.message, op.flags | MSG_DONTWAIT));
      case IoOpcode::kSendMessage:
        return result(::sendmsg(op.fd, op.message, op.flags | MSG_DONTWAIT | MSG_NOSIGNAL));
      case IoOpcode::kReadAt:
        return result(::pread(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset)));
      case IoOpcode::kWriteAt:
        return result(::pwrite(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset)));
      case IoOpcode::kSync:
        return (op.flags == IoOperation::kSyncDataOnly ? ::fdatasync(op.fd) : ::fsync(op.fd)) == 0
                   ? 0
                   : -errno;
      case IoOpcode::kPollReadable:
      case IoOpcode::kPollWritable:
        break;  // never attempted: readiness waits complete from their epoll event
      case IoOpcode::kReceiveMultishot:
      case IoOpcode::kWait:
        return -EOPNOTSUPP;  // refused by submit
    }
    return -EINVAL;
  }

  // attempt(), and for a `whole` operation (IoOperation::whole) that moved part of its
  // buffer, attempts of the rest at once, advancing past each part, until it is done,
  // fails, would block or (a receive) finds the end of the stream. The operation stays
  // where it is meanwhile: first among its fd's waiters, or not yet queued (submit).
  std::int64_t attemptWhole(IoOperation& op) noexcept {
    std::int64_t r = attempt(op);
    while (op.whole && r > 0 && static_cast<std::size_t>(r) < op.length) [[unlikely]] {
      advanceWhole(op, static_cast<std::size_t>(r));
      r = attempt(op);
    }
    return r;
  }

  // Retries the waiters of one ready direction, oldest first, until one would block.
  // Completed ones move to ready_: their completion functions run after the pass over
  // the events, so that none can submit into fds_ while it is being walked. A readiness
  // wait (kPollReadable/kPollWritable) completes from the event itself, with no poll(2).
  // Returns false when one would block (the direction is not ready any more).
  // mayDrain: a short lent receive may end the pass (see drained()).
  bool retry(List& list, bool mayDrain = false) noexcept {
    while (!list.empty()) {
      IoOperation& op = *list.head;
      const void* const from = op.buffer;
      const std::int64_t r = isReadinessWait(op.opcode) ? 0 : attemptWhole(op);
      if (wouldBlock(op, r)) {
        // A `whole` operation that moved bytes waits again, still first: for room (data)
        // from now on, so its time limit starts anew (as a new write's would).
        if (op.buffer != from && DeadlineHeap::contains(op)) [[unlikely]] {
          op.loopDeadline = nowNs() + op.timeoutNs;
          heap_.update(op);
        }
        return false;
      }
      remove(list, op);
      untime(op);
      op.result = r;
      op.loopKey = kReady;
      append(ready_, op);
      if (mayDrain && drained(op, r)) return false;
    }
    return true;
  }

  // A receive into a lent buffer (a stream socket's: kReceiveLent's contract) that got
  // less than the buffer holds has emptied the socket: the next one need not try (and
  // fail with EAGAIN) before it waits. Data that comes after is a new edge, which an event
  // reports. (Not for kReceive: a datagram socket's short read says nothing of the rest.
  // Nor after a hang-up: the end of the stream that follows gets no edge of its own.)
  bool drained(const IoOperation& op, std::int64_t r) const noexcept {
    return op.opcode == IoOpcode::kReceiveLent && r > 0 &&
           static_cast<std::size_t>(r) < pool_->bufferSize();
  }

  // epoll_wait for up to `timeoutNs` (0: no wait; negative: no limit): epoll_pwait2 with
  // the nanoseconds where the kernel has it, else whole milliseconds rounded up (a wait
  // never ends before the time asked for). Returns epoll_wait's result (errno set).
  int wait(epoll_event* events, std::int64_t timeoutNs) noexcept {
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

  static std::int64_t nowNs() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Operations with a time limit, by deadline (executors/detail/timer_heap.h: the heap
  // weft's timers use too); one that completes first leaves it in O(log n).
  void heapPush(IoOperation& op) { heap_.push(op); }
  void untime(IoOperation& op) noexcept {
    if (DeadlineHeap::contains(op)) heap_.remove(op);
  }
  // Operations whose deadline passed leave their fd's waiters with -ETIMEDOUT.
  void expireDeadlines() noexcept {
    if (heap_.empty()) return;
    const std::int64_t now = nowNs();
    while (!heap_.empty() && heap_.top()->loopDeadline <= now) {
      IoOperation& op = *heap_.top();
      unqueue(op);
      op.result = -ETIMEDOUT;
      op.loopKey = kReady;
      append(ready_, op);
    }
  }

  void cancelLocal(IoOperation& op) noexcept override {
    if ((op.loopKey & kQueued) == 0) return;  // completing already, or not in flight
    unqueue(op);
    op.result = -ECANCELED;
    op.loopKey = kReady;
    append(ready_, op);
  }

  // Takes a queued operation off its fd's waiters and the deadline heap, without an
  // event (cancelled, timed out, withdrawn). The registration and the readiness stay as
  // they are: the next waiter, if any, waits for the same edge; once the fd has no waiter
  // left, the descriptor may be closed, and trusted() decides at the next submit whether
  // the registration still holds.
  void unqueue(IoOperation& op) noexcept {
    Fd& fd = fds_[static_cast<std::size_t>(op.fd)];
    remove(isWrite(op.opcode) ? fd.writers : fd.readers, op);
    untime(op);
  }

  // Runs the completion functions of ready_, including those of operations that the
  // completions themselves cancel (a completion may withdraw another from ready_).
  std::size_t runReady() noexcept {
    std::size_t n = 0;
    for (;;) {
      drainRemoteCancels();
      if (ready_.empty()) return n;
      IoOperation& op = *ready_.head;
      remove(ready_, op);
      op.loopKey = 0;
      finish(op);
      ++n;
    }
  }

  BufferPool* pool_;  // retired, not deleted: lent buffers may outlive the loop
  int epollFd_ = -1;
  std::vector<Fd> fds_;
  List ready_;  // complete (or cancelled, or failed), completion function not yet run
  DeadlineHeap heap_;  // queued operations with a deadline
};

}  // namespace

std::unique_ptr<IoLoop> makeEpollLoop() { return std::make_unique<EpollLoop>(); }

}  // namespace weft::detail
