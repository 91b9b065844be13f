// weft's TLS client (TlsStream::connect) against OpenSSL's own server, `openssl s_server`,
// once per I/O backend, with the certificates of test/support/tls_certificates.h written
// to a folder for the run: its status page (-www) fetched whole in TLS 1.3 and in TLS 1.2,
// ended by s_server's close_notify (a clean end, not a truncation); verification (an
// unknown CA, a wrong name); SNI (s_server switches certificates by the name the client
// sent, and refuses another name); ALPN (s_server's choice, none without overlap); mutual
// TLS (s_server -Verify: served with the client certificate, refused without); session
// resumption (a second connect with the same context resumes: sessionReused() and
// s_server's "Reused" agree), in both versions. Skipped when openssl is not installed.
// Every s_server is bounded in time (timeout --foreground 60) and ended by its test.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "test/support/io_support.h"
#include "test/support/tls_certificates.h"
#include "test/support/watchdog.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/try.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_stream.h"
#include "weft/io/tls_context.h"
#include "weft/io/tls_error.h"
#include "weft/io/tls_stream.h"

extern char** environ;

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::testPki;

// The full path of `program` in PATH, or "" when it is not there.
std::string findInPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr ? path : "/usr/bin:/bin";
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    const std::string candidate = std::string(rest.substr(0, colon)) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return {};
}

// The run's certificates as PEM files (s_server reads files): ca.pem (the root the weft
// client trusts), server.pem/.key (localhost, 127.0.0.1), other.pem/.key (other.test),
// stranger.pem/.key (localhost, from a root nobody trusts), client.pem/.key.
class PemFiles {
 public:
  PemFiles() {
    char pattern[] = "/tmp/weft-tls-interop-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = made;
    const test::TestPki& pki = testPki();
    write("ca.pem", pki.authority.certificate);
    writePair("server", pki.server);
    writePair("other", pki.otherServer);
    writePair("stranger", pki.strangerServer);
    writePair("client", pki.client);
  }
  ~PemFiles() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }

 private:
  void write(const char* name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  void writePair(const std::string& name, const test::PemPair& pair) {
    write((name + ".pem").c_str(), pair.certificate);
    write((name + ".key").c_str(), pair.key);
  }
  std::filesystem::path dir_;
};

// `openssl s_server -accept 127.0.0.1:0 OPTIONS...` for one test, bounded by timeout
// (--foreground: a SIGTERM from here reaches s_server alone). A thread collects what it
// prints (standard output and error); port() is the one it printed in "ACCEPT
// 127.0.0.1:PORT". The destructor ends it (SIGTERM) and waits for it.
class OpensslServer {
 public:
  explicit OpensslServer(const std::vector<std::string>& options) {
    std::vector<std::string> argv = {"timeout",  "--foreground", "60",         "openssl",
                                     "s_server", "-accept",      "127.0.0.1:0"};
    argv.insert(argv.end(), options.begin(), options.end());
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    const int spawned = ::posix_spawnp(&pid_, "timeout", &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (spawned != 0) {
      ::close(fds[0]);
      throw std::runtime_error("posix_spawnp(timeout openssl s_server) failed");
    }
    reader_ = std::thread([this, fd = fds[0]] { collect(fd); });
  }

  ~OpensslServer() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reader_.join();
  }

  OpensslServer(const OpensslServer&) = delete;
  OpensslServer& operator=(const OpensslServer&) = delete;

  // The port s_server listens on, once it said so (nullopt if it ended before, or after
  // a minute: a hang guard).
  std::optional<std::uint16_t> port() {
    std::unique_lock lock(mutex_);
    const std::string_view prefix = "ACCEPT 127.0.0.1:";
    std::optional<std::uint16_t> found;
    changed_.wait_for(lock, 60s, [&] {
      const std::size_t at = output_.find(prefix);
      const std::size_t end = at == std::string::npos ? at : output_.find('\n', at);
      if (end != std::string::npos) {
        found = static_cast<std::uint16_t>(std::stoi(output_.substr(at + prefix.size())));
      }
      return found.has_value() || ended_;
    });
    return found;
  }

