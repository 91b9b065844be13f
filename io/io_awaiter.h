#pragma once

#include <cerrno>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/detail/fd_waits.h"
#include "weft/io/detail/io_errors.h"

namespace weft {

namespace detail {
struct StreamReads;
struct StreamInbox;
}  // namespace detail

// IoAwaiter: one IoOperation on the calling thread's event loop, as an awaiter: the
// cancellation and withdrawal half of every weft I/O awaiter, public for I/O operations
// of one's own (docs/io.md, "An I/O operation of your own": test/io/io_awaiter_test.cc
// has a complete one). A derived awaiter fills in operation() (opcode, fd, buffer...,
// executors/io_loop.h) in its constructor, and its await_resume calls this one's and
// turns the result into its own value; IoOperationAwaitable
// (io/io_operation_awaitable.h) is that, ready-made, for one operation described once.
//
// Use: constructed by the awaitable's coAwait(executor, token), which weft calls with the
// awaiting coroutine's executor and token (coro/awaitable_support.h); the token must
// outlive the await (it does: it is the coroutine's).
// Preconditions: the await runs on a thread with an event loop (a ThreadPool worker);
// the descriptor stays open until the await is over, unless it is closed with weft's own
// close (the owners' close(): see "Close" below). A descriptor of one's own, closed with
// ::close, must clear IoOperation::ownerRetiresFd (set by the constructor for weft's
// descriptors, which are retired from the loop before they are closed), or call
// IoLoop::retireDescriptor(fd) on the loop's thread before closing it.
// Errors: await_ready throws OperationCancelled when the token is already cancelled;
// await_suspend std::logic_error on a thread without an event loop, and what
// IoLoop::submit throws; await_resume OperationCancelled, ExecutorShutDown, or
// std::system_error ECANCELED after a close, and otherwise returns the result, a
// negative one (-errno) as is.
// Thread safety: one await at a time; the cancellation may come from any thread; the
// coroutine must be destroyed (while suspended here) on the thread that awaits.
// Example (docs/io.md has it in full: sendfile(2) once the socket is writable):
//   struct Awaiter : weft::IoAwaiter {
//     Awaiter(int fd, weft::Executor* ex, const weft::CancellationToken& token)
//         : IoAwaiter("sendfile", ex, token) {
//       operation().opcode = weft::IoOpcode::kPollWritable;
//       operation().fd = fd;
//       operation().ownerRetiresFd = false;  // closed with ::close
//     }
//     std::size_t await_resume() { IoAwaiter::await_resume(); return sendSome(); }
//   };
//
// await_suspend submits the operation; the epoll loop may complete it at once (then the
// coroutine does not suspend). Otherwise the loop's completion function resumes the
// coroutine on the loop's thread, which is the thread that submitted it: I/O started on
// a ThreadPool worker completes on that worker.
//
// Cancellation: while in flight, a CancellationCallback on the coroutine's token asks the
// loop to cancel the operation (from any thread). The operation still completes exactly
// once: with ECANCELED once the kernel let go of its buffers (await_resume then throws
// OperationCancelled), or with its own result if it finished first (a read that got data
// returns it: nothing is lost).
//
// Close: while in flight the operation is known to the table of waits (detail/fd_waits.h),
// so a close of its descriptor by weft's owners (TcpStream::close() and the like, from
// any thread) cancels it; it then ends with std::system_error ECANCELED naming the close,
// unless it completed first.
//
// Destroying the coroutine while it is suspended here withdraws the
// operation: on the loop's thread, synchronously (IoLoop::withdraw: the kernel lets go of
// the buffers before the frame is freed), leaving the socket as if nobody had waited. If
// the operation had already taken effect (the kernel read the bytes or accepted the
// connection; its completion only waits for the loop's turn), its wake-up is claimed and
// cannot be withdrawn: weft reports that and aborts, as for every awaitable. On another
// thread the withdrawal cannot be done safely at all, so weft reports that too.
//
// Streams with an inbox: on a loop that keeps a receive armed per stream
// (IoLoop::multishotReceive(), io_uring), a stream's receive() (kReceiveLent) takes
// what the stream's armed request received, and its read(), readExactly() and readable()
// (kReceive, kPollReadable) see those bytes first: they go through the stream's inbox
// (detail::StreamReads, detail/stream_reads.cc), which says there how they wait, complete, and are
// cancelled, timed, closed and withdrawn under the rules above.
//
// A `whole` operation (transferWhole(): IoOperation::whole) resumes the coroutine once,
// when its buffer has moved in full or it failed: weft's loops carry it on after each
// partial transfer themselves. A loop of one's own that ignores IoOperation::whole
// completes it part-way instead; the awaiter then submits the rest from the completion
// (no resumption in between), still tracked for close and cancellation.
class IoAwaiter {
 public:
  IoAwaiter(const char* what, Executor* executor, const CancellationToken& token) noexcept
      : what_(what), executor_(executor), token_(&token) {
    // weft's descriptors are closed through closeDescriptor() and given away through the
    // owners' release(), both of which retire them (IoLoop::retireDescriptor): the epoll
    // loop may keep them registered between operations.
    op_.ownerRetiresFd = true;
  }
  IoAwaiter(const IoAwaiter&) = delete;
  IoAwaiter& operator=(const IoAwaiter&) = delete;
  ~IoAwaiter() {
    if (inFlight_) [[unlikely]] withdraw();
  }

