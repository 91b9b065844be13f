#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "weft/executors/lent_buffer.h"

namespace weft {

// Which kernel interface an event loop drives.
enum class IoBackend : std::uint8_t {
  kIoUring,  // io_uring through liburing: operations are submitted and complete in the kernel
  kEpoll,    // epoll: the loop waits for readiness, then makes the system call itself
};

// What a loop should be: a backend, or `kAuto` (WEFT_IO_BACKEND if set, else epoll).
enum class IoBackendChoice : std::uint8_t { kAuto, kIoUring, kEpoll };

// "io_uring" or "epoll". noexcept: a table lookup.
std::string_view ioBackendName(IoBackend backend) noexcept;

// One system call an event loop performs for an awaitable. A length above 0x7ffff000 is
// a partial transfer of that many bytes, as for read(2). The awaitable owns it (it
// lives in the coroutine frame) and must keep it, and every buffer it points to, alive
// and unchanged from IoLoop::submit until `complete` has run or IoLoop::withdraw returned
// (the loop itself sets the fields it says it sets: a `whole` operation's buffer and
// length, the result).
// The descriptor `fd` must stay open for as long too: a loop may key its state by the
// number (epoll does), so closing it under a waiting operation would hand that state to
// the next descriptor with the same number. To close while operations wait, cancel them
// and close when the last has completed (weft's streams do this in close()).
// Between operations the epoll loop keeps a descriptor registered with its epoll (see
// ownerRetiresFd): a descriptor may be closed then, and its number reused.
enum class IoOpcode : std::uint8_t {
  kReceive,         // recv(fd, buffer, length, flags)
  kSend,            // send(fd, buffer, length, flags | MSG_NOSIGNAL)
  kAccept,          // accept4(fd, address, &addressLength, SOCK_NONBLOCK | SOCK_CLOEXEC)
  kConnect,         // connect(fd, address, addressLength); result 0 once connected
  kReceiveMessage,  // recvmsg(fd, message, flags)
  kSendMessage,     // sendmsg(fd, message, flags | MSG_NOSIGNAL)
  kReadAt,          // pread(fd, buffer, length, offset); offset <= INT64_MAX
  kWriteAt,         // pwrite(fd, buffer, length, offset); offset <= INT64_MAX
  kSync,            // fsync(fd), or fdatasync(fd) when flags == kSyncDataOnly
  kPollReadable,    // waits until fd is readable (or has an error); result 0
  kPollWritable,    // waits until fd is writable (or has an error); result 0
  // recv(fd, a buffer the loop lends, its size, flags) on a stream socket: result the bytes
  // received (0 at the end of the stream), which `lent` then holds (empty for 0). `buffer`
  // and `length` are not used. A receive that gets less than a buffer's size may be
  // taken to have emptied the socket (the epoll loop then waits for the next edge). The loop picks the buffer only when data is there (io_uring: from its
  // provided-buffer ring; epoll: from its pool, after readiness), so a wait holds none.
  kReceiveLent,
  // recvmsg(fd, message, flags) of ONE datagram into a buffer the loop lends, on a datagram
  // socket. `message` is as for kReceiveMessage (msg_name and msg_namelen receive the
  // sender; msg_flags comes back with MSG_TRUNC when the datagram was longer than the
  // buffer, whose size it was then cut to), except that msg_iov points to exactly one
  // iovec (msg_iovlen 1) which the loop fills in with the buffer it picks for each attempt
  // (what the awaitable put there is not used). Result: the bytes of the datagram stored,
  // which `lent` then holds; 0 is an empty datagram (not an end: datagram sockets have
  // none) and leaves `lent` empty. As for kReceiveLent, the loop picks the buffer only when
  // a datagram is there, so a wait holds none.
  kReceiveMessageLent,
  // A receive kept armed (IoArmedReceive, IoLoop::armReceive): the opcode its submissions
  // and completions are counted under (pool metrics' "receive_multishot"). An IoOperation
  // with it completes at once with -EOPNOTSUPP on every loop.
  kReceiveMultishot,
  // No system call: the operation waits until cancel() ends it (-ECANCELED) or its time
  // limit passes (-ETIMEDOUT), for an awaitable that waits for an event of its own (a
  // stream's arrival, delivered by an IoArmedReceive's completion) with the loop's time
  // limits, cancellation from any thread and withdrawal. `fd` is not used. A loop that
  // does not offer it (weft's epoll loop) completes it at once with -EOPNOTSUPP: weft
  // submits it only for a read of a stream whose receive a loop keeps armed
  // (multishotReceive()), which then fails with that error.
  kWait,
};

struct IoOperation {
  static constexpr int kSyncDataOnly = 1;