  // Everything it printed so far.
  std::string output() {
    std::lock_guard lock(mutex_);
    return output_;
  }

 private:
  void collect(int fd) {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mutex_);
      if (n <= 0) {
        ended_ = true;
        changed_.notify_all();
        break;
      }
      output_.append(buffer, static_cast<std::size_t>(n));
      changed_.notify_all();
    }
    ::close(fd);
  }

  pid_t pid_ = -1;
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string output_;
  bool ended_ = false;
};

TlsContext trustingClient() {
  TlsContext context = TlsContext::client();
  context.setTrustedRoots(TlsPem::text(testPki().authority.certificate));
  return context;
}

// What one fetch of s_server's -www status page saw.
struct Fetch {
  std::string protocol;
  std::string alpn;
  std::string peerSubject;
  bool reused = false;
  std::string page;  // the whole answer, up to s_server's close_notify
};

// Connects to s_server as `name`, asks for its status page and reads until its
// close_notify (a truncation throws TlsError kTruncated instead).
Lazy<Fetch> fetchStatusPage(std::uint16_t port, TlsContext context, std::string name) {
  TcpStream tcp = co_await TcpStream::connect(SocketAddress::loopbackV4(port));
  tcp.setReadTimeout(60s);  // a hang guard
  TlsStream tls = co_await TlsStream::connect(std::move(tcp), std::move(context), std::move(name));
  Fetch fetch{std::string(tls.protocolVersion()),
              std::string(tls.alpnProtocol()),
              tls.peerSubject(),
              tls.sessionReused(),
              {}};
  co_await tls.writeAll("GET / HTTP/1.0\r\n\r\n");
  char buffer[4096];
  while (std::size_t n = co_await tls.read(std::span<char>(buffer))) fetch.page.append(buffer, n);
  co_return fetch;
}

class TlsInteropTest : public test::IoLeakCheckedTest {
 protected:
  void SetUp() override {
    test::IoLeakCheckedTest::SetUp();
    if (IsSkipped()) return;
    if (findInPath("openssl").empty() || findInPath("timeout").empty()) {
      GTEST_SKIP() << "openssl (or timeout) is not installed";
    }
  }

  // Starts s_server with `options`; fails the test if it does not say its port.
  std::uint16_t start(std::optional<OpensslServer>& server,
                      const std::vector<std::string>& options) {
    server.emplace(options);
    const std::optional<std::uint16_t> port = server->port();
    EXPECT_TRUE(port.has_value()) << "s_server did not start: " << server->output();
    return port.value_or(1);
  }

  Try<Fetch> fetch(ThreadPool& pool, std::uint16_t port, TlsContext context,
                   std::string name = "localhost") {
    return syncAwait([&]() -> Lazy<Try<Fetch>> {
      try {
        co_return co_await fetchStatusPage(port, std::move(context), std::move(name));
      } catch (...) {
        co_return Try<Fetch>(std::current_exception());
      }
    }()
                                  .via(&pool));
  }

  PemFiles files_;
};

// The TlsError a failed fetch holds (an empty one, and a test failure, otherwise).
TlsError errorOf(const Try<Fetch>& fetched) {
  if (!fetched.hasException()) {
    ADD_FAILURE() << "expected a TlsError, got a page";
    return TlsError(TlsError::Kind::kConfiguration, "");
  }
  try {
    std::rethrow_exception(fetched.exception());
  } catch (const TlsError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a TlsError, got: " << e.what();
  }
  return TlsError(TlsError::Kind::kConfiguration, "");
}

