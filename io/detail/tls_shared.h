#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "weft/io/tls_context.h"

// OpenSSL's types, declared as <openssl/ssl.h> does (this header does not include it).
struct x509_st;
struct evp_pkey_st;
struct stack_st_X509;
struct ssl_session_st;

namespace weft {

// A certificate (leaf), its chain and its private key, owned (release() frees them).
struct TlsCertificateAndKey {
  x509_st* leaf = nullptr;
  evp_pkey_st* key = nullptr;
  stack_st_X509* chain = nullptr;
  void release() noexcept;
};

// A server's certificate for one SNI name (TlsContext::addCertificateForServerName).
struct TlsNamedCertificate {
  std::string serverName;
  TlsCertificateAndKey certificate;
};

// The SSL ex_data index under which a client stream keeps its session-cache key (a
// NUL-terminated string owned by the stream).
int tlsSessionKeyIndex();

// What a TlsContext shares among its copies and with its streams: the SSL_CTX (whose
// app data points here), the server's per-name certificates and ALPN preferences, and
// the client's session cache.
struct TlsContext::Shared {
  // A client keeps at most this many sessions (one per server name and address).
  static constexpr std::size_t kMaxSessions = 1024;

  ssl_ctx_st* context = nullptr;
  bool server = false;
  bool verifyPeer = true;  // false after insecureDisableVerification()
  bool resumeSessions = true;
  std::vector<TlsNamedCertificate> namedCertificates;
  std::vector<std::string> alpnProtocols;  // a server's, in its order of preference

  std::mutex sessionsMutex;
  std::unordered_map<std::string, ssl_session_st*> sessions;  // owned references

  ~Shared();
  // The session kept for `key`, removed from the cache (the caller owns the reference),
  // or nullptr.
  ssl_session_st* takeSession(const std::string& key);
};

}  // namespace weft
