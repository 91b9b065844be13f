// TlsStream and TlsContext over loopback TCP, once per I/O backend, with certificates made
// at run time (test/support/tls_certificates.h): handshakes and transfers both ways,
// verification (untrusted root, expiry, host name, IP address), SNI, ALPN, mutual TLS,
// session resumption, clean close against truncation, bad input (garbage, a cut or
// stalled handshake, an oversized record), cancellation (a read stays usable, an
// interrupted write makes the stream unusable), misuse, fibers, 1,000 connections of
// 100 messages each on two threads; receive() (decrypted bytes in lent buffers): every
// byte of many connections, timeouts racing arrivals, records cut anywhere, no buffer
// held while waiting, clean close against truncation and bad records after data. Every
// test checks that no descriptor leaked.

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/lent_buffer.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/io/tls_context.h"
#include "weft/io/tls_error.h"
#include "weft/io/tls_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/tls_certificates.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::testPki;

TlsContext serverContext(const test::PemPair& certificate = testPki().server) {
  return TlsContext::server(certificate.chain(), certificate.privateKey());
}

TlsContext clientContext() {
  TlsContext context = TlsContext::client();
  context.setTrustedRoots(TlsPem::text(testPki().authority.certificate));
  return context;
}

struct TlsPair {
  TlsStream server;
  TlsStream client;
};

// The handshake's two outcomes: the server's accept and the client's connect.
struct Handshakes {
  Try<TlsStream> server;
  Try<TlsStream> client;
};

Lazy<TlsStream> acceptOne(TcpListener& listener, TlsContext context) {
  TcpStream tcp = co_await listener.accept();
  co_return co_await TlsStream::accept(std::move(tcp), std::move(context));
}

Lazy<TlsStream> connectTo(SocketAddress address, TlsContext context, std::string name) {
  TcpStream tcp = co_await TcpStream::connect(address);
  co_return co_await TlsStream::connect(std::move(tcp), std::move(context), std::move(name));
}

Lazy<Handshakes> handshakes(TlsContext server, TlsContext client, std::string name) {
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  auto [accepted, connected] = co_await collectAll(
      acceptOne(listener, std::move(server)),
      connectTo(listener.localAddress(), std::move(client), std::move(name)));
  co_return Handshakes{std::move(accepted), std::move(connected)};
}

TlsPair pairOn(ThreadPool& pool, TlsContext server, TlsContext client,
               std::string name = "localhost") {
  Handshakes h = syncAwait(handshakes(std::move(server), std::move(client), std::move(name)).via(&pool));
  return TlsPair{std::move(h.server).value(), std::move(h.client).value()};
}

// The TlsError in `t` (fails the test if it holds a value or another exception).
template <class T>
TlsError tlsErrorOf(const Try<T>& t) {
  if (!t.hasException()) {
    ADD_FAILURE() << "expected a TlsError, got a value";
    return TlsError(TlsError::Kind::kProtocol, "none");
  }
  try {
    std::rethrow_exception(t.exception());
  } catch (const TlsError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a TlsError, got: " << e.what();
  }
  return TlsError(TlsError::Kind::kProtocol, "none");
}

std::string readAll(ThreadPool& pool, TlsStream& stream) {
  return syncAwait([&]() -> Lazy<std::string> {
    std::string all;
    char buffer[4096];
    while (std::size_t n = co_await stream.read(std::span<char>(buffer))) all.append(buffer, n);
    co_return all;
  }().via(&pool));
}

std::string pattern(std::size_t size, unsigned seed) {
  std::string s(size, '\0');
  for (std::size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + i / 251) & 0xff);
  return s;
}

class TlsStreamTest : public test::IoLeakCheckedTest {};

TEST_P(TlsStreamTest, HandshakeVerifiesTheServerAndBytesFlowBothWays) {
  test::Watchdog watchdog(60s, "Handshake");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  EXPECT_EQ(pair.client.protocolVersion(), "TLSv1.3");
  EXPECT_EQ(pair.server.protocolVersion(), "TLSv1.3");
  EXPECT_EQ(pair.client.peerSubject(), "CN=localhost,O=weft tests");
  EXPECT_EQ(pair.server.peerSubject(), "");  // no client certificate asked for
  EXPECT_EQ(pair.server.serverName(), "localhost");
  EXPECT_EQ(pair.client.alpnProtocol(), "");
  EXPECT_FALSE(pair.client.sessionReused());

  syncAwait([&]() -> Lazy<void> {
    co_await pair.client.writeAll("ping");
    char buffer[4];
    co_await pair.server.readExactly(std::span<char>(buffer));
    EXPECT_EQ(std::string(buffer, 4), "ping");
    co_await pair.server.writeAll("pong!");
    char reply[5];
    co_await pair.client.readExactly(std::span<char>(reply));
    EXPECT_EQ(std::string(reply, 5), "pong!");
    co_await pair.client.shutdown();
    co_await pair.client.shutdown();  // idempotent
  }().via(&pool));
  EXPECT_EQ(readAll(pool, pair.server), "");  // close_notify: a clean end, read() == 0
}

// A Unix domain stream (TcpListener and TcpStream at a Unix address) carries TLS as TCP
// does: the client verifies the server by the name it asks for.
TEST_P(TlsStreamTest, AUnixStreamCarriesTls) {
  test::Watchdog watchdog(60s, "UnixStream");
  ThreadPool pool(options(1));
  const SocketAddress address = SocketAddress::unixPath(
      "@weft-tls-unix-" + std::to_string(::getpid()) + "-" + test::ioBackendName({GetParam(), 0}));
  TcpListener listener = TcpListener::bind(address);
  auto [accepted, connected] = syncAwait(
      collectAll(acceptOne(listener, serverContext()),
                 connectTo(listener.localAddress(), clientContext(), "localhost"))
          .via(&pool));
  TlsStream server = std::move(accepted).value();
  TlsStream client = std::move(connected).value();
  EXPECT_TRUE(client.transport().peerAddress().isUnix());
  EXPECT_EQ(client.peerSubject(), "CN=localhost,O=weft tests");
  syncAwait([&]() -> Lazy<void> {
    co_await client.writeAll("over a unix stream");
    LentBuffer data = co_await server.receive();
    EXPECT_EQ(data.text(), "over a unix stream");
    co_await server.writeAll("back");
    char reply[4];
    co_await client.readExactly(std::span<char>(reply));
    EXPECT_EQ(std::string(reply, 4), "back");
    co_await client.shutdown();
    LentBuffer end = co_await server.receive();
    EXPECT_TRUE(end.empty());
  }().via(&pool));
}