  // Set by the awaitable before submit.
  IoOpcode opcode = IoOpcode::kReceive;
  // True when whoever owns `fd` calls IoLoop::retireDescriptor(fd) before it closes fd or
  // hands it to code that may close it (weft's sockets, listeners, files and signal sets
  // do, in close() and release()). The epoll loop then trusts the registration it made
  // for fd while no retirement came, and an operation that has to wait makes no
  // epoll_ctl. False (the default, for descriptors the loop cannot know about): each wait
  // that starts when none is pending on fd checks the registration with one epoll_ctl, so
  // a descriptor closed behind the loop's back and a new one with the same number are
  // still served. io_uring registers nothing and ignores it.
  bool ownerRetiresFd = false;
  // kReceive and kSend on a stream socket: when true, a partial transfer does not complete
  // the operation. The loop advances `buffer` and `length` past the bytes moved and goes
  // on with the rest in the operation's place (no operation issued later in the same
  // direction on `fd` moves a byte in between), each further wait with its time limit
  // started anew, until the whole `length` has moved, an attempt fails, or a receive finds
  // the end of the stream. `result` is then the last attempt's: the bytes it moved (0 at
  // the end of the stream) or -errno; the bytes moved in all are the distance `buffer`
  // advanced plus a non-negative result. A cancellation, a time limit or a shutdown that
  // stops it after some bytes moved completes it as it would any operation (-ECANCELED,
  // -ETIMEDOUT), `buffer` advanced past them: no byte that moved goes unreported. This is
  // TcpStream::writeAll's and readExactly's single operation. A loop of one's own may
  // ignore it and complete each partial transfer as usual: weft's awaitables then submit
  // the rest themselves (resetting it to true), and a later operation may then go first.
  bool whole = false;
  int fd = -1;
  int flags = 0;
  socklen_t addressLength = 0;  // kAccept: capacity in, length out; kConnect: length
  void* buffer = nullptr;
  std::size_t length = 0;
  std::uint64_t offset = 0;
  sockaddr* address = nullptr;  // kAccept: where the peer's address goes; kConnect: the target
  msghdr* message = nullptr;    // kReceiveMessage, kSendMessage
  // When >= 0: the loop stops the operation if it has not completed this many
  // nanoseconds after submit, with result -ETIMEDOUT (once the kernel has let go of the
  // buffer; an operation that completed first keeps its result). io_uring: a linked
  // timeout in the kernel; epoll: the loop's own deadline heap and epoll_wait's timeout.
  std::int64_t timeoutNs = -1;

  // Set by the loop: the system call's result (bytes, a new fd, 0), or -errno on failure,
  // -ECANCELED when IoLoop::cancel stopped it first.
  std::int64_t result = 0;
  // kReceiveLent, kReceiveMessageLent: the bytes received, set by the loop with the
  // result; the awaitable takes it. One left here is given back when the operation is
  // destroyed.
  LentBuffer lent;

  // Runs exactly once on the loop's thread when the operation is complete, unless submit
  // completed it at once (returned true) or withdraw() took it back. noexcept: it runs
  // inside the loop, where an exception has nowhere to go; it usually resumes a
  // coroutine.
  void (*complete)(IoOperation& op) noexcept = nullptr;

  // The loop's bookkeeping while the operation is in flight; not for the awaitable.
  IoOperation* loopNext = nullptr;
  IoOperation* loopPrev = nullptr;
  IoOperation* cancelNext = nullptr;
  std::uint64_t loopKey = 0;
  // The time limit as the loop keeps it, one pair for both backends: io_uring, the linked
  // timeout's timespec (seconds, nanoseconds); epoll, the position in its deadline heap
  // plus 1 (0: none) and the deadline (steady-clock ns).
  std::int64_t loopTime[2] = {0, 0};
  std::uint32_t loopBuffer = BufferPool::kNone;  // a pool buffer the loop holds for it
  bool loopCancelled = false;           // cancel() reached the loop for this operation
  // 0: not in flight or in flight; 1: a cancellation from another thread is queued;
  // 2: complete. See IoLoop::cancel.
  std::atomic<std::uint8_t> loopState{0};

