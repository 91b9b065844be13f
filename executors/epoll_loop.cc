// The epoll event loop: readiness, then the system call made by the loop.
//
// Every operation is first tried at once (sockets are non-blocking; recv and send also
// pass MSG_DONTWAIT), unless an earlier one in its direction waits on the fd (order is
// kept): most sends and many receives complete there, with no wait at all.
// One that would block (EAGAIN, or EINPROGRESS for connect) is queued on its fd: a list of
// readers and one of writers, in arrival order, in a table indexed by fd. The fd is armed
// EPOLLONESHOT for the directions that have waiters (EPOLL_CTL_MOD, or ADD when the
// kernel has no registration: a new fd, or a number reused after close, which removed
// the old registration). One-shot means an idle connection costs nothing and a stale
// registration cannot fire. When the fd fires, the loop retries the waiters of the
// ready directions in order until one would block again, then re-arms what is left.
//
// kReceiveLent takes a buffer from the loop's pool for each attempt and puts it back at
// once when the socket has nothing (EAGAIN): a waiting receive holds no buffer.
//
// Files are always "ready" to epoll: their operations run at once, blocking this thread
// (io/File uses weft::blocking on this backend instead).

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <memory>
#include <system_error>
#include <vector>

#include "weft/executors/detail/io_loop_base.h"

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

bool isWrite(IoOpcode opcode) noexcept {
  return opcode == IoOpcode::kSend || opcode == IoOpcode::kSendMessage ||
         opcode == IoOpcode::kConnect || opcode == IoOpcode::kPollWritable;
}

// kPollReadable/kPollWritable: the loop only waits for readiness, it makes no transfer.
bool isReadinessWait(IoOpcode opcode) noexcept {
  return opcode == IoOpcode::kPollReadable || opcode == IoOpcode::kPollWritable;
}

