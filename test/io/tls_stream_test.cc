// TlsStream and TlsContext over loopback TCP, once per I/O backend, with certificates made
// at run time (test/support/tls_certificates.h): handshakes and transfers both ways,
// verification (untrusted root, expiry, host name, IP address), SNI, ALPN, mutual TLS,
// session resumption, clean close against truncation, bad input (garbage, a cut or
// stalled handshake, an oversized record), cancellation (a read stays usable, an
// interrupted write makes the stream unusable), misuse, fibers, many connections on
// two threads. Every test checks that no descriptor leaked.

#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>
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
    char buffer[1024];
    while (std::size_t n = await(stream.read(std::span<char>(buffer)))) {
      await(stream.writeAll(std::string_view(buffer, n)));
      echoed += n;
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

TEST_P(TlsStreamTest, ManyConnectionsOnTwoThreads) {
  test::Watchdog watchdog(120s, "Many");
  ThreadPool pool(options(2));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  const SocketAddress address = listener.localAddress();
  const int connections = test::reducedIoScale() ? 10 : 50;
  const int messages = 20;
  TlsContext server = serverContext();
  TlsContext client = clientContext();
  auto serveOne = [&]() -> Lazy<std::size_t> {
    TlsStream s = co_await acceptOne(listener, server);
    std::size_t total = 0;
    char buffer[512];
    while (std::size_t n = co_await s.read(std::span<char>(buffer))) {
      co_await s.writeAll(std::string_view(buffer, n));
      total += n;
    }
    co_await s.shutdown();
    co_return total;
  };
  auto callOne = [&](int id) -> Lazy<bool> {
    TlsStream c = co_await connectTo(address, client, "localhost");
    bool ok = true;
    for (int m = 0; m < messages; ++m) {
      const std::string message = pattern(100 + (id * 37 + m) % 400, id * 100 + m);
      co_await c.writeAll(message);
      std::string echo(message.size(), '\0');
      co_await c.readExactly(std::span<char>(echo));
      ok = ok && echo == message;
    }
    co_await c.shutdown();
    char rest[1];
    ok = ok && co_await c.read(std::span<char>(rest)) == 0;
    co_return ok;
  };
  std::vector<Lazy<std::size_t>> servers;
  std::vector<Lazy<bool>> clients;
  for (int i = 0; i < connections; ++i) {
    servers.push_back(serveOne());
    clients.push_back(callOne(i));
  }
  auto [served, called] = syncAwait(
      collectAll(collectAllPara(std::move(servers)), collectAllPara(std::move(clients))).via(&pool));
  for (auto& r : served.value()) EXPECT_GT(r.value(), 0u);
  for (auto& r : called.value()) EXPECT_TRUE(r.value());
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
