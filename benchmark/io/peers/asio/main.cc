// Standalone Asio peer for benchmark/io: `asio_peer <port>` serves on 127.0.0.1:<port>
// until SIGINT/SIGTERM, then exits 0. C++20 coroutines (asio::awaitable), one per
// connection, on one io_context run by WEFT_THREADS threads (default 1).
//
//   BENCH_PROTOCOL=echo  read up to 64 KiB, write all of it back, until EOF (default)
//   BENCH_PROTOCOL=http  HTTP/1.1 keep-alive hello, pipelined requests answered in order
//   READ_TIMEOUT_MS      echo: each read races a steady_timer (awaitable_operators ||);
//                        the connection is closed when the timer wins
//   BENCH_TLS_CERT=chain.pem BENCH_TLS_KEY=key.pem  (built with -DBENCH_TLS=1, linked with
//                        -lssl -lcrypto) every connection is TLS: asio::ssl::stream on the
//                        system's OpenSSL with Asio's defaults (asio::ssl::context::
//                        tls_server: TLS 1.2 and 1.3, session tickets), ALPN http/1.1 for
//                        http; the handshake in the connection's coroutine; a client's
//                        close_notify answered with one (async_shutdown)
//
// benchmark/io/run.sh builds it twice: as is (epoll) and with -DASIO_HAS_IO_URING
// -DASIO_DISABLE_EPOLL; benchmark/tls/run.sh once more with -DBENCH_TLS=1.
#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#if BENCH_TLS
#include <asio/ssl.hpp>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

