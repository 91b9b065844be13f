// A minimal HTTPS/1.1 server answering every request with "hello", keeping connections
// alive (pipelined requests answered in order, with one write per batch), on
// weft::TlsStream. Its connections live in a TaskGroup: on SIGINT or SIGTERM it stops
// accepting, gives the open connections 5 s to finish, cancels the rest and exits 0.
//   https_hello PORT CHAIN.pem KEY.pem    serves 127.0.0.1:PORT with that certificate
//                                         chain (the leaf first) and its private key
// A client that stalls in the handshake or between requests is dropped after 10 s.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll),
// SHUTDOWN_GRACE_MS (what a stop leaves connections to finish; default 5000).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/executors/lent_buffer.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>
#include <weft/io/tls_stream.h>

#include "server.h"

using namespace std::chrono_literals;

constexpr std::string_view kResponse =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";
constexpr std::size_t kMaxHeader = 65536;  // a longer request header: we close

// Counts the whole requests (each ends with an empty line) in what came, after the start
// of one that an earlier receive cut (`partial`), and leaves in `partial` the start of the
// next; `received` is given back to the loop (before the answer's write, which may wait).
// Errors: std::length_error when that start is longer than any request header we accept
// (the connection is then closed).
std::size_t takeRequests(std::string& partial, weft::LentBuffer& received) {
  if (!partial.empty()) partial.append(received.text());
  const std::string_view input = partial.empty() ? received.text() : std::string_view(partial);
  std::size_t requests = 0;
  std::size_t start = 0;
  std::size_t end;
  while ((end = input.find("\r\n\r\n", start)) != std::string_view::npos) {
    start = end + 4;
    ++requests;
  }
  if (input.size() - start > kMaxHeader) throw std::length_error("request header too long");
  std::string rest(input.substr(start));  // empty, no allocation, in the common case
  partial = std::move(rest);
  received.reset();
  return requests;
}

// Answers `requests` requests, with one write.
weft::Lazy<void> answer(weft::TlsStream& tls, std::size_t requests) {
  if (requests == 1) {
    co_await tls.writeAll(kResponse);
  } else if (requests > 1) {
    std::string responses;
    responses.reserve(requests * kResponse.size());
    for (std::size_t i = 0; i < requests; ++i) responses += kResponse;
    co_await tls.writeAll(responses);
  }
}

// One connection: the handshake, then requests until the client closes (or a read time
// limit, a bad request, a TLS error, or the shutdown's cancellation ends it). The
// requests come in buffers the event loop lends (receive()) and are parsed where they
// are, so a connection waiting for its next request holds no buffer (only a request cut
// across two receives is copied, into `partial`). An idle connection costs this frame
// and TlsStream's (its state, and OpenSSL's): docs/tls.md measures it.
weft::Lazy<void> serve(weft::TcpStream tcp, const weft::TlsContext& context) {
  try {
    tcp.setReadTimeout(10s);  // the handshake's reads too
    weft::TlsStream tls = co_await weft::TlsStream::accept(std::move(tcp), context);
    std::string partial;
    for (;;) {
      weft::LentBuffer data = co_await tls.receive();
      if (data.empty()) break;  // close_notify
      co_await answer(tls, takeRequests(partial, data));
    }
    co_await tls.shutdown();
  } catch (const std::exception&) {
    // A failed handshake, a reset, a time limit, too long a request header, the shutdown.
  }
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PORT CHAIN.pem KEY.pem\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // from here on they no longer end the process
  weft::TlsContext context =
      weft::TlsContext::server(weft::TlsPem::file(argv[2]), weft::TlsPem::file(argv[3]));
  context.setAlpnProtocols({"http/1.1"});
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "https");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  std::printf("https_hello: 127.0.0.1:%d, %s, %zu thread(s)\n", listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  const int signal = runUntilSignal(pool, signals, [&](weft::CancellationToken stop) {
    auto handler = [&context](weft::TcpStream stream) { return serve(std::move(stream), context); };
    return serveConnections(listener, handler, std::move(stop), shutdownGrace(5s));
  });
  std::printf("https_hello: stopped by signal %d\n", signal);
  return 0;
}
