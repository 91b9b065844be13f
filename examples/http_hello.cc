// A minimal HTTP/1.1 server answering every request with "hello", keeping connections
// alive (pipelined requests are answered in order, with one write per batch), written
// on weft::BufferedReader.
//   http_hello PORT           serves 127.0.0.1:PORT until SIGINT or SIGTERM, then stops
//                             accepting, lets connections finish (5 s at most), cancels
//                             the rest, and exits 0.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll),
// SHUTDOWN_GRACE_MS (what a stop leaves connections to finish; default 5000).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/buffered_reader.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>

#include "server.h"

using namespace std::chrono_literals;

constexpr std::string_view kResponse =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";

// A BufferedReader hands out each request's header (up to its "\r\n\r\n") as a view into
// the buffer the event loop lent for the receive that brought it: no copy unless a request
// is cut in two by the network, and no buffer held while a connection waits. Pipelined
// requests that arrived together are answered together, with one write.
weft::Lazy<void> serve(weft::TcpStream stream) {
  weft::BufferedReader reader(stream, 65536);  // a longer header is an error: we close
  try {
    std::size_t unanswered = 0;
    while (co_await reader.readUntil("\r\n\r\n")) {  // a whole request; std::nullopt: closed
      ++unanswered;
      if (reader.buffered().find("\r\n\r\n") != std::string_view::npos) continue;  // another
      if (unanswered == 1) {
        co_await stream.writeAll(kResponse);
      } else {
        std::string responses;
        responses.reserve(unanswered * kResponse.size());
        for (std::size_t i = 0; i < unanswered; ++i) responses += kResponse;
        co_await stream.writeAll(responses);
      }
      unanswered = 0;
    }
  } catch (const std::exception&) {  // reset, a header too long, or cancelled at shutdown
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // from here on they no longer end the process
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "http");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  std::printf("http_hello: 127.0.0.1:%d, %s, %zu thread(s)\n", listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  const int signal = runUntilSignal(pool, signals, [&](weft::CancellationToken stop) {
    return serveConnections(listener, serve, std::move(stop), shutdownGrace(5s));
  });
  std::printf("http_hello: stopped by signal %d\n", signal);
  return 0;
}
