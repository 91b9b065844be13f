#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/detail/io_request.h"
#include "weft/io/detail/socket_ops.h"

namespace weft::detail {

// How a whole transfer that stopped reports it (out of line: the cold paths, and
// EndOfStream lives in tcp_stream.h, which includes this header).
//  - throwStoppedWhole: called while handling the failure that stopped it after `done`
//    of `size` bytes: rethrows it when done == 0, else throws IncompleteTransfer
//    (`operation`, done, size) with it as the cause.
//  - throwEndedWhole: the last attempt moved nothing (a receive found the end of the
//    stream): EndOfStream(done) for a read; for a write (a send of a non-empty buffer
//    never returns 0: a defence only) std::system_error EIO under the rule above.
[[noreturn]] void throwStoppedWhole(const char* operation, std::size_t done, std::size_t size);
[[noreturn]] void throwEndedWhole(const char* operation, const char* what, IoOpcode opcode,
                                  std::size_t done, std::size_t size);

// WholeTransferAwaitable: TcpStream::writeAll of one buffer and TcpStream::readExactly as
// an awaitable without a coroutine frame of its own: one IoOperation (kSend or kReceive)
// with IoOperation::whole, which the event loop carries on after each partial transfer,
// in its place in the stream's order, so the awaiting coroutine suspends and resumes once,
// when the buffer has moved in full or the transfer failed (IoAwaiter says how a loop
// that ignores `whole` is served).
//
// Results and errors, as tcp_stream.h documents writeAll and readExactly: an empty buffer
// completes at once, with no check at all; EBADF (from co_await, nothing submitted) on a
// closed stream; with 0 bytes moved a failure propagates unchanged (std::system_error
// naming `what`, OperationCancelled, ExecutorShutDown, ECANCELED for a close); after n >= 1
// bytes it is IncompleteTransfer(`operation`, n, size) with that failure as its cause; a
// read that finds the end of the stream throws EndOfStream(n). The stream's time limit
// applies to each wait for room (data), from its start, as it did to each partial write.
//
// TcpStream's writeAll and readExactly return awaitWhole(...) of it: a Lazy whose frame
// holds the operation only while the transfer runs, where the awaitable itself, awaited
// directly, would put its awaiter (about 400 bytes) in the frame of every coroutine that
// awaits it, idle or not. Each await is a new transfer of the whole buffer.
//
// Thread safety: a value (a descriptor, a buffer, a time limit); awaited as the stream's
// operations are.
class WholeTransferAwaitable : public IoAwaitable<WholeTransferAwaitable> {
 public:
  // `operation` names the whole ("writeAll to a TcpStream"), `what` one system call of it
  // ("write to a TcpStream"); `opcode` is kSend or kReceive.
  WholeTransferAwaitable(const char* operation, const char* what, IoOpcode opcode, int fd,
                         void* data, std::size_t size, std::int64_t timeoutNs) noexcept
      : operation_(operation),
        what_(what),
        data_(data),
        size_(size),
        timeoutNs_(timeoutNs),
        fd_(fd),
        opcode_(opcode) {}

  class Awaiter : public IoAwaiter {
   public:
    Awaiter(const WholeTransferAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token),
          operation_(a.operation_),
          what_(a.what_),
          base_(static_cast<std::byte*>(a.data_)),
          size_(a.size_) {
      if (size_ == 0) return;  // completes at once, whatever the stream's state
      describeOpen(operation(),
                   {.opcode = a.opcode_,
                    .fd = a.fd_,
                    .buffer = a.data_,
                    .length = a.size_,
                    .timeoutNs = a.timeoutNs_},
                   a.what_);
      transferWhole();
    }

    bool await_ready() const { return size_ == 0 || IoAwaiter::await_ready(); }

    void await_resume() {
      if (size_ == 0) return;
      try {
        if (const std::int64_t r = IoAwaiter::await_resume(); r < 0) [[unlikely]] {
          throwIoError(r, what_);
        }
      } catch (...) {
        throwStoppedWhole(operation_, moved(), size_);
      }
      if (moved() != size_) [[unlikely]] {
        throwEndedWhole(operation_, what_, operation().opcode, moved(), size_);
      }
    }

   private:
    // The bytes moved in all: the loop advanced the buffer past the earlier parts.
    std::size_t moved() noexcept {
      const IoOperation& op = operation();
      return static_cast<std::size_t>(static_cast<std::byte*>(op.buffer) - base_) +
             (op.result > 0 ? static_cast<std::size_t>(op.result) : 0);
    }

    const char* operation_;
    const char* what_;
    std::byte* base_;
    std::size_t size_;
  };

 private:
  const char* operation_;
  const char* what_;
  void* data_;
  std::size_t size_;
  std::int64_t timeoutNs_;
  int fd_;
  IoOpcode opcode_;
};

// What TcpStream's writeAll and readExactly return: a Lazy that awaits `whole`.
inline Lazy<void> awaitWhole(WholeTransferAwaitable whole) { co_await whole; }

}  // namespace weft::detail
