#include "weft/io/detail/tls_state.h"

#include <openssl/bio.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "weft/io/detail/tls_shared.h"

namespace weft::detail::tls {

namespace {

// ---- the BIO between OpenSSL and State ------------------------------------------------

int bioWrite(BIO* bio, const char* data, std::size_t length, std::size_t* written) {
  auto* s = static_cast<State*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  try {
    s->output.append(data, length);
  } catch (const std::bad_alloc&) {
    return 0;  // OpenSSL reports a write failure
  }
  s->queued += length;
  *written = length;
  return 1;
}

int bioRead(BIO* bio, char* data, std::size_t length, std::size_t* read) {
  auto* s = static_cast<State*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  *read = 0;
  if (s->input.empty()) {
    // Nothing yet: "try again" (SSL_ERROR_WANT_READ) unless the stream ended (EOF).
    if (!s->inputEnded) BIO_set_retry_read(bio);
    return 0;
  }
  const std::size_t n = std::min(length, s->input.size());
  std::memcpy(data, s->input.data(), n);
  s->input.consume(n);
  if (s->input.empty()) s->input.reset();  // give the buffer back: an idle stream holds none
  *read = n;
  return 1;
}

long bioControl(BIO* bio, int command, long, void*) {
  auto* s = static_cast<State*>(BIO_get_data(bio));
  switch (command) {
    case BIO_CTRL_FLUSH:
      return 1;  // sent by the awaits after each call
    case BIO_CTRL_PENDING:
      return static_cast<long>(s->input.size());
    case BIO_CTRL_WPENDING:
      return static_cast<long>(s->output.size());
    case BIO_CTRL_EOF:
      return s->inputEnded && s->input.empty() ? 1 : 0;
    default:
      return 0;
  }
}

int bioCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

int bioDestroy(BIO*) { return 1; }

BIO_METHOD* bioMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "weft TlsStream");
    if (m == nullptr || BIO_meth_set_write_ex(m, bioWrite) != 1 ||
        BIO_meth_set_read_ex(m, bioRead) != 1 || BIO_meth_set_ctrl(m, bioControl) != 1 ||
        BIO_meth_set_create(m, bioCreate) != 1 || BIO_meth_set_destroy(m, bioDestroy) != 1) {
      throw std::bad_alloc();
    }
    return m;
  }();
  return method;
}

}  // namespace

TlsError failure(State& s, const char* operation, const Outcome& o) {
  const std::string prefix = std::string("weft: TLS ") + operation + ": ";
  const int reason = ERR_GET_REASON(o.code);
  TlsError::Kind kind = TlsError::Kind::kProtocol;
  std::string text;
  std::string verifyText;
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED ||
      reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    kind = TlsError::Kind::kVerification;
    verifyText = o.verify != X509_V_OK ? X509_verify_cert_error_string(o.verify)
                                       : "the peer sent no certificate";
    text = "the peer's certificate did not verify: " + verifyText;
  } else if (o.inputEnded && (o.error == SSL_ERROR_SYSCALL || reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
    kind = TlsError::Kind::kTruncated;
    text = "the peer ended the connection without close_notify (truncated)";
  } else {
    const char* r = o.code != 0 ? ERR_reason_error_string(o.code) : nullptr;
    text = r != nullptr ? r : "TLS failure (SSL_get_error " + std::to_string(o.error) + ")";
  }
  s.markUnusable(prefix + text);
  return TlsError(kind, prefix + text, kind == TlsError::Kind::kVerification ? o.verify : 0,
                  std::move(verifyText));
}

void throwIfUnusable(State& s, const char* operation) {
  if (s.unusable.load(std::memory_order_acquire)) {
    std::lock_guard lock(s.mutex);
    throw TlsError(TlsError::Kind::kUnusable, std::string("weft: TLS ") + operation +
                                                  ": the stream is unusable: " +
                                                  (s.failure ? *s.failure : "(no memory for why)"));
  }
}

void throwIfUnreadable(State& s, const char* operation) {
  if (s.readFailure) std::rethrow_exception(std::exchange(s.readFailure, nullptr));
  throwIfUnusable(s, operation);
}

std::unique_ptr<State> newState(TcpStream stream, TlsContext context, bool server) {
  auto state = std::make_unique<State>(std::move(stream), std::move(context));
  state->ssl = SSL_new(state->context.nativeHandle());
  if (state->ssl == nullptr) throw std::bad_alloc();
  BIO* bio = BIO_new(bioMethod());
  if (bio == nullptr) throw std::bad_alloc();
  BIO_set_data(bio, state.get());
  SSL_set_bio(state->ssl, bio, bio);  // one reference, owned by the SSL
  if (server) {
    SSL_set_accept_state(state->ssl);
  } else {
    SSL_set_connect_state(state->ssl);
  }
  return state;
}

}  // namespace weft::detail::tls