  // Set by the loop for the awaitable, like `result` (here, beside the loop's small fields,
  // so that the operation has no holes):
  // kReceiveMultishot: set by the loop before each run of `complete`: true while the
  // request stays armed (more completions follow), false for its last completion.
  bool more = false;
  // Set by the loop when it completed the operation because the loop is shutting down
  // (its executor is stopping): result is then -ECANCELED, and the awaitable should
  // report ExecutorShutDown rather than a cancellation.
  bool loopShutDown = false;
};

// IoArmedReceive: recv(fd, buffers the loop lends, flags) on a stream socket, kept armed
// (IoLoop::armReceive): one request in the kernel that receives every time data arrives,
// until it ends. A record of its own rather than an IoOperation, a third of the size: a
// stream keeps one for as long as it is read, idle or not
// (docs/design/2026-11-idle-connection-memory.md).
//
// `complete` runs on the loop's thread once per arrival, with `more` set (result: the
// bytes, > 0, which `received` holds; the completion function takes them out of it, or
// they go back to the loop when it returns), the request staying armed; and a last time
// with `more` clear: then `result` is the bytes of a last arrival (> 0, in `received`), 0
// at the end of the stream, -ECANCELED when cancelArmed() ended it (`shutDown` set when
// the loop's shutdown did), -EOPNOTSUPP when the kernel refused the multishot form at
// its first completion (nothing was received: receive otherwise), or -errno. The
// record is armed until that last completion has begun: until then its owner keeps it
// alive and unchanged, and the descriptor open; it may be destroyed or armed again from
// the last completion on. A completion may call cancelArmed() on its own record; it must
// not arm it again before its last completion. No other receive on `fd` may be in flight
// on any loop meanwhile: the kernel would serve them in no defined order (weft's streams
// see to it, io/detail/stream_reads.cc). There is no time limit and no withdrawal: a
// record is ended by cancelArmed() and its last completion.
struct IoArmedReceive {
  // What one completion reports (see above): the arguments of `complete`.
  struct Completion {
    std::int64_t result = 0;
    LentBuffer received;
    bool more = false;
    bool shutDown = false;
  };

  // Set by the owner before armReceive. noexcept: it runs inside the loop, as
  // IoOperation::complete does.
  void (*complete)(IoArmedReceive& request, Completion& completion) noexcept = nullptr;
  int fd = -1;
  int flags = 0;

  // The loop's bookkeeping while the request is armed; not for its owner. As
  // IoOperation's fields of the same names (cancellation from other threads: loopState).
  IoArmedReceive* cancelNext = nullptr;
  std::uint64_t loopKey = 0;
  std::uint32_t loopBuffer = BufferPool::kNone;  // a pool buffer the loop holds for it
  bool loopCancelled = false;
  std::atomic<std::uint8_t> loopState{0};
};
static_assert(sizeof(IoArmedReceive) <= 40, "a stream keeps one while it is read: keep it small");

// IoLoop: an event loop on one thread, the part of an executor that performs I/O.
//
// weft's I/O awaitables (io/) find the loop of the thread they run on with
// IoLoop::current(), submit an IoOperation to it, and resume when its completion
// function runs. ThreadPool gives every worker a loop of its own (created when the worker
// first does I/O), so I/O started on a worker completes on that worker. An executor of
// one's own can serve the same awaitables: create a loop per thread with IoLoop::create,
// make it current on that thread (IoLoop::CurrentScope), and call run() whenever the
// thread has nothing else to do (and from time to time when it does, with a zero
// timeout); wake() interrupts a blocked run() from any thread. An executor that offers no
// I/O binds no loop: the awaitables then fail with a clear error naming the thread.
//
// Thread safety: submit, withdraw, run, shutdown and hasWork on the loop's own thread
// only; cancel and wake from any thread.
//
// Example (a user's executor thread):
//   auto loop = weft::IoLoop::create(weft::IoBackendChoice::kAuto);
//   weft::IoLoop::CurrentScope scope(loop.get());
//   while (running) { runQueuedWork(); loop->run(queueEmpty() ? -1 : 0); }
class IoLoop {
 public:
  virtual ~IoLoop() = default;
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  // A new loop for the calling thread. kAuto resolves as resolveBackend() says.
  // Errors: std::system_error when the kernel refuses (ENOMEM, EMFILE, or io_uring
  // forced where it is unavailable), naming the backend and the errno.
  static std::unique_ptr<IoLoop> create(IoBackendChoice choice);