  IoOperation& operation() noexcept { return op_; }

 protected:
  // Makes the operation (kReceive or kSend, with its buffer set) a `whole` one: see the
  // class comment. Before await_suspend.
  void transferWhole() noexcept {
    whole_ = true;
    op_.whole = true;
  }

 public:
  bool await_ready() const {
    token_->throwIfCancellationRequested();
    return false;
  }

  bool await_suspend(std::coroutine_handle<> waiter) {
    IoLoop& loop = detail::requireIoLoop(what_);
    op_.complete = &IoAwaiter::onComplete;
    waiter_ = waiter;
    if (readsStream(loop)) {
      switch (suspendOnStream(loop)) {
        case StreamStep::kDone:
          return false;
        case StreamStep::kWaiting:
          // Cancellable as any operation: cancelStreamRead() stops the wait however it
          // waits by then (directly, parked or in the kernel). Nothing resumes it before
          // this returns: its completions run on this thread.
          if (token_->canBeCancelled()) {
            onCancel_.emplace(*token_, [this] { cancelStreamRead(); });
          }
          return true;
        case StreamStep::kNotStream:
          break;
      }
    }
    while (loop.submit(op_)) {  // done at once
      if (!whole_ || !stoppedPartWay()) [[likely]] return false;
      op_.whole = true;  // the rest (see the class comment)
    }
    inFlight_ = true;
    // Known to closeDescriptor() from now on: a close of the descriptor cancels it. The
    // loop cannot complete it before this returns: completions run on this thread.
    fdWait_.loop = &loop;
    fdWait_.op = &op_;
    detail::trackWait(fdWait_);
    if (token_->canBeCancelled()) {
      // Captures one pointer: stored inline, so this does not throw. If cancellation was
      // already requested it runs now: the cancel then completes the operation later.
      onCancel_.emplace(*token_, [this] { fdWait_.loop->cancel(op_); });
    }
    return true;
  }

  // The operation's result (>= 0). Errors: OperationCancelled when a cancellation stopped
  // it; ExecutorShutDown when the executor stopped it; otherwise a negative result is
  // returned as is (the caller names the failure).
  std::int64_t await_resume() {
    onCancel_.reset();
    if (op_.result == -ECANCELED) [[unlikely]] {
      if (op_.loopShutDown) {
        throw ExecutorShutDown(executor_ != nullptr ? executor_->name() : "I/O event loop");
      }
      if (token_->isCancellationRequested()) throw OperationCancelled();
      if (fdWait_.closed) detail::throwClosedWhileWaiting(what_);
    }
    return op_.result;
  }

 private:
  static void onComplete(IoOperation& op) noexcept {
    IoAwaiter* self = awaiterOf(op);
    if (self->reader_.mode != 0) [[unlikely]] {  // a stream read (see the class comment)
      if (streamCompleted(*self)) self->waiter_.resume();
      return;
    }
    if (self->whole_ && self->stoppedPartWay() && self->submitRest()) [[unlikely]] return;
    self->inFlight_ = false;
    detail::untrackWait(self->fdWait_);
    self->waiter_.resume();
  }

  // The awaiter whose op_ is `op` (its completion's argument). op_ is the first member of
  // a standard-layout class, so the two share an address: no pointer back beside the
  // operation, which would take 8 bytes of every frame waiting in an I/O operation.
  static IoAwaiter* awaiterOf(IoOperation& op) noexcept {
    static_assert(std::is_standard_layout_v<IoAwaiter>);
    return reinterpret_cast<IoAwaiter*>(&op);
  }

  // For a `whole` operation just completed: true when it moved part of what was left
  // (a loop that ignores IoOperation::whole), its buffer then advanced past that part.
  bool stoppedPartWay() noexcept {
    if (op_.result <= 0 || static_cast<std::size_t>(op_.result) >= op_.length) [[likely]] {
      return false;
    }
    op_.buffer = static_cast<std::byte*>(op_.buffer) + op_.result;
    op_.length -= static_cast<std::size_t>(op_.result);
    return true;
  }

  // The rest of a `whole` operation that a loop completed part-way, submitted from its
  // completion (again while it completes part-way at once). True when the rest is in
  // flight; false when the operation has ended: all moved, failed, or -ECANCELED for a
  // cancellation or a close that came between two parts (await_resume tells which).
  // One that comes while the rest is being submitted found nothing in flight to stop:
  // it is passed on once the rest is. Out of line: only a loop of one's own comes here.
  [[gnu::noinline]] bool submitRest() noexcept {
    do {
      if (token_->isCancellationRequested() || detail::closeRequested(fdWait_)) {
        op_.result = -ECANCELED;
        return false;
      }
      op_.whole = true;
      if (!fdWait_.loop->submit(op_)) {
        if (token_->isCancellationRequested() || detail::closeRequested(fdWait_)) {
          fdWait_.loop->cancel(op_);
        }
        return true;
      }
    } while (stoppedPartWay());
    return false;
  }

