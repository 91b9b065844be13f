#pragma once

// TlsStream's internals, shared by its files: io/tls_stream.cc (the API and the
// handshake), io/detail/tls_records.cc (sending and receiving records),
// io/detail/tls_state.cc (the BIO between OpenSSL and the state, failures) and
// io/detail/tls_send_buffer.cc (the ciphertext's buffers).

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "weft/coro/mutex.h"
#include "weft/executors/lent_buffer.h"
#include "weft/io/detail/tls_send_buffer.h"
#include "weft/io/tcp_stream.h"
#include "weft/io/tls_context.h"
#include "weft/io/tls_error.h"
#include "weft/io/tls_stream.h"

namespace weft {

// The connection's state. OpenSSL reads ciphertext from `input` and writes it to
// `output` through a BIO of ours (bio* below), always under `mutex`, which no one holds
// across an await; the awaits (receive into `input`, send `output`) happen between
// OpenSSL calls. Every connection keeps one (256 bytes): what only some need is behind a
// pointer, and the flags are together.
struct TlsStream::State {
  using SendBuffer = detail::tls::SendBuffer;

  TcpStream tcp;
  TlsContext context;
  SSL* ssl = nullptr;
  // A client's session-cache key (SSL ex_data points to its characters); servers: none.
  std::unique_ptr<std::string> sessionKey;

  std::mutex mutex;          // OpenSSL calls, input, inputEnded, output, queued, failure
  LentBuffer input;          // ciphertext received, not yet taken by OpenSSL
  SendBuffer output;         // ciphertext OpenSSL wrote, not yet taken to be sent
  std::uint64_t queued = 0;  // bytes ever appended to output
  std::unique_ptr<std::string> failure;  // why the stream is unusable (none while usable)

  Mutex sendMutex;                     // one sender at a time, in the order of `output`
  SendBuffer sending;                  // the bytes being sent (under sendMutex)
  std::atomic<std::uint64_t> sent{0};  // bytes of output sent (written under sendMutex)

  // A failure OpenSSL reported after a receive() had decrypted some bytes: that receive
  // returned them, the next read or receive throws this (the reader's only).
  std::exception_ptr readFailure;

  bool inputEnded = false;  // the TCP stream ended (under mutex)
  std::atomic<bool> unusable{false};
  bool sendCut = false;  // a send stopped part-way: send nothing more (under sendMutex)
  std::atomic<bool> reading{false};
  std::atomic<bool> writing{false};
  bool shutDown = false;  // shutdown() sent close_notify (under the writer's turn)

  State(TcpStream stream, TlsContext ctx) : tcp(std::move(stream)), context(std::move(ctx)) {}
  ~State() {
    if (ssl == nullptr) return;
    // OpenSSL forgets the session (no resumption) of a connection freed without
    // close_notify, an old rule (RFC 2246) that TLS 1.3 dropped. weft keeps it unless
    // the connection failed: a stream closed while idle is not a bad session.
    if (!unusable.load(std::memory_order_relaxed) && SSL_is_init_finished(ssl)) {
      SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    }
    SSL_free(ssl);  // frees our BIO too
  }

  void markUnusable(std::string reason) {
    std::lock_guard lock(mutex);
    unusable.store(true, std::memory_order_release);
    if (failure) return;
    try {
      failure = std::make_unique<std::string>(std::move(reason));
    } catch (const std::bad_alloc&) {  // unusable all the same; the reason is lost
    }
  }
};

namespace detail::tls {

using State = TlsStream::State;

// ---- one OpenSSL call and what came of it ---------------------------------------------

struct Outcome {
  int error = SSL_ERROR_NONE;  // SSL_get_error's answer
  unsigned long code = 0;      // OpenSSL's error (SSL_ERROR_SSL, SSL_ERROR_SYSCALL)
  long verify = X509_V_OK;     // the peer's verification result
  bool inputEnded = false;
  bool inputLeft = false;    // OpenSSL stopped with ciphertext still to take
  // More plaintext may come without receiving: ciphertext left in `input` or inside
  // OpenSSL (SSL_has_pending), or the peer's close_notify came (SSL_read says so again).
  bool decryptable = false;
  bool queuedByCall = false;  // the call queued ciphertext
  std::uint64_t queued = 0;  // send everything up to here before going on
};

template <class Call>
Outcome callOpenSsl(State& s, Call call) {
  std::lock_guard lock(s.mutex);
  ERR_clear_error();
  const std::uint64_t before = s.queued;
  const int result = call(s.ssl);
  Outcome o;
  o.error = result > 0 ? SSL_ERROR_NONE : SSL_get_error(s.ssl, result);
  if (o.error == SSL_ERROR_SSL || o.error == SSL_ERROR_SYSCALL) {
    o.code = ERR_peek_last_error();
    o.verify = SSL_get_verify_result(s.ssl);
    ERR_clear_error();
  }
  o.inputEnded = s.inputEnded;
  o.inputLeft = !s.input.empty();
  o.decryptable = o.inputLeft || SSL_has_pending(s.ssl) == 1 ||
                  (SSL_get_shutdown(s.ssl) & SSL_RECEIVED_SHUTDOWN) != 0;
  o.queued = s.queued;
  o.queuedByCall = s.queued != before;
  return o;
}

// The TlsError for a failed call; marks the stream unusable (OpenSSL's state is then
// fatal anyway).
TlsError failure(State& s, const char* operation, const Outcome& o);

// TlsError kUnusable if an earlier failure made the stream unusable.
void throwIfUnusable(State& s, const char* operation);

// The reader's checks once it has its turn: a failure a receive() met after the bytes it
// returned is thrown now (once), then the stream's unusability.
void throwIfUnreadable(State& s, const char* operation);

// A new connection's state over `stream`: its SSL, with our BIO between OpenSSL and the
// state, in the server's role (accept) or the client's (connect). Errors: std::bad_alloc.
std::unique_ptr<State> newState(TcpStream stream, TlsContext context, bool server);

}  // namespace detail::tls

}  // namespace weft
