#include "weft/io/tls_stream.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "weft/executors/lent_buffer.h"
#include "weft/io/detail/stream_transfers.h"
#include "weft/io/detail/tls_records.h"
#include "weft/io/detail/tls_send_buffer.h"
#include "weft/io/detail/tls_shared.h"
#include "weft/io/detail/tls_state.h"

namespace weft {

namespace {

using detail::tls::callOpenSsl;
using detail::tls::decryptStep;
using detail::tls::failure;
using detail::tls::kMaxWrite;
using detail::tls::kRecordOverhead;
using detail::tls::newState;
using detail::tls::Outcome;
using detail::tls::pending;
using detail::tls::ReadStep;
using detail::tls::readStep;
using detail::tls::ReceiveCiphertext;
using detail::tls::sendIfIdle;
using detail::tls::sendQueued;
using detail::tls::takeSpareSendBuffer;
using detail::tls::throwIfUnreadable;
using detail::tls::throwIfUnusable;

using State = TlsStream::State;

// Runs SSL_do_handshake to its end.
Lazy<void> handshake(State& s, const char* operation) {
  for (;;) {
    const Outcome o = callOpenSsl(s, [](SSL* ssl) { return SSL_do_handshake(ssl); });
    if (o.error == SSL_ERROR_NONE || o.error == SSL_ERROR_WANT_READ) {
      if (pending(s, o)) co_await sendQueued(s, o.queued);
    } else {
      TlsError error = failure(s, operation, o);
      if (o.queuedByCall) co_await sendIfIdle(s);
      throw error;
    }
    if (o.error == SSL_ERROR_NONE) co_return;
    if (!o.inputLeft) co_await ReceiveCiphertext{&s};
  }
}

// One operation of a kind at a time (one reader, one writer).
class Turn {
 public:
  Turn(std::atomic<bool>& flag, const char* what) : flag_(flag) {
    if (flag_.exchange(true, std::memory_order_acquire)) {
      throw std::logic_error(std::string("weft: TlsStream: two ") + what +
                             " at the same time (one read and one write may overlap)");
    }
  }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;
  ~Turn() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool>& flag_;
};

bool isIpAddress(const std::string& name) {
  unsigned char address[16];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

}  // namespace

TlsStream::TlsStream() noexcept = default;
TlsStream::TlsStream(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}
TlsStream::TlsStream(TlsStream&& other) noexcept = default;
TlsStream& TlsStream::operator=(TlsStream&& other) noexcept = default;
TlsStream::~TlsStream() = default;

Lazy<TlsStream> TlsStream::connect(TcpStream stream, TlsContext context, std::string serverName) {
  if (!stream.isOpen()) throw std::logic_error("weft: TlsStream::connect on a closed TcpStream");
  if (context.isServer()) {
    throw std::invalid_argument("weft: TlsStream::connect with a server TlsContext");
  }
  const TlsContext::Shared& shared = *context.shared_;
  if (shared.verifyPeer && serverName.empty()) {
    throw std::invalid_argument(
        "weft: TlsStream::connect: an empty server name cannot be verified (give the name "
        "or address the certificate is for)");
  }
  std::unique_ptr<State> state = newState(std::move(stream), std::move(context), false);
  SSL* ssl = state->ssl;
  const bool address = isIpAddress(serverName);
  if (shared.verifyPeer) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const int ok = address ? X509_VERIFY_PARAM_set1_ip_asc(param, serverName.c_str())
                           : (X509_VERIFY_PARAM_set_hostflags(
                                  param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS),
                              SSL_set1_host(ssl, serverName.c_str()));
    if (ok != 1) throw std::invalid_argument("weft: TlsStream::connect: bad server name");
  }
  if (!address && !serverName.empty() &&
      SSL_set_tlsext_host_name(ssl, serverName.c_str()) != 1) {
    throw std::invalid_argument("weft: TlsStream::connect: the server name is not a valid SNI");
  }
  if (shared.resumeSessions) {
    state->sessionKey =
        std::make_unique<std::string>(serverName + "|" + state->tcp.peerAddress().toString());
    SSL_set_ex_data(ssl, tlsSessionKeyIndex(), state->sessionKey->data());
    if (SSL_SESSION* session = state->context.shared_->takeSession(*state->sessionKey)) {
      SSL_set_session(ssl, session);  // takes a reference of its own
      SSL_SESSION_free(session);
    }
  }
  co_await handshake(*state, "connect");
  co_return TlsStream(std::move(state));
}

Lazy<TlsStream> TlsStream::accept(TcpStream stream, TlsContext context) {
  if (!stream.isOpen()) throw std::logic_error("weft: TlsStream::accept on a closed TcpStream");
  if (!context.isServer()) {
    throw std::invalid_argument("weft: TlsStream::accept with a client TlsContext");
  }
  std::unique_ptr<State> state = newState(std::move(stream), std::move(context), true);
  co_await handshake(*state, "accept");
  co_return TlsStream(std::move(state));
}

TlsStream::State& TlsStream::usable(const char* operation) const {
  if (!state_) {
    throw std::logic_error(std::string("weft: TlsStream::") + operation + " on an empty stream");
  }
  throwIfUnusable(*state_, operation);
  return *state_;
}

Lazy<std::size_t> TlsStream::read(std::span<std::byte> buffer) {
  if (!state_) throw std::logic_error("weft: TlsStream::read on an empty stream");
  State& s = *state_;
  Turn turn(s.reading, "reads");
  throwIfUnreadable(s, "read");
  if (buffer.empty()) co_return 0;
  for (;;) {
    const ReadStep r = readStep(s, buffer);
    if (r.queued) co_await sendIfIdle(s);
    if (r.failed) std::rethrow_exception(std::exchange(s.readFailure, nullptr));
    if (r.done) co_return r.bytes;
    // Cancelled here, the stream stays usable: OpenSSL keeps a partial record for the
    // next read, and receive() loses nothing.
    if (r.needInput) co_await ReceiveCiphertext{&s};
  }
}

Lazy<LentBuffer> TlsStream::receive() {
  // Every byte of this frame is kept by a connection waiting for data (624 bytes with
  // gcc 12, in the frame allocator's class of 632; past 632 it would take 760): the
  // plaintext buffer lives in a scope without an await, so not in the frame, which is why
  // records a read queued are sent before the receive waits rather than before it returns
  // bytes.
  if (!state_) throw std::logic_error("weft: TlsStream::receive on an empty stream");
  Turn turn(state_->reading, "reads");
  for (;;) {
    ReadStep r;
    {
      LentBuffer plain;
      r = decryptStep(*state_, plain);
      if (r.done) co_return std::move(plain);
    }
    if (r.queued) co_await sendIfIdle(*state_);
    if (r.failed) std::rethrow_exception(std::exchange(state_->readFailure, nullptr));
    // Cancelled here, the stream stays usable, as for read().
    if (r.needInput) co_await ReceiveCiphertext{state_.get()};
  }
}

Lazy<void> TlsStream::readExactly(std::span<std::byte> buffer) {
  return detail::readExactlyWith(buffer, "readExactly from a TlsStream",
                                 [this](std::span<std::byte> rest) { return read(rest); });
}

Lazy<std::size_t> TlsStream::write(std::span<const std::byte> buffer) {
  State& s = usable("write");
  Turn turn(s.writing, "writes");
  if (buffer.empty()) co_return 0;
  if (s.shutDown) {
    throw TlsError(TlsError::Kind::kProtocol,
                   "weft: TLS write: the stream was shut down (shutdown() sent close_notify)");
  }
  const std::size_t size = std::min(buffer.size(), kMaxWrite);
  std::size_t written = 0;
  const Outcome o = callOpenSsl(s, [&](SSL* ssl) {
    // Room for the records at once (a freed buffer would otherwise grow record by record).
    takeSpareSendBuffer(s.output);
    s.output.reserve(s.output.size() + size + (size / 16384 + 1) * kRecordOverhead);
    return SSL_write_ex(ssl, buffer.data(), size, &written);
  });
  if (o.error != SSL_ERROR_NONE) {
    // Our BIO takes every byte, and renegotiation is refused: a write never has to wait
    // for the peer, so anything but success is a failure.
    TlsError error = failure(s, "write", o);
    if (o.queuedByCall) co_await sendIfIdle(s);
    throw error;
  }
  co_await sendQueued(s, o.queued);
  co_return written;
}

Lazy<void> TlsStream::writeAll(std::span<const std::byte> buffer) {
  return detail::writeAllWith(buffer, "writeAll to a TlsStream",
                              [this](std::span<const std::byte> rest) { return write(rest); });
}

Lazy<void> TlsStream::shutdown() {
  State& s = usable("shutdown");
  Turn turn(s.writing, "writes");
  if (s.shutDown) co_return;
  const Outcome o = callOpenSsl(s, [](SSL* ssl) {
    const int r = SSL_shutdown(ssl);
    return r >= 0 ? 1 : r;  // 0: close_notify sent, the peer's not read yet: fine
  });
  if (o.error != SSL_ERROR_NONE) throw failure(s, "shutdown", o);
  co_await sendQueued(s, o.queued);
  s.shutDown = true;
  try {
    s.tcp.shutdownWrite();
  } catch (const std::system_error& e) {
    // The peer is gone (it reset the connection after our close_notify): nothing is
    // left to end.
    if (e.code() != std::errc::not_connected) throw;
  }
}

void TlsStream::close() noexcept {
  if (state_) state_->tcp.close();
}

bool TlsStream::isOpen() const noexcept { return state_ && state_->tcp.isOpen(); }

namespace {
const TlsStream::State& established(const std::unique_ptr<TlsStream::State>& state,
                                    const char* what) {
  if (!state) throw std::logic_error(std::string("weft: TlsStream::") + what + " on an empty stream");
  return *state;
}
}  // namespace

std::string_view TlsStream::protocolVersion() const {
  return SSL_get_version(established(state_, "protocolVersion").ssl);
}

std::string_view TlsStream::alpnProtocol() const {
  const unsigned char* data = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(established(state_, "alpnProtocol").ssl, &data, &length);
  return {reinterpret_cast<const char*>(data), data != nullptr ? length : 0};
}

std::string TlsStream::peerSubject() const {
  X509* certificate = SSL_get0_peer_certificate(established(state_, "peerSubject").ssl);
  if (certificate == nullptr) return {};
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) throw std::bad_alloc();
  X509_NAME_print_ex(bio, X509_get_subject_name(certificate), 0, XN_FLAG_RFC2253);
  char* text = nullptr;
  const long length = BIO_get_mem_data(bio, &text);
  std::string subject(text != nullptr ? text : "", length > 0 ? static_cast<std::size_t>(length) : 0);
  BIO_free(bio);
  return subject;
}

bool TlsStream::sessionReused() const {
  return SSL_session_reused(established(state_, "sessionReused").ssl) == 1;
}

std::string_view TlsStream::serverName() const {
  const char* name =
      SSL_get_servername(established(state_, "serverName").ssl, TLSEXT_NAMETYPE_host_name);
  return name != nullptr ? name : "";
}

TcpStream& TlsStream::transport() {
  if (!state_) throw std::logic_error("weft: TlsStream::transport on an empty stream");
  return state_->tcp;
}

ssl_st* TlsStream::nativeHandle() const noexcept { return state_ ? state_->ssl : nullptr; }

}  // namespace weft