  // The stream path (stream_read_waits.cc; the design: stream_reads.cc): whether this read
  // goes through its stream's inbox; taking it there (kNotStream: the stream has none after
  // all, the plain path serves it); a completion of its operation there (true: resume); its
  // withdrawal.
  enum class StreamStep : std::uint8_t { kDone, kWaiting, kNotStream };
  bool readsStream(IoLoop& loop) const noexcept {
    switch (op_.opcode) {
      case IoOpcode::kReceiveLent:
        // One with a time limit arms no request: it is a single receive of its own, as on a
        // loop that keeps none, unless its stream already has an inbox (whose arrivals come
        // first). A stream read only with time limits holds no inbox (stream_reads.cc).
        return (op_.timeoutNs < 0 && loop.multishotReceive()) ||
               detail::streamReadsActive(op_.fd);
      case IoOpcode::kReceive:
      case IoOpcode::kPollReadable:
        return detail::streamReadsActive(op_.fd);
      default:
        return false;
    }
  }
  // A cancellation of a read waiting in its stream's inbox, from any thread: a direct
  // wait has no operation of its own, so the stream's armed request is cancelled (its
  // last completion then ends the wait with -ECANCELED, after any arrival it delivered
  // first); a parked or kernel wait's own operation is cancelled.
  void cancelStreamRead() noexcept;
  StreamStep suspendOnStream(IoLoop& loop);
  static bool streamCompleted(IoAwaiter& self) noexcept;
  void withdrawFromStream() noexcept;

  void withdraw() noexcept {
    onCancel_.reset();  // waits for a cancellation callback running on another thread
    if (IoLoop::currentIfAny() != fdWait_.loop) {
      std::fprintf(stderr,
                   "weft: a coroutine suspended in %s was destroyed on a thread other than the "
                   "one whose event loop runs the operation; the kernel may still write into "
                   "its buffers. Destroy it on that thread, or cancel it and let it finish\n",
                   what_);
      std::abort();
    }
    if (reader_.mode != 0) {
      withdrawFromStream();
      return;
    }
    if (!fdWait_.loop->withdraw(op_)) {
      // The kernel had already performed the operation (bytes read, a connection
      // accepted): that cannot be handed back, and nobody is left to receive it.
      abortDestroyedWhileResuming(what_, "its I/O operation had already completed");
    }
    inFlight_ = false;
    detail::untrackWait(fdWait_);
  }

  // A read in its stream's inbox (stream_reads.cc), under the inbox's lock: its place among
  // the stream's readers, how it waits (mode: 0 not in an inbox, then kDirect, kParked,
  // kKernel there), its own opcode (op_ is a kWait while it is parked), and what the
  // stream's request gave it.
  // Only `mode` is set for every awaiter; the rest when it enters an inbox.
  struct Reader {
    IoAwaiter* next;
    IoAwaiter* prev;
    std::int64_t result;      // its result, when served
    std::uint32_t handout;    // which of the inbox's hand-outs it was served
    IoOpcode opcode;
    std::uint8_t mode = 0;
    bool served;              // given its result by the stream's request
    bool retry;               // woken to look at the inbox again
  };

  friend struct detail::StreamReads;
  friend struct detail::StreamInbox;

  // First: awaiterOf finds the awaiter at its operation's address.
  IoOperation op_;
  const char* what_;
  Executor* executor_;
  const CancellationToken* token_;
  std::coroutine_handle<> waiter_;
  bool inFlight_ = false;
  bool whole_ = false;
  // Its wait on the descriptor while in flight; fdWait_.loop is also the loop the operation
  // went to when it waits in its stream's inbox, untracked (see stream_reads.cc).
  detail::FdWait fdWait_;
  Reader reader_;
  std::optional<CancellationCallback> onCancel_;
};

// IoAwaitable<A>: the two ways weft awaits an awaitable A whose awaiter, A::Awaiter (an
// IoAwaiter), is made from (const A&, Executor*, const CancellationToken&): coAwait, with
// the awaiting coroutine's executor and cancellation token (a Lazy or Task's co_await, a
// fiber's await), and operator co_await (any other coroutine: no executor, no token).
// Derive A from it. Errors: what A::Awaiter's constructor throws. Thread safety: as A's.
// Example:
//   class Splice : public weft::IoAwaitable<Splice> {
//    public:
//     class Awaiter : public weft::IoAwaiter {
//      public:
//       Awaiter(const Splice& s, weft::Executor* ex, const weft::CancellationToken& token);
//     };
//   };
template <class A>
class IoAwaitable {
 public:
  auto coAwait(Executor* executor, const CancellationToken& token) const {
    return typename A::Awaiter(static_cast<const A&>(*this), executor, token);
  }
  auto operator co_await() const {
    return typename A::Awaiter(static_cast<const A&>(*this), nullptr, kNoCancellationToken);
  }
};

}  // namespace weft
