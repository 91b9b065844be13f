#include "weft/io/tls_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <strings.h>

#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/io/detail/tls_shared.h"
#include "weft/io/tls_error.h"

namespace weft {

namespace {

// OpenSSL's reason for the last failure on this thread ("no such file"), or `fallback`.
std::string lastOpenSslError(const char* fallback) {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return fallback;
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? reason : fallback;
}

[[noreturn]] void configurationError(const std::string& what, const char* fallback = "failed") {
  throw TlsError(TlsError::Kind::kConfiguration,
                 "weft: TLS context: " + what + ": " + lastOpenSslError(fallback));
}

struct BioDeleter {
  void operator()(BIO* bio) const noexcept { BIO_free(bio); }
};
using BioPointer = std::unique_ptr<BIO, BioDeleter>;

// A BIO reading `pem`: its file, or its text (not copied: `pem` outlives the BIO).
BioPointer openPem(const TlsPem& pem, const char* what) {
  BIO* bio = pem.source == TlsPem::Source::kFile
                 ? BIO_new_file(pem.value.c_str(), "r")
                 : BIO_new_mem_buf(pem.value.data(), static_cast<int>(pem.value.size()));
  if (bio == nullptr) {
    configurationError(std::string("cannot open the ") + what +
                       (pem.source == TlsPem::Source::kFile ? " file " + pem.value : ""));
  }
  return BioPointer(bio);
}

std::string describe(const TlsPem& pem, const char* what) {
  return pem.source == TlsPem::Source::kFile ? std::string(what) + " " + pem.value
                                             : std::string(what) + " (PEM text)";
}

// Every certificate in `pem`, in order. At least one, else TlsError.
std::vector<X509*> readCertificates(const TlsPem& pem, const char* what) {
  BioPointer bio = openPem(pem, what);
  std::vector<X509*> certificates;
  while (X509* certificate = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.push_back(certificate);
  }
  // The loop ends with a "no start line" error at the end of the input: not a failure
  // when at least one certificate was read.
  const unsigned long last = ERR_peek_last_error();
  if (!certificates.empty() && ERR_GET_REASON(last) == PEM_R_NO_START_LINE) ERR_clear_error();
  if (certificates.empty()) configurationError("no certificate in " + describe(pem, what));
  if (ERR_peek_error() != 0) {
    for (X509* c : certificates) X509_free(c);
    configurationError("a malformed certificate in " + describe(pem, what));
  }
  return certificates;
}

EVP_PKEY* readKey(const TlsPem& pem) {
  BioPointer bio = openPem(pem, "private key");
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) configurationError("no private key in " + describe(pem, "private key"));
  return key;
}

TlsCertificateAndKey loadCertificate(const TlsPem& chain, const TlsPem& key) {
  std::vector<X509*> certificates = readCertificates(chain, "certificate chain");
  TlsCertificateAndKey loaded;
  loaded.leaf = certificates.front();
  loaded.chain = sk_X509_new_null();
  std::size_t owned = 1;  // certificates[owned..] are not in `loaded` yet
  try {
    if (loaded.chain == nullptr) throw std::bad_alloc();
    for (; owned < certificates.size(); ++owned) {
      if (sk_X509_push(loaded.chain, certificates[owned]) == 0) throw std::bad_alloc();
    }
    loaded.key = readKey(key);
    if (X509_check_private_key(loaded.leaf, loaded.key) != 1) {
      configurationError("the private key does not match the certificate in " +
                         describe(chain, "certificate chain"));
    }
  } catch (...) {
    for (std::size_t i = owned; i < certificates.size(); ++i) X509_free(certificates[i]);
    loaded.release();
    throw;
  }
  return loaded;
}

void addRoots(X509_STORE* store, const TlsPem& roots) {
  for (X509* certificate : readCertificates(roots, "trusted roots")) {
    const int added = X509_STORE_add_cert(store, certificate);
    X509_free(certificate);
    if (added != 1) configurationError("cannot add a trusted root from " + describe(roots, "file"));
  }
}

// "*.example.com" matches "api.example.com" (one label), not "example.com" nor
// "a.b.example.com"; anything else matches itself, ignoring ASCII case.
bool serverNameMatches(const std::string& pattern, const char* name) {
  if (pattern.size() > 2 && pattern[0] == '*' && pattern[1] == '.') {
    const char* dot = std::strchr(name, '.');
    return dot != nullptr && dot != name && strcasecmp(dot + 1, pattern.c_str() + 2) == 0;
  }
  return strcasecmp(pattern.c_str(), name) == 0;
}

// Server: picks the certificate for the client's SNI name (SSL_CTX_set_cert_cb).
int selectCertificate(SSL* ssl, void* arg) {
  auto* shared = static_cast<TlsContext::Shared*>(arg);
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (name == nullptr) return 1;  // the default certificate
  for (const TlsNamedCertificate& entry : shared->namedCertificates) {
    if (serverNameMatches(entry.serverName, name)) {
      const TlsCertificateAndKey& c = entry.certificate;
      return SSL_use_cert_and_key(ssl, c.leaf, c.key, c.chain, /*override=*/1) == 1 ? 1 : 0;
    }
  }
  return 1;
}

// Server: ALPN selection, in the server's order of preference.
int selectAlpn(SSL*, const unsigned char** out, unsigned char* outLength,
               const unsigned char* offered, unsigned int offeredLength, void* arg) {
  auto* shared = static_cast<TlsContext::Shared*>(arg);
  for (const std::string& mine : shared->alpnProtocols) {
    for (unsigned int i = 0; i < offeredLength;) {
      const unsigned int length = offered[i];
      if (i + 1 + length > offeredLength) return SSL_TLSEXT_ERR_ALERT_FATAL;  // malformed
      if (length == mine.size() && std::memcmp(offered + i + 1, mine.data(), length) == 0) {
        *out = offered + i + 1;
        *outLength = static_cast<unsigned char>(length);
        return SSL_TLSEXT_ERR_OK;
      }
      i += 1 + length;
    }
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;  // no_application_protocol
}

// Client: a session the server gave us (a TLS 1.3 ticket, or a TLS 1.2 session), kept
// for the next connection to the same name. The cache keeps a copy, not the session itself:
// the session is also the one this connection holds (and copies when the next ticket
// arrives), and the connection that resumes it runs on another worker. With the copy, a
// session is only ever used by one connection at a time, and the last reference to each is
// dropped on a thread the cache's lock orders after every other use; sharing one would
// leave that order to OpenSSL's reference count alone (a free on one worker racing a copy
// on another, as ThreadSanitizer reported with a thousand connections resuming at once).
int keepSession(SSL* ssl, SSL_SESSION* session) {
  auto* shared = static_cast<TlsContext::Shared*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  const char* key = static_cast<const char*>(SSL_get_ex_data(ssl, tlsSessionKeyIndex()));
  if (shared == nullptr || key == nullptr || !shared->resumeSessions) return 0;
  if (SSL_SESSION_is_resumable(session) != 1) return 0;
  SSL_SESSION* copy = SSL_SESSION_dup(session);
  if (copy == nullptr) return 0;  // out of memory: the next connection makes a full handshake
  SSL_SESSION* replaced = nullptr;
  {
    std::lock_guard lock(shared->sessionsMutex);
    auto it = shared->sessions.find(key);
    if (it != shared->sessions.end()) {
      replaced = std::exchange(it->second, copy);
    } else if (shared->sessions.size() < TlsContext::Shared::kMaxSessions) {
      shared->sessions.emplace(key, copy);
    } else {
      replaced = copy;  // full: keep what is there (a server that hands out tickets for many names)
    }
  }
  if (replaced != nullptr) SSL_SESSION_free(replaced);
  return 0;  // OpenSSL keeps its reference: the connection's own session
}

std::shared_ptr<TlsContext::Shared> makeShared(bool server) {
  auto shared = std::make_shared<TlsContext::Shared>();
  shared->server = server;
  shared->context = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (shared->context == nullptr) configurationError("cannot create an SSL_CTX");
  SSL_CTX* ctx = shared->context;
  SSL_CTX_set_app_data(ctx, shared.get());
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
    configurationError("cannot set the minimum version");
  }
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  // Buffers are freed while a connection waits (an idle connection holds none).
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  if (server) {
    // Needed to resume sessions of clients that sent certificates.
    static constexpr unsigned char kSessionContext[] = "weft";
    SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    SSL_CTX_set_cert_cb(ctx, selectCertificate, shared.get());
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      configurationError("cannot load the system's trusted roots");
    }
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, keepSession);
  }
  return shared;
}

}  // namespace

