// test/consumer's TLS check: a program linked with weft::tls (and so with OpenSSL) builds
// and runs. It makes a client context (the system's roots, verification on) and checks
// that a bad PEM is a clear TlsError; no network.
#include <cstdio>

#include <weft/io/tls_context.h>
#include <weft/io/tls_error.h>

int main() {
  weft::TlsContext client = weft::TlsContext::client();
  client.setAlpnProtocols({"http/1.1"});
  try {
    client.setTrustedRoots(weft::TlsPem::text("not a certificate"));
    std::fprintf(stderr, "tls consumer: a bad PEM was accepted\n");
    return 1;
  } catch (const weft::TlsError& e) {
    if (e.kind() != weft::TlsError::Kind::kConfiguration) return 1;
  }
  std::printf("tls consumer: ok\n");
  return 0;
}