  // The backend `choice` stands for on this machine: kAuto reads WEFT_IO_BACKEND
  // ("io_uring", "epoll" or "auto") and otherwise is epoll, weft's default (it costs less
  // CPU per request than io_uring on the kernels measured, and serves reads of cached files
  // without a thread hop: docs/io.md, "Which backend"). io_uring is used only when asked
  // for, and never silently replaced by epoll.
  // Errors: std::system_error when io_uring is asked for (by `choice` or WEFT_IO_BACKEND)
  // and the process cannot use it (ENOSYS, EPERM/EACCES as under seccomp, EINVAL, or a
  // lack of resources), with the errno; std::invalid_argument for a WEFT_IO_BACKEND that
  // names no backend.
  static IoBackend resolveBackend(IoBackendChoice choice);

  // True when a loop of `backend` can run in this process: epoll always; io_uring when
  // weft was built with liburing and the kernel offers what weft uses (the probe above,
  // run once; a probe that failed for lack of resources answers false here).
  // noexcept: the probe's failures are its answer.
  static bool available(IoBackend backend) noexcept;

  // The loop of the calling thread, created on first use when the thread's executor
  // creates loops lazily (ThreadPool), or nullptr when the thread has none.
  // Errors: std::system_error if the lazily created loop cannot be set up.
  static IoLoop* current();
  // The calling thread's loop if it has one already; never creates one. noexcept: a
  // thread_local read.
  static IoLoop* currentIfAny() noexcept;

  // Makes `loop` the calling thread's current loop for the scope's lifetime (restoring
  // the previous one after). noexcept: two thread_local stores.
  class CurrentScope {
   public:
    explicit CurrentScope(IoLoop* loop) noexcept;
    ~CurrentScope();
    CurrentScope(const CurrentScope&) = delete;
    CurrentScope& operator=(const CurrentScope&) = delete;

   private:
    IoLoop* previous_;
  };

  // For executors that create loops lazily: on the calling thread, IoLoop::current()
  // calls `make(context)` the first time it is asked and no loop is current; `make`
  // returns the new loop (owned by the executor) or throws. Pass nullptr to clear.
  // noexcept: thread_local stores.
  using LoopFactory = IoLoop* (*)(void* context);
  static void setCurrentFactory(LoopFactory make, void* context) noexcept;

  // Tells every loop of the process that the number `fd` is about to stop naming the open
  // file it names now: call it just before closing `fd`, or before handing it to code
  // that may close it, if operations with IoOperation::ownerRetiresFd have used it. An
  // epoll loop that registered the descriptor then registers the number anew the next
  // time an operation waits on it, instead of trusting a registration that the kernel
  // dropped with the old file (an operation of the number's next owner would wait forever).
  // Does nothing for fd < 0. Calling it for a descriptor no loop has seen is harmless (at
  // most one epoll_ctl more, later).
  // noexcept: one atomic increment in a fixed table. Thread safety: any thread.
  static void retireDescriptor(int fd) noexcept;

  virtual IoBackend backend() const noexcept = 0;

  // Starts `op`. Returns true when the operation completed at once (op.result is set and
  // complete will not run: the epoll loop tries the system call first), false when it is
  // in flight: op.complete then runs later, on this thread, from run(). Never runs
  // op.complete itself. noexcept: a failure to start the operation is its result
  // (-errno). After shutdown() every operation completes at once with -ECANCELED and
  // op.loopShutDown set.
  virtual bool submit(IoOperation& op) noexcept = 0;

  // Asks the loop to stop `op` (in flight on this loop). It still completes exactly once:
  // with -ECANCELED once the kernel has let go of its buffers, or with its own result if
  // it finished first (a read that got data returns it). May be called from any thread
  // while `op` is in flight (the caller guarantees `op` stays alive during the call).
  // noexcept: a queue push, or a cancellation request to the kernel.
  virtual void cancel(IoOperation& op) noexcept = 0;

  // Takes `op` back for good, on this thread (to destroy a coroutine suspended on it):
  // when it returns, the kernel no longer uses `op` or its buffers, and op.complete will
  // not run. Returns true when the operation never took effect (the bytes are still
  // unread, the connection still in the backlog), false when it had already completed
  // and its effect cannot be undone (io_uring: the kernel had performed it; both: its
  // completion was waiting for this loop's turn): a wake-up already claimed, which the
  // caller reports (#15's rule). noexcept: the kernel's synchronous cancellation cannot
  // fail in a way that could be reported; if it did, weft prints a message and aborts.
  [[nodiscard]] virtual bool withdraw(IoOperation& op) noexcept = 0;

