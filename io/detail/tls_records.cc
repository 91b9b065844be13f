#include "weft/io/detail/tls_records.h"

#include <cerrno>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include "weft/executors/io_loop.h"
#include "weft/io/detail/io_errors.h"
#include "weft/io/incomplete_transfer.h"

namespace weft::detail::tls {

namespace {

// Sends everything OpenSSL has queued, holding `turn` (the send lock), then releases it
// and looks again: bytes queued meanwhile by a reader that found the lock taken (see
// sendIfIdle) are sent by the holder that releases it, so none is left behind.
// A failure or cancellation part-way marks the stream unusable (a record may have been
// cut) and propagates; a transfer's IncompleteTransfer counts ciphertext, so its cause is
// thrown instead.
Lazy<void> sendAll(State& s, ScopedLock<Mutex> turn) {
  try {
    for (;;) {
      // After a send stopped part-way the peer has a cut record: whatever follows would
      // read as garbage (or resend bytes it has), so nothing more is sent.
      if (s.sendCut) co_return;
      for (;;) {
        {
          std::lock_guard lock(s.mutex);
          s.sending.swap(s.output);  // output gets the spare (empty) buffer back
        }
        if (s.sending.empty()) break;
        co_await s.tcp.writeAll(std::span<const std::byte>(
            reinterpret_cast<const std::byte*>(s.sending.data()), s.sending.size()));
        s.sent.fetch_add(s.sending.size(), std::memory_order_release);
        s.sending.clear();
        if (s.sending.capacity() > kKeptSendCapacity) s.sending.release();
      }
      releaseSendBuffer(s.sending);
      turn.unlock();
      {
        std::lock_guard lock(s.mutex);
        if (s.output.empty()) {
          releaseSendBuffer(s.output);
          co_return;
        }
      }
      turn = s.sendMutex.tryScopedLock();
      if (!turn) co_return;  // its holder sends them
    }
  } catch (const IncompleteTransfer& e) {
    s.sendCut = true;  // still the send turn's holder: only writeAll throws here
    s.markUnusable("a send was interrupted part-way");
    std::rethrow_exception(e.cause());
  } catch (...) {
    s.sendCut = true;
    s.markUnusable("a send was interrupted");
    throw;
  }
}

// True when a read may get plaintext (or the end, or an error) without receiving more:
// see Outcome::decryptable; also once the TCP stream ended (OpenSSL then reports the end).
// `unsent`: records are queued that no send has taken yet.
bool decryptableNow(State& s, bool& unsent) {
  std::lock_guard lock(s.mutex);
  unsent = !s.output.empty();
  return s.inputEnded || !s.input.empty() || SSL_has_pending(s.ssl) == 1 ||
         (SSL_get_shutdown(s.ssl) & SSL_RECEIVED_SHUTDOWN) != 0;
}

// A whole buffer of the calling thread's event loop, to decrypt into (receive()).
// Errors: std::logic_error on a thread without a loop; std::system_error ENOBUFS when the
// loop lends none.
LentBuffer lendPlaintextBuffer() {
  LentBuffer buffer = detail::requireIoLoop("receive from a TlsStream").lendBuffer();
  if (buffer.empty()) {
    throw std::system_error(ENOBUFS, std::system_category(),
                            "weft: receive from a TlsStream: the event loop lent no buffer to "
                            "decrypt into");
  }
  return buffer;
}

}  // namespace

Lazy<void> sendQueued(State& s, std::uint64_t target) {
  if (s.sent.load(std::memory_order_acquire) >= target) co_return;
  ScopedLock<Mutex> turn;
  try {
    turn = co_await s.sendMutex.scopedLock();
  } catch (...) {
    s.markUnusable("a send was interrupted");
    throw;
  }
  co_await sendAll(s, std::move(turn));
}

Lazy<void> sendIfIdle(State& s) {
  ScopedLock<Mutex> turn = s.sendMutex.tryScopedLock();
  if (!turn) co_return;
  try {
    co_await sendAll(s, std::move(turn));
  } catch (...) {
  }
}

bool pending(const State& s, const Outcome& o) {
  return o.queued > s.sent.load(std::memory_order_acquire);
}

void takeInput(State& s, LentBuffer data) {
  std::lock_guard lock(s.mutex);
  if (data.empty()) {
    s.inputEnded = true;
  } else {
    s.input = std::move(data);
  }
}

ReadStep readStep(State& s, std::span<std::byte> buffer) {
  std::size_t n = 0;
  const Outcome o =
      callOpenSsl(s, [&](SSL* ssl) { return SSL_read_ex(ssl, buffer.data(), buffer.size(), &n); });
  ReadStep r;
  r.queued = o.queuedByCall;
  switch (o.error) {
    case SSL_ERROR_NONE:
    case SSL_ERROR_ZERO_RETURN:  // the peer's close_notify: n == 0
      r.bytes = static_cast<std::uint32_t>(n);
      r.done = true;
      break;
    case SSL_ERROR_WANT_READ:
      // OpenSSL may stop after a record that carried no data (a session ticket, a key
      // update) with more to take: then it is called again at once.
      r.needInput = !o.inputLeft;
      break;
    default:
      s.readFailure = std::make_exception_ptr(failure(s, "read", o));
      r.failed = true;
  }
  return r;
}

ReadStep decryptStep(State& s, LentBuffer& plain) {
  ReadStep r;
  const bool decryptable = decryptableNow(s, r.queued);
  if (s.readFailure) {
    r.failed = true;
    return r;
  }
  throwIfUnusable(s, "receive");
  if (!decryptable) {
    r.needInput = true;
    return r;
  }
  plain = lendPlaintextBuffer();
  std::size_t filled = 0;
  Outcome o;
  for (;;) {
    std::size_t n = 0;
    o = callOpenSsl(s, [&](SSL* ssl) {
      return SSL_read_ex(ssl, plain.data() + filled, plain.size() - filled, &n);
    });
    filled += n;
    r.queued = r.queued || o.queuedByCall;
    if (o.error != SSL_ERROR_NONE || filled == plain.size() || !o.decryptable) break;
  }
  switch (o.error) {
    case SSL_ERROR_NONE:
    case SSL_ERROR_ZERO_RETURN:  // the peer's close_notify
    case SSL_ERROR_WANT_READ:
      break;
    default:
      if (filled == 0) {
        plain.reset();
        s.readFailure = std::make_exception_ptr(failure(s, "receive", o));
        r.failed = true;
        return r;
      }
      // The bytes before the failure are real: they are returned, the failure is the
      // next read's.
      s.readFailure = std::make_exception_ptr(failure(s, "receive", o));
  }
  if (filled > 0) {
    plain.truncate(filled);
    r.bytes = static_cast<std::uint32_t>(filled);
    r.done = true;
    return r;
  }
  plain.reset();
  r.done = o.error == SSL_ERROR_ZERO_RETURN;
  r.needInput = !r.done && !o.inputLeft;
  return r;
}

}  // namespace weft::detail::tls