TEST_P(TlsInteropTest, FetchesOpensslsPageVerifiedInBothVersionsEndedByCloseNotify) {
  test::Watchdog watchdog(120s, "TlsInterop");
  for (const char* version : {"-tls1_3", "-tls1_2"}) {
    SCOPED_TRACE(version);
    std::optional<OpensslServer> server;
    const std::uint16_t port = start(server, {"-cert", files_.path("server.pem"), "-key",
                                              files_.path("server.key"), "-www", version});
    ThreadPool pool(options(1));
    Try<Fetch> fetched = fetch(pool, port, trustingClient());
    ASSERT_FALSE(fetched.hasException()) << errorOf(fetched).what() << "\n" << server->output();
    const Fetch& f = fetched.value();
    const std::string expected = std::string(version) == "-tls1_3" ? "TLSv1.3" : "TLSv1.2";
    EXPECT_EQ(f.protocol, expected);
    EXPECT_TRUE(f.peerSubject.starts_with("CN=localhost,")) << f.peerSubject;
    EXPECT_FALSE(f.reused);
    EXPECT_TRUE(f.page.starts_with("HTTP/1.0 200 ok\r\n")) << f.page.substr(0, 200);
    EXPECT_NE(f.page.find("New, " + expected + ", Cipher is"), std::string::npos) << f.page;
    EXPECT_NE(f.page.find("</BODY></HTML>"), std::string::npos) << "the page was cut";
  }
}

TEST_P(TlsInteropTest, AnUnknownCaAndAWrongNameFailVerification) {
  test::Watchdog watchdog(120s, "TlsInterop");
  std::optional<OpensslServer> stranger;
  const std::uint16_t strangerPort = start(stranger, {"-cert", files_.path("stranger.pem"), "-key",
                                                      files_.path("stranger.key"), "-www"});
  std::optional<OpensslServer> server;
  const std::uint16_t port = start(
      server, {"-cert", files_.path("server.pem"), "-key", files_.path("server.key"), "-www"});
  ThreadPool pool(options(1));

  const TlsError unknown = errorOf(fetch(pool, strangerPort, trustingClient()));
  EXPECT_EQ(unknown.kind(), TlsError::Kind::kVerification) << unknown.what();
  EXPECT_EQ(unknown.verifyMessage(), "unable to get local issuer certificate");
  EXPECT_NE(std::string(unknown.what()).find("certificate did not verify"), std::string::npos);

  const TlsError wrongName = errorOf(fetch(pool, port, trustingClient(), "other.test"));
  EXPECT_EQ(wrongName.kind(), TlsError::Kind::kVerification) << wrongName.what();
  EXPECT_EQ(wrongName.verifyMessage(), "hostname mismatch");

  // s_server goes on serving after refused handshakes.
  EXPECT_FALSE(fetch(pool, port, trustingClient()).hasException());
}

TEST_P(TlsInteropTest, TheServerSwitchesCertificatesByTheSniName) {
  test::Watchdog watchdog(120s, "TlsInterop");
  // The default certificate is other.test's; a client that sends SNI "localhost" gets
  // the localhost one (-cert2); any other name is refused (-servername_fatal).
  std::optional<OpensslServer> server;
  const std::uint16_t port =
      start(server, {"-cert", files_.path("other.pem"), "-key", files_.path("other.key"), "-cert2",
                     files_.path("server.pem"), "-key2", files_.path("server.key"), "-servername",
                     "localhost", "-servername_fatal", "-www"});
  ThreadPool pool(options(1));
  Try<Fetch> fetched = fetch(pool, port, trustingClient(), "localhost");
  ASSERT_FALSE(fetched.hasException()) << errorOf(fetched).what() << "\n" << server->output();
  EXPECT_TRUE(fetched.value().peerSubject.starts_with("CN=localhost,"))
      << fetched.value().peerSubject;

  const TlsError refused = errorOf(fetch(pool, port, trustingClient(), "other.test"));
  EXPECT_EQ(refused.kind(), TlsError::Kind::kProtocol) << refused.what();
  EXPECT_NE(std::string(refused.what()).find("unrecognized name"), std::string::npos)
      << refused.what();
}