std::int64_t result(ssize_t r) noexcept { return r < 0 ? -errno : r; }

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

  bool submit(IoOperation& op) noexcept override {
    op.loopShutDown = false;
    op.loopHeapIndex = 0;
    if (shutDown_) {
      op.result = -ECANCELED;
      op.loopShutDown = true;
      return true;
    }
    op.loopKey = 0;
    // Tried at once unless an earlier operation in the same direction waits on the fd:
    // operations are served in order, so a later write never overtakes a waiting one.
    if (!isReadinessWait(op.opcode) && !hasWaiters(op)) {
      const std::int64_t r = attempt(op);
      if (r != -EAGAIN && !(op.opcode == IoOpcode::kConnect && r == -EINPROGRESS)) {
        op.result = r;
        return true;
      }
      if (op.opcode == IoOpcode::kConnect) op.loopKey = kConnecting;
    }
    if (op.fd < 0) {
      op.result = -EBADF;
      return true;
    }
    Fd& fd = entry(op.fd);
    op.loopState.store(0, std::memory_order_relaxed);  // not yet visible to other threads
    op.loopKey |= kQueued;
    append(isWrite(op.opcode) ? fd.writers : fd.readers, op);
    ++inFlight_;
    if (op.timeoutNs >= 0) {
      op.loopDeadline = nowNs() + op.timeoutNs;
      try {
        heapPush(op);
      } catch (...) {  // std::bad_alloc growing the heap: the operation fails instead
        remove(isWrite(op.opcode) ? fd.writers : fd.readers, op);
        --inFlight_;
        op.loopKey = 0;
        op.result = -ENOMEM;
        return true;
      }
    }
    arm(op.fd, fd);
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

  std::size_t run(int timeoutMs) noexcept override {
    drainRemoteCancels();
    pool_->drainReturned();
    if (!ready_.empty()) timeoutMs = 0;
    if (!heap_.empty() && timeoutMs != 0) {
      // Wake for the earliest deadline (rounded up to the next millisecond).
      const std::int64_t wait = (heap_.front()->loopDeadline - nowNs() + 999999) / 1000000;
      const int untilDeadline = static_cast<int>(std::clamp<std::int64_t>(wait, 0, 1 << 30));
      timeoutMs = timeoutMs < 0 ? untilDeadline : std::min(timeoutMs, untilDeadline);
    }
    epoll_event events[kMaxEvents];
    int n = ::epoll_wait(epollFd_, events, kMaxEvents, timeoutMs);
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
      const int fdNumber = static_cast<int>(data);
      Fd& fd = fds_[static_cast<std::size_t>(fdNumber)];
      fd.armed = 0;  // one-shot: the registration is disarmed now
      const std::uint32_t e = events[i].events;
      if ((e & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) != 0) retry(fd.readers);
      if ((e & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) retry(fd.writers);
      // fds_ does not move here: nothing above submits (completions run below, after).
      arm(fdNumber, fd);
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
  struct Fd {
    List readers;
    List writers;
    // The events the one-shot registration waits for, or 0. Trusted only while the fd
    // has waiters: IoLoop's contract keeps a descriptor open while an operation waits on
    // it, and unqueue() forgets `armed` when the last waiter leaves without an event.
    std::uint32_t armed = 0;
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

  bool hasWaiters(const IoOperation& op) const noexcept {
    const auto index = static_cast<std::size_t>(op.fd);
    if (op.fd < 0 || index >= fds_.size()) return false;
    const Fd& fd = fds_[index];
    return !(isWrite(op.opcode) ? fd.writers : fd.readers).empty();
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
    }
    return -EINVAL;
  }

  // Retries the waiters of one ready direction, oldest first, until one would block.
  // Completed ones move to ready_: their completion functions run after the pass over
  // the events, so that none can submit into fds_ while it is being walked. A readiness
  // wait (kPollReadable/kPollWritable) completes from the event itself, with no poll(2).
  void retry(List& list) noexcept {
    while (!list.empty()) {
      IoOperation& op = *list.head;
      const std::int64_t r = isReadinessWait(op.opcode) ? 0 : attempt(op);
      if (r == -EAGAIN || (op.opcode == IoOpcode::kConnect && r == -EINPROGRESS)) break;
      remove(list, op);
      untime(op);
      op.result = r;
      op.loopKey = kReady;
      append(ready_, op);
    }
  }

  static std::int64_t nowNs() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The deadline heap: a binary min-heap on loopDeadline; each operation knows its
  // position (loopHeapIndex, 1-based; 0 when not in the heap), so one that completes
  // first leaves it in O(log n).
  bool earlier(std::size_t a, std::size_t b) const noexcept {
    return heap_[a]->loopDeadline < heap_[b]->loopDeadline;
  }
  void place(std::size_t i) noexcept { heap_[i]->loopHeapIndex = i + 1; }
  void siftUp(std::size_t i) noexcept {
    while (i > 0 && earlier(i, (i - 1) / 2)) {
      std::swap(heap_[i], heap_[(i - 1) / 2]);
      place(i);
      i = (i - 1) / 2;
    }
    place(i);
  }
  void siftDown(std::size_t i) noexcept {
    for (;;) {
      std::size_t least = i;
      for (std::size_t child : {2 * i + 1, 2 * i + 2}) {
        if (child < heap_.size() && earlier(child, least)) least = child;
      }
      if (least == i) break;
      std::swap(heap_[i], heap_[least]);
      place(i);
      i = least;
    }
    place(i);
  }
  void heapPush(IoOperation& op) {
    heap_.push_back(&op);
    siftUp(heap_.size() - 1);
  }
  void untime(IoOperation& op) noexcept {
    if (op.loopHeapIndex == 0) return;
    const std::size_t i = op.loopHeapIndex - 1;
    op.loopHeapIndex = 0;
    if (i + 1 != heap_.size()) {
      heap_[i] = heap_.back();
      heap_.pop_back();
      siftDown(i);
      siftUp(heap_[i]->loopHeapIndex - 1);
    } else {
      heap_.pop_back();
    }
  }
  // Operations whose deadline passed leave their fd's waiters with -ETIMEDOUT.
  void expireDeadlines() noexcept {
    if (heap_.empty()) return;
    const std::int64_t now = nowNs();
    while (!heap_.empty() && heap_.front()->loopDeadline <= now) {
      IoOperation& op = *heap_.front();
      unqueue(op);
      op.result = -ETIMEDOUT;
      op.loopKey = kReady;
      append(ready_, op);
    }
  }

  void arm(int fdNumber, Fd& fd) noexcept {
    std::uint32_t events = 0;
    if (!fd.readers.empty()) events |= EPOLLIN | EPOLLRDHUP;
    if (!fd.writers.empty()) events |= EPOLLOUT;
    if (events == 0 || events == fd.armed) return;
    epoll_event event{};
    event.events = events | EPOLLONESHOT;
    event.data.u64 = static_cast<std::uint32_t>(fdNumber);
    int r = ::epoll_ctl(epollFd_, EPOLL_CTL_MOD, fdNumber, &event);
    if (r != 0 && errno == ENOENT) r = ::epoll_ctl(epollFd_, EPOLL_CTL_ADD, fdNumber, &event);
    if (r != 0) {
      // Not pollable (EPERM: a regular file), or a closed fd (EBADF): the waiters fail.
      const int error = errno;
      for (List* list : {&fd.readers, &fd.writers}) {
        while (!list->empty()) {
          IoOperation& op = *list->head;
          remove(*list, op);
          untime(op);
          op.result = -error;
          op.loopKey = kReady;
          append(ready_, op);
        }
      }
      fd.armed = 0;
      return;
    }
    fd.armed = events;
  }

  void cancelLocal(IoOperation& op) noexcept override {
    if ((op.loopKey & kQueued) == 0) return;  // completing already, or not in flight
    unqueue(op);
    op.result = -ECANCELED;
    op.loopKey = kReady;
    append(ready_, op);
  }

  // Takes a queued operation off its fd's waiters and the deadline heap, without an
  // event (cancelled, timed out, withdrawn). The one-shot registration may stay armed for
  // a direction nobody waits on: it fires once, finds no waiter and is not re-armed. When
  // the fd has no waiter left, `armed` is forgotten: the descriptor may be closed now,
  // which drops its registration in the kernel, and a socket that gets the same number
  // must be registered anew (EPOLL_CTL_MOD finds nothing, ADD follows), not skipped as
  // "armed already".
  void unqueue(IoOperation& op) noexcept {
    Fd& fd = fds_[static_cast<std::size_t>(op.fd)];
    remove(isWrite(op.opcode) ? fd.writers : fd.readers, op);
    untime(op);
    if (fd.readers.empty() && fd.writers.empty()) fd.armed = 0;
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
  std::vector<IoOperation*> heap_;  // queued operations with a deadline
};

}  // namespace

std::unique_ptr<IoLoop> makeEpollLoop() { return std::make_unique<EpollLoop>(); }

}  // namespace weft::detail