  // Runs the loop once: hands queued operations to the kernel, waits up to `timeoutMs`
  // milliseconds (0: do not wait; -1: until something happens) for completions or a
  // wake(), and runs the completion functions. Returns how many ran.
  // noexcept: completion functions are noexcept; kernel errors abort with a message.
  virtual std::size_t run(int timeoutMs) noexcept = 0;

  // run() with a timeout in nanoseconds (0: do not wait; negative: until something
  // happens), for an executor that wakes its thread for its own timers (ThreadPool's
  // workers park here until their earliest timer). weft's loops wait with the kernel's
  // nanosecond timeouts (io_uring's timespec; epoll_pwait2, or epoll_wait in whole
  // milliseconds on kernels without it); this default rounds up to the next millisecond
  // and calls run(), so a loop of one's own may keep only run().
  // noexcept: as run().
  virtual std::size_t runFor(std::int64_t timeoutNs) noexcept {
    if (timeoutNs < 0) return run(-1);
    constexpr std::int64_t kMaxMs = 1 << 30;  // about 12 days; a caller waits again after
    const std::int64_t ms = timeoutNs / 1000000 + (timeoutNs % 1000000 != 0 ? 1 : 0);
    return run(static_cast<int>(ms < kMaxMs ? ms : kMaxMs));
  }

  // Interrupts a run() that waits (now or next). Any thread. noexcept: one write(2).
  virtual void wake() noexcept = 0;

  // True while operations are in flight (run() has something to wait for).
  virtual bool hasWork() const noexcept = 0;

  // True when this loop arms receives (armReceive, IoArmedReceive), and then serves kWait
  // too (weft's io_uring loop, unless WEFT_IO_URING_SETUP says `singleshot` or the kernel
  // lacks multishot receive; it serves kWait either way): weft's streams then keep one
  // receive armed per stream instead of submitting one per receive(). False by default.
  // noexcept: reads a flag.
  virtual bool multishotReceive() const noexcept { return false; }

  // Arms `request` (its complete, fd and flags set): 0 when armed (its completions then
  // run from run(), on this thread, the last one with `more` clear), else it was not
  // armed and `complete` will not run: -EOPNOTSUPP from a loop that keeps no such
  // requests (multishotReceive() false; the default), -ECANCELED after shutdown(), or
  // another -errno (-EBUSY, -ENOMEM) when the loop could not take it. On the loop's
  // thread. noexcept: failures are the result.
  virtual int armReceive(IoArmedReceive& request) noexcept {
    (void)request;
    return -EOPNOTSUPP;
  }

  // Ends `request`, armed on this loop: its last completion still comes (-ECANCELED, or
  // the end or failure that came first), arrivals before it may still come. Any thread,
  // while the request is armed (the caller keeps it alive during the call); a second
  // call does nothing more. noexcept: a queue push, or a cancellation request to the
  // kernel.
  virtual void cancelArmed(IoArmedReceive& request) noexcept { (void)request; }

  // How many buffers this loop has lent (kReceiveLent, kReceiveMessageLent) that have not
  // come back (on any thread). For tests and metrics; on the loop's thread. A loop that
  // lends nothing answers 0. noexcept: a counter (after taking in what other threads gave back).
  virtual std::size_t lentBuffers() const noexcept { return 0; }

  // Lends one of the loop's receive buffers, whole and unfilled (size() is the loop's
  // buffer size, 64 KiB for weft's loops), to an awaitable that fills it itself rather
  // than having the kernel receive into it: TlsStream::receive decrypts into one. The
  // caller writes its bytes from data(), cuts the LentBuffer to what it wrote with
  // LentBuffer::truncate, and gives it back like any other (destroying it, on any thread;
  // lentBuffers() counts it meanwhile). Take one only once there is something to put in
  // it, and give it back before waiting, so that a waiting operation holds none.
  // Returns an empty LentBuffer when the loop lends no buffers (the default, for loops
  // that serve no kReceiveLent) or cannot (its pool at its limit, or memory short).
  // On the loop's thread only. noexcept: a free-list pop, or an allocation whose failure
  // is the empty answer.
  virtual LentBuffer lendBuffer() noexcept { return {}; }

  // Cancels every operation in flight (each completes with -ECANCELED and loopShutDown
  // set) and refuses later ones the same way. Call run() until hasWork() is false.
  virtual void shutdown() noexcept = 0;

 protected:
  IoLoop() = default;
};

}  // namespace weft