namespace {

using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

constexpr std::string_view kResponse =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";

#if BENCH_TLS
using TlsStream = asio::ssl::stream<tcp::socket>;
#endif
template <class Stream>
constexpr bool kIsTls = false;
#if BENCH_TLS
template <>
constexpr bool kIsTls<TlsStream> = true;
#endif

// The end of a TLS connection the client ended (EOF: its close_notify): answered with ours.
template <class Stream>
awaitable<void> finish(Stream& s) {
  asio::error_code ec;
  co_await s.async_shutdown(asio::redirect_error(use_awaitable, ec));
}

template <class Stream>
awaitable<void> echo(Stream s, std::chrono::milliseconds timeout) {
  // Not zero-filled: an idle connection touches none of its 64 KiB.
  std::unique_ptr<char[]> buf(new char[64 * 1024]);
  asio::steady_timer timer(s.get_executor());
  asio::error_code ec;
  for (;;) {
    size_t n;
    auto read = s.async_read_some(asio::buffer(buf.get(), 64 * 1024),
                                  asio::redirect_error(use_awaitable, ec));
    if (timeout.count() > 0) {
      timer.expires_after(timeout);
      auto winner = co_await (std::move(read) || timer.async_wait(use_awaitable));
      if (winner.index() == 1) co_return;  // the timer expired first: close
      n = std::get<0>(winner);
    } else {
      n = co_await std::move(read);
    }
    if constexpr (kIsTls<Stream>) {
      if (ec == asio::error::eof) co_await finish(s);
    }
    if (ec) co_return;
    co_await asio::async_write(s, asio::buffer(buf.get(), n),
                               asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
  }
}

template <class Stream>
awaitable<void> http(Stream s) {
  std::string in, out;
  char chunk[4096];
  asio::error_code ec;
  for (;;) {
    size_t n =
        co_await s.async_read_some(asio::buffer(chunk), asio::redirect_error(use_awaitable, ec));
    if constexpr (kIsTls<Stream>) {
      if (ec == asio::error::eof) co_await finish(s);
    }
    if (ec) co_return;
    in.append(chunk, n);
    size_t start = 0, end;
    while ((end = in.find("\r\n\r\n", start)) != std::string::npos) {
      out.append(kResponse);
      start = end + 4;
    }
    in.erase(0, start);
    if (!out.empty()) {
      co_await asio::async_write(s, asio::buffer(out), asio::redirect_error(use_awaitable, ec));
      if (ec) co_return;
      out.clear();
    }
  }
}

#if BENCH_TLS
// ALPN: http/1.1 when the client offers it, else none.
int selectHttp11(SSL*, const unsigned char** out, unsigned char* outLength, const unsigned char* in,
                 unsigned int inLength, void*) {
  static const unsigned char kHttp11[] = "\x08http/1.1";
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outLength, kHttp11, sizeof kHttp11 - 1, in, inLength) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

// One TLS connection: the handshake, then the protocol.
awaitable<void> serveTls(tcp::socket s, asio::ssl::context& context, bool isHttp,
                         std::chrono::milliseconds timeout) {
  TlsStream tls(std::move(s), context);
  asio::error_code ec;
  co_await tls.async_handshake(asio::ssl::stream_base::server,
                               asio::redirect_error(use_awaitable, ec));
  if (ec) co_return;
  if (isHttp) {
    co_await http(std::move(tls));
  } else {
    co_await echo(std::move(tls), timeout);
  }
}

using TlsContext = asio::ssl::context;
#else
struct TlsContext {};  // this build has no TLS
#endif

awaitable<void> listen(tcp::acceptor& acceptor, [[maybe_unused]] TlsContext* tlsContext,
                       bool isHttp, std::chrono::milliseconds timeout) {
  for (;;) {
    asio::error_code ec;
    tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) continue;
    s.set_option(tcp::no_delay(true));
    auto ex = s.get_executor();
#if BENCH_TLS
    if (tlsContext != nullptr) {
      asio::co_spawn(ex, serveTls(std::move(s), *tlsContext, isHttp, timeout), asio::detached);
      continue;
    }
#endif
    if (isHttp) {
      asio::co_spawn(ex, http(std::move(s)), asio::detached);
    } else {
      asio::co_spawn(ex, echo(std::move(s), timeout), asio::detached);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <port>\n", argv[0]);
    return 2;
  }
  auto port = static_cast<unsigned short>(std::atoi(argv[1]));
  const char* threadsEnv = std::getenv("WEFT_THREADS");
  int threads = threadsEnv ? std::max(1, std::atoi(threadsEnv)) : 1;
  const char* protocol = std::getenv("BENCH_PROTOCOL");
  bool isHttp = protocol && std::string_view(protocol) == "http";
  const char* timeoutEnv = std::getenv("READ_TIMEOUT_MS");
  std::chrono::milliseconds timeout(timeoutEnv ? std::atol(timeoutEnv) : 0);

  const char* cert = std::getenv("BENCH_TLS_CERT");
  const char* key = std::getenv("BENCH_TLS_KEY");
  std::unique_ptr<TlsContext> tlsContext;
  if ((cert == nullptr) != (key == nullptr)) {
    std::fprintf(stderr, "%s: BENCH_TLS_CERT and BENCH_TLS_KEY go together\n", argv[0]);
    return 2;
  }
  if (cert != nullptr) {
#if BENCH_TLS
    tlsContext = std::make_unique<TlsContext>(asio::ssl::context::tls_server);
    tlsContext->use_certificate_chain_file(cert);
    tlsContext->use_private_key_file(key, asio::ssl::context::pem);
    if (isHttp) SSL_CTX_set_alpn_select_cb(tlsContext->native_handle(), selectHttp11, nullptr);
#else
    std::fprintf(stderr, "%s: BENCH_TLS_CERT is set, but this build has no TLS (-DBENCH_TLS=1)\n",
                 argv[0]);
    return 2;
#endif
  }

  // The concurrency hint 1 lets a single-threaded io_context skip its locks.
  asio::io_context io(threads == 1 ? 1 : threads);
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), port});
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](auto, int) { io.stop(); });
  asio::co_spawn(io, listen(acceptor, tlsContext.get(), isHttp, timeout), asio::detached);

  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& w : workers) w.join();
  return 0;
}