TEST_P(TlsStreamTest, AnIpAddressIsVerifiedAgainstTheCertificatesAddresses) {
  test::Watchdog watchdog(60s, "IpAddress");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext(), "127.0.0.1");
  EXPECT_EQ(pair.server.serverName(), "");  // no SNI for an address (RFC 6066)
  Handshakes wrong =
      syncAwait(handshakes(serverContext(), clientContext(), "127.0.0.2").via(&pool));
  const TlsError e = tlsErrorOf(wrong.client);
  EXPECT_EQ(e.kind(), TlsError::Kind::kVerification) << e.what();
  EXPECT_EQ(e.verifyMessage(), "IP address mismatch") << e.what();
}

TEST_P(TlsStreamTest, CertificatesThatDoNotVerifyFailTheHandshakeWithTheReason) {
  test::Watchdog watchdog(60s, "Verification");
  ThreadPool pool(options(1));
  struct Case {
    const test::PemPair* certificate;
    const char* name;
    const char* reason;
  } cases[] = {
      {&testPki().strangerServer, "localhost", "unable to get local issuer certificate"},
      {&testPki().expiredServer, "localhost", "certificate has expired"},
      {&testPki().server, "example.com", "hostname mismatch"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    Handshakes h = syncAwait(handshakes(serverContext(*c.certificate), clientContext(), c.name).via(&pool));
    const TlsError client = tlsErrorOf(h.client);
    EXPECT_EQ(client.kind(), TlsError::Kind::kVerification) << client.what();
    EXPECT_EQ(client.verifyMessage(), c.reason);
    EXPECT_NE(std::string(client.what()).find(c.reason), std::string::npos) << client.what();
    EXPECT_NE(client.verifyResult(), 0);
    // The server learns from the client's alert.
    const TlsError server = tlsErrorOf(h.server);
    EXPECT_EQ(server.kind(), TlsError::Kind::kProtocol) << server.what();
  }
  // The system store does not know the test root either.
  Handshakes system =
      syncAwait(handshakes(serverContext(), TlsContext::client(), "localhost").via(&pool));
  EXPECT_EQ(tlsErrorOf(system.client).kind(), TlsError::Kind::kVerification);
}

TEST_P(TlsStreamTest, VerificationOffIsExplicitAndAcceptsAnyServer) {
  test::Watchdog watchdog(60s, "Insecure");
  ThreadPool pool(options(1));
  TlsContext client = TlsContext::client();
  client.insecureDisableVerification();
  TlsPair pair = pairOn(pool, serverContext(testPki().strangerServer), client, "");
  EXPECT_EQ(pair.client.peerSubject(), "CN=localhost,O=weft tests");
  EXPECT_THROW(syncAwait(connectTo(SocketAddress::loopbackV4(1), clientContext(), "")),
               std::exception);  // connection refused, or the empty name (verification on)
  EXPECT_THROW(syncAwait(TlsStream::connect(TcpStream(), TlsContext::client(), "x")), std::logic_error);
}

TEST_P(TlsStreamTest, TheServerPicksItsCertificateByServerName) {
  test::Watchdog watchdog(60s, "Sni");
  ThreadPool pool(options(1));
  TlsContext server = serverContext();
  server.addCertificateForServerName("other.test", testPki().otherServer.chain(),
                                     testPki().otherServer.privateKey());
  server.addCertificateForServerName("*.wild.test", testPki().otherServer.chain(),
                                     testPki().otherServer.privateKey());
  TlsPair other = pairOn(pool, server, clientContext(), "other.test");
  EXPECT_EQ(other.client.peerSubject(), "CN=other.test,O=weft tests");
  EXPECT_EQ(other.server.serverName(), "other.test");
  TlsPair wild = pairOn(pool, server, clientContext(), "api.wild.test");
  EXPECT_EQ(wild.client.peerSubject(), "CN=other.test,O=weft tests");
  TlsPair fallback = pairOn(pool, server, clientContext(), "localhost");
  EXPECT_EQ(fallback.client.peerSubject(), "CN=localhost,O=weft tests");
}

TEST_P(TlsStreamTest, AlpnPicksTheServersPreferenceAndRefusesNoOverlap) {
  test::Watchdog watchdog(60s, "Alpn");
  ThreadPool pool(options(1));
  TlsContext server = serverContext();
  server.setAlpnProtocols({"h2", "http/1.1"});
  TlsContext client = clientContext();
  client.setAlpnProtocols({"http/1.1", "h2"});
  TlsPair pair = pairOn(pool, server, client);
  EXPECT_EQ(pair.client.alpnProtocol(), "h2");
  EXPECT_EQ(pair.server.alpnProtocol(), "h2");

  TlsContext other = clientContext();
  other.setAlpnProtocols({"imap"});
  Handshakes h = syncAwait(handshakes(server, other, "localhost").via(&pool));
  EXPECT_EQ(tlsErrorOf(h.server).kind(), TlsError::Kind::kProtocol);
  const TlsError client_error = tlsErrorOf(h.client);
  EXPECT_NE(std::string(client_error.what()).find("no application protocol"), std::string::npos)
      << client_error.what();

  TlsPair none = pairOn(pool, server, clientContext());  // offers nothing, gets nothing
  EXPECT_EQ(none.server.alpnProtocol(), "");
  EXPECT_THROW(server.setAlpnProtocols({""}), std::invalid_argument);
}

TEST_P(TlsStreamTest, MutualTlsVerifiesTheClientsCertificate) {
  test::Watchdog watchdog(60s, "MutualTls");
  ThreadPool pool(options(1));
  TlsContext server = serverContext();
  server.setTrustedRoots(TlsPem::text(testPki().authority.certificate));
  server.requireClientCertificate();
  TlsContext client = clientContext();
  client.setCertificate(testPki().client.chain(), testPki().client.privateKey());
  TlsPair pair = pairOn(pool, server, client);
  EXPECT_EQ(pair.server.peerSubject(), "CN=test client,O=weft tests");

  // Without a certificate: the server refuses. In TLS 1.3 the client has finished its
  // handshake by then and learns it from the server's alert, at its first read.
  Handshakes h = syncAwait(handshakes(server, clientContext(), "localhost").via(&pool));
  const TlsError refused = tlsErrorOf(h.server);
  EXPECT_EQ(refused.kind(), TlsError::Kind::kVerification) << refused.what();
  if (!h.client.hasException()) {
    TlsStream stream = std::move(h.client).value();
    EXPECT_THROW(readAll(pool, stream), TlsError);
  }
  // A certificate from a root the server does not trust.
  TlsContext stranger = clientContext();
  stranger.setCertificate(testPki().strangerServer.chain(), testPki().strangerServer.privateKey());
  Handshakes s = syncAwait(handshakes(server, stranger, "localhost").via(&pool));
  EXPECT_EQ(tlsErrorOf(s.server).kind(), TlsError::Kind::kVerification);
  EXPECT_THROW(TlsContext::client().requireClientCertificate(), std::logic_error);
}

TEST_P(TlsStreamTest, AClientResumesItsSessionWithTheSameServer) {
  test::Watchdog watchdog(60s, "Resumption");
  ThreadPool pool(options(1));
  TlsContext server = serverContext();
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  // One exchange per connection: the client reads, so it takes the server's tickets.
  auto exchange = [&](TlsContext client) {
    return syncAwait([&]() -> Lazy<bool> {
      auto serve = [&]() -> Lazy<void> {
        TlsStream s = co_await acceptOne(listener, server);
        char byte;
        co_await s.readExactly(std::span<char>(&byte, 1));
        co_await s.writeAll("k");
        co_await s.shutdown();
      };
      auto call = [&]() -> Lazy<bool> {
        TlsStream c = co_await connectTo(address, client, "localhost");
        co_await c.writeAll("?");
        char reply[8];
        EXPECT_EQ(co_await c.read(std::span<char>(reply)), 1u);
        EXPECT_EQ(co_await c.read(std::span<char>(reply)), 0u);
        co_return c.sessionReused();
      };
      auto [served, resumed] = co_await collectAll(serve(), call());
      served.value();
      co_return resumed.value();
    }().via(&pool));
  };
  TlsContext client = clientContext();
  EXPECT_FALSE(exchange(client));
  EXPECT_TRUE(exchange(client));
  EXPECT_TRUE(exchange(client));
  TlsContext fresh = clientContext();
  fresh.setSessionResumption(false);
  EXPECT_FALSE(exchange(fresh));
  EXPECT_FALSE(exchange(fresh));
}

TEST_P(TlsStreamTest, AnEndWithoutCloseNotifyIsTruncation) {
  test::Watchdog watchdog(60s, "Truncation");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  syncAwait(pair.server.writeAll("last words").via(&pool));
  pair.server.close();  // no close_notify
  try {
    readAll(pool, pair.client);
    ADD_FAILURE() << "a truncated stream read as a clean end";
  } catch (const TlsError& e) {
    EXPECT_EQ(e.kind(), TlsError::Kind::kTruncated) << e.what();
  }
  // The data before it was delivered; the stream is unusable afterwards.
  try {
    char buffer[4];
    syncAwait(pair.client.read(std::span<char>(buffer)).via(&pool));
    ADD_FAILURE() << "read after a failure";
  } catch (const TlsError& e) {
    EXPECT_EQ(e.kind(), TlsError::Kind::kUnusable) << e.what();
  }
}

TEST_P(TlsStreamTest, TheDataBeforeATruncationIsDelivered) {
  test::Watchdog watchdog(60s, "TruncationData");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  syncAwait(pair.server.writeAll("last words").via(&pool));
  pair.server.close();
  char buffer[64];
  const std::size_t n = syncAwait(pair.client.read(std::span<char>(buffer)).via(&pool));
  EXPECT_EQ(std::string(buffer, n), "last words");
}

TEST_P(TlsStreamTest, GarbageACutHandshakeAndAStalledPeerFailCleanly) {
  test::Watchdog watchdog(60s, "BadInput");
  ThreadPool pool(options(1));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  auto acceptWith = [&](auto peerAction, std::chrono::nanoseconds readLimit = {}) {
    test::OwnedFd peer = test::connectBlocking(listener.localAddress());
    peerAction(peer.get());
    return syncAwait([&]() -> Lazy<Try<TlsStream>> {
      TcpStream tcp = co_await listener.accept();
      if (readLimit.count() > 0) tcp.setReadTimeout(readLimit);
      try {
        co_return Try<TlsStream>(co_await TlsStream::accept(std::move(tcp), serverContext()));
      } catch (...) {
        co_return Try<TlsStream>(std::current_exception());
      }
    }().via(&pool));
  };
  // An HTTP request where a ClientHello should be.
  const Try<TlsStream> garbage = acceptWith([](int fd) {
    const char request[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_TRUE(test::sendAllBlocking(fd, request, sizeof request - 1));
  });
  EXPECT_EQ(tlsErrorOf(garbage).kind(), TlsError::Kind::kProtocol);
  // The first bytes of a record, then the end of the stream.
  const Try<TlsStream> cut = acceptWith([](int fd) {
    const unsigned char start[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00};
    ASSERT_TRUE(test::sendAllBlocking(fd, start, sizeof start));
    ::shutdown(fd, SHUT_WR);
  });
  EXPECT_EQ(tlsErrorOf(cut).kind(), TlsError::Kind::kTruncated);
  // A peer that sends part of a ClientHello and then nothing: the read time limit ends it.
  const Try<TlsStream> stalled = acceptWith(
      [](int fd) {
        const unsigned char start[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00};
        ASSERT_TRUE(test::sendAllBlocking(fd, start, sizeof start));
      },
      50ms);
  ASSERT_TRUE(stalled.hasException());
  try {
    std::rethrow_exception(stalled.exception());
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ETIMEDOUT);
  }
}

TEST_P(TlsStreamTest, WithTimeoutStopsAHandshakeThatStalls) {
  test::Watchdog watchdog(60s, "HandshakeTimeout");
  ThreadPool pool(options(1));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  // A client that connects and says nothing: the server's accept waits for its hello.
  test::OwnedFd silent = test::connectBlocking(listener.localAddress());
  ASSERT_TRUE(silent);
  TcpStream accepted = syncAwait(listener.accept().via(&pool));
  EXPECT_THROW(
      syncAwait(withTimeout(TlsStream::accept(std::move(accepted), serverContext()), 0ms).via(&pool)),
      TimeoutError);
  // A server that never answers: the client's connect waits for its hello.
  TcpListener mute = TcpListener::bind(SocketAddress::loopbackV4(0));
  TcpStream connected = syncAwait(TcpStream::connect(mute.localAddress()).via(&pool));
  EXPECT_THROW(syncAwait(withTimeout(TlsStream::connect(std::move(connected), clientContext(),
                                                        "localhost"),
                                     0ms)
                             .via(&pool)),
               TimeoutError);
}

TEST_P(TlsStreamTest, AnOversizedRecordIsAProtocolError) {
  test::Watchdog watchdog(60s, "Oversized");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  // An application-data record claiming 65,535 bytes (the limit is 2^14 + 256).
  std::string record = "\x17\x03\x03\xff\xff";
  record += std::string(1000, 'x');
  syncAwait(pair.client.transport().writeAll(record).via(&pool));
  try {
    readAll(pool, pair.server);
    ADD_FAILURE() << "an oversized record was accepted";
  } catch (const TlsError& e) {
    EXPECT_EQ(e.kind(), TlsError::Kind::kProtocol) << e.what();
  }
}

TEST_P(TlsStreamTest, LargeTransfersBothWaysAtOnceArriveWhole) {
  test::Watchdog watchdog(120s, "Large");
  ThreadPool pool(options(2));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  const std::size_t size = test::reducedIoScale() ? (1u << 20) : (8u << 20);
  const std::string up = pattern(size, 1);
  const std::string down = pattern(size + 12345, 2);
  // Each side writes while it reads (one read and one write in progress on each stream).
  auto side = [&](TlsStream& stream, const std::string& out, std::size_t expect) -> Lazy<std::string> {
    auto writer = [&]() -> Lazy<void> {
      co_await stream.writeAll(out);
      co_await stream.shutdown();
    };
    auto reader = [&]() -> Lazy<std::string> {
      std::string in;
      in.reserve(expect);
      std::vector<char> buffer(20000);
      while (std::size_t n = co_await stream.read(std::span<char>(buffer))) in.append(buffer.data(), n);
      co_return in;
    };
    auto [w, r] = co_await collectAll(writer(), reader());
    w.value();
    co_return std::move(r).value();
  };
  auto [atServer, atClient] = syncAwait(
      collectAll(side(pair.server, down, up.size()), side(pair.client, up, down.size())).via(&pool));
  EXPECT_TRUE(atServer.value() == up);
  EXPECT_TRUE(atClient.value() == down);
}

TEST_P(TlsStreamTest, ACancelledReadLeavesTheStreamUsable) {
  test::Watchdog watchdog(60s, "CancelledRead");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  char buffer[16];
  for (int i = 0; i < 20; ++i) {
    // Nothing to read: the read waits, and a zero timeout cancels it at once.
    EXPECT_THROW(syncAwait(withTimeout(pair.client.read(std::span<char>(buffer)), 0ms).via(&pool)),
                 TimeoutError);
  }
  // Half a record arrives, then a read is cancelled, then the rest: nothing is lost.
  syncAwait(pair.server.writeAll("after the timeouts").via(&pool));
  const std::size_t n = syncAwait(pair.client.read(std::span<char>(buffer)).via(&pool));
  EXPECT_EQ(std::string(buffer, n), std::string("after the timeouts").substr(0, n));
}

TEST_P(TlsStreamTest, AnInterruptedWriteMakesTheStreamUnusable) {
  test::Watchdog watchdog(60s, "InterruptedWrite");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  // The server does not read: the socket buffers fill and the writeAll waits, then the
  // timeout stops it part-way.
  const std::string big(64u << 20, 'b');
  try {
    syncAwait(withTimeout(pair.client.writeAll(big), 0ms).via(&pool));
    ADD_FAILURE() << "64 MiB fitted in the socket buffers";
  } catch (const IncompleteTransfer& e) {
    EXPECT_GT(e.bytesTransferred(), 0u);
    EXPECT_LT(e.bytesTransferred(), big.size());
  } catch (const TimeoutError&) {
    // Stopped before the first write's records were all sent.
  }
  try {
    syncAwait(pair.client.write("more").via(&pool));
    ADD_FAILURE() << "a write after an interrupted one";
  } catch (const TlsError& e) {
    EXPECT_EQ(e.kind(), TlsError::Kind::kUnusable) << e.what();
  }
}

TEST_P(TlsStreamTest, TwoReadsAtOnceAreRefused) {
  test::Watchdog watchdog(60s, "TwoReads");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  syncAwait([&]() -> Lazy<void> {
    char a[4];
    char b[4];
    auto [first, second] = co_await collectAll(
        withTimeout(pair.client.read(std::span<char>(a)), 0ms), pair.client.read(std::span<char>(b)));
    EXPECT_TRUE(first.hasException());
    EXPECT_TRUE(second.hasException());
    EXPECT_THROW(second.value(), std::logic_error);
  }().via(&pool));
  EXPECT_THROW(syncAwait(TlsStream().read(std::span<char>())), std::logic_error);
}

TEST_P(TlsStreamTest, FibersUseTlsStreams) {
  test::Watchdog watchdog(60s, "Fibers");
  ThreadPool pool(options(2));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  FiberFuture<std::size_t> server = spawnFiber(&pool, [&] {
    TlsStream stream = await(acceptOne(listener, serverContext()));
    std::size_t echoed = 0;
    for (;;) {
      LentBuffer data = await(stream.receive());
      if (data.empty()) break;
      await(stream.writeAll(data));
      echoed += data.size();
    }
    await(stream.shutdown());
    return echoed;
  });
  FiberFuture<std::string> client = spawnFiber(&pool, [&] {
    TlsStream stream = await(connectTo(address, clientContext(), "localhost"));
    std::string back;
    for (int i = 0; i < 50; ++i) {
      const std::string message = "message " + std::to_string(i) + ";";
      await(stream.writeAll(message));
      std::string echo(message.size(), '\0');
      await(stream.readExactly(std::span<char>(echo)));
      back += echo;
    }
    await(stream.shutdown());
    char rest[1];
    EXPECT_EQ(await(stream.read(std::span<char>(rest))), 0u);  // the server's close_notify
    return back;
  });
  const std::string back = syncAwait(std::move(client));
  EXPECT_EQ(syncAwait(std::move(server)), back.size());
  EXPECT_EQ(back.substr(0, 10), "message 0;");
}

TEST_P(TlsStreamTest, RenegotiationIsRefused) {
  test::Watchdog watchdog(60s, "Renegotiation");
  ThreadPool pool(options(1));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  // A plain OpenSSL TLS 1.2 client (renegotiation allowed on its side) on a blocking
  // socket, in a thread of its own: it sends "a", asks to renegotiate, then sends "b".
  test::OwnedFd socket = test::connectBlocking(listener.localAddress());
  ASSERT_TRUE(socket);
  const timeval guard{20, 0};  // a reply that never comes fails the test, not the run
  ::setsockopt(socket.get(), SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  int renegotiated = -2;
  std::thread client([&] {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, socket.get());
    if (SSL_connect(ssl) == 1 && SSL_write(ssl, "a", 1) == 1) {
      renegotiated = SSL_renegotiate(ssl) == 1 ? SSL_do_handshake(ssl) : -1;
      SSL_write(ssl, "b", 1);
      SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  });
  std::exception_ptr failure;
  try {
    TlsStream server = syncAwait(acceptOne(listener, serverContext()).via(&pool));
    EXPECT_EQ(server.protocolVersion(), "TLSv1.2");
    char a;
    syncAwait(server.readExactly(std::span<char>(&a, 1)).via(&pool));
    EXPECT_EQ(a, 'a');
    readAll(pool, server);
  } catch (...) {
    failure = std::current_exception();
  }
  client.join();
  EXPECT_NE(renegotiated, 1) << "the server renegotiated";
  // The server's read that meets the request throws: the renegotiation is refused with
  // an alert and the stream is unusable.
  ASSERT_TRUE(failure);
  try {
    std::rethrow_exception(failure);
  } catch (const TlsError& e) {
    EXPECT_EQ(e.kind(), TlsError::Kind::kProtocol) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a TlsError: " << e.what();
  }
}

// ---- receive(): decrypted bytes in buffers the loop lends -----------------------------

// Byte `offset` of connection `seed`'s stream (what the receive tests send and check).
char streamByte(std::uint64_t seed, std::uint64_t offset) {
  return static_cast<char>((offset * 131 + seed * 7 + offset / 251) & 0xff);
}

std::string streamBytes(std::uint64_t seed, std::uint64_t offset, std::size_t size) {
  std::string s(size, '\0');
  for (std::size_t i = 0; i < size; ++i) s[i] = streamByte(seed, offset + i);
  return s;
}

// Message sizes from 1 byte to `max`, spread evenly over their logarithm (as many of
// 1-10 bytes as of 20-200 KiB), so that records are cut everywhere; the first is `max`.
std::vector<std::size_t> messageSizes(unsigned seed, int count, std::size_t max) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> exponent(0.0, std::log(static_cast<double>(max)));
  std::vector<std::size_t> sizes;
  for (int i = 0; i < count; ++i) {
    const auto size = static_cast<std::size_t>(std::exp(exponent(random)));
    sizes.push_back(i == 0 ? max : std::clamp<std::size_t>(size, 1, max));
  }
  return sizes;
}

// The plain echo loop of the documentation, over receive(); returns the bytes echoed.
Lazy<std::uint64_t> echoByReceive(TlsStream& stream) {
  std::uint64_t echoed = 0;
  for (;;) {
    LentBuffer data = co_await stream.receive();
    if (data.empty()) break;  // close_notify
    co_await stream.writeAll(data);
    echoed += data.size();
  }
  co_await stream.shutdown();
  co_return echoed;
}

// Receives until close_notify, checking every byte against connection `seed`'s stream;
// returns how many came, or throws at the first wrong one.
Lazy<std::uint64_t> receiveAndCheck(TlsStream& stream, std::uint64_t seed) {
  std::uint64_t offset = 0;
  for (;;) {
    LentBuffer data = co_await stream.receive();
    if (data.empty()) co_return offset;
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (data.text()[i] != streamByte(seed, offset + i)) {
        throw std::runtime_error("byte " + std::to_string(offset + i) + " of connection " +
                                 std::to_string(seed) + " is wrong");
      }
    }
    offset += data.size();
  }
}

