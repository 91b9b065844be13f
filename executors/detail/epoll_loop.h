#pragma once

#include <sys/epoll.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "weft/executors/detail/io_loop_base.h"
#include "weft/executors/detail/timer_heap.h"
#include "weft/executors/io_loop.h"

// The epoll event loop (IoBackend::kEpoll), shared by its two files: executors/epoll_loop.cc
// (the loop: how it works, its queues, events and deadlines) and executors/epoll_syscalls.cc
// (the system calls it makes for one operation). Made by detail::makeEpollLoop().

namespace weft::detail::epoll {

inline constexpr std::uint64_t kWakeData = ~std::uint64_t{0};
inline constexpr int kMaxEvents = 256;

// Where an operation is (IoOperation::loopKey).
inline constexpr std::uint64_t kQueued = 1;      // on its fd's readers or writers
inline constexpr std::uint64_t kReady = 2;       // on ready_: complete, its function not yet run
inline constexpr std::uint64_t kConnecting = 4;  // a kConnect that returned EINPROGRESS (flag)

// Fd::generation of a registration made for an operation whose owner does not retire its
// descriptor: trusted by no later operation (a generation never reaches it).
inline constexpr std::uint64_t kUntrusted = ~std::uint64_t{0};

// epoll_event::data of a registration: the number, and the low half of its generation.
inline std::uint64_t eventData(int fd, std::uint64_t generation) noexcept {
  return (generation << 32) | static_cast<std::uint32_t>(fd);
}

// What the epoll loop keeps of an operation's time limit in IoOperation::loopTime: its
// deadline (steady-clock ns) in [1], its position in the deadline heap + 1 in [0] (0: not
// in the heap, what submit sets).
inline std::int64_t& deadlineOf(IoOperation& op) noexcept { return op.loopTime[1]; }
inline std::int64_t deadlineOf(const IoOperation& op) noexcept { return op.loopTime[1]; }

// The deadline heap's view of an operation: by deadlineOf, its position as above.
struct DeadlineOrder {
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  static bool before(const IoOperation& a, const IoOperation& b) noexcept {
    return deadlineOf(a) < deadlineOf(b);
  }
  static void setPosition(IoOperation& op, std::size_t i) noexcept {
    op.loopTime[0] = i == kNone ? 0 : static_cast<std::int64_t>(i + 1);
  }
  static std::size_t position(const IoOperation& op) noexcept {
    return op.loopTime[0] == 0 ? kNone : static_cast<std::size_t>(op.loopTime[0] - 1);
  }
};
using DeadlineHeap = IntrusiveHeap<IoOperation, DeadlineOrder>;
static_assert(DeadlineHeap::kNotInHeap == DeadlineOrder::kNone);

inline bool isWrite(IoOpcode opcode) noexcept {
  return opcode == IoOpcode::kSend || opcode == IoOpcode::kSendMessage ||
         opcode == IoOpcode::kConnect || opcode == IoOpcode::kPollWritable;
}

// kPollReadable/kPollWritable: the loop only waits for readiness, it makes no transfer.
inline bool isReadinessWait(IoOpcode opcode) noexcept {
  return opcode == IoOpcode::kPollReadable || opcode == IoOpcode::kPollWritable;
}

inline std::int64_t result(ssize_t r) noexcept { return r < 0 ? -errno : r; }

// The system call's result says the operation would block: it waits for an event.
inline bool wouldBlock(const IoOperation& op, std::int64_t r) noexcept {
  return r == -EAGAIN || (op.opcode == IoOpcode::kConnect && r == -EINPROGRESS);
}
// The members declared inline are defined in epoll_loop.cc, the only file that calls
// them: submit() and runFor() run them inline, as they did when the class was defined in
// one file.
class EpollLoop final : public IoLoopBase {
 public:
  EpollLoop();
  ~EpollLoop() override;

  IoBackend backend() const noexcept override { return IoBackend::kEpoll; }

  // Counted for the metrics (IoLoopBase::counted). start() leaves op.opcode as it is.
  bool submit(IoOperation& op) noexcept override;

  // submit() without the counting.
  inline bool start(IoOperation& op) noexcept;

  bool withdraw(IoOperation& op) noexcept override;

  std::size_t run(int timeoutMs) noexcept override;

  std::size_t runFor(std::int64_t timeoutNs) noexcept override;

  void shutdown() noexcept override;

 private:
  using List = IoOperationList;
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
  int registerFd(int number, Fd& fd, const IoOperation& op) noexcept;

  // For a readiness wait on a registered fd that may be ready: 1 when `fd` is ready for
  // the direction now (or has an error or a hang-up), 0 when not, -EBADF when closed.
  static int readyNow(int fd, bool write) noexcept;

  Fd& entry(int fd) {
    const auto index = static_cast<std::size_t>(fd);
    if (index >= fds_.size()) fds_.resize(std::max(index + 1, fds_.size() * 2));
    return fds_[index];
  }

  // The system call, non-blocking. -errno on failure.
  std::int64_t attempt(IoOperation& op) noexcept;

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
  inline bool retry(List& list, bool mayDrain = false) noexcept;

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
  inline int wait(epoll_event* events, std::int64_t timeoutNs) noexcept;

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
  inline void expireDeadlines() noexcept;

  void cancelLocal(IoOperation& op) noexcept override;

  // Takes a queued operation off its fd's waiters and the deadline heap, without an
  // event (cancelled, timed out, withdrawn). The registration and the readiness stay as
  // they are: the next waiter, if any, waits for the same edge; once the fd has no waiter
  // left, the descriptor may be closed, and trusted() decides at the next submit whether
  // the registration still holds.
  inline void unqueue(IoOperation& op) noexcept;

  // Runs the completion functions of ready_, including those of operations that the
  // completions themselves cancel (a completion may withdraw another from ready_).
  inline std::size_t runReady() noexcept;

  int epollFd_ = -1;
  std::vector<Fd> fds_;
  List ready_;  // complete (or cancelled, or failed), completion function not yet run
  DeadlineHeap heap_;  // queued operations with a deadline
};

}  // namespace weft::detail::epoll