void TlsCertificateAndKey::release() noexcept {
  if (leaf != nullptr) X509_free(leaf);
  if (key != nullptr) EVP_PKEY_free(key);
  if (chain != nullptr) sk_X509_pop_free(chain, X509_free);
  leaf = nullptr;
  key = nullptr;
  chain = nullptr;
}

int tlsSessionKeyIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

TlsContext::Shared::~Shared() {
  for (TlsNamedCertificate& entry : namedCertificates) entry.certificate.release();
  for (auto& [key, session] : sessions) SSL_SESSION_free(session);
  if (context != nullptr) SSL_CTX_free(context);
}

SSL_SESSION* TlsContext::Shared::takeSession(const std::string& key) {
  std::lock_guard lock(sessionsMutex);
  auto it = sessions.find(key);
  if (it == sessions.end()) return nullptr;
  SSL_SESSION* session = it->second;
  // A TLS 1.3 ticket is for one use (RFC 8446 C.4); the resumed connection gets new ones.
  sessions.erase(it);
  return session;
}

TlsContext TlsContext::client() { return TlsContext(makeShared(/*server=*/false)); }

TlsContext TlsContext::server(const TlsPem& chain, const TlsPem& key) {
  TlsContext context(makeShared(/*server=*/true));
  context.setCertificate(chain, key);
  return context;
}