// Every byte of 100 connections x 100 messages (1 byte to 200 KiB each) goes to an echo
// server of receive() + writeAll and back into the client's receive(), both checked
// byte by byte; every buffer lent on either side comes back.
TEST_P(TlsStreamTest, ReceiveDeliversEveryByteOfManyConnections) {
  test::Watchdog watchdog(300s, "ReceiveMany");
  ThreadPool servers(options(1, "tls-servers"));
  ThreadPool clients(options(1, "tls-clients"));
  test::raiseFdLimit(1024);
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  const int connections = test::reducedIoScale() ? 10 : 100;
  const int messages = test::reducedIoScale() ? 20 : 100;
  const std::size_t maxMessage = 200 * 1024;
  TlsContext server = serverContext();
  TlsContext client = clientContext();
  auto serveOne = [&]() -> Lazy<std::uint64_t> {
    TlsStream s = co_await acceptOne(listener, server);
    co_return co_await echoByReceive(s);
  };
  struct Sent {
    std::uint64_t sent = 0;
    std::uint64_t back = 0;
  };
  auto callOne = [&](int id) -> Lazy<Sent> {
    TlsStream c = co_await connectTo(address, client, "localhost");
    const std::vector<std::size_t> sizes =
        messageSizes(static_cast<unsigned>(id), messages, maxMessage);
    auto writer = [&]() -> Lazy<std::uint64_t> {
      std::uint64_t offset = 0;
      for (std::size_t size : sizes) {
        co_await c.writeAll(streamBytes(static_cast<std::uint64_t>(id), offset, size));
        offset += size;
      }
      co_await c.shutdown();
      co_return offset;
    };
    auto [sent, back] =
        co_await collectAll(writer(), receiveAndCheck(c, static_cast<std::uint64_t>(id)));
    co_return Sent{sent.value(), back.value()};
  };
  std::vector<Lazy<std::uint64_t>> serving;
  std::vector<Lazy<Sent>> calling;
  for (int i = 0; i < connections; ++i) {
    serving.push_back(serveOne());
    calling.push_back(callOne(i));
  }
  // The servers on one worker, the clients on another.
  auto [served, called] = syncAwait(collectAll(collectAllPara(std::move(serving)).via(&servers),
                                               collectAllPara(std::move(calling)).via(&clients)));
  std::uint64_t echoed = 0;
  for (auto& r : served.value()) echoed += r.value();
  std::uint64_t total = 0;
  for (auto& r : called.value()) {
    const Sent sent = r.value();
    EXPECT_EQ(sent.back, sent.sent);
    total += sent.sent;
  }
  EXPECT_EQ(echoed, total);
  EXPECT_GE(total, static_cast<std::uint64_t>(connections) * maxMessage);
  EXPECT_EQ(test::lentBuffers(servers), 0u) << "a server's buffer was not given back";
  EXPECT_EQ(test::lentBuffers(clients), 0u) << "a client's buffer was not given back";
}

