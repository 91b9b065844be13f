#pragma once

#include <memory>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

struct ssl_ctx_st;  // OpenSSL's SSL_CTX (<openssl/ssl.h>); weft's headers do not include it

namespace weft {

// TlsPem: where PEM text comes from, a file or memory (certificates, keys, trusted roots).
struct TlsPem {
  enum class Source { kFile, kText };
  Source source = Source::kText;
  std::string value;  // the path, or the PEM text itself

  static TlsPem file(std::string path) { return {Source::kFile, std::move(path)}; }
  static TlsPem text(std::string pem) { return {Source::kText, std::move(pem)}; }
};

// The oldest protocol version a TlsContext accepts.
enum class TlsVersion { kTls12, kTls13 };

// TlsContext: the configuration TlsStream::connect (client) or TlsStream::accept (server)
// uses: certificates, trusted roots, verification, protocol versions, ALPN, session
// resumption. Built on OpenSSL 3 (library target weft::tls; link it to use TLS).
//
// A context is set up once and shared by many connections: copies share one OpenSSL
// SSL_CTX (a shared handle, like std::shared_ptr), and each stream keeps it alive.
//
// Defaults, safe without any call:
//  - client(): verifies the server's certificate chain against the system's trusted roots
//    (OpenSSL's default paths; Debian: the ca-certificates package) and its name against
//    the serverName given to connect(); sends that name as SNI; resumes sessions (a
//    session ticket or id the server gave to an earlier connection to the same name is
//    offered once).
//  - server(chain, key): presents that certificate; does not ask for client
//    certificates; refuses renegotiation.
//  - both: TLS 1.2 minimum (TLS 1.3 preferred), OpenSSL's default cipher suites, no
//    compression, no renegotiation.
//
// Errors: every setter throws TlsError (kind kConfiguration) with OpenSSL's reason when
// what it is given does not load (a missing file, a malformed PEM, a key that does not
// match its certificate), std::invalid_argument for arguments that make no sense (an
// empty ALPN name), std::logic_error for a setter that does not fit the role
// (requireClientCertificate on a client context). std::bad_alloc if OpenSSL runs out of
// memory.
//
// Thread safety: set a context up before the first connect or accept that uses it; from
// then on it is read-only and may be used by any number of streams on any threads (its
// session cache is internally locked). Setters racing with streams that use the context
// are a data race.
//
// Example:
//   weft::TlsContext server = weft::TlsContext::server(weft::TlsPem::file("chain.pem"),
//                                                      weft::TlsPem::file("key.pem"));
//   server.setAlpnProtocols({"http/1.1"});
//   weft::TlsContext client = weft::TlsContext::client();  // system roots, verification on
class TlsContext {
 public:
  // A client context (see the defaults above). Errors: TlsError, std::bad_alloc.
  static TlsContext client();
  // A server context presenting `chain` (the leaf certificate first, then the
  // intermediates) with its private key `key`.
  static TlsContext server(const TlsPem& chain, const TlsPem& key);

  // Replaces the trusted roots (a client's default: the system's; a server's: none) by
  // the certificates in `roots`. A client then accepts only chains ending there.
  void setTrustedRoots(const TlsPem& roots);
  // Adds the certificates in `roots` to the trusted roots.
  void addTrustedRoots(const TlsPem& roots);

  // The certificate this side presents: a server's default one, or a client's for
  // mutual TLS (sent when the server asks for one).
  void setCertificate(const TlsPem& chain, const TlsPem& key);
  // Server: presents `chain` to clients whose SNI names `serverName` (exactly, ASCII
  // case-insensitive; "*.example.com" matches one label in its place), the default
  // certificate to the others. The first match in the order of the calls wins.
  void addCertificateForServerName(std::string serverName, const TlsPem& chain,
                                   const TlsPem& key);

  // Server: asks every client for a certificate and refuses the handshake (TlsError
  // kVerification on both sides) without one that verifies against the trusted roots
  // (set them with setTrustedRoots). Errors: std::logic_error on a client context.
  void requireClientCertificate();

  // The oldest protocol accepted (default TLS 1.2).
  void setMinimumVersion(TlsVersion version);

  // ALPN (RFC 7301). Client: the protocols offered, in preference order. Server: the
  // protocols it speaks, in its preference order; it picks its most preferred one that
  // the client offered and refuses the handshake (no_application_protocol) when the
  // client offered some and none matches; a client that offers none gets none.
  // Errors: std::invalid_argument for an empty name or one over 255 bytes.
  void setAlpnProtocols(std::vector<std::string> protocols);

  // Client: turns session resumption off (it is on by default).
  void setSessionResumption(bool on);

  // Client: accepts any server certificate, with any name, from anyone: the connection
  // is encrypted but not authenticated, so an attacker in the middle can read and change
  // it. For tests against self-signed servers only; prefer setTrustedRoots.
  void insecureDisableVerification();

  bool isServer() const noexcept;

  // The OpenSSL SSL_CTX, for settings weft has no setter for (cipher lists, curves,
  // keylog callbacks). Do not replace the callbacks weft installs (ALPN selection,
  // certificate selection, new-session) nor the verify mode.
  ssl_ctx_st* nativeHandle() const noexcept;

  // The state behind a context (defined in tls_context.cc).
  struct Shared;

 private:
  friend class TlsStream;
  explicit TlsContext(std::shared_ptr<Shared> shared) noexcept : shared_(std::move(shared)) {}
  std::shared_ptr<Shared> shared_;
};

}  // namespace weft