void TlsContext::setTrustedRoots(const TlsPem& roots) {
  X509_STORE* store = X509_STORE_new();
  if (store == nullptr) throw std::bad_alloc();
  try {
    addRoots(store, roots);
  } catch (...) {
    X509_STORE_free(store);
    throw;
  }
  SSL_CTX_set_cert_store(shared_->context, store);  // takes the store, frees the old one
}

void TlsContext::addTrustedRoots(const TlsPem& roots) {
  addRoots(SSL_CTX_get_cert_store(shared_->context), roots);
}

void TlsContext::setCertificate(const TlsPem& chain, const TlsPem& key) {
  TlsCertificateAndKey loaded = loadCertificate(chain, key);
  const int ok = SSL_CTX_use_cert_and_key(shared_->context, loaded.leaf, loaded.key,
                                          loaded.chain, /*override=*/1);
  loaded.release();  // the SSL_CTX took references of its own
  if (ok != 1) configurationError("cannot use the certificate in " + describe(chain, "file"));
}

void TlsContext::addCertificateForServerName(std::string serverName, const TlsPem& chain,
                                             const TlsPem& key) {
  if (!shared_->server) {
    throw std::logic_error("weft: TlsContext::addCertificateForServerName on a client context");
  }
  if (serverName.empty()) {
    throw std::invalid_argument("weft: TlsContext::addCertificateForServerName: empty name");
  }
  TlsNamedCertificate entry{std::move(serverName), loadCertificate(chain, key)};
  try {
    shared_->namedCertificates.push_back(entry);
  } catch (...) {
    entry.certificate.release();
    throw;
  }
}

void TlsContext::requireClientCertificate() {
  if (!shared_->server) {
    throw std::logic_error("weft: TlsContext::requireClientCertificate on a client context");
  }
  SSL_CTX_set_verify(shared_->context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
}

void TlsContext::setMinimumVersion(TlsVersion version) {
  const int v = version == TlsVersion::kTls13 ? TLS1_3_VERSION : TLS1_2_VERSION;
  if (SSL_CTX_set_min_proto_version(shared_->context, v) != 1) {
    configurationError("cannot set the minimum version");
  }
}

void TlsContext::setAlpnProtocols(std::vector<std::string> protocols) {
  std::string wire;
  for (const std::string& p : protocols) {
    if (p.empty() || p.size() > 255) {
      throw std::invalid_argument("weft: TlsContext::setAlpnProtocols: a protocol name must "
                                  "have 1 to 255 bytes");
    }
    wire.push_back(static_cast<char>(p.size()));
    wire += p;
  }
  if (shared_->server) {
    shared_->alpnProtocols = std::move(protocols);
    if (shared_->alpnProtocols.empty()) {
      SSL_CTX_set_alpn_select_cb(shared_->context, nullptr, nullptr);
    } else {
      SSL_CTX_set_alpn_select_cb(shared_->context, selectAlpn, shared_.get());
    }
  } else if (SSL_CTX_set_alpn_protos(shared_->context,
                                     reinterpret_cast<const unsigned char*>(wire.data()),
                                     static_cast<unsigned int>(wire.size())) != 0) {
    configurationError("cannot set the ALPN protocols");  // returns 0 on success
  }
}

void TlsContext::setSessionResumption(bool on) { shared_->resumeSessions = on; }

void TlsContext::insecureDisableVerification() {
  if (shared_->server) {
    throw std::logic_error("weft: TlsContext::insecureDisableVerification on a server context "
                           "(a server verifies only what requireClientCertificate asks for)");
  }
  shared_->verifyPeer = false;
  SSL_CTX_set_verify(shared_->context, SSL_VERIFY_NONE, nullptr);
}

bool TlsContext::isServer() const noexcept { return shared_->server; }

ssl_ctx_st* TlsContext::nativeHandle() const noexcept { return shared_->context; }

}  // namespace weft