// 1,000 connections at once on a 2-thread pool (the servers and the clients share it),
// each exchanging 100 messages of 1 to 1,024 bytes in 10 rounds: the client writes 10
// messages (one writeAll), then reads their echoes and compares each, byte for byte, with
// what it sent; the servers' byte counts must add up to the clients'. Half the servers
// echo with receive(), half with read(). (Rounds rather than a round trip per message:
// the same bytes for a tenth of the round trips: the test costs about 1.2 CPU-seconds per
// backend in a Release build, most of it the handshakes.) Under sanitizers and emulators:
// 100 x 20.
TEST_P(TlsStreamTest, AThousandConnectionsExchangeAHundredMessagesEach) {
  test::Watchdog watchdog(300s, "Thousand");
  const int connections = test::reducedIoScale() ? 100 : 1000;
  const int messages = test::reducedIoScale() ? 20 : 100;
  const int perRound = 10;
  // Two descriptors per connection (both ends are here), and some to spare.
  const rlim_t wanted = 2 * static_cast<rlim_t>(connections) + 64;
  if (test::raiseFdLimit(wanted) < wanted) {
    GTEST_SKIP() << "RLIMIT_NOFILE cannot be raised to " << wanted;
  }
  ThreadPool pool(options(2));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  TlsContext server = serverContext();
  TlsContext client = clientContext();
  auto sizeOf = [](int id, int m) -> std::size_t { return 1 + (id * 37 + m * 101) % 1024; };
  auto serveOne = [&](bool byReceive) -> Lazy<std::uint64_t> {
    TlsStream s = co_await acceptOne(listener, server);
    if (byReceive) co_return co_await echoByReceive(s);
    std::uint64_t total = 0;
    char buffer[1024];
    while (std::size_t n = co_await s.read(std::span<char>(buffer))) {
      co_await s.writeAll(std::string_view(buffer, n));
      total += n;
    }
    co_await s.shutdown();
    co_return total;
  };
  // How many messages came back equal (all of them, or the test fails); -1 when more
  // came back than was sent.
  auto callOne = [&](int id) -> Lazy<int> {
    TlsStream c = co_await connectTo(address, client, "localhost");
    int equal = 0;
    std::string sent;
    std::string echo;
    for (int first = 0; first < messages; first += perRound) {
      sent.clear();
      for (int m = first; m < std::min(first + perRound, messages); ++m) {
        sent += pattern(sizeOf(id, m), static_cast<unsigned>(id * 1000 + m));
      }
      co_await c.writeAll(sent);
      echo.assign(sent.size(), '\0');
      co_await c.readExactly(std::span<char>(echo));
      for (int m = first, at = 0; m < std::min(first + perRound, messages); ++m) {
        const std::size_t size = sizeOf(id, m);
        if (echo.compare(at, size, sent, at, size) == 0) ++equal;
        at += static_cast<int>(size);
      }
    }
    co_await c.shutdown();
    char rest[1];
    if (co_await c.read(std::span<char>(rest)) != 0) co_return -1;
    co_return equal;
  };
  std::vector<Lazy<std::uint64_t>> servers;
  std::vector<Lazy<int>> clients;
  std::uint64_t sent = 0;
  for (int i = 0; i < connections; ++i) {
    servers.push_back(serveOne(i % 2 == 0));
    clients.push_back(callOne(i));
    for (int m = 0; m < messages; ++m) sent += sizeOf(i, m);
  }
  auto [served, called] =
      syncAwait(collectAll(collectAllPara(std::move(servers)), collectAllPara(std::move(clients)))
                    .via(&pool));
  std::uint64_t echoed = 0;
  for (auto& r : served.value()) echoed += r.value();
  EXPECT_EQ(echoed, sent);
  int whole = 0;
  for (auto& r : called.value()) whole += r.value() == messages ? 1 : 0;
  EXPECT_EQ(whole, connections) << "connections whose every echo came back equal";
}

