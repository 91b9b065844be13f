#pragma once

#include <coroutine>
#include <cstdint>
#include <span>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/executors/executor.h"
#include "weft/executors/lent_buffer.h"
#include "weft/io/detail/socket_ops.h"
#include "weft/io/detail/tls_state.h"

// TlsStream's record I/O, between OpenSSL and the TcpStream: the ciphertext OpenSSL queued
// is sent in order by one sender at a time, ciphertext is received into the state's
// input, and plaintext is read out of OpenSSL a record (or a lent buffer) at a time. The
// state and the OpenSSL calls: io/detail/tls_state.h.
namespace weft::detail::tls {

// ---- sending the ciphertext OpenSSL queued ---------------------------------------------

// Sends the ciphertext queued up to `target` (and whatever else is queued), in order,
// whoever queued it; returns once it was handed to the kernel (writes, handshakes,
// shutdown).
Lazy<void> sendQueued(State& s, std::uint64_t target);

// Sends what a read queued (an alert; OpenSSL sends a key update's answer with the next
// write) if no send is in progress; else the sender in progress sends it when it
// finishes. A reader never waits for a writer's records to drain: a writer may wait for
// the peer to read, and the peer's writer for us to read. A failure to send marks the
// stream unusable (the next operation reports it) and is not thrown: the read's data is
// returned.
Lazy<void> sendIfIdle(State& s);

// Whether ciphertext up to what `o` saw queued is still to be sent.
bool pending(const State& s, const Outcome& o);

// ---- receiving ciphertext ----------------------------------------------------------------

// Takes what receive() returned: ciphertext, or the end of the TCP stream.
void takeInput(State& s, LentBuffer data);

// `co_await ReceiveCiphertext{s}`: the TcpStream's receive(), its bytes (or the end of
// the stream) taken into `input`. The TcpStream's own awaiter, reached through an
// awaitable of one pointer and with nothing beside it, because every byte here is kept
// in the frame of each read waiting for data, which is what an idle connection costs:
// co_await keeps its awaitable in the frame with the awaiter (a ReceiveLentAwaitable took
// 80 bytes when this was written, 16 now), the LentBuffer it returns would take 32 more
// (40 then), and a State* of the awaiter's own 8 more, which is what put receive()'s
// frame past the frame allocator's class of 632 bytes into that of 760. So the State*
// rides in the operation's `buffer`, which kReceiveLent leaves unused (IoOpcode's
// contract, executors/io_loop.h: "`buffer` and `length` are not used").
struct ReceiveCiphertext {
  State* s;

  class Awaiter {
   public:
    Awaiter(State& s, Executor* executor, const CancellationToken& token)
        : receive_(s.tcp.receive().coAwait(executor, token)) {
      receive_.operation().buffer = &s;
    }
    bool await_ready() { return receive_.await_ready(); }
    bool await_suspend(std::coroutine_handle<> waiter) { return receive_.await_suspend(waiter); }
    void await_resume() {
      State& s = *static_cast<State*>(receive_.operation().buffer);
      takeInput(s, receive_.await_resume());
    }

   private:
    detail::ReceiveLentAwaitable::Awaiter receive_;
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return Awaiter(*s, executor, token);
  }
};

// ---- reading plaintext -------------------------------------------------------------------

// What one attempt to read plaintext came to (readStep, decryptStep). The work is done
// outside the coroutines, so that their frames, which a connection waiting for data
// keeps, hold only this (8 bytes) and their awaits.
struct ReadStep {
  std::uint32_t bytes = 0;  // plaintext read (one record, or one lent buffer)
  bool done = false;        // return: the bytes (> 0), or the clean end (0)
  bool queued = false;      // records to send, queued by a read (an alert) or left unsent
  bool needInput = false;   // receive ciphertext first (else: call again at once)
  bool failed = false;      // throw State::readFailure (after sending what was queued)
};

// One SSL_read_ex into `buffer` (non-empty).
ReadStep readStep(State& s, std::span<std::byte> buffer);

// receive()'s step: decrypts into `plain` (empty on entry) a buffer of the calling
// thread's loop, taken only once OpenSSL may have plaintext for it and given back unless
// it got some, so that a receive waiting for the peer holds none. Record after record
// while OpenSSL has them whole (SSL_read_ex returns one at a time) and the buffer has
// room; it stops at a record that is not all here. A failure met after the bytes an
// earlier receive returned comes first (failed), and records a read queued that no send
// took yet are reported (queued) whenever no bytes are returned, so that they go out
// before the receive waits or throws.
ReadStep decryptStep(State& s, LentBuffer& plain);

}  // namespace weft::detail::tls