TEST_P(TlsInteropTest, OpensslPicksTheAlpnProtocolByItsPreference) {
  test::Watchdog watchdog(120s, "TlsInterop");
  std::optional<OpensslServer> server;
  const std::uint16_t port =
      start(server, {"-cert", files_.path("server.pem"), "-key", files_.path("server.key"), "-www",
                     "-alpn", "h2,http/1.1"});
  ThreadPool pool(options(1));
  const auto fetchOffering = [&](std::vector<std::string> offered) {
    TlsContext context = trustingClient();
    context.setAlpnProtocols(std::move(offered));
    return fetch(pool, port, std::move(context));
  };
  const auto alpnWith = [&](std::vector<std::string> offered) {
    Try<Fetch> fetched = fetchOffering(std::move(offered));
    EXPECT_FALSE(fetched.hasException()) << errorOf(fetched).what();
    return fetched.hasException() ? std::string("(failed)") : fetched.value().alpn;
  };
  EXPECT_EQ(alpnWith({"http/1.1"}), "http/1.1");
  EXPECT_EQ(alpnWith({"http/1.1", "h2"}), "h2");  // the server's order decides
  EXPECT_EQ(alpnWith({}), "");                    // a client that offers none gets none
  // No overlap: s_server refuses the handshake (no_application_protocol).
  const TlsError refused = errorOf(fetchOffering({"x-weft-test"}));
  EXPECT_EQ(refused.kind(), TlsError::Kind::kProtocol) << refused.what();
  EXPECT_NE(std::string(refused.what()).find("no application protocol"), std::string::npos)
      << refused.what();
}

TEST_P(TlsInteropTest, MutualTlsWithOpensslVerify) {
  test::Watchdog watchdog(120s, "TlsInterop");
  std::optional<OpensslServer> server;
  const std::uint16_t port =
      start(server, {"-cert", files_.path("server.pem"), "-key", files_.path("server.key"), "-www",
                     "-Verify", "1", "-CAfile", files_.path("ca.pem"), "-verify_return_error"});
  ThreadPool pool(options(1));

  TlsContext withCertificate = trustingClient();
  withCertificate.setCertificate(testPki().client.chain(), testPki().client.privateKey());
  Try<Fetch> fetched = fetch(pool, port, withCertificate);
  ASSERT_FALSE(fetched.hasException()) << errorOf(fetched).what() << "\n" << server->output();
  // The page shows the certificate s_server verified.
  EXPECT_NE(fetched.value().page.find("Client certificate"), std::string::npos);
  EXPECT_NE(fetched.value().page.find("Subject: O=weft tests, CN=test client"), std::string::npos)
      << fetched.value().page;

  // Without one: in TLS 1.3 the client's handshake ends before the server checks, and the
  // server's alert comes at the first read.
  const TlsError refused = errorOf(fetch(pool, port, trustingClient()));
  EXPECT_EQ(refused.kind(), TlsError::Kind::kProtocol) << refused.what();
  EXPECT_NE(std::string(refused.what()).find("certificate required"), std::string::npos)
      << refused.what();
}

TEST_P(TlsInteropTest, ASecondConnectResumesTheSessionOpensslGave) {
  test::Watchdog watchdog(120s, "TlsInterop");
  for (const char* version : {"-tls1_3", "-tls1_2"}) {
    SCOPED_TRACE(version);
    std::optional<OpensslServer> server;
    const std::uint16_t port = start(server, {"-cert", files_.path("server.pem"), "-key",
                                              files_.path("server.key"), "-www", version});
    ThreadPool pool(options(1));
    const TlsContext context = trustingClient();  // its session cache is shared by copies
    const std::string expected = std::string(version) == "-tls1_3" ? "TLSv1.3" : "TLSv1.2";
    Try<Fetch> first = fetch(pool, port, context);
    ASSERT_FALSE(first.hasException()) << errorOf(first).what() << "\n" << server->output();
    EXPECT_FALSE(first.value().reused);
    EXPECT_NE(first.value().page.find("New, " + expected), std::string::npos);
    Try<Fetch> second = fetch(pool, port, context);
    ASSERT_FALSE(second.hasException()) << errorOf(second).what();
    EXPECT_TRUE(second.value().reused);
    EXPECT_NE(second.value().page.find("Reused, " + expected), std::string::npos)
        << second.value().page;
    // A context without resumption makes a full handshake again.
    TlsContext noResumption = trustingClient();
    noResumption.setSessionResumption(false);
    Try<Fetch> third = fetch(pool, port, noResumption);
    ASSERT_FALSE(third.hasException()) << errorOf(third).what();
    EXPECT_FALSE(third.value().reused);
    EXPECT_NE(third.value().page.find("New, " + expected), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, TlsInteropTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