// Receives raced by time limits of every length while records arrive from another
// thread: each either returns bytes or throws TimeoutError, and together they return
// every byte once, in order. The stream stays usable after every timeout.
TEST_P(TlsStreamTest, TimeoutsRacingArrivalsLoseAndDuplicateNothing) {
  test::Watchdog watchdog(120s, "ReceiveRace");
  ThreadPool readers(options(1, "tls-reader"));
  ThreadPool writers(options(1, "tls-writer"));
  TlsPair pair = pairOn(readers, serverContext(), clientContext());
  // Nothing sent yet: a receive under a zero time limit must time out.
  EXPECT_THROW(syncAwait(withTimeout(pair.server.receive(), 0ms).via(&readers)), TimeoutError);
  const int messages = test::reducedIoScale() ? 300 : 3000;
  const std::vector<std::size_t> sizes = messageSizes(7, messages, 40000);
  auto writer = [&]() -> Lazy<std::uint64_t> {
    std::uint64_t offset = 0;
    for (std::size_t size : sizes) {
      co_await pair.client.writeAll(streamBytes(1, offset, size));
      offset += size;
    }
    co_await pair.client.shutdown();
    co_return offset;
  };
  struct Counts {
    std::uint64_t bytes = 0;
    int timeouts = 0;
    int received = 0;
  };
  auto reader = [&]() -> Lazy<Counts> {
    const std::chrono::nanoseconds limits[] = {0ns, 1us, 10us, 50us, 200us, 1ms, 5ms};
    Counts counts;
    for (std::size_t i = 0;; ++i) {
      LentBuffer data;
      try {
        data = co_await withTimeout(pair.server.receive(), limits[i % std::size(limits)]);
      } catch (const TimeoutError&) {
        ++counts.timeouts;
        continue;
      }
      if (data.empty()) co_return counts;
      ++counts.received;
      EXPECT_TRUE(data.text() == streamBytes(1, counts.bytes, data.size()))
          << "wrong bytes at " << counts.bytes;
      counts.bytes += data.size();
    }
  };
  auto [counted, written] = syncAwait(collectAll(reader().via(&readers), writer().via(&writers)));
  const Counts counts = counted.value();
  EXPECT_EQ(counts.bytes, written.value());
  EXPECT_GT(counts.received, 0);
  // Closed first: on io_uring the client's stream keeps a receive armed since the
  // handshake, and what the server sent after it (session tickets) waits in one of the
  // readers' buffers for a read that never comes; the close gives it back.
  pair.client.close();
  pair.server.close();
  EXPECT_EQ(test::lentBuffers(readers), 0u);
  EXPECT_EQ(test::lentBuffers(writers), 0u);
}

