#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace weft {

// TlsError: what TlsContext and TlsStream (target weft::tls) throw when TLS fails: a
// handshake refused or cut, a certificate that does not verify, a malformed record, a
// stream that ended without close_notify, a stream used after it failed.
//
// kind() says which, so that a caller can react without parsing text; what() is
// "weft: TLS <operation>: <reason>" with OpenSSL's reason text ("wrong version number",
// "certificate verify failed", "tlsv1 alert unknown ca") and, for a verification failure,
// the verify result's text ("certificate has expired", "hostname mismatch").
//
// Transport failures are not TlsErrors: the TcpStream's own exceptions pass through
// unchanged (std::system_error for ECONNRESET or the read time limit's ETIMEDOUT,
// OperationCancelled, ExecutorShutDown, EndOfStream from readExactly).
//
// Thread safety: an immutable value, as std::runtime_error.
class TlsError : public std::runtime_error {
 public:
  enum class Kind {
    // The peer's certificate did not verify (chain, host name, expiry, no certificate
    // when one was required): verifyResult() and verifyMessage() say why.
    kVerification,
    // The stream ended (TCP end of stream) without the peer's close_notify: the data
    // may have been cut by an attacker or a crash; a clean close reads as 0 bytes.
    kTruncated,
    // Anything else the TLS protocol refused: a handshake failure, a malformed or
    // oversized record, an alert from the peer, a renegotiation attempt, no common
    // protocol version, cipher or ALPN protocol.
    kProtocol,
    // The stream is unusable: an earlier handshake, write or shutdown failed or was
    // cancelled part-way (TlsStream's contract), or it was closed.
    kUnusable,
    // A TlsContext could not be set up: a certificate, key or trust file that does
    // not load, a key that does not match its certificate, a bad ALPN list.
    kConfiguration,
  };

  TlsError(Kind kind, const std::string& what, long verifyResult = 0,
           std::string verifyMessage = {})
      : std::runtime_error(what),
        kind_(kind),
        verifyResult_(verifyResult),
        verifyMessage_(std::move(verifyMessage)) {}

  Kind kind() const noexcept { return kind_; }
  // OpenSSL's X509_V_* verify result (0, X509_V_OK, unless kind() is kVerification).
  long verifyResult() const noexcept { return verifyResult_; }
  // Its text ("certificate has expired"); empty unless kind() is kVerification.
  const std::string& verifyMessage() const noexcept { return verifyMessage_; }

 private:
  Kind kind_;
  long verifyResult_;
  std::string verifyMessage_;
};

}  // namespace weft
