#pragma once

// Certificates for the TLS tests, made at run time with OpenSSL (no key is committed):
// a root CA, certificates it issues (servers for localhost / 127.0.0.1 / ::1, an expired
// one, a client), and a second, unrelated CA. EC P-256 keys: fast to make.

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "weft/io/tls_context.h"

namespace weft::test {

// A certificate and its private key, both PEM.
struct PemPair {
  std::string certificate;
  std::string key;
  TlsPem chain() const { return TlsPem::text(certificate); }
  TlsPem privateKey() const { return TlsPem::text(key); }
};

namespace detail_tls {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "tls_certificates.h: %s failed\n", what);
  std::abort();
}

inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

inline std::string pemOf(X509* certificate) {
  BIO* bio = BIO_new(BIO_s_mem());
  check(bio != nullptr && PEM_write_bio_X509(bio, certificate) == 1, "PEM_write_bio_X509");
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<std::size_t>(length));
  BIO_free(bio);
  return pem;
}

inline std::string pemOf(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  check(bio != nullptr &&
            PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1,
        "PEM_write_bio_PrivateKey");
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<std::size_t>(length));
  BIO_free(bio);
  return pem;
}

inline X509* readCertificate(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* certificate = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  check(certificate != nullptr, "PEM_read_bio_X509");
  return certificate;
}

inline EVP_PKEY* readKey(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  check(key != nullptr, "PEM_read_bio_PrivateKey");
  return key;
}

inline void addExtension(X509* certificate, X509V3_CTX* context, int nid, const char* value) {
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, context, nid, value);
  check(extension != nullptr, "X509V3_EXT_conf_nid");
  check(X509_add_ext(certificate, extension, -1) == 1, "X509_add_ext");
  X509_EXTENSION_free(extension);
}

}  // namespace detail_tls

// What issue() makes.
struct CertificateRequest {
  std::string commonName;
  std::string subjectAltNames;  // "DNS:localhost,IP:127.0.0.1"; "" for none
  bool authority = false;       // a CA (may issue certificates)
  long validFromSeconds = -3600;  // relative to now
  long validForSeconds = 86400;   // from validFrom
};

// A new key and a certificate for it, signed by `issuer` (nullptr: self-signed).
inline PemPair issue(const CertificateRequest& request, const PemPair* issuer) {
  using namespace detail_tls;
  static long serial = 1;
  EVP_PKEY* key = EVP_EC_gen("P-256");
  check(key != nullptr, "EVP_EC_gen");
  X509* certificate = X509_new();
  check(certificate != nullptr && X509_set_version(certificate, 2) == 1, "X509_set_version");
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), serial++);
  X509_gmtime_adj(X509_getm_notBefore(certificate), request.validFromSeconds);
  X509_gmtime_adj(X509_getm_notAfter(certificate),
                  request.validFromSeconds + request.validForSeconds);
  check(X509_set_pubkey(certificate, key) == 1, "X509_set_pubkey");
  X509_NAME* name = X509_get_subject_name(certificate);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("weft tests"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(request.commonName.c_str()),
                             -1, -1, 0);
  X509* issuerCertificate = issuer != nullptr ? readCertificate(issuer->certificate) : nullptr;
  EVP_PKEY* issuerKey = issuer != nullptr ? readKey(issuer->key) : key;
  X509_set_issuer_name(certificate, issuerCertificate != nullptr
                                        ? X509_get_subject_name(issuerCertificate)
                                        : name);
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuerCertificate != nullptr ? issuerCertificate : certificate,
                 certificate, nullptr, nullptr, 0);
  addExtension(certificate, &context, NID_basic_constraints,
               request.authority ? "critical,CA:TRUE" : "critical,CA:FALSE");
  addExtension(certificate, &context, NID_key_usage,
               request.authority ? "critical,keyCertSign,cRLSign"
                                 : "critical,digitalSignature,keyEncipherment");
  addExtension(certificate, &context, NID_subject_key_identifier, "hash");
  if (!request.authority) {
    addExtension(certificate, &context, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  if (!request.subjectAltNames.empty()) {
    addExtension(certificate, &context, NID_subject_alt_name, request.subjectAltNames.c_str());
  }
  check(X509_sign(certificate, issuerKey, EVP_sha256()) > 0, "X509_sign");
  PemPair pair{pemOf(certificate), pemOf(key)};
  X509_free(certificate);
  if (issuerCertificate != nullptr) X509_free(issuerCertificate);
  if (issuer != nullptr) EVP_PKEY_free(issuerKey);
  EVP_PKEY_free(key);
  return pair;
}

// The set every TLS test uses, made once per process.
struct TestPki {
  PemPair authority;       // the root the tests trust
  PemPair server;          // localhost, 127.0.0.1, ::1; issued by authority
  PemPair otherServer;     // other.test; issued by authority (SNI tests)
  PemPair expiredServer;   // localhost, expired yesterday
  PemPair client;          // CN=test client; issued by authority
  PemPair otherAuthority;  // a root no test trusts
  PemPair strangerServer;  // localhost; issued by otherAuthority
};

inline const TestPki& testPki() {
  static const TestPki pki = [] {
    TestPki p;
    p.authority = issue({"weft test root", "", true, -3600, 10L * 86400}, nullptr);
    p.server = issue({"localhost", "DNS:localhost,IP:127.0.0.1,IP:::1"}, &p.authority);
    p.otherServer = issue({"other.test", "DNS:other.test,DNS:*.wild.test"}, &p.authority);
    p.expiredServer =
        issue({"localhost", "DNS:localhost,IP:127.0.0.1", false, -3 * 86400, 86400}, &p.authority);
    p.client = issue({"test client", ""}, &p.authority);
    p.otherAuthority = issue({"someone else's root", "", true, -3600, 10L * 86400}, nullptr);
    p.strangerServer = issue({"localhost", "DNS:localhost,IP:127.0.0.1"}, &p.otherAuthority);
    return p;
  }();
  return pki;
}

}  // namespace weft::test