TEST_P(TlsStreamTest, TheReadTimeLimitStopsAReceiveAndTheStreamGoesOn) {
  test::Watchdog watchdog(60s, "ReceiveTimeLimit");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  pair.server.transport().setReadTimeout(20ms);
  EXPECT_EQ(test::errnoOf([&] { (void)syncAwait(pair.server.receive().via(&pool)); }), ETIMEDOUT);
  syncAwait(pair.client.writeAll("after the time limit").via(&pool));
  LentBuffer data = syncAwait(pair.server.receive().via(&pool));
  EXPECT_EQ(test::text(data), "after the time limit");
  data.reset();
  pair.client.close();  // its session tickets may wait in a buffer (see above)
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// A TLS 1.3 client of plain OpenSSL on a blocking socket whose records the test sends as
// it likes (half a record, a byte at a time, data with close_notify in one segment, a
// corrupted record): OpenSSL writes them into memory, the test sends them.
class RawTlsClient {
 public:
  explicit RawTlsClient(const SocketAddress& address) : fd_(test::connectBlocking(address)) {
    const timeval guard{20, 0};  // a handshake reply that never comes fails, not hangs
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
    context_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(context_, SSL_VERIFY_NONE, nullptr);  // verification is tested above
    ssl_ = SSL_new(context_);
    in_ = BIO_new(BIO_s_mem());
    out_ = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl_, in_, out_);  // the SSL owns both
    SSL_set_connect_state(ssl_);
  }
  ~RawTlsClient() {
    SSL_free(ssl_);
    SSL_CTX_free(context_);
  }
  RawTlsClient(const RawTlsClient&) = delete;
  RawTlsClient& operator=(const RawTlsClient&) = delete;

  // The handshake over the socket (on a thread of its own while the server accepts).
  bool handshake() {
    for (;;) {
      const int r = SSL_do_handshake(ssl_);
      if (!send(take())) return false;
      if (r == 1) return true;
      if (SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ) return false;
      char buffer[16384];
      const ssize_t n = ::recv(fd_.get(), buffer, sizeof buffer, 0);
      if (n <= 0 || BIO_write(in_, buffer, static_cast<int>(n)) != n) return false;
    }
  }
  // The records of `data`, not sent.
  std::string records(std::string_view data) {
    std::size_t written = 0;
    EXPECT_EQ(SSL_write_ex(ssl_, data.data(), data.size(), &written), 1);
    return take();
  }
  // close_notify, not sent.
  std::string closeNotify() {
    SSL_shutdown(ssl_);
    return take();
  }
  bool send(std::string_view bytes) {
    return test::sendAllBlocking(fd_.get(), bytes.data(), bytes.size());
  }
  int fd() const { return fd_.get(); }
  // A TLS 1.3 KeyUpdate asking the server to update its keys too, not sent.
  std::string keyUpdate() {
    EXPECT_EQ(SSL_key_update(ssl_, SSL_KEY_UPDATE_REQUESTED), 1);
    EXPECT_EQ(SSL_do_handshake(ssl_), 1);  // writes it
    return take();
  }
  // Takes in what the server sent that has arrived (without waiting) and returns the
  // plaintext OpenSSL makes of it (records without data, such as session tickets or a
  // KeyUpdate, are processed and give none).
  std::string receiveArrived() {
    char buffer[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_.get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n <= 0) break;
      EXPECT_EQ(BIO_write(in_, buffer, static_cast<int>(n)), n);
    }
    std::string plain;
    std::size_t got = 0;
    while (SSL_read_ex(ssl_, buffer, sizeof buffer, &got) == 1) plain.append(buffer, got);
    return plain;
  }

 private:
  std::string take() {
    std::string bytes(static_cast<std::size_t>(BIO_pending(out_)), '\0');
    if (!bytes.empty()) {
      EXPECT_EQ(BIO_read(out_, bytes.data(), static_cast<int>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    return bytes;
  }

  test::OwnedFd fd_;
  SSL_CTX* context_ = nullptr;
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;
  BIO* out_ = nullptr;
};

// A server stream and a RawTlsClient connected to it.
struct RawPair {
  TlsStream server;
  std::unique_ptr<RawTlsClient> client;
};

RawPair rawPairOn(ThreadPool& pool) {
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  RawPair pair;
  pair.client = std::make_unique<RawTlsClient>(listener.localAddress());
  bool handshaken = false;
  std::thread handshake([&] { handshaken = pair.client->handshake(); });
  try {
    pair.server = syncAwait(acceptOne(listener, serverContext()).via(&pool));
  } catch (...) {
    handshake.join();
    throw;
  }
  handshake.join();
  EXPECT_TRUE(handshaken);
  return pair;
}

// Waits until the bytes sent to `stream` have left its socket (a receive took them).
// Loopback delivers within the send. A hand-shake, not a timing.
void waitUntilTaken(TlsStream& stream) {
  while (test::queuedToRead(stream.transport().nativeHandle()) != 0) std::this_thread::yield();
}

// Records cut anywhere (a byte at a time, half a header, half a record, several records
// at once) come out whole and in order; a receive that waits for the rest of a record
// holds no buffer of the loop's.
TEST_P(TlsStreamTest, ReceiveJoinsRecordsCutAnywhereAndHoldsNoBufferWhileItWaits) {
  test::Watchdog watchdog(60s, "ReceiveCut");
  ThreadPool pool(options(1));
  RawPair pair = rawPairOn(pool);
  const std::string plain = streamBytes(3, 0, 40000);  // 3 records
  std::string bytes = pair.client->records(plain);
  bytes += pair.client->records("tail");
  std::atomic<std::size_t> received{0};
  auto reader = [&]() -> Lazy<std::string> {
    std::string all;
    while (all.size() < plain.size() + 4) {
      LentBuffer data = co_await pair.server.receive();
      if (data.empty()) break;
      all += data.text();
      received.store(all.size());
    }
    co_return all;
  };
  test::Outcome<std::string> outcome;
  test::startOn(pool, reader(), outcome);
  // Cuts: the first 200 bytes one at a time, then pieces of growing sizes.
  std::size_t from = 0;
  std::size_t piece = 1;
  std::size_t lentWhileWaiting = 0;
  while (from < bytes.size()) {
    const std::size_t size = std::min(from < 200 ? std::size_t{1} : piece, bytes.size() - from);
    ASSERT_TRUE(pair.client->send(std::string_view(bytes).substr(from, size)));
    from += size;
    if (from >= 200) piece = piece * 3 + 1;
    if (from < bytes.size()) {
      waitUntilTaken(pair.server);
      lentWhileWaiting = std::max(lentWhileWaiting, test::lentBuffers(pool));
    }
  }
  outcome.wait();
  ASSERT_TRUE(outcome.result.hasValue()) << outcome.what();
  EXPECT_TRUE(outcome.result.value() == plain + "tail");
  EXPECT_EQ(lentWhileWaiting, 0u) << "a receive waiting for the rest of a record held a buffer";
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// close_notify right behind the data, in the same segment, with the TCP stream still
// open: the data, then the clean end (and again).
TEST_P(TlsStreamTest, ReceiveReturnsTheDataThenTheCleanEndThatCameWithIt) {
  test::Watchdog watchdog(60s, "ReceiveCloseNotify");
  ThreadPool pool(options(1));
  RawPair pair = rawPairOn(pool);
  std::string bytes = pair.client->records("one");  // in this order (not one expression)
  bytes += pair.client->records("two");
  bytes += pair.client->closeNotify();
  ASSERT_TRUE(pair.client->send(bytes));
  LentBuffer data = syncAwait(pair.server.receive().via(&pool));
  EXPECT_EQ(test::text(data), "onetwo");
  data.reset();
  EXPECT_TRUE(syncAwait(pair.server.receive().via(&pool)).empty());
  EXPECT_TRUE(syncAwait(pair.server.receive().via(&pool)).empty());
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// The TCP stream ends without close_notify, right behind the data: the data, then
// TlsError kTruncated, then kUnusable.
TEST_P(TlsStreamTest, ReceiveReturnsTheDataBeforeATruncationThenReportsIt) {
  test::Watchdog watchdog(60s, "ReceiveTruncation");
  ThreadPool pool(options(1));
  RawPair pair = rawPairOn(pool);
  ASSERT_TRUE(pair.client->send(pair.client->records("last words")));
  ::shutdown(pair.client->fd(), SHUT_WR);
  LentBuffer data = syncAwait(pair.server.receive().via(&pool));
  EXPECT_EQ(test::text(data), "last words");
  data.reset();
  try {
    (void)syncAwait(pair.server.receive().via(&pool));
    ADD_FAILURE() << "a truncated stream received as a clean end";
  } catch (const TlsError& e) {
    EXPECT_EQ(e.kind(), TlsError::Kind::kTruncated) << e.what();
  }
  try {
    (void)syncAwait(pair.server.receive().via(&pool));
    ADD_FAILURE() << "a receive after a failure";
  } catch (const TlsError& e) {
    EXPECT_EQ(e.kind(), TlsError::Kind::kUnusable) << e.what();
  }
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// A record that does not authenticate, behind good ones in the same segment: the good
// records' bytes, then TlsError kProtocol at the next receive (or read), then kUnusable.
TEST_P(TlsStreamTest, ABadRecordAfterDataFailsTheNextReceive) {
  test::Watchdog watchdog(60s, "ReceiveBadRecord");
  ThreadPool pool(options(1));
  for (bool nextIsRead : {false, true}) {
    SCOPED_TRACE(nextIsRead ? "then read" : "then receive");
    RawPair pair = rawPairOn(pool);
    std::string bytes = pair.client->records("genuine");
    bytes += pair.client->records("forged");
    bytes.back() = static_cast<char>(bytes.back() ^ 1);  // the forged record's tag
    ASSERT_TRUE(pair.client->send(bytes));
    LentBuffer data = syncAwait(pair.server.receive().via(&pool));
    EXPECT_EQ(test::text(data), "genuine");
    data.reset();
    try {
      if (nextIsRead) {
        char buffer[16];
        (void)syncAwait(pair.server.read(std::span<char>(buffer)).via(&pool));
      } else {
        (void)syncAwait(pair.server.receive().via(&pool));
      }
      ADD_FAILURE() << "a forged record was accepted";
    } catch (const TlsError& e) {
      EXPECT_EQ(e.kind(), TlsError::Kind::kProtocol) << e.what();
    }
    try {
      (void)syncAwait(pair.server.receive().via(&pool));
      ADD_FAILURE() << "a receive after a failure";
    } catch (const TlsError& e) {
      EXPECT_EQ(e.kind(), TlsError::Kind::kUnusable) << e.what();
    }
  }
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

// A KeyUpdate that asks for one back, in front of data: receive() returns the data, and
// the server's next write carries the answer (OpenSSL sends it before the next
// application data, as RFC 8446 asks), so the client reads what follows under the
// server's new keys.
TEST_P(TlsStreamTest, ReceiveTakesAKeyUpdateAndTheNextWriteAnswersIt) {
  test::Watchdog watchdog(60s, "ReceiveKeyUpdate");
  ThreadPool pool(options(1));
  RawPair pair = rawPairOn(pool);
  std::string bytes = pair.client->keyUpdate();
  bytes += pair.client->records("after the update");
  ASSERT_TRUE(pair.client->send(bytes));
  EXPECT_EQ(test::text(syncAwait(pair.server.receive().via(&pool))), "after the update");
  test::Outcome<LentBuffer> next;
  test::startOn(pool, pair.server.receive(), next);  // waits while the server writes
  syncAwait(pair.server.writeAll("under new keys").via(&pool));
  std::string plain;
  while (plain.size() < 14) {  // the tickets, the KeyUpdate, the data, as they arrive
    plain += pair.client->receiveArrived();
    std::this_thread::yield();
  }
  EXPECT_EQ(plain, "under new keys");
  ASSERT_TRUE(pair.client->send(pair.client->closeNotify()));
  next.wait();
  ASSERT_TRUE(next.result.hasValue()) << next.what();
  EXPECT_TRUE(next.result.value().empty());
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

TEST_P(TlsStreamTest, AReceiveAndAReadAtOnceAreRefused) {
  test::Watchdog watchdog(60s, "ReceiveMisuse");
  ThreadPool pool(options(1));
  TlsPair pair = pairOn(pool, serverContext(), clientContext());
  syncAwait([&]() -> Lazy<void> {
    char buffer[4];
    auto [first, second] = co_await collectAll(withTimeout(pair.client.receive(), 0ms),
                                               pair.client.read(std::span<char>(buffer)));
    EXPECT_TRUE(first.hasException());
    EXPECT_THROW(second.value(), std::logic_error);
  }().via(&pool));
  EXPECT_THROW(syncAwait(TlsStream().receive()), std::logic_error);
  // Still usable: the refused read took nothing.
  syncAwait(pair.server.writeAll("x").via(&pool));
  EXPECT_EQ(test::text(syncAwait(pair.client.receive().via(&pool))), "x");
  EXPECT_EQ(test::lentBuffers(pool), 0u);
}

TEST(TlsContextTest, BadConfigurationIsAClearError) {
  try {
    TlsContext::server(TlsPem::file("/nonexistent/chain.pem"), TlsPem::file("/nonexistent/key.pem"));
    ADD_FAILURE() << "a missing file loaded";
  } catch (const TlsError& e) {
    EXPECT_EQ(e.kind(), TlsError::Kind::kConfiguration);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/chain.pem"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TlsContext::server(TlsPem::text("not a certificate"), testPki().server.privateKey()),
               TlsError);
  // A key that is not the certificate's.
  try {
    TlsContext::server(testPki().server.chain(), testPki().client.privateKey());
    ADD_FAILURE() << "a mismatched key loaded";
  } catch (const TlsError& e) {
    EXPECT_NE(std::string(e.what()).find("does not match"), std::string::npos) << e.what();
  }
  TlsContext client = TlsContext::client();
  EXPECT_THROW(client.setTrustedRoots(TlsPem::text("")), TlsError);
  EXPECT_THROW(client.addCertificateForServerName("x", testPki().server.chain(),
                                                  testPki().server.privateKey()),
               std::logic_error);
  TlsContext server = TlsContext::server(testPki().server.chain(), testPki().server.privateKey());
  EXPECT_THROW(server.insecureDisableVerification(), std::logic_error);
}

INSTANTIATE_TEST_SUITE_P(Backends, TlsStreamTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
